// ckpt tools: the GPU verification back end used by `ckpt-verify --gpu` (and other loading tools).
// Built with CUDA, cmake/tools-cuda.cmake defines CKPT_GPU_TOOLS and links the implementation from
// cuda/; without it these inline fallbacks say clearly that no GPU path exists in this build.
#pragma once

#include <string>

#include <ckpt/store/step_reader.hpp>
#include <ckpt/shard/verify.hpp>

namespace ckpt::tools {

struct GpuVerifyOptions {
  int device = 0;
  std::size_t block_bytes = std::size_t{64} << 20;  // read size into pinned staging
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
  unsigned io_threads = 4;  // parallel preads filling one staging buffer (added last: aggregate order kept)
};

#ifdef CKPT_GPU_TOOLS
// True when a usable CUDA device is present; otherwise reason says why (no driver, no device...).
bool gpu_available(int device, std::string& reason);
// Same report as ckpt::verify_file, with every chunk digest computed on the device.
Result<VerifyReport> gpu_verify_file(const std::string& path, const GpuVerifyOptions& options);
#else
inline bool gpu_available(int, std::string& reason) {
  reason = "this build of ckpt has no CUDA support (nvcc was not found when it was built)";
  return false;
}
inline Result<VerifyReport> gpu_verify_file(const std::string&, const GpuVerifyOptions&) {
  return make_error(Code::unsupported, "this build of ckpt has no CUDA support");
}
#endif

// The GPU back end as the per-file verifier of step verification (ckpt::verify_step).
[[nodiscard]] inline FileVerifier gpu_file_verifier(GpuVerifyOptions options) {
  return [options](const std::string& path) { return gpu_verify_file(path, options); };
}

}  // namespace ckpt::tools
