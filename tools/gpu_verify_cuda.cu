// ckpt tools: the CUDA implementation of tools/gpu_verify.hpp, linked into ckpt-verify when the build
// has nvcc (cmake/tools-cuda.cmake). Structure checks are the CPU verifier's; chunk digests are
// computed on the device from large pinned, double-buffered reads (spec/GPU.md 6).
#include "gpu_verify.hpp"

#include "../cuda/gpu_checkpoint.cuh"

namespace ckpt::tools {

bool gpu_available(int device, std::string& reason) { return gpu::device_usable(device, reason); }

Result<VerifyReport> gpu_verify_file(const std::string& path, const GpuVerifyOptions& options) {
  std::string reason;
  if (!gpu::device_usable(options.device, reason)) return make_error(Code::unsupported, "no usable GPU: " + reason);
  CKPT_ASSIGN_OR_RETURN(auto backend, gpu::CudaBackend::create(options.device));
  gpu::DeviceIoOptions io;
  io.staging_bytes = options.block_bytes;
  io.io_threads = options.io_threads;
  io.progress = options.progress;
  PosixFs fs;
  return gpu::verify_file_on_device(backend, fs, path, io);
}

}  // namespace ckpt::tools
