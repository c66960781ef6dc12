// ckpt: definitions of store/journal_log.hpp (spec/JOURNAL.md 5 and 6).
#pragma once

#include "../journal_log.hpp"

#include <algorithm>

namespace ckpt {

CKPT_INLINE JournalLog::JournalLog(FsRef fs, std::string path) : fs_(fs), path_(std::move(path)) {
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
}

CKPT_INLINE JournalLog::~JournalLog() {
  journal_.reset();
  if (lock_.valid()) fs_.close(lock_).ignore_error();  // releases the writer lock
}

CKPT_INLINE Result<RecoveryReport> JournalLog::open_writer(const StoreOptions& options) {
  reuse_files_ = options.reuse_files;
  auto info = fs_.stat(path_);
  if (!info.ok()) {
    if (info.status().code() != Code::not_found || !options.create_if_missing) return info.status().with_context("store");
    Status s = fs_.mkdir(path_);
    if (!s.ok() && s.code() != Code::conflict) return s;
    // The new directory's entry must be durable before anything inside it matters (R3).
    CKPT_TRY(fs_.sync_dir(parent_path(path_)));
  } else if (!info->is_dir) {
    return make_error(Code::invalid_argument, path_ + ": not a directory");
  }
  auto lock = fs_.lock(join_path(path_, std::string(journal::kLockName)));
  if (!lock.ok()) {
    if (lock.status().code() == Code::conflict)
      return make_error(Code::conflict, path_ + ": another writer has this store open (LOCK is held); open it read-only to read");
    return lock.status();
  }
  lock_ = *lock;
  const std::string journal_path = join_path(path_, std::string(journal::kJournalName));
  auto journal_info = fs_.stat(journal_path);
  if (!journal_info.ok()) {
    if (journal_info.status().code() != Code::not_found) return journal_info.status();
    if (!options.create_if_missing)
      return make_error(Code::not_found, path_ + ": not a ckpt store (no JOURNAL); pass create_if_missing to make one");
    // Only an empty directory (or one left by an interrupted creation) becomes a store.
    CKPT_ASSIGN_OR_RETURN(auto entries, fs_.list_dir(path_));
    for (const auto& e : entries)
      if (e != journal::kLockName && e.rfind(std::string(journal::kJournalName) + ".tmp-", 0) != 0)
        return make_error(Code::conflict, path_ + ": holds '" + e + "' but no JOURNAL; refusing to make a store over other files");
    JournalHeader header;
    header.store_uuid = random_uuid();
    CKPT_TRY(JournalWriter::create(fs_, journal_path, header));
  }
  auto file = fs_.open(journal_path, OpenMode::read_write);
  if (!file.ok()) return file.status();
  auto report = detail::scan_and_plan(fs_, path_, *file);
  journal_.emplace(fs_, journal_path, *file, report.ok() ? report->journal.end : 0);  // owns the handle now
  if (!report.ok()) return report.status();
  if (report->corrupt()) return report->corruption_status();
  CKPT_TRY(detail::apply_recovery(fs_, *journal_, *report));
  compacted_end_ = journal_->end();
  uuid_ = report->journal.header.store_uuid;
  return report;
}

CKPT_INLINE Result<std::string> JournalLog::read(const StoreOptions&) {
  return std::string();  // every rank reads the journal itself: nothing to broadcast
}

CKPT_INLINE Result<RecoveryReport> JournalLog::decode(const std::string&, const StoreOptions& options) {
  // Reads only: no lock, no recovery; an open transaction or a torn tail is simply not a step (spec 6.5).
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, check_store(fs_, path_));
  if (report.corrupt() && !options.allow_corrupt_journal) return report.corruption_status();
  return report;
}

CKPT_INLINE Status JournalLog::failure() const {
  if (!journal_) return make_error(Code::invalid_argument, path_ + ": the journal is not open for writing");
  if (journal_->failed())
    return journal_->failure().with_context(path_ + ": the journal failed earlier; reopen the store so its recovery decides what is durable");
  return Status();
}

