// ckpt cuda: the shape of one batched hash launch, planned on the host (spec/GPU.md 4).
//
// Plain C++ (no CUDA headers): the CUDA backend hands a HashLaunch to the kernel in hash_kernels.cuh,
// the host backend runs run_hash_launch_on_host, which walks the same grid with the same core functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xxh3_core.cuh"

namespace ckpt::gpu {

// One chunk to hash: a device address and a length (any alignment, any length including 0).
struct DeviceChunk {
  const unsigned char* data = nullptr;
  std::uint64_t length = 0;
};

inline constexpr unsigned kMaxLaunchThreads = 256;           // 8 warps per long chunk at most
inline constexpr std::uint64_t kMaxLaunchChunks = 1u << 30;  // grid and index limits, with room

// Everything one launch reads and writes. Every pointer is a device address.
struct HashLaunch {
  const DeviceChunk* chunks = nullptr;
  const std::uint32_t* order = nullptr;   // chunk indices: long chunks (one thread block each) first
  std::uint32_t long_count = 0;           // chunks over 240 bytes, hashed by a whole thread block
  std::uint32_t count = 0;                // all chunks; the rest get one thread each
  std::uint64_t* digests = nullptr;       // out: digest of chunk i at i
  const std::uint64_t* expected = nullptr;  // optional: digests to compare with
  std::uint32_t* mismatch_count = nullptr;  // out when expected is set (zero before the launch)
  std::uint32_t* mismatches = nullptr;      // out: indices of chunks whose digest differs, any order
  unsigned threads = kMaxLaunchThreads;     // per thread block: 32, 64, 128 or 256
  std::uint32_t blocks = 0;
  std::size_t shared_bytes = 0;             // two rounds of per-block sums: threads / 4 * 8 lanes * 8 B * 2
};

// Columns (1 KiB blocks summed at once) of a long-chunk thread block: four threads per block.
[[nodiscard]] inline unsigned launch_columns(unsigned threads) noexcept { return threads / 4; }
[[nodiscard]] inline std::size_t launch_shared_bytes(unsigned threads) noexcept {
  return std::size_t{2} * launch_columns(threads) * xxh3::kLanes * sizeof(std::uint64_t);
}

struct HashPlan {
  std::vector<std::uint32_t> order;
  std::uint32_t long_count = 0;
  unsigned threads = kMaxLaunchThreads;
  std::uint32_t blocks = 0;
};

// Long chunks (over 240 bytes) get a thread block each, longest first so the grid ends evenly; the
// rest are packed one per thread. Thread blocks grow from 1 to 8 warps while there are too few long
// chunks to give every multiprocessor about 32 warps, or while the longest chunk would still be
// hashing after the others, on about 24 resident groups per multiprocessor, are done (spec/GPU.md 4).
// count must be <= kMaxLaunchChunks.
[[nodiscard]] inline HashPlan plan_hash(const DeviceChunk* chunks, std::size_t count, unsigned multiprocessors) {
  HashPlan plan;
  plan.order.reserve(count);
  std::uint64_t most_blocks = 0, longest = 0, long_bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (chunks[i].length <= xxh3::kMidsizeMax) continue;
    plan.order.push_back(static_cast<std::uint32_t>(i));
    most_blocks = std::max(most_blocks, xxh3::full_blocks(chunks[i].length));
    longest = std::max(longest, chunks[i].length);
    long_bytes += chunks[i].length;
  }
  plan.long_count = static_cast<std::uint32_t>(plan.order.size());
  auto longer = [chunks](std::uint32_t a, std::uint32_t b) { return chunks[a].length > chunks[b].length; };
  if (!std::is_sorted(plan.order.begin(), plan.order.end(), longer))
    std::stable_sort(plan.order.begin(), plan.order.end(), longer);
  for (std::size_t i = 0; i < count; ++i)
    if (chunks[i].length <= xxh3::kMidsizeMax) plan.order.push_back(static_cast<std::uint32_t>(i));
  if (plan.long_count > 0) {
    const double sms = std::max(multiprocessors, 1u);
    auto wants_more = [&](unsigned warps) {
      const bool few_chunks = double(plan.long_count) * warps * 2 <= sms * 32;
      const bool longest_last = double(longest) * sms * 24 > double(long_bytes) * warps;
      return few_chunks || longest_last;
    };
    unsigned warps = 1;
    while (warps < kMaxLaunchThreads / 32 && std::uint64_t{8} * warps < most_blocks && wants_more(warps)) warps *= 2;
    plan.threads = 32 * warps;
  }
  const std::uint64_t short_count = count - plan.long_count;
  plan.blocks = static_cast<std::uint32_t>(plan.long_count + (short_count + plan.threads - 1) / plan.threads);
  return plan;
}

// Which chunk slot thread `thread` of a short-chunk block `block` hashes (>= count: none).
[[nodiscard]] CKPT_HD std::uint64_t short_slot(std::uint32_t long_count, std::uint32_t block, unsigned threads,
                                               unsigned thread) {
  return std::uint64_t{long_count} + std::uint64_t{block - long_count} * threads + thread;
}

// Runs a launch on the host, block by block as the grid would: long chunks through the decomposed
// algorithm with the launch's column count, short ones per thread. Pointers are host addresses here.
inline void run_hash_launch_on_host(const HashLaunch& launch) {
  std::vector<std::uint64_t> round_sums(launch_columns(launch.threads) * xxh3::kLanes);
  auto deliver = [&launch](std::uint32_t index, std::uint64_t digest) {
    if (launch.digests != nullptr) launch.digests[index] = digest;
    if (launch.expected != nullptr && launch.expected[index] != digest) launch.mismatches[(*launch.mismatch_count)++] = index;
  };
  for (std::uint32_t block = 0; block < launch.blocks; ++block) {
    if (block < launch.long_count) {
      const std::uint32_t index = launch.order[block];
      const DeviceChunk chunk = launch.chunks[index];
      deliver(index, chunk.length <= xxh3::kMidsizeMax
                         ? xxh3::hash_short(chunk.data, chunk.length)
                         : xxh3::hash_long_decomposed(chunk.data, chunk.length, launch_columns(launch.threads), 4,
                                                      round_sums.data()));
      continue;
    }
    for (unsigned thread = launch.threads; thread-- > 0;) {
      const std::uint64_t slot = short_slot(launch.long_count, block, launch.threads, thread);
      if (slot >= launch.count) continue;
      const std::uint32_t index = launch.order[slot];
      deliver(index, xxh3::hash(launch.chunks[index].data, launch.chunks[index].length));
    }
  }
}

}  // namespace ckpt::gpu
