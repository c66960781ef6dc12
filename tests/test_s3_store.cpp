// The object-store protocol (spec/OBJECT.md 4) on real servers: cmake/tests-object.cmake runs this
// program under moto and under SeaweedFS through tools/s3-test-server.py (which exports AWS_ENDPOINT_URL,
// the credentials and CKPT_S3_TEST_URL). The protocol's crash oracle runs over MemoryObjects
// (test_object_store); this proves the same saves, races, ranks, retention and verdicts against servers.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include "s3_test_util.hpp"
#include "store_test_util.hpp"
#include "test_util.hpp"
#include "thread_ranks.hpp"

using namespace ckpt;
using namespace ckpt::object;

namespace {

[[nodiscard]] std::string fresh_url() { return ckpt_test::fresh_s3_url("store"); }

[[nodiscard]] std::unique_ptr<ObjectClient> client_for(const std::string& url) { return ckpt_test::s3_client_for(url); }

[[nodiscard]] StoreOptions options() { return ckpt_test::s3_store_options(); }
[[nodiscard]] std::vector<unsigned char> tensor_bytes(std::uint64_t step) { return ckpt_test::s3_tensor_bytes(step); }
[[nodiscard]] Status save_step(Store& store, std::uint64_t step) { return ckpt_test::s3_save_step(store, step); }

void check_step(Store& store, std::uint64_t step) {
  auto reader = store.open_step(step);
  INFO(reader.status().to_string());
  REQUIRE(reader.ok());
  const auto expected = tensor_bytes(step);
  std::vector<unsigned char> got(expected.size());
  REQUIRE(reader->read_tensor("w", got.data(), got.size()).ok());
  REQUIRE(got == expected);
}

[[nodiscard]] report::VerifyPathsReport verify_url(const std::string& url) {
  PosixFs posix;
  report::VerifyPathsOptions o;
  o.open_objects = [](const std::string& u) { return open_s3_url(u); };
  return report::verify_paths(posix, {url}, o);
}

}  // namespace

TEST_CASE("a store on a real server saves in parts, reads back and verifies", "[s3_store]") {
  const std::string url = fresh_url();
  {
    auto client = client_for(url);
    auto store = Store::open(object_log(*client), Access::read_write, options());
    INFO(store.status().to_string());
    REQUIRE(store.ok());  // the probe passed: the server refuses a second create-only PUT
    REQUIRE(save_step(**store, 1).ok());
    REQUIRE(save_step(**store, 2).ok());
    auto uploads = client->list_uploads("");
    REQUIRE(uploads.ok());
    CHECK(uploads->empty());
  }
  auto client = client_for(url);
  auto store = Store::open(object_log(*client), Access::read_only);
  REQUIRE(store.ok());
  REQUIRE((*store)->steps().size() == 2);
  check_step(**store, 1);
  check_step(**store, 2);
  auto r = verify_url(url);
  CHECK(report::exit_code(r) == report::kOk);
  CHECK(r.steps.size() == 2);
}

TEST_CASE("a flipped byte in a shard on the server is found and exits 1", "[s3_store]") {
  const std::string url = fresh_url();
  auto client = client_for(url);
  {
    auto store = Store::open(object_log(*client), Access::read_write, options());
    REQUIRE(store.ok());
    REQUIRE(save_step(**store, 1).ok());
  }
  // Inside the data region, in the second part.
  ckpt_test::flip_object_byte(*client, ckpt_test::some_shard_key(*client), (std::size_t{6} << 20) + 5, 0x20);
  auto r = verify_url(url);
  CHECK(report::exit_code(r) == report::kIntegrity);
  CHECK(report::verify_json(r).dump().find("chunk") != std::string::npos);
}

