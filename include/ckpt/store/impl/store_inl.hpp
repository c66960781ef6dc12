// ckpt: definitions for store.hpp (spec/JOURNAL.md 5 commit protocol, 7 manifest, 10 retention).
#pragma once

#include "../store.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <set>

namespace ckpt {

// --- Transaction ----------------------------------------------------------------------------------

CKPT_INLINE Transaction::Transaction(Store* store, std::uint64_t txn, std::uint64_t step, std::string dir_path,
                             std::string shard_name, std::optional<ShardWriter> writer)
    : store_(store), comm_(store->comm_), txn_(txn), step_(step), dir_path_(std::move(dir_path)),
      shard_name_(std::move(shard_name)), writer_(std::move(writer)), rank_(comm_.rank()), world_(comm_.size()) {
  state_.step = step;
}

CKPT_INLINE Transaction::~Transaction() {
  // Never waits for other ranks: dropped here, the others told through the communicator (spec/SHARDING.md 3.4).
  if (active()) drop(make_error(Code::cancelled, "its Transaction was destroyed before commit() or abort()"));
}

CKPT_INLINE Status Transaction::check_open() const {
  if (store_ == nullptr) return make_error(Code::invalid_argument, "transaction " + std::to_string(txn_) + ": its store is closed");
  if (finished_)
    return make_error(Code::invalid_argument, "transaction " + std::to_string(txn_) + " for step " + std::to_string(step_) +
                                                  " is already committed or abandoned");
  return Status();
}

CKPT_INLINE Status Transaction::check_active() const {
  CKPT_TRY(check_open());
  if (reported_)
    return make_error(Code::invalid_argument, join_path(dir_path_, shard_name_) + ": already finished and reported (report())");
  return failure_;  // across ranks: an earlier I/O error of this rank, until commit() reports it everywhere
}

CKPT_INLINE Status Transaction::fail(const Status& s) {
  // Across ranks only rank 0 may abandon, and only once every rank stopped writing (spec/SHARDING.md 3.4).
  if (world_ > 1) {
    if (failure_.ok()) failure_ = s;  // rank 0 names the rank when it reports it
    return failure_.with_context("rank " + std::to_string(rank_)).with_context(
        "step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ") fails at commit() on every rank");
  }
  // One process: nobody else writes, so the abandonment happens now, through the same finish.
  auto outcome = finish(false, s);
  return outcome.ok() ? outcome->decision : outcome.status();
}

CKPT_INLINE Status Transaction::add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data, std::size_t size) {
  CKPT_TRY(check_active());
  Status s = writer_->add_tensor(name, dtype, shape, data, size);
  // An I/O error leaves the shard unusable: abandon now (spec 5.5). Caller mistakes leave it open.
  if (s.code() == Code::io) return fail(s);
  return s;
}

CKPT_INLINE Status Transaction::add_optimizer_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                             std::size_t size) {
  CKPT_TRY(add_tensor(name, dtype, shape, data, size));
  state_.optimizer_tensors.emplace_back(name);
  return Status();
}

CKPT_INLINE Status Transaction::begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                                    const Shape& local_shape) {
  CKPT_TRY(check_active());
  Status s = writer_->begin_piece(name, dtype, global_shape, offsets, local_shape);
  if (s.code() == Code::io) return fail(s);
  return s;
}

CKPT_INLINE Status Transaction::write(const void* data, std::size_t size) {
  CKPT_TRY(check_active());
  Status s = writer_->write(data, size);
  if (s.code() == Code::io) return fail(s);
  return s;
}

CKPT_INLINE Status Transaction::end_piece() {
  CKPT_TRY(check_active());
  Status s = writer_->end_piece();
  if (s.code() == Code::io) return fail(s);
  return s;
}

