// ckpt: a crash-consistent store of checkpoint steps (spec/JOURNAL.md).
//
//   STORE/JOURNAL                   write-ahead log: BEGIN, COMMIT, ABORT, RETIRE records
//   STORE/LOCK                      held (Fs::lock) by the one writer
//   STORE/step-<step>-<txn>/        shard files + MANIFEST of one transaction
//
// A step exists for readers if and only if its COMMIT record is durable and valid. Opening read-only
// never writes and never blocks the writer; opening for writing takes the lock and runs recovery.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../dist/comm.hpp"
#include "../dist/coverage.hpp"
#include "../dist/wire.hpp"
#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "../io/posix_fs.hpp"
#include "commit_log.hpp"
#include "journal_log.hpp"
#include "journal.hpp"
#include "manifest.hpp"
#include "../shard/shard_reader.hpp"
#include "../shard/shard_writer.hpp"
#include "step_reader.hpp"
#include "training_state.hpp"
#include "../shard/verify.hpp"

namespace ckpt {

class Store;

namespace detail {
struct RankOutcome;  // what the coordinator decided at commit or abort (impl/store_ranks_inl.hpp)
}  // namespace detail

// How long a save of some size takes here, from the store's recorded saves (spec/JOURNAL.md 4.8).
struct SaveEstimate {
  std::size_t samples = 0;           // records it is based on; 0: nothing recorded, nothing known
  std::uint64_t bytes = 0;           // the size estimated
  double bytes_per_second = 0;       // the slowest of the recent saves: a hold-up budget needs the worst case
  double seconds = 0;                // bytes / bytes_per_second
  [[nodiscard]] bool known() const noexcept { return samples > 0; }
};
// The estimate over a store's recorded saves (oldest first): the slowest throughput of the last `window`.
[[nodiscard]] SaveEstimate estimate_from(const std::vector<SaveRecord>& records, std::optional<std::uint64_t> bytes,
                                         std::size_t window);
// The SAVE_STATS record of a commit timed now (spec/JOURNAL.md 4.8): a save of `bytes` begun at `started` whose
// caller was blocked for `stall` (unset: throughout).
[[nodiscard]] SaveRecord timed_save_record(const CommitRecord& c, std::uint64_t bytes, std::chrono::steady_clock::time_point started,
                                           std::optional<std::chrono::nanoseconds> stall, bool async);

// The outcome of a commit: the new step, and what retention did afterwards.
struct CommitResult {
  StepInfo step;
  std::vector<StepInfo> retired;
  Status retention;  // a retention failure does not undo the commit; the next writable open finishes it
};

// One save in progress (spec/JOURNAL.md 5.3), over the store's communicator: one process is the world of
// one. Across ranks (spec/SHARDING.md 3), begin, commit and abort are collective: every rank calls them, in
// the same order. An I/O error on one rank is kept until commit() (or abort()), which then abandons the
// transaction on every rank and returns the same Status everywhere, naming the failing rank; in a world of
// one the error abandons it at once. Destroying an open transaction never waits for other ranks: this
// rank's unfinished shard is removed, rank 0 writes ABORT and removes the step's files, and the
// communicator is left (Comm::leave) so that the other ranks' next collective fails instead of hanging.
class Transaction {
 public:
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  [[nodiscard]] std::uint64_t txn() const noexcept { return txn_; }
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] const std::string& directory() const noexcept { return dir_path_; }  // the step directory
  [[nodiscard]] bool active() const noexcept { return store_ != nullptr && !finished_; }
  // Training state saved in the manifest; its step is the transaction's. Across ranks, rank 0's state
  // is saved, with the optimizer tensor names of every rank added (spec/SHARDING.md 3.3).
  [[nodiscard]] TrainingState& state() noexcept { return state_; }
  // This process's rank and the number of ranks writing the step (0 and 1 for a single-process save).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int world_size() const noexcept { return world_; }

