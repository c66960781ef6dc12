// Tests for cuda/device_pipeline.cuh on cuda/host_backend.cuh: the GPU save, load and verify paths,
// run on the host with lazily executed streams (spec/GPU.md 9). A staging buffer reused too early, a
// result read before its event, or a table left in host memory shows up here as a wrong digest or a
// backend error, without a GPU.
#include <catch2/catch.hpp>

#include <cstring>
#include <tuple>

#include <ckpt/core/hash.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "../cuda/device_pipeline.cuh"
#include "../cuda/host_backend.cuh"
#include "shard_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;
using gpu::HostBackend;

namespace {

// Bytes placed in the host backend's "device" memory (a test may write it directly: it is host memory).
unsigned char* device_copy(HostBackend& backend, const std::vector<unsigned char>& bytes) {
  void* p = nullptr;
  REQUIRE(backend.device_alloc(p, bytes.size()).ok());
  std::memcpy(p, bytes.data(), bytes.size());
  return static_cast<unsigned char*>(p);
}

// Frees device allocations (device_copy's, device_alloc's).
void device_free(HostBackend& backend, std::initializer_list<void*> allocations) {
  for (void* p : allocations) REQUIRE(backend.device_free(p).ok());
}

void require_clean(const HostBackend& backend, std::size_t allocations_before = 0) {
  CHECK(backend.live_allocations() == allocations_before);
  CHECK(backend.live_streams() == 0);
  CHECK(backend.live_events() == 0);
  CHECK(backend.pending() == 0);
}

// Three tensors, one split into two pieces along its first axis, one empty; 4 KiB chunks.
void write_sample(const std::string& path, std::uint64_t seed, std::uint32_t alignment_log2 = 12) {
  PosixFs fs;
  WriterOptions o;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = alignment_log2;
  o.durable = false;
  auto w = ShardWriter::create(fs, path, o);
  REQUIRE(w.ok());
  const auto a = ckpt_test::random_bytes(37 * 1000 * 4, seed);
  const auto b = ckpt_test::random_bytes(10 * 1000 * 2, seed + 1);
  REQUIRE(w->add_tensor("alpha", DType::F32, {37, 1000}, a.data(), a.size()).ok());
  ckpt_test::write_piece(*w, "beta", DType::BF16, {10, 1000}, {0, 0}, {6, 1000}, b.data(), 6 * 2000);
  REQUIRE(w->add_tensor("empty", DType::U8, {0}, nullptr, 0).ok());
  ckpt_test::write_piece(*w, "beta", DType::BF16, {10, 1000}, {6, 0}, {4, 1000}, b.data() + 6 * 2000, 4 * 2000);
  REQUIRE(w->set_metadata("step", Value(std::int64_t{7})).ok());
  REQUIRE(w->finish().ok());
}

using ProblemKey = std::tuple<std::uint64_t, std::string, std::string, std::int64_t, std::int64_t, std::uint64_t, std::string,
                              std::string, std::string, int>;
std::vector<ProblemKey> keys(const VerifyReport& r) {
  std::vector<ProblemKey> out;
  for (const auto& p : r.problems)
    out.emplace_back(p.offset, p.region, p.tensor, p.piece, p.chunk, p.length, p.expected, p.found, p.message, static_cast<int>(p.code));
  std::sort(out.begin(), out.end());
  return out;
}

void require_same_report(const VerifyReport& gpu_report, const VerifyReport& cpu_report) {
  CHECK(gpu_report.path == cpu_report.path);
  CHECK(gpu_report.file_size == cpu_report.file_size);
  CHECK(gpu_report.chunks_total == cpu_report.chunks_total);
  CHECK(gpu_report.chunks_checked == cpu_report.chunks_checked);
  CHECK(gpu_report.bytes_checked == cpu_report.bytes_checked);
  CHECK(keys(gpu_report) == keys(cpu_report));
}

}  // namespace

