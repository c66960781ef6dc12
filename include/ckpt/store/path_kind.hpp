// ckpt: what a path names (a shard file, a step directory, a store, a store that lost its journal,
// a memory-tier root or one of its rank directories) and where a step directory stands in its store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "journal.hpp"
#include "memory_layout.hpp"
#include "step_reader.hpp"
#include "store.hpp"

namespace ckpt {

enum class PathKind : std::uint8_t {
  file,        // anything that is not a directory: a shard file (*.ckpt) or not
  store,       // a directory holding JOURNAL
  step_dir,    // a directory holding MANIFEST
  broken_store,  // a directory without JOURNAL that holds step-<s>-<t> directories (a lost journal)
  other_dir,   // a directory that is none of these
  memory_root,  // a memory tier's root (spec/TIERS.md 2): holds rank-<r> directories
  rank_dir,     // one rank's directory of a memory root: rank-<r> holding TIERS, own/ or held-<s>/
};

[[nodiscard]] inline const char* path_kind_name(PathKind k) noexcept {
  switch (k) {
    case PathKind::file: return "file";
    case PathKind::store: return "store";
    case PathKind::step_dir: return "step directory";
    case PathKind::broken_store: return "store without a journal";
    case PathKind::other_dir: return "directory";
    case PathKind::memory_root: return "memory root";
    case PathKind::rank_dir: return "rank directory";
  }
  return "unknown";
}

// A memory tier's rank directory: named rank-<r> and holding its tier log, or a store own/ or
// held-<s>/ (a directory with a JOURNAL), as memory_layout's scanner reads it. Symlinks are not followed.
[[nodiscard]] inline bool is_rank_directory(FsRef fs, const std::string& path) {
  auto dir = memory_layout::scan_rank_dir(fs, path);
  return dir.ok() && dir->recognized();
}

// What a path names; not_found when it does not exist.
[[nodiscard]] inline Result<PathKind> classify_path(FsRef fs, const std::string& path) {
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
  if (is_rank_directory(fs, path)) return PathKind::rank_dir;
  auto ranks = memory_layout::scan_memory_root(fs, path);
  if (ranks.ok())
    for (const auto& r : *ranks)
      if (r.recognized()) return PathKind::memory_root;
  return PathKind::other_dir;
}

// The error for a directory that is not a store or a step: an integrity problem when it looks like a
// store that lost its journal, a usage error otherwise.
[[nodiscard]] inline Status not_a_store_error(const std::string& path, PathKind kind) {
  if (kind == PathKind::broken_store)
    return make_error(Code::corrupt, path + ": holds step directories but no JOURNAL; ckpt-repair can rebuild the journal "
                                            "from the step directories that verify");
  if (kind == PathKind::memory_root || kind == PathKind::rank_dir)
    return make_error(Code::invalid_argument, path + ": a " + path_kind_name(kind) + " of the memory tier (spec/TIERS.md 2), not a "
                                                     "store: ckpt-inspect, ckpt-verify and ckpt-repair take it whole, or name one of "
                                                     "its stores (rank-<r>/own, rank-<r>/held-<s>)");
  return make_error(Code::invalid_argument, path + ": a directory that is neither a ckpt store (no JOURNAL) nor a step "
                                                   "directory (no MANIFEST)");
}

// If dir is step-<s>-<t> inside a store, that store's view of the step: its StepInfo when committed,
// or why it is not (open, aborted, retired, unknown to the journal). Empty store path when not inside one.
struct StepInStore {
  std::string store;             // the parent directory when it holds a JOURNAL
  std::optional<StepInfo> info;  // set when the journal commits exactly this directory
  std::string state;             // "committed", "open", "aborted", "retired", "not in the journal"
};

[[nodiscard]] inline StepInStore locate_step_directory(FsRef fs, const std::string& dir) {
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
  auto store = Store::open(fs, parent, Access::read_only, o);
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

}  // namespace ckpt
