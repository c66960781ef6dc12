// ckpt: store recovery (spec/JOURNAL.md 6.4 and 6.6): the transaction table built from the journal,
// the plan (a pure function of journal bytes and directory contents) and its execution.
#pragma once

#include "../journal_log.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <set>

namespace ckpt {

CKPT_INLINE const char* txn_state_name(TxnState s) noexcept {
  return enum_name(s, {"open", "committed", "aborted", "retired"});
}

CKPT_INLINE const char* recovery_action_name(RecoveryActionKind k) noexcept {
  return enum_name(k, {"truncate_journal", "append_abort", "remove_file", "remove_dir", "sync_dir", "append_commit", "quarantine",
                       "rewrite_journal"});
}

CKPT_INLINE std::string RecoveryAction::describe() const {
  std::string s = recovery_action_name(kind);
  switch (kind) {
    case RecoveryActionKind::truncate_journal:
      s += " " + path + " at offset " + std::to_string(offset) + " (" + std::to_string(length) + " torn bytes)";
      break;
    case RecoveryActionKind::append_abort: s += " txn " + std::to_string(txn); break;
    case RecoveryActionKind::append_commit:
      s += " txn " + std::to_string(txn) + " step " + std::to_string(commit.step) + " (its MANIFEST and shards verify)";
      break;
    case RecoveryActionKind::quarantine: s += " " + path + " -> " + to; break;
    default: s += " " + path; break;
  }
  if (!error.empty()) s += ": failed: " + error;
  return s;
}

CKPT_INLINE bool RecoveryReport::clean() const noexcept {
  if (corrupt() || journal.torn_tail) return false;
  for (const auto& a : actions)
    if (a.kind != RecoveryActionKind::rewrite_journal) return false;
  return true;
}

CKPT_INLINE Status RecoveryReport::corruption_status() const {
  if (!corrupt()) return Status();
  std::string msg = journal.corruption_summary();
  for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p.message;
  return make_error(Code::corrupt, msg + "; the store cannot be opened for writing: run ckpt-repair on " + store);
}

namespace detail {

// The transaction table of a log, built record by record (spec 6.6).
class TxnTable {
 public:
  TxnTable(std::vector<TxnInfo>& txns, std::uint64_t& max_txn) : txns_(txns), max_txn_(max_txn) {}

  [[nodiscard]] TxnInfo* find(std::uint64_t txn) {
    const auto it = index_.find(txn);
    return it == index_.end() ? nullptr : &txns_[it->second];
  }

  // Applies one record; returns why it breaks the protocol, or "" when applied (or informational).
  [[nodiscard]] std::string apply(const JournalRecord& rec) {
    max_txn_ = std::max(max_txn_, rec.txn());
    if (const auto* b = std::get_if<BeginRecord>(&rec.body)) {
      const std::uint64_t last = last_begin_;
      last_begin_ = std::max(last_begin_, b->txn);
      if (b->txn == 0) return "txn id 0 is never used";
      if (b->txn <= last) return "txn ids must increase, the previous BEGIN had txn " + std::to_string(last);
      if (has_open_) return "txn " + std::to_string(open_) + " is still open (one transaction at a time)";
      TxnInfo t;
      t.txn = b->txn;
      t.step = b->step;
      t.world_size = b->world_size;
      t.files = b->files;
      t.begin_offset = rec.offset;
      index_.insert({t.txn, txns_.size()});
      txns_.push_back(std::move(t));
      has_open_ = true;
      open_ = b->txn;
      return "";
    }
    const std::uint64_t id = rec.txn();
    if (const auto* v = std::get_if<SaveRecord>(&rec.body)) {
      // Informational (spec 4.8): kept with the commit it follows in its group, never a protocol problem.
      TxnInfo* t = find(id);
      if (t != nullptr && t->state == TxnState::committed && t->step == v->step && !t->save) t->save = *v;
      return "";
    }
    const auto* c = std::get_if<CommitRecord>(&rec.body);
    const auto* a = std::get_if<AbortRecord>(&rec.body);
    const auto* r = std::get_if<RetireRecord>(&rec.body);
    if (c == nullptr && a == nullptr && r == nullptr) return "";  // header, ignorable types
    TxnInfo* t = find(id);
    if (t == nullptr) return "no BEGIN for txn " + std::to_string(id);
    const std::uint64_t step = c ? c->step : a ? a->step : r->step;
    if (step != t->step) return "BEGIN of txn " + std::to_string(id) + " says step " + std::to_string(t->step);
    if (r != nullptr) {
      if (t->state != TxnState::committed)
        return "txn " + std::to_string(id) + " is " + txn_state_name(t->state) + ", only a committed step can be retired";
      t->state = TxnState::retired;
      t->retire_offset = rec.offset;
      return "";
    }
    if (t->state != TxnState::open) return "txn " + std::to_string(id) + " is already " + txn_state_name(t->state);
    t->end_offset = rec.offset;
    if (c != nullptr) {
      t->state = TxnState::committed;
      t->commit = *c;
    } else {
      t->state = TxnState::aborted;
      t->abort_reason = a->reason;
    }
    has_open_ = false;
    return "";
  }

