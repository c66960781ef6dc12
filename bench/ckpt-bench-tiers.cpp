// ckpt-bench-tiers: the tiers (spec/TIERS.md) against this machine's own limits, one MPI rank per
// simulated node, each node its own memory root. Two parts, each its own job, so a resume starts from
// a fresh process as a restarted job does; bench/bench-tiers.py runs them in order on the same state
// and prints the whole table:
//
//   mpirun -np 4 ckpt-bench-tiers capture --root /dev/shm/tiers --persistent /disk/tiers --size 1GiB --repeat 5
//   mpirun -np 4 ckpt-bench-tiers resume  --root /dev/shm/tiers --persistent /disk/tiers --size 1GiB [--pace-gbps 1]
//
// capture: every rank holds size/np bytes (F32 tensors of --tensor bytes) and captures them through
// TieredCheckpointer::step, waiting for the background work after each capture so each is timed alone.
// Per capture, against the same bytes in the same run:
// - step()'s stall against a memcpy into pre-faulted memory (huge pages where the kernel gives them, as
//   ckpt-bench's buffers; and 4 KiB pages, as the staging pool allocates its block);
// - replication (the "replicating" phase to wait()'s return: send, receive into the peer's memory
//   store, verify, acknowledge) against MpiComm send/recv of the same bytes in --transfer-block
//   messages between the same pairs, that traffic with the receiver writing each message into its
//   memory root, and a plain write of the bytes there; with the CPU and file-system time it took.
// The first capture (it allocates the staging pool) is reported apart; the last is promoted to the
// persistent store and left there for resume. Then what each rank keeps in memory.
// resume: MPI_Init, create and resume() from whatever the memory roots and the persistent store hold,
// timed from the launch (CKPT_BENCH_LAUNCH_NS: nanoseconds of CLOCK_REALTIME, set by whoever starts
// mpirun) to every rank's state loaded; the loaded bytes are checked against what capture saved.
// --pace-gbps makes every first read of a persistent-store byte wait for a per-rank link of that rate
// (shared storage at scale); memory-tier reads are never paced.
// Built only where MPI is found (cmake/tools-mpi.cmake); elsewhere it says so and exits 2.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

#ifdef CKPT_BENCH_HAVE_MPI

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include <ckpt/dist/mpi_comm.hpp>
#if CKPT_BENCH_HAVE_GLOO
#include <ckpt/dist/gloo_comm.hpp>
#endif
#include <ckpt/io/paced_fs.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "bench_mpi.hpp"

namespace {

constexpr const char* kTool = "ckpt-bench-tiers";
using ckpt::bench::check;
using ckpt::bench::quiet_barrier;
constexpr int kRawTag = 7;  // the raw point-to-point exchange, on the benchmark's own communicator

struct Settings {
  std::string mode;  // capture | resume
  std::string root, persistent;
  std::uint64_t size = std::uint64_t{1} << 30;
  std::uint64_t tensor_bytes = std::uint64_t{16} << 20;
  std::size_t transfer_block = std::size_t{16} << 20;
  int repeat = 5;
  double pace_gbps = 0;  // resume: decimal GB/s per rank for first reads of the persistent store; 0: none
  bool json = false;
  std::string transport = "mpi";  // the tiers' communicator and the raw baseline's: mpi, or gloo bootstrapped over MPI
  std::uint64_t replicated = 0;   // capture: bytes of a tensor every rank holds the same of, besides the state
  bool canary = true;             // declared replicated (the SDC canary compares it), or saved as each rank's own
  int parity_group = 0, parity_losses = 1;  // parity groups instead of one replica (spec/TIERS.md 12); 0: replicas
  bool live = false;  // capture: each rank also holds its sources' state live; the canary compares it (spec/TIERS.md 11.1)
};

// The tiers' communicator (and the raw baseline's, a second one of the same kind): an MPI_Comm_dup, or
// a GlooComm connected through MPI (spec/TIERS.md 4.7), so both paths are measured the same way.
struct BenchComm {
  std::optional<ckpt::MpiComm> mpi;
#if CKPT_BENCH_HAVE_GLOO
  std::unique_ptr<ckpt::GlooComm> gloo;
#endif
  [[nodiscard]] ckpt::CommRef ref() {
#if CKPT_BENCH_HAVE_GLOO
    if (gloo) return ckpt::CommRef(*gloo);
#endif
    return ckpt::CommRef(*mpi);
  }
};

BenchComm open_comm(const std::string& transport) {
  BenchComm c;
  auto dup = ckpt::MpiComm::duplicate(MPI_COMM_WORLD);
  check(dup.status(), "MPI_Comm_dup");
  c.mpi.emplace(std::move(*dup));
  if (transport == "gloo") {
#if CKPT_BENCH_HAVE_GLOO
    ckpt::GlooCommOptions o;
    if (std::getenv("CKPT_GLOO_IFACE") == nullptr && std::getenv("GLOO_SOCKET_IFNAME") == nullptr) o.hostname = "127.0.0.1";  // one machine
    auto g = ckpt::GlooComm::connect(*c.mpi, o);
    check(g.status(), "gloo connect");
    c.gloo = std::move(*g);
#else
    throw ckpt::bench::BenchError("this build has no gloo (libgloo-dev): --transport gloo is not available");
#endif
  }
  return c;
}

// Nanoseconds of CLOCK_REALTIME: one clock for every process on the machine, so ranks' moments compare.
std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}
double seconds_between(std::int64_t from, std::int64_t to) { return static_cast<double>(to - from) * 1e-9; }

// This process's own resident bytes, its anonymous memory (/proc/self/status RssAnon: a staging pool, not the
// memory root's files it maps, which the memory root's size counts), and its peak resident bytes (VmHWM).
std::pair<std::uint64_t, std::uint64_t> resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  std::uint64_t rss = 0, peak = 0;
  while (std::getline(in, line)) {
    const auto kib = [&] { return std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10) * 1024; };
    if (line.rfind("RssAnon:", 0) == 0) rss = kib();
    if (line.rfind("VmHWM:", 0) == 0) peak = kib();
  }
  return {rss, peak};
}

// User and system CPU seconds of this process, all threads: with 4 simulated nodes on few cores, how much
// of a wall time was work, and how much of that the kernel's (page faults, tmpfs pages).
nlohmann::json cpu_now() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return {{"user_s", double(u.ru_utime.tv_sec) + double(u.ru_utime.tv_usec) * 1e-6},
          {"sys_s", double(u.ru_stime.tv_sec) + double(u.ru_stime.tv_usec) * 1e-6}};
}
// The calling thread's minor page faults and system CPU seconds: what step() spends in the kernel.
// The calling thread's minor faults, system and user CPU seconds so far.
struct ThreadTimes {
  long minor_faults = 0;
  double sys_s = 0, user_s = 0;
};
ThreadTimes thread_times() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return {u.ru_minflt, double(u.ru_stime.tv_sec) + double(u.ru_stime.tv_usec) * 1e-6,
          double(u.ru_utime.tv_sec) + double(u.ru_utime.tv_usec) * 1e-6};
}
double cpu_between(const ThreadTimes& a, const ThreadTimes& b) { return (b.sys_s + b.user_s) - (a.sys_s + a.user_s); }
nlohmann::json cpu_since(const nlohmann::json& before) {
  const nlohmann::json now = cpu_now();
  return {{"user_s", now["user_s"].get<double>() - before["user_s"].get<double>()},
          {"sys_s", now["sys_s"].get<double>() - before["sys_s"].get<double>()}};
}

// Each member of `now` less the same member of `before` (counters of seconds).
nlohmann::json seconds_since(nlohmann::json now, const nlohmann::json& before) {
  for (auto it = now.begin(); it != now.end(); ++it) *it = it->get<double>() - before[it.key()].get<double>();
  return now;
}

// --- The state: every rank's own tensors, the same bytes in capture and resume -------------------------

struct Layout {
  int world = 1, rank = 0;
  std::uint64_t per_rank = 0;              // bytes of tensors each rank holds
  std::vector<std::uint64_t> tensor_sizes;  // bytes of each of this rank's tensors
};