TEST_CASE("two writers racing for one step on a real server: exactly one commits", "[s3_store]") {
  const std::string url = fresh_url();
  { auto c = client_for(url); REQUIRE(Store::open(object_log(*c), Access::read_write, options()).ok()); }
  auto ca = client_for(url), cb = client_for(url);
  auto a = Store::open(object_log(*ca), Access::read_write, options());
  auto b = Store::open(object_log(*cb), Access::read_write, options());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto ta = (*a)->begin(7);
  auto tb = (*b)->begin(7);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  const auto bytes = tensor_bytes(7);
  REQUIRE((*ta)->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()).ok());
  REQUIRE((*tb)->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()).ok());
  Result<CommitResult> ra = make_error(Code::io, "not run"), rb = make_error(Code::io, "not run");
  std::thread other([&] { rb = (*tb)->commit(); });
  ra = (*ta)->commit();
  other.join();
  CHECK(ra.ok() != rb.ok());
  CHECK((ra.ok() ? rb : ra).status().code() == Code::conflict);
  auto reader_client = client_for(url);
  auto reader = Store::open(object_log(*reader_client), Access::read_only);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->steps().size() == 1);
  check_step(**reader, 7);
}

TEST_CASE("four ranks with their own connections save one step on a real server", "[s3_store]") {
  const std::string url = fresh_url();
  { auto c = client_for(url); REQUIRE(Store::open(object_log(*c), Access::read_write, options()).ok()); }
  const auto full = ckpt_test::random_bytes(4 * (std::size_t{6} << 20), 21);
  const std::size_t part = full.size() / 4;
  auto statuses = ckpt_test::run_ranks(4, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    // No Catch2 macro on a rank's thread (Catch2 is not thread-safe): every failure is the Status returned.
    CKPT_ASSIGN_OR_RETURN(auto client, open_s3_url(url, ckpt_test::fast_retries()));
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(object_log(*client), Access::read_write, options(), comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(1));
    CKPT_TRY(tx->begin_piece("w", DType::U8, Shape{full.size()}, Shape{rank * part}, Shape{part}));
    CKPT_TRY(tx->write(full.data() + rank * part, part));
    CKPT_TRY(tx->end_piece());
    return tx->commit().status();
  });
  ckpt_test::require_all_ok(statuses);
  auto client = client_for(url);
  auto store = Store::open(object_log(*client), Access::read_only);
  REQUIRE(store.ok());
  ckpt_test::check_w_reads_back(**store, 1, full);
}

TEST_CASE("retention on a real server retires, then deletes, and keeps the newest", "[s3_store]") {
  const std::string url = fresh_url();
  auto client = client_for(url);
  StoreOptions o = options();
  o.retention.keep_last = 1;
  auto store = Store::open(object_log(*client), Access::read_write, o);
  REQUIRE(store.ok());
  for (std::uint64_t step : {1, 2, 3}) REQUIRE(save_step(**store, step).ok());
  CHECK((*store)->steps().size() == 1);
  auto listed = client->list("step-");
  REQUIRE(listed.ok());
  for (const auto& obj : *listed) CHECK(obj.key.rfind(step_dir_name(3, (*store)->latest()->txn), 0) == 0);
  auto logs = client->list("log/");
  REQUIRE(logs.ok());
  CHECK(logs->size() == 5);  // three commits, two retires
  check_step(**store, 3);
}

TEST_CASE("a transaction dropped mid-upload leaves no object and no upload", "[s3_store]") {
  const std::string url = fresh_url();
  auto client = client_for(url);
  auto store = Store::open(object_log(*client), Access::read_write, options());
  REQUIRE(store.ok());
  {
    auto tx = (*store)->begin(1);
    REQUIRE(tx.ok());
    const auto bytes = tensor_bytes(1);
    REQUIRE((*tx)->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()).ok());
  }  // destroyed without commit: the upload is aborted, never completed
  auto uploads = client->list_uploads("");
  REQUIRE(uploads.ok());
  CHECK(uploads->empty());
  auto listed = client->list("step-");
  REQUIRE(listed.ok());
  CHECK(listed->empty());
}
