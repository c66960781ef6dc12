// ckpt: rebuilding a lost or corrupt journal from the step directories that verify (spec/JOURNAL.md
// 6.4, 11), beside recover_store: ckpt-repair presents it, the library decides it.
//
// Rebuild rules. Facts are the old journal's applied records plus the digest-valid records inside
// mid-log corruption (those groups were complete once); records of a torn tail never were durable.
// Each step-<s>-<t> directory then gets one verdict:
//   abort    the facts say txn t was aborted or retired, or began and never committed with no damage
//            after its BEGIN: BEGIN (the files it named) + ABORT, so recovery removes only those files;
//   commit   its MANIFEST decodes, names this step and txn and the store's uuid, matches a known
//            COMMIT's digest if one is known, and every chunk of every shard verifies: BEGIN + COMMIT;
//   damaged  anything else: left in place, not in the new journal, reported (exit 1).
// Groups are written in txn order, one per transaction. If the old journal used a txn id above every
// directory left, a BEGIN + ABORT for that id (whose directory does not exist) keeps it spent (spec 5.6).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "../io/atomic_file.hpp"
#include "journal.hpp"
#include "../core/problem.hpp"
#include "step_reader.hpp"
#include "../core/uuid.hpp"
#include "../shard/verify.hpp"

namespace ckpt {

// One step directory considered for a rebuilt journal.
struct RebuildCandidate {
  std::string dir;  // name inside the store
  std::uint64_t step = 0, txn = 0;
  enum class Verdict { include, abort, damaged, foreign } verdict = Verdict::damaged;
  std::string reason;
  StepDirectory content;
  std::vector<Problem> damage;  // each problem once, as a record (problem.hpp)
};

// The rebuild of a missing or corrupt journal (spec/JOURNAL.md 5.1 framing, 4 records).
struct JournalRebuild {
  Uuid uuid{};
  std::string uuid_source;
  std::vector<RebuildCandidate> candidates;
  std::optional<BeginRecord> high_water;  // keeps the largest txn id ever used from being reused
  std::string journal_bytes;
};

namespace detail {

// What the journal, applied or damaged-but-once-durable, says about a transaction.
struct KnownTxn {
  std::optional<BeginRecord> begin;
  std::optional<CommitRecord> commit;
  bool aborted = false, retired = false;
  std::uint64_t begin_offset = 0;
};

// The old journal's records: applied ones, and digest-valid ones inside mid-log corruption (they were
// durable once). Records in a torn tail never were, so they do not count as facts.
inline std::map<std::uint64_t, KnownTxn> known_transactions(const JournalScan& scan, std::uint64_t& max_txn) {
  std::map<std::uint64_t, KnownTxn> known;
  auto take = [&](const JournalRecord& r) {
    max_txn = std::max(max_txn, r.txn());
    if (const auto* b = std::get_if<BeginRecord>(&r.body)) {
      known[b->txn].begin = *b;
      known[b->txn].begin_offset = r.offset;
    } else if (const auto* c = std::get_if<CommitRecord>(&r.body)) {
      known[c->txn].commit = *c;
    } else if (const auto* a = std::get_if<AbortRecord>(&r.body)) {
      known[a->txn].aborted = true;
    } else if (const auto* t = std::get_if<RetireRecord>(&r.body)) {
      known[t->txn].retired = true;
    }
  };
  for (const auto& r : scan.records) take(r);
  for (const auto& d : scan.corruption)
    for (const auto& r : d.unapplied) take(r);
  if (scan.torn_tail)
    for (const auto& r : scan.torn_tail->unapplied) max_txn = std::max(max_txn, r.txn());  // an id that may have reached disk
  return known;
}

// Verifies one step directory completely: manifest, shard pins, every chunk of every shard.
inline void verify_candidate(FsRef fs, const std::string& store, RebuildCandidate& c) {
  const std::string dir = join_path(store, c.dir);
  auto content = read_step_directory(fs, dir);
  if (!content.ok()) {
    c.damage.push_back(step_problem(content.status(), step_region::kManifest, join_path(dir, std::string(journal::kManifestName))));
    return;
  }
  c.content = std::move(content).value();
  const auto& m = c.content.manifest;
  if (m.step != c.step || m.txn != c.txn)
    c.damage.push_back(step_problem(make_error(Code::corrupt, "MANIFEST says step " + std::to_string(m.step) + " txn " +
                                                                  std::to_string(m.txn) + ", the directory name says step " +
                                                                  std::to_string(c.step) + " txn " + std::to_string(c.txn)),
                                    step_region::kManifest, join_path(dir, std::string(journal::kManifestName))));
  for (Problem problem : c.content.shard_problems) {
    problem.region = problem.code == Code::not_found ? step_region::kMissing : step_region::kPin;  // a rebuild's regions
    problem.file = dir;
    c.damage.push_back(std::move(problem));
  }
  for (const auto& shard_path : c.content.shard_paths) {
    auto v = verify_file(fs, shard_path);
    if (!v.ok()) {
      // A missing shard is already a shard problem above.
      if (v.status().code() != Code::not_found) c.damage.push_back(step_problem(v.status(), step_region::kFile, shard_path));
      continue;
    }
    for (auto p : v->problems) {
      if (p.file.empty()) p.file = shard_path;
      c.damage.push_back(std::move(p));
    }
  }
}

}  // namespace detail

// Plans a new journal from the step directories (and what the old journal still proves).
[[nodiscard]] inline Result<JournalRebuild> plan_journal_rebuild(FsRef fs, const std::string& store, const JournalScan* old) {
  JournalRebuild plan;
  std::uint64_t max_txn = 0;
  std::map<std::uint64_t, detail::KnownTxn> known;
  if (old != nullptr) known = detail::known_transactions(*old, max_txn);
  // The first offset of mid-log damage: an "open" transaction that began before it may have ended inside it.
  std::optional<std::uint64_t> last_damage;
  if (old != nullptr)
    for (const auto& d : old->corruption) last_damage = std::max(last_damage.value_or(0), d.offset);

  CKPT_ASSIGN_OR_RETURN(auto entries, fs.list_dir(store));
  std::sort(entries.begin(), entries.end());
  std::uint64_t max_dir_txn = 0;
  for (const auto& name : entries) {
    RebuildCandidate c;
    c.dir = name;
    if (!parse_step_dir_name(name, c.step, c.txn)) continue;
    auto info = fs.stat(join_path(store, name));
    if (!info.ok() || !info->is_dir) continue;
    max_dir_txn = std::max(max_dir_txn, c.txn);
    detail::verify_candidate(fs, store, c);
    const auto k = known.find(c.txn);
    const bool knows = k != known.end() && k->second.begin && k->second.begin->step == c.step;
    if (knows && (k->second.aborted || k->second.retired)) {
      c.verdict = RebuildCandidate::Verdict::abort;
      c.reason = std::string("the old journal ") + (k->second.retired ? "retired" : "aborted") + " txn " + std::to_string(c.txn) +
                 ": its files are removed";
    } else if (knows && !k->second.commit && (!last_damage || *last_damage < k->second.begin_offset)) {
      c.verdict = RebuildCandidate::Verdict::abort;
      c.reason = "the old journal shows txn " + std::to_string(c.txn) + " begun and never committed (no damage after it): "
                 "aborted, its files are removed";
    } else if (!c.damage.empty() && knows && k->second.commit && c.content.manifest_size == k->second.commit->manifest_size &&
               c.content.manifest_digest == k->second.commit->manifest_digest) {
      // Committed on evidence (a once-durable COMMIT whose MANIFEST still matches): a bad chunk makes the
      // step damaged, never uncommitted. It stays in the journal and is reported (spec/JOURNAL.md 6.4).
      c.verdict = RebuildCandidate::Verdict::include;
      c.reason = "committed in the old journal and its MANIFEST matches the COMMIT, but it has damage: kept committed, reported";
    } else if (!c.damage.empty()) {
      c.verdict = RebuildCandidate::Verdict::damaged;
      c.reason = "does not verify: left in place, not in the new journal";
    } else if (knows && k->second.commit && k->second.commit->manifest_digest != c.content.manifest_digest) {
      c.verdict = RebuildCandidate::Verdict::damaged;
      c.reason = "its MANIFEST digest " + hex64(c.content.manifest_digest) + " differs from the old COMMIT's " +
                 hex64(k->second.commit->manifest_digest) + ": left in place, not in the new journal";
      c.damage.push_back(detail::step_problem(make_error(Code::corrupt, c.reason), step_region::kManifest,
                                              join_path(join_path(store, c.dir), std::string(journal::kManifestName))));
    } else {
      c.verdict = RebuildCandidate::Verdict::include;
      c.reason = knows && k->second.commit ? "committed in the old journal, and every chunk verifies"
                                           : "its manifest and every chunk of its shards verify";
    }
    plan.candidates.push_back(std::move(c));
  }
  std::sort(plan.candidates.begin(), plan.candidates.end(), [](const RebuildCandidate& a, const RebuildCandidate& b) { return a.txn < b.txn; });

  // The store's identity: the old HEADER's, else the one the verified manifests agree on.
  if (old != nullptr && old->has_header) {
    plan.uuid = old->header.store_uuid;
    plan.uuid_source = "the old journal's HEADER";
  } else {
    std::map<Uuid, int> votes;
    for (const auto& c : plan.candidates)
      if (c.verdict == RebuildCandidate::Verdict::include) ++votes[c.content.manifest.store_uuid];
    if (!votes.empty()) {
      plan.uuid = std::max_element(votes.begin(), votes.end(), [](const auto& x, const auto& y) { return x.second < y.second; })->first;
      plan.uuid_source = "the step manifests";
    } else {
      plan.uuid = random_uuid();
      plan.uuid_source = "new (nothing records the old one)";
    }
  }
  for (auto& c : plan.candidates)
    if (c.verdict == RebuildCandidate::Verdict::include && c.content.manifest.store_uuid != plan.uuid) {
      c.verdict = RebuildCandidate::Verdict::foreign;
      c.reason = "its MANIFEST belongs to store " + uuid_string(c.content.manifest.store_uuid) + ": left in place";
    }

  // The records: one group per transaction, in txn order (one transaction open at a time, spec 6.6).
  JournalHeader header;
  header.store_uuid = plan.uuid;
  std::string& bytes = plan.journal_bytes;
  bytes = encode_group({header_record(header)}, 0);
  std::uint64_t max_written = 0;
  for (const auto& c : plan.candidates) {
    if (c.verdict != RebuildCandidate::Verdict::include && c.verdict != RebuildCandidate::Verdict::abort) continue;
    BeginRecord b;
    b.txn = c.txn;
    b.step = c.step;
    const auto k = known.find(c.txn);
    if (c.verdict == RebuildCandidate::Verdict::include) {
      b.world_size = c.content.manifest.world_size;
      for (const auto& s : c.content.manifest.shards) b.files.push_back(TxnFile{s.rank, s.name});
    } else if (k != known.end() && k->second.begin) {
      b = *k->second.begin;  // exactly the files that transaction named, nothing more (R7)
    } else {
      b.files.push_back(TxnFile{0, shard_file_name(0, 1)});
    }
    CKPT_ASSIGN_OR_RETURN(PendingRecord begin, begin_record(b));
    std::vector<PendingRecord> group{begin};
    if (c.verdict == RebuildCandidate::Verdict::include)
      group.push_back(commit_record(CommitRecord{c.txn, c.step, c.content.manifest_size, c.content.manifest_digest}));
    else
      group.push_back(abort_record(AbortRecord{c.txn, c.step, AbortReason::recovery}));
    bytes += encode_group(group, bytes.size());
    max_written = std::max(max_written, c.txn);
  }
  // An id the old journal used above every directory left must stay spent (spec 5.6): an aborted
  // transaction whose directory does not exist records it.
  if (max_txn > std::max(max_written, max_dir_txn)) {
    BeginRecord b;
    b.txn = max_txn;
    const auto k = known.find(max_txn);
    b.step = k != known.end() && k->second.begin ? k->second.begin->step : 0;
    b.files.push_back(TxnFile{0, shard_file_name(0, 1)});
    CKPT_ASSIGN_OR_RETURN(PendingRecord begin, begin_record(b));
    bytes += encode_group({begin, abort_record(AbortRecord{b.txn, b.step, AbortReason::recovery})}, bytes.size());
    plan.high_water = b;
  }
  // The new journal must read back clean before it replaces anything.
  CKPT_ASSIGN_OR_RETURN(JournalScan check, scan_journal_bytes(bytes, join_path(store, "JOURNAL (rebuilt)")));
  if (check.corrupt() || check.torn_tail || check.end != bytes.size())
    return make_error(Code::corrupt, "the rebuilt journal does not scan clean: " + check.corruption_summary());
  return plan;
}

// Writes the rebuilt journal: temporary name, fsync, the old one renamed aside (never deleted), rename, fsync dir.
[[nodiscard]] inline Result<std::string> write_rebuilt_journal(FsRef fs, const std::string& store, const JournalRebuild& plan, bool old_exists) {
  const std::string journal_path = join_path(store, std::string(journal::kJournalName));
  CKPT_ASSIGN_OR_RETURN(auto file, AtomicFile::create(fs, journal_path));
  CKPT_TRY(file.write(plan.journal_bytes.data(), plan.journal_bytes.size()));
  std::string kept;
  if (old_exists) {
    for (int n = 1; n < 1000000 && kept.empty(); ++n) {
      const std::string candidate = journal_path + ".corrupt-" + std::to_string(n);
      if (fs.stat(candidate).status().code() == Code::not_found) kept = candidate;
    }
    if (kept.empty()) return make_error(Code::conflict, store + ": no free JOURNAL.corrupt-<n> name");
    CKPT_TRY(fs.rename(journal_path, kept));
    // Durable before the new journal takes the name: two renames in one directory may reach disk in any order (R1).
    CKPT_TRY(fs.sync_dir(store));
  }
  CKPT_TRY(file.commit());  // fsync, rename into place, fsync the directory
  return kept;
}

}  // namespace ckpt
