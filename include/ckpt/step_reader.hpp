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

#include "coverage.hpp"
#include "error.hpp"
#include "io/fs.hpp"
#include "io/posix_fs.hpp"
#include "journal.hpp"
#include "manifest.hpp"
#include "shard_reader.hpp"
#include "verify.hpp"

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
  [[nodiscard]] static Result<std::unique_ptr<StepReader>> open(FsRef fs, const std::string& store_path, const StepInfo& info,
                                                                const Uuid& store_uuid);
  StepReader(const StepReader&) = delete;
  StepReader& operator=(const StepReader&) = delete;

  [[nodiscard]] const StepInfo& info() const noexcept { return info_; }
  [[nodiscard]] const Manifest& manifest() const noexcept { return manifest_; }
  [[nodiscard]] const TrainingState& state() const noexcept { return manifest_.state; }
  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  [[nodiscard]] ShardReader& shard(std::size_t i) { return *shards_[i]; }
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
  std::vector<std::unique_ptr<ShardReader>> shards_;
};

// --- A step directory on its own (no journal to pin it) ----------------------------------------------

// Its MANIFEST decoded (its own digest, spec 7.4), and each shard opened and compared with the
// manifest entry (size, UUID, index digest, spec 7.5).
struct StepDirectory {
  std::string path;
  Manifest manifest;
  std::uint64_t manifest_size = 0, manifest_digest = 0;
  std::vector<std::string> shard_paths;  // in manifest order
  std::vector<Status> shard_problems;    // a shard that is missing or does not match its manifest entry
  [[nodiscard]] bool shards_match() const noexcept { return shard_problems.empty(); }
};

// Reads and decodes dir/MANIFEST; Code::corrupt, incomplete or not_found when it cannot be trusted.
[[nodiscard]] Result<StepDirectory> read_step_directory(FsRef fs, const std::string& dir);

// --- Verifying a step ------------------------------------------------------------------------------

// Checks every byte of one shard file: verify_file on the CPU (cpu_file_verifier), or a GPU back end.
// A failed Result means the file could not be checked at all (as verify_file's).
using FileVerifier = std::function<Result<VerifyReport>(const std::string& path)>;

