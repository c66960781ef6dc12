// Helpers of the tests that run against a real S3 server (tests/test_s3_*.cpp, cmake/tests-object.cmake):
// tools/s3-test-server.py exports AWS_ENDPOINT_URL, the credentials and CKPT_S3_TEST_URL. Catch2 macros:
// call these on the test's own thread only (Catch2 is not thread-safe).
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>

#include "test_util.hpp"

namespace ckpt_test {

// The URL of a fresh prefix "<what><random>-<n>" of the test bucket; fails the test without a server.
[[nodiscard]] inline std::string fresh_s3_url(const std::string& what) {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("CKPT_S3_TEST_URL");
  INFO("CKPT_S3_TEST_URL is not set: run under tools/s3-test-server.py (ctest -L object does)");
  REQUIRE(base != nullptr);
  std::random_device random;
  return std::string(base) + what + std::to_string(random()) + "-" + std::to_string(counter++);
}

// Retries that cost milliseconds, not seconds.
[[nodiscard]] inline ckpt::object::S3Options fast_retries() {
  ckpt::object::S3Options options;
  options.base_delay = std::chrono::milliseconds(5);
  options.max_delay = std::chrono::milliseconds(200);
  return options;
}

[[nodiscard]] inline std::unique_ptr<ckpt::object::ObjectClient> s3_client_for(const std::string& url,
                                                                               const ckpt::object::S3Options& options = fast_retries()) {
  auto client = ckpt::object::open_s3_url(url, options);
  INFO(client.status().to_string());
  REQUIRE(client.ok());
  return std::move(client).value();
}

// The key of a shard object of the store (the last one listed).
[[nodiscard]] inline std::string some_shard_key(ckpt::object::ObjectClient& client) {
  auto listed = client.list("step-");
  REQUIRE(listed.ok());
  std::string shard;
  for (const auto& o : *listed)
    if (o.key.find(".ckpt") != std::string::npos) shard = o.key;
  REQUIRE(!shard.empty());
  return shard;
}

// Damage on the server: the object read whole, one byte flipped, written back over it.
inline void flip_object_byte(ckpt::object::ObjectClient& client, const std::string& key, std::size_t offset, unsigned char mask) {
  auto info = client.head(key);
  REQUIRE(info.ok());
  std::string bytes(static_cast<std::size_t>(info->size), '\0');
  REQUIRE(client.get(key, 0, bytes.data(), bytes.size()).ok());
  REQUIRE(offset < bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ mask);
  REQUIRE(client.remove(key).ok());
  REQUIRE(client.put(key, bytes.data(), bytes.size(), ckpt::object::Condition::none).ok());
}

// A store of 12 MiB steps on a real server: three parts each (S3's smallest part is 5 MiB), three in flight.
[[nodiscard]] inline ckpt::StoreOptions s3_store_options() {
  ckpt::StoreOptions o;
  o.create_if_missing = true;
  o.io.part_size = ckpt::object::limits::kMinPartSize;
  o.io.parallel_parts = 3;
  return o;
}

[[nodiscard]] inline std::vector<unsigned char> s3_tensor_bytes(std::uint64_t step) {
  return random_bytes((std::size_t{12} << 20) + step * 4096, step);
}

// A save as a training loop does it: a write error is kept and commit() abandons the step.
[[nodiscard]] inline ckpt::Status s3_save_step(ckpt::Store& store, std::uint64_t step) {
  const auto bytes = s3_tensor_bytes(step);
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const ckpt::Status added = tx->add_tensor("w", ckpt::DType::U8, ckpt::Shape{bytes.size()}, bytes.data(), bytes.size());
  const ckpt::Status committed = tx->commit().status();
  return added.ok() ? committed : added;
}

}  // namespace ckpt_test
