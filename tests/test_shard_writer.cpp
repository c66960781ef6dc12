// Tests for include/ckpt/shard/shard_writer.hpp.
#include <catch2/catch.hpp>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace ckpt;

TEST_CASE("a tensor written whole reads back bit for bit", "[shard_writer]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto data = ckpt_test::random_bytes(3 * 5000 * 4, 1);
  {
    WriterOptions o;
    o.chunk_size_log2 = 12;
    auto w = ShardWriter::create(fs, dir.file("a.ckpt"), o);
    REQUIRE(w.ok());
    REQUIRE(w->add_tensor("w", DType::F32, {3, 5000}, data.data(), data.size()).ok());
    auto s = w->finish();
    REQUIRE(s.ok());
    CHECK(s->chunk_count == (data.size() + 4095) / 4096);
  }
  auto r = ShardReader::open(fs, dir.file("a.ckpt"));
  REQUIRE(r.ok());
  std::vector<unsigned char> back(data.size());
  REQUIRE(r->read_tensor("w", back.data(), back.size()).ok());
  CHECK(back == data);
}

// --- The pipelined writer (WriterOptions::pipeline) ---------------------------------------------

namespace {

// Forwards the operations a ShardWriter makes to an inner Fs and logs each one with its result, the
// thread that made it and how many were in progress at once. on_pwrite runs before each pwrite.
template <class Inner>
class WatchFs {
 public:
  explicit WatchFs(Inner& inner) : inner_(inner) {}

  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) {
    Call c(*this, "open " + base_name(path));
    auto r = inner_.open(path, mode);
    c.done(r.status()).ignore_error();  // logged; the Result carries it
    return r;
  }
  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    Call c(*this, "pwrite " + std::to_string(n) + " at " + std::to_string(off));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pwrite_threads_.push_back(std::this_thread::get_id());
    }
    if (on_pwrite) on_pwrite(pwrite_threads().size());
    const std::less<const void*> before;
    if (!before(buf, watched_begin) && before(buf, watched_end)) ++from_watched_;
    return c.done(inner_.pwrite(f, buf, n, off));
  }
  [[nodiscard]] Status sync(FileHandle f) {
    Call c(*this, "sync");
    return c.done(inner_.sync(f));
  }
  [[nodiscard]] Status close(FileHandle f) {
    Call c(*this, "close");
    return c.done(inner_.close(f));
  }
  [[nodiscard]] Status rename(const std::string& from, const std::string& to) {
    Call c(*this, "rename " + base_name(from) + " " + base_name(to));
    return c.done(inner_.rename(from, to));
  }
  [[nodiscard]] Status sync_dir(const std::string& path) {
    Call c(*this, "sync_dir");
    return c.done(inner_.sync_dir(path));
  }
  [[nodiscard]] Status unlink(const std::string& path) {
    Call c(*this, "unlink " + base_name(path));
    return c.done(inner_.unlink(path));
  }
  // The rest of the Fs concept (an FsRef needs all of it); a writer makes none of these, so each is
  // logged too: one would show in the logs the tests compare.
  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    return logged("pread", inner_.pread(f, buf, n, off));
  }
  [[nodiscard]] Status sync_data(FileHandle f) { return logged("sync_data", inner_.sync_data(f)); }
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f) { return logged("file_size", inner_.file_size(f)); }
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size) { return logged("truncate", inner_.truncate(f, size)); }
  [[nodiscard]] Status mkdir(const std::string& path) { return logged("mkdir " + base_name(path), inner_.mkdir(path)); }
  [[nodiscard]] Status rmdir(const std::string& path) { return logged("rmdir " + base_name(path), inner_.rmdir(path)); }
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) { return logged("list_dir", inner_.list_dir(path)); }
  [[nodiscard]] Result<PathInfo> stat(const std::string& path) { return logged("stat " + base_name(path), inner_.stat(path)); }
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) { return logged("lock " + base_name(path), inner_.lock(path)); }

  std::function<void(std::size_t pwrite_number)> on_pwrite;
  // pwrites from inside [watched_begin, watched_end) are counted: writes straight from the caller's memory.
  const void* watched_begin = nullptr;
  const void* watched_end = nullptr;
  [[nodiscard]] int from_watched() const { return from_watched_.load(); }

  [[nodiscard]] std::vector<std::string> log() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_;
  }
  [[nodiscard]] std::vector<std::thread::id> pwrite_threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pwrite_threads_;
  }
  [[nodiscard]] int most_at_once() const { return most_at_once_.load(); }

 private:
  template <class R>
  [[nodiscard]] R logged(std::string what, R r) {
    Call c(*this, std::move(what));
    if constexpr (std::is_same_v<R, Status>)
      c.done(r).ignore_error();  // logged; the result carries it
    else
      c.done(r.status()).ignore_error();
    return r;
  }
  struct Call {
    Call(WatchFs& fs, std::string what) : fs_(fs), what_(std::move(what)) {
      const int now = ++fs_.in_progress_;
      int most = fs_.most_at_once_.load();
      while (now > most && !fs_.most_at_once_.compare_exchange_weak(most, now)) {
      }
    }
    ~Call() { --fs_.in_progress_; }
    Status done(Status s) {
      std::lock_guard<std::mutex> lock(fs_.mutex_);
      fs_.log_.push_back(what_ + (s.ok() ? "" : " -> " + s.to_string()));
      return s;
    }
    WatchFs& fs_;
    std::string what_;
  };

  Inner& inner_;
  mutable std::mutex mutex_;
  std::vector<std::string> log_;
  std::vector<std::thread::id> pwrite_threads_;
  std::atomic<int> in_progress_{0}, most_at_once_{0}, from_watched_{0};
};