 private:
  std::vector<TxnInfo>& txns_;
  std::uint64_t& max_txn_;
  std::map<std::uint64_t, std::size_t> index_;
  bool has_open_ = false;
  std::uint64_t open_ = 0;  // the open transaction, when has_open_
  std::uint64_t last_begin_ = 0;
};

// The step a transaction is, with the manifest size and digest of commit c (its COMMIT, or one implied).
[[nodiscard]] CKPT_INLINE StepInfo step_of(const TxnInfo& t, const CommitRecord& c) {
  StepInfo info;
  info.step = t.step;
  info.txn = t.txn;
  info.world_size = t.world_size;
  info.dir = t.dir();
  info.files = t.files;
  info.manifest_size = c.manifest_size;
  info.manifest_digest = c.manifest_digest;
  return info;
}

// What the MANIFEST of an open transaction says (spec 6.4): the COMMIT the step would have (its size and
// digest), and whether it is the complete manifest of this transaction, as the writer fsynced it before
// any COMMIT could be written (its own digest, txn and step check out).
struct ManifestEvidence {
  CommitRecord commit;
  Status complete;  // ok: a whole manifest of this transaction; else why not
};

[[nodiscard]] CKPT_INLINE Result<ManifestEvidence> read_manifest_evidence(FsRef fs, const std::string& manifest_path, const TxnInfo& t) {
  auto file = fs.open(manifest_path, OpenMode::read);
  if (!file.ok()) return file.status();
  ScopedFile scoped(fs, *file);
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t size, fs.file_size(scoped.get()));
  ManifestEvidence e;
  if (size > manifest::kMaxSize) {
    e.complete = make_error(Code::corrupt, manifest_path + ": " + std::to_string(size) + " bytes, over the manifest limit");
    return e;
  }
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  CKPT_TRY(read_exact(fs, scoped.get(), manifest_path, bytes.data(), bytes.size(), 0));
  e.commit = CommitRecord{t.txn, t.step, size, manifest_digest(bytes.data(), bytes.size())};
  auto m = decode_manifest(bytes.data(), bytes.size(), manifest_path);
  if (!m.ok()) e.complete = m.status();
  else if (m->txn != t.txn || m->step != t.step)
    e.complete = make_error(Code::corrupt, manifest_path + ": names txn " + std::to_string(m->txn) + " step " +
                                               std::to_string(m->step) + ", its BEGIN says txn " + std::to_string(t.txn) +
                                               " step " + std::to_string(t.step));
  return e;
}

// Whether the files of transaction t prove the step `c` describes complete: the MANIFEST matches c, its
// shards match the manifest, and every chunk of every shard verifies (spec 6.4). Ok, or why not.
[[nodiscard]] CKPT_INLINE Status verify_step_files(FsRef fs, const std::string& store, const Uuid& store_uuid, const TxnInfo& t,
                                       const CommitRecord& c) {
  const StepInfo info = step_of(t, c);
  auto reader = StepReader::open(fs, store, info, store_uuid);
  if (!reader.ok()) return reader.status();
  for (const auto& f : t.files) {
    const std::string path = join_path(join_path(store, info.dir), f.name);
    CKPT_ASSIGN_OR_RETURN(VerifyReport v, verify_file(fs, path));
    if (!v.ok())
      return make_error(v.problems.front().code, path + ": " + std::to_string(v.problems.size()) + " problems, the first: " +
                                                     v.problems.front().message);
  }
  return Status();
}

// The kind of a store entry, without following a symlink; `exists` is false when it vanished. (Not a
// std::optional<EntryKind>: its instantiation for this one use costs header-only parse time, spec/LAYOUT.md 5.)
struct EntryState {
  bool exists = false;
  EntryKind kind = EntryKind::other;
  [[nodiscard]] bool is(EntryKind k) const noexcept { return exists && kind == k; }
};
[[nodiscard]] CKPT_INLINE EntryState entry_kind(FsRef fs, const std::string& path) {
  auto info = fs.stat(path);
  if (!info.ok()) return EntryState{};
  return EntryState{true, info->kind};
}

// Plans the removal of what an aborted or retired transaction created: only the files its BEGIN named
// and its MANIFEST, then the directory if nothing else is in it (spec 6.4, rule R7).
CKPT_INLINE void plan_removal(FsRef fs, const std::string& store, const TxnInfo& t, std::vector<RecoveryAction>& actions,
                  std::vector<std::string>& notes) {
  const std::string dir = join_path(store, t.dir());
  auto entries = fs.list_dir(dir);
  if (!entries.ok()) {
    if (entries.status().code() != Code::not_found)
      notes.push_back("cannot list " + dir + " of txn " + std::to_string(t.txn) + ": " + entries.status().message());
    return;
  }
  std::set<std::string> named{std::string(journal::kManifestName)};
  for (const auto& f : t.files) named.insert(f.name);
  std::vector<std::string> names = *entries;
  std::sort(names.begin(), names.end());
  std::vector<std::string> kept;
  for (const auto& name : names) {
    // Only a regular file is removed; a symlink or special file under a named name is kept and reported.
    if (named.count(name) != 0 && entry_kind(fs, join_path(dir, name)).is(EntryKind::file)) {
      RecoveryAction a;
      a.kind = RecoveryActionKind::remove_file;
      a.path = join_path(dir, name);
      a.txn = t.txn;
      actions.push_back(std::move(a));
    } else {
      kept.push_back(name);
    }
  }
  if (kept.empty()) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::remove_dir;
    a.path = dir;
    a.txn = t.txn;
    actions.push_back(std::move(a));
  } else {
    std::string list;
    for (const auto& k : kept) list += (list.empty() ? "" : ", ") + k;
    notes.push_back("kept " + dir + " (txn " + std::to_string(t.txn) + ", " + txn_state_name(t.state) +
                    "): it holds files no journal record names: " + list);
  }
}

