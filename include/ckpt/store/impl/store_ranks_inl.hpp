// ckpt: the commit protocol of store.hpp (spec/JOURNAL.md 5.3, spec/SHARDING.md 3): open, begin, commit
// and abort over the store's communicator. One process is the world of one: the same messages, gathered
// and broadcast by LocalComm as plain copies. Rank 0 is the coordinator: the only rank that holds the
// lock and writes the journal and the manifest. Every other rank writes its own shard file and nothing else.
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

namespace ckpt {

namespace detail {

// Every rank message starts with its kind, so a rank that is in a different collective than rank 0
// is named instead of misread (spec/SHARDING.md 3.5).
enum class RankMessage : std::uint8_t {
  status = 1,          // wire::agree(): one Status
  begin_request = 2,   // rank -> 0: readiness, step, world size
  begin_decision = 3,  // 0 -> all: Status, txn, step, world size, BEGIN offset
  shard_report = 4,    // rank -> 0: commit or abort, Status, shard entry, optimizer names, replicas, pieces
  outcome = 5,         // 0 -> all: decision, cleanup, COMMIT or ABORT, retired transactions, retention
};
inline constexpr std::uint32_t kMaxReportNames = std::uint32_t{1} << 24;

// Opens a message of the expected kind, or says what arrived instead.
[[nodiscard]] CKPT_INLINE Status open_message(Decoder& in, RankMessage kind, const std::string& from) {
  std::uint8_t k = 0;
  if (!wire::get_u8(in, k)) return make_error(Code::corrupt, from + " sent an empty message");
  if (k != static_cast<std::uint8_t>(kind))
    return make_error(Code::invalid_argument, from + " is in another collective call (message kind " + std::to_string(k) +
                                                  ", expected " + std::to_string(static_cast<int>(kind)) +
                                                  "): every rank must call open, begin, commit and abort in the same order");
  return Status();
}

// "abandoned on every rank" or, for one process, "abandoned" (spec/SHARDING.md 3.4).
[[nodiscard]] CKPT_INLINE const char* abandoned_words(int world) noexcept {
  return world > 1 ? " abandoned on every rank" : " abandoned";
}

// The body of an ok commit report (spec/SHARDING.md 3.5) of the shard `writer` finished as `summary`: shard
// entry, optimizer names, replicas, pieces. Both stores' ranks send it (spec/OBJECT.md 4.7).
CKPT_INLINE std::string report_body(const ShardWriter& writer, std::uint32_t rank, const std::string& shard_name,
                                    const ShardSummary& summary, const std::vector<std::string>& optimizer,
                                    const std::vector<ReplicaDecl>& replicas) {
  // The pieces come from what the writer wrote, not from reading the file back (the index digest pins both).
  std::vector<GlobalPiece> pieces;
  append_index_pieces(writer.written_index(), rank, pieces);
  Encoder out;
  encode_manifest_shard(out, manifest_shard(rank, shard_name, summary));
  out.u32(static_cast<std::uint32_t>(optimizer.size()));
  for (const auto& name : optimizer) wire::put_text(out, name);
  out.u32(static_cast<std::uint32_t>(replicas.size()));
  for (const auto& r : replicas) {
    wire::put_text(out, r.tensor);
    out.u16(static_cast<std::uint16_t>(r.dtype));
    out.u16(static_cast<std::uint16_t>(r.shape.size()));
    out.u32(r.owner);
    out.u64(r.digest);
    wire::put_dims(out, r.shape);
  }
  out.u32(static_cast<std::uint32_t>(pieces.size()));
  for (const auto& p : pieces) {
    wire::put_text(out, p.tensor);
    out.u16(static_cast<std::uint16_t>(p.dtype));
    out.u16(static_cast<std::uint16_t>(p.global_shape.size()));
    wire::put_dims(out, p.global_shape);
    wire::put_dims(out, p.offsets);
    wire::put_dims(out, p.shape);
  }
  return std::move(out.str());
}

// Decodes untrusted report bytes; every count and length is checked against the bytes left.
[[nodiscard]] CKPT_INLINE Status decode_report_body(Decoder& in, std::uint32_t rank, ManifestShard& entry,
                                               std::vector<std::string>& optimizer, std::vector<ReplicaDecl>& replicas,
                                               std::vector<GlobalPiece>& pieces) {
  const std::string from = wire::rank_name(static_cast<int>(rank));
  auto bad = [&](const std::string& what) {
    return make_error(Code::corrupt, from + " sent a malformed shard report at byte " + std::to_string(in.position()) + ": " + what);
  };
  CKPT_TRY(decode_manifest_shard(in, entry, from + " shard entry"));
  std::uint32_t n = 0;
  if (!in.u32(n) || n > kMaxReportNames || n > in.remaining() / 4) return bad("optimizer name count");
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string name;
    if (!wire::get_text(in, name, static_cast<std::uint32_t>(format::kMaxNameLength))) return bad("optimizer name");
    optimizer.push_back(std::move(name));
  }
  if (!in.u32(n) || n > kMaxReportNames || n > in.remaining() / 20) return bad("replica count");
  for (std::uint32_t i = 0; i < n; ++i) {
    ReplicaDecl r;
    std::uint16_t dtype = 0, ndim = 0;
    if (!wire::get_text(in, r.tensor, static_cast<std::uint32_t>(format::kMaxNameLength)) || !in.u16(dtype) || !in.u16(ndim) ||
        ndim > format::kMaxRank || !in.u32(r.owner) || !in.u64(r.digest) || !wire::get_dims(in, ndim, r.shape))
      return bad("replica " + std::to_string(i));
    if (format::dtype_info(dtype) == nullptr) return bad("replica '" + r.tensor + "': unknown dtype " + std::to_string(dtype));
    r.dtype = static_cast<DType>(dtype);
    r.rank = rank;
    replicas.push_back(std::move(r));
  }
  if (!in.u32(n) || n > in.remaining() / 8) return bad("piece count");
  for (std::uint32_t i = 0; i < n; ++i) {
    GlobalPiece p;
    std::uint16_t dtype = 0, ndim = 0;
    if (!wire::get_text(in, p.tensor, static_cast<std::uint32_t>(format::kMaxNameLength)) || !in.u16(dtype) || !in.u16(ndim) ||
        ndim > format::kMaxRank || !wire::get_dims(in, ndim, p.global_shape) || !wire::get_dims(in, ndim, p.offsets) ||
        !wire::get_dims(in, ndim, p.shape))
      return bad("piece " + std::to_string(i));
    if (format::dtype_info(dtype) == nullptr) return bad("piece of '" + p.tensor + "': unknown dtype " + std::to_string(dtype));
    p.dtype = static_cast<DType>(dtype);
    p.rank = rank;
    pieces.push_back(std::move(p));
  }
  if (in.remaining() != 0) return bad(std::to_string(in.remaining()) + " trailing bytes");
  return Status();
}

// Rank 0's MANIFEST of a transaction from its gathered shard entries (already in m.shards): rank 0's state,
// with the optimizer tensors every rank listed, each once, in rank order (spec/SHARDING.md 3.3); checked
// as a reader will check it. The one manifest builder of the directory and object stores.
[[nodiscard]] CKPT_INLINE Status complete_manifest(Manifest& m, std::uint64_t txn, std::uint64_t step, int world, const Uuid& store_uuid,
                                                   const TrainingState& state, std::vector<std::string>& optimizer) {
  m.txn = txn;
  m.step = step;
  m.world_size = static_cast<std::uint32_t>(world);
  m.store_uuid = store_uuid;
  m.state = state;
  m.state.step = step;
  std::set<std::string> seen(m.state.optimizer_tensors.begin(), m.state.optimizer_tensors.end());
  for (auto& name : optimizer)
    if (seen.insert(name).second) m.state.optimizer_tensors.push_back(std::move(name));
  CKPT_TRY(check_training_state(m.state));
  return check_manifest(m);
}

// What rank 0 decided at commit or abort, as every rank receives it.
struct RankOutcome {
  Status decision;  // what commit() returns on every rank (ok: committed)
  Status cleanup;   // ABORT and file removal, when the transaction was abandoned; what abort() returns
  bool committed = false;
  CommitRecord commit;
  std::uint64_t commit_offset = 0;
  bool abort_written = false;
  std::uint64_t abort_offset = 0;
  AbortReason abort_reason = AbortReason::writer_error;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> retired;  // txn, RETIRE offset
  Status retention;
};

CKPT_INLINE std::string encode_outcome(const RankOutcome& o) {
  Encoder out;
  out.u8(static_cast<std::uint8_t>(RankMessage::outcome));
  wire::put_status(out, o.decision);
  wire::put_status(out, o.cleanup);
  out.u8(o.committed ? 1 : 0);
  out.u64(o.commit.txn);
  out.u64(o.commit.step);
  out.u64(o.commit.manifest_size);
  out.u64(o.commit.manifest_digest);
  out.u64(o.commit_offset);
  out.u8(o.abort_written ? 1 : 0);
  out.u64(o.abort_offset);
  out.u32(static_cast<std::uint32_t>(o.abort_reason));
  out.u32(static_cast<std::uint32_t>(o.retired.size()));
  for (const auto& [txn, offset] : o.retired) {
    out.u64(txn);
    out.u64(offset);
  }
  wire::put_status(out, o.retention);
  return std::move(out.str());
}

[[nodiscard]] CKPT_INLINE Status decode_outcome(const std::string& bytes, RankOutcome& o) {
  Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  CKPT_TRY(open_message(in, RankMessage::outcome, "rank 0"));
  std::uint8_t committed = 0, aborted = 0;
  std::uint32_t reason = 0, n = 0;
  bool ok = wire::get_status(in, o.decision) && wire::get_status(in, o.cleanup) && wire::get_u8(in, committed) &&
            in.u64(o.commit.txn) && in.u64(o.commit.step) && in.u64(o.commit.manifest_size) &&
            in.u64(o.commit.manifest_digest) && in.u64(o.commit_offset) && wire::get_u8(in, aborted) &&
            in.u64(o.abort_offset) && in.u32(reason) && in.u32(n) && n <= in.remaining() / 16;
  for (std::uint32_t i = 0; ok && i < n; ++i) {
    std::uint64_t txn = 0, offset = 0;
    ok = in.u64(txn) && in.u64(offset);
    o.retired.emplace_back(txn, offset);
  }
  ok = ok && wire::get_status(in, o.retention) && in.remaining() == 0;
  if (!ok) return make_error(Code::corrupt, "rank 0 broadcast a malformed transaction outcome");
  o.committed = committed != 0;
  o.abort_written = aborted != 0;
  o.abort_reason = static_cast<AbortReason>(reason);
  return Status();
}

}  // namespace detail