Layout layout_for(const Settings& s, int world, int rank) {
  Layout l;
  l.world = world, l.rank = rank;
  l.per_rank = s.size / static_cast<std::uint64_t>(world) / 4096 * 4096;
  for (std::uint64_t done = 0; done < l.per_rank;) {
    const std::uint64_t n = std::min(s.tensor_bytes, l.per_rank - done);
    l.tensor_sizes.push_back(n);
    done += n;
  }
  return l;
}

std::string tensor_name(int rank, std::size_t i) { return "rank" + std::to_string(rank) + "/t" + std::to_string(i); }

// Random bytes for the rank, with each tensor's first word marking the step, so every capture differs.
void fill_state(unsigned char* data, const Layout& l) { ckpt::bench::fill_random(data, l.per_rank, 0x71e25 + static_cast<std::uint64_t>(l.rank)); }
void stamp_step(unsigned char* data, const Layout& l, std::uint64_t step) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < l.tensor_sizes.size(); ++i) {
    const std::uint64_t mark = step * 0x9E3779B97F4A7C15ull ^ i;
    std::memcpy(data + off, &mark, std::min<std::uint64_t>(8, l.tensor_sizes[i]));
    off += l.tensor_sizes[i];
  }
}

ckpt::tiers::TierOptions tier_options(const Settings& s, const Layout& l, std::uint64_t persist_every) {
  ckpt::tiers::TierOptions o;
  o.memory_root = s.root + "/node-n" + std::to_string(l.rank);
  o.persistent = s.persistent;
  o.memory_every = 1;
  o.persist_every = persist_every;
  o.replicas = s.parity_group != 0 ? 0 : 1;
  o.parity_group = s.parity_group, o.parity_losses = s.parity_losses;
  o.memory_keep = 2;
  o.transfer_block = s.transfer_block;
  o.when_busy = ckpt::WhenBusy::wait;  // each capture measured whole, none skipped
  ckpt::tiers::Topology t;
  for (int r = 0; r < l.world; ++r) t.node_of_rank.push_back("n" + std::to_string(r));
  o.topology = t;
  return o;
}

// Bytes allocated under a directory (tmpfs: the memory the files take), and the largest shard file.
struct DirUsage {
  std::uint64_t allocated = 0, largest_shard = 0;
};
DirUsage usage_of(const std::string& dir) {
  DirUsage u;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    u.allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
    if (it->path().extension() == ".ckpt") u.largest_shard = std::max<std::uint64_t>(u.largest_shard, static_cast<std::uint64_t>(st.st_size));
  }
  return u;
}

// PosixFs, counting the wall time its calls take by kind (where a capture's background work or a
// load spends its time), and optionally pacing: the first read of each byte of a file under
// `paced_root` waits as a link of `rate` bytes/s would (per process, i.e. per node here), standing
// for shared storage at scale. Re-reads are free, as from a client's cache; the memory tier is never paced.
class BenchFs {
 public:
  enum Kind { kRead, kMap, kWrite, kSync, kMeta, kKinds };
  static constexpr const char* kKindNames[kKinds] = {"pread", "map", "pwrite", "sync", "metadata"};

  BenchFs(std::string paced_root, double rate) : root_(std::move(paced_root)), rate_(rate) {
    if (rate_ <= 0) return;
    // The link of io/paced_fs.hpp, this process's own: its state file is unlinked at once (the descriptor holds it).
    const std::string state = (std::filesystem::temp_directory_path() / ("ckpt-bench-link-" + std::to_string(::getpid()))).string();
    auto link = ckpt::StorageLink::open(state, rate_);
    check(link.status(), "the paced store's link");
    ::unlink(state.c_str());
    link_ = std::move(*link);
  }

 private:
  // Defined before the calls that use it (its return type is deduced).
  template <class Call>
  auto timed(Kind kind, const Call& call) {
    const auto start = std::chrono::steady_clock::now();
    auto r = call();
    ns_[kind] += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

 public:

  ckpt::Result<ckpt::FileHandle> open(const std::string& path, ckpt::OpenMode mode) {
    auto f = timed(kMeta, [&] { return fs_.open(path, mode); });
    if (f.ok() && rate_ > 0 && (path == root_ || path.rfind(root_ + "/", 0) == 0)) {
      std::lock_guard<std::mutex> lock(mutex_);
      paced_[f->id] = path;
    }
    return f;
  }
  ckpt::Status close(ckpt::FileHandle f) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paced_.erase(f.id);
    }
    return timed(kMeta, [&] { return fs_.close(f); });
  }
  ckpt::Result<std::size_t> pread(ckpt::FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    auto r = timed(kRead, [&] { return fs_.pread(f, buf, n, off); });
    if (r.ok()) charge(f, off, *r);
    return r;
  }
  ckpt::Result<ckpt::Mapping> map(ckpt::FileHandle f, std::uint64_t off, std::size_t n, ckpt::MapMode mode = ckpt::MapMode::read_only) {
    auto m = timed(kMap, [&] { return fs_.map(f, off, n, mode); });
    if (m.ok()) charge(f, off, n);  // a mapping is read in full by the reader that asked for it
    return m;
  }
  ckpt::Status pwrite(ckpt::FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    return timed(kWrite, [&] { return fs_.pwrite(f, buf, n, off); });
  }
  ckpt::Status sync(ckpt::FileHandle f) { return timed(kSync, [&] { return fs_.sync(f); }); }
  ckpt::Status sync_data(ckpt::FileHandle f) { return timed(kSync, [&] { return fs_.sync_data(f); }); }
  ckpt::Result<std::uint64_t> file_size(ckpt::FileHandle f) { return timed(kMeta, [&] { return fs_.file_size(f); }); }
  ckpt::Status truncate(ckpt::FileHandle f, std::uint64_t size) { return timed(kMeta, [&] { return fs_.truncate(f, size); }); }
  ckpt::Status rename(const std::string& from, const std::string& to) { return timed(kMeta, [&] { return fs_.rename(from, to); }); }
  ckpt::Status unlink(const std::string& path) { return timed(kMeta, [&] { return fs_.unlink(path); }); }
  ckpt::Status mkdir(const std::string& path) { return timed(kMeta, [&] { return fs_.mkdir(path); }); }
  ckpt::Status rmdir(const std::string& path) { return timed(kMeta, [&] { return fs_.rmdir(path); }); }
  ckpt::Status sync_dir(const std::string& path) { return timed(kSync, [&] { return fs_.sync_dir(path); }); }
  ckpt::Result<std::vector<std::string>> list_dir(const std::string& path) { return timed(kMeta, [&] { return fs_.list_dir(path); }); }
  ckpt::Result<ckpt::PathInfo> stat(const std::string& path) { return timed(kMeta, [&] { return fs_.stat(path); }); }
  ckpt::Result<ckpt::FileHandle> lock(const std::string& path) { return timed(kMeta, [&] { return fs_.lock(path); }); }

  [[nodiscard]] std::uint64_t paced_bytes() const { return paced_bytes_; }
  [[nodiscard]] double waited_s() const { return waited_s_; }
  // Seconds spent in each kind of call (all threads) since construction; pacing waits are not in them.
  [[nodiscard]] nlohmann::json call_seconds() const {
    nlohmann::json j;
    for (int k = 0; k < kKinds; ++k) j[kKindNames[k]] = static_cast<double>(ns_[k].load()) * 1e-9;
    return j;
  }

 private:
  static constexpr std::uint64_t kPage = 4096;
  void charge(ckpt::FileHandle f, std::uint64_t off, std::uint64_t n) {
    if (n == 0) return;
    std::uint64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = paced_.find(f.id);
      if (it == paced_.end()) return;
      auto& seen = seen_[it->second];
      const std::uint64_t first = off / kPage, end = (off + n + kPage - 1) / kPage;
      if (seen.size() < end) seen.resize(end, false);
      std::uint64_t fresh = 0;
      for (std::uint64_t p = first; p < end; ++p)
        if (!seen[p]) seen[p] = true, ++fresh;
      if (fresh == 0) return;
      bytes = std::min(fresh * kPage, n);
      paced_bytes_ += bytes;
    }
    const auto asked = std::chrono::steady_clock::now();
    check(link_->transfer(bytes), "the paced store's link");
    std::lock_guard<std::mutex> lock(mutex_);
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  }

  ckpt::PosixFs fs_;
  std::string root_;
  double rate_;
  std::atomic<std::int64_t> ns_[kKinds] = {};
  std::mutex mutex_;
  std::map<std::int64_t, std::string> paced_;      // open handles under root_
  std::map<std::string, std::vector<bool>> seen_;  // pages of each file read before
  std::unique_ptr<ckpt::StorageLink> link_;  // when rate_ > 0
  std::uint64_t paced_bytes_ = 0;
  double waited_s_ = 0;
};