// Carries out removals and directory syncs; failures are recorded in the actions, never fatal.
CKPT_INLINE void run_removals(FsRef fs, std::vector<RecoveryAction>& actions, std::size_t first) {
  for (std::size_t i = first; i < actions.size(); ++i) {
    auto& a = actions[i];
    Status s;
    switch (a.kind) {
      case RecoveryActionKind::remove_file: s = fs.unlink(a.path); break;
      case RecoveryActionKind::remove_dir: s = fs.rmdir(a.path); break;
      case RecoveryActionKind::sync_dir: s = fs.sync_dir(a.path); break;
      default: continue;
    }
    if (s.ok() || (s.code() == Code::not_found && a.kind != RecoveryActionKind::sync_dir)) a.done = true;
    else a.error = s.message();
  }
}

// Applies the digest-valid records of a damaged tail that check out (spec 6.4): BEGIN, ABORT and RETIRE
// when the protocol allows them, COMMIT only when its MANIFEST and shards verify. Evidence is used
// wherever it sits; what does not check out is noted and left to the rules for open transactions.
CKPT_INLINE void salvage_tail(FsRef fs, const std::string& store, TxnTable& table, const JournalDamage& tail, const Uuid& store_uuid,
                  RecoveryReport& report) {
  for (const auto& rec : tail.unapplied) {
    if (const auto* c = std::get_if<CommitRecord>(&rec.body)) {
      const TxnInfo* t = table.find(c->txn);
      if (t != nullptr && t->state == TxnState::open && t->step == c->step) {
        Status v = verify_step_files(fs, store, store_uuid, *t, *c);
        if (!v.ok()) {
          report.notes.push_back("not applied from the damaged tail: " + rec.describe() + ": " + v.message());
          continue;
        }
      }
    }
    std::string why = table.apply(rec);
    if (why.empty()) {
      if (!std::holds_alternative<SaveRecord>(rec.body)) report.salvaged.push_back(rec.describe());
    } else {
      report.notes.push_back("not applied from the damaged tail: " + rec.describe() + ": " + why);
    }
  }
}

