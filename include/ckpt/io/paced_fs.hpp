// ckpt: shared storage at scale, on one machine (spec/PYTHON.md 8, Storage). A StorageLink is a node's link to
// persistent storage: a rate in bytes per second, shared by every process that opens the same link file
// (one per node), serving transfers one after another in the order they ask, as a saturated link does.
// PacedFs wraps another Fs and makes every byte read from or written to a file under its root cross
// the link; everything else (a memory tier on tmpfs) passes at the machine's own speed. A link may have a
// read cache, a directory its sharers share: a node's page cache, through which a block of a file read
// by one of the node's processes is read by the others without crossing the link again (two data-parallel
// ranks of a node loading the same checkpoint move it across the link once). Its entries are empty files
// named by the file's path hash and the block, created with O_EXCL: the process that creates one pays.
//
// Why: on a training cluster a node reaches its checkpoint storage at about 1 GB/s (Llama 3: 2 TB/s for
// 16K GPUs, 2,048 nodes), while a test machine's disk is its page cache. The goodput benchmark paces
// every contender's persistent storage the same way (python/ckpt/goodput/storage.py paces the Python
// contenders' streams through the same link). The link's state is one 8-byte little-endian word, the
// time (CLOCK_MONOTONIC, nanoseconds) at which the link is next free, read and advanced under flock.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/coding.hpp"
#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "fs.hpp"

namespace ckpt {

class StorageLink {
 public:
  // One reservation: the link carries the bytes from `start_ns` to `end_ns` (CLOCK_MONOTONIC).
  struct Slot {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
  };

  // Reads are cached in blocks of this many bytes.
  static constexpr std::uint64_t kCacheBlock = std::uint64_t{1} << 20;

  // The link whose state is the file at `path` (created when absent); every process that opens the same
  // file shares the link. `bytes_per_s` must be positive and finite. `read_cache`: the directory of the
  // sharers' read cache (created when absent), or empty for none.
  [[nodiscard]] static Result<std::unique_ptr<StorageLink>> open(const std::string& path, double bytes_per_s,
                                                                 std::string read_cache = "") {
    if (!(bytes_per_s > 0) || !std::isfinite(bytes_per_s))
      return make_error(Code::invalid_argument, path + ": a storage link's rate must be a positive number of bytes per second");
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return make_error(Code::io, path + ": cannot open the storage link's state: " + std::strerror(errno));
    return std::unique_ptr<StorageLink>(new StorageLink(fd, path, bytes_per_s, std::move(read_cache)));
  }
  StorageLink(const StorageLink&) = delete;
  StorageLink& operator=(const StorageLink&) = delete;
  ~StorageLink() { ::close(fd_); }

  // Reserves the link for `n` bytes after every earlier reservation by any process sharing it, without
  // waiting; transfer() also waits until the reservation ends.
  [[nodiscard]] Result<Slot> reserve(std::uint64_t n) {
    int r;
    do {
      r = ::flock(fd_, LOCK_EX);
    } while (r != 0 && errno == EINTR);
    if (r != 0) return failure("flock");
    unsigned char word[8] = {};
    const ssize_t got = ::pread(fd_, word, sizeof word, 0);
    Slot slot;
    if (got < 0) {
      (void)::flock(fd_, LOCK_UN);
      return failure("read");
    }
    // A new (empty) link file is free now; a shorter read is a file some other program wrote: start afresh.
    const std::int64_t free_at = got == static_cast<ssize_t>(sizeof word) ? static_cast<std::int64_t>(get_u64(word)) : 0;
    slot.start_ns = std::max(now_ns(), free_at);
    slot.end_ns = slot.start_ns + static_cast<std::int64_t>(std::ceil(static_cast<double>(n) * 1e9 / bytes_per_s_));
    put_u64(word, static_cast<std::uint64_t>(slot.end_ns));
    const ssize_t put = ::pwrite(fd_, word, sizeof word, 0);
    (void)::flock(fd_, LOCK_UN);
    if (put != static_cast<ssize_t>(sizeof word)) return failure("write");
    return slot;
  }
  [[nodiscard]] Status transfer(std::uint64_t n) {
    if (n == 0) return Status();
    CKPT_ASSIGN_OR_RETURN(const Slot slot, reserve(n));
    timespec until{static_cast<time_t>(slot.end_ns / 1000000000), static_cast<long>(slot.end_ns % 1000000000)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
    }
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_ += n;
    waited_ns_ += std::max<std::int64_t>(0, slot.end_ns - slot.start_ns);
    return Status();
  }

  // Bytes [off, off + n) of `file` (of `file_size` bytes) read. Without a read cache they cross the link;
  // with one, each block they touch that no sharer read before crosses whole (the page cache reads blocks,
  // not the bytes asked for; the last one ends with the file) and is cached, and the rest is free.
  [[nodiscard]] Status read(const std::string& file, std::uint64_t off, std::uint64_t n, std::uint64_t file_size) {
    if (read_cache_.empty() || n == 0) return transfer(n);
    char name[17];
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(xxh3_64(file.data(), file.size())));
    std::uint64_t fresh = 0;
    for (std::uint64_t b = off / kCacheBlock; b <= (off + n - 1) / kCacheBlock; ++b) {
      const std::string entry = read_cache_ + "/" + name + "-" + std::to_string(b);
      int fd = ::open(entry.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0 && errno == ENOENT && (::mkdir(read_cache_.c_str(), 0700) == 0 || errno == EEXIST))
        fd = ::open(entry.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) {
        if (errno == EEXIST) continue;  // a sharer read this block: the node's page cache serves it
        return make_error(Code::io, entry + ": cannot create the read cache's entry: " + std::strerror(errno));
      }
      ::close(fd);
      fresh += std::min((b + 1) * kCacheBlock, std::max(file_size, off + n)) - b * kCacheBlock;
    }
    return transfer(fresh);
  }