TEST_CASE("chunk digests from the host backend equal the CPU hash for every table shape", "[cuda_device_pipeline]") {
  for (unsigned multiprocessors : {1u, 132u}) {
    HostBackend backend(multiprocessors);
    const auto bytes = ckpt_test::random_bytes(300000, 11);
    unsigned char* device = device_copy(backend, bytes);
    std::vector<gpu::DeviceChunk> table;
    std::vector<std::uint64_t> want;
    std::mt19937_64 rng(12);
    for (int i = 0; i < 500; ++i) {
      const std::uint64_t len = i % 3 == 0 ? rng() % 241 : rng() % 20000;
      const std::uint64_t at = rng() % (bytes.size() - len + 1);
      table.push_back({device + at, len});
      want.push_back(xxh3_64(bytes.data() + at, static_cast<std::size_t>(len)));
    }
    auto digests = gpu::hash_chunks(backend, table.data(), table.size(), 0);
    REQUIRE(digests.ok());
    CHECK(*digests == want);
    auto expected = want;
    expected[3] ^= 1;
    expected[499] = 0;
    auto mismatches = gpu::verify_chunks(backend, table.data(), expected.data(), table.size(), 0);
    REQUIRE(mismatches.ok());
    REQUIRE(mismatches->size() == 2);
    CHECK((*mismatches)[0].index == 3);
    CHECK((*mismatches)[0].found == want[3]);
    CHECK((*mismatches)[1].index == 499);
    CHECK((*mismatches)[1].expected == 0);
    REQUIRE(backend.device_free(device).ok());
    require_clean(backend);
  }
}

TEST_CASE("the host backend runs a copy late, so reusing its source early is caught", "[cuda_device_pipeline]") {
  HostBackend backend;
  void *pinned = nullptr, *device = nullptr;
  REQUIRE(backend.pinned_alloc(pinned, 16).ok());
  REQUIRE(backend.device_alloc(device, 16).ok());
  HostBackend::Stream s;
  HostBackend::Event e;
  REQUIRE(backend.new_stream(s).ok());
  REQUIRE(backend.new_event(e).ok());
  std::memset(pinned, 1, 16);
  REQUIRE(backend.copy_to_device(device, pinned, 16, s).ok());
  REQUIRE(backend.record(e, s).ok());
  std::memset(pinned, 2, 16);  // too early: the copy has not run
  REQUIRE(backend.sync_event(e).ok());
  CHECK(static_cast<unsigned char*>(device)[0] == 2);
  // Host memory that is not pinned, and a table outside device memory, are refused.
  std::vector<unsigned char> pageable(16);
  CHECK(backend.copy_to_device(device, pageable.data(), 16, s).code() == Code::invalid_argument);
  CHECK(backend.copy_to_host(pageable.data(), device, 16, s).code() == Code::invalid_argument);
  gpu::HashLaunch launch;
  launch.blocks = 1;
  launch.count = 1;
  launch.chunks = reinterpret_cast<const gpu::DeviceChunk*>(pageable.data());
  CHECK(backend.launch_hash(launch, s).code() == Code::invalid_argument);
  REQUIRE(backend.delete_event(e).ok());
  REQUIRE(backend.delete_stream(s).ok());
  REQUIRE(backend.pinned_free(pinned).ok());
  REQUIRE(backend.device_free(device).ok());
  require_clean(backend);
}

TEST_CASE("a chunk that is not in device memory fails the batch like a device fault", "[cuda_device_pipeline]") {
  HostBackend backend;
  std::vector<unsigned char> host(100, 7);
  const gpu::DeviceChunk table[] = {{host.data(), host.size()}};
  auto digests = gpu::hash_chunks(backend, table, 1, 0);
  REQUIRE_FALSE(digests.ok());
  CHECK(digests.status().code() == Code::io);
  CHECK(digests.status().message().find("chunk 0 is not in device memory") != std::string::npos);
}