// Fills the transaction table, unknown entries, next txn id and (unless corrupt) the plan.
[[nodiscard]] CKPT_INLINE Status plan_recovery(FsRef fs, const std::string& store, RecoveryReport& report) {
  std::uint64_t max_txn = 0;
  const Uuid& uuid = report.journal.header.store_uuid;
  TxnTable table(report.transactions, max_txn);
  for (const auto& rec : report.journal.records) {
    std::string why = table.apply(rec);
    if (why.empty()) continue;
    Problem p;  // a record that checks out and breaks the protocol (spec 6.6): where it is in the journal
    p.region = "journal";
    p.file = report.journal.path;
    p.offset = rec.offset;
    p.length = rec.size;
    p.message = report.journal.path + ": " + rec.describe() + ": " + why;
    report.problems.push_back(std::move(p));
  }
  // Ids below the header's floor were spent by transactions compaction dropped (spec 4.1).
  if (report.journal.header.txn_floor > 0) max_txn = std::max(max_txn, report.journal.header.txn_floor - 1);
  // Ids seen only in damaged bytes still count: an id that may have reached disk is never reused (spec 5.6).
  for (const auto& d : report.journal.corruption)
    for (const auto& r : d.unapplied) max_txn = std::max(max_txn, r.txn());
  if (report.journal.torn_tail) {
    for (const auto& r : report.journal.torn_tail->unapplied) max_txn = std::max(max_txn, r.txn());
    if (!report.corrupt()) salvage_tail(fs, store, table, *report.journal.torn_tail, uuid, report);
  }

  auto listing = fs.list_dir(store);
  if (!listing.ok()) return listing.status().with_context("cannot list store");
  std::vector<std::string> entries = *listing;
  std::sort(entries.begin(), entries.end());
  std::set<std::string> known_dirs;
  for (const auto& t : report.transactions) known_dirs.insert(t.dir());
  std::set<std::string> present;  // step directories that are directories, not symlinks to one
  std::vector<std::string> temps;
  for (const auto& name : entries) {
    if (name == journal::kJournalName || name == journal::kLockName) continue;
    const auto kind = entry_kind(fs, join_path(store, name));
    // quarantine/ (6.8) and slots/ (10.1, free space) are the store's own, never steps.
    if ((name == journal::kQuarantineName || name == journal::kSlotsName) && kind.is(EntryKind::directory)) continue;
    if (name.rfind(std::string(journal::kJournalTempPrefix), 0) == 0 && kind.is(EntryKind::file)) {
      temps.push_back(name);  // a rewrite that never reached its rename: a copy of records, never the journal
      continue;
    }
    std::uint64_t step = 0, txn = 0;
    if (parse_step_dir_name(name, step, txn)) max_txn = std::max(max_txn, txn);
    if (known_dirs.count(name) != 0 && kind.is(EntryKind::directory)) present.insert(name);
    else report.unknown_entries.push_back(name);  // never followed, never removed (spec 6.8)
  }
  report.next_txn = max_txn + 1;
  for (auto& t : report.transactions) {
    t.dir_present = present.count(t.dir()) != 0;
    if (t.state == TxnState::committed && !t.dir_present)
      report.notes.push_back("committed step " + std::to_string(t.step) + " (txn " + std::to_string(t.txn) +
                             "): its directory " + t.dir() + " is missing");
  }
  if (report.corrupt()) return Status();  // nothing is changed in a corrupt store (spec 6.3)

  if (report.journal.torn_tail) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::truncate_journal;
    a.path = report.journal.path;
    a.offset = report.journal.end;
    a.length = report.journal.file_size - report.journal.end;
    report.actions.push_back(std::move(a));
  }
  std::vector<std::uint64_t> kept;  // rolled forward or quarantined: nothing of theirs is removed (few)
  std::vector<RecoveryAction> moves;
  for (const auto& t : report.transactions) {
    if (t.state != TxnState::open) continue;
    RecoveryAction a;
    a.path = report.journal.path;
    a.txn = t.txn;
    const std::string dir = join_path(store, t.dir());
    const std::string manifest = join_path(dir, std::string(journal::kManifestName));
    const EntryState kind = t.dir_present ? entry_kind(fs, manifest) : EntryState{};
    if (!kind.exists) {
      // No MANIFEST: the transaction never reached step 4 of the commit protocol, so no COMMIT can
      // exist for it (R3): it is provably uncommitted (spec 6.4).
      a.kind = RecoveryActionKind::append_abort;
      report.actions.push_back(std::move(a));
      continue;
    }
    // A MANIFEST exists. A complete one was fsynced before any COMMIT could be written, so the COMMIT
    // may exist and have been lost to damage: roll forward when every byte checks out, else keep the
    // files aside for a person (spec 6.4, 6.8). An incomplete one is what a crash inside step 4 leaves:
    // uncommitted, unless the journal's tail is damaged too, which makes it ambiguous.
    Status why;
    bool ambiguous = false;
    if (kind.kind == EntryKind::file) {
      auto e = read_manifest_evidence(fs, manifest, t);
      if (!e.ok()) {
        why = e.status();
        ambiguous = true;
      } else if (e->complete.ok()) {
        why = verify_step_files(fs, store, uuid, t, e->commit);
        if (why.ok()) {
          a.kind = RecoveryActionKind::append_commit;
          a.commit = e->commit;
          report.actions.push_back(std::move(a));
          kept.push_back(t.txn);
          continue;
        }
        ambiguous = true;
      } else {
        why = e->complete;
        ambiguous = report.tail_damaged();
      }
    }
    a.kind = RecoveryActionKind::append_abort;
    report.actions.push_back(std::move(a));
    if (!ambiguous) continue;
    RecoveryAction m;
    m.kind = RecoveryActionKind::quarantine;
    m.path = dir;
    m.to = join_path(join_path(store, std::string(journal::kQuarantineName)), t.dir());
    m.txn = t.txn;
    moves.push_back(std::move(m));
    kept.push_back(t.txn);
    report.notes.push_back("txn " + std::to_string(t.txn) + " (step " + std::to_string(t.step) +
                           ") has a MANIFEST but is not provably complete or provably uncommitted, so its directory "
                           "goes to quarantine/: " + why.message());
  }
  {
    RecoveryAction a;
    a.kind = RecoveryActionKind::rewrite_journal;
    a.path = report.journal.path;
    report.actions.push_back(std::move(a));
  }
  for (auto& m : moves) report.actions.push_back(std::move(m));
  const std::size_t before = report.actions.size();
  for (const auto& name : temps) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::remove_file;
    a.path = join_path(store, name);
    report.actions.push_back(std::move(a));
  }
  for (const auto& t : report.transactions)
    if (t.state != TxnState::committed && t.dir_present && std::find(kept.begin(), kept.end(), t.txn) == kept.end())
      plan_removal(fs, store, t, report.actions, report.notes);
  if (report.actions.size() > before || !moves.empty()) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::sync_dir;
    a.path = store;
    report.actions.push_back(std::move(a));
  }
  return Status();
}