CKPT_INLINE Status JournalLog::begin(TxnInfo& t, const std::vector<TxnInfo>&) {
  BeginRecord b{t.txn, t.step, t.world_size, t.files};
  // Step 1: BEGIN + fdatasync before any file exists: recovery can always find what to remove (R7).
  CKPT_ASSIGN_OR_RETURN(PendingRecord record, begin_record(b));
  CKPT_TRY(journal_->append_group({record}));
  t.begin_offset = journal_->last_offsets().front();
  // Step 2: the step directory is durable in the store before any rank creates a file in it (R3).
  CKPT_TRY(fs_.mkdir(join_path(path_, t.dir())));
  return fs_.sync_dir(path_);
}

CKPT_INLINE Status JournalLog::write_manifest(const TxnInfo& t, const std::string& bytes) {
  // Step 4 of spec/JOURNAL.md 5.3: every shard is durable (each rank synced file and directory before it
  // reported), so the MANIFEST may now refer to them: under its final name (the journal implies it), fsynced.
  const std::string dir = join_path(path_, t.dir());
  const std::string manifest_path = join_path(dir, std::string(journal::kManifestName));
  auto file = fs_.open(manifest_path, OpenMode::create_new);
  if (!file.ok()) return file.status().with_context(manifest_path);
  ScopedFile scoped(fs_, *file);
  Status s = fs_.pwrite(scoped.get(), bytes.data(), bytes.size(), 0);
  if (s.ok()) s = fs_.sync(scoped.get());
  if (s.ok()) s = scoped.close();
  if (!s.ok()) return s.with_context(manifest_path);
  // Step 5: the MANIFEST entry is durable before COMMIT refers to it (R3).
  return fs_.sync_dir(dir).with_context(dir);
}

CKPT_INLINE Status JournalLog::commit(TxnInfo& t, const CommitRecord& c, const SaveRecord& stats, CommitDoubt& doubt) {
  // Step 6: COMMIT + fdatasync: the step exists once this returns.
  Status s = journal_->append_group({commit_record(c), save_stats_record(stats)});
  if (!s.ok()) {
    doubt = CommitDoubt::in_doubt;  // the COMMIT may be on disk: nothing may be removed (spec/JOURNAL.md 5.4)
    return s.with_context("the COMMIT record could not be made durable, so it may or may not have committed; the store "
                          "refuses writes until it is reopened, and its recovery decides");
  }
  t.end_offset = journal_->last_offsets().front();
  return Status();
}

CKPT_INLINE Status JournalLog::remove_files(TxnInfo& t) {
  std::vector<RecoveryAction> actions;
  std::vector<std::string> notes;
  detail::plan_removal(fs_, path_, t, actions, notes);
  if (actions.empty()) return Status();
  RecoveryAction sync;
  sync.kind = RecoveryActionKind::sync_dir;
  sync.path = path_;
  actions.push_back(sync);
  detail::run_removals(fs_, actions, 0);
  for (const auto& a : actions)
    if (a.kind == RecoveryActionKind::remove_dir && a.done) t.dir_present = false;
  std::string errors;
  for (const auto& a : actions)
    if (!a.error.empty()) errors += (errors.empty() ? "" : "; ") + a.describe();
  for (const auto& n : notes) errors += (errors.empty() ? "" : "; ") + n;
  if (errors.empty()) return Status();
  return make_error(Code::io, errors + " (the next writable open retries)");
}

CKPT_INLINE Status JournalLog::abort(TxnInfo& t, AbortReason reason) {
  Status result;
  if (!journal_->failed()) {
    Status s = journal_->append_group({abort_record(AbortRecord{t.txn, t.step, reason})});
    if (s.ok()) {
      t.state = TxnState::aborted;
      t.abort_reason = reason;
      t.end_offset = journal_->last_offsets().front();
    } else {
      result = s;
    }
  }
  // No COMMIT was written for this transaction, so removing its files cannot break a step (spec 5.5).
  Status removed = remove_files(t);
  return result.ok() ? removed : result;
}

