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
// Optionally: Result<Mapping> map(FileHandle f, std::uint64_t off, std::size_t n) for zero-copy reads.
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

#include <cstdint>
#include <string>

#include "../error.hpp"

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
template <class Fs>
[[nodiscard]] Status read_exact(Fs& fs, FileHandle f, const std::string& path, void* buf, std::size_t n,
                                std::uint64_t off) {
  auto got = fs.pread(f, buf, n, off);
  if (!got.ok()) return got.status().with_context(path);
  if (*got != n)
    return make_error(Code::incomplete, path + ": expected " + std::to_string(n) + " bytes at offset " +
                                            std::to_string(off) + ", found " + std::to_string(*got));
  return Status();
}

// Closes a handle on scope exit; an explicit close() reports the error instead.
template <class Fs>
class ScopedFile {
 public:
  ScopedFile(Fs& fs, FileHandle f) noexcept : fs_(&fs), file_(f) {}
  ScopedFile(const ScopedFile&) = delete;
  ScopedFile& operator=(const ScopedFile&) = delete;
  ScopedFile(ScopedFile&& o) noexcept : fs_(o.fs_), file_(o.file_) { o.file_ = FileHandle{}; }
  ~ScopedFile() {
    if (file_.valid()) fs_->close(file_).ignore_error();  // a read-side close error loses nothing
  }
  [[nodiscard]] FileHandle get() const noexcept { return file_; }
  [[nodiscard]] Status close() {
    FileHandle f = file_;
    file_ = FileHandle{};
    return f.valid() ? fs_->close(f) : Status();
  }

 private:
  Fs* fs_;
  FileHandle file_;
};

}  // namespace ckpt