  [[nodiscard]] Status add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data, std::size_t size);
  // A tensor of optimizer state: written like any tensor and listed in state().optimizer_tensors.
  [[nodiscard]] Status add_optimizer_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                            std::size_t size);
  // A tensor every rank holds the same bytes of (e.g. a norm's weight under tensor parallelism): only
  // `owner` writes it; every rank that holds it calls this, and the coordinator checks that they all
  // declared the same dtype, shape, owner and content digest (spec/SHARDING.md 3.3). One rank: add_tensor.
  [[nodiscard]] Status add_replicated_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                             std::size_t size, int owner = 0);
  // Streaming writes of pieces, as ShardWriter.
  [[nodiscard]] Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                                   const Shape& local_shape);
  [[nodiscard]] Status write(const void* data, std::size_t size);
  [[nodiscard]] Status end_piece();
  // The shard writer itself (e.g. to compare chunk digests computed on a GPU before commit). An I/O
  // error it records surfaces at commit(), which then abandons the transaction.
  [[nodiscard]] ShardWriter& shard_writer() noexcept { return *writer_; }
  // When the save started and how long its caller was blocked, for the SAVE_STATS record (spec/JOURNAL.md
  // 4.8). AsyncSaver sets it; without it the save started at begin() and blocked its caller throughout.
  void set_save_timing(std::chrono::steady_clock::time_point started, std::chrono::nanoseconds stall, bool async) noexcept {
    started_ = started;
    stall_ = stall;
    async_ = async;
  }

  // Finishes the shard, writes and syncs the manifest, fsyncs the step directory, appends COMMIT.
  // On an I/O error the transaction is abandoned (ABORT, files removed) and the previous step is untouched;
  // when the COMMIT record itself cannot be made durable the store refuses further writes until reopened.
  // A training state or a piece still open that the caller can fix leaves a one-process transaction open.
  [[nodiscard]] Result<CommitResult> commit();
  // A save whose ranks the caller coordinates (Store::open_rank, spec/SHARDING.md 3.6), every rank:
  // finishes this rank's shard (durable, with its directory) and returns its shard report for rank 0. A
  // participant's transaction is then over; rank 0's waits for commit_reports() or abort(). An error is
  // this rank's own failure: its unfinished shard is removed, and rank 0 must not commit the step.
  [[nodiscard]] Result<std::string> report();
  // Rank 0 of such a save, after its own report(): decides from every rank's report, in rank order, and
  // commits or abandons, exactly as commit() does once the reports are gathered.
  [[nodiscard]] Result<CommitResult> commit_reports(const std::vector<std::string>& reports);
  // Writes ABORT and removes the files this transaction created (collective across ranks; in a
  // caller-coordinated save rank 0 abandons the step for every rank, whose files it removes).
  [[nodiscard]] Status abort();
  // Abandons the transaction because of this rank's own failure (e.g. a device error): across ranks,
  // commit() on every other rank returns `reason` naming this rank (spec/SHARDING.md 3.4); abort() here
  // returns the cleanup's Status. One rank: the same as abort().
  [[nodiscard]] Status abort(const Status& reason);

 private:
  friend class Store;
  Transaction(Store* store, std::uint64_t txn, std::uint64_t step, std::string dir_path, std::string shard_name,
              std::optional<ShardWriter> writer);
  [[nodiscard]] Status check_open() const;    // the store is open and the transaction not finished
  [[nodiscard]] Status check_active() const;  // check_open, and no I/O error kept for commit
  [[nodiscard]] Status fail(const Status& s);  // abandons (one rank) or keeps s for commit (ranks), then returns s with context
  // The one commit and abort (spec/JOURNAL.md 5.3, spec/SHARDING.md 3.4): one gather of shard reports,
  // rank 0's decision, one broadcast of the outcome. A world of one is the same exchange over LocalComm.
  [[nodiscard]] Result<detail::RankOutcome> finish(bool commit, const Status& reason);
  // This rank's part of finish: finishes (commit) or drops its shard and encodes its shard report (3.5);
  // `local`, when given, receives the Status the report carries.
  [[nodiscard]] std::string make_report(bool commit, const Status& reason, Status* local = nullptr);
  // Applies rank 0's encoded outcome to this rank's view of the journal; returns it decoded.
  [[nodiscard]] Result<detail::RankOutcome> adopt_outcome(const std::string& outcome_bytes);
  // What commit() and commit_reports() return for an outcome.
  [[nodiscard]] Result<CommitResult> commit_result(const detail::RankOutcome& outcome);
  // Rank 0's part of finish: checks every report, commits or abandons; returns the encoded outcome.
  [[nodiscard]] std::string coordinate(bool commit, Result<std::vector<std::string>> reports);
  // Abandons without waiting for any other rank: the destructor's path (spec/SHARDING.md 3.4).
  void drop(const Status& why);
  // The SAVE_STATS record of this commit, timed now (just before the COMMIT is appended).
  [[nodiscard]] SaveRecord save_record(const CommitRecord& c, const Manifest& m) const;

  Store* store_;
  CommRef comm_;
  std::uint64_t txn_, step_;
  std::string dir_path_, shard_name_;
  std::optional<ShardWriter> writer_;  // empty once finished or dropped
  TrainingState state_;
  bool finished_ = false;
  bool reported_ = false;  // caller-coordinated: report() done, the shard is finished
  int rank_ = 0, world_ = 1;
  Status failure_;                   // across ranks: the first I/O error, reported at commit
  std::vector<ReplicaDecl> replicas_;  // multi-rank: what add_replicated_tensor declared
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::optional<std::chrono::nanoseconds> stall_;  // unset: blocked throughout
  bool async_ = false;
};

