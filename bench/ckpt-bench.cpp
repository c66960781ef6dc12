// ckpt-bench: measures this machine's own limits (memory read, memcpy, raw XXH3-64, raw write+fsync,
// copy+fsync) and then ckpt's save, load, verify and safetensors conversion on the same random data,
// in one run, and reports every ckpt path as a ratio to the limit it should approach (DESIGN
// "How it is tested": benchmarks are ratios to the machine's own limits, measured in the same run).
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/shard/verify.hpp>

#if __has_include(<ckpt/interop/safetensors.hpp>)
#include <ckpt/interop/safetensors.hpp>
#define CKPT_BENCH_HAVE_SAFETENSORS 1
#else
#define CKPT_BENCH_HAVE_SAFETENSORS 0
#endif

#include "bench_util.hpp"
#include "cli.hpp"

namespace {

using namespace ckpt;
using namespace ckpt::bench;

constexpr const char* kTool = "ckpt-bench";

struct Config {
  std::uint64_t size = std::uint64_t{256} << 20;
  std::string dir = ".";
  std::string shm_dir;  // RAM-backed: the disk cannot hide the hash there; empty: not measured
  std::string shm_note;  // why shm_dir is empty
  std::vector<unsigned> threads;
  unsigned repeat = 3;
  std::uint64_t tensor_size = std::uint64_t{32} << 20;
  std::uint64_t write_size = std::uint64_t{1} << 20;
  bool json = false;
  std::string only;  // "async": only the disk group with the async rows (python -m ckpt.bench --cpp-bench)
};

struct Measurement {
  std::string id, label;
  unsigned threads = 1;
  std::uint64_t bytes = 0;        // bytes the throughput is counted over
  std::function<void()> before;   // untimed preparation before every run
  std::function<void()> body;     // the timed work
  std::vector<double> secs, cpu_secs;  // wall and process CPU seconds of each run
  Timing timing;
  double best_cpu_share = 0;  // CPU seconds / (wall seconds * threads) of the best run
  [[nodiscard]] double rate(double secs_taken) const { return static_cast<double>(bytes) / secs_taken; }
};
[[nodiscard]] Measurement measurement(std::string id, std::string label, unsigned threads, std::uint64_t bytes,
                                      std::function<void()> before, std::function<void()> body) {
  Measurement m;
  m.id = std::move(id);
  m.label = std::move(label);
  m.threads = threads;
  m.bytes = bytes;
  m.before = std::move(before);
  m.body = std::move(body);
  return m;
}

// A ckpt path set against a limit: a time ratio (lower is better) or a throughput ratio (higher is better).
struct Comparison {
  std::string measure, limit;
  bool time_ratio = false;
  std::optional<double> target;
  [[nodiscard]] bool meets(double ratio) const {
    return !target || (time_ratio ? ratio <= *target : ratio >= *target);
  }
};

// Runs each measurement of a group once per round, round after round, so that a burst of load from
// other processes hits all of them alike instead of one measurement's every repetition.
// CPU-bound groups (cpu_bound) then rerun, up to extra_rounds more times, each measurement none of
// whose runs had its cores to itself: on a shared machine the best run is then an uncontended one.
void run_rounds(const std::vector<Measurement*>& group, unsigned repeat, bool cpu_bound = false, unsigned extra_rounds = 0) {
  for (unsigned r = 0; r < repeat; ++r)
    for (Measurement* m : group) run_once(*m);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  auto uncontended = [&](const Measurement& m) {
    const double expected = double(std::min(m.threads, cores)) / m.threads;
    for (std::size_t i = 0; i < m.secs.size(); ++i)
      if (m.cpu_secs[i] >= 0.9 * expected * m.secs[i] * m.threads) return true;
    return false;
  };
  for (unsigned r = 0; cpu_bound && r < extra_rounds; ++r) {
    bool reran = false;
    for (Measurement* m : group)
      if (!uncontended(*m)) {
        run_once(*m);
        reran = true;
      }
    if (!reran) break;
  }
  for (Measurement* m : group) {
    m->timing = summarize(m->secs);
    const auto best = std::min_element(m->secs.begin(), m->secs.end()) - m->secs.begin();
    m->best_cpu_share = m->cpu_secs[best] / (m->secs[best] * m->threads);
  }
}

// Writes the data as a safetensors file (8-byte little-endian header length, JSON header padded
// with spaces to 8 bytes, then the tensors back to back), fsynced, as the conversion's input.
void write_safetensors(const std::string& path, const std::vector<TensorSpan>& tensors, const unsigned char* data,
                       std::size_t size) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"source", "ckpt-bench"}};
  for (const auto& t : tensors)
    header[t.name] = {{"dtype", "BF16"}, {"shape", {t.size / 2}}, {"data_offsets", {t.offset, t.offset + t.size}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("create " + path);
  write_all(fd, prefix, 8, 0, path);
  write_all(fd, reinterpret_cast<const unsigned char*>(text.data()), text.size(), 8, path);
  write_all(fd, data, size, 8 + text.size(), path);
  fsync_or_throw(fd, path);
  if (::close(fd) != 0) throw_errno("close " + path);
}

constexpr std::size_t kRawBlock = std::size_t{8} << 20;

// What every group of measurements shares: the random data, the scratch files, and the rows, ratios
// and notes the report prints, in the order they were added.
struct Bench {
  const Config& cfg;
  std::size_t size;  // whole BF16 elements, page multiple
  std::uint64_t chunk_size = std::uint64_t{1} << format::kDefaultChunkSizeLog2;
  PosixFs fs;
  ScratchDir scratch;
  Buffer data, dst;
  std::vector<TensorSpan> tensors;
  std::map<std::string, Measurement> all;
  std::vector<std::string> limit_order, ckpt_order;
  std::vector<Comparison> comparisons;
  std::vector<std::string> notes;
  std::string raw_path, ckpt_path, stream_path, st_path, copy_path, conv_path;

  explicit Bench(const Config& config)
      : cfg(config), size(static_cast<std::size_t>(cfg.size & ~std::uint64_t{4095})), scratch(cfg.dir), data(size), dst(size),
        tensors(model_tensors(size, cfg.tensor_size)), raw_path(scratch.file("raw.bin")), ckpt_path(scratch.file("model.ckpt")),
        stream_path(scratch.file("stream.ckpt")), st_path(scratch.file("model.safetensors")),
        copy_path(scratch.file("copy.safetensors")), conv_path(scratch.file("converted.ckpt")) {
    // The data: random, so no layer below (compression, dedup, zero pages) can make anything look faster.
    fill_random(data.data(), size, 0x636b70742d62656eull);
  }
  Measurement& add(bool is_limit, Measurement m) {
    (is_limit ? limit_order : ckpt_order).push_back(m.id);
    return all[m.id] = std::move(m);
  }
  // Every write measurement starts without its previous output and with nothing dirty left to flush.
  void fresh(const std::string& path) {
    remove_if_present(path);
    settle(scratch.path());
  }
};

// A save through ShardWriter::add_tensor of every tensor, then finish.
void save_add_tensor(Bench& b, const std::string& path, const WriterOptions& options) {
  auto w = ShardWriter::create(b.fs, path, options);
  check(w, "save");
  for (const auto& t : b.tensors)
    check(w->add_tensor(t.name, DType::BF16, {t.size / 2}, b.data.data() + t.offset, t.size), "save " + t.name);
  check(w->finish(), "save finish");
}

// Async saves (spec/ASYNC.md): a staging pool for the copy that is this machine's limit for save(),
// and the store and saver the async rows use.
struct AsyncRig {
  std::unique_ptr<StagingPool> copy_pool;
  std::vector<unsigned char*> copy_slabs;
  std::string path;
  std::unique_ptr<Store> store;
  std::unique_ptr<AsyncSaver> saver;

  explicit AsyncRig(Bench& b) {
    auto p = StagingPool::create(b.size, std::min(b.size, std::size_t{8} << 20));  // a small --size: one slab
    check(p, "staging pool");
    copy_pool = std::move(p).value();
    for (std::size_t i = 0; i < copy_pool->slab_count(); ++i) copy_slabs.push_back(copy_pool->acquire());
  }
  void copy_into_staging(const Bench& b) {
    std::size_t slab = 0, used = 0;  // packed slab after slab, as AsyncSaver::save() does
    for (const auto& t : b.tensors)
      for (std::size_t done = 0; done < t.size;) {
        if (used == copy_pool->slab_bytes()) ++slab, used = 0;
        const std::size_t n = std::min(t.size - done, copy_pool->slab_bytes() - used);
        std::memcpy(copy_slabs[slab] + used, b.data.data() + t.offset + done, n);
        used += n;
        done += n;
      }
  }
  // Untimed: the previous run's background save ends (the saver's destructor waits), then a fresh store
  // and a saver whose pool holds the whole state, allocated and pre-faulted once.
  void fresh_saver(Bench& b) {
    saver.reset();
    store.reset();
    std::filesystem::remove_all(path);
    settle(b.scratch.path());
    StoreOptions sopts;
    sopts.create_if_missing = true;
    auto opened = Store::open(b.fs, path, Access::read_write, sopts);
    check(opened, "async store open");
    store = std::move(opened).value();
    AsyncSaveOptions aopts;
    aopts.staging_bytes = b.size;
    auto created = AsyncSaver::create(*store, aopts);
    check(created, "async saver");
    saver = std::move(created).value();
  }
  void save(const Bench& b) {
    SaveRequest request(1);
    for (const auto& t : b.tensors) request.add_tensor(t.name, DType::BF16, {t.size / 2}, b.data.data() + t.offset, t.size);
    check(saver->save(std::move(request)), "async save");
  }
  void close() {
    saver.reset();
    store.reset();
    std::filesystem::remove_all(path);
    for (auto* slab : copy_slabs) copy_pool->release(slab);
    copy_pool.reset();
  }
};

// --- Disk: raw write+fsync against ckpt saves, interleaved round by round.
void measure_disk(Bench& b) {
  const std::size_t size = b.size;
  Measurement& raw_write = b.add(true, measurement("raw_write_fsync", "write+fsync, pwrite 8 MiB blocks", 1, size, [&] { b.fresh(b.raw_path); },
                                        [&] { raw_write_file(b.raw_path, b.data.data(), size, kRawBlock); }));
  WriterOptions wopts;
  Measurement& save = b.add(false, measurement("save_add_tensor", "save: add_tensor + finish", 1, size, [&] { b.fresh(b.ckpt_path); }, [&] {
    save_add_tensor(b, b.ckpt_path, wopts);
  }));
  const std::size_t write_size = static_cast<std::size_t>(std::max<std::uint64_t>(b.cfg.write_size, 2));
  Measurement& stream = b.add(false, measurement("save_streaming", "save: streaming " + cli::human_bytes(double(write_size)) + " writes", 1, size,
                                      [&] { b.fresh(b.stream_path); }, [&] {
    auto w = ShardWriter::create(b.fs, b.stream_path, wopts);
    check(w, "save");
    for (const auto& t : b.tensors) {
      const Shape shape{t.size / 2};
      check(w->begin_piece(t.name, DType::BF16, shape, {0}, shape), "begin_piece " + t.name);
      for (std::size_t off = 0; off < t.size; off += write_size)
        check(w->write(b.data.data() + t.offset + off, std::min(write_size, t.size - off)), "write " + t.name);
      check(w->end_piece(), "end_piece " + t.name);
    }
    check(w->finish(), "save finish");
  }));
  // The commit protocol (spec/JOURNAL.md 5): BEGIN, shard, MANIFEST, directory syncs, COMMIT.
  const std::string store_path = b.scratch.file("store");
  Measurement& store_commit = b.add(false, measurement("store_commit", "store: begin + add_tensor + commit", 1, size, [&] {
    std::filesystem::remove_all(store_path);
    settle(b.scratch.path());
  }, [&] {
    StoreOptions sopts;
    sopts.create_if_missing = true;
    auto store = Store::open(b.fs, store_path, Access::read_write, sopts);
    check(store, "store open");
    auto txn = (*store)->begin(1);
    check(txn, "store begin");
    for (const auto& t : b.tensors)
      check((*txn)->add_tensor(t.name, DType::BF16, {t.size / 2}, b.data.data() + t.offset, t.size), "store " + t.name);
    check((*txn)->commit(), "store commit");
  }));
  // Async saves (spec/ASYNC.md): what save() blocks the caller for, against this machine's limit for
  // that (a copy of the state into memory that is already faulted in) and against the synchronous commit.
  AsyncRig rig(b);
  Measurement& staging_copy = b.add(true, measurement("staging_copy", "copy into pre-faulted staging, 1 thread", 1, size, nullptr,
                                                      [&] { rig.copy_into_staging(b); }));
  rig.path = b.scratch.file("async-store");
  Measurement& async_stall = b.add(false, measurement("async_stall", "async save: caller blocked (save())", 1, size,
                                                     [&] { rig.fresh_saver(b); }, [&] { rig.save(b); }));
  Measurement& async_total = b.add(false, measurement("async_total", "async save: until committed (save + wait)", 1, size,
                                                     [&] { rig.fresh_saver(b); }, [&] {
    rig.save(b);
    check(rig.saver->wait(), "async wait");
  }));
  b.comparisons.push_back({save.id, raw_write.id, true, 1.10});
  b.comparisons.push_back({stream.id, raw_write.id, true, 1.10});
  b.comparisons.push_back({store_commit.id, raw_write.id, true, 1.10});
  b.comparisons.push_back({async_stall.id, staging_copy.id, true, 1.10});
  b.comparisons.push_back({async_stall.id, store_commit.id, true, std::nullopt});
  b.comparisons.push_back({async_total.id, raw_write.id, true, std::nullopt});
  run_rounds({&raw_write, &save, &stream, &store_commit, &staging_copy, &async_stall, &async_total}, b.cfg.repeat);
  rig.close();
  std::filesystem::remove_all(store_path);
  remove_if_present(b.raw_path);
  remove_if_present(b.stream_path);
}

// --- RAM-backed directory: writing costs about what hashing does, so only a save whose hashing
// overlaps its writes (WriterOptions::pipeline) comes near raw write+fsync there.
// One file at a time lives there; a container's /dev/shm is often only 64 MiB.
// Returns the directory measured, empty when none was (a note says why).
std::string measure_shm(Bench& b) {
  const Config& cfg = b.cfg;
  const std::size_t size = b.size;
  std::string shm_used;
  std::string shm_note = cfg.shm_note;
  struct statvfs shm_space {};
  const std::uint64_t shm_needed = size + size / 16 + (std::uint64_t{16} << 20);
  if (!cfg.shm_dir.empty() && ::statvfs(cfg.shm_dir.c_str(), &shm_space) == 0 &&
      std::uint64_t(shm_space.f_bavail) * shm_space.f_frsize < shm_needed) {
    shm_note = cfg.shm_dir + " has " + cli::human_bytes(double(std::uint64_t(shm_space.f_bavail) * shm_space.f_frsize)) +
               " free, the runs need " + cli::human_bytes(double(shm_needed)) + " (pass a smaller --size or --shm-dir DIR)";
  }
  if (cfg.shm_dir.empty() || !shm_note.empty()) {
    b.notes.push_back("RAM-backed directory not measured (shm_* rows): " + shm_note);
    return shm_used;
  }
  shm_used = cfg.shm_dir;
  ScratchDir shm(cfg.shm_dir);
  struct statfs fs_info {};
  const bool in_ram = ::statfs(shm.path().c_str(), &fs_info) == 0 &&
                      (fs_info.f_type == 0x01021994 /* TMPFS_MAGIC */ || fs_info.f_type == 0x858458f6 /* RAMFS_MAGIC */);
  if (!in_ram) b.notes.push_back("--shm-dir " + cfg.shm_dir + " is not tmpfs or ramfs: the shm_* rows may wait on a disk");
  const std::string shm_raw_path = shm.file("raw.bin"), shm_ckpt_path = shm.file("model.ckpt");
  auto shm_fresh = [&] {
    remove_if_present(shm_raw_path);
    remove_if_present(shm_ckpt_path);
    settle(shm.path());
  };
  auto shm_save_run = [&](bool pipeline) {
    WriterOptions o;
    o.pipeline = pipeline;
    save_add_tensor(b, shm_ckpt_path, o);
  };
  Measurement& shm_raw = b.add(true, measurement("shm_write_fsync", "RAM dir: write+fsync, 8 MiB pwrites", 1, size,
                                                 shm_fresh, [&] {
    raw_write_file(shm_raw_path, b.data.data(), size, kRawBlock);
  }));
  Measurement& shm_save = b.add(false, measurement("shm_save", "RAM dir: save, add_tensor + finish", 1, size,
                                                   shm_fresh, [&] { shm_save_run(true); }));
  Measurement& shm_save_sync = b.add(false, measurement("shm_save_unpipelined", "RAM dir: save, pipeline = false", 1, size,
                                                        shm_fresh, [&] { shm_save_run(false); }));
  b.comparisons.push_back({shm_save.id, shm_raw.id, true, 1.03});
  b.comparisons.push_back({shm_save_sync.id, shm_raw.id, true, std::nullopt});
  // CPU-bound: rerun the runs that shared their core with another process.
  run_rounds({&shm_raw, &shm_save, &shm_save_sync}, cfg.repeat, true, 2 * cfg.repeat);
  shm_fresh();
  return shm_used;
}

// --- Conversion from safetensors against a plain copy+fsync of the same file.
void measure_conversion(Bench& b) {
  const std::size_t size = b.size;
  write_safetensors(b.st_path, b.tensors, b.data.data(), size);
  Buffer copy_buffer(kRawBlock);
  Measurement& copy = b.add(true, measurement("raw_copy_fsync", "copy+fsync, pread/pwrite 8 MiB", 1, size, [&] { b.fresh(b.copy_path); },
                                   [&] { raw_copy_file(b.st_path, b.copy_path, copy_buffer.data(), kRawBlock); }));
#if CKPT_BENCH_HAVE_SAFETENSORS
  Measurement& convert = b.add(false, measurement("convert_safetensors", "convert: safetensors_to_ckpt", 1, size, [&] { b.fresh(b.conv_path); }, [&] {
    check(ckpt::safetensors_to_ckpt(b.fs, b.st_path, b.conv_path, {}), "convert " + b.st_path);
  }));
  Measurement& convert_mapped = b.add(false, measurement("convert_safetensors_mmap", "convert: safetensors_to_ckpt, use_mmap", 1, size,
                                                        [&] { b.fresh(b.conv_path); }, [&] {
    ConvertOptions options;
    options.use_mmap = true;  // reads the input through a mapping: no copy into a buffer
    check(ckpt::safetensors_to_ckpt(b.fs, b.st_path, b.conv_path, options), "convert " + b.st_path);
  }));
  b.comparisons.push_back({convert.id, copy.id, true, 1.20});
  b.comparisons.push_back({convert_mapped.id, copy.id, true, 1.20});
  run_rounds({&copy, &convert, &convert_mapped}, b.cfg.repeat);
  remove_if_present(b.conv_path);
#else
  // TODO(issue 2): include/ckpt/interop/safetensors.hpp was not there when this was built: conversion is not measured.
  b.notes.push_back("TODO: conversion not measured: this build has no include/ckpt/interop/safetensors.hpp (safetensors_to_ckpt)");
  run_rounds({&copy}, b.cfg.repeat);
#endif
  remove_if_present(b.copy_path);
  remove_if_present(b.st_path);
  settle(b.scratch.path());
}

// One verify_file run that must find the model file intact; returns the bytes it checked.
std::uint64_t verify_intact(Bench& b, unsigned n, bool use_mmap) {
  VerifyOptions vo;
  vo.threads = n;
  vo.use_mmap = use_mmap;
  auto report = verify_file(b.fs, b.ckpt_path, vo);
  check(report, "verify " + b.ckpt_path);
  if (!report->ok()) throw IntegrityError(report->problems.front().message);
  return report->bytes_checked;
}

// --- In memory: the model file is now in the page cache, as a load right after a save finds it.
void measure_memory(Bench& b, const std::vector<unsigned>& threads) {
  const std::size_t size = b.size;
  const std::uint64_t chunk_size = b.chunk_size;
  const unsigned char* data = b.data.data();
  unsigned char* dst = b.dst.data();
  std::vector<Measurement*> memory_group;
  const std::size_t items = (size + chunk_size - 1) / chunk_size;
  auto item_span = [&](std::size_t i) {
    const std::size_t off = i * chunk_size;
    return std::make_pair(off, static_cast<std::size_t>(std::min<std::uint64_t>(chunk_size, size - off)));
  };
  for (unsigned n : threads) {
    const std::string suffix = n == 1 ? "1 thread" : std::to_string(n) + " threads";
    const std::string tag = "_t" + std::to_string(n);
    memory_group.push_back(&b.add(true, measurement("memory_read" + tag, "memory read (sum), " + suffix, n, size, nullptr, [&, n] {
      std::atomic<std::uint64_t> total{0};
      parallel_items(n, items, [&](std::size_t i) {
        const auto [off, len] = item_span(i);
        total += sum_words(data + off, len);
      });
      keep(total.load());
    })));
    memory_group.push_back(&b.add(true, measurement("xxh3" + tag, "XXH3-64, 1 MiB blocks, " + suffix, n, size, nullptr, [&, n] {
      std::atomic<std::uint64_t> total{0};
      parallel_items(n, items, [&](std::size_t i) {
        const auto [off, len] = item_span(i);
        total ^= xxh3_64(data + off, len);
      });
      keep(total.load());
    })));
  }
  memory_group.push_back(&b.add(true, measurement("memcpy", "memcpy (bytes read), 1 thread", 1, size, nullptr, [&] {
    for (std::size_t i = 0; i < items; ++i) {
      const auto [off, len] = item_span(i);
      std::memcpy(dst + off, data + off, len);
    }
    keep(dst[size - 1]);
  })));
  memory_group.push_back(&b.add(true, measurement("pread_cached", "pread of a cached file, 8 MiB blocks", 1, size, nullptr, [&] {
    keep(raw_read_file(b.ckpt_path, dst, size, kRawBlock));
  })));
  auto load_all = [&](ReadCheck read_check) {
    auto reader = ShardReader::open(b.fs, b.ckpt_path);
    check(reader, "open " + b.ckpt_path);
    for (const auto& t : b.tensors) check(reader->read_tensor(t.name, dst + t.offset, t.size, read_check), "read_tensor " + t.name);
  };
  memory_group.push_back(&b.add(false, measurement("load_verified", "load: read_tensor, ReadCheck::touched", 1, size, nullptr, [&] { load_all(ReadCheck::touched); })));
  memory_group.push_back(&b.add(false, measurement("load_unverified", "load: read_tensor, ReadCheck::none", 1, size, nullptr, [&] { load_all(ReadCheck::none); })));
  b.comparisons.push_back({"load_verified", "xxh3_t1", false, std::nullopt});
  b.comparisons.push_back({"load_verified", "memcpy", false, std::nullopt});
  b.comparisons.push_back({"load_unverified", "pread_cached", false, std::nullopt});
  for (unsigned n : threads) {
    const std::string suffix = n == 1 ? "1 thread" : std::to_string(n) + " threads";
    for (bool use_mmap : {false, true}) {
      const std::string id = std::string("verify_") + (use_mmap ? "mmap" : "pread") + "_t" + std::to_string(n);
      memory_group.push_back(&b.add(false, measurement(id, std::string("verify_file, ") + (use_mmap ? "mmap, " : "pread, ") + suffix, n, size, nullptr,
                                          [&, n, use_mmap] {
        if (verify_intact(b, n, use_mmap) < size) throw IntegrityError(b.ckpt_path + ": verify checked fewer bytes than were written");
      })));
      b.comparisons.push_back({id, "xxh3_t" + std::to_string(n), false, 0.85});
    }
  }
  // Single-thread measurements interleave among themselves, multi-thread ones after them: mixed in
  // one rotation, the 1-thread pread verify ran at half speed (seen on a 2-core VM, cause unknown).
  std::vector<Measurement*> single_thread, multi_thread;
  for (Measurement* m : memory_group) (m->threads == 1 ? single_thread : multi_thread).push_back(m);
  run_rounds(single_thread, b.cfg.repeat, true, 2 * b.cfg.repeat);
  run_rounds(multi_thread, b.cfg.repeat, true, 2 * b.cfg.repeat);
  load_all(ReadCheck::touched);
  if (std::memcmp(dst, data, size) != 0) throw IntegrityError(b.ckpt_path + ": loaded bytes differ from the saved ones");
}

// --- From disk: the file's pages are dropped from the page cache before each run, as for a
// checkpoint verified long after it was written. Here both verify modes wait on the device.
void measure_cold(Bench& b, const std::vector<unsigned>& threads) {
  auto drop = [&] { drop_cached_pages(b.ckpt_path); };
  const unsigned most = threads.back();
  Measurement& cold_read = b.add(true, measurement("cold_read", "read from disk, 8 MiB preads", 1, b.size, drop, [&] {
    keep(raw_read_file(b.ckpt_path, b.dst.data(), b.size, kRawBlock));
  }));
  std::vector<Measurement*> cold_group{&cold_read};
  std::vector<unsigned> cold_threads{1};
  if (most > 1) cold_threads.push_back(most);
  for (unsigned count : cold_threads) {
    for (bool use_mmap : {false, true}) {
      const std::string id = std::string("cold_verify_") + (use_mmap ? "mmap" : "pread") + "_t" + std::to_string(count);
      cold_group.push_back(&b.add(false, measurement(id, std::string("verify from disk, ") + (use_mmap ? "mmap, " : "pread, ") +
                                                             (count == 1 ? "1 thread" : std::to_string(count) + " threads"),
                                                     count, b.size, drop, [&, use_mmap, count] { (void)verify_intact(b, count, use_mmap); })));
      b.comparisons.push_back({id, cold_read.id, false, std::nullopt});
    }
  }
  run_rounds(cold_group, b.cfg.repeat);
}

double ratio_of(const Bench& b, const Comparison& c, bool median) {
  const Measurement& m = b.all.at(c.measure);
  const Measurement& l = b.all.at(c.limit);
  const double ms = median ? m.timing.median : m.timing.best, ls = median ? l.timing.median : l.timing.best;
  const double time_ratio = (ms / double(m.bytes)) / (ls / double(l.bytes));
  return c.time_ratio ? time_ratio : 1.0 / time_ratio;
}

nlohmann::ordered_json json_rows(const Bench& b, const std::vector<std::string>& order) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& id : order) {
    const Measurement& m = b.all.at(id);
    out.push_back({{"id", m.id}, {"label", m.label}, {"threads", m.threads}, {"bytes", m.bytes},
                   {"best_s", m.timing.best}, {"median_s", m.timing.median}, {"worst_s", m.timing.worst},
                   {"best_gib_per_s", m.rate(m.timing.best) / double(1 << 30)},
                   {"median_gib_per_s", m.rate(m.timing.median) / double(1 << 30)}, {"best_cpu_share", m.best_cpu_share},
                   {"min_cpu_s", *std::min_element(m.cpu_secs.begin(), m.cpu_secs.end())},
                   {"runs_s", m.secs}, {"runs_cpu_s", m.cpu_secs}});
  }
  return out;
}