TEST_CASE("verify on the device reports what the CPU verifier reports", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("s.ckpt");
  write_sample(path, 21);
  const std::string pristine = ckpt_test::read_file(path);
  PosixFs fs;
  auto intact = verify_file(fs, path);
  REQUIRE(intact.ok());
  REQUIRE(intact->ok());
  auto reader = ShardReader::open(fs, path);
  REQUIRE(reader.ok());
  const Index index = reader->index();
  const std::uint64_t index_offset = reader->footer().index_offset;
  reader = make_error(Code::ok, "");  // close the file before it is rewritten
  const auto& alpha_piece = index.pieces[index.tensors[0].piece_first];
  const auto& beta_piece1 = index.pieces[index.tensors[1].piece_first + 1];

  struct Damage {
    const char* name;
    std::function<void(std::string&)> apply;
  };
  const std::vector<Damage> table = {
      {"intact", [](std::string&) {}},
      {"one data byte", [&](std::string& f) { f[alpha_piece.data_offset + 5000] ^= 0x01; }},
      {"first and last chunk of a piece",
       [&](std::string& f) {
         f[beta_piece1.data_offset] ^= 0x80;
         f[beta_piece1.data_offset + beta_piece1.data_length - 1] ^= 0x80;
       }},
      {"every chunk of a tensor",
       [&](std::string& f) {
         for (std::uint64_t off = alpha_piece.data_offset; off < alpha_piece.data_offset + alpha_piece.data_length; off += 4096) f[off] ^= 0x55;
       }},
      {"padding byte after the superblock", [](std::string& f) { f[300] = 0x01; }},
      {"padding byte between pieces", [&](std::string& f) { f[alpha_piece.data_offset + alpha_piece.data_length + 7] = 0x7F; }},
      {"last data byte before the index", [&](std::string& f) { f[index_offset - 1] ^= 0x7F; }},
      {"index byte (CPU path names it)", [&](std::string& f) { f[index_offset + 70] ^= 0x01; }},
      {"superblock byte", [](std::string& f) { f[60] ^= 0x01; }},
      {"truncated by one byte", [](std::string& f) { f.pop_back(); }},
      {"truncated into the data", [&](std::string& f) { f.resize(alpha_piece.data_offset + 10000); }},
      {"garbage appended", [](std::string& f) { f += std::string(100, 'x'); }},
  };
  for (const auto& damage : table) {
    for (std::size_t staging : {std::size_t{4096}, std::size_t{20000}, std::size_t{1} << 20}) {
      INFO(damage.name << ", staging " << staging);
      std::string bytes = pristine;
      damage.apply(bytes);
      ckpt_test::write_file(path, bytes);
      auto cpu = verify_file(fs, path);
      REQUIRE(cpu.ok());
      HostBackend backend;
      backend.eager_copies_to_host = staging == 20000;
      gpu::DeviceIoOptions options;
      options.staging_bytes = staging;
      std::uint64_t last_done = 0, last_total = 0;
      options.progress = [&](std::uint64_t done, std::uint64_t total) {
        CHECK(done >= last_done);
        last_done = done;
        last_total = total;
      };
      auto on_device = gpu::verify_file_on_device(backend, fs, path, options);
      REQUIRE(on_device.ok());
      require_same_report(*on_device, *cpu);
      if (std::string(damage.name) == "intact" || std::string(damage.name).rfind("one data", 0) == 0 ||
          std::string(damage.name).rfind("every chunk", 0) == 0) {
        CHECK(last_done == last_total);
        CHECK(backend.launches() > 0);
        if (staging == 4096) CHECK(backend.most_pending() >= 4);  // later blocks were queued before earlier ones ran
      }
      require_clean(backend);
    }
  }
}

TEST_CASE("verify on the device reads large blocks with several threads", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("big.ckpt");
  PosixFs fs;
  {
    WriterOptions o;
    o.durable = false;
    auto w = ShardWriter::create(fs, path, o);
    REQUIRE(w.ok());
    const auto data = ckpt_test::random_bytes((std::size_t{20} << 20) + 12345, 31);
    REQUIRE(w->add_tensor("big", DType::U8, {data.size()}, data.data(), data.size()).ok());
    REQUIRE(w->finish().ok());
  }
  std::string bytes = ckpt_test::read_file(path);
  bytes[4096 + (std::size_t{17} << 20) + 3] ^= 0x04;  // chunk 17, in the third 8 MiB read part
  ckpt_test::write_file(path, bytes);
  HostBackend backend;
  gpu::DeviceIoOptions options;
  options.io_threads = 4;
  auto on_device = gpu::verify_file_on_device(backend, fs, path, options);
  REQUIRE(on_device.ok());
  auto cpu = verify_file(fs, path);
  REQUIRE(cpu.ok());
  require_same_report(*on_device, *cpu);
  REQUIRE(on_device->problems.size() == 1);
  CHECK(on_device->problems[0].chunk == 17);
}

TEST_CASE("a file that does not exist is an error, not a report", "[cuda_device_pipeline]") {
  HostBackend backend;
  PosixFs fs;
  auto r = gpu::verify_file_on_device(backend, fs, "/nonexistent/dir/x.ckpt");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::not_found);
}