CKPT_INLINE SaveRecord timed_save_record(const CommitRecord& c, std::uint64_t bytes, std::chrono::steady_clock::time_point started,
                                         std::optional<std::chrono::nanoseconds> stall, bool async) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  SaveRecord r;
  r.txn = c.txn;
  r.step = c.step;
  r.bytes = bytes;
  const auto persist = std::chrono::steady_clock::now() - started;
  r.persist_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, duration_cast<nanoseconds>(persist).count()));
  r.stall_ns = stall ? std::min(r.persist_ns, static_cast<std::uint64_t>(std::max<std::int64_t>(0, stall->count()))) : r.persist_ns;
  r.async = async;
  return r;
}

CKPT_INLINE SaveRecord Transaction::save_record(const CommitRecord& c, const Manifest& m) const {
  std::uint64_t bytes = 0;
  for (const auto& shard : m.shards) bytes += shard.file_size;
  return timed_save_record(c, bytes, started_, stall_, async_);
}

// --- Store ----------------------------------------------------------------------------------------

CKPT_INLINE Store::~Store() {
  // A transaction cannot outlive its store: dropped, without waiting for other ranks (spec/SHARDING.md 3.4).
  if (open_txn_ != nullptr) {
    Transaction* tx = open_txn_;
    tx->drop(make_error(Code::cancelled, "its store was closed before commit() or abort()"));
    tx->store_ = nullptr;
  }
  journal_.reset();
  if (lock_.valid()) fs_.close(lock_).ignore_error();  // releases the writer lock
}

CKPT_INLINE void Store::adopt(RecoveryReport report) {
  txns_ = report.transactions;
  by_txn_.clear();
  for (std::size_t i = 0; i < txns_.size(); ++i) by_txn_.insert({txns_[i].txn, i});
  next_txn_ = std::max(next_txn_, report.next_txn);
  uuid_ = report.journal.header.store_uuid;
  report_ = std::move(report);
}

CKPT_INLINE Status Store::open_read_only() {
  // Reads only: no lock, no recovery; an open transaction or a torn tail is simply not a step (spec 6.5).
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, check_store(fs_, path_));
  if (report.corrupt() && !options_.allow_corrupt_journal) return report.corruption_status();
  adopt(std::move(report));
  return Status();
}

CKPT_INLINE Status Store::open_writable() {
  auto info = fs_.stat(path_);
  if (!info.ok()) {
    if (info.status().code() != Code::not_found || !options_.create_if_missing) return info.status().with_context("store");
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
    if (!options_.create_if_missing)
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
  adopt(std::move(report).value());
  compacted_end_ = journal_->end();
  return Status();
}

CKPT_INLINE void Store::reindex() {
  by_txn_.clear();
  for (std::size_t i = 0; i < txns_.size(); ++i) by_txn_.insert({txns_[i].txn, i});
}

CKPT_INLINE Status Store::compact_if_due() {
  // The journal grows with live steps, not history (spec 5.7): rewrite once it has doubled since the last rewrite.
  if (!journal_ || journal_->failed() || open_txn_ != nullptr) return Status();
  if (!journal::compaction_due(journal_->end(), compacted_end_)) return Status();
  return compact();
}

CKPT_INLINE Status Store::compact() {
  CKPT_TRY(check_writable());
  if (open_txn_ != nullptr)
    return make_error(Code::conflict, path_ + ": transaction " + std::to_string(open_txn_->txn()) + " is open; compact between saves");
  Status s = detail::rewrite_journal(fs_, *journal_, uuid_, next_txn_, txns_);
  reindex();
  if (!s.ok()) return s.with_context(path_ + ": journal compaction");
  compacted_end_ = journal_->end();
  return Status();
}

CKPT_INLINE Status Store::refresh() {
  if (access_ == Access::read_write) return Status();
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, check_store(fs_, path_));
  if (report.corrupt() && !options_.allow_corrupt_journal) return report.corruption_status();
  adopt(std::move(report));
  return Status();
}

CKPT_INLINE TxnInfo* Store::find_txn(std::uint64_t txn) {
  const auto it = by_txn_.find(txn);
  return it == by_txn_.end() ? nullptr : &txns_[it->second];
}

CKPT_INLINE StepInfo Store::step_info(const TxnInfo& t) const {
  StepInfo s = detail::step_of(t, t.commit);
  s.commit_offset = t.end_offset;
  return s;
}

