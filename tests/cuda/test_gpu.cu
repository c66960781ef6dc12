// GPU tests for cuda/*.cuh (spec/GPU.md 9): the device digest against the CPU hash (libxxhash, through
// ckpt/core/hash.hpp) on fresh random data (seed printed; CKPT_GPU_SEED=n repeats a run), every grid shape,
// mismatch lists, hashed saves, verified loads and the GPU verify against the CPU verify on damaged
// files. Exits 77 (CTest: SKIPPED) when no usable CUDA device is present; 1 on any failure.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <ckpt/core/hash.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "../../cuda/gpu_checkpoint.cuh"
#include "gpu_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

int failures = 0, checks = 0;

#define GPU_EXPECT(cond, ...)                                                        \
  do {                                                                               \
    ++checks;                                                                        \
    if (!(cond)) {                                                                   \
      ++failures;                                                                    \
      std::fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);        \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
    }                                                                                \
  } while (0)
#define GPU_OK(expr)                                                                              \
  do {                                                                                            \
    const ::ckpt::Status gpu_ok_status_ = (expr);                                                 \
    GPU_EXPECT(gpu_ok_status_.ok(), "%s", gpu_ok_status_.to_string().c_str());                    \
    if (!gpu_ok_status_.ok()) return;                                                             \
  } while (0)

// Device memory for a test; aborts the whole program when the device refuses (nothing else is meaningful).
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t n) : size_(n) {
    if (cudaMalloc(&data_, n == 0 ? 1 : n) != cudaSuccess) {
      std::fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
      std::exit(1);
    }
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(data_); }
  void upload(const std::vector<unsigned char>& bytes) { cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice); }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> out(size_);
    cudaMemcpy(out.data(), data_, size_, cudaMemcpyDeviceToHost);
    return out;
  }
  unsigned char* get() const { return static_cast<unsigned char*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_;
};

// The CPU's digests of a table, on up to 16 threads.
std::vector<std::uint64_t> cpu_digests(const std::vector<unsigned char>& host, const unsigned char* device_base,
                                       const std::vector<gpu::DeviceChunk>& table) {
  return gpu_test::cpu_digests(host, device_base, table, std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
}

void check_table(const char* what, const std::vector<unsigned char>& host, const DeviceBytes& device,
                 const std::vector<gpu::DeviceChunk>& table) {
  auto digests = gpu::hash_chunks(table);
  GPU_OK(digests.status());
  const auto want = cpu_digests(host, device.get(), table);
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < table.size(); ++i)
    if ((*digests)[i] != want[i] && wrong++ == 0) first = i;
  GPU_EXPECT(wrong == 0, "%s: %zu of %zu digests differ from the CPU, first chunk %zu (length %llu, address %% 16 = %llu)", what, wrong,
             table.size(), first, static_cast<unsigned long long>(table[first].length),
             static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(table[first].data) % 16));
}

void test_every_length(std::uint64_t seed) {
  const auto host = ckpt_test::random_bytes(4096 + 4096 + 64, seed);
  DeviceBytes device(host.size());
  device.upload(host);
  std::vector<gpu::DeviceChunk> table;
  for (std::size_t len = 0; len <= 4096; ++len) table.push_back({device.get() + (len * 7) % 61, len});
  check_table("lengths 0..4096", host, device, table);
  table.clear();
  for (std::size_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 1088, 4096})
    for (std::size_t align = 0; align < 16; ++align) table.push_back({device.get() + align, len});
  check_table("boundary lengths at 16 alignments", host, device, table);
}

void test_grid_shapes(std::uint64_t seed) {
  // Chunk counts and sizes that make the planner pick 1, 2, 4 and 8 warps per long chunk.
  const std::size_t bytes = std::size_t{96} << 20;
  const auto host = ckpt_test::random_bytes(bytes, seed + 1);
  DeviceBytes device(bytes);
  device.upload(host);
  int multiprocessors = 0;
  cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0);
  std::set<unsigned> shapes;
  std::mt19937_64 rng(seed + 2);
  // With equal lengths the planner gives 8, 4, 2 and 1 warps to about S, 9S, 18S and 32S chunks (S:
  // multiprocessors; spec/GPU.md 4); the set of sizes actually planned is checked below.
  const std::size_t sms = static_cast<std::size_t>(std::max(multiprocessors, 1));
  for (std::size_t count : {std::size_t{1}, sms, 9 * sms, 18 * sms, 32 * sms}) {
    const std::uint64_t len = std::min<std::uint64_t>(bytes / count - 64, std::uint64_t{8} << 20);
    std::vector<gpu::DeviceChunk> table;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t jitter = rng() % 2 == 0 ? 0 : rng() % 1024;
      table.push_back({device.get() + i * (bytes / count) + rng() % 64, len - jitter});
    }
    shapes.insert(gpu::plan_hash(table.data(), table.size(), static_cast<unsigned>(multiprocessors)).threads);
    char what[96];
    std::snprintf(what, sizeof what, "%zu chunks of about %llu bytes", count, static_cast<unsigned long long>(len));
    check_table(what, host, device, table);
  }
  GPU_EXPECT(shapes.size() == 4, "thread block sizes covered: %zu of 4", shapes.size());
}

