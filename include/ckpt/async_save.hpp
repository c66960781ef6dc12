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
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "comm.hpp"
#include "error.hpp"
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
  // false: while a save is being staged the worker writes only once the pool is full (the state does
  // not fit), so on few cores it does not take CPU and memory bandwidth from the caller's copy; true:
  // it writes each slab as soon as it is staged (less total time, more stall). spec/ASYNC.md 1.
  bool write_while_staging = false;
};

// What save() did with a request.
struct SaveTicket {
  std::uint64_t step = 0;
  bool skipped = false;               // WhenBusy::skip and saves were in flight: nothing was staged
  std::chrono::nanoseconds stall{0};  // how long save() blocked the caller
};

class AsyncSaver {
 public:
  // A saver over `store` (opened read_write). Across ranks (a store opened with a communicator, spec/SHARDING.md
  // 3) every rank's worker joins the same BEGIN and COMMIT on the store's communicator, from its own thread:
  // MPI needs MPI_THREAD_MULTIPLE.
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create(Store& store, AsyncSaveOptions options = {}) {
    return create_with(store, std::move(options), std::nullopt);
  }
  // `control` is a second communicator of the same ranks (MpiComm::duplicate) on which save() agrees whether
  // to skip, so that every rank skips the same steps; it is needed only for WhenBusy::skip across ranks.
  template <class Control>
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create(Store& store, AsyncSaveOptions options,
                                                                  Control& control) {
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
  [[nodiscard]] const StagingPool& pool() const noexcept { return *pool_; }
  [[nodiscard]] std::optional<StepInfo> last_committed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_committed_;
  }
  [[nodiscard]] std::uint64_t saves_committed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return committed_;
  }
  [[nodiscard]] std::uint64_t saves_skipped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return skipped_;
  }

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

  AsyncSaver(Store& store, AsyncSaveOptions options, std::optional<CommRef> control)
      : store_(store), options_(std::move(options)), control_(control) {}
  [[nodiscard]] static Result<std::unique_ptr<AsyncSaver>> create_with(Store& store, AsyncSaveOptions options,
                                                                       std::optional<CommRef> control);
  [[nodiscard]] int world() const { return store_.world_size(); }
  // The deadline in force: flush()'s, or a signal's request when obeyed.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> deadline() const;
  [[nodiscard]] Status take_failure();  // under mutex_
  [[nodiscard]] Result<bool> agree_to_skip(bool busy);
  [[nodiscard]] Status stage(Job& job);
  void publish(Job& job, std::vector<Segment>& pending, unsigned char* slab);
  // Worker side.
  void run();
  [[nodiscard]] SaveOutcome persist(Job& job);
  [[nodiscard]] bool next_segment(Job& job, Segment& out);
  void drain(Job& job);
  [[nodiscard]] bool past_deadline(std::uint64_t remaining_bytes, std::uint64_t done_bytes,
                                   std::chrono::steady_clock::time_point began) const;

  Store& store_;
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

// --- Definitions ------------------------------------------------------------------------------------

inline Result<std::unique_ptr<AsyncSaver>> AsyncSaver::create_with(Store& store, AsyncSaveOptions options,
                                                                     std::optional<CommRef> control) {
  if (store.access() != Access::read_write)
    return make_error(Code::invalid_argument, store.path() + ": an async saver needs a store opened read_write");
  if (options.max_in_flight == 0) return make_error(Code::invalid_argument, "max_in_flight must be at least 1");
  if (control && store.world_size() != control->size())
    return make_error(Code::invalid_argument, "the control communicator has " + std::to_string(control->size()) +
                                                  " ranks, the store's communicator " + std::to_string(store.world_size()));
  if (store.world_size() > 1 && options.when_busy == WhenBusy::skip && !control)
    return make_error(Code::invalid_argument,
                      "WhenBusy::skip across ranks needs a control communicator, so every rank skips the same steps");
  // At least two slabs: one being filled while the worker writes the other (spec/ASYNC.md 3).
  std::size_t slab = std::max<std::size_t>(StagingPool::kPage, std::min(options.slab_bytes, options.staging_bytes / 2));
  std::unique_ptr<AsyncSaver> saver(new AsyncSaver(store, options, control));
  auto pool = StagingPool::create(options.staging_bytes, slab, options.memory);
  if (!pool.ok()) return pool.status();
  saver->pool_ = std::move(pool).value();
  const SaveEstimate e = store.estimate_save();
  if (e.known()) saver->estimated_rate_ = e.bytes_per_second;
  saver->worker_ = std::thread([s = saver.get()] { s->run(); });
  return Result<std::unique_ptr<AsyncSaver>>(std::move(saver));
}