CKPT_INLINE std::vector<SaveRecord> Store::save_records() const {
  std::vector<SaveRecord> out;
  for (const auto& t : txns_)
    if ((t.state == TxnState::committed || t.state == TxnState::retired) && t.save) out.push_back(*t.save);
  return out;
}

CKPT_INLINE SaveEstimate estimate_from(const std::vector<SaveRecord>& records, std::optional<std::uint64_t> bytes,
                                       std::size_t window) {
  SaveEstimate e;
  if (records.empty()) return e;
  e.bytes = bytes ? *bytes : records.back().bytes;
  for (std::size_t i = records.size() - std::min(window == 0 ? 1 : window, records.size()); i < records.size(); ++i) {
    const SaveRecord& r = records[i];
    if (r.persist_ns == 0 || r.bytes == 0) continue;  // too small to time: says nothing of throughput
    const double rate = static_cast<double>(r.bytes) / (static_cast<double>(r.persist_ns) * 1e-9);
    if (e.samples == 0 || rate < e.bytes_per_second) e.bytes_per_second = rate;
    ++e.samples;
  }
  if (e.samples > 0) e.seconds = static_cast<double>(e.bytes) / e.bytes_per_second;
  return e;
}

CKPT_INLINE SaveEstimate Store::estimate_save(std::optional<std::uint64_t> bytes, std::size_t window) const {
  return estimate_from(save_records(), bytes, window);
}

CKPT_INLINE std::optional<bool> Store::save_fits(double seconds, std::optional<std::uint64_t> bytes) const {
  const SaveEstimate e = estimate_save(bytes);
  if (!e.known()) return std::nullopt;
  return e.seconds <= seconds;
}

CKPT_INLINE std::vector<StepInfo> Store::steps() const {
  std::vector<StepInfo> out;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed) out.push_back(step_info(t));
  return out;
}

CKPT_INLINE std::optional<StepInfo> Store::latest() const {
  for (auto it = txns_.rbegin(); it != txns_.rend(); ++it)
    if (it->state == TxnState::committed) return step_info(*it);
  return std::nullopt;
}

CKPT_INLINE Result<StepInfo> Store::find(std::uint64_t step) const {
  for (auto it = txns_.rbegin(); it != txns_.rend(); ++it)
    if (it->state == TxnState::committed && it->step == step) return step_info(*it);
  return make_error(Code::not_found, path_ + ": no committed step " + std::to_string(step));
}

CKPT_INLINE Result<StepReader> Store::open_step(const StepInfo& info) {
  return StepReader::open(fs_, path_, info, uuid_);
}

CKPT_INLINE Result<StepReader> Store::open_step(std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return open_step(info);
}

CKPT_INLINE Result<StepReader> Store::open_latest() {
  auto info = latest();
  if (!info) return make_error(Code::not_found, path_ + ": no committed step");
  return open_step(*info);
}

CKPT_INLINE Result<StepVerifyReport> Store::verify_step(std::uint64_t step, const VerifyOptions& options) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return ckpt::verify_step(fs_, path_, info, uuid_, cpu_file_verifier(fs_, options));
}

CKPT_INLINE Status Store::check_writable() const {
  if (access_ != Access::read_write) return make_error(Code::invalid_argument, path_ + ": store is open read-only");
  if (!journal_)
    return make_error(Code::invalid_argument, path_ + ": this rank is a participant: only rank 0 writes the journal (spec/SHARDING.md 3.1)");
  if (journal_->failed())
    return journal_->failure().with_context(path_ + ": the journal failed earlier; reopen the store so its recovery decides what is durable");
  return Status();
}