// --- capture ---------------------------------------------------------------------------------------------

// When each named phase of the current capture began (TierOptions::on_phase, the saver's worker thread).
class PhaseClock {
 public:
  void mark(const char* phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    at_[phase] = now_ns();
  }
  [[nodiscard]] bool reached(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    return at_.count(phase) != 0;
  }
  [[nodiscard]] std::int64_t at(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = at_.find(phase);
    if (it == at_.end()) throw ckpt::bench::BenchError("the capture never reached phase '" + phase + "'");
    return it->second;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    at_.clear();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::int64_t> at_;
};

// Each rank sends `bytes` to every holder of its shard in `block` messages while receiving the same
// from every rank whose shard it holds: the replication's traffic without the store (spec/TIERS.md 4.1).
// With a `sink`, the receiver also writes each message into that new file (then fsync, unlink): the
// traffic and the receiving memory root's writes, as replication has them, without the store's format.
void raw_exchange(ckpt::CommRef comm, const ckpt::tiers::Placement& placement, const unsigned char* data, std::uint64_t bytes,
                  std::size_t block, std::string& buffer, const std::string& sink = std::string()) {
  const int me = comm.rank();
  ckpt::Status sent;
  std::thread sender([&] {
    for (int h : placement.holders[static_cast<std::size_t>(me)])
      for (std::uint64_t done = 0; done < bytes && sent.ok();) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, bytes - done));
        sent = comm.send(std::string_view(reinterpret_cast<const char*>(data) + done, n), h, kRawTag);
        done += n;
      }
  });
  ckpt::Status received;
  int fd = -1;
  if (!sink.empty()) {
    fd = ::open(sink.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) received = ckpt::make_error(ckpt::Code::io, "create " + sink + ": " + std::strerror(errno));
  }
  std::uint64_t written = 0;
  for (int source : placement.held_by(me))
    for (std::uint64_t done = 0; done < bytes && received.ok();) {
      received = comm.recv(buffer, source, kRawTag);
      done += buffer.size();
      if (buffer.empty()) received = ckpt::make_error(ckpt::Code::io, "empty message");
      if (fd >= 0 && received.ok()) {
        ckpt::bench::write_all(fd, reinterpret_cast<const unsigned char*>(buffer.data()), buffer.size(), written, sink);
        written += buffer.size();
      }
    }
  if (fd >= 0) {
    ckpt::bench::fsync_or_throw(fd, sink);
    ::close(fd);
  }
  sender.join();
  check(sent, "raw send");
  check(received, "raw recv");
}

// Copies n bytes as a capture that hashed while it copied would: each 256 KiB window into its 1 MiB chunk's XXH3
// right after its copy (the store's chunk size, spec/FORMAT.md); returns the digests folded, to keep them.
std::uint64_t copy_hashing(unsigned char* dst, const unsigned char* src, std::size_t n) {
  constexpr std::size_t kWindow = std::size_t{256} << 10, kChunk = std::size_t{1} << 20;
  ckpt::StreamHasher h;
  std::uint64_t folded = 0;
  for (std::size_t at = 0; at < n;) {
    const std::size_t part = std::min(kWindow, n - at);
    std::memcpy(dst + at, src + at, part);
    h.update(dst + at, part);
    at += part;
    if (at % kChunk == 0 || at == n) folded ^= h.digest(), h.reset();
  }
  return folded;
}

