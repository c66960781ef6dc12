// ckpt: saves that do not stop training (spec/ASYNC.md).
//
// save() returns once the state has been copied into a pre-faulted staging pool; a background worker
// then writes, hashes and commits it through the store's one commit protocol (Transaction::commit: the
// same BEGIN, fsyncs, MANIFEST and COMMIT as a synchronous save, and the same recovery). A state larger
// than the pool streams through it: the caller waits only for the slabs that do not fit.
//
//   ckpt::AsyncSaveOptions o;  o.staging_bytes = 2ull << 30;
//   auto saver = ckpt::AsyncSaver::create(store, o);
//   ckpt::SaveRequest r(step);
//   r.add_tensor("w", ckpt::DType::BF16, {4096, 4096}, w.data(), w_bytes);
//   r.state().rng = rng_bytes;
//   auto ticket = (*saver)->save(std::move(r));   // an earlier background failure comes back here
//   ...
//   CKPT_TRY((*saver)->wait());                   // and here
//
// Threads: the Store belongs to the saver's worker while the saver lives; call wait() before using the
// store directly. save(), wait() and flush() are called from one thread (the training loop).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "../core/locked.hpp"
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../dist/comm.hpp"
#include "../core/error.hpp"
#include "flush.hpp"
#include "staging_pool.hpp"
#include "store.hpp"

namespace ckpt {

// Copies device memory into staging (a CUDA device-to-host copy on a stream). copy() may return before
// the bytes have landed; fence() returns once every copy issued so far has (spec/ASYNC.md 6).
class SnapshotCopier {
 public:
  virtual ~SnapshotCopier() = default;
  [[nodiscard]] virtual Status copy(void* staging, const void* device_source, std::size_t bytes) = 0;
  [[nodiscard]] virtual Status fence() = 0;
  // Makes host memory the copier did not allocate (a memory tier's slot, mapped once) a target copy() runs
  // at full speed into, until unpin(at) (spec/ASYNC.md 6.1); the default copier needs nothing.
  [[nodiscard]] virtual Status pin(void* at, std::size_t bytes) {
    (void)at, (void)bytes;
    return Status();
  }
  virtual void unpin(void* at) noexcept { (void)at; }
};

// One piece of a tensor to save (a whole tensor is one piece at offset 0).
struct SaveTensor {
  std::string name;
  DType dtype = DType::U8;
  Shape global_shape, offsets, local_shape;
  const void* data = nullptr;  // host memory, or device memory when on_device
  std::size_t size = 0;        // bytes: exactly the piece's
  bool optimizer = false;      // listed in the step's optimizer tensors
  bool on_device = false;      // copied by AsyncSaveOptions::device
  // >= 0: every rank holds these same bytes and only this rank writes them; the tiers compare every
  // holder's digests of them (the SDC canary, spec/TIERS.md 11). -1: this rank's own tensor.
  std::int32_t replica_owner = -1;
};

// What one save holds: tensors (their memory is read only during save()) and the training state.
class SaveRequest {
 public:
  explicit SaveRequest(std::uint64_t step) : step_(step) { state_.step = step; }

  SaveRequest& add_tensor(std::string name, DType dtype, const Shape& shape, const void* data, std::size_t size) {
    return add_piece(std::move(name), dtype, shape, Shape(shape.size(), 0), shape, data, size);
  }
  SaveRequest& add_optimizer_tensor(std::string name, DType dtype, const Shape& shape, const void* data, std::size_t size) {
    add_tensor(std::move(name), dtype, shape, data, size);
    tensors_.back().optimizer = true;
    return *this;
  }
  SaveRequest& add_piece(std::string name, DType dtype, const Shape& global_shape, const Shape& offsets,
                         const Shape& local_shape, const void* data, std::size_t size) {
    SaveTensor t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.global_shape = global_shape;
    t.offsets = offsets;
    t.local_shape = local_shape;
    t.data = data;
    t.size = size;
    return add(std::move(t));
  }
  // A tensor every rank holds the same bytes of (a data-parallel replica, a norm under tensor parallelism):
  // written by `owner` only, and with the tiers each holder's digests of it are compared (spec/TIERS.md 11).
  SaveRequest& add_replicated_tensor(std::string name, DType dtype, const Shape& shape, const void* data, std::size_t size,
                                     int owner = 0) {
    add_tensor(std::move(name), dtype, shape, data, size);
    tensors_.back().replica_owner = owner;
    return *this;
  }
  // Drops the replicated tensors a rank other than `rank` owns: that rank writes them (spec/SHARDING.md 3.3).
  void drop_replicas_of_others(int rank) {
    std::vector<SaveTensor> kept;
    for (auto& t : tensors_) {
      if (t.replica_owner >= 0 && t.replica_owner != rank) bytes_ -= t.size;
      else kept.push_back(std::move(t));
    }
    tensors_ = std::move(kept);
  }
  // Bytes of a piece `owner` saves (its offsets in tensor `name`), as this rank holds them live: not saved. A
  // data-parallel job saves 1/W of each tensor per rank while every rank holds all of it; with the tiers, the
  // rank that keeps `owner`'s replica hashes these at the capture and the digests are compared with the
  // owner's (the SDC canary, spec/TIERS.md 11.1). Read during step() only.
  struct LiveCopy {
    std::string name;
    Shape offsets;
    const void* data = nullptr;
    std::size_t size = 0;
    int owner = 0;
  };
  SaveRequest& add_live_copy(std::string name, const Shape& offsets, const void* data, std::size_t size, int owner) {
    live_copies_.push_back(LiveCopy{std::move(name), offsets, data, size, owner});
    return *this;
  }
  [[nodiscard]] const std::vector<LiveCopy>& live_copies() const noexcept { return live_copies_; }
  SaveRequest& add(SaveTensor t) {
    bytes_ += t.size;
    tensors_.push_back(std::move(t));
    return *this;
  }

  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] TrainingState& state() noexcept { return state_; }
  [[nodiscard]] const TrainingState& state() const noexcept { return state_; }
  [[nodiscard]] const std::vector<SaveTensor>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::uint64_t step_;
  TrainingState state_;
  std::vector<SaveTensor> tensors_;
  std::vector<LiveCopy> live_copies_;  // compared, never saved
  std::uint64_t bytes_ = 0;
};

