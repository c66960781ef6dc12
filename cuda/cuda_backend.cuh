// ckpt cuda: the Backend of device_pipeline.cuh over the CUDA runtime (spec/GPU.md 5). Every CUDA
// error becomes a ckpt::Status (Code::io) that carries the call and CUDA's own name and text for it.
#pragma once

#if !defined(__CUDACC__)
#error "cuda/cuda_backend.cuh launches kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <string>

#include <ckpt/core/error.hpp>

#include "hash_kernels.cuh"

namespace ckpt::gpu {

// "CUDA <call>: <cudaErrorName> (<description>)", or ok.
[[nodiscard]] inline Status cuda_status(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return Status();
  return make_error(Code::io, std::string("CUDA ") + call + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// True when `device` exists and can run this build's kernels; otherwise `reason` says why not.
[[nodiscard]] inline bool device_usable(int device, std::string& reason) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    reason = cuda_status(err, "cudaGetDeviceCount").message();
    (void)cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  if (count == 0) {
    reason = "no CUDA device is present";
    return false;
  }
  if (device < 0 || device >= count) {
    reason = "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " present)";
    return false;
  }
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
    reason = cuda_status(err, "cudaSetDevice").message();
    return false;
  }
  // A device this build has no machine code or PTX for fails here, not at the first launch.
  cudaFuncAttributes attributes{};
  if (cudaError_t err = cudaFuncGetAttributes(&attributes, hash_chunks_kernel<>); err != cudaSuccess) {
    reason = cuda_status(err, "cudaFuncGetAttributes(hash_chunks_kernel)").message();
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

class CudaBackend {
 public:
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;

  // Makes `device` current on the calling thread; all later calls must come from a thread where it is.
  [[nodiscard]] static Result<CudaBackend> create(int device) {
    CKPT_TRY(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
    int multiprocessors = 0;
    CKPT_TRY(cuda_status(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute"));
    return CudaBackend(device, static_cast<unsigned>(multiprocessors));
  }
  // The device current on the calling thread.
  [[nodiscard]] static Result<CudaBackend> current() {
    int device = 0;
    CKPT_TRY(cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
    return create(device);
  }

  [[nodiscard]] Status new_stream(Stream& s) { return cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  [[nodiscard]] Status delete_stream(Stream s) { return cuda_status(cudaStreamDestroy(s), "cudaStreamDestroy"); }
  // Host waits block instead of spinning: the staging threads need the CPU.
  [[nodiscard]] Status new_event(Event& e) {
    return cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
  }
  [[nodiscard]] Status delete_event(Event e) { return cuda_status(cudaEventDestroy(e), "cudaEventDestroy"); }
  [[nodiscard]] Status device_alloc(void*& p, std::size_t n) { return cuda_status(cudaMalloc(&p, n == 0 ? 1 : n), "cudaMalloc"); }
  [[nodiscard]] Status device_free(void* p) { return cuda_status(cudaFree(p), "cudaFree"); }
  [[nodiscard]] Status pinned_alloc(void*& p, std::size_t n) {
    return cuda_status(cudaHostAlloc(&p, n == 0 ? 1 : n, cudaHostAllocDefault), "cudaHostAlloc");
  }
  [[nodiscard]] Status pinned_free(void* p) { return cuda_status(cudaFreeHost(p), "cudaFreeHost"); }
  [[nodiscard]] Status host_register(void* p, std::size_t n) {
    return cuda_status(cudaHostRegister(p, n, cudaHostRegisterDefault), "cudaHostRegister");
  }
  [[nodiscard]] Status host_unregister(void* p) { return cuda_status(cudaHostUnregister(p), "cudaHostUnregister"); }
  [[nodiscard]] Status copy_to_device(void* dst, const void* src, std::size_t n, Stream s) {
    return cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(host to device)");
  }
  [[nodiscard]] Status copy_to_host(void* dst, const void* src, std::size_t n, Stream s) {
    return cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(device to host)");
  }
  [[nodiscard]] Status record(Event e, Stream s) { return cuda_status(cudaEventRecord(e, s), "cudaEventRecord"); }
  [[nodiscard]] Status sync_event(Event e) { return cuda_status(cudaEventSynchronize(e), "cudaEventSynchronize"); }
  [[nodiscard]] Status sync_stream(Stream s) { return cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize"); }
  [[nodiscard]] Status launch_hash(const HashLaunch& launch, Stream s) {
    return cuda_status(gpu::launch_hash(launch, s), "hash_chunks_kernel launch");
  }
  [[nodiscard]] unsigned multiprocessors() const noexcept { return multiprocessors_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  CudaBackend(int device, unsigned multiprocessors) : device_(device), multiprocessors_(multiprocessors) {}
  int device_;
  unsigned multiprocessors_;
};

}  // namespace ckpt::gpu
