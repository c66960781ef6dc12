// ckpt: definitions for tiers/memory_root.hpp (spec/TIERS.md 2, 5).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "../../store/memory_layout.hpp"
#include "../../store/path_kind.hpp"
#include "../../store/step_reader.hpp"
#include "../../store/store.hpp"
#include "../../shard/verify.hpp"
#include "../memory_root.hpp"
#include "../persistent_tier.hpp"
#include "../tier_log.hpp"
#include "../tiered.hpp"

namespace ckpt::tiers {

CKPT_INLINE const char* persistent_state_name(PersistentState s) noexcept {
  return enum_name(s, {"not checked", "absent", "same", "different", "unreadable"});
}

CKPT_INLINE std::size_t MemoryStep::shards_here() const noexcept {
  std::size_t n = 0;
  for (const auto& s : shards) n += s.matching > 0 ? 1 : 0;
  return n;
}

CKPT_INLINE std::size_t MemoryStep::fewest_copies() const noexcept {
  if (shards.empty()) return 0;
  // A shard of a known world that no copy here holds has none: the shards vector has every one of them.
  std::size_t fewest = shards.front().matching;
  for (const auto& s : shards) fewest = std::min(fewest, s.matching);
  return fewest;
}

CKPT_INLINE bool StoreRepair::pending() const noexcept { return report && !report->applied && !report->clean(); }

CKPT_INLINE bool StoreRepair::failed() const noexcept {
  if (!report || !report->applied) return false;
  for (const auto& a : report->actions)
    if (!a.done) return true;
  return false;
}

CKPT_INLINE bool MemoryRootRepair::consistent() const noexcept {
  for (const auto& s : stores)
    if (!s.consistent()) return false;
  for (const auto& l : logs)
    if (!l.error.ok() || (l.torn_tail && !l.truncated)) return false;
  return after.ok();
}

namespace detail {

using memory_layout::rank_dir_name;

// The root and its rank directories (memory_layout's scan, in rank order), from a path naming either.
struct RootPaths {
  std::string path, root;
  PathKind kind = PathKind::memory_root;
  std::vector<memory_layout::RankDirEntry> ranks;
};

[[nodiscard]] CKPT_INLINE Result<RootPaths> find_rank_dirs(FsRef fs, const std::string& path) {
  RootPaths out;
  out.path = path;
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  CKPT_ASSIGN_OR_RETURN(out.kind, classify_path(fs, trimmed));
  if (out.kind == PathKind::rank_dir) {
    CKPT_ASSIGN_OR_RETURN(memory_layout::RankDirEntry dir, memory_layout::scan_rank_dir(fs, trimmed));
    out.root = parent_path(trimmed);
    out.ranks.push_back(std::move(dir));
    return out;
  }
  if (out.kind != PathKind::memory_root)
    return make_error(Code::invalid_argument, trimmed + ": a " + path_kind_name(out.kind) +
                                                  ", not a memory root (a directory of rank-<r> directories, each holding TIERS, own/ "
                                                  "or held-<s>/) nor one of its rank directories");
  out.root = trimmed;
  CKPT_ASSIGN_OR_RETURN(auto dirs, memory_layout::scan_memory_root(fs, trimmed));
  for (auto& d : dirs)
    if (d.recognized()) out.ranks.push_back(std::move(d));
  return out;
}

// Reads a tier log without writing: its records up to any damage, its torn tail, its damage.
CKPT_INLINE void read_rank_log(FsRef fs, RankDirectory& d) {
  const std::string path = join_path(d.path, std::string(memory_layout::kTierLog));
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) {
    if (file.status().code() != Code::not_found) d.log_error = file.status();
    return;
  }
  d.log_present = true;
  ScopedFile scoped(fs, *file);
  auto scan = scan_journal(fs, scoped.get(), path);
  if (!scan.ok()) {
    d.log_error = scan.status();
    return;
  }
  d.torn_tail = scan->torn_tail;
  if (scan->corrupt()) d.log_error = make_error(Code::corrupt, scan->corruption_summary());  // it names the log
  auto records = tier_records(fs, scoped.get(), *scan);
  if (records.ok()) d.records = std::move(*records);
  else if (d.log_error.ok()) d.log_error = records.status();
}

[[nodiscard]] CKPT_INLINE RootProblem root_problem(const std::string& label, const std::string& rank_dir, const std::string& store,
                                                   std::optional<std::uint64_t> step, std::optional<std::uint32_t> shard,
                                                   std::uint64_t txn, Problem p) {
  RootProblem out;
  static_cast<Problem&>(out) = std::move(p);
  out.message = label + ": " + out.message;
  out.rank_dir = rank_dir;
  out.store = store;
  out.step = step;
  out.shard = shard;
  out.txn = txn;
  return out;
}


[[nodiscard]] CKPT_INLINE std::string copy_label(const ShardCopy& c) {
  return c.where + " step " + std::to_string(c.step) + " shard " + std::to_string(c.shard) + " (txn " + std::to_string(c.info.txn) + ")";
}

using RootStepKey = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;  // step, digest high, digest low
[[nodiscard]] CKPT_INLINE RootStepKey root_step_key(std::uint64_t step, const Digest128& d) { return RootStepKey{step, d.high, d.low}; }

// The step of `key`, made with world shards (when known) on first sight.
CKPT_INLINE MemoryStep& step_of(std::map<RootStepKey, MemoryStep>& steps, std::uint64_t step, const Digest128& digest, std::uint32_t world) {
  MemoryStep& s = steps[root_step_key(step, digest)];
  s.step = step;
  s.digest = digest;
  if (s.world == 0 && world > 0 && digest != Digest128{}) {
    s.world = world;
    std::vector<ShardCopies> shards(world);
    for (std::uint32_t i = 0; i < world; ++i) shards[i].shard = i;
    for (auto& old : s.shards)  // shards seen before the world was known
      if (old.shard < world) shards[old.shard] = std::move(old);
    s.shards = std::move(shards);
  }
  return s;
}

CKPT_INLINE ShardCopies& shard_of(MemoryStep& s, std::uint32_t shard) {
  for (auto& c : s.shards)
    if (c.shard == shard) return c;
  ShardCopies c;
  c.shard = shard;
  auto at = std::lower_bound(s.shards.begin(), s.shards.end(), shard, [](const ShardCopies& a, std::uint32_t b) { return a.shard < b; });
  return *s.shards.insert(at, std::move(c));
}

// The description and what verification needs again: every store opened read-only.
struct RootScan {
  MemoryRoot root;
  std::map<std::string, std::unique_ptr<Store>> stores;  // by path
  std::unique_ptr<PersistentTier> persistent;
  std::vector<RootProblem> open_problems;  // copies that did not open (verification reports them itself)
};

// A copy's set-aside record: the SET_ASIDE detail is the store path as the resuming rank named it, so
// it is compared by its last two components (rank-<r>/<store>), the txn and the step.
[[nodiscard]] CKPT_INLINE bool names_copy(const TierRecord& r, const ShardCopy& c) {
  return r.event == TierEvent::set_aside && r.txn == c.info.txn && r.step == c.step && memory_layout::names_store(r.detail, c.store);
}

CKPT_INLINE void describe_store(FsRef fs, RootScan& scan, const RankDirectory& d, const memory_layout::StoreEntry& sd) {
  MemoryRoot& root = scan.root;
  const std::string rank = rank_dir_name(d.rank);
  const std::string where = rank + "/" + sd.name;
  if (!sd.has_journal) {
    auto kind = classify_path(fs, sd.path);
    if (kind.ok() && *kind == PathKind::broken_store)
      root.problems.push_back(root_problem(where, rank, sd.path, std::nullopt, std::nullopt, 0,
                                           ::ckpt::detail::step_problem(not_a_store_error(sd.path, *kind), "journal", sd.path)));
    else root.notes.push_back(where + ": no JOURNAL and no step directory (not a store yet)");
    return;
  }
  StoreOptions o;
  o.allow_corrupt_journal = true;
  auto opened = Store::open(fs, sd.path, Access::read_only, o);
  if (!opened.ok()) {
    root.problems.push_back(root_problem(where, rank, sd.path, std::nullopt, std::nullopt, 0, ::ckpt::detail::step_problem(opened.status(), "journal", sd.path)));
    return;
  }
  Store& store = **opened;
  const RecoveryReport& report = store.recovery_report();
  const std::string journal_path = join_path(sd.path, std::string(journal::kJournalName));
  if (report.corrupt())
    root.problems.push_back(root_problem(where, rank, sd.path, std::nullopt, std::nullopt, 0,
                                         ::ckpt::detail::step_problem(report.corruption_status(), "journal", journal_path)));
  if (report.tail_damaged())  // every byte there and not checking out: damage to durable data (spec/JOURNAL.md 6.3)
    root.problems.push_back(root_problem(where, rank, sd.path, std::nullopt, std::nullopt, 0,
                                         ::ckpt::detail::step_problem(make_error(Code::corrupt, "damaged journal tail at offset " +
                                                                                     std::to_string(report.journal.torn_tail->offset) +
                                                                                     " (not a torn append: " + report.journal.torn_tail->reason +
                                                                                     "); ckpt-repair applies what still checks out"),
                                                        "journal", journal_path)));
  else if (report.journal.torn_tail)
    root.notes.push_back(where + ": torn journal tail at offset " + std::to_string(report.journal.torn_tail->offset) +
                         " (left by a crash; the next writer or ckpt-repair truncates it)");
  for (const auto& t : report.transactions)
    if (t.state == TxnState::open)
      root.notes.push_back(where + ": transaction " + std::to_string(t.txn) + " (step " + std::to_string(t.step) +
                           ") is open: a save in progress, or left by a crash (ckpt-repair rolls it back or forward)");
  for (const auto& u : report.unknown_entries) root.notes.push_back(where + ": unknown entry '" + u + "' (listed, never deleted)");
  for (const StepInfo& info : store.steps()) {
    ShardCopy c;
    c.rank_dir = d.rank, c.store = sd.path, c.where = where, c.own = sd.own, c.parity = sd.parity;
    c.step = info.step, c.shard = sd.shard, c.info = info;
    auto reader = StepReader::open(fs, sd.path, info, store.uuid());
    if (!reader.ok()) {
      c.error = reader.status().message();
      scan.open_problems.push_back(root_problem(copy_label(c), rank, sd.path, c.step, c.shard, info.txn,
                                                ::ckpt::detail::step_problem(reader.status(), "step", join_path(sd.path, info.dir))));
    } else if (reader->shard_count() != 1) {
      c.error = "holds " + std::to_string(reader->shard_count()) + " shards; a memory step holds one";
      scan.open_problems.push_back(root_problem(copy_label(c), rank, sd.path, c.step, c.shard, info.txn,
                                                ::ckpt::detail::step_problem(make_error(Code::corrupt, c.error), "step", join_path(sd.path, info.dir))));
    } else {
      c.digest = shard_digest(reader->shard(0));
    }
    root.copies.push_back(std::move(c));
  }
  scan.stores[sd.path] = std::move(*opened);
}

// The records of every log into steps (spec/TIERS.md 5): CAPTURED names every shard's digest, HELD one
// shard's, the others the step. SET_ASIDE carries a shard digest and no step digest: it goes to the steps
// of its number that list that shard's content. EVICTED carries neither: it goes to the step of the
// record of the same log that wrote its txn.
CKPT_INLINE void place_records(MemoryRoot& root, std::map<RootStepKey, MemoryStep>& steps) {
  for (const auto& d : root.rank_dirs) {
    const std::string rank = rank_dir_name(d.rank);
    const std::string log_path = join_path(d.path, std::string(memory_layout::kTierLog));
    const std::string label = rank + "/" + std::string(memory_layout::kTierLog);
    for (const auto& r : d.records) {
      if (r.event == TierEvent::set_aside || r.event == TierEvent::evicted || r.step_digest == Digest128{}) continue;
      const std::uint32_t world = r.event == TierEvent::load_failed ? 0 : r.world;  // LOAD_FAILED records no world
      MemoryStep& s = step_of(steps, r.step, r.step_digest, world);
      s.events.push_back(RecordedEvent{d.rank, r});
      switch (r.event) {
        case TierEvent::captured: {
          s.captured = true;
          auto shards = decode_shard_digests(r, log_path);
          if (!shards.ok()) {
            root.problems.push_back(root_problem(label, rank, log_path, r.step, r.shard, r.txn, ::ckpt::detail::step_problem(shards.status(), "tier log", log_path)));
            break;
          }
          for (std::uint32_t i = 0; i < shards->size(); ++i) shard_of(s, i).digest = (*shards)[i];
          if (step_digest(r.step, *shards) != r.step_digest)
            root.problems.push_back(root_problem(label, rank, log_path, r.step, std::nullopt, r.txn,
                                                 ::ckpt::detail::step_problem(make_error(Code::corrupt, log_path + ": " + r.describe() +
                                                                                              ": its shard digests do not add up to its step digest"),
                                                                "tier log", log_path)));
          break;
        }
        case TierEvent::held: shard_of(s, r.shard).digest = r.shard_digest; break;
        case TierEvent::replicated:
          s.replicated_copies = s.replicated ? std::min(s.replicated_copies, r.copies) : r.copies;
          s.replicated = true;
          break;
        case TierEvent::persisted:
          s.persisted = true;
          s.persisted_digests[r.shard] = r.shard_digest;
          break;
        case TierEvent::load_failed: s.load_failed = true; break;
        case TierEvent::resumed: s.resumed = true; break;
        case TierEvent::sdc: {
          // Every rank records the same finding: one problem per step and finding, from the first log that has it.
          const bool first = !s.sdc || std::none_of(s.events.begin(), s.events.end() - 1, [&](const RecordedEvent& e) {
            return e.record.event == TierEvent::sdc && e.record.detail == r.detail;
          });
          s.sdc = true;
          if (first)
            root.problems.push_back(root_problem(label, rank, log_path, r.step, std::nullopt, 0,
                                                 ::ckpt::detail::step_problem(make_error(Code::corrupt, log_path + ": silent data corruption at capture: " +
                                                                                                         r.describe()),
                                                                              "tier log", log_path)));
          break;
        }
        default: break;
      }
    }
  }
  for (const auto& d : root.rank_dirs)
    for (const auto& r : d.records) {
      if (r.event == TierEvent::set_aside) {
        for (auto& [key, s] : steps)
          for (const auto& sh : s.shards)
            if (s.step == r.step && sh.shard == r.shard && sh.digest == r.shard_digest) s.events.push_back(RecordedEvent{d.rank, r});
      } else if (r.event == TierEvent::evicted) {
        const TierRecord* writer = nullptr;
        for (const auto& w : d.records)
          if ((w.event == TierEvent::captured || w.event == TierEvent::held) && w.step == r.step && w.txn == r.txn &&
              (writer == nullptr || w.shard == r.shard))
            writer = &w;
        if (writer != nullptr) step_of(steps, writer->step, writer->step_digest, writer->world).events.push_back(RecordedEvent{d.rank, r});
      }
    }
}

// Each copy to its step: by the record of its own rank directory (the txn that wrote it), else by a
// step of the same number that lists its content, else to its number's unrecorded step.
CKPT_INLINE void place_copies(MemoryRoot& root, std::map<RootStepKey, MemoryStep>& steps) {
  for (std::size_t i = 0; i < root.copies.size(); ++i) {
    ShardCopy& c = root.copies[i];
    const RankDirectory* dir = nullptr;
    for (const auto& d : root.rank_dirs)
      if (d.rank == c.rank_dir) dir = &d;
    if (c.parity) {
      // Parity segments (spec/TIERS.md 12.3): no copy of a shard; recorded by PARITY, verified like any copy.
      if (dir != nullptr)
        for (const auto& r : dir->records) c.recorded = c.recorded || (r.event == TierEvent::parity && r.step == c.step && r.txn == c.info.txn);
      for (const auto& d : root.rank_dirs)
        for (const auto& r : d.records) c.set_aside = c.set_aside || names_copy(r, c);
      if (!c.recorded) root.notes.push_back(copy_label(c) + ": no PARITY record of its rank directory's log names it");
      continue;
    }
    const TierRecord* rec = nullptr;
    if (dir != nullptr)
      for (const auto& r : dir->records)
        if (r.step == c.step && r.txn == c.info.txn && r.shard == c.shard &&
            (c.own ? r.event == TierEvent::captured || r.event == TierEvent::rebuilt : r.event == TierEvent::held) &&
            r.step_digest != Digest128{})
          rec = &r;
    MemoryStep* step = nullptr;
    if (rec != nullptr) {
      c.recorded = true;
      c.expected = rec->shard_digest;
      step = &step_of(steps, c.step, rec->step_digest, rec->world);
    } else if (c.error.empty()) {
      for (auto& [key, s] : steps)
        if (s.step == c.step && s.digest_known())
          for (const auto& sh : s.shards)
            if (sh.shard == c.shard && sh.digest == c.digest && sh.digest != Digest128{}) step = &s, c.expected = sh.digest;
    }
    if (step == nullptr) {
      step = &step_of(steps, c.step, Digest128{}, 0);
      root.notes.push_back(copy_label(c) + ": no tier log in the root records it; its step digest is unknown");
    }
    for (const auto& d : root.rank_dirs)
      for (const auto& r : d.records) c.set_aside = c.set_aside || names_copy(r, c);
    if (step->world > 0 && c.shard >= step->world) {
      root.problems.push_back(root_problem(copy_label(c), rank_dir_name(c.rank_dir), c.store, c.step, c.shard, c.info.txn,
                                           ::ckpt::detail::step_problem(make_error(Code::corrupt, "shard " + std::to_string(c.shard) + " of a step of " +
                                                                                        std::to_string(step->world) + " ranks"),
                                                          "step", join_path(c.store, c.info.dir))));
      continue;
    }
    ShardCopies& sh = shard_of(*step, c.shard);
    sh.copies.push_back(i);
    if (c.error.empty() && c.expected != Digest128{} && c.digest != c.expected)
      root.problems.push_back(root_problem(copy_label(c), rank_dir_name(c.rank_dir), c.store, c.step, c.shard, c.info.txn, [&] {
        Problem p = ::ckpt::detail::step_problem(make_error(Code::corrupt, "content digest " + c.digest.hex() + ", the tier log records " + c.expected.hex() +
                                                                 ": not the shard it is recorded as"),
                                   "content", join_path(c.store, c.info.dir));
        p.expected = c.expected.hex(), p.found = c.digest.hex();
        return p;
      }()));
  }
}

CKPT_INLINE void count_copies(MemoryRoot& root) {
  for (auto& s : root.steps) {
    s.set_aside = 0;
    for (auto& sh : s.shards) {
      sh.matching = sh.verified = 0;
      for (const auto i : sh.copies) {
        const ShardCopy& c = root.copies[i];
        s.set_aside += c.set_aside ? 1 : 0;
        if (!c.matches()) continue;
        ++sh.matching;
        if (c.verified && *c.verified) ++sh.verified;
      }
    }
  }
}

// The persistent store's step of each number, compared by shard digests (its index only).
CKPT_INLINE void compare_persistent(RootScan& scan) {
  MemoryRoot& root = scan.root;
  PersistentTier& store = *scan.persistent;
  const std::string label = "persistent store " + store.path();
  for (Problem& damage : store.damage())
    root.problems.push_back(root_problem(label, "", store.path(), std::nullopt, std::nullopt, 0, std::move(damage)));
  for (auto& s : root.steps) {
    bool known = s.digest_known() && s.world > 0;
    for (const auto& sh : s.shards) known = known && sh.digest != Digest128{};
    if (!known) continue;
    auto info = store.find(s.step);
    if (!info.ok()) {
      s.persistent = PersistentState::absent;
      continue;
    }
    s.persistent_txn = info->txn;
    auto reader = store.open_step(*info);
    if (!reader.ok()) {
      s.persistent = PersistentState::unreadable;
      s.persistent_detail = reader.status().message();
      continue;
    }
    std::vector<Digest128> digests;
    for (std::size_t k = 0; k < reader->shard_count(); ++k) digests.push_back(shard_digest(reader->shard(k)));
    if (digests.size() != s.world) {
      s.persistent = PersistentState::different;
      s.persistent_detail = "it has " + std::to_string(digests.size()) + " shards, the memory step " + std::to_string(s.world);
    } else {
      std::string differ;
      for (std::uint32_t k = 0; k < s.world; ++k) {
        const auto recorded = s.persisted_digests.find(k);
        if (digests[k] != (recorded != s.persisted_digests.end() ? recorded->second : s.shards[k].digest))
          differ += (differ.empty() ? "" : ", ") + std::to_string(k);
      }
      s.persistent = differ.empty() ? PersistentState::same : PersistentState::different;
      if (!differ.empty()) s.persistent_detail = "shards " + differ + " differ";
    }
    if (s.persistent != PersistentState::different) continue;
    const std::string what = "step " + std::to_string(s.step) + " (txn " + std::to_string(info->txn) + ") is not the content " +
                             s.digest.hex() + " of the memory tier: " + s.persistent_detail;
    if (s.persisted)  // the logs say this very content was persisted and checked
      root.problems.push_back(root_problem(label + " step " + std::to_string(s.step), "", store.path(), s.step, std::nullopt, info->txn,
                                           ::ckpt::detail::step_problem(make_error(Code::corrupt, what + ", though a PERSISTED record says it is"),
                                                          "content", join_path(store.path(), info->dir))));
    else root.notes.push_back(label + ": " + what + " (never recorded as persisted: another timeline)");
  }
}

[[nodiscard]] CKPT_INLINE Result<RootScan> scan_root(FsRef fs, const std::string& path, const MemoryRootOptions& options) {
  CKPT_ASSIGN_OR_RETURN(RootPaths where, find_rank_dirs(fs, path));
  RootScan scan;
  MemoryRoot& root = scan.root;
  root.path = where.path, root.root = where.root, root.kind = where.kind, root.persistent = options.persistent;
  if (!options.persistent.empty()) {
    auto p = PersistentTier::open_read(fs, options.persistent, options.open_objects, /*allow_damage=*/true);
    if (!p.ok()) return p.status().with_context("persistent store");
    scan.persistent = std::move(*p);
  }
  for (const memory_layout::RankDirEntry& dir : where.ranks) {
    RankDirectory d;
    d.rank = dir.rank;
    d.path = dir.path;
    read_rank_log(fs, d);
    const std::string rank = rank_dir_name(dir.rank);
    const std::string log_path = join_path(d.path, std::string(memory_layout::kTierLog));
    if (!d.log_error.ok())
      root.problems.push_back(root_problem(rank + "/" + std::string(memory_layout::kTierLog), rank, log_path, std::nullopt, std::nullopt, 0,
                                           ::ckpt::detail::step_problem(d.log_error, "tier log", log_path)));
    else if (d.torn_tail && !d.torn_tail->clean_tear)
      root.problems.push_back(root_problem(rank + "/" + std::string(memory_layout::kTierLog), rank, log_path, std::nullopt, std::nullopt, 0,
                                           ::ckpt::detail::step_problem(make_error(Code::corrupt, log_path + ": damaged tail at offset " +
                                                                                        std::to_string(d.torn_tail->offset) + " (" +
                                                                                        std::to_string(d.torn_tail->length) +
                                                                                        " bytes, not a torn append: " + d.torn_tail->reason + ")"),
                                                          "tier log", log_path)));
    else if (d.torn_tail)
      root.notes.push_back(rank + "/" + std::string(memory_layout::kTierLog) + ": torn tail at offset " + std::to_string(d.torn_tail->offset) +
                           " (" + std::to_string(d.torn_tail->length) + " bytes, an interrupted append: end of log; the next job or "
                           "ckpt-repair cuts it)");
    if (!d.log_present && d.log_error.ok()) root.notes.push_back(rank + ": no tier log (TIERS)");
    for (const auto& u : dir.unknown) root.notes.push_back(rank + ": unknown entry '" + u + "' (listed, never deleted)");
    for (const auto& sd : dir.stores) d.stores.push_back(sd.path);
    root.rank_dirs.push_back(std::move(d));
    for (const auto& sd : dir.stores) describe_store(fs, scan, root.rank_dirs.back(), sd);
  }
  std::map<RootStepKey, MemoryStep> steps;
  place_records(root, steps);
  place_copies(root, steps);
  for (auto& [key, s] : steps) root.steps.push_back(std::move(s));
  if (scan.persistent) compare_persistent(scan);
  count_copies(root);
  return scan;
}

}  // namespace detail

