// ckpt: a crash-consistent store of steps on an object store (spec/OBJECT.md 4), without rename,
// append or overwrite:
//
//   ckpt-store                         the store's identity: a journal HEADER (uuid), created once
//   log/<step>.commit                  the commit point of a step, created with If-None-Match: *
//   log/<step>-<txn>.retire            the step left the store; its objects may be deleted
//   log/<step>-<txn>.abort             the transaction was abandoned before its commit was sent
//   step-<step>-<txn>/shard-*.ckpt     shard files, one per rank, uploaded and completed once
//   step-<step>-<txn>/MANIFEST         written by rank 0 after every shard is complete
//
// (<step> and <txn> are 20 decimal digits in log/ names, so keys sort by step.) Each log object is a
// tiny journal (spec/JOURNAL.md 3): a HEADER group naming the store, then one group of records.
// A step exists iff its commit object is valid and no retire object names its transaction. Two writers
// of one step race for one key: exactly one commit is created (412 for the other). Data objects are
// deleted only for a transaction proven dead: an abort object, or a commit object naming another txn.
// Shards and manifests are read through ObjectFs by the same StepReader as a directory's, every chunk
// verified against its digest.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../dist/comm.hpp"
#include "store.hpp"
#include "../io/object/client.hpp"
#include "../io/object/object_fs.hpp"

namespace ckpt::object {

namespace layout {
inline constexpr std::string_view kIdentityKey = "ckpt-store";
inline constexpr std::string_view kLogPrefix = "log/";
inline constexpr std::string_view kProbePrefix = "probe/";
inline constexpr std::string_view kCommitSuffix = ".commit";
inline constexpr std::string_view kRetireSuffix = ".retire";
inline constexpr std::string_view kAbortSuffix = ".abort";
inline constexpr std::size_t kNumberDigits = 20;  // every u64 fits, and keys sort as numbers
// Decoder limit: a log object is two small groups; anything larger is refused unread (spec 4.2).
inline constexpr std::uint64_t kMaxLogObject = std::uint64_t{64} << 10;
}  // namespace layout

[[nodiscard]] std::string commit_key(std::uint64_t step);
[[nodiscard]] std::string retire_key(std::uint64_t step, std::uint64_t txn);
[[nodiscard]] std::string abort_key(std::uint64_t step, std::uint64_t txn);

struct ObjectStoreOptions {
  bool create_if_missing = false;  // read_write: create the identity object when there is none
  RetentionPolicy retention;       // applied by rank 0 after each commit
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  std::size_t buffer_size = std::size_t{4} << 20;
  ObjectFsOptions io;
};

// What listing log/ found (spec/OBJECT.md 4.3).
struct ObjectLog {
  std::vector<StepInfo> steps;               // committed, not retired, by step
  std::vector<StepInfo> retired;             // committed, then retired
  std::vector<std::pair<std::uint64_t, std::uint64_t>> aborted;  // (step, txn) with an abort object
  std::vector<std::string> problems;         // log objects that do not decode or do not belong: damage
  std::vector<std::string> unknown;          // keys under log/ no rule names: reported, never deleted
  std::vector<SaveRecord> saves;             // the SAVE_STATS of every commit object, by step (spec/JOURNAL.md 4.8)
};

// Decodes the log objects listed under log/ (key, bytes), as rank 0 read them; damage goes to problems.
[[nodiscard]] ObjectLog decode_log(const std::vector<std::pair<std::string, std::string>>& objects, const Uuid& store_uuid,
                                   const std::string& url_prefix);

// What garbage collection found and did (spec/OBJECT.md 4.5).
struct ObjectCleanup {
  std::vector<std::string> removed;   // objects of dead transactions deleted
  std::vector<std::string> aborted_uploads;  // multipart uploads of dead transactions aborted
  std::vector<std::string> kept;      // transactions whose fate cannot be proven: never deleted
  bool dry_run = true;
};

class ObjectStore;
namespace detail {
struct ObjectOutcome;  // what rank 0 decided at commit or abort (impl/object_store_inl.hpp)
}  // namespace detail

// One save in progress over the store's communicator (every rank calls commit or abort, in the same order).
class ObjectTransaction {
 public:
  ObjectTransaction(const ObjectTransaction&) = delete;
  ObjectTransaction& operator=(const ObjectTransaction&) = delete;
  ~ObjectTransaction();  // an open transaction: this rank's upload is aborted, the communicator left

  [[nodiscard]] std::uint64_t txn() const noexcept { return txn_; }
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int world_size() const noexcept { return world_; }
  [[nodiscard]] const std::string& directory() const noexcept { return dir_; }
  [[nodiscard]] bool active() const noexcept { return writer_.has_value() && !finished_; }
  [[nodiscard]] TrainingState& state() noexcept { return state_; }
  [[nodiscard]] ShardWriter& shard_writer() noexcept { return *writer_; }

