// ckpt cuda: the batched XXH3-64 kernel. One launch hashes a whole chunk table (spec/GPU.md 4).
//
// A chunk over 240 bytes gets a thread block of 32 to 256 threads: four threads per 1 KiB block, each
// summing 16 bytes of each of the block's 16 stripes (two accumulator lanes), so a round covers
// threads / 4 blocks at once; then eight threads fold those block sums in order, one scramble per KiB.
// Chunks of up to 240 bytes are hashed one per thread. Include from a .cu file only.
#pragma once

#if !defined(__CUDACC__)
#error "cuda/hash_kernels.cuh holds CUDA kernels: include it from a .cu file compiled by nvcc"
#endif

#include <cuda_runtime.h>

#include <cstdint>

#include "hash_launch.cuh"
#include "xxh3_core.cuh"

namespace ckpt::gpu {

namespace detail {

using xxh3::u64;
using xxh3::u8;

// Loads for a chunk whose start has the given alignment; every offset they see keeps that alignment.
template <int kAlign>
struct AlignedLoad;
template <>
struct AlignedLoad<16> {
  __device__ __forceinline__ void operator()(const u8* p, u64& even, u64& odd) const {
    const ulonglong2 v = __ldg(reinterpret_cast<const ulonglong2*>(p));
    even = v.x;
    odd = v.y;
  }
  __device__ __forceinline__ u64 operator()(const u8* p) const { return __ldg(reinterpret_cast<const unsigned long long*>(p)); }
};
template <>
struct AlignedLoad<8> {
  __device__ __forceinline__ void operator()(const u8* p, u64& even, u64& odd) const {
    even = __ldg(reinterpret_cast<const unsigned long long*>(p));
    odd = __ldg(reinterpret_cast<const unsigned long long*>(p + 8));
  }
  __device__ __forceinline__ u64 operator()(const u8* p) const { return __ldg(reinterpret_cast<const unsigned long long*>(p)); }
};
template <>
struct AlignedLoad<4> {
  __device__ __forceinline__ u64 operator()(const u8* p) const {
    const auto* w = reinterpret_cast<const unsigned int*>(p);
    return static_cast<u64>(__ldg(w)) | (static_cast<u64>(__ldg(w + 1)) << 32);
  }
  __device__ __forceinline__ void operator()(const u8* p, u64& even, u64& odd) const {
    even = (*this)(p);
    odd = (*this)(p + 8);
  }
};
template <>
struct AlignedLoad<1> : xxh3::ByteLoad {};

// Thread 0 gets the digest of the chunk [p, p + len), len > 240; every thread of the block calls it.
template <class Load>
__device__ u64 hash_long_in_block(const Load& load, const u8* p, u64 len, u64* sums) {
  const unsigned t = threadIdx.x, pair = t & 3u, column = t >> 2, columns = blockDim.x >> 2;
  u64 keys[xxh3::kStripesPerBlock + 1];
  xxh3::pair_keys(pair, keys);
  u64 acc = xxh3::initial_acc(t & 7u);
  const u64 blocks = xxh3::full_blocks(len);
  unsigned parity = 0;
  // One barrier per round: sums are double-buffered, and the folding threads finish round r before
  // they reach the barrier of round r + 1, after which round r + 2 may overwrite its buffer.
  for (u64 first = 0; first < blocks; first += columns, parity ^= 1u) {
    u64* round = sums + parity * columns * xxh3::kLanes;
    u64 even = 0, odd = 0;
    if (first + column < blocks)
      xxh3::block_pair_sum(load, p + (first + column) * xxh3::kBlockBytes + 16 * pair, keys, even, odd);
    round[column * xxh3::kLanes + 2 * pair] = even;
    round[column * xxh3::kLanes + 2 * pair + 1] = odd;
    __syncthreads();
    if (t < xxh3::kLanes) {
      const u64 in_round = blocks - first < columns ? blocks - first : columns;
      for (u64 c = 0; c < in_round; ++c) acc = xxh3::fold_block(acc, round[c * xxh3::kLanes + t], t);
    }
  }
  u64 digest = 0;
  if (t < 32) {
    // The first warp sums the tail: lane t & 7, stripes t >> 3, + 4, ...; then lanes 0-7 add it.
    u64 part = xxh3::tail_lane_sum(load, p, len, t & 7u, t >> 3, 4);
    part += __shfl_xor_sync(0xFFFFFFFFu, part, 8);
    part += __shfl_xor_sync(0xFFFFFFFFu, part, 16);
    acc += part;
    u64 lanes[xxh3::kLanes];
#pragma unroll
    for (unsigned i = 0; i < xxh3::kLanes; ++i) lanes[i] = __shfl_sync(0xFFFFFFFFu, acc, i);
    if (t == 0) digest = xxh3::merge_accs(lanes, len);
  }
  return digest;
}

__device__ __forceinline__ void deliver(const HashLaunch& launch, std::uint32_t index, u64 digest) {
  if (launch.digests != nullptr) launch.digests[index] = digest;
  if (launch.expected != nullptr && launch.expected[index] != digest)
    launch.mismatches[atomicAdd(launch.mismatch_count, 1u)] = index;
}

}  // namespace detail

// The batched kernel; a template only so that including this header from several .cu files links.
template <unsigned kMaxThreads = kMaxLaunchThreads>
__global__ void __launch_bounds__(kMaxThreads) hash_chunks_kernel(const HashLaunch launch) {
  extern __shared__ std::uint64_t ckpt_round_sums[];
  if (blockIdx.x < launch.long_count) {
    const std::uint32_t index = launch.order[blockIdx.x];
    const DeviceChunk chunk = launch.chunks[index];
    if (chunk.length <= xxh3::kMidsizeMax) {  // the planner never does this; stay correct if a caller does
      if (threadIdx.x == 0) detail::deliver(launch, index, xxh3::hash_short(chunk.data, chunk.length));
      return;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(chunk.data);
    std::uint64_t digest;
    if ((address & 15u) == 0)
      digest = detail::hash_long_in_block(detail::AlignedLoad<16>{}, chunk.data, chunk.length, ckpt_round_sums);
    else if ((address & 7u) == 0)
      digest = detail::hash_long_in_block(detail::AlignedLoad<8>{}, chunk.data, chunk.length, ckpt_round_sums);
    else if ((address & 3u) == 0)
      digest = detail::hash_long_in_block(detail::AlignedLoad<4>{}, chunk.data, chunk.length, ckpt_round_sums);
    else
      digest = detail::hash_long_in_block(detail::AlignedLoad<1>{}, chunk.data, chunk.length, ckpt_round_sums);
    if (threadIdx.x == 0) detail::deliver(launch, index, digest);
    return;
  }
  const std::uint64_t slot = short_slot(launch.long_count, blockIdx.x, blockDim.x, threadIdx.x);
  if (slot >= launch.count) return;
  const std::uint32_t index = launch.order[slot];
  detail::deliver(launch, index, xxh3::hash(launch.chunks[index].data, launch.chunks[index].length));
}

// Enqueues one launch on a stream; returns the launch error, if any (execution errors surface later).
[[nodiscard]] inline cudaError_t launch_hash(const HashLaunch& launch, cudaStream_t stream) {
  if (launch.blocks == 0) return cudaSuccess;
  hash_chunks_kernel<><<<launch.blocks, launch.threads, launch.shared_bytes, stream>>>(launch);
  return cudaGetLastError();
}

}  // namespace ckpt::gpu
