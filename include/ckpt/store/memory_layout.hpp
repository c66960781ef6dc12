// ckpt: the names inside a memory tier's root (spec/TIERS.md 2.1) and the one scanner of its
// directories. Resume (tiers/tiered.hpp), the memory-root reports (tiers/memory_root.hpp) and path
// recognition (path_kind.hpp) all read a root through scan_memory_root, so they agree on what is a rank
// directory: `rank-01` is none to any of them. It knows names and directory listings only, which is why
// it sits in the store layer, below the tiers that write these directories.
//
//   ROOT/rank-<r>/own        a store of rank r's shards
//   ROOT/rank-<r>/held-<s>   a store of the replicas of rank s's shards that rank r keeps
//   ROOT/rank-<r>/parity     a store of the parity segments rank r keeps for its parity group (spec/TIERS.md 12)
//   ROOT/rank-<r>/TIERS      rank r's tier log
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "journal.hpp"

namespace ckpt {

// "<prefix><decimal>" with 1 to 9 digits and no leading zero (spec/TIERS.md 2.1): the number in *out.
// Anything else (a sign, a space, a tenth digit, "rank-01") is not such a name.
[[nodiscard]] inline bool parse_numbered_name(std::string_view name, std::string_view prefix, std::uint32_t& out) noexcept {
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 || name.substr(0, prefix.size()) != prefix) return false;
  if (name[prefix.size()] == '0' && name.size() > prefix.size() + 1) return false;
  std::uint32_t n = 0;
  for (const char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<std::uint32_t>(c - '0');
  }
  out = n;
  return true;
}