// The records a rewritten journal keeps (spec 5.7): every committed step's BEGIN, COMMIT and SAVE_STATS;
// an aborted or retired transaction's while its directory may exist, so a later recovery still removes
// it; and the last few retired saves for their SAVE_STATS. `which` says what each record is, so the
// caller can point each TxnInfo at its new offsets: 0 BEGIN, 1 COMMIT or ABORT, 2 RETIRE, 3 SAVE_STATS.
struct CompactedRecord {
  std::size_t txn_index = 0;
  int which = 0;
};

[[nodiscard]] CKPT_INLINE Result<std::vector<std::vector<PendingRecord>>> compacted_records(const std::vector<TxnInfo>& txns,
                                                                                       std::vector<CompactedRecord>& what) {
  std::vector<std::vector<PendingRecord>> groups;
  std::size_t history = 0;
  std::vector<bool> keep(txns.size(), false);
  for (std::size_t i = txns.size(); i-- > 0;) {
    const TxnInfo& t = txns[i];
    if (t.state == TxnState::open)
      return make_error(Code::invalid_argument, "txn " + std::to_string(t.txn) + " is open: the journal cannot be rewritten now");
    // Live steps, whatever may still have files, and the newest few others for their history.
    keep[i] = t.state == TxnState::committed || t.dir_present || history < journal::kCompactKeepHistory;
    if (t.state != TxnState::committed && !t.dir_present && keep[i]) ++history;
  }
  for (std::size_t i = 0; i < txns.size(); ++i) {
    if (!keep[i]) continue;
    const TxnInfo& t = txns[i];
    std::vector<PendingRecord> out;  // one group per transaction (spec 5.7)
    BeginRecord b;
    b.txn = t.txn;
    b.step = t.step;
    b.world_size = t.world_size;
    b.files = t.files;
    CKPT_ASSIGN_OR_RETURN(PendingRecord begin, begin_record(b));
    out.push_back(std::move(begin));
    what.push_back({i, 0});
    if (t.state == TxnState::aborted) {
      out.push_back(abort_record(AbortRecord{t.txn, t.step, t.abort_reason}));
      what.push_back({i, 1});
    } else {
      out.push_back(commit_record(t.commit));
      what.push_back({i, 1});
      if (t.save) {
        out.push_back(save_stats_record(*t.save));
        what.push_back({i, 3});
      }
      if (t.state == TxnState::retired) {
        out.push_back(retire_record(RetireRecord{t.txn, t.step}));
        what.push_back({i, 2});
      }
    }
    groups.push_back(std::move(out));
  }
  return groups;
}