void test_mixed_table(std::uint64_t seed) {
  const std::size_t bytes = std::size_t{256} << 20;
  const auto host = ckpt_test::random_bytes(bytes, seed + 3);
  DeviceBytes device(bytes);
  device.upload(host);
  std::mt19937_64 rng(seed + 4);
  std::vector<gpu::DeviceChunk> table;
  for (int i = 0; i < 100000; ++i) {
    const int kind = static_cast<int>(rng() % 5);
    const std::uint64_t len = kind == 0 ? rng() % 241 : kind == 1 ? rng() % 4096 : kind == 2 ? rng() % 65536
                            : kind == 3 ? rng() % (std::uint64_t{1} << 20) : rng() % 16;
    table.push_back({device.get() + rng() % (bytes - len + 1), len});
  }
  check_table("100000 mixed chunks at random addresses", host, device, table);

  // The same table through verify_chunks: exactly the chunks given a wrong expected digest come back.
  auto want = cpu_digests(host, device.get(), table);
  std::vector<std::size_t> flipped;
  for (std::size_t i = 5; i < table.size(); i += 9973) {
    want[i] ^= std::uint64_t{1} << (i % 64);
    flipped.push_back(i);
  }
  auto mismatches = gpu::verify_chunks(table, want);
  GPU_OK(mismatches.status());
  std::vector<std::size_t> got;
  for (const auto& m : *mismatches) got.push_back(m.index);
  GPU_EXPECT(got == flipped, "verify_chunks listed %zu mismatches, %zu planted", got.size(), flipped.size());
}

using ProblemKey = std::tuple<std::uint64_t, std::string, std::string, std::int64_t, std::int64_t, std::string, std::string, std::string>;
std::vector<ProblemKey> keys(const VerifyReport& r) {
  std::vector<ProblemKey> out;
  for (const auto& p : r.problems) out.emplace_back(p.offset, p.region, p.tensor, p.piece, p.chunk, p.expected, p.found, p.message);
  std::sort(out.begin(), out.end());
  return out;
}

