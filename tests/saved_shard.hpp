// The crash tests' verdict on a shard file after a simulated crash (tests/test_sim_fs.cpp,
// tests/test_fault_fs.cpp): a file is either absent or whole, never something in between.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/verify.hpp>

namespace ckpt_test {

using TensorBytes = std::pair<std::string, const std::vector<unsigned char>*>;

// What a reader finds at path: "absent", "intact" (it verifies and each `expected` tensor reads back
// with those bytes), or why it is not.
template <class Fs>
[[nodiscard]] std::string check_saved(Fs& fs, const std::string& path, const std::vector<TensorBytes>& expected) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status().code() == ckpt::Code::not_found ? "absent" : info.status().to_string();
  auto report = ckpt::verify_file(fs, path);
  if (!report.ok()) return "verify: " + report.status().to_string();
  if (!report->ok()) return "verify: " + report->problems.front().message;
  auto reader = ckpt::ShardReader::open(fs, path);
  if (!reader.ok()) return "open: " + reader.status().to_string();
  for (const auto& [name, bytes] : expected) {
    std::vector<unsigned char> back(bytes->size());
    if (!reader->read_tensor(name, back.data(), back.size()).ok()) return "read failed: " + name;
    if (back != *bytes) return "wrong bytes: " + name;
  }
  return "intact";
}

}  // namespace ckpt_test
