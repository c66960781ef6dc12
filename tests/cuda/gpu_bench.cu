// ckpt-gpu-bench: the device numbers of tools/gpu-device-check.sh (spec/GPU.md 10), each reported next
// to the machine's own limit measured in the same run (device-to-device copy, bytes read + written).
// Every hashed layout is first checked against the CPU hash on the same fresh random bytes; a wrong
// digest exits 1. Exits 77 without a usable device.
//
//   ckpt-gpu-bench [--gib N] [--reps R] [--dir DIR] [--seed S] [--keep]
// --keep leaves the verified file in DIR and prints "file: PATH" (the script times ckpt-verify on it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/core/hash.hpp>
#include <ckpt/shard/verify.hpp>

#include "../../cuda/gpu_checkpoint.cuh"
#include "gpu_test_util.hpp"

using namespace ckpt;
using gpu_test::cpu_digests;

namespace {

#define BENCH_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t bench_err_ = (call);                                                     \
    if (bench_err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "ckpt-gpu-bench: %s: %s\n", #call, cudaGetErrorString(bench_err_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

void or_die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "ckpt-gpu-bench: %s: %s\n", what, s.to_string().c_str());
  std::exit(2);
}

// splitmix64 of the word index: fresh random bytes at memory speed.
__global__ void fill_random(std::uint64_t* words, std::size_t n, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    words[i] = z ^ (z >> 31);
  }
}

// Streams every byte once with 16-byte loads: what a read-only kernel can get from HBM.
__global__ void xor_reduce(const ulonglong2* data, std::size_t n, unsigned long long* sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long acc = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const ulonglong2 v = __ldg(data + i);
    acc ^= v.x ^ v.y;
  }
  if (acc == 0x0123456789ABCDEFull) atomicAdd(sink, 1ull);  // keeps the loads
}

// Median and best of `reps` timed runs (after one warm-up), in milliseconds of device time.
struct Timing {
  double median_ms = 0, best_ms = 0;
};
Timing time_device(cudaStream_t stream, int reps, const std::function<void()>& body) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  body();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    body();
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return Timing{ms[ms.size() / 2], ms.front()};
}

double seconds_of(const std::function<void()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  std::string name;
  double gbps;
  std::string note;
};
std::vector<Row> rows;
double copy_gbps = 0;

