// ckpt: definitions for step_reader.hpp.
#pragma once

#include "../step_reader.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

namespace ckpt {

namespace detail {

// What a step's files are, read once: the manifest (pinned by a COMMIT record when `pin` is set) and
// every shard opened (head validated, spec/FORMAT.md 7.2) and compared with its manifest entry.
struct StepParts {
  struct Shard {
    std::string path;
    std::uint32_t rank = 0;
    std::optional<ShardReader> reader;  // empty when the head did not open
    Status head;                              // why it did not open (not_found: the file is missing)
    Status pin;                               // the file opened but is not the one the manifest names
  };
  Status manifest_status;  // ok, or why the manifest cannot be trusted
  bool has_manifest = false;  // manifest holds the decoded MANIFEST (a flag, not std::optional: parse time)
  Manifest manifest;
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
[[nodiscard]] CKPT_INLINE Status check_shard_pin(const ShardReader& r, const ManifestShard& s) {
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
[[nodiscard]] CKPT_INLINE StepParts open_step_parts(FsRef fs, const std::string& dir, const std::string& where, const StepInfo* pin,
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
    parts.has_manifest = true;
    return Status();
  };
  parts.manifest_status = read_manifest();
  if (!parts.manifest_status.ok()) {
    parts.has_manifest = false;
    parts.manifest = Manifest();
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
  for (const auto& entry : parts.manifest.shards) {
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
    auto problems = check_coverage(pieces);
    if (parts.has_manifest && parts.manifest.state.values.count(std::string(kPartialStepKey))) problems = without_gaps(std::move(problems));
    parts.coverage = coverage_status(problems, Code::corrupt, where);
  }
  return parts;
}


// The verification of parts already opened: step-level problems once, then each shard that is there
// through verify_one.
[[nodiscard]] CKPT_INLINE StepVerifyReport verify_parts(StepParts& parts, const std::string& dir, const FileVerifier& verify_one) {
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
      report.problems.push_back(missing(s.path, parts.has_manifest ? "the step's manifest names it" : "its BEGIN record names it"));
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

CKPT_INLINE Result<StepReader> StepReader::open(FsRef fs, const std::string& store_path, const StepInfo& info,
                                                const Uuid& store_uuid) {
  const std::string where = store_path + ": step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ")";
  auto parts = detail::open_step_parts(fs, join_path(store_path, info.dir), where, &info, &store_uuid, true);
  CKPT_TRY(parts.first_problem());
  StepReader reader(info);
  for (auto& s : parts.shards) reader.shards_.push_back(std::move(*s.reader));
  reader.manifest_ = std::move(parts.manifest);
  return Result<StepReader>(std::move(reader));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE std::vector<std::string> StepReader::tensor_names() const {
  std::set<std::string> names;
  for (const auto& s : shards_)
    for (const auto& t : s.index().tensors) names.insert(t.name);
  return std::vector<std::string>(names.begin(), names.end());
}

CKPT_INLINE const TensorRecord* StepReader::find_tensor(std::string_view name) const {
  for (const auto& s : shards_)
    if (const TensorRecord* t = s.index().find_tensor(name)) return t;
  return nullptr;
}

CKPT_INLINE Status StepReader::read_tensor(std::string_view name, void* dst, std::size_t dst_size, ReadCheck check) {
  const TensorRecord* t = find_tensor(name);
  if (t == nullptr)
    return make_error(Code::not_found, "step " + std::to_string(info_.step) + ": no tensor '" + std::string(name) + "'");
  const Shape shape = t->shape;
  return read_slice(name, Shape(shape.size(), 0), shape, dst, dst_size, check);
}

CKPT_INLINE Status StepReader::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                  std::size_t dst_size, ReadCheck check) {
  const TensorRecord* first = find_tensor(name);
  if (first == nullptr)
    return make_error(Code::not_found, "step " + std::to_string(info_.step) + ": no tensor '" + std::string(name) + "'");
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t elements, check_slice(*first, offsets, shape, dst_size));
  std::uint64_t copied = 0;
  for (auto& s : shards_) {
    const TensorRecord* t = s.index().find_tensor(name);
    if (t == nullptr) continue;
    if (t->dtype != first->dtype || t->shape != first->shape)
      return make_error(Code::corrupt, s.path() + ": tensor '" + t->name + "' is " + shape_string(t->shape) +
                                           " here but " + shape_string(first->shape) + " in another shard of the step");
    // Same dtype and shape as the one checked above: the bounds hold for this shard's record too.
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t n, s.copy_overlap(*t, offsets, shape, dst, check));
    copied += n;
  }
  if (copied != elements)
    return make_error(Code::corrupt, "step " + std::to_string(info_.step) + ": tensor '" + first->name + "': its shards hold " +
                                         std::to_string(copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

CKPT_INLINE Result<StepDirectory> read_step_directory(FsRef fs, const std::string& dir) {
  auto parts = detail::open_step_parts(fs, dir, dir, nullptr, nullptr, false);
  if (!parts.manifest_status.ok()) return parts.manifest_status;
  StepDirectory out;
  out.path = dir;
  out.manifest = std::move(parts.manifest);
  out.manifest_size = parts.manifest_size;
  out.manifest_digest = parts.manifest_digest;
  for (const auto& s : parts.shards) {
    out.shard_paths.push_back(s.path);
    if (!s.head.ok())
      out.shard_problems.push_back(
          detail::step_problem(s.head, s.head.code() == Code::not_found ? step_region::kMissing : step_region::kFile, s.path));
    else if (!s.pin.ok())
      out.shard_problems.push_back(detail::step_problem(s.pin, step_region::kPin, s.path));
  }
  return out;
}

CKPT_INLINE bool StepVerifyReport::files_missing() const noexcept {
  for (const auto& p : problems)
    if (p.region == step_region::kMissing) return true;
  return false;
}

CKPT_INLINE bool StepVerifyReport::ok() const noexcept {
  if (!problems.empty()) return false;
  for (const auto& s : shards)
    if (!s.ok()) return false;
  return true;
}

CKPT_INLINE StepVerifyReport verify_step(FsRef fs, const std::string& store_path, const StepInfo& info, const Uuid& store_uuid,
                             const FileVerifier& verify_one) {
  const std::string where = store_path + ": step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ")";
  const std::string dir = join_path(store_path, info.dir);
  auto parts = detail::open_step_parts(fs, dir, where, &info, &store_uuid, false);
  StepVerifyReport report = detail::verify_parts(parts, dir, verify_one);
  report.step = info;
  return report;
}

CKPT_INLINE StepVerifyReport verify_step(StepReader& reader, const FileVerifier& verify_one) {
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

CKPT_INLINE StepVerifyReport verify_step_directory(FsRef fs, const std::string& dir, const FileVerifier& verify_one) {
  auto parts = detail::open_step_parts(fs, dir, dir, nullptr, nullptr, false);
  StepVerifyReport report = detail::verify_parts(parts, dir, verify_one);
  report.step.dir = base_name(dir);
  if (parts.has_manifest) {
    report.step.step = parts.manifest.step;
    report.step.txn = parts.manifest.txn;
    report.step.world_size = parts.manifest.world_size;
  }
  return report;
}

}  // namespace ckpt