// What to do with a save that arrives while max_in_flight saves are still persisting.
enum class WhenBusy : std::uint8_t {
  wait,  // block until one finishes
  skip,  // do not take this save; the ticket says so
};

// How one save ended, as the worker saw it.
struct SaveOutcome {
  std::uint64_t step = 0;
  Status status;                       // ok: committed (commit holds the step and what retention did)
  std::optional<CommitResult> commit;
  std::chrono::nanoseconds stall{0};   // the caller was blocked this long in save()
  std::chrono::nanoseconds total{0};   // from save() to the end of commit and retention
};

struct AsyncSaveOptions {
  std::size_t staging_bytes = std::size_t{256} << 20;  // the pool: allocated and pre-faulted once
  std::size_t slab_bytes = std::size_t{8} << 20;       // unit of staging; at least two fit, for overlap
  std::size_t max_in_flight = 1;                       // saves staged but not yet committed
  WhenBusy when_busy = WhenBusy::wait;
  StagingMemory memory;                                // default: host pages; pinned for device snapshots
  SnapshotCopier* device = nullptr;                    // copies tensors marked on_device
  // Called on the worker thread after each save ends, before the next begins.
  std::function<void(const SaveOutcome&)> on_complete;
  // Obeys flush requests made by signal handlers (flush.hpp) without a call to flush().
  bool obey_flush_requests = true;
  // The worker's nice value (io/thread_priority.hpp; 0: the caller's): with every core busy, the training
  // thread's copy wins the core over another saver's hashing (spec/ASYNC.md 1, "Background priority").
  int worker_nice = 0;
  // false: while a save is being staged the worker writes only once the pool is full (the state does
  // not fit), so on few cores it does not take CPU and memory bandwidth from the caller's copy; true:
  // it writes each slab as soon as it is staged (less total time, more stall). spec/ASYNC.md 1.
  bool write_while_staging = false;
  // Stage straight into the store's next shard file (Store::reserve_slot: a memory store with reuse_files on
  // a file system that maps): no staging pool; each tensor is copied to where the file holds its bytes, and the
  // worker hashes them there and writes only the rest of the file (spec/ASYNC.md 3.1). Needs max_in_flight 1:
  // the slot is reserved while the worker is idle.
  bool in_place = false;
  // Called in save() once the save is taken and before its copy, the worker idle (so max_in_flight 1): makes
  // room in the store's ring of files (the tiers retire their oldest memory step first, spec/TIERS.md 2.1).
  std::function<Status(std::uint64_t step)> before_stage;
  // Busy for a reason besides saves in flight (the tiers: the file the next capture writes over is still
  // being promoted, spec/TIERS.md 4.6): WhenBusy applies to it as to a save in flight; before_stage then
  // waits for what this reports.
  std::function<bool()> busy;
};

// What save() did with a request.
struct SaveTicket {
  std::uint64_t step = 0;
  bool skipped = false;               // WhenBusy::skip and saves were in flight: nothing was staged
  std::chrono::nanoseconds stall{0};  // how long save() blocked the caller
};