// What a save writes: each tensor added whole (write_size 0) or streamed in writes of write_size
// bytes, as one piece or as two halves along the first dimension.
struct TensorPlan {
  std::string name;
  std::size_t size;
  std::size_t write_size;
  bool two_pieces = false;
};

const std::vector<unsigned char>& source_bytes() {
  static const auto bytes = ckpt_test::random_bytes(std::size_t{32} << 20, 77);
  return bytes;
}

// Large writes with the default 4 MiB buffer and 2 MiB alignment: blocks written straight from the
// caller's memory, copied last blocks, starts off the buffer's boundaries.
const std::vector<TensorPlan> kLarge = {
    {"whole.13m", (std::size_t{13} << 20) + 6, 0},
    {"whole.4m", std::size_t{4} << 20, 0},
    {"stream.6m", (std::size_t{6} << 20) + 2, (std::size_t{5} << 20) + 4, true},
    {"stream.1m", (std::size_t{7} << 20) + 4, std::size_t{1} << 20},
};
// Many small writes into the smallest buffer, and writes of more than the buffer.
const std::vector<TensorPlan> kSmall = {
    {"tiny", 30012, 13},
    {"over.buffer", 50000, 9000, true},
    {"whole", 20000, 0},
};
// A 1 MiB buffer and 1 MiB alignment over a few MiB: writes straight from the caller's memory with
// little data, for the walks over every operation.
const std::vector<TensorPlan> kWalk = {
    {"a", (std::size_t{3} << 20) + 10, 0},
    {"b", (std::size_t{1} << 20) + 6, (std::size_t{3} << 19) + 2},
    {"c", 3000, 700, true},
};

WriterOptions options_for(const std::vector<TensorPlan>& plan, bool pipeline) {
  WriterOptions o;
  o.pipeline = pipeline;
  o.uuid = Uuid{1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16};
  if (&plan == &kSmall) {
    o.buffer_size = 4096;
    o.chunk_size_log2 = 12;
  } else if (&plan == &kWalk) {
    o.buffer_size = std::size_t{1} << 20;
    o.chunk_size_log2 = 16;
    o.alignment_log2 = 20;
  } else {
    o.alignment_log2 = 21;
  }
  return o;
}