void test_save_load_verify(std::uint64_t seed) {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto a = ckpt_test::random_bytes((std::size_t{40} << 20) + 4096 * 3 + 17, seed + 5);
  const auto b = ckpt_test::random_bytes(64 * 1000 * 2, seed + 6);
  DeviceBytes da(a.size()), db(b.size());
  da.upload(a);
  db.upload(b);
  const std::string path = dir.file("gpu.ckpt");
  WriterOptions wo;
  wo.durable = false;
  gpu::DeviceIoOptions io;
  io.staging_bytes = std::size_t{16} << 20;  // several slices per tensor
  std::vector<gpu::DeviceTensor> tensors = {
      {"a", DType::U8, {a.size()}, {}, {}, da.get()},
      {"b", DType::BF16, {64, 1000}, {0, 0}, {40, 1000}, db.get()},
      {"b", DType::BF16, {64, 1000}, {40, 0}, {24, 1000}, db.get() + 40 * 2000},
  };
  auto summary = gpu::save_from_device(path, tensors, wo, io);
  GPU_OK(summary.status());
  auto cpu = verify_file(fs, path);
  GPU_OK(cpu.status());
  GPU_EXPECT(cpu->ok(), "a file saved from the device fails the CPU verifier: %zu problems", cpu->problems.size());
  {
    auto reader = ShardReader::open(fs, path);
    GPU_OK(reader.status());
    std::vector<unsigned char> back(a.size());
    GPU_OK(reader->read_tensor("a", back.data(), back.size()));
    GPU_EXPECT(back == a, "tensor a read back on the CPU differs");
  }
  DeviceBytes la(a.size()), lb(b.size());
  cudaMemset(la.get(), 0, la.size());
  GPU_OK(gpu::load_to_device(path, {{"a", la.get(), a.size()}, {"b", lb.get(), b.size()}}, io));
  GPU_EXPECT(la.download() == a, "tensor a loaded to the device differs");
  GPU_EXPECT(lb.download() == b, "tensor b loaded to the device differs");
  auto on_device = gpu::verify_file(path);
  GPU_OK(on_device.status());
  GPU_EXPECT(on_device->ok() && on_device->chunks_checked == cpu->chunks_checked && on_device->bytes_checked == cpu->bytes_checked,
             "GPU verify of an intact file: %zu problems, %llu chunks", on_device->problems.size(),
             static_cast<unsigned long long>(on_device->chunks_checked));

  // Damage table: the GPU verify must report what the CPU verify reports; a load must refuse.
  const std::string pristine = ckpt_test::read_file(path);
  std::uint64_t index_offset = 0;
  {
    auto reader = ShardReader::open(fs, path);
    GPU_OK(reader.status());
    index_offset = reader->footer().index_offset;
  }
  struct Damage {
    const char* name;
    void (*apply)(std::string&, std::uint64_t);
  };
  const Damage damages[] = {
      {"one data byte", [](std::string& f, std::uint64_t) { f[4096 + (std::size_t{21} << 20) + 5] ^= 0x01; }},
      {"a byte in each of 40 chunks", [](std::string& f, std::uint64_t) { for (int c = 0; c < 40; ++c) f[4096 + (std::size_t(c) << 20) + 77] ^= 0x40; }},
      {"padding after tensor a", [](std::string& f, std::uint64_t) { f[4096 + (std::size_t{40} << 20) + 4096 * 3 + 17 + 100] = 0x01; }},
      {"index byte", [](std::string& f, std::uint64_t index) { f[index + 100] ^= 0x01; }},
      {"truncated", [](std::string& f, std::uint64_t) { f.resize(f.size() / 2); }},
  };
  for (const auto& damage : damages) {
    std::string bytes = pristine;
    damage.apply(bytes, index_offset);
    ckpt_test::write_file(path, bytes);
    auto cpu_report = verify_file(fs, path);
    GPU_OK(cpu_report.status());
    auto gpu_report = gpu::verify_file(path, io);
    GPU_OK(gpu_report.status());
    GPU_EXPECT(keys(*gpu_report) == keys(*cpu_report) && gpu_report->chunks_checked == cpu_report->chunks_checked,
               "%s: GPU verify reports %zu problems, CPU %zu", damage.name, gpu_report->problems.size(), cpu_report->problems.size());
    GPU_EXPECT(!cpu_report->ok(), "%s: the damage went unnoticed", damage.name);
    const Status load = gpu::load_to_device(path, {{"a", la.get(), a.size()}}, io);
    GPU_EXPECT(!load.ok() || std::string(damage.name) == "padding after tensor a", "%s: load succeeded", damage.name);
  }
}

void test_errors_carry_cuda_text() {
  std::string reason;
  GPU_EXPECT(!gpu::device_usable(9999, reason) && reason.find("does not exist") != std::string::npos, "device 9999: %s", reason.c_str());
  // Last: an illegal address poisons the context for every later call.
  const std::vector<gpu::DeviceChunk> table = {{reinterpret_cast<const unsigned char*>(std::uintptr_t{16}), 4096}};
  auto digests = gpu::hash_chunks(table);
  GPU_EXPECT(!digests.ok() && digests.status().code() == Code::io && digests.status().message().find("CUDA") != std::string::npos &&
                 digests.status().message().find("cudaError") != std::string::npos,
             "hashing an unmapped address: %s", digests.ok() ? "succeeded" : digests.status().to_string().c_str());
}

}  // namespace

int main() {
  std::string reason;
  if (!gpu::device_usable(0, reason)) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", reason.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const char* env = std::getenv("CKPT_GPU_SEED");
  const std::uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  std::printf("device: %s (sm_%d%d, %d multiprocessors); seed %llu (CKPT_GPU_SEED=%llu repeats this run)\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  test_every_length(seed);
  test_grid_shapes(seed);
  test_mixed_table(seed);
  test_save_load_verify(seed);
  test_errors_carry_cuda_text();
  std::printf("%s: %d checks, %d failed\n", failures == 0 ? "PASSED" : "FAILED", checks, failures);
  return failures == 0 ? 0 : 1;
}