// --- Store: open and begin ------------------------------------------------------------------------

CKPT_INLINE Result<std::unique_ptr<Store>> Store::open(std::unique_ptr<CommitLog> log, Access access, StoreOptions options) {
  static LocalComm local;  // stateless
  return open_with(std::move(log), access, std::move(options), CommRef(local));
}

CKPT_INLINE Result<std::unique_ptr<Store>> Store::open(FsRef fs, std::string path, Access access, StoreOptions options) {
  return open(journal_log(fs, std::move(path)), access, std::move(options));
}

CKPT_INLINE Status Store::read_log(const std::string& from_rank0) {
  CKPT_ASSIGN_OR_RETURN(RecoveryReport report, log_->decode(from_rank0, options_));
  adopt(std::move(report));
  return Status();
}

CKPT_INLINE Result<std::unique_ptr<Store>> Store::open_with(std::unique_ptr<CommitLog> log, Access access, StoreOptions options,
                                                            CommRef comm) {
  std::unique_ptr<Store> store(new Store(std::move(log), access, std::move(options), comm));
  store->log_->configure(store->options_);
  const int rank = comm.rank(), world = comm.size();
  // Rank 0 (or the one process) opens the log: the writer's open, or a read. What it read goes to the
  // others, which decode it (a journal on a shared file system is read by each rank itself, after rank 0's
  // recovery has finished with it: spec/SHARDING.md 3.1).
  Status local;
  std::string listing;
  if (rank == 0) {
    if (access == Access::read_write) {
      auto opened = store->log_->open_writer(store->options_);
      if (opened.ok()) {
        store->adopt(std::move(opened).value());
        store->writer_ = true;
        if (world > 1) {
          auto read = store->log_->read(store->options_);
          if (read.ok()) listing = std::move(*read);
          else local = read.status();
        }
      } else {
        local = opened.status();
      }
    } else {
      auto read = store->log_->read(store->options_);
      if (read.ok()) listing = std::move(*read);
      else local = read.status();
      if (local.ok()) local = store->read_log(listing);
    }
  }
  // No other rank waits on a world of one: its Status is the answer (and carries no rank name).
  if (world == 1) {
    CKPT_TRY(local);
    return Result<std::unique_ptr<Store>>(std::move(store));  // explicit: nvcc (EDG) has no C++20 implicit move
  }
  Encoder first;
  wire::put_status(first, local);
  wire::put_text(first, listing);
  std::string bytes = rank == 0 ? std::move(first.str()) : std::string();
  CKPT_TRY(comm.broadcast(bytes, 0));
  if (rank != 0) {
    Decoder in = wire::decoder(bytes);
    Status coordinator;
    if (!wire::get_status(in, coordinator) || !wire::get_text(in, listing, std::numeric_limits<std::uint32_t>::max()))
      local = make_error(Code::corrupt, "rank 0 broadcast a malformed open");
    else if (coordinator.ok()) local = store->read_log(listing);  // rank 0's failure is reported by agree()
    store->participant_ = access == Access::read_write;
  }
  CKPT_TRY(wire::agree(comm, local));
  return Result<std::unique_ptr<Store>>(std::move(store));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE void Store::mirror_txn(const TxnInfo& t) {
  const auto it = by_txn_.find(t.txn);
  if (it != by_txn_.end()) {
    txns_[it->second] = t;
    return;
  }
  by_txn_.insert({t.txn, txns_.size()});
  txns_.push_back(t);
  next_txn_ = std::max(next_txn_, t.txn + 1);
}

CKPT_INLINE Result<std::unique_ptr<Store>> Store::open_rank(std::unique_ptr<CommitLog> log, int rank, int world,
                                                            StoreOptions options) {
  if (world < 1 || rank < 0 || rank >= world)
    return make_error(Code::invalid_argument, log->location() + ": rank " + std::to_string(rank) + " is not a rank of a world of " +
                                                  std::to_string(world));
  static LocalComm local;  // replaced below, before anything uses it
  std::unique_ptr<Store> store(new Store(std::move(log), Access::read_write, std::move(options), CommRef(local)));
  store->log_->configure(store->options_);
  store->caller_comm_.emplace(rank, world);
  store->comm_ = CommRef(*store->caller_comm_);
  // Rank 0 opens the log's writer as the collective open does (3.1). Another rank reads nothing: it writes
  // only its own shard, and learns the transaction from rank 0's begin decision, so its open may come in any order.
  if (rank == 0) {
    CKPT_ASSIGN_OR_RETURN(RecoveryReport report, store->log_->open_writer(store->options_));
    store->adopt(std::move(report));
    store->writer_ = true;
  } else {
    store->participant_ = true;
  }
  return Result<std::unique_ptr<Store>>(std::move(store));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE Result<std::unique_ptr<Store>> Store::open_rank(FsRef fs, std::string path, int rank, int world, StoreOptions options) {
  return open_rank(journal_log(fs, std::move(path)), rank, world, std::move(options));
}

CKPT_INLINE std::string Store::begin_request(std::uint64_t step) const {
  // Phase 1: whether this rank can take part; nothing is written unless all can (spec/SHARDING.md 3.2).
  Status local;
  if (coordinator()) local = check_writable();
  else if (access_ != Access::read_write || !participant_)
    local = make_error(Code::invalid_argument, path() + ": rank " + std::to_string(comm_.rank()) + " did not open this store read_write");
  if (local.ok() && open_txn_ != nullptr)
    local = make_error(Code::conflict, path() + ": transaction " + std::to_string(open_txn_->txn()) + " for step " +
                                           std::to_string(open_txn_->step()) + " is still open");
  Encoder request;
  request.u8(static_cast<std::uint8_t>(detail::RankMessage::begin_request));
  wire::put_status(request, local);
  request.u64(step);
  request.u32(static_cast<std::uint32_t>(comm_.size()));
  return std::move(request.str());
}

CKPT_INLINE std::string Store::decide_begin(std::uint64_t step, const std::vector<std::string>& requests) {
  return decide_begin(step, Result<std::vector<std::string>>(requests));
}

CKPT_INLINE std::string Store::decide_begin(std::uint64_t step, Result<std::vector<std::string>> gathered) {
  // Phase 2: rank 0 writes BEGIN naming every rank's shard and makes the step directory, then tells everyone.
  const int world = comm_.size();
  TxnInfo t;
  Status decision = gathered.ok() ? Status() : gathered.status();
  if (decision.ok() && !coordinator())
    decision = make_error(Code::invalid_argument, path() + ": only rank 0, which holds the lock, decides a begin");
  if (decision.ok() && gathered->size() != static_cast<std::size_t>(world))
    decision = make_error(Code::invalid_argument, "begin: gathered " + std::to_string(gathered->size()) +
                                                      " requests from a world of " + std::to_string(world));
  for (std::size_t r = 0; decision.ok() && r < gathered->size(); ++r) {
    const std::string& bytes = (*gathered)[r];
    const std::string from = wire::rank_name(static_cast<int>(r));
    Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    Status theirs;
    std::uint64_t their_step = 0;
    std::uint32_t their_world = 0;
    decision = detail::open_message(in, detail::RankMessage::begin_request, from);
    if (decision.ok() && (!wire::get_status(in, theirs) || !in.u64(their_step) || !in.u32(their_world) || in.remaining() != 0))
      decision = make_error(Code::corrupt, from + " sent a malformed begin request");
    if (decision.ok() && !theirs.ok()) decision = wire::from_rank(theirs, static_cast<int>(r), world);
    if (decision.ok() && (their_step != step || their_world != static_cast<std::uint32_t>(world)))
      decision = make_error(Code::invalid_argument, from + " begins step " + std::to_string(their_step) + " in a world of " +
                                                        std::to_string(their_world) + ", rank 0 step " + std::to_string(step) +
                                                        " in a world of " + std::to_string(world));
  }
  // A step number is live at most once, on every log (spec/JOURNAL.md 10): saved again only once retired.
  for (const auto& live : txns_)
    if (decision.ok() && live.state == TxnState::committed && live.step == step)
      decision = make_error(Code::conflict, path() + ": step " + std::to_string(step) + " is committed (txn " + std::to_string(live.txn) +
                                                "); a step number is committed once while it is live: retire it to save it again (spec/JOURNAL.md 10)");
  if (decision.ok()) {
    // The id is spent even if BEGIN fails: ids are never reused (spec/JOURNAL.md 5.6).
    t.txn = log_->new_txn(next_txn_++);
    t.step = step;
    t.world_size = static_cast<std::uint32_t>(world);
    for (std::uint32_t r = 0; r < t.world_size; ++r) t.files.push_back(TxnFile{r, shard_file_name(r, t.world_size)});
    decision = log_->begin(t, txns_);
    if (decision.ok() || t.begin_offset != 0) mirror_txn(t);  // BEGIN is durable: the transaction exists
    if (!decision.ok() && t.begin_offset != 0) {
      Status removed = abandon(t.txn, AbortReason::writer_error);
      std::string msg = "step " + std::to_string(step) + " (txn " + std::to_string(t.txn) + ")" + detail::abandoned_words(world);
      if (!removed.ok()) msg += " (cleanup: " + removed.message() + ")";
      decision = decision.with_context(msg);
    }
  }
  Encoder out;
  out.u8(static_cast<std::uint8_t>(detail::RankMessage::begin_decision));
  wire::put_status(out, decision);
  out.u64(t.txn);
  out.u64(t.step);
  out.u32(t.world_size);
  out.u64(t.begin_offset);
  return std::move(out.str());
}

CKPT_INLINE Result<TxnInfo> Store::accept_begin(const std::string& decision_bytes) {
  TxnInfo t;
  Decoder in(reinterpret_cast<const unsigned char*>(decision_bytes.data()), decision_bytes.size());
  Status decision = detail::open_message(in, detail::RankMessage::begin_decision, "rank 0");
  Status verdict;
  if (decision.ok() && (!wire::get_status(in, verdict) || !in.u64(t.txn) || !in.u64(t.step) || !in.u32(t.world_size) ||
                        !in.u64(t.begin_offset) || in.remaining() != 0))
    decision = make_error(Code::corrupt, "rank 0 sent a malformed begin decision");
  if (decision.ok()) decision = verdict;
  if (decision.ok() && t.world_size != static_cast<std::uint32_t>(comm_.size()))
    decision = make_error(Code::invalid_argument, "rank 0 began txn " + std::to_string(t.txn) + " in a world of " +
                                                      std::to_string(t.world_size) + ", this rank is in a world of " +
                                                      std::to_string(comm_.size()));
  if (!decision.ok()) return decision;
  if (!coordinator()) {
    for (std::uint32_t r = 0; r < t.world_size; ++r) t.files.push_back(TxnFile{r, shard_file_name(r, t.world_size)});
    mirror_txn(t);
  }
  return t;
}

CKPT_INLINE Result<std::unique_ptr<Transaction>> Store::create_shard(const TxnInfo& t) {
  // Phase 3: every rank creates its shard under the final name BEGIN gave it (O_EXCL).
  const std::string dir_path = step_path(t.dir());
  const std::string shard_name = shard_file_name(static_cast<std::uint32_t>(comm_.rank()), t.world_size);
  WriterOptions wo;
  wo.alignment_log2 = options_.alignment_log2;
  wo.chunk_size_log2 = options_.chunk_size_log2;
  wo.buffer_size = options_.buffer_size;
  wo.atomic_rename = false;  // BEGIN already names the file; O_EXCL, no temporary name
  wo.durable = true;
  if (!reserved_slot_.empty()) {
    // The slot reserve_slot mapped: the capture's bytes already lie in it (spec/JOURNAL.md 10.1).
    wo.reuse = std::exchange(reserved_slot_, std::string());
    wo.in_place = std::exchange(reserved_map_, nullptr);
    wo.in_place_size = std::exchange(reserved_size_, 0);
  } else if (options_.reuse_files) {
    // A retired step's file, written over: its pages are not allocated again (spec/JOURNAL.md 10.1).
    const std::string slots = join_path(log_->step_root(), std::string(journal::kSlotsName));
    auto free = fs().list_dir(slots);
    if (free.ok() && !free->empty()) wo.reuse = join_path(slots, *std::min_element(free->begin(), free->end()));
  }
  CKPT_ASSIGN_OR_RETURN(ShardWriter writer, ShardWriter::create(fs(), join_path(dir_path, shard_name), wo));
  std::unique_ptr<Transaction> tx(new Transaction(this, t.txn, t.step, dir_path, shard_name, std::move(writer)));
  open_txn_ = tx.get();
  return Result<std::unique_ptr<Transaction>>(std::move(tx));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE Result<std::unique_ptr<Transaction>> Store::join(const std::string& decision) {
  CKPT_ASSIGN_OR_RETURN(TxnInfo t, accept_begin(decision));
  return create_shard(t);
}

CKPT_INLINE Result<std::unique_ptr<Transaction>> Store::begin(std::uint64_t step) {
  if (caller_coordinated()) return CallerComm::refusal().with_context(path());
  // The phases of spec/SHARDING.md 3.2, with the messages carried by the store's communicator.
  const int rank = comm_.rank(), world = comm_.size();
  auto gathered = comm_.gather(begin_request(step), 0);
  std::string decision;
  if (rank == 0) decision = decide_begin(step, std::move(gathered));
  else if (!gathered.ok()) return gathered.status();
  CKPT_TRY(comm_.broadcast(decision, 0));
  CKPT_ASSIGN_OR_RETURN(TxnInfo t, accept_begin(decision));
  auto created = create_shard(t);
  Status agreed = wire::agree(comm_, created.ok() ? Status() : created.status(), [&](Status combined) {
    if (combined.ok()) return combined;
    // No rank writes after this point, so rank 0 may remove every file BEGIN named (spec/JOURNAL.md 5.5).
    Status removed = abandon(t.txn, AbortReason::writer_error);
    std::string msg = "step " + std::to_string(step) + " (txn " + std::to_string(t.txn) + ")" + detail::abandoned_words(world);
    if (!removed.ok()) msg += " (cleanup: " + removed.message() + ")";
    return combined.with_context(msg);
  });
  if (!agreed.ok()) {
    if (created.ok()) {
      (*created)->finished_ = true;  // rank 0 abandoned it: nothing to drop; its file is gone, or goes with the writer
      open_txn_ = nullptr;
    }
    if (rank != 0) {
      t.state = TxnState::aborted;
      mirror_txn(t);
    }
    return agreed;
  }
  return created;
}

// --- Transaction: replicated tensors, commit and abort ---------------------------------------------

CKPT_INLINE Status Transaction::add_replicated_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                              std::size_t size, int owner) {
  if (owner < 0 || owner >= world_)
    return make_error(Code::invalid_argument, "replicated tensor '" + std::string(name) + "': owner rank " +
                                                  std::to_string(owner) + " is not a rank of a world of " + std::to_string(world_));
  if (world_ == 1) return add_tensor(name, dtype, shape, data, size);
  CKPT_TRY(check_active());
  CKPT_TRY(detail::check_name("tensor", name));
  std::uint64_t bytes = 0;
  if (shape.size() > format::kMaxRank || !shape_bytes(shape, dtype, bytes) || bytes != size)
    return make_error(Code::invalid_argument, "replicated tensor '" + std::string(name) + "': " + std::to_string(size) +
                                                  " bytes do not match dtype code " + std::to_string(static_cast<int>(dtype)) +
                                                  " and shape " + shape_string(shape));
  for (const auto& r : replicas_)
    if (r.tensor == name) return make_error(Code::conflict, "replicated tensor '" + std::string(name) + "' declared twice");
  ReplicaDecl decl{std::string(name), dtype, shape, static_cast<std::uint32_t>(owner), xxh3_64(data, size),
                   static_cast<std::uint32_t>(rank_)};
  if (rank_ == owner) CKPT_TRY(add_tensor(name, dtype, shape, data, size));
  replicas_.push_back(std::move(decl));
  return Status();
}

CKPT_INLINE std::string Transaction::coordinate(bool commit, Result<std::vector<std::string>> reports) {
  Store& store = *store_;
  const std::string where = "step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ")";
  detail::RankOutcome outcome;
  Status decision = reports.ok() ? Status() : reports.status();
  if (decision.ok() && reports->size() != static_cast<std::size_t>(world_))
    decision = make_error(Code::invalid_argument, "gathered " + std::to_string(reports->size()) + " reports from a world of " +
                                                      std::to_string(world_));
  int aborting_rank = commit ? -1 : 0;
  Manifest m;
  std::vector<std::string> optimizer;
  std::vector<ReplicaDecl> replicas;
  std::vector<GlobalPiece> pieces;
  for (std::size_t r = 0; decision.ok() && r < reports->size(); ++r) {
    const std::string& bytes = (*reports)[r];
    const std::string from = wire::rank_name(static_cast<int>(r));
    Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    std::uint8_t wants_commit = 0;
    Status theirs;
    decision = detail::open_message(in, detail::RankMessage::shard_report, from);
    if (decision.ok() && (!wire::get_u8(in, wants_commit) || !wire::get_status(in, theirs)))
      decision = make_error(Code::corrupt, from + " sent a malformed shard report");
    if (decision.ok() && !theirs.ok()) decision = wire::from_rank(theirs, static_cast<int>(r), world_);
    if (!decision.ok() || wants_commit == 0) {
      if (decision.ok() && aborting_rank < 0) aborting_rank = static_cast<int>(r);
      continue;
    }
    if (!commit) continue;  // rank 0 aborts: the reports of committing ranks are not needed
    ManifestShard entry;
    decision = detail::decode_report_body(in, static_cast<std::uint32_t>(r), entry, optimizer, replicas, pieces);
    if (decision.ok() && (entry.rank != r || entry.name != shard_file_name(entry.rank, static_cast<std::uint32_t>(world_))))
      decision = make_error(Code::corrupt, from + " sent an entry for rank " + std::to_string(entry.rank) + " file '" + entry.name + "'");
    m.shards.push_back(std::move(entry));
  }
  const bool failed_by_error = !decision.ok();
  if (decision.ok() && aborting_rank >= 0)
    decision = make_error(Code::conflict, wire::rank_name(aborting_rank) + " abandoned the transaction (abort())");
  // Every tensor covered exactly once, every replica declared alike (spec/SHARDING.md 4).
  if (decision.ok()) {
    auto problems = check_coverage(pieces);
    if (state_.values.count(std::string(kPartialStepKey))) problems = without_gaps(std::move(problems));
    auto replica_problems = check_replicas(replicas);
    for (auto& p : replica_problems) problems.push_back(std::move(p));
    decision = coverage_status(problems, Code::invalid_argument, where);
  }
  bool in_doubt = false;
  if (decision.ok()) decision = detail::complete_manifest(m, txn_, step_, world_, store.uuid_, state_, optimizer);
  if (decision.ok()) {
    // Steps 4-6 of spec/JOURNAL.md 5.3: the MANIFEST durable under its final name, then the commit point.
    const std::string bytes = encode_manifest(m);
    TxnInfo* t = store.find_txn(txn_);
    decision = store.log_->write_manifest(*t, bytes).with_context(where);
    if (decision.ok()) {
      CommitRecord c{txn_, step_, bytes.size(), manifest_digest(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size())};
      const SaveRecord stats = save_record(c, m);
      CommitDoubt doubt = CommitDoubt::none;
      decision = store.log_->commit(*t, c, stats, doubt);
      if (!decision.ok()) {
        in_doubt = doubt == CommitDoubt::in_doubt;  // the commit may be durable: nothing may be removed
        decision = decision.with_context(where);
      } else {
        t->state = TxnState::committed;
        t->commit = c;
        t->save = stats;
        outcome.committed = true;
        outcome.commit = c;
        outcome.commit_offset = t->end_offset;
        // The transaction is over once the commit is durable: retention and upkeep run between saves (spec 5.7).
        finished_ = true;
        if (store.open_txn_ == this) store.open_txn_ = nullptr;
        if (store.options_.retention.enabled()) {
          auto retired = store.apply_retention(store.options_.retention);
          if (retired.ok()) {
            for (const auto& s : *retired) outcome.retired.emplace_back(s.txn, store.find_txn(s.txn)->retire_offset);
          } else {
            outcome.retention = retired.status();
          }
        }
      }
    }
  }
  if (!decision.ok() && !in_doubt) {
    // No COMMIT exists and no rank writes any more: ABORT, then remove every file BEGIN named (spec/JOURNAL.md 5.5).
    // user: every rank was fine and one asked to abort; anything else stopped the save (writer_error).
    const AbortReason reason = !failed_by_error && aborting_rank >= 0 ? AbortReason::user : AbortReason::writer_error;
    outcome.cleanup = store.abandon(txn_, reason);
    const TxnInfo* t = store.find_txn(txn_);
    outcome.abort_written = t != nullptr && t->state == TxnState::aborted;
    if (outcome.abort_written) {
      outcome.abort_offset = t->end_offset;
      outcome.abort_reason = t->abort_reason;
    }
    std::string msg = where + detail::abandoned_words(world_) + ", the previous step is untouched";
    if (!outcome.cleanup.ok()) msg += " (cleanup: " + outcome.cleanup.message() + ")";
    decision = decision.with_context(msg);
  }
  outcome.decision = decision;
  return detail::encode_outcome(outcome);
}

CKPT_INLINE Result<CommitResult> Transaction::commit_result(const detail::RankOutcome& outcome) {
  if (!outcome.decision.ok()) return outcome.decision;
  Store& store = *store_;
  CommitResult result;
  if (const TxnInfo* t = store.find_txn(txn_)) result.step = store.step_info(*t);
  for (const auto& [txn, offset] : outcome.retired)
    if (const TxnInfo* t = store.find_txn(txn)) result.retired.push_back(store.step_info(*t));
  result.retention = outcome.retention;
  return result;
}

CKPT_INLINE Result<CommitResult> Transaction::commit() {
  CKPT_TRY(check_open());
  if (store_->caller_coordinated()) return CallerComm::refusal().with_context(dir_path_);
  if (world_ == 1) {
    // Mistakes the caller can still fix leave a one-process transaction open; across ranks they are this
    // rank's report, since the others are already waiting (spec/SHARDING.md 3.4).
    Status fixable = check_training_state(state_);
    if (fixable.ok() && writer_->piece_open())
      fixable = make_error(Code::invalid_argument, join_path(dir_path_, shard_name_) + ": a piece is still open at commit()");
    if (!fixable.ok()) return fixable;
  }
  CKPT_ASSIGN_OR_RETURN(detail::RankOutcome outcome, finish(true, Status()));
  return commit_result(outcome);
}

CKPT_INLINE Result<std::string> Transaction::report() {
  CKPT_TRY(check_open());
  if (!store_->caller_coordinated())
    return make_error(Code::invalid_argument, dir_path_ + ": report() is for a store opened with Store::open_rank; use commit()");
  if (reported_) return make_error(Code::invalid_argument, join_path(dir_path_, shard_name_) + ": already reported");
  if (writer_->piece_open())  // the caller can still fix it: the transaction stays open
    return make_error(Code::invalid_argument, join_path(dir_path_, shard_name_) + ": a piece is still open at report()");
  Status mine;  // an I/O error kept from writing, a bad training state, or the shard's finish
  std::string bytes = make_report(true, Status(), &mine);
  reported_ = true;
  if (rank_ != 0) {  // a participant's part is over: rank 0 decides alone (3.6)
    finished_ = true;
    if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  }
  if (!mine.ok())
    return mine.with_context("step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ") " +
                             wire::rank_name(rank_) + ": the shard was not finished, rank 0 must not commit");
  return bytes;
}

