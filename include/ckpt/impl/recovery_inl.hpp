// ckpt: store recovery (spec/JOURNAL.md 6.4 and 6.6): the transaction table built from the journal,
// the plan (a pure function of journal bytes and directory contents) and its execution.
#pragma once

#include <algorithm>
#include <set>

namespace ckpt {

inline const char* txn_state_name(TxnState s) noexcept {
  switch (s) {
    case TxnState::open: return "open";
    case TxnState::committed: return "committed";
    case TxnState::aborted: return "aborted";
    case TxnState::retired: return "retired";
  }
  return "unknown";
}

inline const char* recovery_action_name(RecoveryActionKind k) noexcept {
  switch (k) {
    case RecoveryActionKind::truncate_journal: return "truncate_journal";
    case RecoveryActionKind::append_abort: return "append_abort";
    case RecoveryActionKind::remove_file: return "remove_file";
    case RecoveryActionKind::remove_dir: return "remove_dir";
    case RecoveryActionKind::sync_dir: return "sync_dir";
  }
  return "unknown";
}

inline std::string RecoveryAction::describe() const {
  std::string s = recovery_action_name(kind);
  switch (kind) {
    case RecoveryActionKind::truncate_journal:
      s += " " + path + " at offset " + std::to_string(offset) + " (" + std::to_string(length) + " torn bytes)";
      break;
    case RecoveryActionKind::append_abort: s += " txn " + std::to_string(txn); break;
    default: s += " " + path; break;
  }
  if (!error.empty()) s += ": failed: " + error;
  return s;
}

inline Status RecoveryReport::corruption_status() const {
  if (!corrupt()) return Status();
  std::string msg = journal.corruption_summary();
  for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p;
  return make_error(Code::corrupt, msg + "; the store cannot be opened for writing: run ckpt-repair on " + store);
}

namespace detail {

// The transaction table of a log; valid records that break the protocol become problems (spec 6.6).
inline void build_transactions(const std::vector<JournalRecord>& records, const std::string& path,
                               std::vector<TxnInfo>& txns, std::vector<std::string>& problems, std::uint64_t& max_txn) {
  std::map<std::uint64_t, std::size_t> index;
  bool has_open = false;
  std::uint64_t open = 0;  // the open transaction, when has_open
  std::uint64_t last_begin = 0;
  for (const auto& rec : records) {
    const std::string at = path + ": " + rec.describe() + ": ";
    max_txn = std::max(max_txn, rec.txn());
    if (const auto* b = std::get_if<BeginRecord>(&rec.body)) {
      if (b->txn == 0) {
        problems.push_back(at + "txn id 0 is never used");
      } else if (b->txn <= last_begin) {
        problems.push_back(at + "txn ids must increase, the previous BEGIN had txn " + std::to_string(last_begin));
      } else if (has_open) {
        problems.push_back(at + "txn " + std::to_string(open) + " is still open (one transaction at a time)");
      } else {
        TxnInfo t;
        t.txn = b->txn;
        t.step = b->step;
        t.world_size = b->world_size;
        t.files = b->files;
        t.begin_offset = rec.offset;
        index.emplace(t.txn, txns.size());
        txns.push_back(std::move(t));
        has_open = true;
        open = b->txn;
      }
      last_begin = std::max(last_begin, b->txn);
      continue;
    }
    const std::uint64_t id = rec.txn();
    if (const auto* v = std::get_if<SaveRecord>(&rec.body)) {
      // Informational (spec 4.8): kept with the commit it follows in its group, never a protocol problem.
      const auto it = index.find(id);
      if (it != index.end() && txns[it->second].state == TxnState::committed && txns[it->second].step == v->step &&
          !txns[it->second].save)
        txns[it->second].save = *v;
      continue;
    }
    const auto* c = std::get_if<CommitRecord>(&rec.body);
    const auto* a = std::get_if<AbortRecord>(&rec.body);
    const auto* r = std::get_if<RetireRecord>(&rec.body);
    if (c == nullptr && a == nullptr && r == nullptr) continue;  // header, ignorable types
    const auto it = index.find(id);
    if (it == index.end()) {
      problems.push_back(at + "no BEGIN for txn " + std::to_string(id));
      continue;
    }
    TxnInfo& t = txns[it->second];
    const std::uint64_t step = c ? c->step : a ? a->step : r->step;
    if (step != t.step) {
      problems.push_back(at + "BEGIN of txn " + std::to_string(id) + " says step " + std::to_string(t.step));
      continue;
    }
    if (r != nullptr) {
      if (t.state != TxnState::committed) {
        problems.push_back(at + "txn " + std::to_string(id) + " is " + txn_state_name(t.state) + ", only a committed step can be retired");
        continue;
      }
      t.state = TxnState::retired;
      t.retire_offset = rec.offset;
      continue;
    }
    if (t.state != TxnState::open) {
      problems.push_back(at + "txn " + std::to_string(id) + " is already " + txn_state_name(t.state));
      continue;
    }
    t.end_offset = rec.offset;
    if (c != nullptr) {
      t.state = TxnState::committed;
      t.commit = *c;
    } else {
      t.state = TxnState::aborted;
      t.abort_reason = a->reason;
    }
    has_open = false;
  }
}

// Plans the removal of what an aborted or retired transaction created: only the files its BEGIN named
// and its MANIFEST, then the directory if nothing else is in it (spec 6.4, rule R7).
template <class Fs>
void plan_removal(Fs& fs, const std::string& store, const TxnInfo& t, std::vector<RecoveryAction>& actions,
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
    if (named.count(name) != 0) {
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
template <class Fs>
void run_removals(Fs& fs, std::vector<RecoveryAction>& actions, std::size_t first) {
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

// Fills the transaction table, unknown entries, next txn id and (unless corrupt) the plan.
template <class Fs>
[[nodiscard]] Status plan_recovery(Fs& fs, const std::string& store, RecoveryReport& report) {
  std::uint64_t max_txn = 0;
  build_transactions(report.journal.records, report.journal.path, report.transactions, report.problems, max_txn);
  // Ids seen only in damaged bytes still count: an id that may have reached disk is never reused (spec 5.6).
  for (const auto& d : report.journal.corruption)
    for (const auto& r : d.unapplied) max_txn = std::max(max_txn, r.txn());
  if (report.journal.torn_tail)
    for (const auto& r : report.journal.torn_tail->unapplied) max_txn = std::max(max_txn, r.txn());

  auto listing = fs.list_dir(store);
  if (!listing.ok()) return listing.status().with_context("cannot list store");
  std::vector<std::string> entries = *listing;
  std::sort(entries.begin(), entries.end());
  std::set<std::string> known_dirs;
  for (const auto& t : report.transactions) known_dirs.insert(t.dir());
  std::set<std::string> present;
  for (const auto& name : entries) {
    present.insert(name);
    if (name == journal::kJournalName || name == journal::kLockName) continue;
    std::uint64_t step = 0, txn = 0;
    if (parse_step_dir_name(name, step, txn)) max_txn = std::max(max_txn, txn);
    if (known_dirs.count(name) == 0) report.unknown_entries.push_back(name);
  }
  report.next_txn = max_txn + 1;
  for (const auto& t : report.transactions)
    if (t.state == TxnState::committed && present.count(t.dir()) == 0)
      report.notes.push_back("committed step " + std::to_string(t.step) + " (txn " + std::to_string(t.txn) +
                             "): its directory " + t.dir() + " is missing");
  if (report.corrupt()) return Status();  // nothing is changed in a corrupt store (spec 6.3)

  if (report.journal.torn_tail) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::truncate_journal;
    a.path = report.journal.path;
    a.offset = report.journal.end;
    a.length = report.journal.file_size - report.journal.end;
    report.actions.push_back(std::move(a));
  }
  for (const auto& t : report.transactions) {
    if (t.state != TxnState::open) continue;
    RecoveryAction a;
    a.kind = RecoveryActionKind::append_abort;
    a.path = report.journal.path;
    a.txn = t.txn;
    report.actions.push_back(std::move(a));
  }
  const std::size_t before = report.actions.size();
  for (const auto& t : report.transactions)
    if (t.state != TxnState::committed && present.count(t.dir()) != 0)
      plan_removal(fs, store, t, report.actions, report.notes);
  if (report.actions.size() > before) {
    RecoveryAction a;
    a.kind = RecoveryActionKind::sync_dir;
    a.path = store;
    report.actions.push_back(std::move(a));
  }
  return Status();
}

template <class Fs>
[[nodiscard]] Result<RecoveryReport> scan_and_plan(Fs& fs, const std::string& store, FileHandle journal_file) {
  RecoveryReport report;
  report.store = store;
  CKPT_ASSIGN_OR_RETURN(report.journal, scan_journal(fs, journal_file, join_path(store, std::string(journal::kJournalName))));
  CKPT_TRY(plan_recovery(fs, store, report));
  return report;
}

// Runs a plan: truncate, one ABORT group, removals, directory sync. Journal failures are fatal.
template <class Fs>
[[nodiscard]] Status apply_recovery(Fs& fs, JournalWriter<Fs>& journal, RecoveryReport& report) {
  report.dry_run = false;
  if (report.corrupt()) return report.corruption_status();
  std::vector<PendingRecord> aborts;
  std::vector<std::size_t> abort_actions;
  std::size_t i = 0;
  for (; i < report.actions.size(); ++i) {
    auto& a = report.actions[i];
    if (a.kind == RecoveryActionKind::truncate_journal) {
      Status s = journal.truncate_tail(a.offset);
      if (!s.ok()) {
        a.error = s.message();
        return s.with_context("recovery");
      }
      a.done = true;
    } else if (a.kind == RecoveryActionKind::append_abort) {
      const auto it = std::find_if(report.transactions.begin(), report.transactions.end(),
                                   [&](const TxnInfo& t) { return t.txn == a.txn; });
      aborts.push_back(abort_record(AbortRecord{a.txn, it->step, AbortReason::recovery}));
      abort_actions.push_back(i);
    } else {
      break;
    }
  }
  if (!aborts.empty()) {
    // ABORT before any removal: once durable, the files are provably part of an aborted transaction (R7).
    Status s = journal.append_group(aborts);
    if (!s.ok()) {
      for (const auto k : abort_actions) report.actions[k].error = s.message();
      return s.with_context("recovery");
    }
    for (std::size_t k = 0; k < abort_actions.size(); ++k) {
      auto& a = report.actions[abort_actions[k]];
      a.done = true;
      for (auto& t : report.transactions)
        if (t.txn == a.txn) {
          t.state = TxnState::aborted;
          t.abort_reason = AbortReason::recovery;
          t.end_offset = journal.last_offsets()[k];
        }
    }
  }
  run_removals(fs, report.actions, i);
  report.applied = true;
  return Status();
}

}  // namespace detail

template <class Fs>
Result<RecoveryReport> check_store(Fs& fs, const std::string& path) {
  const std::string journal_path = join_path(path, std::string(journal::kJournalName));
  auto file = fs.open(journal_path, OpenMode::read);
  if (!file.ok()) {
    if (file.status().code() == Code::not_found)
      return make_error(Code::not_found, path + ": not a ckpt store (no JOURNAL)");
    return file.status();
  }
  ScopedFile<Fs> scoped(fs, *file);
  return detail::scan_and_plan(fs, path, scoped.get());
}

template <class Fs>
Result<RecoveryReport> recover_store(Fs& fs, const std::string& path, bool dry_run) {
  auto lock = fs.lock(join_path(path, std::string(journal::kLockName)));
  if (!lock.ok()) return lock.status();
  ScopedFile<Fs> lock_guard(fs, *lock);
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
  JournalWriter<Fs> writer(fs, journal_path, *file, report->journal.end);
  CKPT_TRY(detail::apply_recovery(fs, writer, *report));
  return report;
}

}  // namespace ckpt