int print_json_report(const Bench& b, const CpuInfo& cpu, const std::vector<unsigned>& threads, const std::string& shm_used) {
  nlohmann::ordered_json j;
  j["tool"] = kTool;
  j["size_bytes"] = b.size;
  j["tensor_count"] = b.tensors.size();
  j["chunk_size"] = b.chunk_size;
  j["dir"] = b.cfg.dir;
  j["shm_dir"] = shm_used;  // empty when not measured; the notes say why
  j["repeat"] = b.cfg.repeat;
  j["statistic"] = "best";  // ratios use the best (shortest) run of each; medians are given beside them
  j["threads"] = threads;
  j["cpu"] = {{"model", cpu.model}, {"cores_online", std::thread::hardware_concurrency()}, {"avx2", cpu.avx2}, {"avx512f", cpu.avx512}};
  j["xxh3_vector"] = xxh3_vector_name();
  j["limits"] = json_rows(b, b.limit_order);
  j["ckpt"] = json_rows(b, b.ckpt_order);
  nlohmann::ordered_json ratios = nlohmann::ordered_json::array();
  for (const auto& c : b.comparisons) {
    nlohmann::ordered_json r = {{"measure", c.measure}, {"limit", c.limit}, {"kind", c.time_ratio ? "time" : "throughput"},
                                {"ratio", ratio_of(b, c, false)}, {"median_ratio", ratio_of(b, c, true)}};
    if (c.target) {
      r["target"] = *c.target;
      r["target_rule"] = c.time_ratio ? "ratio <= target" : "ratio >= target";
      r["meets_target"] = c.meets(ratio_of(b, c, false));
    }
    ratios.push_back(r);
  }
  j["ratios"] = ratios;
  j["notes"] = b.notes;
  cli::print_json(j);
  return cli::kOk;
}