CKPT_INLINE Result<CommitResult> Transaction::commit_reports(const std::vector<std::string>& reports) {
  CKPT_TRY(check_open());
  if (!store_->caller_coordinated() || rank_ != 0 || !reported_)
    return make_error(Code::invalid_argument, dir_path_ + ": commit_reports() is for rank 0 of a store opened with "
                                                          "Store::open_rank, after its own report()");
  std::string outcome_bytes = coordinate(true, Result<std::vector<std::string>>(reports));
  finished_ = true;
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  CKPT_ASSIGN_OR_RETURN(detail::RankOutcome outcome, adopt_outcome(outcome_bytes));
  return commit_result(outcome);
}

CKPT_INLINE Status Transaction::abort() {
  CKPT_TRY(check_open());
  CKPT_ASSIGN_OR_RETURN(detail::RankOutcome outcome, finish(false, Status()));
  return outcome.cleanup;
}

CKPT_INLINE Status Transaction::abort(const Status& reason) {
  CKPT_TRY(check_open());
  CKPT_ASSIGN_OR_RETURN(detail::RankOutcome outcome, finish(false, reason));
  return outcome.cleanup;
}

CKPT_INLINE std::string Transaction::make_report(bool commit, const Status& reason, Status* local_out) {
  Store& store = *store_;
  // This rank's report: its deferred I/O error, or its finished shard (synced, with its directory) and pieces.
  Status local = failure_.ok() ? reason : failure_;
  std::string body;
  if (commit && local.ok()) local = check_training_state(state_);
  if (commit && local.ok()) {
    // Step 3 of spec/JOURNAL.md 5.3: data, index, footer, fsync of the file and of the step directory.
    auto summary = writer_->finish();
    if (summary.ok() && store.options_.verify_written) {
      // Opt-in: the finished file read back through the reader's checks and every chunk verified (FORMAT 7.2).
      auto checked = verify_file(store.fs(), summary->path, VerifyOptions{});
      if (!checked.ok()) summary = checked.status();
      else if (!checked->ok())
        summary = make_error(Code::corrupt, summary->path + ": reads back with " + std::to_string(checked->problems.size()) +
                                                " problems (ckpt-verify names them)");
    }
    if (!summary.ok()) {
      local = summary.status();
    } else {
      body = detail::report_body(*writer_, static_cast<std::uint32_t>(rank_), shard_name_, *summary, state_.optimizer_tensors, replicas_);
    }
  }
  writer_.reset();  // an unfinished shard is closed and removed here; a finished one waits for rank 0's decision
  Encoder report;
  report.u8(static_cast<std::uint8_t>(detail::RankMessage::shard_report));
  report.u8(commit && local.ok() ? 1 : 0);
  wire::put_status(report, local);
  report.bytes(local.ok() ? body : std::string());
  if (local_out != nullptr) *local_out = local;
  return std::move(report.str());
}