  [[nodiscard]] Status add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data, std::size_t size);
  [[nodiscard]] Status add_optimizer_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                            std::size_t size);
  [[nodiscard]] Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                                   const Shape& local_shape);
  [[nodiscard]] Status write(const void* data, std::size_t size);
  [[nodiscard]] Status end_piece();

  // Collective: every rank completes its shard; rank 0 checks coverage, writes the MANIFEST and creates the
  // commit object. Every rank returns the same outcome. Code::conflict: another writer committed this step.
  [[nodiscard]] Result<CommitResult> commit();
  // Collective: abandons the step; rank 0 writes the abort object, then deletes what was uploaded.
  [[nodiscard]] Status abort();
  // Collective: abandons the step for `reason`, which every other rank's commit() then reports (as
  // Transaction::abort(reason)); returns what the abandonment itself found.
  [[nodiscard]] Status abort(const Status& reason);
  // When the save started and how long its caller was blocked, for the commit's SAVE_STATS (AsyncSaver sets it,
  // as on Transaction; without it the save started at begin() and blocked its caller throughout).
  void set_save_timing(std::chrono::steady_clock::time_point started, std::chrono::nanoseconds stall, bool async) noexcept {
    started_ = started;
    stall_ = stall;
    async_ = async;
  }
  // A save whose ranks the caller coordinates (ObjectStore::open_rank, spec/OBJECT.md 4.8). Every rank: completes
  // its shard object and returns its shard report, for the caller to deliver to rank 0.
  [[nodiscard]] Result<std::string> report();
  // Rank 0, after its own report(): every rank's report (rank order) checked, the MANIFEST and the commit object
  // written as commit() does. A missing or failed report abandons the step (abort object first).
  [[nodiscard]] Result<CommitResult> commit_reports(const std::vector<std::string>& reports);

 private:
  friend class ObjectStore;
  ObjectTransaction(ObjectStore* store, std::uint64_t txn, std::uint64_t step, std::string dir, std::string shard_name,
                    ShardWriter writer);
  [[nodiscard]] Status check_active() const;
  [[nodiscard]] Status keep(Status s);  // records the first error for commit(); returns s
  [[nodiscard]] std::string make_report(bool commit, Status* local_out = nullptr);  // local_out: this rank's own error
  [[nodiscard]] std::string coordinate(bool commit, Result<std::vector<std::string>> reports);
  // Commit or abort, collectively: this rank's report, rank 0's decision, the outcome every rank gets.
  [[nodiscard]] Result<detail::ObjectOutcome> finish(bool commit);
  // The outcome rank 0 decided, applied to this rank's view of the log; what commit() returns.
  [[nodiscard]] Result<CommitResult> commit_result(const std::string& outcome_bytes);

  ObjectStore* store_;
  std::uint64_t txn_, step_;
  std::string dir_, shard_name_;
  std::optional<ShardWriter> writer_;
  TrainingState state_;
  Status failure_;
  bool finished_ = false;
  bool reported_ = false;  // caller-coordinated: report() done, the shard object is complete
  int rank_ = 0, world_ = 1;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::optional<std::chrono::nanoseconds> stall_;  // unset: blocked throughout
  bool async_ = false;
};

class ObjectStore {
 public:
  // Opens the store at the client's root. read_write probes the server first: a server that lets a second
  // create-only PUT through is refused (spec/OBJECT.md 4.6). Across ranks (the Comm overload, collective),
  // rank 0 alone probes and lists log/, and every rank decodes what it broadcasts (field notes: dlio#347).
  [[nodiscard]] static Result<std::unique_ptr<ObjectStore>> open(ObjectClient& client, Access access,
                                                                 ObjectStoreOptions options = {});
  template <class Comm>
  [[nodiscard]] static Result<std::unique_ptr<ObjectStore>> open(ObjectClient& client, Access access,
                                                                 ObjectStoreOptions options, Comm& comm) {
    return open_with(client, access, options, CommRef(comm));
  }
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;
  ~ObjectStore();

  [[nodiscard]] std::string url() const { return client_.url(""); }
  [[nodiscard]] std::string path() const { return url(); }  // as Store::path(), for messages and reports
  [[nodiscard]] Access access() const noexcept { return access_; }
  [[nodiscard]] const Uuid& uuid() const noexcept { return uuid_; }
  [[nodiscard]] FsRef fs() noexcept { return FsRef(fs_); }
  [[nodiscard]] ObjectClient& client() noexcept { return client_; }
  [[nodiscard]] const ObjectLog& log() const noexcept { return log_; }

  [[nodiscard]] std::vector<StepInfo> steps() const { return log_.steps; }
  [[nodiscard]] int world_size() const { return comm_.size(); }
  // As Store::estimate_save, from the SAVE_STATS of the commit objects listed.
  [[nodiscard]] SaveEstimate estimate_save(std::optional<std::uint64_t> bytes = std::nullopt, std::size_t window = 8) const {
    return estimate_from(log_.saves, bytes, window);
  }
  [[nodiscard]] std::optional<StepInfo> latest() const;
  [[nodiscard]] Result<StepInfo> find(std::uint64_t step) const;
  // Lists log/ again (collective across ranks).
  [[nodiscard]] Status refresh();
  [[nodiscard]] Result<StepReader> open_step(const StepInfo& info);
  [[nodiscard]] Result<StepReader> open_step(std::uint64_t step);

