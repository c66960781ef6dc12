// ckpt: definitions for async_save.hpp.
#pragma once

#include "../async_save.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include "../../core/bulk_copy.hpp"
#include "../../io/thread_priority.hpp"

namespace ckpt {

CKPT_INLINE Result<std::unique_ptr<AsyncSaver>> AsyncSaver::create_with(Store& store, AsyncSaveOptions options,
                                                                     std::optional<CommRef> control) {
  if (store.access() != Access::read_write)
    return make_error(Code::invalid_argument, store.path() + ": an async saver needs a store opened read_write");
  if (options.max_in_flight == 0) return make_error(Code::invalid_argument, "max_in_flight must be at least 1");
  // A store of one rank may be saved by each rank of a job that skips together (the tiers' memory stores).
  if (control && store.world_size() > 1 && store.world_size() != control->size())
    return make_error(Code::invalid_argument, "the control communicator has " + std::to_string(control->size()) +
                                                  " ranks, the store's communicator " + std::to_string(store.world_size()));
  if (store.world_size() > 1 && options.when_busy == WhenBusy::skip && !control)
    return make_error(Code::invalid_argument,
                      "WhenBusy::skip across ranks needs a control communicator, so every rank skips the same steps");
  if ((options.in_place || options.before_stage) && options.max_in_flight != 1)
    return make_error(Code::invalid_argument, "a saver in place or with before_stage takes one save at a time (max_in_flight 1)");
  if (options.in_place && (!store.fs().can_map() || store.step_root().empty()))
    return make_error(Code::unsupported, store.path() + ": staging in place needs a file system that maps files");
  std::unique_ptr<AsyncSaver> saver(new AsyncSaver(store, options, control));
  if (!options.in_place) {
    // At least two slabs: one being filled while the worker writes the other (spec/ASYNC.md 3).
    std::size_t slab = std::max<std::size_t>(StagingPool::kPage, std::min(options.slab_bytes, options.staging_bytes / 2));
    auto pool = StagingPool::create(options.staging_bytes, slab, options.memory);
    if (!pool.ok()) return pool.status();
    saver->pool_ = std::move(pool).value();
  }
  const SaveEstimate e = store.estimate_save();
  if (e.known()) saver->estimated_rate_ = e.bytes_per_second;
  saver->worker_ = std::thread([s = saver.get()] { s->run(); });
  return Result<std::unique_ptr<AsyncSaver>>(std::move(saver));
}

CKPT_INLINE std::optional<std::chrono::steady_clock::time_point> AsyncSaver::deadline() const {
  std::optional<std::chrono::steady_clock::time_point> d = flush_deadline_;
  if (options_.obey_flush_requests)
    if (auto requested = flush_requested(); requested && (!d || *requested < *d)) d = requested;
  return d;
}

CKPT_INLINE Status AsyncSaver::take_failure() {
  if (failures_.empty()) return Status();
  Status s = failures_.front();
  failures_.pop_front();
  return s;
}

CKPT_INLINE Result<bool> AsyncSaver::agree_to_skip(bool busy) {
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

CKPT_INLINE Result<SaveTicket> AsyncSaver::save(SaveRequest request) {
  const auto started = std::chrono::steady_clock::now();
  SaveTicket ticket;
  ticket.step = request.step();
  // A replicated tensor is written by its owner rank only (spec/SHARDING.md 3.3: pieces never overlap).
  if (target_->world_size() > 1) request.drop_replicas_of_others(target_->rank());
  for (const auto& t : request.tensors())
    if (t.on_device && options_.device == nullptr)
      return make_error(Code::invalid_argument, "tensor '" + t.name + "' is on the device and the saver has no SnapshotCopier");
  std::shared_ptr<Job> job;
  std::vector<unsigned char*> destinations;  // in_place: where each tensor's bytes go in the store's next file
  {
    std::unique_lock<std::mutex> lock(mutex_);
    Status earlier = take_failure();
    if (!earlier.ok())
      return earlier.with_context("save of step " + std::to_string(ticket.step) + " not taken: an earlier save failed");
    if (deadline())
      return make_error(Code::cancelled, "save of step " + std::to_string(ticket.step) + " not taken: a flush was requested");
    bool busy = jobs_.size() >= options_.max_in_flight || (options_.busy && options_.busy());
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
    if (options_.in_place || options_.before_stage) {
      lock.unlock();  // no job: the worker is idle and leaves the store to this thread until one is pushed
      Status room = options_.before_stage ? options_.before_stage(request.step()) : Status();
      if (room.ok() && options_.in_place) {
        auto at = reserve_in_place(request);
        if (at.ok()) destinations = std::move(at).value();
        else room = at.status();
      }
      if (!room.ok()) return room.with_context("save of step " + std::to_string(ticket.step));
      lock.lock();
    }
    job = std::make_shared<Job>(std::move(request));
    job->started = started;
    jobs_.push_back(job);  // the worker may BEGIN while we stage: the two overlap
  }
  work_.notify_all();
  Status staged = options_.in_place ? stage_in_place(*job, destinations) : stage(*job);
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

CKPT_INLINE void AsyncSaver::publish(Job& job, std::vector<Segment>& pending, unsigned char* slab) {
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

CKPT_INLINE Result<std::vector<unsigned char*>> AsyncSaver::reserve_in_place(const SaveRequest& request) {
  std::vector<std::uint64_t> sizes;
  sizes.reserve(request.tensors().size());
  for (const auto& t : request.tensors()) sizes.push_back(t.size);
  return target_->reserve_slot(sizes);
}

// In place (spec/ASYNC.md 3.1): each tensor copied once, to where the store's next file holds it; published
// whole, so the worker hashes bytes that have landed (device copies fenced first).
CKPT_INLINE Status AsyncSaver::stage_in_place(Job& job, const std::vector<unsigned char*>& at) {
  std::vector<Segment> pending;
  pending.reserve(at.size());
  Status failure;
  bool device_pending = false;
  const auto& tensors = job.request.tensors();
  for (std::size_t i = 0; i < tensors.size() && failure.ok(); ++i) {
    const SaveTensor& t = tensors[i];
    if (t.on_device) {
      failure = options_.device->copy(at[i], t.data, t.size).with_context("device snapshot of '" + t.name + "'");
      device_pending = device_pending || failure.ok();
    } else if (t.size > 0) {
      bulk_copy(at[i], t.data, t.size);  // streamed: the worker reads the slot from memory, not the cache
    }
    pending.push_back(Segment{i, at[i], t.size, nullptr});
  }
  if (device_pending) {
    Status fenced = options_.device->fence().with_context("device snapshot");
    if (failure.ok()) failure = fenced;
  }
  publish(job, pending, nullptr);
  return failure;
}

CKPT_INLINE Status AsyncSaver::stage(Job& job) {
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

CKPT_INLINE bool AsyncSaver::next_segment(Job& job, Segment& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!job.staged && !job.streaming && pool_ && pool_->free_slabs() == 0) job.streaming = true;
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

CKPT_INLINE void AsyncSaver::drain(Job& job) {
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

CKPT_INLINE bool AsyncSaver::past_deadline(std::uint64_t remaining_bytes, std::uint64_t done_bytes,
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

CKPT_INLINE SaveOutcome AsyncSaver::persist(Job& job) {
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
  auto begun = target_->begin(req.step());
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

CKPT_INLINE void AsyncSaver::run() {
  (void)lower_this_thread_priority(options_.worker_nice);  // best effort: a refusal leaves it as it was
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

CKPT_INLINE Status AsyncSaver::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return jobs_.empty(); });
  return take_failure();
}

CKPT_INLINE Status AsyncSaver::flush(std::chrono::steady_clock::time_point deadline_at) {
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