CKPT_INLINE Result<detail::RankOutcome> Transaction::finish(bool commit, const Status& reason) {
  Store& store = *store_;
  Result<std::vector<std::string>> gathered = std::vector<std::string>();
  if (store.caller_coordinated()) {
    // abort() of a caller-coordinated save: rank 0 abandons for every rank, whose shards the caller stops (3.6).
    if (commit || rank_ != 0) return CallerComm::refusal().with_context(dir_path_);
    std::string mine = reported_ ? std::string() : make_report(false, reason);
    Encoder none;  // what every other rank would report when it aborts
    none.u8(static_cast<std::uint8_t>(detail::RankMessage::shard_report));
    none.u8(0);
    wire::put_status(none, Status());
    gathered->assign(static_cast<std::size_t>(world_), none.str());
    if (!reported_) (*gathered)[0] = std::move(mine);
  } else {
    gathered = comm_.gather(make_report(commit, reason), 0);
  }
  std::string outcome_bytes;
  if (rank_ == 0) outcome_bytes = coordinate(commit, std::move(gathered));
  finished_ = true;
  if (store.open_txn_ == this) store.open_txn_ = nullptr;
  if (rank_ != 0 && !gathered.ok()) return gathered.status();
  // Rank 0 decided and acted already: its outcome stands even when a rank that left misses the broadcast.
  Status sent = store.caller_coordinated() ? Status() : comm_.broadcast(outcome_bytes, 0);
  if (rank_ != 0 && !sent.ok())
    return sent.with_context("step " + std::to_string(step_) + " (txn " + std::to_string(txn_) +
                             "): rank 0's decision did not arrive, so this rank cannot tell whether it committed; "
                             "the journal decides");
  return adopt_outcome(outcome_bytes);
}