// Rewrites the journal from the transaction table (spec 5.7) and reopens the writer on the new file.
// The txn floor in the new header keeps every id ever spent unusable.
[[nodiscard]] CKPT_INLINE Status rewrite_journal(FsRef fs, JournalWriter& journal, const Uuid& uuid, std::uint64_t next_txn,
                                     std::vector<TxnInfo>& txns) {
  std::vector<CompactedRecord> what;
  CKPT_ASSIGN_OR_RETURN(auto records, compacted_records(txns, what));
  JournalHeader header;
  header.store_uuid = uuid;
  header.txn_floor = next_txn;
  std::vector<std::uint64_t> offsets;
  const std::string path = journal.path();
  // Any failure poisons the writer: after a rename it may hold the replaced file (spec 5.4).
  auto end = JournalWriter::rewrite(fs, path, header, records, &offsets);
  if (!end.ok()) return journal.poison(end.status());
  auto reopened = JournalWriter::open(fs, path, *end);
  if (!reopened.ok()) return journal.poison(reopened.status());
  journal = std::move(reopened).value();
  std::vector<bool> kept(txns.size(), false);
  for (std::size_t k = 0; k < what.size(); ++k) {
    TxnInfo& t = txns[what[k].txn_index];
    kept[what[k].txn_index] = true;
    switch (what[k].which) {
      case 0: t.begin_offset = offsets[k]; break;
      case 1: t.end_offset = offsets[k]; break;
      case 2: t.retire_offset = offsets[k]; break;
      default: break;
    }
  }
  std::size_t n = 0;
  for (std::size_t i = 0; i < txns.size(); ++i) {
    if (!kept[i]) continue;
    if (n != i) txns[n] = std::move(txns[i]);
    ++n;
  }
  txns.resize(n);
  return Status();
}

[[nodiscard]] CKPT_INLINE Result<RecoveryReport> scan_and_plan(FsRef fs, const std::string& store, FileHandle journal_file) {
  RecoveryReport report;
  report.store = store;
  CKPT_ASSIGN_OR_RETURN(report.journal, scan_journal(fs, journal_file, join_path(store, std::string(journal::kJournalName))));
  CKPT_TRY(plan_recovery(fs, store, report));
  return report;
}

// Moves a step directory into quarantine/ (spec 6.8): created on first use and made durable first.
[[nodiscard]] CKPT_INLINE Status quarantine_dir(FsRef fs, const std::string& store, const RecoveryAction& a) {
  const std::string q = join_path(store, std::string(journal::kQuarantineName));
  Status s = fs.mkdir(q);
  if (s.ok()) s = fs.sync_dir(store);
  else if (s.code() == Code::conflict) s = Status();
  CKPT_TRY(s);
  CKPT_TRY(fs.rename(a.path, a.to));
  CKPT_TRY(fs.sync_dir(q));
  return fs.sync_dir(store);
}