// The limit's name in the table's ratio column.
std::string short_name(const std::string& id) {
  if (id == "raw_write_fsync") return "write+fsync";
  if (id == "shm_write_fsync") return "RAM write+fsync";
  if (id == "raw_copy_fsync") return "copy+fsync";
  if (id == "pread_cached") return "pread cached";
  if (id == "cold_read") return "read from disk";
  if (id.rfind("xxh3_t", 0) == 0) return "XXH3 " + id.substr(6) + (id == "xxh3_t1" ? " thread" : " threads");
  return id;
}

int print_table_report(const Bench& b, const CpuInfo& cpu, const std::string& shm_used) {
  std::printf("ckpt-bench: %s of random data as %zu BF16 tensors, 1 MiB chunks, files in %s, RAM-backed runs in %s\n",
              cli::human_bytes(double(b.size)).c_str(), b.tensors.size(), b.scratch.path().c_str(),
              shm_used.empty() ? "(none, see the note)" : shm_used.c_str());
  std::printf("CPU: %s, %u cores online, AVX2 %s, AVX-512 %s; XXH3 on %s\n\n", cpu.model.c_str(),
              std::thread::hardware_concurrency(), cpu.avx2 ? "yes" : "no", cpu.avx512 ? "yes" : "no", xxh3_vector_name());
  auto row = [&](const Measurement& m) {
    std::printf("  %-40s %7.2f %7.2f %5.0f%%", m.label.c_str(), m.rate(m.timing.best) / double(1 << 30),
                m.rate(m.timing.median) / double(1 << 30), 100.0 * m.best_cpu_share);
  };
  std::printf("%-42s %7s %7s %6s\n", "machine limits", "GiB/s", "median", "cpu");
  for (const auto& id : b.limit_order) {
    row(b.all.at(id));
    std::printf("\n");
  }
  std::printf("\n%-42s %7s %7s %6s   %-34s %s\n", "through ckpt", "GiB/s", "median", "cpu", "vs limit: best (median)", "target");
  for (const auto& id : b.ckpt_order) {
    row(b.all.at(id));
    bool first = true;
    for (const auto& c : b.comparisons) {
      if (c.measure != id) continue;
      if (!first) std::printf("  %-40s %7s %7s %6s", "", "", "", "");
      first = false;
      char ratio[96];
      std::snprintf(ratio, sizeof ratio, "%s %.2fx (%.2fx) %s", c.time_ratio ? "time" : "rate", ratio_of(b, c, false),
                    ratio_of(b, c, true), short_name(c.limit).c_str());
      std::printf("   %-34s", ratio);
      if (c.target)
        std::printf(" %s %.2f %s", c.time_ratio ? "<=" : ">=", *c.target, c.meets(ratio_of(b, c, false)) ? "ok" : "MISSED");
      std::printf("\n");
    }
    if (first) std::printf("\n");
  }
  std::printf("\nGiB/s: best of %u runs (in-memory ones: up to %u more until one had its cores to itself), median beside it.\n"
              "cpu: CPU time / (wall time x threads) of the best run; under 100%% another process held a core or the run\n"
              "waited on the device. Ratios: time = ckpt time / limit time, rate = ckpt GiB/s / limit GiB/s.\n",
              b.cfg.repeat, 2 * b.cfg.repeat);
  for (const auto& n : b.notes) std::printf("\nnote: %s\n", n.c_str());
  return cli::kOk;
}

