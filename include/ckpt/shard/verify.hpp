// ckpt: checks every byte of a shard file and reports each problem with file, region, tensor,
// chunk, byte range, expected and found (spec/FORMAT.md 8: what "intact" means).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../core/problem.hpp"
#include "../io/posix_fs.hpp"
#include "shard_reader.hpp"

namespace ckpt {

struct VerifyReport {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint64_t chunks_total = 0, chunks_checked = 0, bytes_checked = 0;
  std::vector<Problem> problems;
  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};

struct VerifyOptions {
  unsigned threads = 1;
  // Hash from a read-only mapping instead of copying through pread (PosixFs only). A file truncated
  // while mapped is reported as a Code::io problem "file changed during verification", naming the
  // offset, never a crash (SIGBUS is caught: io/sigbus_guard.hpp).
  bool use_mmap = false;
  // The file as the caller already maps it, from offset 0 (ShardReader::mapped): hashed there instead of mapped
  // again or read. Ignored unless it covers the data region.
  std::string_view mapped;
  // Chunks (indexes into the index's chunks) the caller's reads of the same file have already found good
  // (ShardReader::chunk_verified: a load that verified as it copied, spec/TIERS.md 7.2): not hashed again.
  // Everything else (superblock, footer, index, padding, every other chunk) is checked as always.
  std::function<bool(std::uint64_t chunk)> already_verified;
  // Called from the verifying thread with bytes done and total; keep it cheap.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

// Checks superblock, footer, index, every chunk digest and every must-be-zero byte.
// Damage is reported in the VerifyReport; the Status fails only when the file cannot be read at all.
[[nodiscard]] Result<VerifyReport> verify_file(FsRef fs, const std::string& path, const VerifyOptions& options = {});

// --- Readers of a live store (spec/JOURNAL.md 6.5, 10) ---------------------------------------------
// A writer with retention appends RETIRE and then removes the step's files while a reader may still
// hold an older snapshot of the journal in which that step is committed. So a committed step whose
// files a reader cannot find (not_found) is damage only if it is still committed once the journal is
// read again; otherwise it was retired meanwhile and is reported as such, not as damage.
enum class StepRecheck : std::uint8_t {
  committed,   // still committed after the re-read: the missing file is real damage
  retired,     // RETIRE'd since the snapshot: its files were removed on purpose
  not_listed,  // the journal no longer names the transaction at all (rewritten meanwhile)
};
[[nodiscard]] constexpr EnumBounds<StepRecheck> enum_bounds(StepRecheck) noexcept {
  return {StepRecheck::committed, StepRecheck::not_listed};
}
[[nodiscard]] const char* step_recheck_name(StepRecheck r) noexcept;

namespace detail {
// Padding must be zero (spec/FORMAT.md 4.2): superblock tail, gaps between pieces, gap before the
// index; each nonzero run reported through problem. Shared by verify_file and the device verifier
// (cuda/device_pipeline.cuh).
void add_padding_problems(FsRef fs, FileHandle file, const std::string& path, const Index& index, std::uint64_t index_offset,
                          const std::function<void(Problem)>& problem);
}  // namespace detail

// Re-reads the journal of a read-only store (store.refresh()) and says what became of transaction
// `txn` of step `step` (defined with the store, impl/store_inl.hpp). A failed refresh is returned as
// is: the caller keeps its verdict.
class Store;
[[nodiscard]] Result<StepRecheck> recheck_step(Store& store, std::uint64_t step, std::uint64_t txn);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/verify_inl.hpp"
#endif
