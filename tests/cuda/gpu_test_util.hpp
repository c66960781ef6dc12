// Shared by the GPU test (test_gpu.cu) and the device benchmark (gpu_bench.cu): the CPU's answer the
// device's digests are checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include <ckpt/core/hash.hpp>

#include "../../cuda/gpu_checkpoint.cuh"

namespace gpu_test {

// XXH3-64 of every chunk of a device table on `threads` CPU threads, from the host copy of the bytes
// whose device copy starts at device_base.
inline std::vector<std::uint64_t> cpu_digests(const std::vector<unsigned char>& host, const unsigned char* device_base,
                                              const std::vector<ckpt::gpu::DeviceChunk>& table, unsigned threads) {
  std::vector<std::uint64_t> out(table.size());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (std::size_t i = w; i < table.size(); i += threads)
        out[i] = ckpt::xxh3_64(host.data() + (table[i].data - device_base), static_cast<std::size_t>(table[i].length));
    });
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace gpu_test