int run(const Config& cfg) {
  const CpuInfo cpu = cpu_info();
  Bench b(cfg);
  measure_disk(b);
  // Reported even when --only skips the groups that set them.
  std::vector<unsigned> threads = cfg.threads;
  std::string shm_used;
  if (cfg.only.empty()) {
    shm_used = measure_shm(b);
    measure_conversion(b);
    measure_memory(b, threads);
    measure_cold(b, threads);
  }
  return cfg.json ? print_json_report(b, cpu, threads, shm_used) : print_table_report(b, cpu, shm_used);
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Measures this machine's limits (memory, raw XXH3-64, raw write+fsync, copy+fsync) and ckpt's save, load,
verify and conversion paths on the same random data, and prints each ckpt path as a ratio to its limit.

Exit status: 0 measured, 1 a self-check found the bytes read back differ from those written (or a
verify reported damage), 2 bad arguments, a --dir or --shm-dir that is not a directory, or an I/O error.)";

int main(int argc, char** argv) {
  return cli::run_tool(kTool, kAbout, [&](CLI::App& app) -> int {
    Config cfg;
    std::string size_text = "256MiB", tensor_text = "32MiB", write_text = "1MiB";
    std::vector<unsigned> threads;
    app.add_option("--size", size_text, "bytes of data, e.g. 268435456, 256MiB, 2G (default 256MiB)");
    app.add_option("--dir", cfg.dir, "directory on the file system to measure; a scratch directory is made and removed in it (default .)");
    std::string shm_text;
    CLI::Option* shm_option = app.add_option("--shm-dir", shm_text, "RAM-backed directory (tmpfs) for the shm_* rows, where the disk cannot hide the hash; "
                                         "empty to skip (default /dev/shm when it exists and is writable)");
    app.add_option("--threads", threads, "thread counts for the multi-threaded measurements; 1 is always included (default: 1 and the core count)")
        ->check(CLI::Range(1u, 1024u));
    app.add_option("--repeat", cfg.repeat, "runs of each measurement, interleaved; the best is reported, the median beside it (default 3)")->check(CLI::Range(1u, 1000u));
    app.add_option("--tensor-size", tensor_text, "bytes per tensor (default 32MiB)");
    app.add_option("--write-size", write_text, "bytes per ShardWriter::write() call in the streaming save (default 1MiB)");
    app.add_flag("--json", cfg.json, "print one JSON document instead of the table");
    app.add_option("--only", cfg.only, "measure only this group: 'async' (disk writes, store commit, staging copy, async save)")
        ->check(CLI::IsMember({"async"}));
    if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
    const auto size = parse_size(size_text), tensor = parse_size(tensor_text), write = parse_size(write_text);
    if (!size || *size < 4096 || *size > (std::uint64_t{1} << 40)) {
      std::fprintf(stderr, "%s: --size '%s' is not a byte count between 4KiB and 1TiB\n", kTool, size_text.c_str());
      return cli::kUsage;
    }
    if (!tensor || *tensor < 2 || *tensor % 2 != 0) {
      std::fprintf(stderr, "%s: --tensor-size '%s' is not an even byte count (BF16 elements)\n", kTool, tensor_text.c_str());
      return cli::kUsage;
    }
    if (!write || *write < 2 || *write % 2 != 0 || *write > (std::uint64_t{1} << 32)) {
      std::fprintf(stderr, "%s: --write-size '%s' is not an even byte count up to 4GiB\n", kTool, write_text.c_str());
      return cli::kUsage;
    }
    // Checked before any work (stat only, nothing opened): a FIFO or a file given as a directory exits 2 at once.
    for (const auto& [flag, dir] : {std::pair<const char*, std::string>{"--dir", cfg.dir}, {"--shm-dir", shm_text}}) {
      if (dir.empty()) continue;
      std::error_code ec;
      if (std::filesystem::is_directory(dir, ec)) continue;
      const bool exists = std::filesystem::exists(std::filesystem::symlink_status(dir, ec));
      std::fprintf(stderr, "%s: %s '%s': %s\n", kTool, flag, dir.c_str(), exists ? "not a directory" : "no such directory");
      return cli::kUsage;
    }
    if (shm_option->count() > 0) {
      cfg.shm_dir = shm_text;
      if (cfg.shm_dir.empty()) cfg.shm_note = "--shm-dir is empty";
    } else if (std::error_code ec; std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) {
      cfg.shm_dir = "/dev/shm";
    } else {
      cfg.shm_note = "/dev/shm is not a writable directory here; pass --shm-dir DIR";
    }
    cfg.size = *size;
    cfg.tensor_size = *tensor;
    cfg.write_size = *write;
    const bool threads_given = !threads.empty();
    threads.push_back(1);
    if (!threads_given) threads.push_back(std::max(1u, std::thread::hardware_concurrency()));
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    cfg.threads = threads;
    try {
      return run(cfg);
    } catch (const IntegrityError& e) {
      std::fprintf(stderr, "%s: %s\n", kTool, e.what());
      return int{cli::kIntegrity};
    }
  });
}
