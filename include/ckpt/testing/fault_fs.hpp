// ckpt: an Fs that wraps another and fails its n-th operation, so a test can walk every error path
// of a save: run once to count the operations, then fail operation 1, 2, ... count in turn.
// A testing helper (include/ckpt/testing/, installed, not in ckpt/ckpt.hpp): #include <ckpt/testing/fault_fs.hpp>.
//
// FaultFs<Inner> holds the inner Fs by reference and implements the Fs concept of io/fs.hpp. Every
// call is one operation; a FaultPlan chooses which kinds are counted (all, or e.g. fs_ops::syncs),
// which counted operation fails (the n-th, 1-based, or every one from the n-th on: a dead disk), and
// how it fails:
//   no_space     Code::io "No space left on device" (ENOSPC); the operation does not reach the inner Fs.
//   io_error     Code::io "Input/output error" (EIO); the operation does not reach the inner Fs.
//   short_write  pwrite: the first half of the bytes reach the inner Fs, then ENOSPC is reported (what
//                a full disk does to a transfer in progress). Other operations: as io_error.
//   interrupted  EINTR. The Fs contract says callers never see EINTR (PosixFs retries), so this models
//                an interrupted transfer that FaultFs's own retry loop must complete: pread and pwrite
//                move the first half, are "interrupted", and resume with the rest, as two inner calls;
//                any other operation is restarted before it had an effect, which is one inner call.
//                The caller sees success and exactly the result of no fault (tests prove it).
// Two rules follow Linux: a failed close still releases the handle (the inner close runs, then the
// error is reported), and a failed sync or sync_dir does not reach the inner Fs, so under SimFs the
// data stays unsynced and a crash may lose it (after a real fsync error nothing is known durable).
// Injected errors say so and give the operation number; handle operations name the file opened.
// All members are thread safe as far as the inner Fs is.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "../core/locked.hpp"
#include <string>
#include <utility>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "../io/fs_op.hpp"

namespace ckpt {

enum class Fault : std::uint8_t { none, no_space, io_error, short_write, interrupted };
[[nodiscard]] constexpr EnumBounds<Fault> enum_bounds(Fault) noexcept { return {Fault::none, Fault::interrupted}; }

[[nodiscard]] inline const char* fault_name(Fault f) noexcept {
  return enum_name(f, {"none", "no_space", "io_error", "short_write", "interrupted"});
}

struct FaultPlan {
  Fault fault = Fault::none;
  std::uint64_t at = 0;        // 1-based number of the counted operation that fails; 0: none does
  bool from_then_on = false;   // fail every counted operation from `at` on (a dead disk)
  FsOpSet ops = fs_ops::all;   // the kinds that are counted, and so can fail

  // The n-th counted operation fails.
  [[nodiscard]] static FaultPlan nth(std::uint64_t n, Fault fault, FsOpSet ops = fs_ops::all) {
    return FaultPlan{fault, n, false, ops};
  }
  // Every counted operation from the n-th on fails.
  [[nodiscard]] static FaultPlan from(std::uint64_t n, Fault fault, FsOpSet ops = fs_ops::all) {
    return FaultPlan{fault, n, true, ops};
  }
  // Every sync, sync_data and sync_dir from the n-th on fails; everything else works.
  [[nodiscard]] static FaultPlan syncs(Fault fault = Fault::io_error, std::uint64_t n = 1) {
    return FaultPlan{fault, n, true, fs_ops::syncs};
  }
};

template <class Inner>
class FaultFs {
 public:
  explicit FaultFs(Inner& inner, FaultPlan plan = {}) : inner_(inner), plan_(plan) {}
  FaultFs(const FaultFs&) = delete;
  FaultFs& operator=(const FaultFs&) = delete;

  // Replaces the plan and restarts the counters.
  void set_plan(FaultPlan plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    plan_ = plan;
    counted_ = total_ = faults_ = written_ = 0;
    first_fault_.clear();
  }
  [[nodiscard]] FaultPlan plan() const { return locked_copy(mutex_, plan_); }
  // Operations of the counted kinds so far: after a run without a fault, the n to loop up to.
  [[nodiscard]] std::uint64_t count() const { return locked_copy(mutex_, counted_); }
  // Operations of every kind so far.
  [[nodiscard]] std::uint64_t total_count() const { return locked_copy(mutex_, total_); }
  // Operations that were failed or interrupted so far.
  [[nodiscard]] std::uint64_t faults() const { return locked_copy(mutex_, faults_); }
  // Bytes pwrite handed to the inner Fs so far (what a test of "not written again" counts).
  [[nodiscard]] std::uint64_t written_bytes() const { return locked_copy(mutex_, written_); }
  // The first injected fault, e.g. "pwrite #7 /ckpt/a.tmp: no_space"; empty when none fired.
  [[nodiscard]] std::string first_fault() const { return locked_copy(mutex_, first_fault_); }
  [[nodiscard]] Inner& inner() noexcept { return inner_; }

