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
}

CKPT_INLINE void Store::adopt(RecoveryReport report) {
  txns_ = report.transactions;
  reindex();
  next_txn_ = std::max(next_txn_, report.next_txn);
  uuid_ = report.journal.header.store_uuid;
  report_ = std::move(report);
}

CKPT_INLINE void Store::reindex() {
  by_txn_.clear();
  for (std::size_t i = 0; i < txns_.size(); ++i) by_txn_.insert({txns_[i].txn, i});
}

CKPT_INLINE std::string Store::step_path(const std::string& dir) const {
  return step_root().empty() ? dir : join_path(step_root(), dir);
}

CKPT_INLINE Status Store::maintain(bool force) {
  if (!writer_ || (!force && (open_txn_ != nullptr || !log_->failure().ok()))) return Status();
  Status s = log_->maintain(txns_, next_txn_, force);
  reindex();
  return s;
}

CKPT_INLINE Status Store::compact() {
  CKPT_TRY(check_writable());
  if (open_txn_ != nullptr)
    return make_error(Code::conflict, path() + ": transaction " + std::to_string(open_txn_->txn()) + " is open; compact between saves");
  return maintain(true);
}

CKPT_INLINE Status Store::refresh() {
  // A writer that excludes every other writer has nothing new to read (the journal's LOCK).
  if (access_ == Access::read_write && log_->exclusive()) return Status();
  if (log_->exclusive()) {  // each rank reads the journal itself: nothing to agree on
    CKPT_ASSIGN_OR_RETURN(std::string none, log_->read(options_));
    return read_log(none);
  }
  if (caller_coordinated()) {
    if (!writer_) return Status();  // a participant knows no steps (open read-only to read)
    CKPT_ASSIGN_OR_RETURN(std::string listing, log_->read(options_));
    return read_log(listing);
  }
  // Collective like the open: rank 0 reads, every rank decodes what it read.
  Status local;
  std::string listing;
  if (comm_.rank() == 0) {
    auto read = log_->read(options_);
    if (read.ok()) listing = std::move(*read);
    else local = read.status();
  }
  if (comm_.size() > 1) {
    CKPT_TRY(wire::agree(comm_, local));
    CKPT_TRY(comm_.broadcast(listing, 0));
  } else {
    CKPT_TRY(local);
  }
  // A writer keeps the transactions it has open or knows better than the listing (offsets, failures).
  std::vector<TxnInfo> mine = txns_;
  CKPT_TRY(read_log(listing));
  for (const auto& t : mine)
    if (find_txn(t.txn) == nullptr && t.state == TxnState::open) mirror_txn(t);
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
  std::stable_sort(out.begin(), out.end(), [](const StepInfo& a, const StepInfo& b) { return a.step < b.step; });
  return out;
}

CKPT_INLINE std::optional<StepInfo> Store::latest() const {
  const TxnInfo* best = nullptr;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed && (best == nullptr || t.step >= best->step)) best = &t;
  if (best == nullptr) return std::nullopt;
  return step_info(*best);
}

CKPT_INLINE Result<StepInfo> Store::find(std::uint64_t step) const {
  for (auto it = txns_.rbegin(); it != txns_.rend(); ++it)
    if (it->state == TxnState::committed && it->step == step) return step_info(*it);
  return make_error(Code::not_found, path() + ": no committed step " + std::to_string(step));
}

CKPT_INLINE Result<StepReader> Store::open_step(const StepInfo& info) {
  return StepReader::open(fs(), step_root(), info, uuid_);
}

CKPT_INLINE Result<StepReader> Store::open_step(std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return open_step(info);
}

CKPT_INLINE Result<StepReader> Store::open_latest() {
  auto info = latest();
  if (!info) return make_error(Code::not_found, path() + ": no committed step");
  return open_step(*info);
}

CKPT_INLINE Result<StepVerifyReport> Store::verify_step(std::uint64_t step, const VerifyOptions& options) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return ckpt::verify_step(fs(), step_root(), info, uuid_, cpu_file_verifier(fs(), options));
}