class AsyncSaver {
 public:
  // A saver over `store` (opened read_write), on a file system or on object storage. Across ranks (a store opened
  // with a communicator, spec/SHARDING.md 3) every rank's worker joins the same BEGIN and COMMIT on the store's
  // communicator, from its own thread: MPI needs MPI_THREAD_MULTIPLE.
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create(Store& store, AsyncSaveOptions options = {}) {
    return create_with(store, std::move(options), std::nullopt);
  }
  // `control` is a second communicator of the same ranks (MpiComm::duplicate) on which save() agrees whether
  // to skip, so that every rank skips the same steps; it is needed only for WhenBusy::skip across ranks. With
  // a store of one rank it may be any job's ranks, each saving its own store (the tiers' memory stores).
  template <class Control>
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create(Store& store, AsyncSaveOptions options, Control& control) {
    return create_with(store, std::move(options), CommRef(control));
  }

  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;
  // Finishes every save already taken (as wait() does), then stops the worker.
  ~AsyncSaver() {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [&] { return jobs_.empty(); });
      stop_ = true;
    }
    work_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  // Copies the request's tensors into staging and returns; the worker persists it. An earlier save's
  // background failure is returned instead (naming that step), and this request is then not taken.
  [[nodiscard]] Result<SaveTicket> save(SaveRequest request);
  // Blocks until every save taken has committed or failed; returns the first failure not yet reported.
  [[nodiscard]] Status wait();
  // Deadline-bounded flush (spec/ASYNC.md 5): takes no more saves; the save in flight is committed if it
  // can be before `deadline`, else abandoned (ABORT, files removed); queued saves are dropped. Returns
  // ok when everything taken committed, Code::cancelled naming what was abandoned, or a failure.
  [[nodiscard]] Status flush(std::chrono::steady_clock::time_point deadline);

  [[nodiscard]] std::size_t in_flight() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return jobs_.size();
  }
  // The staging pool; null when the saver stages in place.
  [[nodiscard]] const StagingPool* pool() const noexcept { return pool_.get(); }
  [[nodiscard]] std::optional<StepInfo> last_committed() const { return locked_copy(mutex_, last_committed_); }
  [[nodiscard]] std::uint64_t saves_committed() const { return locked_copy(mutex_, committed_); }
  [[nodiscard]] std::uint64_t saves_skipped() const { return locked_copy(mutex_, skipped_); }

 private:
  // A run of staged bytes of one tensor inside a slab; the slab goes back to the pool after the run
  // that ends it has been written.
  struct Segment {
    std::size_t tensor = 0;
    const unsigned char* data = nullptr;
    std::size_t size = 0;
    unsigned char* slab = nullptr;  // set on the last segment of a slab
  };
  struct Job {
    SaveRequest request;
    std::deque<Segment> segments;  // published by save(), consumed by the worker
    bool staged = false;           // every segment is published (or staging stopped)
    bool streaming = false;        // the pool ran out during staging: write as slabs arrive
    Status staging_failure;        // staging stopped: the worker abandons the transaction
    std::chrono::steady_clock::time_point started;
    std::chrono::nanoseconds stall{0};
    explicit Job(SaveRequest r) : request(std::move(r)) {}
  };

  AsyncSaver(Store& target, AsyncSaveOptions options, std::optional<CommRef> control)
      : target_(&target), options_(std::move(options)), control_(control) {}
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create_with(Store& target, AsyncSaveOptions options,
                                                                       std::optional<CommRef> control);
  [[nodiscard]] int world() const { return target_->world_size(); }
  // The deadline in force: flush()'s, or a signal's request when obeyed.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> deadline() const;
  [[nodiscard]] Status take_failure();  // under mutex_
  [[nodiscard]] Result<bool> agree_to_skip(bool busy);
  [[nodiscard]] Status stage(Job& job);
  [[nodiscard]] Status stage_in_place(Job& job, const std::vector<unsigned char*>& at);
  [[nodiscard]] Result<std::vector<unsigned char*>> reserve_in_place(const SaveRequest& request);
  void publish(Job& job, std::vector<Segment>& pending, unsigned char* slab);
  // Worker side.
  void run();
  [[nodiscard]] SaveOutcome persist(Job& job);
  [[nodiscard]] bool next_segment(Job& job, Segment& out);
  void drain(Job& job);
  [[nodiscard]] bool past_deadline(std::uint64_t remaining_bytes, std::uint64_t done_bytes,
                                   std::chrono::steady_clock::time_point began) const;

  Store* target_;
  AsyncSaveOptions options_;
  std::optional<CommRef> control_;
  std::unique_ptr<StagingPool> pool_;
  std::thread worker_;
  mutable std::mutex mutex_;
  std::condition_variable work_;  // a job or segments arrived, or stop
  std::condition_variable idle_;  // a job finished
  std::deque<std::shared_ptr<Job>> jobs_;  // taken, not finished; the front one is persisting
  std::deque<Status> failures_;            // background failures not yet reported
  std::optional<StepInfo> last_committed_;
  std::optional<std::chrono::steady_clock::time_point> flush_deadline_;
  double estimated_rate_ = 0;  // bytes/s of the store's recorded saves, read before the worker starts
  std::uint64_t committed_ = 0, skipped_ = 0;
  bool stop_ = false;
};

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/async_save_inl.hpp"
#endif