void row(const std::string& name, double bytes, double seconds, const std::string& note) {
  rows.push_back(Row{name, bytes / seconds / 1e9, note});
  std::printf("  %-52s %9.1f GB/s  %s\n", name.c_str(), bytes / seconds / 1e9, note.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t gib = 4;
  int reps = 5;
  std::string dir = "/tmp";
  std::uint64_t seed = std::random_device{}();
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--gib" && v) gib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && v) reps = std::atoi(argv[++i]);
    else if (a == "--dir" && v) dir = argv[++i];
    else if (a == "--seed" && v) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: ckpt-gpu-bench [--gib N] [--reps R] [--dir DIR] [--seed S] [--keep]\n");
      return 2;
    }
  }
  if (gib == 0 || reps < 1) return 2;
  std::string reason;
  if (!gpu::device_usable(0, reason)) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", reason.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  const std::size_t bytes = static_cast<std::size_t>(gib) << 30;
  const unsigned cpu_threads = std::max(1u, std::thread::hardware_concurrency());
  std::printf("ckpt-gpu-bench: %s, %d multiprocessors, %llu GiB of random data (seed %llu), %d timed runs, %u CPU threads\n",
              prop.name, prop.multiProcessorCount, static_cast<unsigned long long>(gib), static_cast<unsigned long long>(seed), reps,
              cpu_threads);

  unsigned char *src = nullptr, *dst = nullptr;
  unsigned long long* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&src, bytes));
  BENCH_CUDA(cudaMalloc(&dst, bytes));
  BENCH_CUDA(cudaMalloc(&sink, sizeof *sink));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  fill_random<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(reinterpret_cast<std::uint64_t*>(src), bytes / 8, seed);
  BENCH_CUDA(cudaGetLastError());
  std::vector<unsigned char> host(bytes);
  BENCH_CUDA(cudaMemcpyAsync(host.data(), src, bytes, cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // The machine's limits, this run.
  const Timing copy = time_device(stream, reps, [&] { BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); });
  copy_gbps = 2.0 * bytes / (copy.best_ms / 1e3) / 1e9;
  row("device copy D2D (bytes read + written)", 2.0 * bytes, copy.best_ms / 1e3, "best; the reference");
  const Timing read = time_device(stream, reps, [&] {
    xor_reduce<<<prop.multiProcessorCount * 8, 512, 0, stream>>>(reinterpret_cast<const ulonglong2*>(src), bytes / 16, sink);
  });
  row("device read (xor-reduce kernel)", double(bytes), read.best_ms / 1e3, "best");

  // Hash layouts over the same bytes.
  struct Layout {
    std::string name;
    std::vector<gpu::DeviceChunk> table;
  };
  std::vector<Layout> layouts(3);
  layouts[0].name = "hash, 1 MiB chunks";
  for (std::size_t off = 0; off < bytes; off += std::size_t{1} << 20) layouts[0].table.push_back({src + off, std::size_t{1} << 20});
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<double> log_len(0.0, std::log(double(std::size_t{8} << 20)));
  for (int aligned = 1; aligned >= 0; --aligned) {
    Layout& l = layouts[aligned ? 1 : 2];
    l.name = aligned ? "hash, mixed 1 B-8 MiB, 256-B aligned" : "hash, mixed 1 B-8 MiB, any alignment";
    std::size_t at = 0;
    for (;;) {
      if (aligned) at = (at + 255) & ~std::size_t{255};
      const std::size_t len = static_cast<std::size_t>(std::exp(log_len(rng)));
      if (at + len > bytes) break;
      l.table.push_back({src + at, len});
      at += len;
    }
  }
  int wrong_total = 0;
  double hash_1mib_gbps = 0;
  for (const auto& l : layouts) {
    // Table, order and digests go up once; only the kernel is timed.
    const std::size_t n = l.table.size();
    const gpu::HashPlan plan = gpu::plan_hash(l.table.data(), n, static_cast<unsigned>(prop.multiProcessorCount));
    gpu::DeviceChunk* d_table = nullptr;
    std::uint32_t* d_order = nullptr;
    std::uint64_t* d_digests = nullptr;
    BENCH_CUDA(cudaMalloc(&d_table, n * sizeof(gpu::DeviceChunk)));
    BENCH_CUDA(cudaMalloc(&d_order, n * sizeof(std::uint32_t)));
    BENCH_CUDA(cudaMalloc(&d_digests, n * sizeof(std::uint64_t)));
    BENCH_CUDA(cudaMemcpy(d_table, l.table.data(), n * sizeof(gpu::DeviceChunk), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_order, plan.order.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
    gpu::HashLaunch launch;
    launch.chunks = d_table;
    launch.order = d_order;
    launch.long_count = plan.long_count;
    launch.count = static_cast<std::uint32_t>(n);
    launch.digests = d_digests;
    launch.threads = plan.threads;
    launch.blocks = plan.blocks;
    launch.shared_bytes = gpu::launch_shared_bytes(plan.threads);
    BENCH_CUDA(gpu::launch_hash(launch, stream));
    std::vector<std::uint64_t> digests(n);
    BENCH_CUDA(cudaMemcpyAsync(digests.data(), d_digests, n * 8, cudaMemcpyDeviceToHost, stream));
    BENCH_CUDA(cudaStreamSynchronize(stream));
    std::uint64_t hashed = 0;
    for (const auto& c : l.table) hashed += c.length;
    std::vector<std::uint64_t> cpu;
    const double cpu_s = seconds_of([&] { cpu = cpu_digests(host, src, l.table, cpu_threads); });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += digests[i] != cpu[i] ? 1 : 0;
    wrong_total += static_cast<int>(wrong);
    const Timing t = time_device(stream, reps, [&] { BENCH_CUDA(gpu::launch_hash(launch, stream)); });
    const double gbps = hashed / (t.best_ms / 1e3) / 1e9;
    if (&l == &layouts[0]) hash_1mib_gbps = gbps;
    char note[200];
    std::snprintf(note, sizeof note, "%.2fx copy; %zu chunks (%u long, %u threads each), %zu wrong vs CPU; median %.1f", gbps / copy_gbps, n,
                  plan.long_count, plan.threads, wrong, hashed / (t.median_ms / 1e3) / 1e9);
    row(l.name, double(hashed), t.best_ms / 1e3, note);
    if (&l == &layouts[0]) row("CPU XXH3, 1 MiB chunks (reference)", double(hashed), cpu_s, std::to_string(cpu_threads) + " threads, one run");
    cudaFree(d_table);
    cudaFree(d_order);
    cudaFree(d_digests);
  }

  // End to end through files in page cache: verify, save from device, load to device.
  const std::string file = dir + "/ckpt-gpu-bench-" + std::to_string(seed) + ".ckpt";
  const std::string saved = dir + "/ckpt-gpu-bench-saved-" + std::to_string(seed) + ".ckpt";
  const std::size_t tensor_bytes = std::min<std::size_t>(bytes, std::size_t{256} << 20);
  const std::size_t tensors = bytes / tensor_bytes;
  PosixFs fs;
  {
    WriterOptions o;
    o.durable = false;
    auto w = ShardWriter::create(fs, file, o);
    or_die(w.status(), "create");
    for (std::size_t t = 0; t < tensors; ++t)
      or_die(w->add_tensor("t" + std::to_string(t), DType::U8, {tensor_bytes}, host.data() + t * tensor_bytes, tensor_bytes), "add_tensor");
    or_die(w->finish().status(), "finish");
  }
  VerifyOptions cpu_options;
  cpu_options.threads = cpu_threads;
  Result<VerifyReport> cpu_report = make_error(Code::io, "not run");
  const double cpu_verify_s = seconds_of([&] { cpu_report = verify_file(fs, file, cpu_options); });
  or_die(cpu_report.status(), "verify_file");
  Result<VerifyReport> gpu_report = make_error(Code::io, "not run");
  const double gpu_verify_s = seconds_of([&] { gpu_report = gpu::verify_file(file); });
  or_die(gpu_report.status(), "gpu::verify_file");
  const bool reports_ok = cpu_report->ok() && gpu_report->ok() && gpu_report->chunks_checked == cpu_report->chunks_checked;
  wrong_total += reports_ok ? 0 : 1;
  row("verify file on CPU (page cache)", double(tensors * tensor_bytes), cpu_verify_s, std::to_string(cpu_threads) + " threads");
  row("verify file on GPU (page cache)", double(tensors * tensor_bytes), gpu_verify_s,
      std::string(reports_ok ? "same verdict as CPU" : "VERDICTS DIFFER") + ", 64 MiB pinned blocks");

  std::vector<gpu::DeviceTensor> device_tensors;
  std::vector<gpu::DeviceTarget> targets;
  for (std::size_t t = 0; t < tensors; ++t) {
    device_tensors.push_back({"t" + std::to_string(t), DType::U8, {tensor_bytes}, {}, {}, src + t * tensor_bytes});
    targets.push_back({"t" + std::to_string(t), dst + t * tensor_bytes, tensor_bytes});
  }
  WriterOptions wo;
  wo.durable = false;
  Result<ShardSummary> summary = make_error(Code::io, "not run");
  const double save_s = seconds_of([&] { summary = gpu::save_from_device(saved, device_tensors, wo); });
  or_die(summary.status(), "save_from_device");
  row("save from device (device digests = written)", double(tensors * tensor_bytes), save_s, "durable=false: page cache");
  BENCH_CUDA(cudaMemsetAsync(dst, 0, bytes, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  Status loaded;
  const double load_s = seconds_of([&] { loaded = gpu::load_to_device(saved, targets); });
  or_die(loaded, "load_to_device");
  std::vector<gpu::DeviceChunk> whole_src = {{src, tensors * tensor_bytes}}, whole_dst = {{dst, tensors * tensor_bytes}};
  auto d_src = gpu::hash_chunks(whole_src, stream), d_dst = gpu::hash_chunks(whole_dst, stream);
  or_die(d_src.status(), "hash src");
  or_die(d_dst.status(), "hash dst");
  const bool same = (*d_src)[0] == (*d_dst)[0];
  wrong_total += same ? 0 : 1;
  row("load to device (verified on device)", double(tensors * tensor_bytes), load_s, same ? "bytes equal the saved tensors" : "BYTES DIFFER");
  if (keep) std::printf("file: %s\n", file.c_str());
  else std::remove(file.c_str());
  std::remove(saved.c_str());

  std::printf("\n| measurement | GB/s | note |\n| --- | ---: | --- |\n");
  for (const auto& r : rows) std::printf("| %s | %.1f | %s |\n", r.name.c_str(), r.gbps, r.note.c_str());
  const double ratio = hash_1mib_gbps / copy_gbps;
  std::printf("\nhash of 1 MiB chunks / device copy = %.2f (target >= 0.70): %s\n", ratio, ratio >= 0.70 ? "met" : "NOT met");
  std::printf("correctness: %s\n", wrong_total == 0 ? "every digest and verdict matched the CPU" : "MISMATCHES (see above)");
  cudaFree(src);
  cudaFree(dst);
  cudaFree(sink);
  return wrong_total == 0 ? 0 : 1;
}
