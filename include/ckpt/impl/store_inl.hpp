// ckpt: definitions for store.hpp (spec/JOURNAL.md 5 commit protocol, 7 manifest, 10 retention).
#pragma once

#include <algorithm>
#include <set>

namespace ckpt {

// --- Transaction ----------------------------------------------------------------------------------

template <class Fs>
Transaction<Fs>::Transaction(Store<Fs>* store, CommRef comm, std::uint64_t txn, std::uint64_t step, std::string dir_path,
                             std::string shard_name, std::unique_ptr<ShardWriter<Fs>> writer)
    : store_(store), comm_(comm), txn_(txn), step_(step), dir_path_(std::move(dir_path)),
      shard_name_(std::move(shard_name)), writer_(std::move(writer)) {
  state_.step = step;
}

template <class Fs>
Transaction<Fs>::~Transaction() {
  if (active()) abort().ignore_error();  // not committed: abandoned; recovery finishes what this cannot
}

template <class Fs>
Status Transaction<Fs>::check_active() const {
  if (store_ == nullptr) return make_error(Code::invalid_argument, "transaction " + std::to_string(txn_) + ": its store is closed");
  if (finished_)
    return make_error(Code::invalid_argument, "transaction " + std::to_string(txn_) + " for step " + std::to_string(step_) +
                                                  " is already committed or abandoned");
  return failure_;  // multi-rank: an earlier I/O error of this rank, until commit() reports it everywhere
}

template <class Fs>
Status Transaction<Fs>::fail(const Status& s) {
  // Across ranks only rank 0 may abandon, and only once every rank stopped writing (spec/SHARDING.md 3.4).
  if (world_ > 1) {
    if (failure_.ok()) failure_ = s;  // rank 0 names the rank when it reports it
    return failure_.with_context("rank " + std::to_string(rank_)).with_context(
        "step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ") fails at commit() on every rank");
  }
  writer_.reset();  // closes and unlinks an unfinished shard file
  Status removed = store_->abandon(txn_, AbortReason::writer_error);
  finished_ = true;
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  std::string msg = "step " + std::to_string(step_) + " (txn " + std::to_string(txn_) +
                    ") abandoned, the previous step is untouched";
  if (!removed.ok()) msg += " (cleanup: " + removed.message() + ")";
  return s.with_context(msg);
}

template <class Fs>
Status Transaction<Fs>::add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data, std::size_t size) {
  CKPT_TRY(check_active());
  Status s = writer_->add_tensor(name, dtype, shape, data, size);
  // An I/O error leaves the shard unusable: abandon now (spec 5.5). Caller mistakes leave it open.
  if (s.code() == Code::io) return fail(s);
  return s;
}

template <class Fs>
Status Transaction<Fs>::add_optimizer_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                             std::size_t size) {
  CKPT_TRY(add_tensor(name, dtype, shape, data, size));
  state_.optimizer_tensors.emplace_back(name);
  return Status();
}

template <class Fs>
Status Transaction<Fs>::begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                                    const Shape& local_shape) {
  CKPT_TRY(check_active());
  Status s = writer_->begin_piece(name, dtype, global_shape, offsets, local_shape);
  if (s.code() == Code::io) return fail(s);
  return s;
}

template <class Fs>
Status Transaction<Fs>::write(const void* data, std::size_t size) {
  CKPT_TRY(check_active());
  Status s = writer_->write(data, size);
  if (s.code() == Code::io) return fail(s);
  return s;
}

template <class Fs>
Status Transaction<Fs>::end_piece() {
  CKPT_TRY(check_active());
  Status s = writer_->end_piece();
  if (s.code() == Code::io) return fail(s);
  return s;
}

template <class Fs>
Status Transaction<Fs>::abort() {
  if (world_ > 1) return finish_ranks(false).status();
  CKPT_TRY(check_active());
  writer_.reset();
  Status s = store_->abandon(txn_, AbortReason::user);
  finished_ = true;
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  return s;
}