class Store {
 public:
  // A store over its commit log (store/journal_log.hpp, store/object_log.hpp); open_store picks the log
  // a path or URL names. For read_write the log's writer opens (the journal's LOCK and recovery, or the
  // object store's probe and identity); read_only never writes.
  [[nodiscard]] static Result<std::unique_ptr<Store>> open(std::unique_ptr<CommitLog> log, Access access,
                                                           StoreOptions options = {});
  // The directory store at `path` on `fs` (the journal file, spec/JOURNAL.md).
  [[nodiscard]] static Result<std::unique_ptr<Store>> open(FsRef fs, std::string path, Access access,
                                                           StoreOptions options = {});
  // Collective open for a save across ranks (spec/SHARDING.md 3.1): every rank of comm calls it. For
  // read_write, rank 0 opens the log's writer; then every other rank reads the log as a read-only open does
  // (or decodes what rank 0 read, on object storage) and becomes a participant, which writes only its own
  // shard files. Every rank returns the same Status (the lowest failing rank's error). The store keeps comm
  // (which must outlive it) for every begin, commit and abort. A world of one is the plain open.
  template <class Comm>
  [[nodiscard]] static Result<std::unique_ptr<Store>> open(std::unique_ptr<CommitLog> log, Access access, StoreOptions options,
                                                           Comm& comm) {
    return open_with(std::move(log), access, options, CommRef(comm));
  }
  template <class Comm>
  [[nodiscard]] static Result<std::unique_ptr<Store>> open(FsRef fs, std::string path, Access access, StoreOptions options,
                                                           Comm& comm) {
    return open_with(journal_log(fs, std::move(path)), access, options, CommRef(comm));
  }
  // A save whose ranks the caller coordinates, carrying the messages of spec/SHARDING.md 3.5 itself (e.g.
  // inside PyTorch DCP's save plans; spec/SHARDING.md 3.6). Rank 0 opens writable; any other rank is a
  // participant that reads nothing at open (it knows no steps: open read-only to read) and learns each
  // transaction from rank 0's begin decision, so the opens may come in any order. Its saves run through
  // the phases below, which begin() and commit() run over a Comm; begin() and commit() themselves are refused.
  [[nodiscard]] static Result<std::unique_ptr<Store>> open_rank(std::unique_ptr<CommitLog> log, int rank, int world,
                                                                StoreOptions options = {});
  [[nodiscard]] static Result<std::unique_ptr<Store>> open_rank(FsRef fs, std::string path, int rank, int world,
                                                                StoreOptions options = {});
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();  // aborts a transaction still open, then closes the log (releasing the journal's LOCK)

  [[nodiscard]] const std::string& path() const noexcept { return log_->location(); }  // the path or URL
  [[nodiscard]] Access access() const noexcept { return access_; }
  [[nodiscard]] const Uuid& uuid() const noexcept { return uuid_; }
  [[nodiscard]] FsRef fs() noexcept { return log_->fs(); }
  // The prefix of step directories on fs(): the store's path, or "" on object storage.
  [[nodiscard]] const std::string& step_root() const noexcept { return log_->step_root(); }
  [[nodiscard]] CommitLog& log() noexcept { return *log_; }
  // What open found and, when writable, did.
  [[nodiscard]] const RecoveryReport& recovery_report() const noexcept { return report_; }
  // Every transaction known now (open, committed, aborted, retired), by txn id.
  [[nodiscard]] const std::vector<TxnInfo>& transactions() const noexcept { return txns_; }
  // Committed, not retired steps, by step number (spec/JOURNAL.md 10: a step number is live at most once).
  [[nodiscard]] std::vector<StepInfo> steps() const;
  // The live step with the highest number.
  [[nodiscard]] std::optional<StepInfo> latest() const;
  // The live commit of this step number.
  [[nodiscard]] Result<StepInfo> find(std::uint64_t step) const;
  // What every committed save (retired ones too) recorded, in commit order (spec/JOURNAL.md 4.8).
  [[nodiscard]] std::vector<SaveRecord> save_records() const;
  // How long saving `bytes` (default: as many as the last recorded save) takes, at the slowest throughput
  // of the last `window` recorded saves.
  [[nodiscard]] SaveEstimate estimate_save(std::optional<std::uint64_t> bytes = std::nullopt, std::size_t window = 8) const;
  // Does a save fit in `seconds` of hold-up (e.g. a UPS's)? nullopt when no save has been recorded.
  [[nodiscard]] std::optional<bool> save_fits(double seconds, std::optional<std::uint64_t> bytes = std::nullopt) const;
  // Reads the log again to see steps committed since open (collective across ranks). A writer that
  // excludes every other writer (the journal's LOCK) has nothing to read.
  [[nodiscard]] Status refresh();