TEST_CASE("tensors saved from device memory read back bit for bit and carry their digests", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  HostBackend backend;
  backend.eager_copies_to_host = GENERATE(false, true);
  const auto a = ckpt_test::random_bytes(3 * 7001 * 4, 41);
  const auto b = ckpt_test::random_bytes(8 * 512 * 2, 42);
  unsigned char* da = device_copy(backend, a);
  unsigned char* db = device_copy(backend, b);
  std::vector<gpu::DeviceTensor> tensors;
  tensors.push_back({"a", DType::F32, {3, 7001}, {}, {}, da});
  tensors.push_back({"b", DType::F16, {8, 512}, {0, 0}, {5, 512}, db});
  tensors.push_back({"b", DType::F16, {8, 512}, {5, 0}, {3, 512}, db + 5 * 1024});
  tensors.push_back({"nothing", DType::I64, {0, 4}, {}, {}, nullptr});
  for (std::size_t staging : {std::size_t{4096}, std::size_t{10000}, std::size_t{64} << 20}) {
    INFO("staging " << staging);
    const std::string path = dir.file("save-" + std::to_string(staging) + (backend.eager_copies_to_host ? "-eager" : "") + ".ckpt");
    WriterOptions wo;
    wo.chunk_size_log2 = 12;
    wo.durable = false;
    gpu::DeviceIoOptions io;
    io.staging_bytes = staging;
    auto summary = gpu::save_from_device(backend, fs, path, tensors, wo, io, {MetaEntry{"step", Value(std::int64_t{3})}});
    REQUIRE(summary.ok());
    CHECK(summary->tensor_count == 3);
    CHECK(summary->piece_count == 4);
    if (staging == 4096 && !backend.eager_copies_to_host) CHECK(backend.most_pending() >= 2);  // next copy queued before this write
    auto report = verify_file(fs, path);
    REQUIRE(report.ok());
    CHECK(report->ok());
    auto reader = ShardReader::open(fs, path);
    REQUIRE(reader.ok());
    std::vector<unsigned char> back_a(a.size()), back_b(b.size());
    REQUIRE(reader->read_tensor("a", back_a.data(), back_a.size()).ok());
    REQUIRE(reader->read_tensor("b", back_b.data(), back_b.size()).ok());
    CHECK(back_a == a);
    CHECK(back_b == b);
    REQUIRE(reader->index().find_metadata("step") != nullptr);
    require_clean(backend, 2);
  }
  device_free(backend, {da, db});
}

TEST_CASE("a save whose bytes change on the way to the host fails and leaves no file", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  HostBackend backend;
  const auto a = ckpt_test::random_bytes(50000, 51);
  unsigned char* da = device_copy(backend, a);
  int copies_to_host = 0;
  backend.on_copy = [&](unsigned char* dst, std::size_t n, bool to_device) {
    if (!to_device && n > 1000 && ++copies_to_host == 2) dst[n / 2] ^= 0x20;  // one bit, second staging slice
  };
  WriterOptions wo;
  wo.chunk_size_log2 = 12;
  wo.durable = false;
  gpu::DeviceIoOptions io;
  io.staging_bytes = 16384;
  const std::string path = dir.file("bad.ckpt");
  auto summary = gpu::save_from_device(backend, fs, path, {{"a", DType::U8, {a.size()}, {}, {}, da}}, wo, io);
  REQUIRE_FALSE(summary.ok());
  CHECK(summary.status().code() == Code::corrupt);
  CHECK(summary.status().message().find("tensor 'a' chunk 6 bytes [24576, 28672)") != std::string::npos);
  auto listing = fs.list_dir(dir.path());
  REQUIRE(listing.ok());
  CHECK(listing->empty());
  require_clean(backend, 1);
  REQUIRE(backend.device_free(da).ok());
}

TEST_CASE("bad save requests are refused before anything is written", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  HostBackend backend;
  auto no_data = gpu::save_from_device(backend, fs, dir.file("x.ckpt"), {{"a", DType::F32, {4}, {}, {}, nullptr}});
  CHECK(no_data.status().code() == Code::invalid_argument);
  auto bad_dtype = gpu::save_from_device(backend, fs, dir.file("y.ckpt"), {{"a", static_cast<DType>(99), {4}, {}, {}, nullptr}});
  CHECK(bad_dtype.status().code() == Code::invalid_argument);
  auto overflow = gpu::save_from_device(backend, fs, dir.file("z.ckpt"), {{"a", DType::F64, {1ull << 62, 8}, {}, {}, nullptr}});
  CHECK(overflow.status().code() == Code::invalid_argument);
  require_clean(backend);
}