CKPT_INLINE Result<MemoryRoot> describe_memory_root(FsRef fs, const std::string& path, const MemoryRootOptions& options) {
  CKPT_ASSIGN_OR_RETURN(detail::RootScan scan, detail::scan_root(fs, path, options));
  for (auto& p : scan.open_problems) scan.root.problems.push_back(std::move(p));
  return std::move(scan.root);
}

CKPT_INLINE Result<MemoryRootVerification> verify_memory_root(FsRef fs, const std::string& path, const MemoryRootOptions& options) {
  CKPT_ASSIGN_OR_RETURN(detail::RootScan scan, detail::scan_root(fs, path, options));
  MemoryRootVerification out;
  out.problems = scan.root.problems;
  out.notes = scan.root.notes;
  const FileVerifier verify_one = options.verify_one ? options.verify_one : cpu_file_verifier(fs, options.verify);
  // Every problem of a step once: its own, then each shard file's (the verifier's report).
  auto take = [&](const std::string& label, const std::string& rank_dir, const std::string& store_path, std::uint64_t step,
                  std::optional<std::uint32_t> shard, std::uint64_t txn, StepVerifyReport& report) {
    for (auto& p : report.problems) out.problems.push_back(detail::root_problem(label, rank_dir, store_path, step, shard, txn, std::move(p)));
    for (auto& file : report.shards)
      for (auto& p : file.problems) {
        if (p.file.empty()) p.file = file.path;
        out.problems.push_back(detail::root_problem(label, rank_dir, store_path, step, shard, txn, std::move(p)));
      }
    out.chunks_checked += report.chunks_checked;
    out.bytes_checked += report.bytes_checked;
  };
  for (auto& c : scan.root.copies) {
    Store& store = *scan.stores.at(c.store);
    StepVerifyReport report = verify_step(fs, c.store, c.info, store.uuid(), verify_one);
    ++out.copies_checked;
    // Files gone: a live rank may have retired the step since the journal was read (spec/JOURNAL.md 6.5).
    if (report.files_missing()) {
      auto recheck = recheck_step(store, c.step, c.info.txn);
      if (recheck.ok() && *recheck != StepRecheck::committed) {
        out.notes.push_back(detail::copy_label(c) + ": retired while being verified (" + step_recheck_name(*recheck) + "; not damage)");
        c.verified = true;
        continue;
      }
    }
    c.verified = report.ok();
    take(detail::copy_label(c), detail::rank_dir_name(c.rank_dir), c.store, c.step, c.shard, c.info.txn, report);
  }
  if (scan.persistent) {
    PersistentTier& store = *scan.persistent;
    // A caller's verifier reads files of the job's Fs; an object store's shards are read through its own.
    const FileVerifier verify_persistent = store.on_objects() ? cpu_file_verifier(store.fs(), options.verify) : verify_one;
    std::vector<std::uint64_t> done;
    for (const auto& s : scan.root.steps) {
      if (s.persistent == PersistentState::not_checked || s.persistent == PersistentState::absent) continue;
      if (std::find(done.begin(), done.end(), s.step) != done.end()) continue;
      done.push_back(s.step);
      auto info = store.find(s.step);
      if (!info.ok()) continue;
      StepVerifyReport report = verify_step(store.fs(), store.root(), *info, store.uuid(), verify_persistent);
      take("persistent store " + store.path() + " step " + std::to_string(s.step) + " (txn " + std::to_string(info->txn) + ")", "",
           store.path(), s.step, std::nullopt, info->txn, report);
    }
  }
  detail::count_copies(scan.root);
  out.root = std::move(scan.root);
  out.root.problems = out.problems;
  out.root.notes = out.notes;
  return out;
}

