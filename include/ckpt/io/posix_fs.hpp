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

// Never follows a symlink in the last component of a path, and reaches every name through a handle
// on its parent directory opened with O_NOFOLLOW: a step directory that is a symlink to a folder
// outside the store can never have its contents read, written or removed through it.
class PosixFs {
 public:
  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_parent("open", path, name));
    if (mode == OpenMode::create_new) {
      // O_EXCL creates a regular file or fails (a dangling symlink is EEXIST too): nothing to check.
      const int fd = retry_open(dir.get(), name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return refusal("open", path, path, dir.get(), name);
      return FileHandle{fd};
    }
    // Look before opening, so a device is never opened (an open can rewind a tape or wait for a modem).
    struct stat st;
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return os_error("open", path);
    if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
    // O_NONBLOCK: if the name was swapped for a FIFO since, the open returns at once instead of waiting for a writer.
    const int flags = (mode == OpenMode::read ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    Fd file(retry_open(dir.get(), name, flags));
    if (!file.valid()) return refusal("open", path, path, dir.get(), name);
    CKPT_TRY(require_regular(file.get(), path));
    const int fl = ::fcntl(file.get(), F_GETFL);
    if (fl < 0 || ::fcntl(file.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return os_error("fcntl", path);
    return FileHandle{file.release()};
  }

  [[nodiscard]] Status close(FileHandle f) {
    // close is not retried on EINTR: the descriptor is released either way on Linux.
    if (::close(static_cast<int>(f.id)) != 0) return os_error("close", "fd " + std::to_string(f.id));
    return Status();
  }

  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    return transfer("pread", ::pread, f, static_cast<unsigned char*>(buf), n, off);  // short only at end of file
  }

  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    CKPT_ASSIGN_OR_RETURN(const std::size_t done, transfer("pwrite", ::pwrite, f, static_cast<const unsigned char*>(buf), n, off));
    if (done < n) return make_error(Code::io, "pwrite wrote 0 bytes at offset " + std::to_string(off + done));
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

  // rename(2) never follows either last component: a symlink is moved or replaced, never its target.
  [[nodiscard]] Status rename(const std::string& from, const std::string& to) {
    const std::string what = from + " -> " + to;
    std::string from_name, to_name;
    CKPT_ASSIGN_OR_RETURN(Fd from_dir, open_parent("rename", from, from_name, what));
    CKPT_ASSIGN_OR_RETURN(Fd to_dir, open_parent("rename", to, to_name, what));
    if (::renameat(from_dir.get(), from_name.c_str(), to_dir.get(), to_name.c_str()) != 0) return os_error("rename", what);
    return Status();
  }
  // Removes a symlink itself, never what it points to.
  [[nodiscard]] Status unlink(const std::string& path) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_parent("unlink", path, name));
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0) return os_error("unlink", path);
    return Status();
  }
  [[nodiscard]] Status mkdir(const std::string& path) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_parent("mkdir", path, name));
    if (::mkdirat(dir.get(), name.c_str(), 0755) != 0) return os_error("mkdir", path);
    return Status();
  }
  // A symlink to a directory is not a directory here: ENOTDIR, reported as a symlink.
  [[nodiscard]] Status rmdir(const std::string& path) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_parent("rmdir", path, name));
    if (::unlinkat(dir.get(), name.c_str(), AT_REMOVEDIR) != 0) return refusal("rmdir", path, path, dir.get(), name);
    return Status();
  }

  [[nodiscard]] Status sync_dir(const std::string& path) {
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_directory("open directory", path));
    if (::fsync(dir.get()) != 0) return os_error("fsync directory", path);
    return Status();
  }

  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) {
    CKPT_ASSIGN_OR_RETURN(Fd fd, open_directory("opendir", path));
    DIR* dir = ::fdopendir(fd.get());
    if (dir == nullptr) return os_error("opendir", path);
    fd.release();  // closedir closes it
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

  // lstat: a symlink is reported as one, never as what it points to.
  [[nodiscard]] Result<PathInfo> stat(const std::string& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return os_error("stat", path);
    PathInfo info;
    info.kind = S_ISREG(st.st_mode) ? EntryKind::file
                : S_ISDIR(st.st_mode) ? EntryKind::directory
                : S_ISLNK(st.st_mode) ? EntryKind::symlink
                                      : EntryKind::other;
    info.is_dir = info.kind == EntryKind::directory;
    info.size = info.kind == EntryKind::file ? static_cast<std::uint64_t>(st.st_size) : 0;
    info.id = (static_cast<std::uint64_t>(st.st_dev) << 40) ^ static_cast<std::uint64_t>(st.st_ino);
    return info;
  }

  // flock on a lock file: released by the kernel when the process dies, so a crash never wedges a store.
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd dir, open_parent("open lock file", path, name));
    Fd file(retry_open(dir.get(), name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!file.valid()) return refusal("open lock file", path, path, dir.get(), name);
    CKPT_TRY(require_regular(file.get(), path));
    if (::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return make_error(Code::conflict, path + ": locked by another writer");
      return os_error("flock", path);
    }
    return FileHandle{file.release()};
  }

  // Maps [off, off+n) as `mode` says (fs.hpp); the kernel needs a page-aligned start, so the base is rounded down.
  [[nodiscard]] Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n, MapMode mode = MapMode::read_only) {
    if (n == 0) return Mapping();
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t base_off = off & ~(page - 1);
    const std::size_t base_len = static_cast<std::size_t>(off - base_off) + n;
    const bool writable = mode != MapMode::read_only, shared = mode != MapMode::copy_on_write;
    // A slot is written whole at every capture: its blocks are allocated first, so a full tmpfs is an ENOSPC
    // here and never a SIGBUS in the copy (MAP_POPULATE alone skips what it cannot allocate), then its pages
    // are faulted in once, here, not during the copy (spec/TIERS.md 2.1). On a tmpfs mounted huge=within_size
    // the blocks allocated here are 2 MiB pages: 512x fewer faults and TLB entries (docs/tiers.md).
    if (mode == MapMode::shared_write && ::fallocate(static_cast<int>(f.id), 0, static_cast<off_t>(base_off), static_cast<off_t>(base_len)) != 0 &&
        errno != EOPNOTSUPP)
      return os_error("fallocate", "offset " + std::to_string(base_off) + ", " + std::to_string(base_len) + " bytes");
    const int populate = mode == MapMode::shared_write ? MAP_POPULATE : 0;
    void* base = ::mmap(nullptr, base_len, writable ? PROT_READ | PROT_WRITE : PROT_READ, (shared ? MAP_SHARED : MAP_PRIVATE) | populate,
                        static_cast<int>(f.id), static_cast<off_t>(base_off));
    if (base == MAP_FAILED) return os_error("mmap", "offset " + std::to_string(off));
    if (mode != MapMode::shared_write) ::madvise(base, base_len, MADV_SEQUENTIAL);
    Mapping m(base, base_len, static_cast<const unsigned char*>(base) + (off - base_off), n);
    if (writable) m.set_writable();
    return Result<Mapping>(std::move(m));  // explicit: nvcc (EDG) has no C++20 implicit move
  }

 private:
  // n bytes at off through `io` (::pread or ::pwrite) in pieces of at most kMaxIo, retrying EINTR; stops
  // early only when a call moves 0 bytes, and says how many moved.
  template <typename Byte, typename Io>
  [[nodiscard]] static Result<std::size_t> transfer(const char* what, Io io, FileHandle f, Byte* p, std::size_t n, std::uint64_t off) {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t r = io(static_cast<int>(f.id), p + done, std::min<std::size_t>(n - done, kMaxIo), static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return os_error(what, "offset " + std::to_string(off + done));
      }
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

  static constexpr std::size_t kMaxIo = std::size_t{1} << 30;  // Linux caps one transfer near 2 GiB

  // What a file type is called in messages: "a FIFO", "a directory", ...
  [[nodiscard]] static const char* kind_name(mode_t mode) noexcept {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISLNK(mode)) return "a symlink";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "an unknown file type";
  }

  // An owned descriptor, closed on scope exit.
  class Fd {
   public:
    explicit Fd(int fd = -1) noexcept : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
      if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
      }
      return *this;
    }
    ~Fd() {
      if (fd_ >= 0) ::close(fd_);
    }
    [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
    [[nodiscard]] int get() const noexcept { return fd_; }
    int release() noexcept { return std::exchange(fd_, -1); }

   private:
    int fd_;
  };

  [[nodiscard]] static int retry_open(int dir, const std::string& name, int flags) {
    int fd;
    do {
      fd = ::openat(dir, name.c_str(), flags, 0644);
    } while (fd < 0 && errno == EINTR);
    return fd;
  }

  // Opens directory path itself through a handle on its parent, refusing a symlink as either (O_NOFOLLOW).
  [[nodiscard]] static Result<Fd> open_directory(const char* op, const std::string& path) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(Fd parent, open_parent(op, path, name));
    Fd dir(retry_open(parent.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return refusal(op, path, path, parent.get(), name);
    return Result<Fd>(std::move(dir));
  }

  // Opens the parent directory of path (refusing a symlink there) and sets name to the last component;
  // trailing slashes are ignored. Errors name what (the whole operation's subject, path by default).
  [[nodiscard]] static Result<Fd> open_parent(const char* op, const std::string& path, std::string& name,
                                              const std::string& what = {}) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const std::string parent = p == "/" ? std::string("/") : parent_path(p);
    name = p == "/" ? std::string(".") : base_name(p);
    const std::string& subject = what.empty() ? path : what;
    Fd dir(retry_open(AT_FDCWD, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return refusal(op, subject, parent, AT_FDCWD, parent);
    return Result<Fd>(std::move(dir));
  }

  // The errno of a failed call on (dir, name) as an error; ELOOP and ENOTDIR say whether subject is a
  // symlink or another kind of file, since strerror's "Too many levels of symbolic links" does not.
  [[nodiscard]] static Status refusal(const char* op, const std::string& what, const std::string& subject, int dir,
                                      const std::string& name) {
    const int e = errno;
    if (e == ELOOP || e == ENOTDIR || e == EISDIR) {
      struct stat st;
      if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        const std::string prefix = std::string(op) + " " + what + ": " + (subject == what ? "" : subject + " ");
        if (S_ISLNK(st.st_mode)) return make_error(Code::io, prefix + "is a symlink (ckpt does not follow symlinks)");
        if (e == ENOTDIR && !S_ISDIR(st.st_mode))
          return make_error(Code::io, prefix + "is not a directory (" + kind_name(st.st_mode) + ")");
        if (e == EISDIR) return make_error(Code::io, prefix + "is not a regular file (a directory)");
      }
    }
    errno = e;
    return os_error(op, what);
  }

  [[nodiscard]] static Status not_regular(const std::string& path, mode_t mode) {
    if (S_ISLNK(mode)) return make_error(Code::io, path + ": is a symlink (ckpt does not follow symlinks)");
    return make_error(Code::io, path + ": not a regular file (" + std::string(kind_name(mode)) + ")");
  }

  [[nodiscard]] static Status require_regular(int fd, const std::string& path) {
    struct stat st;
    if (::fstat(fd, &st) != 0) return os_error("fstat", path);
    return S_ISREG(st.st_mode) ? Status() : not_regular(path, st.st_mode);
  }

  [[nodiscard]] static Status os_error(const char* op, const std::string& what) {
    const int e = errno;
    const Code code = (e == ENOENT) ? Code::not_found : (e == EEXIST) ? Code::conflict : Code::io;
    return make_error(code, std::string(op) + " " + what + ": " + std::strerror(e));
  }
};

}  // namespace ckpt