  // A save whose ranks the caller coordinates, carrying the messages itself (e.g. inside PyTorch DCP's plans;
  // spec/OBJECT.md 4.8, as Store::open_rank, spec/SHARDING.md 3.6). Rank 0 opens read_write as open() does
  // (probe, identity, log); any other rank reads nothing and learns the transaction from rank 0's decision.
  // begin(), commit() and abort() are then refused: a save runs through the phases below.
  [[nodiscard]] static Result<std::unique_ptr<ObjectStore>> open_rank(ObjectClient& client, int rank, int world,
                                                                      ObjectStoreOptions options = {});
  [[nodiscard]] bool caller_coordinated() const noexcept { return caller_comm_.has_value(); }

  // Collective. The step must be above every committed one (a step's commit key is created once).
  [[nodiscard]] Result<std::unique_ptr<ObjectTransaction>> begin(std::uint64_t step);
  // The phases of begin for a caller-coordinated save. Every rank: its request for `step`, for rank 0.
  [[nodiscard]] std::string begin_request(std::uint64_t step) const;
  // Rank 0: checks every rank's request (rank order) and picks the transaction; the decision carries the
  // error when nothing was begun. Nothing is written until a rank's shard.
  [[nodiscard]] std::string decide_begin(std::uint64_t step, const std::vector<std::string>& requests);
  // Every rank: rank 0's decision taken, this rank's shard upload started.
  [[nodiscard]] Result<std::unique_ptr<ObjectTransaction>> join(const std::string& decision);

  // Rank 0: retires the step (retire object first), then deletes its objects.
  [[nodiscard]] Status retire(const StepInfo& info);
  [[nodiscard]] Status retire(std::uint64_t step);
  // Rank 0: retires what the policy does not keep (the latest step always stays); returns the retired steps.
  [[nodiscard]] Result<std::vector<StepInfo>> apply_retention(const RetentionPolicy& policy);
  // Deletes the objects and aborts the uploads of transactions proven dead (spec 4.5); dry_run lists them.
  [[nodiscard]] Result<ObjectCleanup> collect_garbage(bool dry_run);

 private:
  friend class ObjectTransaction;
  ObjectStore(ObjectClient& client, Access access, ObjectStoreOptions options, CommRef comm);
  [[nodiscard]] static Result<std::unique_ptr<ObjectStore>> open_with(ObjectClient& client, Access access,
                                                                      ObjectStoreOptions options, CommRef comm);
  [[nodiscard]] Status probe();
  [[nodiscard]] Status list_log(bool opening);  // opening: the probe (read_write) and identity first
  [[nodiscard]] Status load_identity(bool create);
  [[nodiscard]] Result<std::string> read_log_objects();  // rank 0: every log object, encoded for the broadcast
  [[nodiscard]] Status adopt_log(const std::string& encoded);
  [[nodiscard]] Status remove_prefix(const std::string& prefix, ObjectCleanup* report);
  // Retires what policy does not keep, in step order, until one fails (status): the steps retired.
  [[nodiscard]] std::vector<StepInfo> retire_beyond(const RetentionPolicy& policy, Status& status);
  // begin's checks on rank 0: writable, nothing open, the step above every commit.
  [[nodiscard]] Status check_begin(std::uint64_t step) const;
  // This rank's shard upload for transaction txn of step: the transaction every rank's begin or join returns.
  [[nodiscard]] Result<std::unique_ptr<ObjectTransaction>> start(std::uint64_t txn, std::uint64_t step);
  [[nodiscard]] std::string log_object(const std::vector<PendingRecord>& records) const;

  ObjectClient& client_;
  ObjectFs fs_;
  Access access_;
  ObjectStoreOptions options_;
  CommRef comm_;
  std::optional<CallerComm> caller_comm_;  // open_rank: comm_ refers to it
  Uuid uuid_{};
  ObjectLog log_;
  ObjectTransaction* open_txn_ = nullptr;
};

// A store an s3:// path names, with the client it reads through (the store refers to it; destroyed first).
struct OpenedObjectStore {
  std::unique_ptr<ObjectClient> client;
  std::unique_ptr<ObjectStore> store;
};

// Opens the client `url` names through open_objects, then the store at its root (read_only writes nothing).
// An empty open_objects is Code::unsupported: this build has no object-store client.
[[nodiscard]] Result<OpenedObjectStore> open_store_url(const ObjectOpener& open_objects, const std::string& url, Access access,
                                                       ObjectStoreOptions options = {});

}  // namespace ckpt::object

#if !CKPT_DECLARATIONS_ONLY
#include "impl/object_store_inl.hpp"
#endif
