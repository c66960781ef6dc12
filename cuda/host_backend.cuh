// ckpt cuda: a Backend that runs on the host, for testing device_pipeline.cuh without a GPU.
//
// "Device" and "pinned" memory are separate host allocations that every copy and launch is checked
// against. Streams are lazy: an operation runs only when an event recorded after it (or a stream) is
// synchronized, and then in the order it was queued. So a pipeline that reuses a staging buffer
// before the copy out of it has run sends the new bytes instead, and a test sees the wrong digest;
// one that reads results before synchronizing reads stale ones. With eager_copies_to_host, a copy to
// the host runs (with everything queued before it) the moment it is queued, so a pipeline that queues
// the next copy into a buffer it is still reading sees that buffer change under it (spec/GPU.md 9).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

#include <ckpt/core/error.hpp>

#include "hash_launch.cuh"

namespace ckpt::gpu {

class HostBackend {
 public:
  using Stream = std::uint32_t;
  using Event = std::uint32_t;

  explicit HostBackend(unsigned multiprocessors = 132) : multiprocessors_(multiprocessors) {}
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;
  ~HostBackend() {
    for (auto& allocation : device_) ::operator delete(const_cast<unsigned char*>(allocation.first), std::align_val_t{256});
    for (auto& allocation : pinned_) ::operator delete(const_cast<unsigned char*>(allocation.first), std::align_val_t{256});
  }

  // Test hook: sees (and may alter) the bytes of every copy right after it ran.
  std::function<void(unsigned char* dst, std::size_t n, bool to_device)> on_copy;
  // The other legal extreme of scheduling: copies to the host complete as soon as they are queued.
  bool eager_copies_to_host = false;

  [[nodiscard]] Status new_stream(Stream& s) {
    s = next_stream_++;
    ++live_streams_;
    return Status();
  }
  [[nodiscard]] Status delete_stream(Stream) {
    --live_streams_;
    return Status();
  }
  [[nodiscard]] Status new_event(Event& e) {
    e = static_cast<Event>(events_.size());
    events_.push_back(0);
    ++live_events_;
    return Status();
  }
  [[nodiscard]] Status delete_event(Event) {
    --live_events_;
    return Status();
  }
  [[nodiscard]] Status device_alloc(void*& p, std::size_t n) { return alloc(device_, p, n); }
  [[nodiscard]] Status device_free(void* p) { return release(device_, p, "device"); }
  [[nodiscard]] Status pinned_alloc(void*& p, std::size_t n) { return alloc(pinned_, p, n); }
  [[nodiscard]] Status pinned_free(void* p) { return release(pinned_, p, "pinned"); }
  // Host memory allocated elsewhere (a mapped file) made a legal end of copies, as cudaHostRegister does.
  [[nodiscard]] Status host_register(void* p, std::size_t n) {
    if (p == nullptr || n == 0) return misuse("host_register of no memory");
    if (within(registered_, p, 1) || within(pinned_, p, 1)) return misuse("host_register of memory already pinned");
    registered_.emplace(static_cast<const unsigned char*>(p), n);
    ++registrations_;
    return Status();
  }
  [[nodiscard]] Status host_unregister(void* p) {
    auto it = registered_.find(static_cast<const unsigned char*>(p));
    if (it == registered_.end()) return misuse("host_unregister of memory that was not registered");
    registered_.erase(it);
    return Status();
  }

  [[nodiscard]] Status copy_to_device(void* dst, const void* src, std::size_t n, Stream) { return copy(dst, src, n, true); }
  [[nodiscard]] Status copy_to_host(void* dst, const void* src, std::size_t n, Stream) {
    CKPT_TRY(copy(dst, src, n, false));
    if (eager_copies_to_host) return run_until(ops_.size());
    return Status();
  }
  [[nodiscard]] Status record(Event e, Stream) {
    events_.at(e) = ops_.size();
    return Status();
  }
  [[nodiscard]] Status sync_event(Event e) { return run_until(events_.at(e)); }
  [[nodiscard]] Status sync_stream(Stream) { return run_until(ops_.size()); }

  [[nodiscard]] Status launch_hash(const HashLaunch& launch, Stream) {
    if (launch.blocks == 0) return Status();
    const std::uint64_t n = launch.count;
    if (!within(device_, launch.chunks, n * sizeof(DeviceChunk)) || !within(device_, launch.order, n * 4) ||
        (launch.digests != nullptr && !within(device_, launch.digests, n * 8)) ||
        (launch.expected != nullptr && (!within(device_, launch.expected, n * 8) || !within(device_, launch.mismatch_count, 4) ||
                                        !within(device_, launch.mismatches, n * 4))))
      return misuse("launch_hash: a table is not in device memory");
    if (launch.threads == 0 || launch.threads % 32 != 0 || launch.threads > kMaxLaunchThreads ||
        launch.shared_bytes < launch_shared_bytes(launch.threads))
      return misuse("launch_hash: bad thread block shape");
    queue([this, launch] {
      // The kernel reads the table as it is in device memory when it runs, not when it was queued.
      for (std::uint32_t i = 0; i < launch.count; ++i) {
        const DeviceChunk c = launch.chunks[i];
        if (launch.order[i] >= launch.count) return fault("launch_hash: order entry out of range");
        if (c.length > 0 && !within(device_, c.data, c.length)) return fault("launch_hash: chunk " + std::to_string(i) + " is not in device memory");
      }
      const std::uint64_t slots = launch.long_count + std::uint64_t{launch.blocks - launch.long_count} * launch.threads;
      if (launch.long_count > launch.count || launch.blocks < launch.long_count || slots < launch.count)
        return fault("launch_hash: the grid does not cover the table");
      run_hash_launch_on_host(launch);
      ++launches_;
    });
    return Status();
  }
  [[nodiscard]] unsigned multiprocessors() const noexcept { return multiprocessors_; }

