// ckpt: writes a whole file under a temporary name and renames it into place only once it is durable,
// so a reader sees the old file or the complete new one, never a torn one (spec/FORMAT.md 7.1).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/uuid.hpp"
#include "fs.hpp"
#include "posix_fs.hpp"

namespace ckpt {

class AtomicFile {
 public:
  // Creates "<path>.tmp-<uuid>" next to path (same directory, so the rename stays on one file system).
  [[nodiscard]] static Result<AtomicFile> create(FsRef fs, std::string path, std::size_t buffer_size = std::size_t{1} << 20) {
    std::string temp_path = path + ".tmp-" + uuid_string(random_uuid());
    auto file = fs.open(temp_path, OpenMode::create_new);
    if (!file.ok()) return file.status().with_context("cannot create " + temp_path);
    return Result<AtomicFile>(AtomicFile(fs, std::move(path), std::move(temp_path), *file, std::max<std::size_t>(buffer_size, 4096)));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // A value (spec/LAYOUT.md 3.4): moving hands over the temporary file; the moved-from one owns
  // nothing and its destructor removes nothing. No move assignment, as for ShardWriter.
  AtomicFile(AtomicFile&& o) noexcept
      : fs_(o.fs_),
        path_(std::move(o.path_)),
        temp_path_(std::move(o.temp_path_)),
        file_(std::exchange(o.file_, FileHandle{})),
        capacity_(o.capacity_),
        buffer_(std::move(o.buffer_)),
        position_(o.position_),
        failure_(std::move(o.failure_)),
        committed_(std::exchange(o.committed_, true)) {}
  AtomicFile& operator=(AtomicFile&&) = delete;
  // Not committed: the temporary file is removed and the final name is left untouched.
  ~AtomicFile() {
    if (committed_) return;
    if (file_.valid()) fs_.close(file_).ignore_error();  // abandoning: the file is removed next
    fs_.unlink(temp_path_).ignore_error();               // best effort; nothing refers to a temp name
  }

  // Appends bytes; small writes are gathered, large ones go straight from the caller's memory to the kernel.
  [[nodiscard]] Status write(const void* data, std::size_t size) {
    if (!failure_.ok()) return failure_;
    const auto* p = static_cast<const unsigned char*>(data);
    if (size >= capacity_) {
      CKPT_TRY(flush());
      Status s = fs_.pwrite(file_, p, size, position_);
      if (!s.ok()) return fail(s);
      position_ += size;
      return Status();
    }
    while (size > 0) {
      const std::size_t n = std::min(capacity_ - buffer_.size(), size);
      const std::size_t old = buffer_.size();
      buffer_.resize(old + n);
      std::memcpy(buffer_.data() + old, p, n);
      p += n;
      size -= n;
      if (buffer_.size() == capacity_) CKPT_TRY(flush());
    }
    return Status();
  }

  // fsync, close, rename over path, fsync the directory; the file is durable under its name after this.
  [[nodiscard]] Status commit() {
    if (!failure_.ok()) return failure_;
    if (committed_) return make_error(Code::invalid_argument, path_ + ": commit() called twice");
    CKPT_TRY(flush());
    // fsync before rename: a rename may reach disk before the data it names (spec 7.1).
    Status s = fs_.sync(file_);
    if (!s.ok()) return fail(s);
    s = fs_.close(file_);
    file_ = FileHandle{};
    if (!s.ok()) return fail(s);
    s = fs_.rename(temp_path_, path_);
    if (!s.ok()) return fail(s);
    committed_ = true;
    // fsync the directory: a rename is durable only once its directory is (spec 7.1).
    s = fs_.sync_dir(parent_path(path_));
    if (!s.ok()) return s.with_context(path_);
    return Status();
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const std::string& temp_path() const noexcept { return temp_path_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return position_ + buffer_.size(); }

 private:
  AtomicFile(FsRef fs, std::string path, std::string temp_path, FileHandle file, std::size_t capacity)
      : fs_(fs), path_(std::move(path)), temp_path_(std::move(temp_path)), file_(file), capacity_(capacity) {
    buffer_.reserve(capacity_);
  }
  [[nodiscard]] Status fail(const Status& s) {
    if (failure_.ok()) failure_ = s.with_context(temp_path_);
    return failure_;
  }
  [[nodiscard]] Status flush() {
    if (buffer_.empty()) return Status();
    Status s = fs_.pwrite(file_, buffer_.data(), buffer_.size(), position_);
    if (!s.ok()) return fail(s);
    position_ += buffer_.size();
    buffer_.clear();
    return Status();
  }

  FsRef fs_;
  std::string path_, temp_path_;
  FileHandle file_;
  std::size_t capacity_;
  std::vector<unsigned char> buffer_;
  std::uint64_t position_ = 0;  // file offset of buffer_[0]
  Status failure_;
  bool committed_ = false;
};

}  // namespace ckpt