TEST_CASE("tensors loaded into device memory are verified there", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("s.ckpt");
  write_sample(path, 61);
  const auto alpha = ckpt_test::random_bytes(37 * 1000 * 4, 61);
  const auto beta = ckpt_test::random_bytes(10 * 1000 * 2, 62);
  HostBackend backend;
  void *da = nullptr, *db = nullptr;
  REQUIRE(backend.device_alloc(da, alpha.size()).ok());
  REQUIRE(backend.device_alloc(db, beta.size()).ok());
  const std::vector<gpu::DeviceTarget> targets = {{"beta", db, beta.size()}, {"alpha", da, alpha.size()}, {"empty", nullptr, 0}};
  backend.eager_copies_to_host = GENERATE(false, true);

  SECTION("intact, through small and large staging buffers") {
    for (std::size_t staging : {std::size_t{4096}, std::size_t{9000}, std::size_t{64} << 20}) {
      std::memset(da, 0, alpha.size());
      std::memset(db, 0, beta.size());
      gpu::DeviceIoOptions io;
      io.staging_bytes = staging;
      REQUIRE(gpu::load_to_device(backend, fs, path, targets, io).ok());
      CHECK(std::memcmp(da, alpha.data(), alpha.size()) == 0);
      CHECK(std::memcmp(db, beta.data(), beta.size()) == 0);
    }
  }
  SECTION("a damaged chunk in the file is named") {
    auto reader = ShardReader::open(fs, path);
    REQUIRE(reader.ok());
    const auto& p = reader->index().pieces[reader->index().tensors[1].piece_first + 1];
    const std::uint64_t at = p.data_offset + 4096 + 10;
    reader = make_error(Code::ok, "");
    std::string bytes = ckpt_test::read_file(path);
    bytes[at] ^= 0x02;
    ckpt_test::write_file(path, bytes);
    Status s = gpu::load_to_device(backend, fs, path, targets);
    CHECK(s.code() == Code::corrupt);
    CHECK(s.message().find("tensor 'beta' piece 1 chunk 1 bytes [") != std::string::npos);
    CHECK(s.message().find("in device memory") != std::string::npos);
  }
  SECTION("bytes damaged on the way to the device are caught there") {
    int copies = 0;
    backend.on_copy = [&](unsigned char* dst, std::size_t n, bool to_device) {
      if (to_device && n > 1000 && ++copies == 3) dst[n - 1] ^= 0x01;
    };
    gpu::DeviceIoOptions io;
    io.staging_bytes = 8192;
    Status s = gpu::load_to_device(backend, fs, path, targets, io);
    CHECK(s.code() == Code::corrupt);
  }
  SECTION("requests that cannot be served are refused") {
    CHECK(gpu::load_to_device(backend, fs, path, {{"nope", da, 4}}).code() == Code::not_found);
    CHECK(gpu::load_to_device(backend, fs, path, {{"alpha", da, alpha.size() - 4}}).code() == Code::invalid_argument);
    CHECK(gpu::load_to_device(backend, fs, dir.file("missing.ckpt"), targets).code() == Code::not_found);
  }
  require_clean(backend, 2);
  device_free(backend, {da, db});
}

TEST_CASE("a piece that is not contiguous in its tensor is refused, pieces that leave a gap too", "[cuda_device_pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("cols.ckpt");
  {
    WriterOptions o;
    o.durable = false;
    auto w = ShardWriter::create(fs, path, o);
    REQUIRE(w.ok());
    const std::vector<unsigned char> half(4 * 2, 1);
    ckpt_test::write_piece(*w, "m", DType::U8, {4, 4}, {0, 0}, {4, 2}, half.data(), half.size());     // left columns only
    ckpt_test::write_piece(*w, "rows", DType::U8, {4, 4}, {1, 0}, {2, 4}, half.data(), half.size());  // rows 1-2 of 4
    REQUIRE(w->finish().ok());
  }
  HostBackend backend;
  void* d = nullptr;
  REQUIRE(backend.device_alloc(d, 16).ok());
  CHECK(gpu::load_to_device(backend, fs, path, {{"m", d, 16}}).code() == Code::unsupported);
  CHECK(gpu::load_to_device(backend, fs, path, {{"rows", d, 16}}).code() == Code::not_found);
  REQUIRE(backend.device_free(d).ok());
  require_clean(backend);
}