nlohmann::json run_capture(const Settings& s, ckpt::MpiComm& bench, const Layout& l) {
  const int rounds = s.repeat;
  const std::uint64_t last = static_cast<std::uint64_t>(rounds) + 2;  // 1: first capture, 2..rounds+1 timed, last: promoted
  BenchFs fs(s.persistent, 0);
  BenchComm tiers_comm = open_comm(s.transport);  // the tiers' own: the loop must not use it
  BenchComm raw_comm = open_comm(s.transport);    // the baseline's, of the same kind
  PhaseClock phases;
  auto options = tier_options(s, l, last);
  options.on_phase = [&](const char* phase, std::uint64_t) { phases.mark(phase); };
  ckpt::CommRef tiers_ref = tiers_comm.ref();
  auto created = ckpt::tiers::TieredCheckpointer::create(fs, tiers_ref, options);
  check(created.status(), "create");
  auto& tiers = **created;

  ckpt::bench::Buffer state(static_cast<std::size_t>(l.per_rank)), staging(static_cast<std::size_t>(l.per_rank));
  // A second target allocated as the staging pool allocates its block (staging_pool.hpp): aligned
  // operator new, every page touched, no huge-page advice.
  const std::size_t bytes = static_cast<std::size_t>(l.per_rank);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> plain(
      static_cast<unsigned char*>(::operator new(bytes, std::align_val_t{4096})),
      [](unsigned char* p) { ::operator delete(p, std::align_val_t{4096}); });
  for (std::size_t off = 0; off < bytes; off += 4096) plain.get()[off] = 0;
  const std::string scratch_file = ckpt::tiers::layout::rank_dir(options.memory_root, static_cast<std::uint32_t>(l.rank)) + "/bench-write";
  fill_state(state.data(), l);
  std::string buffer;
  // A tensor every rank holds the same bytes of: declared replicated, the canary compares every rank's copy
  // (spec/TIERS.md 11); --no-canary saves the same bytes as each rank's own tensor, the baseline.
  std::vector<unsigned char> replicated(static_cast<std::size_t>(s.replicated / 4 * 4));
  for (std::size_t i = 0; i < replicated.size(); ++i) replicated[i] = static_cast<unsigned char>(i * 131 + 7);
  // --live: the state of each rank whose replica this rank keeps, as that rank holds it (a data-parallel layout),
  // stamped as that rank stamps it; the canary hashes it in step() and compares it with the owner's digests.
  std::vector<std::pair<Layout, std::unique_ptr<ckpt::bench::Buffer>>> live;
  if (s.live)
    for (int source : tiers.placement().held_by(l.rank)) {
      live.emplace_back(layout_for(s, l.world, source), std::make_unique<ckpt::bench::Buffer>(static_cast<std::size_t>(l.per_rank)));
      fill_state(live.back().second->data(), live.back().first);
    }
  const auto fill = [&](ckpt::SaveRequest& r) {
    for (auto& [owner, held] : live) {
      stamp_step(held->data(), owner, r.step());
      std::uint64_t at = 0;
      for (std::size_t i = 0; i < owner.tensor_sizes.size(); ++i) {
        r.add_live_copy(tensor_name(owner.rank, i), {0}, held->data() + at, static_cast<std::size_t>(owner.tensor_sizes[i]), owner.rank);
        at += owner.tensor_sizes[i];
      }
    }
    std::uint64_t off = 0;
    for (std::size_t i = 0; i < l.tensor_sizes.size(); ++i) {
      r.add_tensor(tensor_name(l.rank, i), ckpt::DType::F32, {l.tensor_sizes[i] / 4}, state.data() + off, static_cast<std::size_t>(l.tensor_sizes[i]));
      off += l.tensor_sizes[i];
    }
    if (replicated.empty()) return;
    if (s.canary) r.add_replicated_tensor("replicated", ckpt::DType::F32, {replicated.size() / 4}, replicated.data(), replicated.size());
    else r.add_tensor("replicated-" + std::to_string(l.rank), ckpt::DType::F32, {replicated.size() / 4}, replicated.data(), replicated.size());
  };
  nlohmann::json out;
  auto capture = [&](std::uint64_t step) {
    stamp_step(state.data(), l, step);
    phases.clear();
    quiet_barrier(bench.native());
    const ThreadTimes k0 = thread_times();
    const std::int64_t t0 = now_ns();
    auto outcome = tiers.step(step, fill);
    const std::int64_t t1 = now_ns();
    const ThreadTimes k1 = thread_times();
    const nlohmann::json cpu0 = cpu_now(), fs0 = fs.call_seconds();
    check(outcome.status(), "step " + std::to_string(step));
    check(tiers.wait(), "wait after step " + std::to_string(step));
    const std::int64_t t2 = now_ns();
    const nlohmann::json background_cpu = cpu_since(cpu0);
    const nlohmann::json background_fs = seconds_since(fs.call_seconds(), fs0);
    nlohmann::json encoding = phases.reached("encoding") ? nlohmann::json(phases.at("encoding")) : nlohmann::json();
    return nlohmann::json{{"step", step},
                          {"encoding_ns", encoding},
                          {"start_ns", t0},
                          {"stall_s", seconds_between(t0, t1)},
                          {"stall_reported_s", std::chrono::duration<double>(outcome->stall).count()},
                          {"stall_minor_faults", k1.minor_faults - k0.minor_faults},
                          {"stall_sys_s", k1.sys_s - k0.sys_s},
                          {"stall_cpu_s", cpu_between(k0, k1)},  // on a core; the rest of stall_s it waited for one
                          {"returned_ns", t1},
                          {"captured_ns", phases.at("captured")},
                          {"replicating_ns", phases.at("replicating")},
                          {"waited_ns", t2},
                          {"background_cpu", background_cpu},
                          {"background_fs_s", background_fs}};
  };

  // The first capture allocates and pre-faults the staging pool (and checks free space, collectively).
  const auto before = resident_bytes();
  out["first"] = capture(1);
  const auto after = resident_bytes();
  out["rss_before_first"] = before.first;
  out["rss_after_first"] = after.first;
  raw_exchange(raw_comm.ref(), tiers.placement(), state.data(), l.per_rank, s.transfer_block, buffer);  // untimed: faults the receive buffer

  out["rounds"] = nlohmann::json::array();
  for (int i = 0; i < rounds; ++i) {
    nlohmann::json round;
    // The staging copy limit: the same bytes into a pre-faulted buffer, every rank at once as step() does.
    quiet_barrier(bench.native());
    const ThreadTimes c0 = thread_times();
    std::int64_t t0 = now_ns();
    std::memcpy(staging.data(), state.data(), bytes);
    ckpt::bench::keep(staging.data()[bytes - 1]);
    round["copy_s"] = seconds_between(t0, now_ns());
    round["copy_cpu_s"] = cpu_between(c0, thread_times());
    quiet_barrier(bench.native());
    t0 = now_ns();
    std::memcpy(plain.get(), state.data(), bytes);
    ckpt::bench::keep(plain.get()[bytes - 1]);
    round["copy_small_pages_s"] = seconds_between(t0, now_ns());
    // A capture that hashed as it copied (spec/TIERS.md 2.1, "hashing at capture"): each 256 KiB window hashed
    // into its 1 MiB chunk's XXH3 right after its copy, while it is in cache.
    quiet_barrier(bench.native());
    t0 = now_ns();
    ckpt::bench::keep(static_cast<unsigned char>(copy_hashing(staging.data(), state.data(), bytes)));
    round["copy_hashed_s"] = seconds_between(t0, now_ns());
    round["capture"] = capture(static_cast<std::uint64_t>(i) + 2);
    // The communicator's own rate between the same pairs.
    quiet_barrier(bench.native());
    t0 = now_ns();
    const nlohmann::json cpu0 = cpu_now();
    raw_exchange(raw_comm.ref(), tiers.placement(), state.data(), l.per_rank, s.transfer_block, buffer);
    round["raw_cpu"] = cpu_since(cpu0);
    round["raw_start_ns"] = t0;
    round["raw_end_ns"] = now_ns();
    // The same traffic, the receiver writing each message into its memory root as it arrives.
    quiet_barrier(bench.native());
    t0 = now_ns();
    raw_exchange(raw_comm.ref(), tiers.placement(), state.data(), l.per_rank, s.transfer_block, buffer, scratch_file);
    round["raw_write_s"] = seconds_between(t0, now_ns());
    ckpt::bench::remove_if_present(scratch_file);
    // What a receiving rank's memory root takes: the same bytes written into a new file there.
    quiet_barrier(bench.native());
    t0 = now_ns();
    ckpt::bench::raw_write_file(scratch_file, state.data(), bytes, std::size_t{8} << 20);
    round["memory_write_s"] = seconds_between(t0, now_ns());
    ckpt::bench::remove_if_present(scratch_file);
    out["rounds"].push_back(round);
  }
  out["last"] = capture(last);
  out["last"]["promoting_ns"] = phases.at("promoting");
  if (tiers.steps_persisted() != last) throw ckpt::bench::BenchError("step " + std::to_string(last) + " was not persisted");

  const auto own = usage_of(ckpt::tiers::layout::own_store(options.memory_root, static_cast<std::uint32_t>(l.rank)));
  const auto parity = usage_of(ckpt::memory_layout::parity_store(options.memory_root, static_cast<std::uint32_t>(l.rank)));
  const auto all = usage_of(options.memory_root);
  const auto end = resident_bytes();
  out["memory"] = {{"memory_root_bytes", all.allocated},
                   {"own_store_bytes", own.allocated},
                   {"held_bytes", all.allocated - own.allocated - parity.allocated},
                   {"parity_bytes", parity.allocated},
                   {"own_shard_file_bytes", own.largest_shard},
                   {"held_shards", tiers.placement().held_by(l.rank).size()},
                   {"steps_kept", options.memory_keep},
                   {"rss_end", end.first},
                   {"rss_peak", end.second},
                   {"state_and_copy_buffers", 2 * l.per_rank}};
  out["holders"] = tiers.placement().holders[static_cast<std::size_t>(l.rank)];
  return out;
}

// --- resume ----------------------------------------------------------------------------------------------

nlohmann::json run_resume(const Settings& s, const Layout& l, std::int64_t main_ns, std::int64_t init_start_ns, std::int64_t init_end_ns) {
  nlohmann::json out;
  out["main_ns"] = main_ns;
  out["init_start_ns"] = init_start_ns;
  out["init_end_ns"] = init_end_ns;
  // The model's memory, as a restarted job has it before loading (allocated, pages touched).
  ckpt::bench::Buffer state(static_cast<std::size_t>(l.per_rank));
  out["alloc_end_ns"] = now_ns();
  BenchFs fs(s.persistent, s.pace_gbps * 1e9);
  BenchComm comm = open_comm(s.transport);
  ckpt::CommRef ref = comm.ref();
  auto created = ckpt::tiers::TieredCheckpointer::create(fs, ref, tier_options(s, l, 0));
  check(created.status(), "create");
  out["create_end_ns"] = now_ns();
  const nlohmann::json cpu0 = cpu_now(), fs0 = fs.call_seconds();
  nlohmann::json load_cpu, load_fs;
  std::int64_t loaded_ns = 0, view_ns = 0;
  auto resumed = (*created)->resume([&](ckpt::tiers::TierView& v) -> ckpt::Status {
    view_ns = now_ns();  // the step agreed and its copies fetched: what is left is the read itself
    std::uint64_t off = 0;
    for (std::size_t i = 0; i < l.tensor_sizes.size(); ++i) {
      CKPT_TRY(v.read_tensor(tensor_name(l.rank, i), state.data() + off, static_cast<std::size_t>(l.tensor_sizes[i])));
      off += l.tensor_sizes[i];
    }
    loaded_ns = now_ns();
    load_cpu = cpu_since(cpu0);
    load_fs = seconds_since(fs.call_seconds(), fs0);
    return ckpt::Status();
  });
  out["resume_end_ns"] = now_ns();
  check(resumed.status(), "resume");
  if (resumed->fresh) throw ckpt::bench::BenchError("nothing to resume under " + s.root + " or " + s.persistent + ": run capture first");
  out["loaded_ns"] = loaded_ns;
  out["view_ns"] = view_ns;
  out["load_cpu"] = load_cpu;
  out["load_fs_s"] = load_fs;
  out["step"] = resumed->step;
  out["sources"] = resumed->sources;
  out["setbacks"] = resumed->setbacks;
  out["paced_bytes"] = fs.paced_bytes();
  out["paced_wait_s"] = fs.waited_s();
  // Every byte as capture saved it at that step.
  ckpt::bench::Buffer expected(static_cast<std::size_t>(l.per_rank));
  fill_state(expected.data(), l);
  stamp_step(expected.data(), l, resumed->step);
  if (std::memcmp(expected.data(), state.data(), static_cast<std::size_t>(l.per_rank)) != 0)
    throw ckpt::bench::BenchError("rank " + std::to_string(l.rank) + ": the loaded state differs from step " + std::to_string(resumed->step));
  return out;
}

