// ckpt tools: what ckpt-inspect, ckpt-verify and ckpt-repair share about stores (spec/JOURNAL.md):
// telling a shard file, a store and a step directory apart, choosing steps (all, --step N, --latest),
// loading a step pinned by its COMMIT record or a bare step directory by its MANIFEST, and the JSON
// forms of journal scans, steps and training state.
#pragma once

#include <chrono>
#include <thread>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/journal.hpp>
#include <ckpt/manifest.hpp>
#include <ckpt/shard_reader.hpp>
#include <ckpt/store.hpp>

#include "report_json.hpp"

namespace ckpt::tools {

using nlohmann::json;

enum class PathKind : std::uint8_t {
  file,        // anything that is not a directory: a shard file (*.ckpt) or not
  store,       // a directory holding JOURNAL
  step_dir,    // a directory holding MANIFEST
  broken_store,  // a directory without JOURNAL that holds step-<s>-<t> directories (a lost journal)
  other_dir,   // a directory that is neither
};

[[nodiscard]] inline const char* path_kind_name(PathKind k) noexcept {
  switch (k) {
    case PathKind::file: return "file";
    case PathKind::store: return "store";
    case PathKind::step_dir: return "step directory";
    case PathKind::broken_store: return "store without a journal";
    case PathKind::other_dir: return "directory";
  }
  return "unknown";
}

// What a path names; not_found when it does not exist.
[[nodiscard]] inline Result<PathKind> classify_path(PosixFs& fs, const std::string& path) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();
  if (!info->is_dir) return PathKind::file;
  auto journal = fs.stat(join_path(path, std::string(journal::kJournalName)));
  if (journal.ok()) return PathKind::store;
  auto manifest = fs.stat(join_path(path, std::string(journal::kManifestName)));
  if (manifest.ok()) return PathKind::step_dir;
  auto entries = fs.list_dir(path);
  if (!entries.ok()) return entries.status();
  for (const auto& e : *entries) {
    std::uint64_t step = 0, txn = 0;
    if (parse_step_dir_name(e, step, txn)) return PathKind::broken_store;
  }
  return PathKind::other_dir;
}

// The error for a directory that is not a store or a step: an integrity problem when it looks like a
// store that lost its journal, a usage error otherwise.
[[nodiscard]] inline Status not_a_store_error(const std::string& path, PathKind kind) {
  if (kind == PathKind::broken_store)
    return make_error(Code::corrupt, path + ": holds step directories but no JOURNAL; ckpt-repair can rebuild the journal "
                                            "from the step directories that verify");
  return make_error(Code::invalid_argument, path + ": a directory that is neither a ckpt store (no JOURNAL) nor a step "
                                                   "directory (no MANIFEST)");
}

// Which steps of a store a command acts on.
struct StepSelection {
  std::optional<std::uint64_t> step;  // --step N
  bool latest = false;                // --latest
  [[nodiscard]] bool all() const noexcept { return !step && !latest; }
};

template <class Fs>
[[nodiscard]] Result<std::vector<StepInfo>> select_steps(const Store<Fs>& store, const StepSelection& sel) {
  std::vector<StepInfo> out;
  if (sel.step) {
    CKPT_ASSIGN_OR_RETURN(StepInfo info, store.find(*sel.step));
    out.push_back(std::move(info));
  } else if (sel.latest) {
    auto latest = store.latest();
    if (!latest) return make_error(Code::not_found, store.path() + ": no committed step");
    out.push_back(*latest);
  } else {
    out = store.steps();
  }
  return out;
}

// Opens a store for reading: never writes, takes no lock, and shows what the applied records prove
// even when the journal has mid-log damage (which the caller reports).
// A reader beside a live writer can catch a group mid-append: bytes past the old end that are there
// but not yet all copied look like a damaged tail. So a damaged tail is re-read a few times, 50 ms
// apart, and reported only once the journal stopped changing (spec/JOURNAL.md 6.9).
[[nodiscard]] inline Result<std::unique_ptr<Store<PosixFs>>> open_store_for_reading(PosixFs& fs, const std::string& path) {
  StoreOptions o;
  o.allow_corrupt_journal = true;
  auto store = Store<PosixFs>::open(fs, path, Access::read_only, o);
  for (int attempt = 0; attempt < 4 && store.ok() && (*store)->recovery_report().tail_damaged(); ++attempt) {
    const JournalScan& before = (*store)->recovery_report().journal;
    const std::uint64_t size = before.file_size, end = before.end;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto again = Store<PosixFs>::open(fs, path, Access::read_only, o);
    if (!again.ok()) return again;
    const JournalScan& now = (*again)->recovery_report().journal;
    const bool changed = now.file_size != size || now.end != end;
    store = std::move(again);
    if (!changed) break;  // the same bytes twice: damage, not an append in progress
  }
  return store;
}