template <class Fs>
Result<CommitResult> Transaction<Fs>::commit() {
  if (world_ > 1) return finish_ranks(true);
  CKPT_TRY(check_active());
  Fs& fs = store_->fs_;
  state_.step = step_;
  // What the caller can still fix is checked before anything becomes final.
  CKPT_TRY(check_training_state(state_));

  // Step 3: finish the shard: data, index, footer, fsync file, fsync step directory (spec 5.3).
  auto summary = writer_->finish();
  // A caller mistake (a piece still open) leaves the transaction open; anything else abandons it.
  if (!summary.ok() && summary.status().code() == Code::invalid_argument) return summary.status();
  if (!summary.ok()) return fail(summary.status());
  writer_.reset();
  // Every tensor covered exactly once (spec/SHARDING.md 4): read the index back from the finished file.
  {
    auto pieces = detail::read_shard_pieces(fs, join_path(dir_path_, shard_name_), 0, summary->index_digest);
    if (!pieces.ok()) return fail(pieces.status());
    Status covered = coverage_status(check_coverage(*pieces), Code::invalid_argument, "step " + std::to_string(step_));
    if (!covered.ok()) return fail(covered);
  }

  // The coordinator gathers every rank's shard entry (spec 8).
  Encoder mine;
  encode_manifest_shard(mine, manifest_shard(static_cast<std::uint32_t>(comm_.rank()), shard_name_, *summary));
  auto gathered = comm_.gather(std::move(mine.str()), 0);
  if (!gathered.ok()) return fail(gathered.status());
  Manifest m;
  m.txn = txn_;
  m.step = step_;
  m.world_size = static_cast<std::uint32_t>(comm_.size());
  m.store_uuid = store_->uuid_;
  m.state = state_;
  for (std::size_t r = 0; r < gathered->size(); ++r) {
    const std::string& bytes = (*gathered)[r];
    Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    ManifestShard s;
    Status decoded = decode_manifest_shard(in, s, "rank " + std::to_string(r) + " shard entry");
    if (decoded.ok() && (in.remaining() != 0 || s.rank != r || s.name != shard_file_name(s.rank, m.world_size)))
      decoded = make_error(Code::corrupt, "rank " + std::to_string(r) + " sent an entry for rank " + std::to_string(s.rank) +
                                              " file '" + s.name + "'");
    if (!decoded.ok()) return fail(decoded);
    m.shards.push_back(std::move(s));
  }
  Status valid = check_manifest(m);
  if (!valid.ok()) return fail(valid);

  // Step 4: MANIFEST under its final name (the journal implies it, no rename), fsynced (spec 5.3).
  const std::string bytes = encode_manifest(m);
  const std::string manifest_path = join_path(dir_path_, std::string(journal::kManifestName));
  {
    auto file = fs.open(manifest_path, OpenMode::create_new);
    if (!file.ok()) return fail(file.status().with_context(manifest_path));
    ScopedFile<Fs> scoped(fs, *file);
    Status s = fs.pwrite(scoped.get(), bytes.data(), bytes.size(), 0);
    if (s.ok()) s = fs.sync(scoped.get());
    if (s.ok()) s = scoped.close();
    if (!s.ok()) return fail(s.with_context(manifest_path));
  }
  // Step 5: fsync the step directory: the MANIFEST entry must be durable before COMMIT refers to it (R3).
  {
    Status s = fs.sync_dir(dir_path_);
    if (!s.ok()) return fail(s.with_context(dir_path_));
  }

  // Step 6: COMMIT + fdatasync: the step exists once this returns (spec 5.3).
  CommitRecord c{txn_, step_, bytes.size(), manifest_digest(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size())};
  const SaveRecord stats = save_record(c, m);
  Status s = store_->journal_->append_group({commit_record(c), save_stats_record(stats)});
  finished_ = true;
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  if (!s.ok()) {
    // The COMMIT may or may not be on disk: removing files now could break a committed step. Leave
    // everything for the recovery of the next writable open to decide (spec 5.4).
    return s.with_context("step " + std::to_string(step_) + " (txn " + std::to_string(txn_) +
                          "): the COMMIT record could not be made durable, so it may or may not have committed; "
                          "the store refuses writes until it is reopened, and its recovery decides");
  }
  TxnInfo* t = store_->find_txn(txn_);
  t->state = TxnState::committed;
  t->commit = c;
  t->save = stats;
  t->end_offset = store_->journal_->last_offsets().front();
  CommitResult result;
  result.step = store_->step_info(*t);
  if (store_->options_.retention.enabled()) {
    auto retired = store_->apply_retention(store_->options_.retention);
    if (retired.ok()) result.retired = std::move(retired).value();
    else result.retention = retired.status();
  }
  return result;
}