// --- Summaries (rank 0) ----------------------------------------------------------------------------------

double median_of(std::vector<double> v) { return ckpt::bench::summarize(std::move(v)).median; }

// The capture figures of one job: per capture the slowest rank's blocking, and the span from the first
// rank starting to the last rank finishing for the collective work.
nlohmann::json summarize_capture(const std::vector<nlohmann::json>& ranks, const Settings& s, const Layout& l) {
  nlohmann::json j;
  const std::size_t rounds = ranks[0]["rounds"].size();
  std::vector<double> stall_faults, stall_sys;  // the training thread's, during step(): the most of any rank
  // The slowest rank's step(): its training thread's CPU, and the rest of the stall, spent waiting for a core;
  // the slowest rank's plain copy the same way.
  std::vector<double> stall_cpu, stall_waiting, copy_cpu, copy_waiting;
  std::vector<double> copy, copy_small, copy_hashed, memory_write, stall, stall_reported, commit, replicate, raw, agreement, encoding;
  std::vector<double> background_user, background_sys, raw_cpu, raw_write;
  std::map<std::string, std::vector<double>> background_fs;  // per kind of call, per capture, all ranks
  for (std::size_t i = 0; i < rounds; ++i) {
    double sf = 0, ss = 0, slowest_stall = -1, slowest_copy = -1, scpu = 0, swait = 0, ccpu = 0, cwait = 0;
    double c = 0, cs = 0, ch = 0, mw = 0, st = 0, sr = 0, cm = 0, bu = 0, bs = 0, rc = 0, rw = 0;
    std::int64_t rep_from = INT64_MAX, rep_to = 0, raw_from = INT64_MAX, raw_to = 0, agree_from = INT64_MAX, agree_to = 0;
    std::int64_t encode_from = INT64_MAX, encode_to = 0;
    for (const auto& r : ranks) {
      const auto& round = r["rounds"][i];
      const auto& cap = round["capture"];
      c = std::max(c, round["copy_s"].get<double>());
      cs = std::max(cs, round["copy_small_pages_s"].get<double>());
      ch = std::max(ch, round["copy_hashed_s"].get<double>());
      mw = std::max(mw, round["memory_write_s"].get<double>());
      rw = std::max(rw, round["raw_write_s"].get<double>());
      st = std::max(st, cap["stall_s"].get<double>());
      if (cap["stall_s"].get<double>() > slowest_stall) {
        slowest_stall = cap["stall_s"].get<double>();
        scpu = cap["stall_cpu_s"].get<double>(), swait = std::max(0.0, slowest_stall - scpu);
      }
      if (round["copy_s"].get<double>() > slowest_copy) {
        slowest_copy = round["copy_s"].get<double>();
        ccpu = round["copy_cpu_s"].get<double>(), cwait = std::max(0.0, slowest_copy - ccpu);
      }
      sf = std::max(sf, cap["stall_minor_faults"].get<double>());
      ss = std::max(ss, cap["stall_sys_s"].get<double>());
      sr = std::max(sr, cap["stall_reported_s"].get<double>());
      cm = std::max(cm, seconds_between(cap["returned_ns"].get<std::int64_t>(), cap["captured_ns"].get<std::int64_t>()));
      for (auto it = cap["background_fs_s"].begin(); it != cap["background_fs_s"].end(); ++it) {
        auto& v = background_fs[it.key()];
        if (v.size() <= i) v.resize(i + 1, 0.0);
        v[i] += it->get<double>();
      }
      bu += cap["background_cpu"]["user_s"].get<double>();
      bs += cap["background_cpu"]["sys_s"].get<double>();
      rc += round["raw_cpu"]["user_s"].get<double>() + round["raw_cpu"]["sys_s"].get<double>();
      agree_from = std::min(agree_from, cap["captured_ns"].get<std::int64_t>());
      agree_to = std::max(agree_to, cap["replicating_ns"].get<std::int64_t>());
      rep_from = std::min(rep_from, cap["replicating_ns"].get<std::int64_t>());
      if (!cap["encoding_ns"].is_null()) {
        encode_from = std::min(encode_from, cap["encoding_ns"].get<std::int64_t>());
        encode_to = std::max(encode_to, cap["replicating_ns"].get<std::int64_t>());
      }
      rep_to = std::max(rep_to, cap["waited_ns"].get<std::int64_t>());
      raw_from = std::min(raw_from, round["raw_start_ns"].get<std::int64_t>());
      raw_to = std::max(raw_to, round["raw_end_ns"].get<std::int64_t>());
    }
    background_user.push_back(bu), background_sys.push_back(bs), raw_cpu.push_back(rc), raw_write.push_back(rw);
    stall_faults.push_back(sf), stall_sys.push_back(ss);
    stall_cpu.push_back(scpu), stall_waiting.push_back(swait), copy_cpu.push_back(ccpu), copy_waiting.push_back(cwait);
    copy.push_back(c), copy_small.push_back(cs), copy_hashed.push_back(ch), memory_write.push_back(mw), stall.push_back(st), stall_reported.push_back(sr), commit.push_back(cm);
    replicate.push_back(seconds_between(rep_from, rep_to)), raw.push_back(seconds_between(raw_from, raw_to));
    agreement.push_back(seconds_between(agree_from, agree_to));
    encoding.push_back(encode_to > 0 ? seconds_between(encode_from, encode_to) : 0.0);
  }
  double first_stall = 0, promote = 0;
  std::int64_t promote_from = INT64_MAX, promote_to = 0;
  for (const auto& r : ranks) {
    first_stall = std::max(first_stall, r["first"]["stall_s"].get<double>());
    promote_from = std::min(promote_from, r["last"]["promoting_ns"].get<std::int64_t>());
    promote_to = std::max(promote_to, r["last"]["waited_ns"].get<std::int64_t>());
  }
  promote = seconds_between(promote_from, promote_to);
  j["world"] = l.world;
  j["size"] = s.size;
  j["per_rank_bytes"] = l.per_rank;
  j["tensors_per_rank"] = l.tensor_sizes.size();
  j["tensor_bytes"] = s.tensor_bytes;
  j["transfer_block"] = s.transfer_block;
  j["captures"] = rounds;
  j["unit"] = "seconds; per capture the slowest rank (blocking) or first start to last finish (collective work); medians over captures";
  j["staging_copy_s"] = copy;
  j["staging_copy_small_pages_s"] = copy_small;
  j["copy_hashed_s"] = copy_hashed;  // the same copy, each 256 KiB hashed into its chunk's digest as it lands
  j["memory_write_s"] = memory_write;
  j["background_cpu_note"] = "CPU seconds of all ranks (user, sys) from step()'s return to wait()'s: commit, replication, bookkeeping";
  j["background_user_s"] = background_user;
  j["background_sys_s"] = background_sys;
  j["raw_p2p_cpu_s"] = raw_cpu;
  j["raw_p2p_write_s"] = raw_write;
  j["background_fs_s"] = background_fs;
  j["stall_s"] = stall;
  j["stall_reported_s"] = stall_reported;
  j["stall_minor_faults"] = stall_faults;
  j["stall_sys_s"] = stall_sys;
  j["stall_cpu_s"] = stall_cpu;
  j["stall_waiting_s"] = stall_waiting;
  j["staging_copy_cpu_s"] = copy_cpu;
  j["staging_copy_waiting_s"] = copy_waiting;
  j["commit_s"] = commit;
  j["replication_s"] = replicate;
  j["agreement_s"] = agreement;  // 'captured' to 'replicating': the capture's agreement (and the canary's comparison)
  j["replicated_bytes"] = s.replicated;
  j["live"] = s.live;
  j["parity"] = s.parity_group != 0 ? nlohmann::json{{"group", s.parity_group}, {"losses", s.parity_losses}} : nlohmann::json();
  j["encoding_s"] = encoding;  // 'encoding' to 'replicating': segments sent, parity built and committed (spec/TIERS.md 12.3)
  j["canary"] = s.canary;
  j["raw_p2p_s"] = raw;
  j["median"] = {{"staging_copy_s", median_of(copy)}, {"staging_copy_small_pages_s", median_of(copy_small)}, {"copy_hashed_s", median_of(copy_hashed)},
                 {"memory_write_s", median_of(memory_write)}, {"background_user_s", median_of(background_user)},
                 {"background_sys_s", median_of(background_sys)}, {"raw_p2p_cpu_s", median_of(raw_cpu)},
                 {"raw_p2p_write_s", median_of(raw_write)}, {"stall_s", median_of(stall)}, {"stall_reported_s", median_of(stall_reported)},
                 {"stall_minor_faults", median_of(stall_faults)}, {"stall_sys_s", median_of(stall_sys)},
                 {"stall_cpu_s", median_of(stall_cpu)}, {"stall_waiting_s", median_of(stall_waiting)},
                 {"staging_copy_cpu_s", median_of(copy_cpu)}, {"staging_copy_waiting_s", median_of(copy_waiting)},
                 {"commit_s", median_of(commit)}, {"replication_s", median_of(replicate)}, {"raw_p2p_s", median_of(raw)},
                 {"agreement_s", median_of(agreement)}, {"encoding_s", median_of(encoding)}};
  for (const auto& [kind, v] : background_fs) j["median"]["background_fs_s"][kind] = median_of(v);
  j["stall_vs_copy"] = median_of(copy) > 0 ? median_of(stall) / median_of(copy) : 0.0;
  j["replication_vs_raw_rate"] = median_of(replicate) > 0 ? median_of(raw) / median_of(replicate) : 0.0;
  j["first_capture_stall_s"] = first_stall;
  j["promotion_s"] = promote;
  nlohmann::json memory = nlohmann::json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    nlohmann::json m = ranks[r]["memory"];
    m["rank"] = r;
    m["holders"] = ranks[r]["holders"];
    m["rss_growth_first_capture"] = ranks[r]["rss_after_first"].get<std::int64_t>() - ranks[r]["rss_before_first"].get<std::int64_t>();
    memory.push_back(m);
  }
  j["memory"] = memory;
  return j;
}