// Saves the plan; the summary, and the chunks of every piece as last_piece_chunks() gave them.
template <class Fs>
Status save_plan(Fs& fs, const std::string& path, const std::vector<TensorPlan>& plan, const WriterOptions& o,
                 ShardSummary* summary = nullptr, std::vector<ChunkRecord>* chunks = nullptr) {
  CKPT_ASSIGN_OR_RETURN(auto w, ShardWriter::create(fs, path, o));
  const unsigned char* data = source_bytes().data();
  for (const auto& t : plan) {
    const std::uint64_t rows = t.size / 2;  // U16 rows of one element: a half is whole rows
    if (t.write_size == 0) {
      CKPT_TRY(w.add_tensor(t.name, DType::U16, {rows}, data, t.size));
      if (chunks) chunks->insert(chunks->end(), w.last_piece_chunks().begin(), w.last_piece_chunks().end());
      data += t.size;
      continue;
    }
    const std::uint64_t first = t.two_pieces ? rows / 2 : rows;
    for (const auto& [offset, count] : {std::make_pair(std::uint64_t{0}, first), std::make_pair(first, rows - first)}) {
      if (count == 0) continue;
      CKPT_TRY(w.begin_piece(t.name, DType::U16, {rows}, {offset}, {count}));
      for (std::size_t done = 0; done < 2 * count;) {
        const std::size_t n = std::min<std::size_t>(t.write_size, 2 * count - done);
        CKPT_TRY(w.write(data, n));
        data += n;
        done += n;
      }
      CKPT_TRY(w.end_piece());
      if (chunks) chunks->insert(chunks->end(), w.last_piece_chunks().begin(), w.last_piece_chunks().end());
    }
  }
  CKPT_TRY(w.set_metadata("step", Value(42)));
  CKPT_ASSIGN_OR_RETURN(auto s, w.finish());
  if (summary) *summary = s;
  return Status();
}

bool same_summary(const ShardSummary& a, const ShardSummary& b) {
  return a.path == b.path && a.uuid == b.uuid && a.file_size == b.file_size && a.data_bytes == b.data_bytes &&
         a.index_digest == b.index_digest && a.chunk_count == b.chunk_count && a.piece_count == b.piece_count;
}
bool same_chunks(const std::vector<ChunkRecord>& a, const std::vector<ChunkRecord>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k].offset != b[k].offset || a[k].length != b[k].length || a[k].digest != b[k].digest) return false;
  return true;
}

// Reads every tensor of the plan back and compares it with the source.
template <class Fs>
void check_reads_back(Fs& fs, const std::string& path, const std::vector<TensorPlan>& plan) {
  auto r = ShardReader::open(fs, path);
  REQUIRE(r.ok());
  const unsigned char* data = source_bytes().data();
  for (const auto& t : plan) {
    std::vector<unsigned char> back(t.size);
    REQUIRE(r->read_tensor(t.name, back.data(), back.size()).ok());
    CHECK(std::equal(back.begin(), back.end(), data));
    data += t.size;
  }
}

SimFs fresh_sim() {
  SimFs fs;
  REQUIRE(fs.mkdir("/ckpt").ok());
  REQUIRE(fs.sync_dir("/").ok());
  return fs;
}

const std::vector<TensorPlan>& plan_named(const std::string& name) {
  return name == "large" ? kLarge : name == "small" ? kSmall : kWalk;
}

}  // namespace