template <class Fs>
SaveRecord Transaction<Fs>::save_record(const CommitRecord& c, const Manifest& m) const {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  SaveRecord r;
  r.txn = c.txn;
  r.step = c.step;
  for (const auto& shard : m.shards) r.bytes += shard.file_size;
  const auto persist = std::chrono::steady_clock::now() - started_;
  r.persist_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, duration_cast<nanoseconds>(persist).count()));
  r.stall_ns = stall_ ? std::min(r.persist_ns, static_cast<std::uint64_t>(std::max<std::int64_t>(0, stall_->count()))) : r.persist_ns;
  r.async = async_;
  return r;
}

// --- Store ----------------------------------------------------------------------------------------

template <class Fs>
Result<std::unique_ptr<Store<Fs>>> Store<Fs>::open(Fs& fs, std::string path, Access access, StoreOptions options) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::unique_ptr<Store> store(new Store(fs, std::move(path), access, options));
  CKPT_TRY(access == Access::read_only ? store->open_read_only() : store->open_writable());
  return Result<std::unique_ptr<Store>>(std::move(store));  // explicit: nvcc (EDG) has no C++20 implicit move
}

template <class Fs>
Store<Fs>::~Store() {
  if (open_txn_ != nullptr) open_txn_->abort().ignore_error();  // a transaction cannot outlive its store
  journal_.reset();
  if (lock_.valid()) fs_.close(lock_).ignore_error();  // releases the writer lock
}

template <class Fs>
void Store<Fs>::adopt(RecoveryReport report) {
  txns_ = report.transactions;
  by_txn_.clear();
  for (std::size_t i = 0; i < txns_.size(); ++i) by_txn_.emplace(txns_[i].txn, i);
  next_txn_ = std::max(next_txn_, report.next_txn);
  uuid_ = report.journal.header.store_uuid;
  report_ = std::move(report);
}

template <class Fs>
Status Store<Fs>::open_read_only() {
  // Reads only: no lock, no recovery; an open transaction or a torn tail is simply not a step (spec 6.5).
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, check_store(fs_, path_));
  if (report.corrupt() && !options_.allow_corrupt_journal) return report.corruption_status();
  adopt(std::move(report));
  return Status();
}

template <class Fs>
Status Store<Fs>::open_writable() {
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
    CKPT_TRY(JournalWriter<Fs>::create(fs_, journal_path, header));
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

template <class Fs>
void Store<Fs>::reindex() {
  by_txn_.clear();
  for (std::size_t i = 0; i < txns_.size(); ++i) by_txn_.emplace(txns_[i].txn, i);
}

template <class Fs>
Status Store<Fs>::compact_if_due() {
  // The journal grows with live steps, not history (spec 5.7): rewrite once it has doubled since the last rewrite.
  if (!journal_ || journal_->failed() || open_txn_ != nullptr) return Status();
  if (!journal::compaction_due(journal_->end(), compacted_end_)) return Status();
  return compact();
}

template <class Fs>
Status Store<Fs>::compact() {
  CKPT_TRY(check_writable());
  if (open_txn_ != nullptr)
    return make_error(Code::conflict, path_ + ": transaction " + std::to_string(open_txn_->txn()) + " is open; compact between saves");
  Status s = detail::rewrite_journal(fs_, *journal_, uuid_, next_txn_, txns_);
  reindex();
  if (!s.ok()) return s.with_context(path_ + ": journal compaction");
  compacted_end_ = journal_->end();
  return Status();
}

template <class Fs>
Status Store<Fs>::refresh() {
  if (access_ == Access::read_write) return Status();
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, check_store(fs_, path_));
  if (report.corrupt() && !options_.allow_corrupt_journal) return report.corruption_status();
  adopt(std::move(report));
  return Status();
}