[[nodiscard]] inline FileVerifier cpu_file_verifier(FsRef fs, VerifyOptions options = {}) {
  return [&fs, options](const std::string& path) { return verify_file(fs, path, options); };
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

// ---------------------------------------------------------------------------------------------------

namespace detail {

// What a step's files are, read once: the manifest (pinned by a COMMIT record when `pin` is set) and
// every shard opened (head validated, spec/FORMAT.md 7.2) and compared with its manifest entry.
struct StepParts {
  struct Shard {
    std::string path;
    std::uint32_t rank = 0;
    std::unique_ptr<ShardReader> reader;  // null when the head did not open
    Status head;                              // why it did not open (not_found: the file is missing)
    Status pin;                               // the file opened but is not the one the manifest names
  };
  Status manifest_status;  // ok, or why the manifest cannot be trusted
  std::optional<Manifest> manifest;
  std::uint64_t manifest_size = 0, manifest_digest = 0;
  std::vector<Shard> shards;  // in manifest order (BEGIN's when the manifest cannot be trusted)
  Status coverage;            // checked only when every shard opened and matched
  [[nodiscard]] Status first_problem() const {
    if (!manifest_status.ok()) return manifest_status;
    for (const auto& s : shards) {
      if (!s.head.ok()) return s.head;
      if (!s.pin.ok()) return s.pin;
    }
    return coverage;
  }
};

// The shard's size, UUID and index digest against its manifest entry; the index digest covers every
// chunk digest, so this pins every byte cheaply (spec 7.5).
[[nodiscard]] inline Status check_shard_pin(const ShardReader& r, const ManifestShard& s) {
  if (r.file_size() != s.file_size)
    return make_error(r.file_size() < s.file_size ? Code::incomplete : Code::corrupt,
                      r.path() + ": " + std::to_string(r.file_size()) + " bytes, the manifest says " + std::to_string(s.file_size));
  if (r.footer().uuid != s.uuid)
    return make_error(Code::corrupt, r.path() + ": uuid " + uuid_string(r.footer().uuid) + ", the manifest says " + uuid_string(s.uuid));
  if (r.footer().index_digest != s.index_digest)
    return make_error(Code::corrupt, r.path() + ": index digest " + hex64(r.footer().index_digest) + ", the manifest says " +
                                         hex64(s.index_digest));
  return Status();
}

// Reads dir's MANIFEST and opens its shards. `pin` (with store_uuid) is the COMMIT's view of the step;
// null for a bare step directory. first_only stops at the first problem (what a reader needs);
// otherwise every shard is looked at (what a verifier needs). `where` prefixes a shard's head error.
[[nodiscard]] inline StepParts open_step_parts(FsRef fs, const std::string& dir, const std::string& where, const StepInfo* pin,
                                            const Uuid* store_uuid, bool first_only) {
  StepParts parts;
  const std::string manifest_path = join_path(dir, std::string(journal::kManifestName));
  auto read_manifest = [&]() -> Status {
    // The size comes from a COMMIT record, or from disk: bound it before allocating (spec 9).
    if (pin != nullptr && pin->manifest_size > manifest::kMaxSize)
      return make_error(Code::corrupt, where + ": COMMIT names a manifest of " + std::to_string(pin->manifest_size) +
                                           " bytes, over the 256 MiB limit");
    auto file = fs.open(manifest_path, OpenMode::read);
    if (!file.ok()) return pin != nullptr ? file.status().with_context(where + ": cannot open its MANIFEST") : file.status();
    ScopedFile scoped(fs, *file);
    auto size = fs.file_size(scoped.get());
    if (!size.ok()) return size.status().with_context(manifest_path);
    if (pin != nullptr && *size != pin->manifest_size)
      return make_error(*size < pin->manifest_size ? Code::incomplete : Code::corrupt,
                        manifest_path + ": " + std::to_string(*size) + " bytes, its COMMIT record says " +
                            std::to_string(pin->manifest_size));
    if (pin == nullptr && *size > manifest::kMaxSize)
      return make_error(Code::corrupt, manifest_path + ": " + std::to_string(*size) + " bytes, over the 256 MiB limit");
    std::vector<unsigned char> bytes(static_cast<std::size_t>(*size));
    CKPT_TRY(read_exact(fs, scoped.get(), manifest_path, bytes.data(), bytes.size(), 0));
    parts.manifest_size = *size;
    parts.manifest_digest = manifest_digest(bytes.data(), bytes.size());
    if (pin != nullptr && parts.manifest_digest != pin->manifest_digest)
      return make_error(Code::corrupt, manifest_path + ": digest expected " + hex64(pin->manifest_digest) +
                                           " (from its COMMIT record), found " + hex64(parts.manifest_digest));
    CKPT_ASSIGN_OR_RETURN(Manifest m, decode_manifest(bytes.data(), bytes.size(), manifest_path));
    if (pin != nullptr) {
      if (m.txn != pin->txn || m.step != pin->step || m.world_size != pin->world_size)
        return make_error(Code::corrupt, manifest_path + ": says txn " + std::to_string(m.txn) + " step " + std::to_string(m.step) +
                                             " world " + std::to_string(m.world_size) + ", the journal says txn " +
                                             std::to_string(pin->txn) + " step " + std::to_string(pin->step) + " world " +
                                             std::to_string(pin->world_size));
      if (m.store_uuid != *store_uuid)
        return make_error(Code::corrupt, manifest_path + ": store uuid " + uuid_string(m.store_uuid) + " is not this store's " +
                                             uuid_string(*store_uuid));
      bool same_files = m.shards.size() == pin->files.size();
      for (std::size_t i = 0; same_files && i < m.shards.size(); ++i)
        same_files = m.shards[i].rank == pin->files[i].rank && m.shards[i].name == pin->files[i].name;
      if (!same_files) return make_error(Code::corrupt, manifest_path + ": its shard list differs from the files BEGIN named");
    }
    parts.manifest = std::move(m);
    return Status();
  };
  parts.manifest_status = read_manifest();
  if (!parts.manifest_status.ok()) {
    parts.manifest.reset();
    if (first_only || pin == nullptr) return parts;
    for (const auto& f : pin->files) {  // still look at the files BEGIN named, to localise the damage
      typename StepParts::Shard s;
      s.path = join_path(dir, f.name);
      s.rank = f.rank;
      auto reader = ShardReader::open(fs, s.path);
      if (reader.ok()) s.reader = std::move(reader).value();
      else s.head = reader.status().with_context(where);
      parts.shards.push_back(std::move(s));
    }
    return parts;
  }
  bool all_match = true;
  for (const auto& entry : parts.manifest->shards) {
    typename StepParts::Shard s;
    s.path = join_path(dir, entry.name);
    s.rank = entry.rank;
    auto reader = ShardReader::open(fs, s.path);
    if (reader.ok()) {
      s.reader = std::move(reader).value();
      s.pin = check_shard_pin(*s.reader, entry);
    } else {
      s.head = pin != nullptr ? reader.status().with_context(where) : reader.status();
    }
    all_match = all_match && s.head.ok() && s.pin.ok();
    parts.shards.push_back(std::move(s));
    if (first_only && !all_match) return parts;
  }
  // Every tensor is covered exactly once by the pieces of all shards (spec/SHARDING.md 4): a step that is
  // not would make reads depend on which shard answers first.
  if (all_match) {
    std::vector<GlobalPiece> pieces;
    for (const auto& s : parts.shards) append_index_pieces(s.reader->index(), s.rank, pieces);
    parts.coverage = coverage_status(check_coverage(pieces), Code::corrupt, where);
  }
  return parts;
}

[[nodiscard]] inline Problem step_problem(const Status& s, const char* region, std::string file) {
  Problem p;
  p.code = s.code();
  p.region = region;
  p.file = std::move(file);
  p.message = s.message();
  return p;
}

// The verification of parts already opened: step-level problems once, then each shard that is there
// through verify_one.
[[nodiscard]] inline StepVerifyReport verify_parts(StepParts& parts, const std::string& dir, const FileVerifier& verify_one) {
  StepVerifyReport report;
  report.dir = dir;
  const std::string manifest_path = join_path(dir, std::string(journal::kManifestName));
  auto missing = [](const std::string& path, const std::string& what) {
    return step_problem(make_error(Code::incomplete, path + ": missing (" + what + ")"), step_region::kMissing, path);
  };
  if (!parts.manifest_status.ok()) {
    if (parts.manifest_status.code() == Code::not_found)
      report.problems.push_back(step_problem(make_error(Code::incomplete, parts.manifest_status.message()), step_region::kMissing,
                                             manifest_path));
    else
      report.problems.push_back(step_problem(parts.manifest_status, step_region::kManifest, manifest_path));
  }
  for (auto& s : parts.shards) {
    if (s.head.code() == Code::not_found) {
      report.problems.push_back(missing(s.path, parts.manifest ? "the step's manifest names it" : "its BEGIN record names it"));
      continue;
    }
    s.reader.reset();  // the verifier opens the file itself
    auto verified = verify_one(s.path);
    if (!verified.ok()) {
      const Status& e = verified.status();
      if (e.code() == Code::not_found)  // removed since it was opened
        report.problems.push_back(missing(s.path, "the step's manifest names it"));
      else
        report.problems.push_back(step_problem(e.message().find(s.path) == std::string::npos ? e.with_context(s.path) : e,
                                               step_region::kFile, s.path));
    } else {
      VerifyReport v = std::move(verified).value();
      for (auto& p : v.problems)
        if (p.file.empty()) p.file = s.path;
      report.chunks_checked += v.chunks_checked;
      report.bytes_checked += v.bytes_checked;
      report.shards.push_back(std::move(v));
    }
    if (!s.pin.ok()) report.problems.push_back(step_problem(s.pin, step_region::kPin, s.path));
  }
  if (!parts.coverage.ok()) report.problems.push_back(step_problem(parts.coverage, step_region::kCoverage, dir));
  return report;
}

}  // namespace detail

// --- Definitions -----------------------------------------------------------------------------------

inline Result<std::unique_ptr<StepReader>> StepReader::open(FsRef fs, const std::string& store_path, const StepInfo& info,
                                                             const Uuid& store_uuid) {
  const std::string where = store_path + ": step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ")";
  auto parts = detail::open_step_parts(fs, join_path(store_path, info.dir), where, &info, &store_uuid, true);
  CKPT_TRY(parts.first_problem());
  std::unique_ptr<StepReader> reader(new StepReader(info));
  for (auto& s : parts.shards) reader->shards_.push_back(std::move(s.reader));
  reader->manifest_ = std::move(*parts.manifest);
  return Result<std::unique_ptr<StepReader>>(std::move(reader));  // explicit: nvcc (EDG) has no C++20 implicit move
}