// Runs a plan: the journal is rewritten first, holding the plan's decisions (ABORT or roll-forward
// COMMIT for open transactions, salvaged records, no torn tail), then quarantine moves and removals.
// The rewrite also makes durable whatever the page cache showed of the old journal, so nothing an
// earlier failed fsync left behind is trusted (spec 5.4). Journal failures are fatal.
[[nodiscard]] CKPT_INLINE Status apply_recovery(FsRef fs, JournalWriter& journal, RecoveryReport& report) {
  report.dry_run = false;
  if (report.corrupt()) return report.corruption_status();
  std::size_t i = 0;
  for (; i < report.actions.size(); ++i) {
    auto& a = report.actions[i];
    if (a.kind == RecoveryActionKind::truncate_journal) continue;
    if (a.kind != RecoveryActionKind::append_abort && a.kind != RecoveryActionKind::append_commit) break;
    for (auto& t : report.transactions) {
      if (t.txn != a.txn) continue;
      if (a.kind == RecoveryActionKind::append_commit) {
        t.state = TxnState::committed;
        t.commit = a.commit;
      } else {
        t.state = TxnState::aborted;
        t.abort_reason = AbortReason::recovery;
      }
    }
  }
  if (i < report.actions.size() && report.actions[i].kind == RecoveryActionKind::rewrite_journal) {
    Status s = rewrite_journal(fs, journal, report.journal.header.store_uuid, report.next_txn, report.transactions);
    if (!s.ok()) {
      for (std::size_t k = 0; k <= i; ++k) report.actions[k].error = s.message();
      return s.with_context("recovery");
    }
    for (std::size_t k = 0; k <= i; ++k) report.actions[k].done = true;
    ++i;
  }
  const std::string store = parent_path(journal.path());
  for (; i < report.actions.size() && report.actions[i].kind == RecoveryActionKind::quarantine; ++i) {
    auto& a = report.actions[i];
    Status s = quarantine_dir(fs, store, a);
    if (s.ok()) a.done = true;
    else a.error = s.message();
    for (auto& t : report.transactions)
      if (t.txn == a.txn && s.ok()) t.dir_present = false;
  }
  run_removals(fs, report.actions, i);
  for (auto& t : report.transactions)
    for (const auto& a : report.actions)
      if (a.txn == t.txn && a.kind == RecoveryActionKind::remove_dir && a.done) t.dir_present = false;
  report.applied = true;
  return Status();
}

}  // namespace detail

CKPT_INLINE Result<RecoveryReport> check_store(FsRef fs, const std::string& path) {
  const std::string journal_path = join_path(path, std::string(journal::kJournalName));
  auto file = fs.open(journal_path, OpenMode::read);
  if (!file.ok()) {
    if (file.status().code() == Code::not_found)
      return make_error(Code::not_found, path + ": not a ckpt store (no JOURNAL)");
    return file.status();
  }
  ScopedFile scoped(fs, *file);
  return detail::scan_and_plan(fs, path, scoped.get());
}

CKPT_INLINE Result<RecoveryReport> recover_store(FsRef fs, const std::string& path, bool dry_run) {
  auto lock = fs.lock(join_path(path, std::string(journal::kLockName)));
  if (!lock.ok()) return lock.status();
  ScopedFile lock_guard(fs, *lock);
  const std::string journal_path = join_path(path, std::string(journal::kJournalName));
  auto file = fs.open(journal_path, dry_run ? OpenMode::read : OpenMode::read_write);
  if (!file.ok()) {
    if (file.status().code() == Code::not_found)
      return make_error(Code::not_found, path + ": not a ckpt store (no JOURNAL)");
    return file.status();
  }
  auto report = detail::scan_and_plan(fs, path, *file);
  if (!report.ok() || dry_run || report->corrupt()) {
    fs.close(*file).ignore_error();  // nothing was written through it
    return report;
  }
  JournalWriter writer(fs, journal_path, *file, report->journal.end);
  CKPT_TRY(detail::apply_recovery(fs, writer, *report));
  return report;
}

}  // namespace ckpt