  // What the tests look at.
  [[nodiscard]] std::size_t pending() const noexcept { return ops_.size() - executed_; }
  [[nodiscard]] std::size_t most_pending() const noexcept { return most_pending_; }
  [[nodiscard]] std::size_t copies() const noexcept { return copies_; }
  [[nodiscard]] std::size_t launches() const noexcept { return launches_; }
  [[nodiscard]] std::size_t live_allocations() const noexcept { return device_.size() + pinned_.size(); }
  [[nodiscard]] std::size_t live_registrations() const noexcept { return registered_.size(); }
  [[nodiscard]] std::size_t registrations() const noexcept { return registrations_; }
  [[nodiscard]] int live_streams() const noexcept { return live_streams_; }
  [[nodiscard]] int live_events() const noexcept { return live_events_; }

 private:
  using Allocations = std::map<const unsigned char*, std::size_t>;

  [[nodiscard]] static Status misuse(const std::string& what) { return make_error(Code::invalid_argument, "host backend: " + what); }
  [[nodiscard]] static const char* memory_name(bool device) { return device ? "device memory" : "pinned host memory"; }
  // Queues a copy of n bytes from pinned host memory to device memory (to_device) or back, once both
  // ends are checked to be the memory that direction names.
  [[nodiscard]] Status copy(void* dst, const void* src, std::size_t n, bool to_device) {
    const std::string call = to_device ? "copy_to_device" : "copy_to_host";
    const auto host = [&](const void* p) { return within(pinned_, p, n) || within(registered_, p, n); };
    if (to_device ? !within(device_, dst, n) : !host(dst)) return misuse(call + ": destination is not " + memory_name(to_device));
    if (to_device ? !host(src) : !within(device_, src, n)) return misuse(call + ": source is not " + memory_name(!to_device));
    queue([this, dst, src, n, to_device] {
      std::memcpy(dst, src, n);
      if (on_copy) on_copy(static_cast<unsigned char*>(dst), n, to_device);
    });
    ++copies_;
    return Status();
  }
  void fault(std::string what) {
    if (fault_.empty()) fault_ = std::move(what);
  }
  void queue(std::function<void()> op) {
    ops_.push_back(std::move(op));
    most_pending_ = std::max(most_pending_, pending());
  }
  [[nodiscard]] Status run_until(std::size_t position) {
    while (executed_ < position) {
      auto op = std::move(ops_[executed_]);
      ops_[executed_++] = nullptr;
      if (fault_.empty()) op();
    }
    // Like a CUDA context after a kernel fault: every later synchronization reports the error.
    if (!fault_.empty()) return make_error(Code::io, "host backend: " + fault_);
    return Status();
  }
  [[nodiscard]] static bool within(const Allocations& a, const void* p, std::uint64_t n) {
    const auto* q = static_cast<const unsigned char*>(p);
    auto it = a.upper_bound(q);
    if (it == a.begin()) return false;
    --it;
    const std::uint64_t off = static_cast<std::uint64_t>(q - it->first);
    return off <= it->second && n <= it->second - off;
  }
  [[nodiscard]] static Status alloc(Allocations& a, void*& p, std::size_t n) {
    p = ::operator new(n == 0 ? 1 : n, std::align_val_t{256});
    a.emplace(static_cast<const unsigned char*>(p), n);
    return Status();
  }
  [[nodiscard]] static Status release(Allocations& a, void* p, const char* kind) {
    auto it = a.find(static_cast<const unsigned char*>(p));
    if (it == a.end()) return misuse(std::string("free of ") + kind + " memory that was not allocated");
    a.erase(it);
    ::operator delete(p, std::align_val_t{256});
    return Status();
  }

  unsigned multiprocessors_;
  Allocations device_, pinned_, registered_;
  std::size_t registrations_ = 0;
  std::vector<std::function<void()>> ops_;
  std::size_t executed_ = 0, most_pending_ = 0, copies_ = 0, launches_ = 0;
  std::vector<std::size_t> events_;
  std::string fault_;
  Stream next_stream_ = 1;
  int live_streams_ = 0, live_events_ = 0;
};

}  // namespace ckpt::gpu