// The resume figures of one job: the launch, then each rank's moments; the job's state is loaded when
// the last rank's is.
nlohmann::json summarize_resume(const std::vector<nlohmann::json>& ranks, const Settings& s, std::int64_t launch_ns) {
  nlohmann::json j;
  std::int64_t main_max = 0, create_max = 0, loaded_max = 0, end_max = 0, main_min = INT64_MAX, view_max = 0;
  double read_max = 0;
  double init_max = 0, alloc_max = 0, create_only_max = 0;
  std::uint64_t paced = 0;
  double paced_wait = 0, load_user = 0, load_sys = 0;
  nlohmann::json load_fs = nlohmann::json::object();  // seconds in each kind of file-system call, all ranks
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& r : ranks) {
    const auto g = [&](const char* k) { return r[k].get<std::int64_t>(); };
    main_max = std::max(main_max, g("main_ns"));
    main_min = std::min(main_min, g("main_ns"));
    create_max = std::max(create_max, g("create_end_ns"));
    loaded_max = std::max(loaded_max, g("loaded_ns"));
    view_max = std::max(view_max, g("view_ns"));
    read_max = std::max(read_max, seconds_between(g("view_ns"), g("loaded_ns")));
    end_max = std::max(end_max, g("resume_end_ns"));
    init_max = std::max(init_max, seconds_between(g("init_start_ns"), g("init_end_ns")));
    alloc_max = std::max(alloc_max, seconds_between(g("init_end_ns"), g("alloc_end_ns")));
    create_only_max = std::max(create_only_max, seconds_between(g("alloc_end_ns"), g("create_end_ns")));
    for (auto it = r["load_fs_s"].begin(); it != r["load_fs_s"].end(); ++it)
      load_fs[it.key()] = (load_fs.contains(it.key()) ? load_fs[it.key()].get<double>() : 0.0) + it->get<double>();
    load_user += r["load_cpu"]["user_s"].get<double>();
    load_sys += r["load_cpu"]["sys_s"].get<double>();
    paced += r["paced_bytes"].get<std::uint64_t>();
    paced_wait = std::max(paced_wait, r["paced_wait_s"].get<double>());
    sources.push_back(r["sources"]);
  }
  const bool launched = launch_ns > 0;
  const std::int64_t from = launched ? launch_ns : main_min;
  j["launch"] = launched ? "CKPT_BENCH_LAUNCH_NS (set just before mpirun was started)" : "the first rank's main() (CKPT_BENCH_LAUNCH_NS not set)";
  j["step"] = ranks[0]["step"];
  j["spawn_s"] = seconds_between(from, main_max);
  j["mpi_init_s"] = init_max;
  j["model_alloc_s"] = alloc_max;
  j["create_s"] = create_only_max;
  j["start_s"] = seconds_between(from, create_max);      // launch to every rank created (spawn, MPI_Init, allocation, create)
  j["load_s"] = seconds_between(create_max, loaded_max);  // resume() to every rank's state loaded and verified
  j["to_view_s"] = seconds_between(create_max, view_max);  // resume() to the last rank's read beginning: agreement and fetches
  j["read_max_s"] = read_max;                               // the slowest rank's read of its state through the view
  j["to_loaded_s"] = seconds_between(from, loaded_max);
  j["after_load_s"] = seconds_between(loaded_max, end_max);  // resume()'s records and refill of missing replicas
  j["load_user_s"] = load_user;  // CPU seconds of every rank during its load
  j["load_sys_s"] = load_sys;
  j["load_fs_s"] = load_fs;
  j["paced_gbps"] = s.pace_gbps;
  j["paced_bytes"] = paced;
  j["paced_wait_max_s"] = paced_wait;
  j["sources"] = sources;
  nlohmann::json setbacks = nlohmann::json::array();
  for (const auto& r : ranks)
    for (const auto& b : r["setbacks"]) setbacks.push_back(b);
  j["setbacks"] = setbacks;
  return j;
}

void print_capture(const nlohmann::json& j) {
  const auto& m = j["median"];
  const double bytes = j["per_rank_bytes"].get<double>();
  const auto gibs = [&](double s) { return s > 0 ? bytes / s / (1024.0 * 1024.0 * 1024.0) : 0.0; };
  std::printf("ckpt-bench-tiers capture: %s per rank, %d ranks, %d captures (median of the slowest rank)\n",
              ckpt::cli::human_bytes(bytes).c_str(), j["world"].get<int>(), j["captures"].get<int>());
  std::printf("  %-44s %8s %8s\n", "", "seconds", "GiB/s");
  const auto row = [&](const char* name, double s) { std::printf("  %-44s %8.4f %8.2f\n", name, s, gibs(s)); };
  row("staging copy (memcpy into pre-faulted memory)", m["staging_copy_s"].get<double>());
  row("the same, into 4 KiB pages (as the staging pool)", m["staging_copy_small_pages_s"].get<double>());
  row("the same, hashing each 256 KiB as it lands", m["copy_hashed_s"].get<double>());
  row("step() stall", m["stall_s"].get<double>());
  std::printf("    of which in the kernel (training thread, most of any rank): %.0f minor page faults, %.4f s system CPU\n",
              m["stall_minor_faults"].get<double>(), m["stall_sys_s"].get<double>());
  std::printf("    the slowest rank's training thread on a core %.4f s, waiting for one %.4f s (its plain copy: %.4f and %.4f s)\n",
              m["stall_cpu_s"].get<double>(), m["stall_waiting_s"].get<double>(), m["staging_copy_cpu_s"].get<double>(),
              m["staging_copy_waiting_s"].get<double>());
  row((j["transport"].get<std::string>() + " send/recv, same pairs").c_str(), m["raw_p2p_s"].get<double>());
  row("replication (replicating -> wait())", m["replication_s"].get<double>());
  row("write into the memory root (pwrite 8 MiB)", m["memory_write_s"].get<double>());
  row("send/recv, receiver writing into its root", m["raw_p2p_write_s"].get<double>());
  row("agreement ('captured' -> 'replicating')", m["agreement_s"].get<double>());
  if (!j["parity"].is_null()) {
    std::printf("  parity groups of %d nodes, %d losses (spec/TIERS.md 12), no replicas\n", j["parity"]["group"].get<int>(),
                j["parity"]["losses"].get<int>());
    row("parity encoding ('encoding' -> 'replicating')", m["encoding_s"].get<double>());
  }
  if (j["live"].get<bool>()) std::printf("  every rank also holds its replica sources' state live: the canary hashes it in step() (spec/TIERS.md 11.1)\n");
  if (j["replicated_bytes"].get<std::uint64_t>() > 0)
    std::printf("  a tensor of %s every rank holds, %s\n", ckpt::cli::human_bytes(j["replicated_bytes"].get<std::uint64_t>()).c_str(),
                j["canary"].get<bool>() ? "declared replicated: the SDC canary compares it" : "saved as each rank's own (--no-canary)");
  std::printf("  background CPU per capture, all ranks: user %.3f s, sys %.3f s\n", m["background_user_s"].get<double>(),
              m["background_sys_s"].get<double>());
  std::printf("  stall / staging copy %.2fx; replication rate / send-recv rate %.2fx\n", j["stall_vs_copy"].get<double>(),
              j["replication_vs_raw_rate"].get<double>());
}