TEST_CASE("pipelined and synchronous writers make the same file with the same operations", "[shard_writer][pipeline]") {
  for (const std::string plan_name : {"large", "small", "walk"}) {
    const auto& plan = plan_named(plan_name);
    INFO("plan " << plan_name);
    // PosixFs: the same bytes, summary and chunk digests, and the same pwrites in the same order.
    {
      ckpt_test::TempDir dirs[2];  // the same file name in each, so the logs compare whole
      PosixFs posix;
      std::string bytes[2];
      std::vector<std::string> logs[2];
      ShardSummary summaries[2];
      std::vector<ChunkRecord> chunks[2];
      for (const bool pipeline : {false, true}) {
        INFO("pipeline " << pipeline);
        WatchFs<PosixFs> fs(posix);
        fs.watched_begin = source_bytes().data();
        fs.watched_end = source_bytes().data() + source_bytes().size();
        const std::string path = dirs[pipeline].file("m.ckpt");
        WriterOptions o = options_for(plan, pipeline);
        REQUIRE(save_plan(fs, path, plan, o, &summaries[pipeline], &chunks[pipeline]).ok());
        CHECK(fs.most_at_once() == 1);  // never two Fs calls at a time
        const auto threads = fs.pwrite_threads();
        REQUIRE(!threads.empty());
        // Synchronous: every write from the caller's thread. Pipelined: from one other thread, but
        // the last one, which finish() makes itself after draining the queue.
        std::size_t from_caller = 0;
        for (const auto& id : threads) from_caller += id == std::this_thread::get_id();
        CHECK(from_caller == (pipeline ? 1u : threads.size()));
        // Whole aligned blocks go to the Fs straight from the caller's memory, pipelined or not.
        if (&plan != &kSmall) CHECK(fs.from_watched() > 0);
        bytes[pipeline] = ckpt_test::read_file(path);
        logs[pipeline] = fs.log();
        check_reads_back(posix, path, plan);
      }
      CHECK(bytes[0] == bytes[1]);
      CHECK(logs[0].size() == logs[1].size());
      CHECK(logs[0] == logs[1]);
      summaries[0].path = summaries[1].path;  // in another directory
      CHECK(same_summary(summaries[0], summaries[1]));
      CHECK(same_chunks(chunks[0], chunks[1]));
    }
    // SimFs: the same bytes and the same persistence points, the hook running on the I/O thread.
    {
      std::vector<unsigned char> bytes[2];
      std::vector<std::string> points[2], logs[2];
      for (const bool pipeline : {false, true}) {
        INFO("pipeline " << pipeline);
        SimFs sim = fresh_sim();
        sim.set_persistence_hook([&](const SimFs& at, const PersistencePoint& p) {
          points[pipeline].push_back(std::string(fs_op_name(p.op)) + " " + p.path + " " + std::to_string(at.unsynced_file_ops()));
        }, /*every_mutation=*/true);
        WatchFs<SimFs> fs(sim);
        REQUIRE(save_plan(fs, "/ckpt/m.ckpt", plan, options_for(plan, pipeline)).ok());
        sim.set_persistence_hook(nullptr);
        CHECK(fs.most_at_once() == 1);
        bytes[pipeline] = *sim.file_content("/ckpt/m.ckpt");
        logs[pipeline] = fs.log();
        CHECK(sim.crash_state_count() == 1);  // durable once finish() returned
        check_reads_back(sim, "/ckpt/m.ckpt", plan);
      }
      CHECK(bytes[0] == bytes[1]);
      CHECK(logs[0] == logs[1]);
      CHECK(points[0] == points[1]);
    }
  }
}