CKPT_INLINE Status JournalLog::retire(const std::vector<TxnInfo*>& txns) {
  std::vector<PendingRecord> records;
  for (const TxnInfo* t : txns) records.push_back(retire_record(RetireRecord{t->txn, t->step}));
  // RETIRE is durable before any file goes: a crash mid-removal leaves a retired step, never a broken live one (R8).
  CKPT_TRY(journal_->append_group(records));
  for (std::size_t k = 0; k < txns.size(); ++k) {
    txns[k]->state = TxnState::retired;
    txns[k]->retire_offset = journal_->last_offsets()[k];
  }
  Status result;
  for (TxnInfo* t : txns) {
    if (reuse_files_) keep_slots(*t);
    Status s = remove_files(*t);
    if (result.ok() && !s.ok()) result = s;
  }
  return result;
}

CKPT_INLINE void JournalLog::keep_slots(const TxnInfo& t) {
  // After RETIRE is durable the step's files are free space (R8): moved, they are written over by a later
  // step instead of being unlinked and allocated again. Best effort: a file not moved is removed as usual.
  const std::string slots = join_path(path_, std::string(journal::kSlotsName));
  auto listing = fs_.list_dir(slots);
  std::size_t held = 0;
  if (listing.ok()) {
    held = listing->size();
  } else {
    if (listing.status().code() != Code::not_found) return;
    Status made = fs_.mkdir(slots);
    if (!made.ok() && made.code() != Code::conflict) return;
    if (!fs_.sync_dir(path_).ok()) return;
  }
  bool moved = false;
  for (const TxnFile& f : t.files) {
    if (held >= journal::kMaxSlots) break;
    // Unique: a step directory's name holds its transaction id, which is never reused (spec 5.6).
    if (!fs_.rename(join_path(join_path(path_, t.dir()), f.name), join_path(slots, t.dir() + "-" + f.name)).ok()) continue;
    ++held, moved = true;
  }
  if (moved) fs_.sync_dir(slots).ignore_error();  // a move that is lost leaves the file to the step's removal
}

CKPT_INLINE Status JournalLog::set_aside(TxnInfo& t) {
  // RETIRE first: the step is gone for readers before its directory moves (R8); the bytes stay for inspection.
  CKPT_TRY(journal_->append_group({retire_record(RetireRecord{t.txn, t.step})}));
  t.state = TxnState::retired;
  t.retire_offset = journal_->last_offsets().front();
  RecoveryAction move;
  move.kind = RecoveryActionKind::quarantine;
  move.path = join_path(path_, t.dir());
  move.to = join_path(join_path(path_, std::string(journal::kQuarantineName)), t.dir());
  move.txn = t.txn;
  CKPT_TRY(detail::quarantine_dir(fs_, path_, move));
  t.dir_present = false;
  return Status();
}

CKPT_INLINE Status JournalLog::maintain(std::vector<TxnInfo>& table, std::uint64_t next_txn, bool force) {
  // The journal grows with live steps, not history (spec 5.7): rewrite once it has doubled since the last rewrite.
  if (!journal_ || journal_->failed()) return force ? failure() : Status();
  if (!force && !journal::compaction_due(journal_->end(), compacted_end_)) return Status();
  Status s = detail::rewrite_journal(fs_, *journal_, uuid_, next_txn, table);
  if (!s.ok()) return s.with_context(path_ + ": journal compaction");
  compacted_end_ = journal_->end();
  return Status();
}

CKPT_INLINE Result<GarbageReport> JournalLog::collect_garbage(const std::vector<TxnInfo>&, bool dry_run) {
  // Recovery removed every file of a dead transaction when the writer opened (spec/JOURNAL.md 6.4).
  GarbageReport report;
  report.dry_run = dry_run;
  return report;
}

CKPT_INLINE std::unique_ptr<CommitLog> journal_log(FsRef fs, std::string path) {
  return std::make_unique<JournalLog>(fs, std::move(path));
}

}  // namespace ckpt
