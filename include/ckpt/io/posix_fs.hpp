// ckpt: the default Fs, over POSIX calls. Loops on EINTR and short transfers; errors name the errno.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fs.hpp"

namespace ckpt {

// A read-only memory mapping; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t base_len, const unsigned char* data, std::size_t size) noexcept
      : base_(base), base_len_(base_len), data_(data), size_(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& o) noexcept { *this = std::move(o); }
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      base_len_ = std::exchange(o.base_len_, 0);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~Mapping() { reset(); }
  [[nodiscard]] const unsigned char* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void reset() noexcept {
    if (base_ != nullptr) ::munmap(base_, base_len_);
    base_ = nullptr;
  }
  void* base_ = nullptr;
  std::size_t base_len_ = 0;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

class PosixFs {
 public:
  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) {
    int flags = O_CLOEXEC;
    switch (mode) {
      case OpenMode::read: flags |= O_RDONLY; break;
      case OpenMode::read_write: flags |= O_RDWR; break;
      case OpenMode::create_new: flags |= O_RDWR | O_CREAT | O_EXCL; break;
    }
    int fd;
    do {
      fd = ::open(path.c_str(), flags, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return os_error("open", path);
    return FileHandle{fd};
  }

  [[nodiscard]] Status close(FileHandle f) {
    // close is not retried on EINTR: the descriptor is released either way on Linux.
    if (::close(static_cast<int>(f.id)) != 0) return os_error("close", "fd " + std::to_string(f.id));
    return Status();
  }

  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    std::size_t done = 0;
    auto* p = static_cast<unsigned char*>(buf);
    while (done < n) {
      const ssize_t r = ::pread(static_cast<int>(f.id), p + done, std::min<std::size_t>(n - done, kMaxIo),
                                static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return os_error("pread", "offset " + std::to_string(off + done));
      }
      if (r == 0) break;  // end of file
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    std::size_t done = 0;
    const auto* p = static_cast<const unsigned char*>(buf);
    while (done < n) {
      const ssize_t r = ::pwrite(static_cast<int>(f.id), p + done, std::min<std::size_t>(n - done, kMaxIo),
                                 static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return os_error("pwrite", "offset " + std::to_string(off + done));
      }
      if (r == 0) return make_error(Code::io, "pwrite wrote 0 bytes at offset " + std::to_string(off + done));
      done += static_cast<std::size_t>(r);
    }
    return Status();
  }

  [[nodiscard]] Status sync(FileHandle f) {
    if (::fsync(static_cast<int>(f.id)) != 0) return os_error("fsync", "fd " + std::to_string(f.id));
    return Status();
  }
  [[nodiscard]] Status sync_data(FileHandle f) {
    if (::fdatasync(static_cast<int>(f.id)) != 0) return os_error("fdatasync", "fd " + std::to_string(f.id));
    return Status();
  }

  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f) {
    struct stat st;
    if (::fstat(static_cast<int>(f.id), &st) != 0) return os_error("fstat", "fd " + std::to_string(f.id));
    return static_cast<std::uint64_t>(st.st_size);
  }

  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size) {
    int r;
    do {
      r = ::ftruncate(static_cast<int>(f.id), static_cast<off_t>(size));
    } while (r != 0 && errno == EINTR);
    if (r != 0) return os_error("ftruncate", "fd " + std::to_string(f.id));
    return Status();
  }

  [[nodiscard]] Status rename(const std::string& from, const std::string& to) {
    if (::rename(from.c_str(), to.c_str()) != 0) return os_error("rename", from + " -> " + to);
    return Status();
  }
  [[nodiscard]] Status unlink(const std::string& path) {
    if (::unlink(path.c_str()) != 0) return os_error("unlink", path);
    return Status();
  }
  [[nodiscard]] Status mkdir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) != 0) return os_error("mkdir", path);
    return Status();
  }
  [[nodiscard]] Status rmdir(const std::string& path) {
    if (::rmdir(path.c_str()) != 0) return os_error("rmdir", path);
    return Status();
  }

  [[nodiscard]] Status sync_dir(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return os_error("open directory", path);
    const int r = ::fsync(fd);
    const int saved = errno;
    ::close(fd);
    if (r != 0) {
      errno = saved;
      return os_error("fsync directory", path);
    }
    return Status();
  }

  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return os_error("opendir", path);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int saved = errno;
    ::closedir(dir);
    if (saved != 0) {
      errno = saved;
      return os_error("readdir", path);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  [[nodiscard]] Result<PathInfo> stat(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return os_error("stat", path);
    return PathInfo{S_ISDIR(st.st_mode), static_cast<std::uint64_t>(st.st_size)};
  }

  // flock on a lock file: released by the kernel when the process dies, so a crash never wedges a store.
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return os_error("open lock file", path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int saved = errno;
      ::close(fd);
      if (saved == EWOULDBLOCK)
        return make_error(Code::conflict, path + ": locked by another writer");
      errno = saved;
      return os_error("flock", path);
    }
    return FileHandle{fd};
  }

  // Maps [off, off+n) read-only; the kernel needs a page-aligned start, so the base is rounded down.
  [[nodiscard]] Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n) {
    if (n == 0) return Mapping();
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t base_off = off & ~(page - 1);
    const std::size_t base_len = static_cast<std::size_t>(off - base_off) + n;
    void* base = ::mmap(nullptr, base_len, PROT_READ, MAP_SHARED, static_cast<int>(f.id),
                        static_cast<off_t>(base_off));
    if (base == MAP_FAILED) return os_error("mmap", "offset " + std::to_string(off));
    ::madvise(base, base_len, MADV_SEQUENTIAL);
    return Mapping(base, base_len, static_cast<const unsigned char*>(base) + (off - base_off), n);
  }

 private:
  static constexpr std::size_t kMaxIo = std::size_t{1} << 30;  // Linux caps one transfer near 2 GiB

  [[nodiscard]] static Status os_error(const char* op, const std::string& what) {
    const int e = errno;
    const Code code = (e == ENOENT) ? Code::not_found : (e == EEXIST) ? Code::conflict : Code::io;
    return make_error(code, std::string(op) + " " + what + ": " + std::strerror(e));
  }
};

}  // namespace ckpt