inline std::optional<std::chrono::steady_clock::time_point> AsyncSaver::deadline() const {
  std::optional<std::chrono::steady_clock::time_point> d = flush_deadline_;
  if (options_.obey_flush_requests)
    if (auto requested = flush_requested(); requested && (!d || *requested < *d)) d = requested;
  return d;
}

inline Status AsyncSaver::take_failure() {
  if (failures_.empty()) return Status();
  Status s = failures_.front();
  failures_.pop_front();
  return s;
}

inline Result<bool> AsyncSaver::agree_to_skip(bool busy) {
  if (!control_ || control_->size() == 1) return busy;
  // Skip only if some rank is busy, and then every rank skips (one gather, one broadcast on control).
  auto flags = control_->gather(std::string(1, busy ? '1' : '0'), 0);
  if (!flags.ok()) return flags.status().with_context("agreeing whether to skip a save");
  std::string decision = "0";
  if (control_->rank() == 0)
    for (const auto& f : *flags)
      if (f == "1") decision = "1";
  CKPT_TRY(control_->broadcast(decision, 0).with_context("agreeing whether to skip a save"));
  return decision == "1";
}

inline Result<SaveTicket> AsyncSaver::save(SaveRequest request) {
  const auto started = std::chrono::steady_clock::now();
  SaveTicket ticket;
  ticket.step = request.step();
  for (const auto& t : request.tensors())
    if (t.on_device && options_.device == nullptr)
      return make_error(Code::invalid_argument, "tensor '" + t.name + "' is on the device and the saver has no SnapshotCopier");
  std::shared_ptr<Job> job;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    Status earlier = take_failure();
    if (!earlier.ok())
      return earlier.with_context("save of step " + std::to_string(ticket.step) + " not taken: an earlier save failed");
    if (deadline())
      return make_error(Code::cancelled, "save of step " + std::to_string(ticket.step) + " not taken: a flush was requested");
    bool busy = jobs_.size() >= options_.max_in_flight;
    if (options_.when_busy == WhenBusy::skip && (control_ || busy)) {
      lock.unlock();  // the agreement may wait for other ranks; the worker must not wait for us meanwhile
      auto skip = agree_to_skip(busy);
      if (!skip.ok()) return skip.status();
      lock.lock();
      if (*skip) {
        ++skipped_;
        ticket.skipped = true;
        ticket.stall = std::chrono::steady_clock::now() - started;
        return ticket;
      }
    }
    idle_.wait(lock, [&] { return jobs_.size() < options_.max_in_flight; });
    job = std::make_shared<Job>(std::move(request));
    job->started = started;
    jobs_.push_back(job);  // the worker may BEGIN while we stage: the two overlap
  }
  work_.notify_all();
  Status staged = stage(*job);
  const auto stall = std::chrono::steady_clock::now() - started;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job->stall = std::chrono::duration_cast<std::chrono::nanoseconds>(stall);
    job->staged = true;
    if (!staged.ok()) job->staging_failure = staged;
  }
  work_.notify_all();
  if (!staged.ok()) return staged.with_context("save of step " + std::to_string(ticket.step));
  ticket.stall = std::chrono::duration_cast<std::chrono::nanoseconds>(stall);
  return ticket;
}

inline void AsyncSaver::publish(Job& job, std::vector<Segment>& pending, unsigned char* slab) {
  if (pending.empty()) {
    if (slab != nullptr) pool_->release(slab);
    return;
  }
  pending.back().slab = slab;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& s : pending) job.segments.push_back(s);
  }
  pending.clear();
  work_.notify_all();
}

