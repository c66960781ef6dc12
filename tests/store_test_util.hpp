// The store settings the tests share: 4 KiB chunks (so a few KiB of tensor spans several), a small
// alignment and a small write buffer, so every path of the writer runs on small files; and the small
// two-step store the report tests judge.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/store.hpp>

namespace ckpt_test {

[[nodiscard]] inline ckpt::StoreOptions small_store_options(bool create = true, std::uint32_t alignment_log2 = 6) {
  ckpt::StoreOptions o;
  o.create_if_missing = create;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = alignment_log2;
  o.buffer_size = 4096;
  return o;
}

// A step of one tensor "w": kReportElems floats, each the step number.
inline constexpr std::size_t kReportElems = 4096;
[[nodiscard]] inline ckpt::Status save_filled_step(ckpt::Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  std::vector<float> w(kReportElems, static_cast<float>(step));
  CKPT_TRY(tx->add_tensor("w", ckpt::DType::F32, {kReportElems}, w.data(), w.size() * 4));
  return tx->commit().status();
}
// A store at path holding steps 1 and 2.
inline void make_two_step_store(ckpt::PosixFs& fs, const std::string& path) {
  auto store = ckpt::Store::open(fs, path, ckpt::Access::read_write, small_store_options());
  REQUIRE(store.ok());
  REQUIRE(save_filled_step(**store, 1).ok());
  REQUIRE(save_filled_step(**store, 2).ok());
}
// Every rank's save said ok (the first failure is printed).
inline void require_all_ok(const std::vector<ckpt::Status>& statuses) {
  for (const auto& s : statuses) {
    INFO(s.to_string());
    REQUIRE(s.ok());
  }
}
// Step `step` of store reads back tensor "w" as `expected`, byte for byte.
inline void check_w_reads_back(ckpt::Store& store, std::uint64_t step, const std::vector<unsigned char>& expected) {
  auto reader = store.open_step(step);
  REQUIRE(reader.ok());
  std::vector<unsigned char> got(expected.size());
  REQUIRE(reader->read_tensor("w", got.data(), got.size()).ok());
  CHECK(got == expected);
}
// The directory of a step in a directory store.
[[nodiscard]] inline std::string step_dir_of(const std::string& store, std::uint64_t step) {
  for (const auto& e : std::filesystem::directory_iterator(store))
    if (e.path().filename().string().rfind("step-" + std::to_string(step) + "-", 0) == 0) return e.path().string();
  FAIL("no directory of step " << step);
  return "";
}

}  // namespace ckpt_test