void print_resume(const nlohmann::json& j) {
  std::printf("ckpt-bench-tiers resume of step %llu: start %.3f s (spawn %.3f, MPI_Init %.3f, create %.3f), load %.3f s, to loaded %.3f s\n",
              static_cast<unsigned long long>(j["step"].get<std::uint64_t>()), j["start_s"].get<double>(), j["spawn_s"].get<double>(),
              j["mpi_init_s"].get<double>(), j["create_s"].get<double>(), j["load_s"].get<double>(), j["to_loaded_s"].get<double>());
  for (const auto& r : j["sources"])
    for (const auto& src : r) std::printf("  %s\n", src.get<std::string>().c_str());
}

// `code`: ISA-L's Reed-Solomon on this machine against a memcpy of the same bytes (spec/TIERS.md 12.2), on rank 0:
// the parity of `size` bytes of shard files (m = N - K segments per stripe, K parity rows) computed all at once, and
// as the tiers build it (each holder one row, one source window of transfer_block at a time), and one lost segment
// decoded from the m others. Best of 5 runs each; per GiB of data.
int run_code(const Settings& s) {
  const int n = s.parity_group != 0 ? s.parity_group : 4, k = s.parity_group != 0 ? s.parity_losses : 1, m = n - k;
  auto code = ckpt::tiers::ErasureCode::create(n, k);
  check(code.status(), "the erasure code");
  const std::size_t segment = static_cast<std::size_t>(s.size / static_cast<std::uint64_t>(m)) / 64 * 64;
  const double gib = static_cast<double>(segment) * m / static_cast<double>(std::uint64_t{1} << 30);
  ckpt::bench::Buffer data(segment * static_cast<std::size_t>(m)), parity(segment * static_cast<std::size_t>(k)), copy(segment * static_cast<std::size_t>(m));
  for (std::size_t i = 0; i < segment * static_cast<std::size_t>(m); i += 4096) data.data()[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(parity.data(), 0, segment * static_cast<std::size_t>(k));
  std::memset(copy.data(), 0, segment * static_cast<std::size_t>(m));
  std::vector<const unsigned char*> in;
  std::vector<unsigned char*> out;
  for (int d = 0; d < m; ++d) in.push_back(data.data() + static_cast<std::size_t>(d) * segment);
  for (int p = 0; p < k; ++p) out.push_back(parity.data() + static_cast<std::size_t>(p) * segment);
  auto best = [](const std::function<void()>& f) {
    double b = 1e30;
    for (int i = 0; i < 5; ++i) {
      const std::int64_t t0 = now_ns();
      f();
      b = std::min(b, seconds_between(t0, now_ns()));
    }
    return b;
  };
  const double memcpy_s = best([&] { std::memcpy(copy.data(), data.data(), segment * static_cast<std::size_t>(m)); });
  const double encode_s = best([&] { code->encode(segment, in, out); });
  const double streamed_s = best([&] {
    std::memset(parity.data(), 0, segment * static_cast<std::size_t>(k));
    for (int p = 0; p < k; ++p)
      for (int d = 0; d < m; ++d) {
        const ckpt::tiers::GfMultiplyAdd add(code->coefficient(p, d));
        for (std::size_t off = 0; off < segment; off += s.transfer_block)
          add(in[static_cast<std::size_t>(d)] + off, std::min(s.transfer_block, segment - off), out[static_cast<std::size_t>(p)] + off);
      }
  });
  // Segment 0 lost: decoded from the other data segments and parity 0.
  std::vector<int> rows;
  for (int d = 1; d < m; ++d) rows.push_back(d);
  rows.push_back(m);
  auto coefficients = code->decoder(rows, 0);
  check(coefficients.status(), "the decoder");
  std::vector<const unsigned char*> sources;
  for (int d = 1; d < m; ++d) sources.push_back(in[static_cast<std::size_t>(d)]);
  sources.push_back(out[0]);
  const double decode_s = best([&] {
    std::memset(copy.data(), 0, segment);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const ckpt::tiers::GfMultiplyAdd add{(*coefficients)[i]};
      add(sources[i], segment, copy.data());
    }
  });
  const bool decoded = std::memcmp(copy.data(), in[0], segment) == 0;
  nlohmann::json j{{"group", n}, {"losses", k}, {"data_bytes", segment * static_cast<std::size_t>(m)}, {"segment_bytes", segment},
                   {"memcpy_s_per_gib", memcpy_s / gib}, {"encode_s_per_gib", encode_s / gib}, {"encode_as_tiers_s_per_gib", streamed_s / gib},
                   {"decode_one_segment_s", decode_s}, {"decode_one_segment_s_per_gib_of_segment", decode_s / (static_cast<double>(segment) / (1 << 30))},
                   {"encode_vs_memcpy", encode_s / memcpy_s}, {"encode_as_tiers_vs_memcpy", streamed_s / memcpy_s}, {"decoded_bit_exact", decoded}};
  if (s.json) ckpt::cli::print_json(j);
  else
    std::printf("ckpt-bench-tiers code: Reed-Solomon %d+%d (ISA-L) over %s of data\n"
                "  per GiB of data: memcpy %.3f s; parity, all %d rows at once %.3f s (%.2fx memcpy); as the tiers build it,\n"
                "  one row per holder, one %s window at a time %.3f s (%.2fx memcpy); one lost segment of %s decoded in %.3f s%s\n",
                m, k, ckpt::cli::human_bytes(static_cast<double>(segment) * m).c_str(), memcpy_s / gib, k, encode_s / gib, encode_s / memcpy_s,
                ckpt::cli::human_bytes(static_cast<double>(s.transfer_block)).c_str(), streamed_s / gib, streamed_s / memcpy_s,
                ckpt::cli::human_bytes(static_cast<double>(segment)).c_str(), decode_s, decoded ? "" : " (NOT bit-exact)");
  return decoded ? ckpt::cli::kOk : ckpt::cli::kIntegrity;
}