inline Status AsyncSaver::stage(Job& job) {
  std::vector<Segment> pending;  // segments of the slab being filled
  pending.reserve(64);
  unsigned char* slab = nullptr;
  std::size_t used = 0;
  bool device_pending = false;  // copies issued into this slab that fence() has not waited for
  auto stop = [&] { return deadline().has_value(); };
  auto seal = [&]() -> Status {
    if (device_pending) {
      CKPT_TRY(options_.device->fence().with_context("device snapshot"));
      device_pending = false;
    }
    publish(job, pending, slab);
    slab = nullptr;
    used = 0;
    return Status();
  };
  Status failure;
  const auto& tensors = job.request.tensors();
  for (std::size_t i = 0; i < tensors.size() && failure.ok(); ++i) {
    const SaveTensor& t = tensors[i];
    const auto* src = static_cast<const unsigned char*>(t.data);
    std::size_t done = 0;
    if (t.size == 0) {
      pending.push_back(Segment{i, nullptr, 0, nullptr});  // the worker still opens and ends the piece
      continue;
    }
    while (done < t.size) {
      if (slab == nullptr) {
        slab = pool_->acquire(stop);
        if (slab == nullptr) {
          failure = make_error(Code::cancelled, "a flush was requested while step " + std::to_string(job.request.step()) +
                                                    " was being staged");
          break;
        }
      }
      const std::size_t n = std::min(t.size - done, pool_->slab_bytes() - used);
      unsigned char* dst = slab + used;
      if (t.on_device) {
        failure = options_.device->copy(dst, src + done, n).with_context("device snapshot of '" + t.name + "'");
        if (!failure.ok()) break;
        device_pending = true;
      } else {
        std::memcpy(dst, src + done, n);
      }
      pending.push_back(Segment{i, dst, n, nullptr});
      used += n;
      done += n;
      if (used == pool_->slab_bytes()) failure = seal();
    }
  }
  if (failure.ok()) failure = seal();
  if (!failure.ok()) {
    if (device_pending) options_.device->fence().ignore_error();  // no copy may still land in a slab given back
    publish(job, pending, slab);  // the worker drains what was published and gives every slab back
  }
  return failure;
}

inline bool AsyncSaver::next_segment(Job& job, Segment& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!job.staged && !job.streaming && pool_->free_slabs() == 0) job.streaming = true;
    if (!job.segments.empty() && (job.staged || job.streaming || options_.write_while_staging)) {
      out = job.segments.front();
      job.segments.pop_front();
      return true;
    }
    if (job.staged && job.segments.empty()) return false;
    // Short waits: a signal's flush request cannot notify (spec/ASYNC.md 5).
    work_.wait_for(lock, std::chrono::milliseconds(5));
    if (!job.staged && deadline() && std::chrono::steady_clock::now() >= *deadline()) return false;
  }
}

inline void AsyncSaver::drain(Job& job) {
  // Every published slab goes back; staging stops at a flush deadline, so this ends.
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!job.segments.empty()) {
      Segment s = job.segments.front();
      job.segments.pop_front();
      if (s.slab != nullptr) pool_->release(s.slab);
    }
    if (job.staged) return;
    work_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

inline bool AsyncSaver::past_deadline(std::uint64_t remaining_bytes, std::uint64_t done_bytes,
                                   std::chrono::steady_clock::time_point began) const {
  std::optional<std::chrono::steady_clock::time_point> d;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    d = deadline();
  }
  if (!d) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now >= *d) return true;
  // The slower of the recorded throughput and this save's own so far: a hold-up budget needs the worst case.
  double rate = estimated_rate_;
  const double elapsed = std::chrono::duration<double>(now - began).count();
  if (done_bytes > 0 && elapsed > 0) {
    const double own = static_cast<double>(done_bytes) / elapsed;
    rate = rate > 0 ? std::min(rate, own) : own;
  }
  if (rate <= 0) return false;  // nothing to estimate from: keep going until the deadline itself
  const double needed = static_cast<double>(remaining_bytes) / rate;
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(needed)) > *d;
}

