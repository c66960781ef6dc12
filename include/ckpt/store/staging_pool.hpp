// ckpt: the staging pool of asynchronous saves (spec/ASYNC.md 3): one allocation, made and pre-faulted
// once, cut into fixed-size slabs that saves borrow and give back. Nothing on the save path allocates
// staging memory or takes a page fault in it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "../core/error.hpp"

namespace ckpt {

// How the pool's one block is made. Default: page-aligned host memory. A device snapshot passes pinned
// memory (cudaHostAlloc through the CUDA backend), so device-to-host copies run at full speed.
struct StagingMemory {
  std::function<Status(void*& block, std::size_t bytes)> allocate;
  std::function<void(void* block)> release;
};

class StagingPool {
 public:
  static constexpr std::size_t kPage = 4096;

  // `bytes` of staging in slabs of `slab_bytes` (both rounded down to whole pages; at least one slab).
  [[nodiscard]] static Result<std::unique_ptr<StagingPool>> create(std::size_t bytes, std::size_t slab_bytes,
                                                                   StagingMemory memory = {}) {
    slab_bytes -= slab_bytes % kPage;
    if (slab_bytes == 0) return make_error(Code::invalid_argument, "staging slab size must be at least 4096 bytes");
    const std::size_t count = bytes / slab_bytes;
    if (count == 0)
      return make_error(Code::invalid_argument, "staging pool of " + std::to_string(bytes) + " bytes holds no slab of " +
                                                    std::to_string(slab_bytes) + " bytes");
    std::unique_ptr<StagingPool> pool(new StagingPool(std::move(memory), slab_bytes, count));
    void* block = nullptr;
    if (pool->memory_.allocate) {
      CKPT_TRY(pool->memory_.allocate(block, pool->bytes()).with_context("staging pool"));
    } else {
      block = ::operator new(pool->bytes(), std::align_val_t{kPage}, std::nothrow);
      if (block == nullptr)
        return make_error(Code::io, "staging pool: cannot allocate " + std::to_string(pool->bytes()) + " bytes");
    }
    pool->block_ = static_cast<unsigned char*>(block);
    // Pre-fault: touch every page now, so the first save does not pay the kernel's zero-fill (spec/ASYNC.md 3).
    for (std::size_t off = 0; off < pool->bytes(); off += kPage) static_cast<volatile unsigned char*>(pool->block_)[off] = 0;
    pool->free_.reserve(count);
    for (std::size_t i = count; i-- > 0;) pool->free_.push_back(pool->block_ + i * slab_bytes);
    return Result<std::unique_ptr<StagingPool>>(std::move(pool));
  }

  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool() {
    if (block_ == nullptr) return;
    if (memory_.release) memory_.release(block_);
    else ::operator delete(block_, std::align_val_t{kPage});
  }

  [[nodiscard]] std::size_t slab_bytes() const noexcept { return slab_bytes_; }
  [[nodiscard]] std::size_t slab_count() const noexcept { return slab_count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return slab_bytes_ * slab_count_; }
  [[nodiscard]] std::size_t free_slabs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_.size();
  }
  // True when p is the start of one of this pool's slabs.
  [[nodiscard]] bool owns(const unsigned char* p) const noexcept {
    return p >= block_ && p < block_ + bytes() && static_cast<std::size_t>(p - block_) % slab_bytes_ == 0;
  }

  // A free slab, waiting until one is given back, until `until`, or until stop() says to give up.
  [[nodiscard]] unsigned char* acquire(const std::function<bool()>& stop = nullptr,
                                       std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max()) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!free_.empty()) {
        unsigned char* slab = free_.back();
        free_.pop_back();
        return slab;
      }
      if (stop && stop()) return nullptr;
      // Short waits: a flush request from a signal handler cannot notify a condition variable (spec/ASYNC.md 5).
      const auto next = std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(5));
      if (cv_.wait_until(lock, next) == std::cv_status::timeout && std::chrono::steady_clock::now() >= until) return nullptr;
    }
  }
  void release(unsigned char* slab) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(slab);
    }
    cv_.notify_all();
  }

 private:
  StagingPool(StagingMemory memory, std::size_t slab_bytes, std::size_t count)
      : memory_(std::move(memory)), slab_bytes_(slab_bytes), slab_count_(count) {}

  StagingMemory memory_;
  std::size_t slab_bytes_, slab_count_;
  unsigned char* block_ = nullptr;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<unsigned char*> free_;  // reserved for every slab at creation: release never allocates
};

}  // namespace ckpt