CKPT_INLINE Status Store::check_writable() const {
  if (access_ != Access::read_write) return make_error(Code::invalid_argument, path() + ": store is open read-only");
  if (!writer_)
    return make_error(Code::invalid_argument, path() + ": this rank is a participant: only rank 0 writes the log (spec/SHARDING.md 3.1)");
  return log_->failure();
}

CKPT_INLINE Status Store::abandon(std::uint64_t txn, AbortReason reason) {
  TxnInfo* t = find_txn(txn);
  if (t == nullptr) return make_error(Code::invalid_argument, "no transaction " + std::to_string(txn));
  // No commit was written for this transaction, so removing its files cannot break a step (spec/JOURNAL.md 5.5).
  Status result = log_->abort(*t, reason);
  Status upkeep = result.ok() ? maintain(false) : Status();
  return result.ok() ? upkeep : result;
}

CKPT_INLINE Status Store::retire_txns(const std::vector<std::uint64_t>& txns) {
  std::vector<TxnInfo*> victims;
  for (const auto id : txns) victims.push_back(find_txn(id));
  Status result = log_->retire(victims);
  Status upkeep = maintain(false);
  return result.ok() ? upkeep : result;
}

// --- Slots a capture is copied into (spec/JOURNAL.md 10.1) --------------------------------------------

CKPT_INLINE Result<std::pair<std::string, bool>> Store::pick_slot() {
  FsRef fs = this->fs();
  const std::string slots = join_path(step_root(), std::string(journal::kSlotsName));
  auto listing = fs.list_dir(slots);
  if (listing.ok() && !listing->empty())
    return std::make_pair(join_path(slots, *std::min_element(listing->begin(), listing->end())), false);  // as create_shard picks
  if (!listing.ok()) {
    if (listing.status().code() != Code::not_found) return listing.status().with_context("slots of " + path());
    Status made = fs.mkdir(slots);
    if (!made.ok() && made.code() != Code::conflict) return made.with_context("slots of " + path());
    CKPT_TRY(fs.sync_dir(step_root()));
  }
  // A new file in slots/ is free space like any other there (10.1): nothing reads it, recovery keeps it.
  return std::make_pair(join_path(slots, "new-" + uuid_string(random_uuid())), true);
}

CKPT_INLINE void Store::forget_slot_maps(std::uint64_t keep_id) {
  // A mapping keeps its file's pages alive: a file the store removed (beyond kMaxSlots, a failed transaction)
  // must not stay mapped. Live: the files of slots/ and this rank's files of committed steps.
  std::set<std::uint64_t> live{keep_id};
  FsRef fs = this->fs();
  const std::string slots = join_path(step_root(), std::string(journal::kSlotsName));
  if (auto listing = fs.list_dir(slots); listing.ok())
    for (const auto& name : *listing)
      if (auto st = fs.stat(join_path(slots, name)); st.ok()) live.insert(st->id);
  for (const TxnInfo& t : txns_)
    if (t.state == TxnState::committed)
      for (const TxnFile& f : t.files)
        if (f.rank == static_cast<std::uint32_t>(rank()))
          if (auto st = fs.stat(join_path(step_path(t.dir()), f.name)); st.ok()) live.insert(st->id);
  slot_maps_.erase(std::remove_if(slot_maps_.begin(), slot_maps_.end(), [&](const SlotMap& m) { return live.count(m.id) == 0; }),
                   slot_maps_.end());
}