  [[nodiscard]] Result<StepReader> open_step(std::uint64_t step);
  [[nodiscard]] Result<StepReader> open_step(const StepInfo& info);
  [[nodiscard]] Result<StepReader> open_latest();
  // Every chunk of every shard file; damage is in the report, the Status fails only on misuse.
  [[nodiscard]] Result<StepVerifyReport> verify_step(std::uint64_t step, const VerifyOptions& options = {});

  // Starts a transaction for `step`; only one may be open at a time, and the step number must not be live
  // (Code::conflict; retire it first to save it again, spec/JOURNAL.md 10). Across ranks (a store opened
  // with a communicator) the call is collective: every rank passes the same step and returns the same
  // Status (spec/SHARDING.md 3.2).
  [[nodiscard]] Result<std::unique_ptr<Transaction>> begin(std::uint64_t step);
  // The phases of begin (spec/SHARDING.md 3.2), for a caller-coordinated save (3.6). Every rank: its begin
  // request for `step`, to be delivered to rank 0.
  [[nodiscard]] std::string begin_request(std::uint64_t step) const;
  // Rank 0: checks every rank's request (rank order), begins the transaction in the log. Returns the begin
  // decision for every rank; it carries the error when nothing was begun.
  [[nodiscard]] std::string decide_begin(std::uint64_t step, const std::vector<std::string>& requests);
  // Every rank: takes rank 0's decision and creates this rank's shard file under the name BEGIN gave it.
  [[nodiscard]] Result<std::unique_ptr<Transaction>> join(const std::string& decision);
  [[nodiscard]] bool caller_coordinated() const noexcept { return caller_comm_.has_value(); }
  // The communicator the store was opened with: rank and world of its saves.
  [[nodiscard]] int rank() const { return comm_.rank(); }
  [[nodiscard]] int world_size() const { return comm_.size(); }
  // The process that writes the log: a single-process writer, or rank 0.
  [[nodiscard]] bool coordinator() const noexcept { return writer_; }
  // A rank other than 0 of a collective writable open: it writes its own shard files only.
  [[nodiscard]] bool participant() const noexcept { return participant_; }
  // A capture straight into the file the next transaction writes over (spec/JOURNAL.md 10.1): a file of slots/
  // (one made when none is free) sized for pieces of `sizes` bytes, mapped shared_write and kept mapped while
  // it stays in the store; returns where each piece's bytes go, in that order. The next begin() on this rank
  // takes that file, and its writer hashes the bytes it finds in place instead of writing them (a write()
  // from exactly there). Needs reuse_files and an Fs that maps; between transactions only.
  [[nodiscard]] Result<std::vector<unsigned char*>> reserve_slot(const std::vector<std::uint64_t>& sizes);
  // The mapping reserve_slot keeps of `file` when that is one of this store's files (a step's shard written
  // in place, by file identity), else empty: its bytes read where they were copied, not mapped again.
  [[nodiscard]] std::string_view kept_mapping(const std::string& file);
  // Writes RETIRE for the live commit of this step number, then removes its files.
  [[nodiscard]] Status retire(std::uint64_t step);
  // Takes the live commit of this step number out of the store without removing its files (a copy found
  // bad, kept for inspection: a directory store moves it to quarantine/, spec/JOURNAL.md 6.8); the number
  // can then be saved again.
  [[nodiscard]] Status set_aside(std::uint64_t step);
  // Retires what the policy does not keep; returns the retired steps.
  [[nodiscard]] Result<std::vector<StepInfo>> apply_retention(const RetentionPolicy& policy);
  // Removes what transactions proven dead left behind (spec/OBJECT.md 4.5); dry_run lists it. A journal's
  // recovery does this at every writable open, so a directory store reports nothing to do.
  [[nodiscard]] Result<GarbageReport> collect_garbage(bool dry_run);

