// ckpt: the file-system layer every read and write goes through, so tests can inject faults.
//
// An Fs is any class with these members (PosixFs is the default; SimFs and FaultFs model crashes):
//   Result<FileHandle> open(const std::string& path, OpenMode mode);  // read/read_write: regular files only
//   Status close(FileHandle f);
//   Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off);  // short only at EOF
//   Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off);        // all or error
//   Status sync(FileHandle f);        // fsync: data and metadata durable
//   Status sync_data(FileHandle f);   // fdatasync
//   Result<std::uint64_t> file_size(FileHandle f);
//   Status truncate(FileHandle f, std::uint64_t size);
//   Status rename(const std::string& from, const std::string& to);  // atomic replace
//   Status unlink(const std::string& path);
//   Status mkdir(const std::string& path);
//   Status rmdir(const std::string& path);
//   Status sync_dir(const std::string& path);  // makes create/rename/unlink in it durable
//   Result<std::vector<std::string>> list_dir(const std::string& path);
//   Result<PathInfo> stat(const std::string& path);  // Code::not_found when absent
//   Result<FileHandle> lock(const std::string& path);  // exclusive, non-blocking; Code::conflict when held
// Optionally: Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n, MapMode mode) for
// zero-copy reads.
//
// Symlinks and special files (a store is only regular files and directories; a user may hand a tool anything):
// - stat(path) does NOT follow a symlink in the last component (lstat) and reports what is there in
//   PathInfo::kind, so a symlinked step directory is seen as a symlink, never as the folder it names.
// - open(path, read | read_write) refuses, without blocking, anything that is not a regular file: a
//   symlink, FIFO, device, socket or directory (Code::io, "<path>: not a regular file (a FIFO)").
//   A FIFO with no writer must fail at once, never hang the caller.
// - No operation follows a symlink in the last component; PosixFs also refuses one as the parent
//   directory, so nothing is created, read or removed through a symlinked step directory. Components
//   above the parent are followed: a store may live under a symlinked directory (/home -> /data/home).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace ckpt {

enum class OpenMode : std::uint8_t {
  read,        // existing file, read only
  read_write,  // existing file
  create_new,  // must not exist (O_EXCL): names are never reused (spec/JOURNAL.md)
};

struct FileHandle {
  std::int64_t id = -1;
  [[nodiscard]] bool valid() const noexcept { return id >= 0; }
};

// What stat finds at a path; symlinks are not followed (see above).
enum class EntryKind : std::uint8_t { file, directory, symlink, other };  // other: FIFO, device, socket

struct PathInfo {
  bool is_dir = false;     // kind == EntryKind::directory
  std::uint64_t size = 0;  // bytes, for a regular file; 0 otherwise
  EntryKind kind = EntryKind::file;
  std::uint64_t id = 0;    // the file's identity while it exists (device and inode), 0 when the Fs has none
};

// How a mapping may be used. read_only: PROT_READ, shared with the file. copy_on_write: writable and
// private; a write changes this process's copy of the page, never the file (what safetensors' loaders
// hand out): tensors over it can be modified in place, and pages never written share the page cache.
// shared_write: writable and shared, every block allocated (ENOSPC, not a later SIGBUS, when the file system
// is full) and every page faulted in at once: a write changes the file, and the
// file's fsync makes it durable (a memory store's slot, spec/JOURNAL.md 10.1); the file must be open read_write.
enum class MapMode : std::uint8_t { read_only, copy_on_write, shared_write };

// A memory mapping; unmapped on destruction.

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
      writable_ = std::exchange(o.writable_, false);
    }
    return *this;
  }
  ~Mapping() { reset(); }
  [[nodiscard]] const unsigned char* data() const noexcept { return data_; }
  // The bytes of a writable mapping (copy_on_write, shared_write); null for a read_only one.
  [[nodiscard]] unsigned char* writable_data() const noexcept { return writable_ ? const_cast<unsigned char*>(data_) : nullptr; }
  void set_writable() noexcept { writable_ = true; }  // by the Fs that mapped it writable
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
  bool writable_ = false;
};