// A step directory on its own (no journal to pin it): its MANIFEST decoded (its own digest, spec 7.4),
// and each shard opened and compared with the manifest entry (size, UUID, index digest, spec 7.5).
struct StepDirectory {
  std::string path;
  Manifest manifest;
  std::uint64_t manifest_size = 0, manifest_digest = 0;
  std::vector<std::string> shard_paths;   // in manifest order
  std::vector<Status> shard_problems;     // a shard that is missing or does not match its manifest entry
  [[nodiscard]] bool shards_match() const noexcept { return shard_problems.empty(); }
};

// Reads and decodes dir/MANIFEST; Code::corrupt, incomplete or not_found when it cannot be trusted.
template <class Fs>
[[nodiscard]] Result<StepDirectory> read_step_directory(Fs& fs, const std::string& dir) {
  StepDirectory out;
  out.path = dir;
  const std::string manifest_path = join_path(dir, std::string(journal::kManifestName));
  auto file = fs.open(manifest_path, OpenMode::read);
  if (!file.ok()) return file.status();
  ScopedFile<Fs> scoped(fs, *file);
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t size, fs.file_size(scoped.get()));
  // The size is on disk, not pinned by anything yet: bound it before allocating (spec 9).
  if (size > manifest::kMaxSize)
    return make_error(Code::corrupt, manifest_path + ": " + std::to_string(size) + " bytes, over the 256 MiB limit");
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  CKPT_TRY(read_exact(fs, scoped.get(), manifest_path, bytes.data(), bytes.size(), 0));
  CKPT_ASSIGN_OR_RETURN(out.manifest, decode_manifest(bytes.data(), bytes.size(), manifest_path));
  out.manifest_size = size;
  out.manifest_digest = manifest_digest(bytes.data(), bytes.size());
  for (const auto& s : out.manifest.shards) {
    const std::string shard_path = join_path(dir, s.name);
    out.shard_paths.push_back(shard_path);
    auto reader = ShardReader<Fs>::open(fs, shard_path);
    if (!reader.ok()) {
      out.shard_problems.push_back(reader.status());
      continue;
    }
    const auto& r = **reader;
    if (r.file_size() != s.file_size)
      out.shard_problems.push_back(make_error(r.file_size() < s.file_size ? Code::incomplete : Code::corrupt,
                                              shard_path + ": " + std::to_string(r.file_size()) + " bytes, the manifest says " +
                                                  std::to_string(s.file_size)));
    else if (r.footer().uuid != s.uuid)
      out.shard_problems.push_back(make_error(Code::corrupt, shard_path + ": uuid " + uuid_string(r.footer().uuid) +
                                                                 ", the manifest says " + uuid_string(s.uuid)));
    else if (r.footer().index_digest != s.index_digest)
      out.shard_problems.push_back(make_error(Code::corrupt, shard_path + ": index digest " + hex64(r.footer().index_digest) +
                                                                 ", the manifest says " + hex64(s.index_digest)));
  }
  return out;
}

// If dir is step-<s>-<t> inside a store, that store's view of the step: its StepInfo when committed,
// or why it is not (open, aborted, retired, unknown to the journal). Empty store path when not inside one.
struct StepInStore {
  std::string store;             // the parent directory when it holds a JOURNAL
  std::optional<StepInfo> info;  // set when the journal commits exactly this directory
  std::string state;             // "committed", "open", "aborted", "retired", "not in the journal"
};

template <class Fs>
[[nodiscard]] StepInStore locate_step_directory(Fs& fs, const std::string& dir) {
  StepInStore out;
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  std::uint64_t step = 0, txn = 0;
  if (!parse_step_dir_name(base_name(trimmed), step, txn)) return out;
  const std::string parent = parent_path(trimmed);
  if (!fs.stat(join_path(parent, std::string(journal::kJournalName))).ok()) return out;
  out.store = parent;
  StoreOptions o;
  o.allow_corrupt_journal = true;
  auto store = Store<Fs>::open(fs, parent, Access::read_only, o);
  if (!store.ok()) {
    out.state = "unreadable journal (" + store.status().message() + ")";
    return out;
  }
  out.state = "not in the journal";
  for (const auto& t : (*store)->transactions())
    if (t.txn == txn && t.step == step) out.state = txn_state_name(t.state);
  for (const auto& s : (*store)->steps())
    if (s.txn == txn && s.step == step) out.info = s;
  return out;
}