template <class Fs>
TxnInfo* Store<Fs>::find_txn(std::uint64_t txn) {
  const auto it = by_txn_.find(txn);
  return it == by_txn_.end() ? nullptr : &txns_[it->second];
}

template <class Fs>
StepInfo Store<Fs>::step_info(const TxnInfo& t) const {
  StepInfo s = detail::step_of(t, t.commit);
  s.commit_offset = t.end_offset;
  return s;
}

template <class Fs>
std::vector<SaveRecord> Store<Fs>::save_records() const {
  std::vector<SaveRecord> out;
  for (const auto& t : txns_)
    if ((t.state == TxnState::committed || t.state == TxnState::retired) && t.save) out.push_back(*t.save);
  return out;
}

template <class Fs>
SaveEstimate Store<Fs>::estimate_save(std::optional<std::uint64_t> bytes, std::size_t window) const {
  const auto records = save_records();
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

template <class Fs>
std::optional<bool> Store<Fs>::save_fits(double seconds, std::optional<std::uint64_t> bytes) const {
  const SaveEstimate e = estimate_save(bytes);
  if (!e.known()) return std::nullopt;
  return e.seconds <= seconds;
}

template <class Fs>
std::vector<StepInfo> Store<Fs>::steps() const {
  std::vector<StepInfo> out;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed) out.push_back(step_info(t));
  return out;
}

template <class Fs>
std::optional<StepInfo> Store<Fs>::latest() const {
  for (auto it = txns_.rbegin(); it != txns_.rend(); ++it)
    if (it->state == TxnState::committed) return step_info(*it);
  return std::nullopt;
}

template <class Fs>
Result<StepInfo> Store<Fs>::find(std::uint64_t step) const {
  for (auto it = txns_.rbegin(); it != txns_.rend(); ++it)
    if (it->state == TxnState::committed && it->step == step) return step_info(*it);
  return make_error(Code::not_found, path_ + ": no committed step " + std::to_string(step));
}

template <class Fs>
Result<std::unique_ptr<StepReader<Fs>>> Store<Fs>::open_step(const StepInfo& info) {
  return StepReader<Fs>::open(fs_, path_, info, uuid_);
}

template <class Fs>
Result<std::unique_ptr<StepReader<Fs>>> Store<Fs>::open_step(std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return open_step(info);
}

template <class Fs>
Result<std::unique_ptr<StepReader<Fs>>> Store<Fs>::open_latest() {
  auto info = latest();
  if (!info) return make_error(Code::not_found, path_ + ": no committed step");
  return open_step(*info);
}

template <class Fs>
Result<StepVerifyReport> Store<Fs>::verify_step(std::uint64_t step, const VerifyOptions& options) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return ckpt::verify_step(fs_, path_, info, uuid_, cpu_file_verifier(fs_, options));
}

template <class Fs>
Status Store<Fs>::check_writable() const {
  if (access_ != Access::read_write) return make_error(Code::invalid_argument, path_ + ": store is open read-only");
  if (!journal_)
    return make_error(Code::invalid_argument, path_ + ": this rank is a participant: only rank 0 writes the journal (spec/SHARDING.md 3.1)");
  if (journal_->failed())
    return journal_->failure().with_context(path_ + ": the journal failed earlier; reopen the store so its recovery decides what is durable");
  return Status();
}

template <class Fs>
Result<std::unique_ptr<Transaction<Fs>>> Store<Fs>::begin(std::uint64_t step) {
  static LocalComm local;  // stateless
  return begin_with(step, CommRef(local));
}

template <class Fs>
template <class Comm>
Result<std::unique_ptr<Transaction<Fs>>> Store<Fs>::begin(std::uint64_t step, Comm& comm) {
  return begin_with(step, CommRef(comm));
}

