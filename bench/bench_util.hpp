// ckpt tools: plumbing for ckpt-bench. Timing statistics, page-aligned buffers, random data, a
// scratch directory, and the raw POSIX loops that measure this machine's own limits.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <ckpt/core/error.hpp>
#include <ckpt/core/hash.hpp>

namespace ckpt::bench {

// Any failure in the benchmark's own plumbing aborts the run; cli::guarded turns it into exit 2.
struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Wrong bytes read back or a verify report with problems: exit 1, like every other tool.
struct IntegrityError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A library call of the benchmark's own plumbing that failed: BenchError naming what it was.
inline void check(const Status& s, const std::string& what) {
  if (!s.ok()) throw BenchError(what + ": " + s.to_string());
}
template <class T>
void check(const Result<T>& r, const std::string& what) {
  if (!r.ok()) check(r.status(), what);
}

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw BenchError(what + ": " + std::strerror(errno));
}

// "268435456", "256M", "256MiB", "1G", "1.5GiB", "64k": binary multiples; nullopt when malformed.
[[nodiscard]] inline std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::size_t i = 0;
  double value = 0;
  bool digits = false, dot = false;
  double scale = 1;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      digits = true;
      if (dot) {
        scale /= 10;
        value += (c - '0') * scale;
      } else {
        value = value * 10 + (c - '0');
      }
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return std::nullopt;
  std::string unit(text.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.size() == 3 && unit.substr(1) == "ib") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'b') unit = unit.substr(0, 1);
  int shift = 0;
  if (unit.empty() || unit == "b") shift = 0;
  else if (unit == "k") shift = 10;
  else if (unit == "m") shift = 20;
  else if (unit == "g") shift = 30;
  else if (unit == "t") shift = 40;
  else return std::nullopt;
  const double bytes = value * static_cast<double>(std::uint64_t{1} << shift);
  if (!(bytes >= 0) || bytes > 1e18) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

// Wall-clock seconds since construction (steady clock).
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// CPU seconds (user + system, all threads) this process has used: with wall time it shows how much
// of a run was spent waiting for a core that other processes held.
[[nodiscard]] inline double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Runs a measurement once: its untimed `before` (when set), then its `body`, appending the run's wall and
// process CPU seconds to `secs` and `cpu_secs`.
template <class Measurement>
void run_once(Measurement& m) {
  if (m.before) m.before();
  const double cpu_start = process_cpu_seconds();
  Stopwatch watch;
  m.body();
  m.secs.push_back(watch.seconds());
  m.cpu_secs.push_back(process_cpu_seconds() - cpu_start);
}

// Best, median and worst of repeated timings.
struct Timing {
  double best = 0, median = 0, worst = 0;
};
[[nodiscard]] inline Timing summarize(std::vector<double> secs) {
  Timing t;
  if (secs.empty()) return t;
  std::sort(secs.begin(), secs.end());
  t.best = secs.front();
  t.worst = secs.back();
  const std::size_t n = secs.size();
  t.median = n % 2 == 1 ? secs[n / 2] : (secs[n / 2 - 1] + secs[n / 2]) / 2;
  return t;
}

// A buffer whose pages are touched at allocation, so no measurement pays first-touch faults. Large
// ones ask for transparent huge pages: with 4 KiB pages a stream over DRAM ran ~30% slower on the VM
// this was tuned on (TLB misses), which would understate the machine's limits; the page cache that
// mmap reads is mapped with large folios too.
class Buffer {
 public:
  explicit Buffer(std::size_t size) : size_(size) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    void* p = nullptr;
    if (::posix_memalign(&p, size >= kHuge ? kHuge : 4096, std::max<std::size_t>(size, 1)) != 0) throw std::bad_alloc();
    data_ = static_cast<unsigned char*>(p);
#ifdef MADV_HUGEPAGE
    if (size >= kHuge) (void)::madvise(data_, size, MADV_HUGEPAGE);  // best effort: refused is fine
#endif
    std::memset(data_, 0, size_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data_); }
  [[nodiscard]] unsigned char* data() noexcept { return data_; }
  [[nodiscard]] const unsigned char* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Incompressible bytes from splitmix64: fast, and the same for a given seed on every machine.
inline void fill_random(unsigned char* data, std::size_t size, std::uint64_t seed) {
  std::uint64_t state = seed;
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(data + i, &z, 8);
  }
  for (; i < size; ++i) data[i] = static_cast<unsigned char>(seed >> (8 * (i % 8)));
}

// One tensor of the synthetic model: a byte range of the data buffer, stored as 1-D BF16.
struct TensorSpan {
  std::string name;
  std::size_t offset = 0, size = 0;
};

// The synthetic model the benchmarks save: `size` bytes cut into tensors of `tensor_size` bytes (the last
// one shorter), named layers.000.weight, layers.001.weight, ... in buffer order.
[[nodiscard]] inline std::vector<TensorSpan> model_tensors(std::size_t size, std::uint64_t tensor_size) {
  std::vector<TensorSpan> tensors;
  for (std::size_t off = 0, k = 0; off < size; ++k) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(tensor_size, size - off));
    char name[48];
    std::snprintf(name, sizeof name, "layers.%03zu.weight", k);
    tensors.push_back({name, off, n});
    off += n;
  }
  return tensors;
}