CKPT_INLINE Result<MemoryRootRepair> repair_memory_root(FsRef fs, const std::string& path, bool dry_run, const MemoryRootOptions& options) {
  CKPT_ASSIGN_OR_RETURN(detail::RootPaths where, detail::find_rank_dirs(fs, path));
  MemoryRootRepair out;
  out.root = where.root;
  out.dry_run = dry_run;
  for (const memory_layout::RankDirEntry& entry : where.ranks) {
    const std::uint32_t r = entry.rank;
    const std::string& dir = entry.path;
    const std::string rank = detail::rank_dir_name(r);
    for (const auto& sd : entry.stores) {
      StoreRepair s;
      s.rank_dir = rank;
      s.store = sd.path;
      if (!sd.has_journal) {
        auto kind = classify_path(fs, sd.path);
        if (!kind.ok() || *kind != PathKind::broken_store) continue;  // an empty directory: not a store yet, nothing to repair
        s.error = not_a_store_error(sd.path, *kind);
        out.stores.push_back(std::move(s));
        continue;
      }
      // The same recovery a writable open runs, under the store's lock (a live rank holds it: conflict).
      auto report = dry_run ? check_store(fs, sd.path) : recover_store(fs, sd.path, false);
      if (!report.ok()) {
        s.error = report.status();
      } else {
        if (report->corrupt())
          s.error = make_error(Code::corrupt, report->corruption_status().message() + "; left as it is: ckpt-repair " + sd.path +
                                                  " rebuilds the journal from the step directories that verify");
        s.report = std::move(*report);
      }
      auto quarantined = fs.list_dir(join_path(sd.path, std::string(journal::kQuarantineName)));
      if (quarantined.ok()) {
        s.quarantine = *quarantined;
        std::sort(s.quarantine.begin(), s.quarantine.end());
      }
      out.stores.push_back(std::move(s));
    }
    TierLogRepair l;
    l.rank_dir = rank;
    l.path = join_path(dir, std::string(memory_layout::kTierLog));
    RankDirectory d;
    d.rank = r;
    d.path = dir;
    detail::read_rank_log(fs, d);
    l.present = d.log_present;
    l.records = d.records.size();
    l.torn_tail = d.torn_tail;
    if (!d.log_error.ok()) {
      l.error = d.log_error.code() == Code::corrupt ? d.log_error.with_context("left as it is (a log is never cut before valid records)")
                                                    : d.log_error;
    } else if (d.torn_tail && !d.torn_tail->clean_tear) {
      l.error = make_error(Code::corrupt, l.path + ": damaged tail at offset " + std::to_string(d.torn_tail->offset) +
                                              " (every byte is there and does not check out: not a torn append): " + d.torn_tail->reason +
                                              "; left as it is");
    } else if (d.torn_tail && !dry_run) {
      // Under the rank's own store lock: a live rank holds it and appends to its log (TierLog::open cuts the tail).
      const std::string own = memory_layout::own_store(where.root, r);
      std::optional<ScopedFile> lock;
      Status locked;
      if (fs.stat(join_path(own, std::string(journal::kJournalName))).ok()) {
        auto h = fs.lock(join_path(own, std::string(journal::kLockName)));
        if (h.ok()) lock.emplace(fs, *h);
        else locked = h.status().code() == Code::conflict ? make_error(Code::conflict, own + ": locked by a live rank; its tier log is left to it")
                                                          : h.status();
      }
      if (locked.ok()) {
        auto opened = TierLog::open(fs, dir);
        if (opened.ok()) l.truncated = true;
        else locked = opened.status();
      }
      l.error = locked;
    }
    out.logs.push_back(std::move(l));
  }
  CKPT_ASSIGN_OR_RETURN(out.after, verify_memory_root(fs, path, options));
  return out;
}

}  // namespace ckpt::tiers