  // A log write failed in a way that may or may not be durable: the store refuses writes until it is
  // reopened (spec/JOURNAL.md 5.4).
  [[nodiscard]] bool failed() const { return writer_ && !log_->failure().ok(); }
  [[nodiscard]] Status failure() const { return writer_ ? log_->failure() : Status(); }
  [[nodiscard]] std::uint64_t next_txn() const noexcept { return next_txn_; }
  // Rewrites the journal now from the live records (spec/JOURNAL.md 5.7); between saves only. Writers do it
  // on their own when the journal has doubled since its last rewrite, and every writable open does it.
  [[nodiscard]] Status compact();

 private:
  friend class Transaction;
  Store(std::unique_ptr<CommitLog> log, Access access, StoreOptions options, CommRef comm)
      : log_(std::move(log)), access_(access), options_(std::move(options)), comm_(comm) {}
  // The one open: every rank of comm (a world of one for the plain open) calls it.
  [[nodiscard]] static Result<std::unique_ptr<Store>> open_with(std::unique_ptr<CommitLog> log, Access access,
                                                                StoreOptions options, CommRef comm);
  // This process reads the log (a reader, or a participant after rank 0's open).
  [[nodiscard]] Status read_log(const std::string& from_rank0);
  // decide_begin over what the gather returned (an error there is the decision).
  [[nodiscard]] std::string decide_begin(std::uint64_t step, Result<std::vector<std::string>> requests);
  // join's two halves: the decision read (and mirrored), then this rank's shard created.
  [[nodiscard]] Result<TxnInfo> accept_begin(const std::string& decision);
  [[nodiscard]] Result<std::unique_ptr<Transaction>> create_shard(const TxnInfo& t);
  void adopt(RecoveryReport report);
  [[nodiscard]] Status check_writable() const;
  [[nodiscard]] TxnInfo* find_txn(std::uint64_t txn);
  [[nodiscard]] StepInfo step_info(const TxnInfo& t) const;
  [[nodiscard]] std::string step_path(const std::string& dir) const;
  // Participants keep their view of the log in step with what rank 0 broadcasts.
  void mirror_txn(const TxnInfo& t);
  // The log's ABORT and the removal of what the transaction created.
  [[nodiscard]] Status abandon(std::uint64_t txn, AbortReason reason);
  [[nodiscard]] Status retire_txns(const std::vector<std::uint64_t>& txns);
  // The log's upkeep between saves (the journal's compaction, spec/JOURNAL.md 5.7).
  [[nodiscard]] Status maintain(bool force);
  void reindex();

  std::unique_ptr<CommitLog> log_;
  Access access_;
  StoreOptions options_;
  CommRef comm_;
  std::optional<CallerComm> caller_comm_;  // open_rank: comm_ refers to it
  Uuid uuid_{};
  RecoveryReport report_;
  std::vector<TxnInfo> txns_;
  std::map<std::uint64_t, std::size_t> by_txn_;
  std::uint64_t next_txn_ = 1;
  Transaction* open_txn_ = nullptr;
  bool writer_ = false;  // this process opened the log's writer: a single process, or rank 0
  bool participant_ = false;
  // reserve_slot: the files captures were copied into, each mapped once while it is in the store (its
  // committed steps or slots/), by file identity; and the one the next begin() takes.
  struct SlotMap {
    std::uint64_t id = 0;
    Mapping map;
    // Unpins the mapping (StoreOptions::unpin_slot) before `map` unmaps it: declared after it, destroyed first.
    std::shared_ptr<void> pinned;
  };
  std::vector<SlotMap> slot_maps_;
  std::string reserved_slot_;
  const unsigned char* reserved_map_ = nullptr;
  std::uint64_t reserved_size_ = 0;
  [[nodiscard]] Result<std::pair<std::string, bool>> pick_slot();  // a slot's path, and whether it is new
  void forget_slot_maps(std::uint64_t keep_id);  // unmaps the files no longer in the store
};


}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/store_ranks_inl.hpp"
#include "impl/store_inl.hpp"
#endif