  // --- The Fs concept (io/fs.hpp) -------------------------------------------------------------
  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode) {
    const Shot shot = decide(FsOp::open, path);
    if (fails(shot)) return injected("open", path, shot);
    auto f = inner_.open(path, mode);
    if (f.ok()) remember(*f, path);
    return f;
  }

  [[nodiscard]] Status close(FileHandle f) {
    const Shot shot = decide(FsOp::close, f);
    Status s = inner_.close(f);  // the handle is released even when close reports an error (Linux)
    forget(f);
    if (fails(shot)) return injected("close", name_of(shot), shot);
    return s;
  }

  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
    const Shot shot = decide(FsOp::pread, f);
    if (fails(shot)) return injected("pread", name_of(shot) + " offset " + std::to_string(off), shot);
    if (shot.fault != Fault::interrupted || n < 2) return inner_.pread(f, buf, n, off);
    // Interrupted after half the transfer; the retry reads the rest.
    const std::size_t half = n / 2;
    auto first = inner_.pread(f, buf, half, off);
    if (!first.ok() || *first < half) return first;
    auto rest = inner_.pread(f, static_cast<unsigned char*>(buf) + half, n - half, off + half);
    if (!rest.ok()) return rest;
    return half + *rest;
  }

  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
    const Shot shot = decide(FsOp::pwrite, f);
    const auto* bytes = static_cast<const unsigned char*>(buf);
    const std::size_t half = n / 2;
    if (shot.fault == Fault::short_write) {
      // A full disk mid-transfer: a prefix lands, the rest is refused.
      if (half > 0) CKPT_TRY(inner_.pwrite(f, bytes, half, off));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        written_ += half;
      }
      Shot full = shot;
      full.fault = Fault::no_space;
      return injected("pwrite", name_of(shot) + " offset " + std::to_string(off + half) + " (short write, " +
                                    std::to_string(half) + " of " + std::to_string(n) + " bytes written)", full);
    }
    if (fails(shot)) return injected("pwrite", name_of(shot) + " offset " + std::to_string(off), shot);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      written_ += n;
    }
    if (shot.fault != Fault::interrupted || half == 0) return inner_.pwrite(f, buf, n, off);
    // Interrupted after half the transfer; the retry writes the rest.
    CKPT_TRY(inner_.pwrite(f, bytes, half, off));
    return inner_.pwrite(f, bytes + half, n - half, off + half);
  }

  [[nodiscard]] Status sync(FileHandle f) {
    const Shot shot = decide(FsOp::sync, f);
    if (fails(shot)) return injected("fsync", name_of(shot), shot);
    return inner_.sync(f);
  }
  [[nodiscard]] Status sync_data(FileHandle f) {
    const Shot shot = decide(FsOp::sync_data, f);
    if (fails(shot)) return injected("fdatasync", name_of(shot), shot);
    return inner_.sync_data(f);
  }
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f) {
    const Shot shot = decide(FsOp::file_size, f);
    if (fails(shot)) return injected("fstat", name_of(shot), shot);
    return inner_.file_size(f);
  }
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size) {
    const Shot shot = decide(FsOp::truncate, f);
    if (fails(shot)) return injected("ftruncate", name_of(shot), shot);
    return inner_.truncate(f, size);
  }
  [[nodiscard]] Status rename(const std::string& from, const std::string& to) {
    const Shot shot = decide(FsOp::rename, from + " -> " + to);
    if (fails(shot)) return injected("rename", from + " -> " + to, shot);
    return inner_.rename(from, to);
  }
  [[nodiscard]] Status unlink(const std::string& path) { return on_path(FsOp::unlink, "unlink", path, [&] { return inner_.unlink(path); }); }
  [[nodiscard]] Status mkdir(const std::string& path) { return on_path(FsOp::mkdir, "mkdir", path, [&] { return inner_.mkdir(path); }); }
  [[nodiscard]] Status rmdir(const std::string& path) { return on_path(FsOp::rmdir, "rmdir", path, [&] { return inner_.rmdir(path); }); }
  [[nodiscard]] Status sync_dir(const std::string& path) { return on_path(FsOp::sync_dir, "fsync directory", path, [&] { return inner_.sync_dir(path); }); }
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path) {
    const Shot shot = decide(FsOp::list_dir, path);
    if (fails(shot)) return injected("opendir", path, shot);
    return inner_.list_dir(path);
  }
  [[nodiscard]] Result<PathInfo> stat(const std::string& path) {
    const Shot shot = decide(FsOp::stat, path);
    if (fails(shot)) return injected("stat", path, shot);
    return inner_.stat(path);
  }
  [[nodiscard]] Result<FileHandle> lock(const std::string& path) {
    const Shot shot = decide(FsOp::lock, path);
    if (fails(shot)) return injected("open lock file", path, shot);
    auto f = inner_.lock(path);
    if (f.ok()) remember(*f, path);
    return f;
  }
  // Present only when the inner Fs maps files (PosixFs).
  template <class I = Inner>
  [[nodiscard]] auto map(FileHandle f, std::uint64_t off, std::size_t n, MapMode mode = MapMode::read_only)
      -> decltype(std::declval<I&>().map(f, off, n, mode)) {
    const Shot shot = decide(FsOp::map, f);
    if (fails(shot)) return injected("mmap", name_of(shot) + " offset " + std::to_string(off), shot);
    return inner_.map(f, off, n, mode);
  }

 private:
  struct Shot {
    Fault fault = Fault::none;
    std::uint64_t number = 0;  // the operation's number among the counted kinds (0: not counted)
    std::string what;          // the path, or the path a handle was opened under
  };

  // An operation on a path that returns only a Status: the injected failure, else the inner one.
  template <typename Call>
  [[nodiscard]] Status on_path(FsOp op, const char* name, const std::string& path, Call call) {
    const Shot shot = decide(op, path);
    if (fails(shot)) return injected(name, path, shot);
    return call();
  }
  [[nodiscard]] static bool fails(const Shot& shot) noexcept {
    return shot.fault != Fault::none && shot.fault != Fault::interrupted;
  }
  [[nodiscard]] static const std::string& name_of(const Shot& shot) noexcept { return shot.what; }

  [[nodiscard]] Shot decide(FsOp op, FileHandle f) {
    std::string what;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = paths_.find(f.id);
      what = it != paths_.end() ? it->second : "fd " + std::to_string(f.id);
    }
    return decide(op, std::move(what));
  }
  [[nodiscard]] Shot decide(FsOp op, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    Shot shot;
    shot.what = std::move(what);
    ++total_;
    if (!fs_op_in(plan_.ops, op)) return shot;
    shot.number = ++counted_;
    if (plan_.fault == Fault::none || plan_.at == 0) return shot;
    if (shot.number == plan_.at || (plan_.from_then_on && shot.number > plan_.at)) {
      shot.fault = plan_.fault;
      ++faults_;
      if (first_fault_.empty())
        first_fault_ = std::string(fs_op_name(op)) + " #" + std::to_string(shot.number) + " " + shot.what + ": " + fault_name(shot.fault);
    }
    return shot;
  }

  [[nodiscard]] static Status injected(const char* op, const std::string& what, const Shot& shot) {
    const int err = shot.fault == Fault::no_space ? ENOSPC : EIO;  // short_write outside pwrite is EIO
    return make_error(Code::io, std::string(op) + " " + what + ": " + std::strerror(err) + " (injected fault at operation " +
                                    std::to_string(shot.number) + ")");
  }

  void remember(FileHandle f, const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    paths_[f.id] = path;
  }
  void forget(FileHandle f) {
    std::lock_guard<std::mutex> lock(mutex_);
    paths_.erase(f.id);
  }

  Inner& inner_;
  mutable std::mutex mutex_;
  FaultPlan plan_;
  std::uint64_t counted_ = 0, total_ = 0, faults_ = 0, written_ = 0;
  std::string first_fault_;
  std::map<std::int64_t, std::string> paths_;  // handle -> path it was opened under, for messages
};

}  // namespace ckpt