inline std::vector<std::string> StepReader::tensor_names() const {
  std::set<std::string> names;
  for (const auto& s : shards_)
    for (const auto& t : s->index().tensors) names.insert(t.name);
  return std::vector<std::string>(names.begin(), names.end());
}

inline const TensorRecord* StepReader::find_tensor(std::string_view name) const {
  for (const auto& s : shards_)
    if (const TensorRecord* t = s->index().find_tensor(name)) return t;
  return nullptr;
}

inline Status StepReader::read_tensor(std::string_view name, void* dst, std::size_t dst_size, ReadCheck check) {
  const TensorRecord* t = find_tensor(name);
  if (t == nullptr)
    return make_error(Code::not_found, "step " + std::to_string(info_.step) + ": no tensor '" + std::string(name) + "'");
  const Shape shape = t->shape;
  return read_slice(name, Shape(shape.size(), 0), shape, dst, dst_size, check);
}

inline Status StepReader::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                  std::size_t dst_size, ReadCheck check) {
  const TensorRecord* first = find_tensor(name);
  if (first == nullptr)
    return make_error(Code::not_found, "step " + std::to_string(info_.step) + ": no tensor '" + std::string(name) + "'");
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t elements, check_slice(*first, offsets, shape, dst_size));
  std::uint64_t copied = 0;
  for (const auto& s : shards_) {
    const TensorRecord* t = s->index().find_tensor(name);
    if (t == nullptr) continue;
    if (t->dtype != first->dtype || t->shape != first->shape)
      return make_error(Code::corrupt, s->path() + ": tensor '" + t->name + "' is " + shape_string(t->shape) +
                                           " here but " + shape_string(first->shape) + " in another shard of the step");
    // Same dtype and shape as the one checked above: the bounds hold for this shard's record too.
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t n, s->copy_overlap(*t, offsets, shape, dst, check));
    copied += n;
  }
  if (copied != elements)
    return make_error(Code::corrupt, "step " + std::to_string(info_.step) + ": tensor '" + first->name + "': its shards hold " +
                                         std::to_string(copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

inline Result<StepDirectory> read_step_directory(FsRef fs, const std::string& dir) {
  auto parts = detail::open_step_parts(fs, dir, dir, nullptr, nullptr, false);
  if (!parts.manifest_status.ok()) return parts.manifest_status;
  StepDirectory out;
  out.path = dir;
  out.manifest = std::move(*parts.manifest);
  out.manifest_size = parts.manifest_size;
  out.manifest_digest = parts.manifest_digest;
  for (const auto& s : parts.shards) {
    out.shard_paths.push_back(s.path);
    if (!s.head.ok()) out.shard_problems.push_back(s.head);
    else if (!s.pin.ok()) out.shard_problems.push_back(s.pin);
  }
  return out;
}

inline bool StepVerifyReport::files_missing() const noexcept {
  for (const auto& p : problems)
    if (p.region == step_region::kMissing) return true;
  return false;
}

inline bool StepVerifyReport::ok() const noexcept {
  if (!problems.empty()) return false;
  for (const auto& s : shards)
    if (!s.ok()) return false;
  return true;
}

inline StepVerifyReport verify_step(FsRef fs, const std::string& store_path, const StepInfo& info, const Uuid& store_uuid,
                             const FileVerifier& verify_one) {
  const std::string where = store_path + ": step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ")";
  const std::string dir = join_path(store_path, info.dir);
  auto parts = detail::open_step_parts(fs, dir, where, &info, &store_uuid, false);
  StepVerifyReport report = detail::verify_parts(parts, dir, verify_one);
  report.step = info;
  return report;
}

inline StepVerifyReport verify_step(StepReader& reader, const FileVerifier& verify_one) {
  detail::StepParts parts;  // what the reader proved: the manifest and every pin hold
  std::string dir;
  for (std::size_t i = 0; i < reader.shard_count(); ++i) {
    typename detail::StepParts::Shard s;
    s.path = reader.shard(i).path();
    dir = parent_path(s.path);
    parts.shards.push_back(std::move(s));
  }
  StepVerifyReport report = detail::verify_parts(parts, dir, verify_one);
  report.step = reader.info();
  return report;
}

inline StepVerifyReport verify_step_directory(FsRef fs, const std::string& dir, const FileVerifier& verify_one) {
  auto parts = detail::open_step_parts(fs, dir, dir, nullptr, nullptr, false);
  StepVerifyReport report = detail::verify_parts(parts, dir, verify_one);
  report.step.dir = base_name(dir);
  if (parts.manifest) {
    report.step.step = parts.manifest->step;
    report.step.txn = parts.manifest->txn;
    report.step.world_size = parts.manifest->world_size;
  }
  return report;
}

}  // namespace ckpt