  [[nodiscard]] double bytes_per_s() const noexcept { return bytes_per_s_; }
  [[nodiscard]] bool caches_reads() const noexcept { return !read_cache_.empty(); }
  // What this process moved across the link, and the link's time those bytes took.
  [[nodiscard]] std::uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  [[nodiscard]] double busy_s() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<double>(waited_ns_) * 1e-9;
  }
  [[nodiscard]] static std::int64_t now_ns() noexcept {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

 private:
  StorageLink(int fd, std::string path, double bytes_per_s, std::string read_cache)
      : fd_(fd), path_(std::move(path)), bytes_per_s_(bytes_per_s), read_cache_(std::move(read_cache)) {}
  [[nodiscard]] Status failure(const char* what) const {
    return make_error(Code::io, path_ + ": " + what + " of the storage link's state failed: " + std::strerror(errno));
  }
  const int fd_;
  const std::string path_;
  const double bytes_per_s_;
  const std::string read_cache_;
  mutable std::mutex mutex_;
  std::uint64_t bytes_ = 0;
  std::int64_t waited_ns_ = 0;
};

// An Fs over `inner` whose files under a root cross a StorageLink (pace(); none until then). Reads
// (pread, and a read-only or copy-on-write map, charged whole when made: its reader asked for all of it)
// go through the link's read cache, writes always cross; metadata and fsync are free. Thread safe as far
// as the inner Fs is.
class PacedFs {
 public:
  explicit PacedFs(FsRef inner) noexcept : inner_(inner) {}

  // From now on, files opened under `root` (a directory) cross `link`; a null link stops pacing.
  void pace(std::string root, std::shared_ptr<StorageLink> link) {
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    std::lock_guard<std::mutex> lock(mutex_);
    root_ = std::move(root);
    link_ = std::move(link);
  }
  [[nodiscard]] std::shared_ptr<StorageLink> link() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return link_;
  }

  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) {
    CKPT_ASSIGN_OR_RETURN(const FileHandle f, inner_.open(path, mode));
    std::lock_guard<std::mutex> lock(mutex_);
    if (link_ && (path == root_ || (path.size() > root_.size() && path.compare(0, root_.size(), root_) == 0 && path[root_.size()] == '/')))
      paced_[f.id] = path;
    return f;
  }
  [[nodiscard]] Status close(FileHandle f) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paced_.erase(f.id);
    }
    return inner_.close(f);
  }
  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    CKPT_ASSIGN_OR_RETURN(const std::size_t got, inner_.pread(f, buf, n, off));
    CKPT_TRY(charge(f, off, got, false));
    return got;
  }
  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    CKPT_TRY(charge(f, off, n, true));  // the bytes cross the link before they land
    return inner_.pwrite(f, buf, n, off);
  }
  [[nodiscard]] Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n, MapMode mode = MapMode::read_only) {
    CKPT_ASSIGN_OR_RETURN(Mapping m, inner_.map(f, off, n, mode));
    if (mode != MapMode::shared_write) CKPT_TRY(charge(f, off, m.size(), false));
    return m;
  }
  [[nodiscard]] Status sync(FileHandle f) { return inner_.sync(f); }
  [[nodiscard]] Status sync_data(FileHandle f) { return inner_.sync_data(f); }
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f) { return inner_.file_size(f); }
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size) { return inner_.truncate(f, size); }
  [[nodiscard]] Status rename(const std::string& from, const std::string& to) { return inner_.rename(from, to); }
  [[nodiscard]] Status unlink(const std::string& path) { return inner_.unlink(path); }
  [[nodiscard]] Status mkdir(const std::string& path) { return inner_.mkdir(path); }
  [[nodiscard]] Status rmdir(const std::string& path) { return inner_.rmdir(path); }
  [[nodiscard]] Status sync_dir(const std::string& path) { return inner_.sync_dir(path); }
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) { return inner_.list_dir(path); }
  [[nodiscard]] Result<PathInfo> stat(const std::string& path) { return inner_.stat(path); }
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) { return inner_.lock(path); }

 private:
  [[nodiscard]] Status charge(FileHandle f, std::uint64_t off, std::uint64_t n, bool write) {
    std::shared_ptr<StorageLink> link;
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = paced_.find(f.id);
      if (it == paced_.end() || !link_) return Status();
      link = link_;
      path = it->second;
    }
    if (write || !link->caches_reads()) return link->transfer(n);  // the file's size matters only to a cache
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t size, inner_.file_size(f));
    return link->read(path, off, n, size);
  }

  FsRef inner_;
  mutable std::mutex mutex_;
  std::string root_;
  std::shared_ptr<StorageLink> link_;
  std::unordered_map<std::int64_t, std::string> paced_;  // handles of files under root_, and their paths
};

}  // namespace ckpt