CKPT_INLINE Result<std::vector<unsigned char*>> Store::reserve_slot(const std::vector<std::uint64_t>& sizes) {
  CKPT_TRY(check_writable());
  if (!options_.reuse_files) return make_error(Code::invalid_argument, path() + ": reserve_slot needs StoreOptions::reuse_files");
  if (!fs().can_map() || step_root().empty())
    return make_error(Code::unsupported, path() + ": a slot needs a file system that maps files");
  if (open_txn_ != nullptr)
    return make_error(Code::conflict, path() + ": transaction " + std::to_string(open_txn_->txn()) + " is open; reserve a slot between saves");
  CKPT_ASSIGN_OR_RETURN(const DataLayout layout, plan_data_layout(sizes, options_.alignment_log2));
  if (layout.end > SIZE_MAX) return make_error(Code::invalid_argument, path() + ": a slot of " + std::to_string(layout.end) + " bytes");
  FsRef fs = this->fs();
  CKPT_ASSIGN_OR_RETURN(const auto picked, pick_slot());
  const std::string& slot = picked.first;
  CKPT_ASSIGN_OR_RETURN(const FileHandle f, fs.open(slot, picked.second ? OpenMode::create_new : OpenMode::read_write));
  auto mapped = [&]() -> Result<const unsigned char*> {
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t size, fs.file_size(f));
    // Every mapped page must lie inside the file (a page past its end faults): grown first, never cut here.
    if (size < layout.end) CKPT_TRY(fs.truncate(f, layout.end));
    CKPT_ASSIGN_OR_RETURN(const PathInfo st, fs.stat(slot));
    forget_slot_maps(st.id);
    auto it = std::find_if(slot_maps_.begin(), slot_maps_.end(), [&](const SlotMap& m) { return st.id != 0 && m.id == st.id; });
    if (it != slot_maps_.end() && it->map.size() >= layout.end) return it->map.data();
    CKPT_ASSIGN_OR_RETURN(Mapping m, fs.map(f, 0, static_cast<std::size_t>(layout.end), MapMode::shared_write));
    std::shared_ptr<void> pinned;
    if (options_.pin_slot) {
      // Device snapshots copy straight into the slot: pinned once per mapping (spec/ASYNC.md 6.1).
      auto* at = const_cast<unsigned char*>(m.data());
      CKPT_TRY(options_.pin_slot(at, m.size()).with_context("pinning " + std::to_string(m.size()) + " bytes of the slot"));
      pinned = std::shared_ptr<void>(at, [unpin = options_.unpin_slot](void* p) {
        if (unpin) unpin(p);
      });
    }
    if (it != slot_maps_.end()) it->pinned.reset(), it->map = std::move(m), it->pinned = std::move(pinned);
    else it = slot_maps_.insert(slot_maps_.end(), SlotMap{st.id, std::move(m), std::move(pinned)});
    return it->map.data();
  }();
  Status closed = fs.close(f);
  if (!mapped.ok()) return mapped.status().with_context("slot " + slot);
  CKPT_TRY(closed.with_context("slot " + slot));
  reserved_slot_ = slot;
  reserved_map_ = *mapped;
  reserved_size_ = layout.end;
  std::vector<unsigned char*> at;
  at.reserve(sizes.size());
  for (const std::uint64_t off : layout.offsets) at.push_back(const_cast<unsigned char*>(*mapped) + off);
  return at;
}

CKPT_INLINE std::string_view Store::kept_mapping(const std::string& file) {
  if (slot_maps_.empty()) return {};
  const auto st = fs().stat(file);
  if (!st.ok() || st->id == 0) return {};
  for (const auto& m : slot_maps_)
    if (m.id == st->id) return std::string_view(reinterpret_cast<const char*>(m.map.data()), m.map.size());
  return {};
}

CKPT_INLINE Status Store::retire(std::uint64_t step) {
  CKPT_TRY(check_writable());
  std::vector<std::uint64_t> victims;
  for (const auto& t : txns_)
    if (t.state == TxnState::committed && t.step == step) victims.push_back(t.txn);
  if (victims.empty()) return make_error(Code::not_found, path() + ": no committed step " + std::to_string(step));
  return retire_txns(victims);
}

CKPT_INLINE Status Store::set_aside(std::uint64_t step) {
  CKPT_TRY(check_writable());
  for (auto& t : txns_)
    if (t.state == TxnState::committed && t.step == step) {
      Status s = log_->set_aside(t);
      Status upkeep = s.ok() ? maintain(false) : Status();
      return s.ok() ? upkeep : s;
    }
  return make_error(Code::not_found, path() + ": no committed step " + std::to_string(step));
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

CKPT_INLINE Result<GarbageReport> Store::collect_garbage(bool dry_run) {
  if (!dry_run) CKPT_TRY(check_writable());
  CKPT_TRY(refresh());
  return log_->collect_garbage(txns_, dry_run);
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