// Runs work(item) for items [0, count) on `threads` threads that take the next item as they free up.
template <class Work>
void parallel_items(unsigned threads, std::size_t count, const Work& work) {
  std::atomic<std::size_t> next{0};
  auto loop = [&] {
    for (std::size_t i = next++; i < count; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(loop);
  loop();
  for (auto& th : pool) th.join();
}

// Keeps a computed value alive so the compiler cannot drop the loop that made it.
inline void keep(std::uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

// Sums 64-bit words: a pure read stream, the floor under any pass that must look at every byte.
[[nodiscard]] inline std::uint64_t sum_words(const unsigned char* data, std::size_t size) {
  const auto* w = reinterpret_cast<const std::uint64_t*>(data);
  const std::size_t n = size / 8;
  std::uint64_t a = 0, b = 0, c = 0, d = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += w[i];
    b += w[i + 1];
    c += w[i + 2];
    d += w[i + 3];
  }
  for (; i < n; ++i) a += w[i];
  return a + b + c + d;
}

// A unique directory under `parent`, removed with the files this run made in it at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent) {
    std::string tmpl = (parent.empty() ? std::string(".") : parent) + "/ckpt-bench-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw_errno("cannot create a scratch directory in " + parent);
    path_ = buf.data();
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }
  // A path in the directory; remembered so it is removed at the end even if a run stops half-way.
  [[nodiscard]] std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

inline void remove_if_present(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("unlink " + path);
}

// Runs a sync call (fsync, syncfs) on a directory; a failure throws, naming the call and the directory.
inline void sync_directory(const std::string& dir, int (*sync_call)(int), const char* call_name) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open " + dir);
  const int r = sync_call(fd);
  ::close(fd);
  if (r != 0) throw_errno(std::string(call_name) + " " + dir);
}

// Flushes everything dirty on the file system of dir, so one measurement does not pay for the last.
inline void settle(const std::string& dir) { sync_directory(dir, ::syncfs, "syncfs"); }

// Evicts a file's clean pages from the page cache (its own pages only, nothing else on the machine).
inline void drop_cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open " + path);
  ::fdatasync(fd);  // dirty pages cannot be dropped; a written benchmark file is synced already
  const int r = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (r != 0) {
    errno = r;
    throw_errno("posix_fadvise " + path);
  }
}

inline void write_all(int fd, const unsigned char* p, std::size_t n, std::uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("pwrite " + path);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
}

inline void fsync_or_throw(int fd, const std::string& path) {
  if (::fsync(fd) != 0) throw_errno("fsync " + path);
}

inline void fsync_dir(const std::string& dir) { sync_directory(dir, ::fsync, "fsync"); }

// The raw write limit: create, pwrite in large blocks straight from memory, fsync, close.
inline void raw_write_file(const std::string& path, const unsigned char* data, std::size_t size, std::size_t block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("create " + path);
  for (std::size_t off = 0; off < size; off += block)
    write_all(fd, data + off, std::min(block, size - off), off, path);
  fsync_or_throw(fd, path);
  if (::close(fd) != 0) throw_errno("close " + path);
}

// The raw copy limit: pread a cached file and pwrite it to a new one through one buffer, then fsync.
inline void raw_copy_file(const std::string& from, const std::string& to, unsigned char* buf, std::size_t block) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw_errno("open " + from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    ::close(in);
    throw_errno("create " + to);
  }
  std::uint64_t off = 0;
  for (;;) {
    const ssize_t r = ::pread(in, buf, block, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      ::close(in);
      ::close(out);
      throw_errno("pread " + from);
    }
    if (r == 0) break;
    write_all(out, buf, static_cast<std::size_t>(r), off, to);
    off += static_cast<std::uint64_t>(r);
  }
  ::close(in);
  fsync_or_throw(out, to);
  if (::close(out) != 0) throw_errno("close " + to);
}

// Reads a whole (cached) file into memory through pread in large blocks; returns bytes read.
inline std::uint64_t raw_read_file(const std::string& path, unsigned char* dst, std::size_t capacity, std::size_t block) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open " + path);
  std::uint64_t off = 0;
  while (off < capacity) {
    const ssize_t r = ::pread(fd, dst + off, std::min<std::size_t>(block, capacity - off), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw_errno("pread " + path);
    }
    if (r == 0) break;
    off += static_cast<std::uint64_t>(r);
  }
  ::close(fd);
  return off;
}

// --- The machine a figure was measured on (README: machines here differ, some lack AVX-512) ----------

// The CPU model and whether it could run the wider XXH3 kernels a -mavx2 build would use.
struct CpuInfo {
  std::string model;
  bool avx2 = false, avx512 = false;
};
[[nodiscard]] inline CpuInfo cpu_info() {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (info.model.empty() && line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) info.model = line.substr(std::min(line.size(), colon + 2));
    }
    if (line.rfind("flags", 0) == 0) {
      info.avx2 = line.find(" avx2") != std::string::npos;
      info.avx512 = line.find(" avx512f") != std::string::npos;
      break;
    }
  }
  return info;
}

// The XXH3 kernel in use (spec/FORMAT.md 2.2.1).
[[nodiscard]] inline const char* xxh3_vector_name() { return ckpt::hash_unit_name(ckpt::hash_unit()); }

// The 1-minute load average: above the core count, other processes were competing for the CPUs.
[[nodiscard]] inline double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = 0;
  in >> one;
  return one;
}

}  // namespace ckpt::bench