namespace detail {
// True when Fs offers the optional read-only mapping.
template <class Fs, class = void>
struct fs_has_map : std::false_type {};
template <class Fs>
struct fs_has_map<Fs, std::void_t<decltype(std::declval<Fs&>().map(FileHandle{}, std::uint64_t{}, std::size_t{}, MapMode{}))>>
    : std::true_type {};
}  // namespace detail

// A non-owning handle on any Fs, as CommRef is on any Comm (spec/LAYOUT.md 3.3): the store, journal,
// readers and writers take an FsRef, so each is one ordinary class compiled once for every Fs
// (PosixFs, SimFs, FaultFs<...>, a user's own). The Fs must outlive every FsRef made from it.
class FsRef {
 public:
  template <class Fs, std::enable_if_t<!std::is_same_v<std::remove_cv_t<Fs>, FsRef>, int> = 0>
  FsRef(Fs& fs) noexcept : self_(&fs), ops_(&kOps<Fs>) {}  // NOLINT(google-explicit-constructor): as CommRef

  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) const { return ops_->open(self_, path, mode); }
  [[nodiscard]] Status close(FileHandle f) const { return ops_->close(self_, f); }
  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) const {
    return ops_->pread(self_, f, buf, n, off);
  }
  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) const {
    return ops_->pwrite(self_, f, buf, n, off);
  }
  [[nodiscard]] Status sync(FileHandle f) const { return ops_->sync(self_, f); }
  [[nodiscard]] Status sync_data(FileHandle f) const { return ops_->sync_data(self_, f); }
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f) const { return ops_->file_size(self_, f); }
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size) const { return ops_->truncate(self_, f, size); }
  [[nodiscard]] Status rename(const std::string& from, const std::string& to) const { return ops_->rename(self_, from, to); }
  [[nodiscard]] Status unlink(const std::string& path) const { return ops_->unlink(self_, path); }
  [[nodiscard]] Status mkdir(const std::string& path) const { return ops_->mkdir(self_, path); }
  [[nodiscard]] Status rmdir(const std::string& path) const { return ops_->rmdir(self_, path); }
  [[nodiscard]] Status sync_dir(const std::string& path) const { return ops_->sync_dir(self_, path); }
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) const { return ops_->list_dir(self_, path); }
  [[nodiscard]] Result<PathInfo> stat(const std::string& path) const { return ops_->stat(self_, path); }
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) const { return ops_->lock(self_, path); }
  // The optional zero-copy read: can_map() says whether the Fs has one; map() fails when it has not.
  [[nodiscard]] bool can_map() const noexcept { return ops_->map != nullptr; }
  [[nodiscard]] Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n, MapMode mode = MapMode::read_only) const {
    if (ops_->map == nullptr) return make_error(Code::unsupported, "this file system has no map()");
    return ops_->map(self_, f, off, n, mode);
  }

 private:
  struct Ops {
    Result<FileHandle> (*open)(void*, const std::string&, OpenMode);
    Status (*close)(void*, FileHandle);
    Result<std::size_t> (*pread)(void*, FileHandle, void*, std::size_t, std::uint64_t);
    Status (*pwrite)(void*, FileHandle, const void*, std::size_t, std::uint64_t);
    Status (*sync)(void*, FileHandle);
    Status (*sync_data)(void*, FileHandle);
    Result<std::uint64_t> (*file_size)(void*, FileHandle);
    Status (*truncate)(void*, FileHandle, std::uint64_t);
    Status (*rename)(void*, const std::string&, const std::string&);
    Status (*unlink)(void*, const std::string&);
    Status (*mkdir)(void*, const std::string&);
    Status (*rmdir)(void*, const std::string&);
    Status (*sync_dir)(void*, const std::string&);
    Result<std::vector<std::string>> (*list_dir)(void*, const std::string&);
    Result<PathInfo> (*stat)(void*, const std::string&);
    Result<FileHandle> (*lock)(void*, const std::string&);
    Result<Mapping> (*map)(void*, FileHandle, std::uint64_t, std::size_t, MapMode);  // null: no map()
  };
  template <class Fs>
  static constexpr Result<Mapping> (*map_of())(void*, FileHandle, std::uint64_t, std::size_t, MapMode) {
    if constexpr (detail::fs_has_map<Fs>::value)
      return [](void* s, FileHandle f, std::uint64_t off, std::size_t n, MapMode mode) -> Result<Mapping> {
        return static_cast<Fs*>(s)->map(f, off, n, mode);
      };
    else
      return nullptr;
  }
  template <class Fs>
  static constexpr Ops kOps = {
      [](void* s, const std::string& p, OpenMode m) { return static_cast<Fs*>(s)->open(p, m); },
      [](void* s, FileHandle f) { return static_cast<Fs*>(s)->close(f); },
      [](void* s, FileHandle f, void* b, std::size_t n, std::uint64_t o) { return static_cast<Fs*>(s)->pread(f, b, n, o); },
      [](void* s, FileHandle f, const void* b, std::size_t n, std::uint64_t o) { return static_cast<Fs*>(s)->pwrite(f, b, n, o); },
      [](void* s, FileHandle f) { return static_cast<Fs*>(s)->sync(f); },
      [](void* s, FileHandle f) { return static_cast<Fs*>(s)->sync_data(f); },
      [](void* s, FileHandle f) { return static_cast<Fs*>(s)->file_size(f); },
      [](void* s, FileHandle f, std::uint64_t n) { return static_cast<Fs*>(s)->truncate(f, n); },
      [](void* s, const std::string& a, const std::string& b) { return static_cast<Fs*>(s)->rename(a, b); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->unlink(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->mkdir(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->rmdir(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->sync_dir(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->list_dir(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->stat(p); },
      [](void* s, const std::string& p) { return static_cast<Fs*>(s)->lock(p); },
      map_of<Fs>(),
  };
  void* self_;
  const Ops* ops_;
};

// Joins a directory and a name with one '/'.
[[nodiscard]] inline std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}
// The directory holding path ("." when it has no '/').
[[nodiscard]] inline std::string parent_path(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
[[nodiscard]] inline std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads exactly n bytes at off, or fails naming the path and what was missing.
[[nodiscard]] inline Status read_exact(FsRef fs, FileHandle f, const std::string& path, void* buf, std::size_t n,
                                       std::uint64_t off) {
  auto got = fs.pread(f, buf, n, off);
  if (!got.ok()) return got.status().with_context(path);
  if (*got != n)
    return make_error(Code::incomplete, path + ": expected " + std::to_string(n) + " bytes at offset " +
                                            std::to_string(off) + ", found " + std::to_string(*got));
  return Status();
}

// Closes a handle on scope exit; an explicit close() reports the error instead.
class ScopedFile {
 public:
  ScopedFile(FsRef fs, FileHandle f) noexcept : fs_(fs), file_(f) {}
  ScopedFile(const ScopedFile&) = delete;
  ScopedFile& operator=(const ScopedFile&) = delete;
  ScopedFile(ScopedFile&& o) noexcept : fs_(o.fs_), file_(o.file_) { o.file_ = FileHandle{}; }
  ~ScopedFile() {
    if (file_.valid()) fs_.close(file_).ignore_error();  // a read-side close error loses nothing
  }
  [[nodiscard]] FileHandle get() const noexcept { return file_; }
  [[nodiscard]] Status close() {
    FileHandle f = file_;
    file_ = FileHandle{};
    return f.valid() ? fs_.close(f) : Status();
  }

 private:
  FsRef fs_;
  FileHandle file_;
};

// A file open for reading, with its size: the one way readers open a whole file (closed on scope exit).
struct ReadFile {
  ScopedFile file;
  std::uint64_t size = 0;
};
[[nodiscard]] inline Result<ReadFile> open_read(FsRef fs, const std::string& path) {
  auto opened = fs.open(path, OpenMode::read);
  if (!opened.ok()) return opened.status();
  ReadFile r{ScopedFile(fs, *opened), 0};
  auto size = fs.file_size(r.file.get());
  if (!size.ok()) return size.status().with_context(path);
  r.size = *size;
  return Result<ReadFile>(std::move(r));  // explicit: nvcc (EDG) has no C++20 implicit move
}

}  // namespace ckpt