CKPT_INLINE Status Store::remove_txn_files(const TxnInfo& t) {
  std::vector<RecoveryAction> actions;
  std::vector<std::string> notes;
  detail::plan_removal(fs_, path_, t, actions, notes);
  if (actions.empty()) return Status();
  RecoveryAction sync;
  sync.kind = RecoveryActionKind::sync_dir;
  sync.path = path_;
  actions.push_back(sync);
  detail::run_removals(fs_, actions, 0);
  bool dir_gone = false;
  for (const auto& a : actions) dir_gone = dir_gone || (a.kind == RecoveryActionKind::remove_dir && a.done);
  if (dir_gone)
    if (TxnInfo* mine = find_txn(t.txn)) mine->dir_present = false;
  std::string errors;
  for (const auto& a : actions)
    if (!a.error.empty()) errors += (errors.empty() ? "" : "; ") + a.describe();
  for (const auto& n : notes) errors += (errors.empty() ? "" : "; ") + n;
  if (errors.empty()) return Status();
  return make_error(Code::io, errors + " (the next writable open retries)");
}

CKPT_INLINE Status Store::abandon(std::uint64_t txn, AbortReason reason) {
  TxnInfo* t = find_txn(txn);
  if (t == nullptr) return make_error(Code::invalid_argument, "no transaction " + std::to_string(txn));
  Status result;
  if (!journal_->failed()) {
    Status s = journal_->append_group({abort_record(AbortRecord{txn, t->step, reason})});
    if (s.ok()) {
      t->state = TxnState::aborted;
      t->abort_reason = reason;
      t->end_offset = journal_->last_offsets().front();
    } else {
      result = s;
    }
  }
  // No COMMIT was written for this transaction, so removing its files cannot break a step (spec 5.5).
  Status removed = remove_txn_files(*t);
  if (result.ok() && removed.ok()) result = compact_if_due();
  return result.ok() ? removed : result;
}

CKPT_INLINE Status Store::retire_txns(const std::vector<std::uint64_t>& txns) {
  std::vector<PendingRecord> records;
  for (const auto id : txns) records.push_back(retire_record(RetireRecord{id, find_txn(id)->step}));
  // RETIRE is durable before any file goes: a crash mid-removal leaves a retired step, never a broken live one (R8).
  CKPT_TRY(journal_->append_group(records));
  Status result;
  for (std::size_t k = 0; k < txns.size(); ++k) {
    TxnInfo* t = find_txn(txns[k]);
    t->state = TxnState::retired;
    t->retire_offset = journal_->last_offsets()[k];
  }
  for (const auto id : txns) {
    Status s = remove_txn_files(*find_txn(id));
    if (result.ok() && !s.ok()) result = s;
  }
  Status compacted = compact_if_due();
  return result.ok() ? compacted : result;
}

CKPT_INLINE Status Store::retire(std::uint64_t step) {
  CKPT_TRY(check_writable());
  std::vector<std::uint64_t> victims;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed && t.step == step) victims.push_back(t.txn);
  if (victims.empty()) return make_error(Code::not_found, path_ + ": no committed step " + std::to_string(step));
  return retire_txns(victims);
}

CKPT_INLINE Result<std::vector<StepInfo>> Store::apply_retention(const RetentionPolicy& policy) {
  CKPT_TRY(check_writable());
  std::vector<StepInfo> retired;
  if (!policy.enabled()) return retired;
  const std::vector<StepInfo> live = steps();
  std::vector<std::uint64_t> victims;
  for (std::size_t i = 0; i < live.size(); ++i) {
    const bool recent = live.size() - i <= policy.keep_last;
    const bool milestone = policy.keep_every != 0 && live[i].step % policy.keep_every == 0;
    if (!recent && !milestone) {
      victims.push_back(live[i].txn);
      retired.push_back(live[i]);
    }
  }
  if (victims.empty()) return retired;
  CKPT_TRY(retire_txns(victims));
  return Result<std::vector<StepInfo>>(std::move(retired));
}

CKPT_INLINE Result<StepRecheck> recheck_step(Store& store, std::uint64_t step, std::uint64_t txn) {
  CKPT_TRY(store.refresh());
  for (const auto& s : store.steps())
    if (s.txn == txn && s.step == step) return StepRecheck::committed;
  for (const auto& t : store.transactions())
    if (t.txn == txn && t.step == step) return StepRecheck::retired;  // known and no longer committed
  return StepRecheck::not_listed;
}

}  // namespace ckpt
