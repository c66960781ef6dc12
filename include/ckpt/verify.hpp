// ckpt: checks every byte of a shard file and reports each problem with file, region, tensor,
// chunk, byte range, expected and found (spec/FORMAT.md 8: what "intact" means).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "error.hpp"
#include "io/posix_fs.hpp"
#include "shard_reader.hpp"

namespace ckpt {

struct Problem {
  Code code = Code::corrupt;  // corrupt or incomplete
  std::string region;         // superblock, padding, data, index, footer, file
  std::string tensor;         // set when region is data
  std::int64_t piece = -1;    // piece number within the tensor
  std::int64_t chunk = -1;    // chunk number within the piece
  std::uint64_t offset = 0, length = 0;  // byte range in the file
  std::string expected, found;
  std::string message;  // one line naming all of the above
};

struct VerifyReport {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint64_t chunks_total = 0, chunks_checked = 0, bytes_checked = 0;
  std::vector<Problem> problems;
  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};

struct VerifyOptions {
  unsigned threads = 1;
  // Hash from a read-only mapping instead of copying through pread (PosixFs only).
  bool use_mmap = false;
  // Called from the verifying thread with bytes done and total; keep it cheap.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

// Checks superblock, footer, index, every chunk digest and every must-be-zero byte.
// Damage is reported in the VerifyReport; the Status fails only when the file cannot be read at all.
template <class Fs = PosixFs>
[[nodiscard]] Result<VerifyReport> verify_file(Fs& fs, const std::string& path, const VerifyOptions& options = {});

}  // namespace ckpt

#include "impl/verify_inl.hpp"