inline SaveOutcome AsyncSaver::persist(Job& job) {
  const SaveRequest& req = job.request;
  SaveOutcome out;
  out.step = req.step();
  const std::string what = "async save of step " + std::to_string(req.step());
  // Under a flush, a save that cannot fit is not begun at all. Across ranks BEGIN is collective, so
  // every rank begins and a rank that cannot make it aborts instead (below).
  if (world() == 1 && past_deadline(req.bytes(), 0, std::chrono::steady_clock::now())) {
    drain(job);
    out.status = make_error(Code::cancelled, what + " not begun: it cannot finish before the flush deadline");
    return out;
  }
  auto begun = store_.begin(req.step());
  if (!begun.ok()) {
    drain(job);
    out.status = begun.status().with_context(what);
    return out;
  }
  auto& tx = **begun;
  const auto began = std::chrono::steady_clock::now();
  Status failure;       // this rank's first error; the transaction is then abandoned
  Status cancelled;     // the flush deadline cannot be met
  std::uint64_t remaining = req.bytes(), done = 0;
  std::size_t open = SIZE_MAX;
  Segment seg;
  while (failure.ok() && cancelled.ok() && next_segment(job, seg)) {
    if (seg.tensor != open) {
      if (open != SIZE_MAX) failure = tx.end_piece();
      const SaveTensor& t = req.tensors()[seg.tensor];
      if (failure.ok()) failure = tx.begin_piece(t.name, t.dtype, t.global_shape, t.offsets, t.local_shape);
      open = seg.tensor;
    }
    if (failure.ok() && seg.size > 0) failure = tx.write(seg.data, seg.size);
    if (seg.slab != nullptr) pool_->release(seg.slab);
    remaining -= seg.size;
    done += seg.size;
    if (failure.ok() && past_deadline(remaining, done, began))
      cancelled = make_error(Code::cancelled, what + " abandoned: it cannot finish before the flush deadline");
  }
  drain(job);
  Status staging;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    staging = job.staging_failure;
    if (failure.ok() && cancelled.ok() && staging.ok() && !job.staged)
      cancelled = make_error(Code::cancelled, what + " abandoned: staging did not finish before the flush deadline");
  }
  if (failure.ok() && cancelled.ok() && staging.ok() && open != SIZE_MAX) failure = tx.end_piece();
  if (failure.ok() && !cancelled.ok()) {
    out.status = tx.abort(cancelled);  // collective: every other rank's commit() fails with this reason
    out.status = out.status.ok() ? cancelled : cancelled.with_context("cleanup: " + out.status.message());
    return out;
  }
  if (failure.ok() && !staging.ok()) {
    Status aborted = tx.abort(staging);
    out.status = staging.with_context(what + " abandoned" + (aborted.ok() ? "" : " (cleanup: " + aborted.message() + ")"));
    return out;
  }
  if (failure.ok()) {
    TrainingState& st = tx.state();
    st = req.state();
    st.step = req.step();
    for (const auto& t : req.tensors())
      if (t.optimizer && std::find(st.optimizer_tensors.begin(), st.optimizer_tensors.end(), t.name) == st.optimizer_tensors.end())
        st.optimizer_tensors.push_back(t.name);
    tx.set_save_timing(job.started, job.stall, true);
  }
  // One rank: a failed write already abandoned the transaction. Across ranks commit() is still due: it
  // is collective, and abandons the step on every rank with the failing rank named (spec/SHARDING.md 3.4).
  if (!failure.ok() && world() == 1) {
    out.status = failure.with_context(what);
    return out;
  }
  auto committed = tx.commit();
  if (!committed.ok()) {
    out.status = committed.status().with_context(what);
    return out;
  }
  out.commit = std::move(committed).value();
  if (!out.commit->retention.ok()) out.status = out.commit->retention.with_context(what + ": committed, then retention");
  return out;
}

inline void AsyncSaver::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, nothing left
      job = jobs_.front();
    }
    SaveOutcome out = persist(*job);
    out.stall = job->stall;
    out.total = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - job->started);
    if (options_.on_complete) options_.on_complete(out);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (out.commit) {
        last_committed_ = out.commit->step;
        ++committed_;
        // Measured throughput of the newest save steers the next deadline estimate.
        // Whole save, staging included: the conservative rate (staging overlaps the writes).
        if (job->request.bytes() > 0 && out.total.count() > 0)
          estimated_rate_ = static_cast<double>(job->request.bytes()) / std::chrono::duration<double>(out.total).count();
      }
      // A staging failure was already returned by save() itself: reported once, not again here.
      if (!out.status.ok() && job->staging_failure.ok()) failures_.push_back(out.status);
      jobs_.pop_front();
    }
    idle_.notify_all();
  }
}

inline Status AsyncSaver::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return jobs_.empty(); });
  return take_failure();
}

inline Status AsyncSaver::flush(std::chrono::steady_clock::time_point deadline_at) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!flush_deadline_ || deadline_at < *flush_deadline_) flush_deadline_ = deadline_at;
  idle_.wait(lock, [&] { return jobs_.empty(); });
  Status first;
  std::string cancelled;
  while (!failures_.empty()) {
    Status s = take_failure();
    if (s.code() == Code::cancelled) cancelled += (cancelled.empty() ? "" : "; ") + s.message();
    else if (first.ok()) first = s;
  }
  if (!first.ok()) return first;
  if (!cancelled.empty()) return make_error(Code::cancelled, cancelled);
  return Status();
}

}  // namespace ckpt