template <class Fs>
Result<std::unique_ptr<Transaction<Fs>>> Store<Fs>::begin_with(std::uint64_t step, CommRef comm) {
  if (comm.size() > 1) return begin_ranks(step, comm);  // collective: every check happens inside, on every rank
  CKPT_TRY(check_writable());
  if (open_txn_ != nullptr)
    return make_error(Code::conflict, path_ + ": transaction " + std::to_string(open_txn_->txn()) + " for step " +
                                          std::to_string(open_txn_->step()) + " is still open");
  const int world = comm.size();
  if (world != 1 || comm.rank() != 0)
    return make_error(Code::invalid_argument, path_ + ": a communicator of size " + std::to_string(world) + " with rank " +
                                                  std::to_string(comm.rank()));
  // The id is spent even if BEGIN fails: ids are never reused (spec 5.6).
  const std::uint64_t txn = next_txn_++;
  BeginRecord b;
  b.txn = txn;
  b.step = step;
  b.world_size = static_cast<std::uint32_t>(world);
  for (std::uint32_t r = 0; r < b.world_size; ++r) b.files.push_back(TxnFile{r, shard_file_name(r, b.world_size)});
  CKPT_ASSIGN_OR_RETURN(PendingRecord record, begin_record(b));
  // Step 1: BEGIN + fdatasync before any file exists: recovery can always find what to remove (R7).
  CKPT_TRY(journal_->append_group({record}));
  TxnInfo t;
  t.txn = txn;
  t.step = step;
  t.world_size = b.world_size;
  t.files = b.files;
  t.begin_offset = journal_->last_offsets().front();
  by_txn_.emplace(txn, txns_.size());
  txns_.push_back(t);

  // Step 2: the step directory, durable in the store directory before anything is written inside it (R3).
  const std::string dir_path = join_path(path_, t.dir());
  const std::string shard_name = b.files[static_cast<std::size_t>(comm.rank())].name;
  std::unique_ptr<ShardWriter<Fs>> writer;
  Status s = fs_.mkdir(dir_path);
  if (s.ok()) s = fs_.sync_dir(path_);
  if (s.ok()) {
    WriterOptions wo;
    wo.alignment_log2 = options_.alignment_log2;
    wo.chunk_size_log2 = options_.chunk_size_log2;
    wo.buffer_size = options_.buffer_size;
    wo.atomic_rename = false;  // BEGIN already names the file; O_EXCL, no temporary name
    wo.durable = true;
    auto w = ShardWriter<Fs>::create(fs_, join_path(dir_path, shard_name), wo);
    if (w.ok()) writer = std::move(w).value();
    else s = w.status();
  }
  if (!s.ok()) {
    Status removed = abandon(txn, AbortReason::writer_error);
    std::string msg = "step " + std::to_string(step) + " (txn " + std::to_string(txn) + ") abandoned";
    if (!removed.ok()) msg += " (cleanup: " + removed.message() + ")";
    return s.with_context(msg);
  }
  std::unique_ptr<Transaction<Fs>> tx(
      new Transaction<Fs>(this, comm, txn, step, dir_path, shard_name, std::move(writer)));
  open_txn_ = tx.get();
  return Result<std::unique_ptr<Transaction<Fs>>>(std::move(tx));  // explicit: nvcc (EDG) has no C++20 implicit move
}

template <class Fs>
Status Store<Fs>::remove_txn_files(const TxnInfo& t) {
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

template <class Fs>
Status Store<Fs>::abandon(std::uint64_t txn, AbortReason reason) {
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

template <class Fs>
Status Store<Fs>::retire_txns(const std::vector<std::uint64_t>& txns) {
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

template <class Fs>
Status Store<Fs>::retire(std::uint64_t step) {
  CKPT_TRY(check_writable());
  std::vector<std::uint64_t> victims;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed && t.step == step) victims.push_back(t.txn);
  if (victims.empty()) return make_error(Code::not_found, path_ + ": no committed step " + std::to_string(step));
  return retire_txns(victims);
}

template <class Fs>
Result<std::vector<StepInfo>> Store<Fs>::apply_retention(const RetentionPolicy& policy) {
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

}  // namespace ckpt