TEST_CASE("a write error at any operation surfaces as the synchronous writer's error", "[shard_writer][pipeline]") {
  // Each operation of a save failed in turn, three ways, pipelined and not: the save returns the
  // same Status, the Fs saw the same operations, and nothing is left under the final name but after
  // a failed directory sync (spec 7.1).
  const std::string path = "/ckpt/m.ckpt";
  for (const std::string plan_name : {"walk", "small"}) {
    const auto& plan = plan_named(plan_name);
    std::uint64_t count = 0;
    {
      SimFs inner = fresh_sim();
      FaultFs<SimFs> fs(inner);
      REQUIRE(save_plan(fs, path, plan, options_for(plan, true)).ok());
      count = fs.count();
    }
    REQUIRE(count > 8);
    std::uint64_t failed_writes = 0;
    for (const Fault fault : {Fault::no_space, Fault::io_error, Fault::short_write}) {
      for (std::uint64_t n = 1; n <= count; ++n) {
        INFO("plan " << plan_name << ", " << fault_name(fault) << " at operation " << n << " of " << count);
        Status saved[2];
        std::vector<std::string> logs[2], names[2];
        std::string first_fault;
        for (const bool pipeline : {false, true}) {
          SimFs inner = fresh_sim();
          FaultFs<SimFs> faulty(inner, FaultPlan::nth(n, fault));
          {
            WatchFs<FaultFs<SimFs>> fs(faulty);
            saved[pipeline] = save_plan(fs, path, plan, options_for(plan, pipeline));
            logs[pipeline] = fs.log();  // the writer is gone: its cleanup is in the log too
            CHECK(fs.most_at_once() == 1);
          }
          REQUIRE(faulty.faults() == 1);
          first_fault = faulty.first_fault();
          names[pipeline] = *inner.list_dir("/ckpt");
        }
        INFO(first_fault);
        CHECK(saved[0].code() == Code::io);
        CHECK(saved[1].to_string() == saved[0].to_string());
        CHECK(logs[1] == logs[0]);
        CHECK(names[1] == names[0]);
        if (first_fault.rfind("sync_dir", 0) == 0) {
          CHECK(names[1] == std::vector<std::string>{"m.ckpt"});
        } else {
          CHECK(names[1].empty());  // the temporary file was removed too
        }
        failed_writes += first_fault.rfind("pwrite", 0) == 0;
      }
    }
    CHECK(failed_writes > 3 * 4);
  }
}

TEST_CASE("a pipelined save on a disk that dies at any write fails cleanly", "[shard_writer][pipeline]") {
  ckpt_test::TempDir dir;
  PosixFs posix;
  const std::string path = dir.file("m.ckpt");
  std::uint64_t writes = 0;
  {
    FaultFs<PosixFs> fs(posix, FaultPlan::nth(0, Fault::none, fs_op_bit(FsOp::pwrite)));
    REQUIRE(save_plan(fs, path, kWalk, options_for(kWalk, true)).ok());
    writes = fs.count();
    REQUIRE(posix.unlink(path).ok());
  }
  REQUIRE(writes > 4);
  for (std::uint64_t n = 1; n <= writes; ++n) {
    INFO("every pwrite from the " << n << "th fails");
    FaultFs<PosixFs> fs(posix, FaultPlan::from(n, Fault::no_space, fs_op_bit(FsOp::pwrite)));
    const Status saved = save_plan(fs, path, kWalk, options_for(kWalk, true));
    CHECK(saved.code() == Code::io);
    CHECK(saved.message().find("No space left on device") != std::string::npos);
    CHECK(saved.message().find(".tmp-") != std::string::npos);  // names the file
    CHECK(fs.faults() == 1);  // the queued writes after the failed one were dropped, not made
    CHECK(posix.list_dir(dir.path())->empty());
  }
}

