// ckpt: a step's shard files read as one checkpoint, a step directory read on its own, and a step
// verified whole (spec/JOURNAL.md 7.4, 7.5). One function, detail::open_step_parts, reads a step's
// MANIFEST and opens and pins its shards; StepReader::open stops at the first problem it finds,
// verify_step collects every problem once, as a structured Problem, and hashes every shard through a
// pluggable per-file verifier (verify_file on the CPU, or the GPU's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../dist/coverage.hpp"
#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "../io/posix_fs.hpp"
#include "journal.hpp"
#include "manifest.hpp"
#include "../shard/shard_reader.hpp"
#include "../shard/verify.hpp"

namespace ckpt {

// A committed, not retired step.
struct StepInfo {
  std::uint64_t step = 0, txn = 0;
  std::uint32_t world_size = 1;
  std::string dir;             // name of its directory inside the store
  std::vector<TxnFile> files;  // shard files, from BEGIN
  std::uint64_t manifest_size = 0, manifest_digest = 0;
  std::uint64_t commit_offset = 0;
};

// A committed step opened for reading: the manifest was checked against its COMMIT digest and every
// shard's size, UUID and index digest against the manifest. Chunks are verified as reads touch them.
class StepReader {
 public:
  [[nodiscard]] static Result<StepReader> open(FsRef fs, const std::string& store_path, const StepInfo& info,
                                               const Uuid& store_uuid);
  StepReader(const StepReader&) = delete;
  StepReader& operator=(const StepReader&) = delete;
  StepReader(StepReader&&) = default;  // a value: its shard readers move with it
  StepReader& operator=(StepReader&&) = default;

  [[nodiscard]] const StepInfo& info() const noexcept { return info_; }
  [[nodiscard]] const Manifest& manifest() const noexcept { return manifest_; }
  [[nodiscard]] const TrainingState& state() const noexcept { return manifest_.state; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  [[nodiscard]] ShardReader& shard(std::size_t i) { return shards_[i]; }
  [[nodiscard]] const ShardReader& shard(std::size_t i) const { return shards_[i]; }
  // Every tensor name of the step, sorted, each once.
  [[nodiscard]] std::vector<std::string> tensor_names() const;
  // The tensor's record in the first shard that holds a piece of it; nullptr when none does.
  [[nodiscard]] const TensorRecord* find_tensor(std::string_view name) const;
  // Reads a whole tensor, gathering its pieces from every shard file.
  [[nodiscard]] Status read_tensor(std::string_view name, void* dst, std::size_t dst_size, ReadCheck check = ReadCheck::touched);
  [[nodiscard]] Status read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                  std::size_t dst_size, ReadCheck check = ReadCheck::touched);

 private:
  StepReader(StepInfo info) : info_(std::move(info)) {}
  StepInfo info_;
  Manifest manifest_;
  std::vector<ShardReader> shards_;
};

// --- A step directory on its own (no journal to pin it) ----------------------------------------------

// Its MANIFEST decoded (its own digest, spec 7.4), and each shard opened and compared with the
// manifest entry (size, UUID, index digest, spec 7.5).
struct StepDirectory {
  std::string path;
  Manifest manifest;
  std::uint64_t manifest_size = 0, manifest_digest = 0;
  std::vector<std::string> shard_paths;  // in manifest order
  // A shard that is missing (region "missing"), does not open ("file") or does not match its manifest
  // entry ("shard"); Problem::file is the shard.
  std::vector<Problem> shard_problems;
  [[nodiscard]] bool shards_match() const noexcept { return shard_problems.empty(); }
};

// Reads and decodes dir/MANIFEST; Code::corrupt, incomplete or not_found when it cannot be trusted.
[[nodiscard]] Result<StepDirectory> read_step_directory(FsRef fs, const std::string& dir);

// --- Verifying a step ------------------------------------------------------------------------------

// Checks every byte of one shard file: verify_file on the CPU (cpu_file_verifier), or a GPU back end.
// A failed Result means the file could not be checked at all (as verify_file's).
using FileVerifier = std::function<Result<VerifyReport>(const std::string& path)>;

[[nodiscard]] inline FileVerifier cpu_file_verifier(FsRef fs, VerifyOptions options = {}) {
  return [fs, options](const std::string& path) { return verify_file(fs, path, options); };
}

// Full verification of a step. Every problem is reported once: step-level ones (manifest, a missing
// shard, a shard that is not the one the manifest pins, coverage, a file the verifier could not read)
// in `problems`, each file's own damage in its VerifyReport. A shard whose head is damaged is left to
// its VerifyReport, never also reported as a step problem.
struct StepVerifyReport {
  StepInfo step;    // a committed step of a store; for a bare step directory only dir is meaningful
  std::string dir;  // the step directory's path
  std::vector<Problem> problems;
  std::vector<VerifyReport> shards;  // one per shard file the verifier read
  std::uint64_t chunks_checked = 0, bytes_checked = 0;
  // Some shard file the step names is not there (not_found): damage, or retired meanwhile (recheck_step).
  [[nodiscard]] bool files_missing() const noexcept;
  [[nodiscard]] bool ok() const noexcept;
};

// Problem::region of the step-level problems.
namespace step_region {
inline constexpr const char* kManifest = "manifest";  // unreadable, or not what its COMMIT pins
inline constexpr const char* kMissing = "missing";    // a shard file (or MANIFEST) that is not there
inline constexpr const char* kPin = "shard";          // a shard that opens but is not the one the manifest names
inline constexpr const char* kCoverage = "coverage";  // the shards do not tile every tensor exactly once
inline constexpr const char* kFile = "file";          // the verifier could not read a shard
}  // namespace step_region

// A committed step of the store at store_path (what Store::verify_step runs).
[[nodiscard]] StepVerifyReport verify_step(FsRef fs, const std::string& store_path, const StepInfo& info, const Uuid& store_uuid,
                                           const FileVerifier& verify_one);
// A step already opened by StepReader::open (its manifest and pins checked): every shard through
// verify_one, nothing read twice at the step level.
[[nodiscard]] StepVerifyReport verify_step(StepReader& reader, const FileVerifier& verify_one);
// A step directory on its own, pinned by its MANIFEST alone.
[[nodiscard]] StepVerifyReport verify_step_directory(FsRef fs, const std::string& dir, const FileVerifier& verify_one);

namespace detail {
// A problem of a step (its region, and the file, when one is to blame) from the Status that found it.
[[nodiscard]] inline Problem step_problem(const Status& s, const char* region, std::string file) {
  Problem p;
  p.code = s.code();
  p.region = region;
  p.file = std::move(file);
  p.message = s.message();
  return p;
}
}  // namespace detail

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/step_reader_inl.hpp"
#endif