int run(const Settings& s, std::int64_t main_ns, std::int64_t init_start_ns, std::int64_t init_end_ns) {
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (s.mode == "code") return rank == 0 ? run_code(s) : ckpt::cli::kOk;
  if (world < 2) {
    if (rank == 0) std::fprintf(stderr, "%s: needs at least 2 ranks (one per simulated node): mpirun -np 4\n", kTool);
    return ckpt::cli::kUsage;
  }
  const Layout l = layout_for(s, world, rank);
  if (l.per_rank == 0 || s.tensor_bytes % 4 != 0 || s.tensor_bytes == 0) {
    if (rank == 0) std::fprintf(stderr, "%s: --size must give every rank at least 4 KiB; --tensor must be a positive multiple of 4\n", kTool);
    return ckpt::cli::kUsage;
  }
  // capture starts from nothing: steps already in a memory root or the persistent store would be resumed
  // history, not this run's.
  std::error_code ec;
  std::filesystem::create_directories(s.root, ec);  // the machine's tmpfs; each node's root inside is the library's
  int dirty = 0;
  if (s.mode == "capture") {
    const auto node = tier_options(s, l, 0).memory_root;
    dirty = (std::filesystem::exists(node, ec) && !std::filesystem::is_empty(node, ec)) ||
                    (std::filesystem::exists(s.persistent, ec) && !std::filesystem::is_empty(s.persistent, ec))
                ? 1
                : 0;
  }
  int any_dirty = dirty;
  MPI_Allreduce(&dirty, &any_dirty, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_dirty) {
    if (rank == 0) std::fprintf(stderr, "%s: capture needs empty memory roots under %s and an empty %s\n", kTool, s.root.c_str(), s.persistent.c_str());
    return ckpt::cli::kUsage;
  }
  std::int64_t launch_ns = 0;
  if (const char* launch = std::getenv("CKPT_BENCH_LAUNCH_NS")) launch_ns = std::strtoll(launch, nullptr, 10);
  auto bench = ckpt::MpiComm::duplicate(MPI_COMM_WORLD);
  check(bench.status(), "MPI_Comm_dup");
  const nlohmann::json mine = s.mode == "capture" ? run_capture(s, *bench, l) : run_resume(s, l, main_ns, init_start_ns, init_end_ns);
  auto gathered = bench->gather(mine.dump(), 0);
  check(gathered.status(), "gather");
  if (rank != 0) return ckpt::cli::kOk;
  std::vector<nlohmann::json> ranks;
  for (const auto& text : *gathered) ranks.push_back(nlohmann::json::parse(text));
  nlohmann::json j = s.mode == "capture" ? summarize_capture(ranks, s, l) : summarize_resume(ranks, s, launch_ns);
  j["mode"] = s.mode;
  j["transport"] = s.transport;
  j["root"] = s.root;
  j["persistent"] = s.persistent;
  j["ranks"] = ranks;
  if (s.json) ckpt::cli::print_json(j);
  else if (s.mode == "capture") print_capture(j);
  else print_resume(j);
  return ckpt::cli::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t main_ns = now_ns();
  int provided = 0;
  const std::int64_t init_start_ns = now_ns();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::int64_t init_end_ns = now_ns();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Settings s;
  std::string size_text = "1GiB", tensor_text = "16MiB", block_text = "16MiB", replicated_text = "0", parity_text;
  CLI::App app{"The memory and persistent tiers against this machine's limits, one MPI rank per simulated node\n"
               "(spec/TIERS.md). `capture` times step()'s stall against a memcpy of the same bytes and\n"
               "replication against MpiComm send/recv between the same pairs, and leaves a persisted step;\n"
               "`resume` times a fresh job from launch to state loaded from whatever the tiers hold.\n"
               "bench/bench-tiers.py runs both on the same state and prints the whole table:\n"
               "  mpirun -np 4 ckpt-bench-tiers capture --root /dev/shm/t --persistent /disk/t --size 1GiB\n"
               "  mpirun -np 4 ckpt-bench-tiers resume --root /dev/shm/t --persistent /disk/t --size 1GiB\n\n"
               "Exit status: 0 measured, 1 the loaded state differs, 2 bad arguments or an I/O error.",
               kTool};
  app.require_subcommand(1, 1);
  CLI::App* code_cmd = app.add_subcommand("code", "ISA-L's Reed-Solomon parity (encode, decode) against a memcpy of the same bytes, on rank 0");
  code_cmd->add_option("--size", size_text, "bytes of data (default 1GiB)");
  code_cmd->add_option("--parity", parity_text, "the code as N:K (group nodes : losses; default 4:1)");
  code_cmd->add_option("--transfer-block", block_text, "the window the tiers add one source's bytes in (default 16MiB)");
  code_cmd->add_flag("--json", s.json, "print a JSON document instead of the table");
  for (const char* mode : {"capture", "resume"}) {
    CLI::App* sub = app.add_subcommand(mode, std::string(mode) == "capture" ? "time captures and replication; leave a persisted step"
                                                                             : "time a fresh job's start and load");
    sub->add_option("--root", s.root, "directory holding every simulated node's memory root (node-nR), e.g. under /dev/shm")->required();
    sub->add_option("--persistent", s.persistent, "the persistent store (a directory on a disk)")->required();
    sub->add_option("--size", size_text, "bytes of state across all ranks (default 1GiB)");
    sub->add_option("--tensor", tensor_text, "bytes per tensor (default 16MiB)");
    sub->add_flag("--json", s.json, "print a JSON document (every rank's raw moments too) instead of the table");
    sub->add_option("--transport", s.transport, "the tiers' communicator and the baseline's: mpi, or gloo connected through MPI (default mpi)")
        ->check(CLI::IsMember({"mpi", "gloo"}));
    sub->add_option("--parity", parity_text, "parity groups of N nodes surviving K losses instead of one replica, as N:K (spec/TIERS.md 12)");
    if (std::string(mode) == "capture") {
      sub->add_option("--repeat", s.repeat, "timed captures; the median is reported (default 5)")->check(CLI::Range(1, 100));
      sub->add_option("--transfer-block", block_text, "bytes per point-to-point message, both paths (default 16MiB)");
      sub->add_option("--replicated", replicated_text, "bytes of a tensor every rank holds the same of, declared replicated (default 0)");
      sub->add_flag("--no-canary{false}", s.canary, "save that tensor as each rank's own instead: the canary's baseline");
      sub->add_flag("--live", s.live, "each rank holds its sources' state live too (a data-parallel layout): the canary compares it");
    } else {
      sub->add_option("--pace-gbps", s.pace_gbps, "first reads of the persistent store at most this many GB/s (10^9 B/s) per rank; 0: unpaced")
          ->check(CLI::Range(0.0, 1e6));
    }
  }
  int rc = ckpt::bench::parse_on_every_rank(app, rank, argc, argv);
  if (rc < 0) {
    s.mode = app.got_subcommand("capture") ? "capture" : app.got_subcommand("code") ? "code" : "resume";
    const auto size = ckpt::bench::parse_size(size_text), tensor = ckpt::bench::parse_size(tensor_text),
               block = ckpt::bench::parse_size(block_text), replicated = ckpt::bench::parse_size(replicated_text);
    const auto colon = parity_text.find(':');
    if (!parity_text.empty() &&
        (colon == std::string::npos || std::sscanf(parity_text.c_str(), "%d:%d", &s.parity_group, &s.parity_losses) != 2 || s.parity_group <= s.parity_losses ||
         s.parity_losses < 1)) {
      if (rank == 0) std::fprintf(stderr, "%s: --parity takes N:K with 1 <= K < N, e.g. 4:1\n", kTool);
      rc = ckpt::cli::kUsage;
    } else if (!size || !tensor || !block || !replicated || *block == 0 || *block > (std::uint64_t{1} << 30)) {
      if (rank == 0) std::fprintf(stderr, "%s: --size, --tensor and --transfer-block take sizes like 16MiB (a block at most 1GiB)\n", kTool);
      rc = ckpt::cli::kUsage;
    } else {
      s.size = *size, s.tensor_bytes = *tensor, s.transfer_block = static_cast<std::size_t>(*block), s.replicated = *replicated;
      // One spelling of each path, so the pacing recognises the persistent store's files by prefix (code has none).
      if (!s.root.empty()) s.root = std::filesystem::absolute(s.root).lexically_normal().string();
      if (!s.persistent.empty()) s.persistent = std::filesystem::absolute(s.persistent).lexically_normal().string();
      while (s.persistent.size() > 1 && s.persistent.back() == '/') s.persistent.pop_back();
      while (s.root.size() > 1 && s.root.back() == '/') s.root.pop_back();
    }
  }
  if (rc < 0 && provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::fprintf(stderr, "%s: this MPI does not offer MPI_THREAD_MULTIPLE, which the tiers need\n", kTool);
    rc = ckpt::cli::kUsage;
  }
  return ckpt::bench::finish_job(kTool, rank, rc, [&] { return run(s, main_ns, init_start_ns, init_end_ns); }, [](const std::exception& e) {
    return std::strstr(e.what(), "differs") != nullptr ? ckpt::cli::kIntegrity : ckpt::cli::kUsage;
  });
}

#else  // no MPI in this build

int main(int argc, char** argv) {
  CLI::App app{"The memory and persistent tiers against this machine's limits over MPI. This build of ckpt has no\n"
               "MPI (CMake did not find it), so this program only says so.",
               "ckpt-bench-tiers"};
  app.allow_extras();
  return ckpt::cli::main_without("MPI", app, argc, argv);
}

#endif