TEST_CASE("write() returns only when the caller's bytes are copied or written", "[shard_writer][pipeline]") {
  // A slow disk: each pwrite waits, so a write made from the caller's memory after write() returned
  // would see the bytes the caller put there next.
  for (const std::string plan_name : {"large", "walk", "small"}) {
    const auto& plan = plan_named(plan_name);
    INFO("plan " << plan_name);
    SimFs sim = fresh_sim();
    WatchFs<SimFs> fs(sim);
    fs.on_pwrite = [](std::size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
    auto w = ShardWriter::create(fs, "/ckpt/m.ckpt", options_for(plan, true));
    REQUIRE(w.ok());
    const unsigned char* data = source_bytes().data();
    std::vector<unsigned char> staging;
    for (const auto& t : plan) {
      staging.assign(data, data + t.size);
      const std::size_t step = t.write_size == 0 ? t.size : t.write_size;
      REQUIRE(w->begin_piece(t.name, DType::U16, {t.size / 2}, {0}, {t.size / 2}).ok());
      for (std::size_t done = 0; done < t.size;) {
        const std::size_t n = std::min(step, t.size - done);
        REQUIRE(w->write(staging.data() + done, n).ok());
        std::fill(staging.begin() + done, staging.begin() + done + n, 0xA5);  // reused at once
        done += n;
      }
      REQUIRE(w->end_piece().ok());
      data += t.size;
    }
    REQUIRE(w->finish().ok());
    check_reads_back(sim, "/ckpt/m.ckpt", plan);
  }
}

TEST_CASE("an exception thrown inside the Fs on the I/O thread reaches the caller", "[shard_writer][pipeline]") {
  SimFs sim = fresh_sim();
  WatchFs<SimFs> throwing(sim), other(sim);  // two writers at once: one Fs wrapper each
  throwing.on_pwrite = [](std::size_t n) {
    if (n == 3) throw std::runtime_error("hook failed");
  };
  {
    auto w = ShardWriter::create(other, "/ckpt/m.ckpt", options_for(kWalk, true));
    REQUIRE(w.ok());
    bool thrown = false;
    try {
      (void)save_plan(throwing, "/ckpt/n.ckpt", kWalk, options_for(kWalk, true));
    } catch (const std::runtime_error& e) {
      thrown = std::string(e.what()) == "hook failed";
    }
    CHECK(thrown);
    CHECK(throwing.pwrite_threads().size() == 3);  // nothing was written after the one that threw
    // The writer that threw is gone and took its file; the other one still works.
    REQUIRE(w->add_tensor("x", DType::U8, {5}, source_bytes().data(), 5).ok());
    REQUIRE(w->finish().ok());
  }
  CHECK(*sim.list_dir("/ckpt") == std::vector<std::string>{"m.ckpt"});
  CHECK(throwing.most_at_once() == 1);
  CHECK(other.most_at_once() == 1);
}

TEST_CASE("a writer abandoned with writes queued makes them, then removes its file", "[shard_writer][pipeline]") {
  std::vector<std::string> logs[2];
  for (const bool pipeline : {false, true}) {
    SimFs sim = fresh_sim();
    WatchFs<SimFs> fs(sim);
    fs.on_pwrite = [](std::size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
    {
      auto w = ShardWriter::create(fs, "/ckpt/m.ckpt", options_for(kLarge, pipeline));
      REQUIRE(w.ok());
      REQUIRE(w->add_tensor("t", DType::U8, {std::size_t{13} << 20}, source_bytes().data(), std::size_t{13} << 20).ok());
    }
    logs[pipeline] = fs.log();
    REQUIRE(logs[pipeline].size() >= 3);
    CHECK(logs[pipeline][logs[pipeline].size() - 2] == "close");
    CHECK(logs[pipeline].back().rfind("unlink m.ckpt.tmp-", 0) == 0);
    CHECK(sim.list_dir("/ckpt")->empty());
    CHECK(fs.most_at_once() == 1);
  }
  CHECK(logs[0] == logs[1]);
}

// A reused file mapped shared_write, as a memory store's slot is (spec/JOURNAL.md 10.1), `bytes` long.
struct MappedSlot {
  Mapping map;
  static MappedSlot make(PosixFs& fs, const std::string& path, std::uint64_t bytes) {
    auto f = fs.open(path, OpenMode::create_new);
    REQUIRE(f.ok());
    REQUIRE(fs.truncate(*f, bytes).ok());
    auto m = fs.map(*f, 0, static_cast<std::size_t>(bytes), MapMode::shared_write);
    REQUIRE(m.ok());
    REQUIRE(fs.close(*f).ok());
    return MappedSlot{std::move(*m)};
  }
  [[nodiscard]] unsigned char* at(std::uint64_t off) const { return map.writable_data() + off; }
};

TEST_CASE("bytes copied into the mapped file where the layout puts them are hashed in place: the same file as written",
          "[shard_writer][in_place]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto a = ckpt_test::random_bytes(70000, 1), b = ckpt_test::random_bytes(3, 2), c = ckpt_test::random_bytes(9000, 3);
  WriterOptions o;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = 9;
  o.buffer_size = 4096;
  o.uuid = Uuid{};
  auto write = [&](const std::string& path, const std::vector<const unsigned char*>& from) {
    auto w = ShardWriter::create(fs, path, o);
    REQUIRE(w.ok());
    REQUIRE(w->add_tensor("a", DType::U8, {a.size()}, from[0], a.size()).ok());
    REQUIRE(w->add_tensor("empty", DType::F32, {0}, nullptr, 0).ok());
    REQUIRE(w->add_tensor("b", DType::U8, {b.size()}, from[1], b.size()).ok());
    REQUIRE(w->add_tensor("c", DType::U8, {c.size()}, from[2], c.size()).ok());
    REQUIRE(w->finish().ok());
  };
  write(dir.file("written.ckpt"), {a.data(), b.data(), c.data()});

  auto layout = plan_data_layout({a.size(), 0, b.size(), c.size()}, o.alignment_log2);
  REQUIRE(layout.ok());
  // Longer than the shard and full of old bytes, as a slot written over is: none may survive.
  const std::uint64_t slot_size = layout->end + 100000;
  MappedSlot slot = MappedSlot::make(fs, dir.file("slot"), slot_size);
  std::memset(slot.at(0), 0xee, static_cast<std::size_t>(slot_size));
  std::memcpy(slot.at(layout->offsets[0]), a.data(), a.size());
  std::memcpy(slot.at(layout->offsets[2]), b.data(), b.size());
  std::memcpy(slot.at(layout->offsets[3]), c.data(), c.size());
  o.reuse = dir.file("slot");
  o.in_place = slot.at(0);
  o.in_place_size = slot_size;
  write(dir.file("in-place.ckpt"), {slot.at(layout->offsets[0]), slot.at(layout->offsets[2]), slot.at(layout->offsets[3])});
  CHECK(ckpt_test::read_file(dir.file("in-place.ckpt")) == ckpt_test::read_file(dir.file("written.ckpt")));
  auto r = ShardReader::open(fs, dir.file("in-place.ckpt"));
  REQUIRE(r.ok());
  for (const PieceRecord& p : r->index().pieces) CHECK(p.data_offset == layout->offsets[static_cast<std::size_t>(p.tensor)]);
}

TEST_CASE("bytes of the mapped file handed to the writer away from its position are refused, naming both offsets",
          "[shard_writer][in_place]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  MappedSlot slot = MappedSlot::make(fs, dir.file("slot"), 1 << 16);
  WriterOptions o;
  o.reuse = dir.file("slot");
  o.in_place = slot.at(0);
  o.in_place_size = 1 << 16;
  auto w = ShardWriter::create(fs, dir.file("s.ckpt"), o);
  REQUIRE(w.ok());
  REQUIRE(w->begin_piece("w", DType::U8, {100}, {0}, {100}).ok());
  const Status s = w->write(slot.at(8192), 100);  // the piece starts at the data offset, not at 8192
  CHECK(s.code() == Code::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("offset 8192") && Catch::Contains("written at offset"));
  CHECK_FALSE(w->finish().ok());  // the writer is failed: nothing half-written is committed
}

TEST_CASE("the data layout is the writer's: each piece at the next aligned offset, sizes that overflow refused",
          "[shard_writer][in_place]") {
  auto l = plan_data_layout({10, 0, 64, 1}, 6);
  REQUIRE(l.ok());
  CHECK(l->offsets == std::vector<std::uint64_t>{128, 192, 192, 256});
  CHECK(l->end == 257);
  CHECK(plan_data_layout({UINT64_MAX - 64}, 6).status().code() == Code::invalid_argument);
  CHECK(plan_data_layout({1}, 5).status().code() == Code::invalid_argument);
}