namespace memory_layout {

inline constexpr std::string_view kRankDirPrefix = "rank-";  // ROOT/rank-<r>/: every rank that ever ran on the node
inline constexpr std::string_view kOwnStore = "own";         // rank-<r>/own: r's shards (a store of one rank)
inline constexpr std::string_view kHeldPrefix = "held-";     // rank-<r>/held-<s>: replicas of s's shards r keeps
inline constexpr std::string_view kParityStore = "parity";  // rank-<r>/parity: its parity segments (spec/TIERS.md 12)
inline constexpr std::string_view kTierLog = "TIERS";        // rank-<r>/TIERS: the tier log (spec/TIERS.md 5)
inline constexpr std::string_view kSetAsideLogInfix = ".corrupt-";  // rank-<r>/TIERS.corrupt-<n>: a damaged log set aside (5.1)

[[nodiscard]] inline std::string rank_dir_name(std::uint32_t rank) { return std::string(kRankDirPrefix) + std::to_string(rank); }
[[nodiscard]] inline std::string held_store_name(std::uint32_t shard) { return std::string(kHeldPrefix) + std::to_string(shard); }
[[nodiscard]] inline std::string set_aside_log_name(std::uint32_t n) {
  return std::string(kTierLog) + std::string(kSetAsideLogInfix) + std::to_string(n);
}
[[nodiscard]] inline std::string rank_dir(const std::string& root, std::uint32_t rank) { return join_path(root, rank_dir_name(rank)); }
[[nodiscard]] inline std::string own_store(const std::string& root, std::uint32_t rank) {
  return join_path(rank_dir(root, rank), std::string(kOwnStore));
}
[[nodiscard]] inline std::string held_store(const std::string& root, std::uint32_t rank, std::uint32_t shard) {
  return join_path(rank_dir(root, rank), held_store_name(shard));
}
[[nodiscard]] inline std::string parity_store(const std::string& root, std::uint32_t rank) {
  return join_path(rank_dir(root, rank), std::string(kParityStore));
}
// Whether `named` (a store path as some rank spelled it, e.g. in a SET_ASIDE record) names the store at
// `path`: the same path, or the same last two components rank-<r>/<store> (the root may be spelled otherwise).
[[nodiscard]] inline bool names_store(const std::string& named, const std::string& path) {
  if (named == path) return true;
  const std::string where = base_name(parent_path(path)) + "/" + base_name(path);
  const std::string tail = "/" + where;
  return named == where || (named.size() > tail.size() && named.compare(named.size() - tail.size(), tail.size(), tail) == 0);
}

[[nodiscard]] inline bool parse_rank_dir_name(std::string_view name, std::uint32_t& rank) noexcept {
  return parse_numbered_name(name, kRankDirPrefix, rank);
}
[[nodiscard]] inline bool parse_held_store_name(std::string_view name, std::uint32_t& shard) noexcept {
  return parse_numbered_name(name, kHeldPrefix, shard);
}

// A store directory of a rank directory: own/, held-<s>/ or parity/.
struct StoreEntry {
  std::string name, path;
  bool own = false;          // own/, else held-<shard>/ or parity/
  bool parity = false;       // parity/: the rank's parity segments (spec/TIERS.md 12), no shard of a step
  std::uint32_t shard = 0;   // whose shards it holds: the rank for own/, s for held-<s>/
  bool has_journal = false;  // it holds JOURNAL: a store (else not one yet, or one that lost its journal)
};

// One directory named rank-<r>, as listed. Symlinks are not followed (FsRef::stat).
struct RankDirEntry {
  std::uint32_t rank = 0;
  std::string path;
  bool has_log = false;              // TIERS is a regular file
  std::vector<StoreEntry> stores;    // its own/, held-<s>/ and parity/ directories, in name order
  std::vector<std::string> unknown;  // every other entry but TIERS, in name order
  Status error;                      // it could not be listed: stores and unknown are empty
  // What spec/TIERS.md 10 calls a rank directory: it holds its tier log or a store (own/ or held-<s>/
  // with a JOURNAL). A directory that is merely named rank-<r> is not one.
  [[nodiscard]] bool recognized() const noexcept {
    return has_log || std::any_of(stores.begin(), stores.end(), [](const StoreEntry& s) { return s.has_journal; });
  }
};

// The directory `path`, which must be a directory named rank-<r> (else Code::invalid_argument, or the
// stat's error). A listing that fails is kept in RankDirEntry::error.
[[nodiscard]] inline Result<RankDirEntry> scan_rank_dir(FsRef fs, const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  RankDirEntry out;
  out.path = trimmed;
  if (!parse_rank_dir_name(base_name(trimmed), out.rank))
    return make_error(Code::invalid_argument, trimmed + ": not named rank-<r> (decimal, no leading zero; spec/TIERS.md 2.1)");
  CKPT_ASSIGN_OR_RETURN(const PathInfo info, fs.stat(trimmed));
  if (!info.is_dir) return make_error(Code::invalid_argument, trimmed + ": not a directory");
  auto log = fs.stat(join_path(trimmed, std::string(kTierLog)));
  out.has_log = log.ok() && log->kind == EntryKind::file;
  auto entries = fs.list_dir(trimmed);
  if (!entries.ok()) {
    out.error = entries.status();
    return out;
  }
  std::vector<std::string> names = std::move(*entries);
  std::sort(names.begin(), names.end());
  for (auto& name : names) {
    if (name == kTierLog) continue;
    StoreEntry s;
    s.own = name == kOwnStore;
    s.parity = name == kParityStore;
    s.shard = out.rank;
    s.path = join_path(trimmed, name);
    const bool store_dir = (s.own || s.parity || parse_held_store_name(name, s.shard)) && [&] {
      auto st = fs.stat(s.path);
      return st.ok() && st->is_dir;
    }();
    if (!store_dir) {
      out.unknown.push_back(std::move(name));
      continue;
    }
    s.has_journal = fs.stat(join_path(s.path, std::string(journal::kJournalName))).ok();
    s.name = std::move(name);
    out.stores.push_back(std::move(s));
  }
  return out;
}

// Every directory of `root` named rank-<r>, scanned, in rank order. Other entries (`rank-01`, `rank-`,
// files named rank-<r>, anything else) are no rank directories and are skipped. Fails only when root
// cannot be listed.
[[nodiscard]] inline Result<std::vector<RankDirEntry>> scan_memory_root(FsRef fs, const std::string& root) {
  CKPT_ASSIGN_OR_RETURN(const std::vector<std::string> names, fs.list_dir(root));
  std::vector<RankDirEntry> out;
  for (const auto& name : names) {
    std::uint32_t rank = 0;
    if (!parse_rank_dir_name(name, rank)) continue;
    auto dir = scan_rank_dir(fs, join_path(root, name));
    if (dir.ok()) out.push_back(std::move(*dir));
  }
  std::sort(out.begin(), out.end(), [](const RankDirEntry& a, const RankDirEntry& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace memory_layout
}  // namespace ckpt