CKPT_INLINE Result<detail::RankOutcome> Transaction::adopt_outcome(const std::string& outcome_bytes) {
  Store& store = *store_;
  detail::RankOutcome outcome;
  CKPT_TRY(detail::decode_outcome(outcome_bytes, outcome));
  if (rank_ != 0) {
    // Keep this rank's view of the journal what rank 0 made it.
    if (TxnInfo* t = store.find_txn(txn_)) {
      TxnInfo updated = *t;
      if (outcome.committed) {
        updated.state = TxnState::committed;
        updated.commit = outcome.commit;
        updated.end_offset = outcome.commit_offset;
      } else if (outcome.abort_written) {
        updated.state = TxnState::aborted;
        updated.end_offset = outcome.abort_offset;
        updated.abort_reason = outcome.abort_reason;
      }
      store.mirror_txn(updated);
    }
    for (const auto& [txn, offset] : outcome.retired)
      if (TxnInfo* t = store.find_txn(txn)) {
        t->state = TxnState::retired;
        t->retire_offset = offset;
      }
  }
  return Result<detail::RankOutcome>(std::move(outcome));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE void Transaction::drop(const Status& why) {
  Store& store = *store_;
  writer_.reset();  // this rank's unfinished shard is closed and removed
  finished_ = true;
  if (store.open_txn_ == this) store.open_txn_ = nullptr;
  const std::string where = "step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ")";
  // The others' next collective fails instead of waiting for this rank (spec/SHARDING.md 3.4).
  if (world_ > 1) comm_.leave(why.with_context(wire::rank_name(rank_) + " dropped " + where));
  // The coordinator's journal is its own: ABORT and removal need no other rank. A participant's files go
  // with rank 0's abandonment, or with the next writable open's recovery.
  if (rank_ == 0 && store.coordinator()) store.abandon(txn_, AbortReason::user).ignore_error();
}

}  // namespace ckpt
