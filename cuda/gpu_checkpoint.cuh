// ckpt cuda: the GPU API. Hash and verify chunk tables in device memory, save device tensors with
// digests checked on the device, load tensors into device memory verified on the device, and verify a
// shard file with the chunk digests computed on the GPU (spec/GPU.md). Include from a .cu file; there
// is no library to link beyond the CUDA runtime.
//
//   ckpt::gpu::hash_chunks(table, stream)            -> digests
//   ckpt::gpu::verify_chunks(table, expected, stream) -> mismatches (index, expected, found)
//   ckpt::gpu::save_from_device(path, tensors)        -> ShardSummary
//   ckpt::gpu::load_to_device(path, targets)          -> Status
//   ckpt::gpu::verify_file(path)                      -> VerifyReport, as ckpt::verify_file
//
// The functions run on the calling thread's current device. Device memory handed to a save must not
// change until it returns (finish any kernel writing it first); a load writes its targets on its own
// stream and has finished with them when it returns.
#pragma once

#include <string>
#include <vector>

#include <ckpt/io/posix_fs.hpp>

#include "cuda_backend.cuh"
#include "device_pipeline.cuh"
#include "hash_kernels.cuh"
#include "xxh3_core.cuh"

namespace ckpt::gpu {

// Digests (XXH3-64, seed 0) of chunks whose bytes are in device memory, computed on `stream`.
[[nodiscard]] inline Result<std::vector<std::uint64_t>> hash_chunks(const std::vector<DeviceChunk>& chunks,
                                                                    cudaStream_t stream = nullptr) {
  CKPT_ASSIGN_OR_RETURN(auto backend, CudaBackend::current());
  return hash_chunks(backend, chunks.data(), chunks.size(), stream);
}

// The chunks whose device digest differs from expected (same length as chunks), in table order.
[[nodiscard]] inline Result<std::vector<ChunkMismatch>> verify_chunks(const std::vector<DeviceChunk>& chunks,
                                                                      const std::vector<std::uint64_t>& expected,
                                                                      cudaStream_t stream = nullptr) {
  if (expected.size() != chunks.size())
    return make_error(Code::invalid_argument, std::to_string(chunks.size()) + " chunks but " + std::to_string(expected.size()) + " expected digests");
  CKPT_ASSIGN_OR_RETURN(auto backend, CudaBackend::current());
  return verify_chunks(backend, chunks.data(), expected.data(), chunks.size(), stream);
}

// Saves device tensors as one shard file (atomically by default); see write_device_tensors.
[[nodiscard]] inline Result<ShardSummary> save_from_device(const std::string& path, const std::vector<DeviceTensor>& tensors,
                                                           const WriterOptions& writer_options = {},
                                                           const DeviceIoOptions& options = {},
                                                           const std::vector<MetaEntry>& metadata = {}) {
  CKPT_ASSIGN_OR_RETURN(auto backend, CudaBackend::current());
  PosixFs fs;
  return save_from_device(backend, fs, path, tensors, writer_options, options, metadata);
}

// Loads whole tensors from a shard file into device buffers, every chunk verified on the device.
[[nodiscard]] inline Status load_to_device(const std::string& path, const std::vector<DeviceTarget>& targets,
                                           const DeviceIoOptions& options = {}) {
  CKPT_ASSIGN_OR_RETURN(auto backend, CudaBackend::current());
  PosixFs fs;
  return load_to_device(backend, fs, path, targets, options);
}

// ckpt::verify_file with the chunk digests computed on the GPU.
[[nodiscard]] inline Result<VerifyReport> verify_file(const std::string& path, const DeviceIoOptions& options = {}) {
  CKPT_ASSIGN_OR_RETURN(auto backend, CudaBackend::current());
  PosixFs fs;
  return verify_file_on_device(backend, fs, path, options);
}

}  // namespace ckpt::gpu
