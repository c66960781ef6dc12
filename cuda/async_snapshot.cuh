// ckpt cuda: device tensors in asynchronous saves (spec/ASYNC.md 6). The snapshot is a device-to-host
// copy on a stream into pinned staging; save() returns after the last copy's event has completed, so
// the training step may overwrite device memory at once. Written over a Backend (device_pipeline.cuh):
// CudaBackend on a GPU, HostBackend in the host tests.
//
//   ckpt::gpu::DeviceSnapshot<ckpt::gpu::CudaBackend> snapshot(backend);
//   CKPT_TRY(snapshot.init());
//   ckpt::AsyncSaveOptions o;  o.memory = ckpt::gpu::pinned_staging(backend);  o.device = &snapshot;
// With the tiers (TierOptions::device = &snapshot) the copies land in the memory tier's slots, which the
// store pins through pin()/unpin() (spec/ASYNC.md 6.1).
#pragma once

#include <cstddef>

#include <ckpt/store/async_save.hpp>
#include <ckpt/core/error.hpp>

namespace ckpt::gpu {

// Pinned host memory for the staging pool: device-to-host copies into it run at full link speed.
template <class B>
[[nodiscard]] StagingMemory pinned_staging(B& backend) {
  StagingMemory m;
  m.allocate = [&backend](void*& block, std::size_t bytes) { return backend.pinned_alloc(block, bytes); };
  m.release = [&backend](void* block) { backend.pinned_free(block).ignore_error(); };  // teardown: nothing to report to
  return m;
}

// Copies device tensors into staging on its own stream; fence() waits for every copy issued.
template <class B>
class DeviceSnapshot final : public SnapshotCopier {
 public:
  explicit DeviceSnapshot(B& backend) : backend_(backend) {}
  DeviceSnapshot(const DeviceSnapshot&) = delete;
  DeviceSnapshot& operator=(const DeviceSnapshot&) = delete;
  ~DeviceSnapshot() override {
    if (!ready_) return;
    backend_.sync_stream(stream_).ignore_error();  // no copy may still target the pool when it is freed
    backend_.delete_event(done_).ignore_error();
    backend_.delete_stream(stream_).ignore_error();
  }

  [[nodiscard]] Status init() {
    CKPT_TRY(backend_.new_stream(stream_));
    if (Status s = backend_.new_event(done_); !s.ok()) {
      backend_.delete_stream(stream_).ignore_error();
      return s;
    }
    ready_ = true;
    return Status();
  }
  [[nodiscard]] Status copy(void* staging, const void* device_source, std::size_t bytes) override {
    if (!ready_) return make_error(Code::invalid_argument, "DeviceSnapshot used before init()");
    return backend_.copy_to_host(staging, device_source, bytes, stream_);
  }
  [[nodiscard]] Status fence() override {
    if (!ready_) return make_error(Code::invalid_argument, "DeviceSnapshot used before init()");
    CKPT_TRY(backend_.record(done_, stream_));
    return backend_.sync_event(done_);
  }
  // A memory-tier slot the copies land in directly (spec/ASYNC.md 6.1).
  [[nodiscard]] Status pin(void* at, std::size_t bytes) override { return backend_.host_register(at, bytes); }
  void unpin(void* at) noexcept override {
    backend_.sync_stream(stream_).ignore_error();  // no copy may still target the slot when it is unregistered
    backend_.host_unregister(at).ignore_error();
  }

 private:
  B& backend_;
  typename B::Stream stream_{};
  typename B::Event done_{};
  bool ready_ = false;
};

}  // namespace ckpt::gpu