// --- JSON ------------------------------------------------------------------------------------------

// A typed value as {"type", "value"}: the same spelling shard metadata gets (report_json.hpp).
[[nodiscard]] inline json value_json(const Value& v) {
  return {{"type", value_type_name(v.type())}, {"value", metadata_value_json(v)}};
}

[[nodiscard]] inline json training_state_json(const TrainingState& s) {
  json values = json::object();
  for (const auto& [key, value] : s.values) values[key] = value_json(value);
  return {{"step", s.step},
          {"rng_bytes", s.rng.size()},
          {"rng", hex_bytes(s.rng, 64)},
          {"data", {{"epoch", s.data.epoch}, {"offset", s.data.offset}, {"state_bytes", s.data.state.size()}}},
          {"optimizer_tensors", s.optimizer_tensors},
          {"values", std::move(values)}};
}

[[nodiscard]] inline json step_info_json(const StepInfo& s) {
  json files = json::array();
  for (const auto& f : s.files) files.push_back({{"rank", f.rank}, {"name", f.name}});
  return {{"step", s.step},           {"txn", s.txn},
          {"dir", s.dir},             {"world_size", s.world_size},
          {"files", std::move(files)}, {"manifest_size", s.manifest_size},
          {"manifest_digest", hex64(s.manifest_digest)}, {"commit_offset", s.commit_offset}};
}

[[nodiscard]] inline json manifest_shards_json(const Manifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"rank", s.rank},
                      {"name", s.name},
                      {"file_size", s.file_size},
                      {"uuid", uuid_string(s.uuid)},
                      {"index_digest", hex64(s.index_digest)},
                      {"data_bytes", s.data_bytes},
                      {"tensor_count", s.tensor_count},
                      {"chunk_count", s.chunk_count}});
  return shards;
}

[[nodiscard]] inline json damage_json(const JournalDamage& d) {
  json unapplied = json::array();
  for (const auto& r : d.unapplied) unapplied.push_back(r.describe());
  return {{"offset", d.offset}, {"length", d.length}, {"bad_offset", d.bad_offset}, {"reason", d.reason},
          {"clean_tear", d.clean_tear}, {"unapplied", std::move(unapplied)}};
}

[[nodiscard]] inline json journal_json(const JournalScan& j) {
  json doc = {{"path", j.path},          {"file_size", j.file_size}, {"end", j.end},
              {"has_header", j.has_header}, {"groups", j.groups},      {"records", j.records.size()}};
  doc["store_uuid"] = j.has_header ? json(uuid_string(j.header.store_uuid)) : json(nullptr);
  doc["torn_tail"] = j.torn_tail ? damage_json(*j.torn_tail) : json(nullptr);
  json corruption = json::array();
  for (const auto& d : j.corruption) corruption.push_back(damage_json(d));
  doc["corruption"] = std::move(corruption);
  return doc;
}

[[nodiscard]] inline json transactions_json(const std::vector<TxnInfo>& txns) {
  json out = json::array();
  for (const auto& t : txns)
    out.push_back({{"txn", t.txn}, {"step", t.step}, {"state", txn_state_name(t.state)}, {"dir", t.dir()}});
  return out;
}

// One line about the journal: size, groups, and what is wrong with it.
[[nodiscard]] inline std::string journal_line(const JournalScan& j) {
  std::string s = std::to_string(j.file_size) + " bytes, " + std::to_string(j.groups) + " complete groups, " +
                  std::to_string(j.records.size()) + " records";
  if (j.torn_tail && j.torn_tail->clean_tear)
    s += "; torn tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (" + std::to_string(j.torn_tail->length) + " bytes, left by a crash during an append)";
  else if (j.torn_tail)
    s += "; DAMAGED tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (not a torn append: " + j.torn_tail->reason + ")";
  if (!j.has_header) s += "; no valid HEADER at offset 0";
  for (const auto& d : j.corruption)
    s += "; CORRUPT bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + "): " + d.reason;
  return s;
}

}  // namespace ckpt::tools
