// ckpt: an in-memory Fs with a persistence model, to enumerate every state a crash can leave.
// A testing helper (include/ckpt/testing/, installed, not in ckpt/ckpt.hpp): #include <ckpt/testing/sim_fs.hpp>.
//
// SimFs implements the Fs concept of io/fs.hpp, so every component templated on Fs (ShardWriter,
// ShardReader, verify_file, the store) runs on it unchanged. While a program runs, SimFs behaves like
// PosixFs on Linux: same operations, same error codes (not_found for ENOENT, conflict for EEXIST and
// a held lock, io for everything else) and the same strerror text. Differences, all deliberate:
//   - One tree with root "/"; a relative path is relative to "/"; "." and ".." are resolved lexically.
//   - Opening a directory is Code::io "Is a directory" (Linux lets a read-only open succeed).
//   - Handle ids are never reused, so a stale handle is always Code::io "Bad file descriptor".
//   - A file may not grow past kMaxFileSize (Code::io "File too large"): contents live in memory.
//   - No map(): ShardReader::map_piece and mmap verification are PosixFs only.
//
// Persistence model. What a running program sees (the *live* state) is always every operation
// applied. What a crash keeps is the *durable* state plus any choice of the *unsynced items*:
//
//   File content. Each file has its durable content and an ordered list of unsynced writes and
//   truncates since its last sync. sync (fsync) and sync_data (fdatasync) make the whole list
//   durable; both are the same here, since SimFs keeps no timestamps. At a crash each unsynced item,
//   independently, is replayed in order onto the durable content as one of:
//     lost     not applied;
//     kept     applied in full;
//     torn     (writes) only a prefix [offset, cut) is applied, cut a multiple of 512 or 4096 strictly
//              inside the write; enumeration uses the first and last 512 B and 4 KiB boundaries of the
//              write (up to 4 cuts), sampling any boundary; a write inside one 512 B sector never tears;
//     garbled  (writes) the range [offset, offset + size) holds garbage, deterministic per item.
//   A truncate is only lost or kept. Writing past the end fills the gap with zeros, as on Linux.
//
//   Directory entries. Each directory has its durable entry set and an ordered list of unsynced
//   entry operations since its last sync_dir: link (a create, mkdir, or lock that created its file),
//   unlink (unlink, rmdir) and rename. At a crash each unsynced operation, independently, is lost or
//   kept; kept ones are replayed in order onto the durable entries. A rename is one item: the name is
//   at the old place or at the new one, never both and never neither. fsync of a file does NOT make
//   its name durable, and a renamed file's content is only what was synced (names and data are
//   independent items). sync_dir(d) makes durable every unsynced operation in d and, like a journal
//   commit, every earlier operation in another directory that a cross-directory rename in d depends
//   on (so syncing either directory of a rename makes it durable as a whole).
//
//   What a crash keeps is what is reachable from "/" after the replay; a directory whose own creation
//   was lost takes its contents with it. The crash state is a new SimFs whose durable and live states
//   both equal what survived, with no open handles and no locks (a lock dies with its process).
//
// Enumeration. crash_state_count() counts the crash states of the current unsynced items;
// crash_state(i) builds state i, a fixed function of i, so 0..count-1 visits them all; index 0 is
// the durable state (everything lost). When at most kExactDirOps directory operations are unsynced,
// choices that leave the same directory tree are counted once and unsynced writes to files no state
// can reach are not counted, so distinct indices give distinct states, except where unsynced items of
// one file hide each other (a kept write overwriting an earlier one, bytes rewritten unchanged, a
// truncate to the current size). With more, the count is the full product of every item's choices, an
// upper bound. Counts saturate at UINT64_MAX; then sample: sample_crash_state(seed) chooses each item
// uniformly from {lost, kept, torn, garbled} with a portable generator, so a seed is reproducible.
//
// Persistence points. A hook set with set_persistence_hook() runs after every successful sync,
// sync_data, sync_dir, rename, unlink and rmdir (and, when asked, after every pwrite, truncate, create,
// mkdir as well), so a test can enumerate the crash states at each of them. The hook runs on the
// calling thread without SimFs's lock held; it may call the const members (crash states, dump) but
// must not change this SimFs. Every member but set_persistence_hook is thread safe (verify_file
// reads from several threads); set the hook before the SimFs is shared.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "../io/fs.hpp"
#include "../io/fs_op.hpp"

namespace ckpt {

// The fate of one unsynced item at a crash (see the model above).
enum class Fate : std::uint8_t { lost, kept, torn, garbled };
[[nodiscard]] constexpr EnumBounds<Fate> enum_bounds(Fate) noexcept { return {Fate::lost, Fate::garbled}; }
[[nodiscard]] inline const char* fate_name(Fate f) noexcept { return enum_name(f, {"lost", "kept", "torn", "garbled"}); }

// Which fates a crash may give unsynced writes; lost and kept are always possible.
struct CrashModel {
  bool tear = true;    // a write may survive as a prefix cut at a 512 B or 4 KiB boundary
  bool garble = true;  // a write's range may hold garbage
};

// Where a persistence hook runs: after op succeeded on path.
struct PersistencePoint {
  FsOp op = FsOp::sync;
  std::string path;            // for handle operations, the path the file was opened under
  std::uint64_t sequence = 0;  // 1 for the first persistence point of this SimFs, then 2, 3...
};

class SimFs {
 public:
  using Hook = std::function<void(const SimFs&, const PersistencePoint&)>;
  static constexpr std::uint64_t kMaxFileSize = std::uint64_t{1} << 30;
  // Up to this many unsynced directory operations, enumeration merges choices that give the same tree.
  static constexpr std::size_t kExactDirOps = 12;

  SimFs();
  // A snapshot: same files, unsynced items, handles and locks; file bytes are shared copy-on-write.
  // The hook is not copied (it belongs to the test that set it); counters restart at zero.
  SimFs(const SimFs& other);
  SimFs& operator=(const SimFs& other);
  SimFs(SimFs&& other) noexcept;
  SimFs& operator=(SimFs&& other) noexcept;
  ~SimFs();

  // --- The Fs concept (io/fs.hpp) -------------------------------------------------------------
  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode);
  [[nodiscard]] Status close(FileHandle f);
  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off);
  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off);
  [[nodiscard]] Status sync(FileHandle f);
  [[nodiscard]] Status sync_data(FileHandle f);
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f);
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size);
  [[nodiscard]] Status rename(const std::string& from, const std::string& to);
  [[nodiscard]] Status unlink(const std::string& path);
  [[nodiscard]] Status mkdir(const std::string& path);
  [[nodiscard]] Status rmdir(const std::string& path);
  [[nodiscard]] Status sync_dir(const std::string& path);
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path);
  [[nodiscard]] Result<PathInfo> stat(const std::string& path);
  [[nodiscard]] Result<FileHandle> lock(const std::string& path);

  // --- Crash states ---------------------------------------------------------------------------
  // How many crash states the current unsynced items allow (at least 1; saturates at UINT64_MAX).
  [[nodiscard]] std::uint64_t crash_state_count(const CrashModel& model = {}) const;
  // Crash state number index, 0 <= index < crash_state_count(model); invalid_argument otherwise.
  [[nodiscard]] Result<SimFs> crash_state(std::uint64_t index, const CrashModel& model = {}) const;
  // A crash state drawn from seed; the same seed and the same history give the same state.
  [[nodiscard]] SimFs sample_crash_state(std::uint64_t seed, const CrashModel& model = {}) const;
  // The state when every unsynced item is lost (crash_state(0)).
  [[nodiscard]] SimFs durable_state() const;
  // In a crash state: the fate chosen for each unsynced item, one per line; empty otherwise.
  [[nodiscard]] const std::string& crash_note() const noexcept { return crash_note_; }
  // Unsynced items right now: file writes and truncates, and directory operations.
  [[nodiscard]] std::size_t unsynced_file_ops() const;
  [[nodiscard]] std::size_t unsynced_dir_ops() const;

  // --- Writeback errors (spec/JOURNAL.md 5.4) -----------------------------------------------------
  // The nth sync or sync_data call from now (of any file) fails with EIO, as Linux reports a failed
  // writeback: the file's unsynced writes never reach the disk (a crash never keeps them, and no later
  // sync makes them durable), yet reads go on seeing them, because the kernel keeps the pages cached
  // and marks them clean. A later sync of new writes succeeds and persists only those.
  void inject_sync_error(std::uint64_t nth = 1);
  // Sync and sync_data calls that failed so far through inject_sync_error, and the last one's path.
  [[nodiscard]] std::uint64_t sync_errors() const;
  [[nodiscard]] std::string sync_error_path() const;

  // --- Tests and debugging --------------------------------------------------------------------
  // Runs hook at every persistence point (see above); pass nullptr to remove it.
  void set_persistence_hook(Hook hook, bool every_mutation = false);
  // Operations called so far, failed ones included (all kinds, or one kind).
  [[nodiscard]] std::uint64_t op_count() const;
  [[nodiscard]] std::uint64_t op_count(FsOp op) const;
  // The live content of a file, outside the Fs interface (not counted, no handle needed).
  [[nodiscard]] Result<std::vector<unsigned char>> file_content(const std::string& path) const;
  // A digest of the live tree: every path, its kind and every file byte. Equal trees, equal digests.
  [[nodiscard]] std::uint64_t fingerprint() const;
  // The tree with durable and live sizes, open handles, locks and every unsynced item.
  [[nodiscard]] std::string dump() const;

 private:
  struct FileOp {
    std::uint64_t seq = 0;
    bool is_truncate = false;
    std::uint64_t offset = 0;  // write: where it starts
    std::uint64_t size = 0;    // write: its length; truncate: the new file size
    std::shared_ptr<const std::vector<unsigned char>> bytes;  // write only
    std::string path;
  };
  enum class DirOpKind : std::uint8_t { link, unlink, rename };
  struct DirOp {
    DirOpKind kind = DirOpKind::link;
    std::uint64_t seq = 0;
    std::uint64_t dir = 0, to_dir = 0;  // to_dir: rename only
    std::string name, to_name;
    std::uint64_t ino = 0;  // link and rename: the inode named
    std::string path, to_path;
  };
  struct Node {
    bool is_dir = false;
    // Files: what reads see, what survives any crash, and what lies between. Byte vectors are shared
    // copy-on-write between snapshots and crash states; durable is never modified in place.
    std::shared_ptr<std::vector<unsigned char>> data;
    std::shared_ptr<std::vector<unsigned char>> durable;
    std::vector<FileOp> pending;
    // A writeback failed: data holds bytes the disk never got, so syncs replay pending onto durable.
    bool diverged = false;
    // Directories: live and durable entries, name -> inode.
    std::map<std::string, std::uint64_t> entries, durable_entries;
  };
  struct Handle {
    std::uint64_t ino = 0;
    bool writable = false;
    std::string path;
  };
  struct State {
    std::map<std::uint64_t, Node> nodes;  // inode 1 is "/"
    std::vector<DirOp> dir_ops;           // unsynced directory operations, in order
    std::map<std::int64_t, Handle> handles;
    std::map<std::uint64_t, std::int64_t> locks;  // inode -> handle holding its lock
    std::uint64_t next_ino = 2, next_seq = 1;
    std::int64_t next_handle = 3;
    std::uint64_t generation = 0;  // bumped by every change to what a crash could keep
    std::array<std::uint64_t, kFsOpCount> op_counts{};
  };
  struct Lookup;
  struct Choice;
  struct CrashPlan;
  using DirTable = std::map<std::uint64_t, std::map<std::string, std::uint64_t>>;
  using FateTable = std::map<std::uint64_t, std::vector<Choice>>;

  // Helpers; all run with mutex_ held.
  [[nodiscard]] Lookup lookup(const std::string& path) const;
  [[nodiscard]] static State empty_state();
  // The handle's entry, or EBADF; with read_only_errno set, that error when the handle cannot write.
  [[nodiscard]] Status handle_of(FileHandle f, const char* op, int read_only_errno, Handle*& out);
  [[nodiscard]] std::vector<unsigned char>& mutable_data(Node& n);
  std::uint64_t link_new(std::uint64_t dir, const std::string& name, bool is_dir, const std::string& path);
  // Removes the entry l names (a file or an empty directory) and records it for the crash model.
  void unlink_entry(const Lookup& l, const std::string& path);
  void make_file_durable(Node& n);
  // Applies an injected writeback error to the sync of the file at path; true when it fails.
  [[nodiscard]] bool take_sync_error(Node& n, const std::string& path);
  void collect_garbage();
  [[nodiscard]] std::shared_ptr<const CrashPlan> plan(const CrashModel& model) const;
  [[nodiscard]] DirTable replay_dirs(const std::vector<bool>& dir_kept) const;
  [[nodiscard]] SimFs build_crash(const std::vector<bool>& dir_kept, const FateTable& fates) const;
  void fire(FsOp op, const std::string& path, bool barrier);
  [[nodiscard]] Status sync_file(FileHandle f, FsOp op, const char* call);  // takes mutex_ itself

  State state_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const CrashPlan> plan_cache_;
  Hook hook_;
  bool hook_every_mutation_ = false;
  std::atomic<std::uint64_t> points_{0};  // hooks fire from every writer's thread
  std::string crash_note_;
  std::uint64_t sync_error_in_ = 0;  // syncs left before the failing one; 0: none armed
  std::uint64_t sync_errors_taken_ = 0;
  std::string sync_error_path_;
};

}  // namespace ckpt

// --- Definitions ------------------------------------------------------------------------------

namespace ckpt {

namespace detail {

// The same codes and text PosixFs gives for the same errno (io/posix_fs.hpp os_error).
[[nodiscard]] inline Status sim_error(const char* op, const std::string& what, int err) {
  const Code code = (err == ENOENT) ? Code::not_found : (err == EEXIST) ? Code::conflict : Code::io;
  return make_error(code, std::string(op) + " " + what + ": " + std::strerror(err));
}

[[nodiscard]] inline std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) noexcept {
  return (a != 0 && b > UINT64_MAX / a) ? UINT64_MAX : a * b;
}
[[nodiscard]] inline std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) noexcept {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

// Path components from "/", with "." dropped and ".." resolved lexically (no links to follow).
[[nodiscard]] inline std::vector<std::string> sim_split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= path.size()) {
    const std::size_t slash = std::min(path.find('/', i), path.size());
    std::string part = path.substr(i, slash - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    i = slash + 1;
  }
  return parts;
}

// Garbage for a garbled write: a fixed function of the item and the file offset, so states repeat.
[[nodiscard]] inline unsigned char sim_garbage(std::uint64_t seq, std::uint64_t off) noexcept {
  std::uint64_t z = seq * 0x9E3779B97F4A7C15ULL + (off >> 3) * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<unsigned char>(z >> (8 * (off & 7)));
}

// Where an enumerated tear may cut a write [off, end): the first and last 512 B and 4 KiB boundaries
// strictly inside it (sector and page granularity; a smaller write is atomic).
[[nodiscard]] inline std::vector<std::uint64_t> sim_tear_points(std::uint64_t off, std::uint64_t end) {
  std::vector<std::uint64_t> cuts;
  for (const std::uint64_t g : {std::uint64_t{512}, std::uint64_t{4096}}) {
    const std::uint64_t first = (off / g + 1) * g;
    const std::uint64_t last = ((end - 1) / g) * g;
    if (first < end) cuts.push_back(first);
    if (last > off) cuts.push_back(last);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

}  // namespace detail

struct SimFs::Lookup {
  int err = 0;               // errno when a component on the way is missing or not a directory
  std::uint64_t parent = 0;  // directory holding the last component (0 for "/")
  std::string name;          // the last component ("" for "/")
  std::uint64_t ino = 0;     // 0 when the last component does not exist
  std::vector<std::string> parts;
};

struct SimFs::Choice {
  Fate fate = Fate::lost;
  std::uint64_t cut = 0;  // torn: the file offset where the surviving prefix ends
};

struct SimFs::CrashPlan {
  CrashModel model;
  std::uint64_t generation = 0;
  struct FileItem {
    std::uint64_t ino = 0;
    std::size_t pos = 0;  // index into the inode's pending list
    std::vector<Choice> options;
  };
  std::vector<FileItem> file_items;  // of files some state can reach, in the order they happened
  bool exact = false;
  struct Block {  // exact plans: one per distinct directory tree
    std::vector<bool> dir_kept;
    std::vector<std::size_t> items;  // file_items of the files this tree reaches
    std::uint64_t count = 1;
  };
  std::vector<Block> blocks;
  std::uint64_t total = 1;
};

namespace detail {

// The inodes a directory table reaches from "/" (entries_of gives nullptr for a file).
template <class EntriesOf, class Exists>
void sim_reach(EntriesOf&& entries_of, Exists&& exists, std::set<std::uint64_t>& reach) {
  std::vector<std::uint64_t> stack{1};
  while (!stack.empty()) {
    const std::uint64_t dir = stack.back();
    stack.pop_back();
    if (!reach.insert(dir).second) continue;
    const auto* entries = entries_of(dir);
    if (entries == nullptr) continue;
    for (const auto& e : *entries) {
      if (!exists(e.second)) continue;
      if (entries_of(e.second) != nullptr) {
        stack.push_back(e.second);
      } else {
        reach.insert(e.second);
      }
    }
  }
}

}  // namespace detail

// --- Construction ----------------------------------------------------------------------------

inline SimFs::State SimFs::empty_state() {
  State state;
  Node root;
  root.is_dir = true;
  state.nodes.emplace(1, std::move(root));
  return state;
}

inline SimFs::SimFs() : state_(empty_state()) {}

inline SimFs::SimFs(const SimFs& other) {
  std::lock_guard<std::mutex> lock(other.mutex_);
  state_ = other.state_;
  state_.op_counts = {};
  plan_cache_ = other.plan_cache_;
  crash_note_ = other.crash_note_;
}

inline SimFs& SimFs::operator=(const SimFs& other) {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  state_ = other.state_;
  state_.op_counts = {};
  plan_cache_ = other.plan_cache_;
  crash_note_ = other.crash_note_;
  return *this;
}

inline SimFs::SimFs(SimFs&& other) noexcept {
  std::lock_guard<std::mutex> lock(other.mutex_);
  state_ = std::exchange(other.state_, empty_state());  // the moved-from SimFs stays usable, empty
  plan_cache_ = std::move(other.plan_cache_);
  crash_note_ = std::move(other.crash_note_);
  hook_ = std::move(other.hook_);
  hook_every_mutation_ = other.hook_every_mutation_;
  points_ = other.points_.load();
}

inline SimFs& SimFs::operator=(SimFs&& other) noexcept {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  state_ = std::exchange(other.state_, empty_state());
  plan_cache_ = std::move(other.plan_cache_);
  crash_note_ = std::move(other.crash_note_);
  hook_ = std::move(other.hook_);
  hook_every_mutation_ = other.hook_every_mutation_;
  points_ = other.points_.load();
  return *this;
}

inline SimFs::~SimFs() = default;

// --- Helpers (mutex_ held) -------------------------------------------------------------------

inline SimFs::Lookup SimFs::lookup(const std::string& path) const {
  Lookup l;
  l.parts = detail::sim_split_path(path);
  if (l.parts.empty()) {
    l.ino = 1;
    return l;
  }
  std::uint64_t dir = 1;
  for (std::size_t i = 0; i + 1 < l.parts.size(); ++i) {
    const Node& node = state_.nodes.at(dir);
    const auto it = node.entries.find(l.parts[i]);
    if (it == node.entries.end()) {
      l.err = ENOENT;
      return l;
    }
    if (!state_.nodes.at(it->second).is_dir) {
      l.err = ENOTDIR;
      return l;
    }
    dir = it->second;
  }
  l.parent = dir;
  l.name = l.parts.back();
  const Node& parent = state_.nodes.at(dir);
  const auto it = parent.entries.find(l.name);
  if (it != parent.entries.end()) l.ino = it->second;
  return l;
}

inline Status SimFs::handle_of(FileHandle f, const char* op, int read_only_errno, Handle*& out) {
  const auto it = state_.handles.find(f.id);
  if (it == state_.handles.end()) return detail::sim_error(op, "fd " + std::to_string(f.id), EBADF);
  if (read_only_errno != 0 && !it->second.writable) return detail::sim_error(op, "fd " + std::to_string(f.id), read_only_errno);
  out = &it->second;
  return Status();
}

inline std::vector<unsigned char>& SimFs::mutable_data(Node& n) {
  if (n.data.use_count() > 1) n.data = std::make_shared<std::vector<unsigned char>>(*n.data);
  return *n.data;
}

inline std::uint64_t SimFs::link_new(std::uint64_t dir, const std::string& name, bool is_dir, const std::string& path) {
  const std::uint64_t ino = state_.next_ino++;
  Node node;
  node.is_dir = is_dir;
  if (!is_dir) {
    node.data = std::make_shared<std::vector<unsigned char>>();
    node.durable = node.data;
  }
  state_.nodes.emplace(ino, std::move(node));
  state_.nodes.at(dir).entries[name] = ino;
  DirOp op;
  op.kind = DirOpKind::link;
  op.seq = state_.next_seq++;
  op.dir = dir;
  op.name = name;
  op.ino = ino;
  op.path = path;
  state_.dir_ops.push_back(std::move(op));
  ++state_.generation;
  return ino;
}

inline void SimFs::make_file_durable(Node& n) {
  if (n.pending.empty()) return;
  if (!n.diverged) {
    n.durable = n.data;  // shared; the next write copies (mutable_data)
  } else {
    // Only what was written since the failed writeback reaches the disk.
    auto disk = std::make_shared<std::vector<unsigned char>>(n.durable ? *n.durable : std::vector<unsigned char>{});
    for (const FileOp& op : n.pending) {
      if (op.is_truncate) {
        disk->resize(static_cast<std::size_t>(op.size));
        continue;
      }
      if (disk->size() < op.offset + op.size) disk->resize(static_cast<std::size_t>(op.offset + op.size));
      std::copy(op.bytes->begin(), op.bytes->end(), disk->begin() + static_cast<std::ptrdiff_t>(op.offset));
    }
    n.durable = std::move(disk);
  }
  n.pending.clear();
  ++state_.generation;
}

inline void SimFs::inject_sync_error(std::uint64_t nth) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_error_in_ = nth == 0 ? 1 : nth;
}

inline std::uint64_t SimFs::sync_errors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_errors_taken_;
}

inline std::string SimFs::sync_error_path() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_error_path_;
}

inline bool SimFs::take_sync_error(Node& n, const std::string& path) {
  if (sync_error_in_ == 0 || --sync_error_in_ != 0) return false;
  ++sync_errors_taken_;
  sync_error_path_ = path;
  // The pages are clean again but never reached the disk: nothing pending, nothing made durable.
  n.pending.clear();
  n.diverged = true;
  ++state_.generation;
  return true;
}

// Drops inodes nothing can reach any more: not in a live or durable entry, an open handle, or an
// unsynced directory operation (a crash may still bring those back).
inline void SimFs::collect_garbage() {
  std::set<std::uint64_t> marked;
  std::vector<std::uint64_t> stack{1};
  for (const auto& h : state_.handles) stack.push_back(h.second.ino);
  for (const auto& op : state_.dir_ops) {
    stack.push_back(op.dir);
    if (op.kind == DirOpKind::rename) stack.push_back(op.to_dir);
    if (op.ino != 0) stack.push_back(op.ino);
  }
  while (!stack.empty()) {
    const std::uint64_t ino = stack.back();
    stack.pop_back();
    if (!marked.insert(ino).second) continue;
    const auto it = state_.nodes.find(ino);
    if (it == state_.nodes.end() || !it->second.is_dir) continue;
    for (const auto& e : it->second.entries) stack.push_back(e.second);
    for (const auto& e : it->second.durable_entries) stack.push_back(e.second);
  }
  bool dropped = false;
  for (auto it = state_.nodes.begin(); it != state_.nodes.end();) {
    if (marked.count(it->first) == 0) {
      it = state_.nodes.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped) ++state_.generation;
}

inline void SimFs::fire(FsOp op, const std::string& path, bool barrier) {
  // A hook's own reads do not fire it again on its thread; other threads' operations still do.
  thread_local const SimFs* in_hook = nullptr;
  if (!hook_ || in_hook == this || (!barrier && !hook_every_mutation_)) return;
  struct Reset {
    const SimFs*& flag;
    const SimFs* before;
    ~Reset() { flag = before; }
  } reset{in_hook, in_hook};
  in_hook = this;
  PersistencePoint point;
  point.op = op;
  point.path = path;
  point.sequence = ++points_;
  hook_(*this, point);
}

// --- The Fs concept --------------------------------------------------------------------------

inline Result<FileHandle> SimFs::open(const std::string& path, OpenMode mode) {
  std::int64_t id = -1;
  bool created = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::open)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("open", path, l.err);
    std::uint64_t ino = l.ino;
    if (ino == 0) {
      if (mode != OpenMode::create_new) return detail::sim_error("open", path, ENOENT);
      ino = link_new(l.parent, l.name, false, path);
      created = true;
    } else if (mode == OpenMode::create_new) {
      return detail::sim_error("open", path, EEXIST);
    } else if (state_.nodes.at(ino).is_dir) {
      return detail::sim_error("open", path, EISDIR);
    }
    id = state_.next_handle++;
    state_.handles[id] = Handle{ino, mode != OpenMode::read, path};
  }
  if (created) fire(FsOp::open, path, false);
  return FileHandle{id};
}

inline Status SimFs::close(FileHandle f) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++state_.op_counts[static_cast<std::size_t>(FsOp::close)];
  Handle* h = nullptr;
  CKPT_TRY(handle_of(f, "close", 0, h));
  const auto held = state_.locks.find(h->ino);
  if (held != state_.locks.end() && held->second == f.id) state_.locks.erase(held);
  state_.handles.erase(f.id);
  collect_garbage();
  return Status();
}

inline Result<std::size_t> SimFs::pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++state_.op_counts[static_cast<std::size_t>(FsOp::pread)];
  Handle* h = nullptr;
  CKPT_TRY(handle_of(f, "pread", 0, h));
  const auto& data = *state_.nodes.at(h->ino).data;
  if (off >= data.size() || n == 0) return std::size_t{0};
  const std::size_t got = static_cast<std::size_t>(std::min<std::uint64_t>(n, data.size() - off));
  std::memcpy(buf, data.data() + off, got);
  return got;
}

inline Status SimFs::pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::pwrite)];
    Handle* h = nullptr;
    CKPT_TRY(handle_of(f, "pwrite", EBADF, h));  // Linux: EBADF on a read-only descriptor
    if (n == 0) return Status();
    if (off > kMaxFileSize || n > kMaxFileSize - off)
      return detail::sim_error("pwrite", "offset " + std::to_string(off), EFBIG);
    Node& node = state_.nodes.at(h->ino);
    auto& data = mutable_data(node);
    const auto* p = static_cast<const unsigned char*>(buf);
    if (data.size() < off + n) data.resize(static_cast<std::size_t>(off + n));  // a gap reads as zeros
    std::memcpy(data.data() + off, p, n);
    FileOp op;
    op.seq = state_.next_seq++;
    op.offset = off;
    op.size = n;
    op.bytes = std::make_shared<const std::vector<unsigned char>>(p, p + n);
    op.path = h->path;
    node.pending.push_back(std::move(op));
    ++state_.generation;
    path = h->path;
  }
  fire(FsOp::pwrite, path, false);
  return Status();
}

inline Status SimFs::sync(FileHandle f) { return sync_file(f, FsOp::sync, "fsync"); }

inline Status SimFs::sync_data(FileHandle f) { return sync_file(f, FsOp::sync_data, "fdatasync"); }

// fsync and fdatasync alike: every write of the file so far becomes durable (its metadata is in the node).
inline Status SimFs::sync_file(FileHandle f, FsOp op, const char* call) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(op)];
    Handle* h = nullptr;
    CKPT_TRY(handle_of(f, call, 0, h));
    if (take_sync_error(state_.nodes.at(h->ino), h->path)) return detail::sim_error(call, "fd " + std::to_string(f.id), EIO);
    make_file_durable(state_.nodes.at(h->ino));
    path = h->path;
  }
  fire(op, path, true);
  return Status();
}

inline Result<std::uint64_t> SimFs::file_size(FileHandle f) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++state_.op_counts[static_cast<std::size_t>(FsOp::file_size)];
  Handle* h = nullptr;
  CKPT_TRY(handle_of(f, "fstat", 0, h));
  return static_cast<std::uint64_t>(state_.nodes.at(h->ino).data->size());
}

inline Status SimFs::truncate(FileHandle f, std::uint64_t size) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::truncate)];
    Handle* h = nullptr;
    CKPT_TRY(handle_of(f, "ftruncate", EINVAL, h));  // Linux: EINVAL on a read-only descriptor
    if (size > kMaxFileSize) return detail::sim_error("ftruncate", "fd " + std::to_string(f.id), EFBIG);
    Node& node = state_.nodes.at(h->ino);
    mutable_data(node).resize(static_cast<std::size_t>(size));
    FileOp op;
    op.seq = state_.next_seq++;
    op.is_truncate = true;
    op.size = size;
    op.path = h->path;
    node.pending.push_back(std::move(op));
    ++state_.generation;
    path = h->path;
  }
  fire(FsOp::truncate, path, false);
  return Status();
}

inline Status SimFs::rename(const std::string& from, const std::string& to) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::rename)];
    const std::string what = from + " -> " + to;
    const Lookup src = lookup(from);
    if (src.err != 0) return detail::sim_error("rename", what, src.err);
    if (src.ino == 0) return detail::sim_error("rename", what, ENOENT);
    const Lookup dst = lookup(to);
    if (dst.err != 0) return detail::sim_error("rename", what, dst.err);
    if (src.parent == 0 || dst.parent == 0) return detail::sim_error("rename", what, EBUSY);
    if (dst.ino == src.ino) return Status();  // the same file: POSIX says do nothing
    const bool src_dir = state_.nodes.at(src.ino).is_dir;
    if (dst.ino != 0) {
      const Node& old = state_.nodes.at(dst.ino);
      if (src_dir && !old.is_dir) return detail::sim_error("rename", what, ENOTDIR);
      if (!src_dir && old.is_dir) return detail::sim_error("rename", what, EISDIR);
      if (old.is_dir && !old.entries.empty()) return detail::sim_error("rename", what, ENOTEMPTY);
    }
    // A directory cannot move into its own subtree (paths are lexical, so a prefix test decides).
    if (src_dir && dst.parts.size() > src.parts.size() &&
        std::equal(src.parts.begin(), src.parts.end(), dst.parts.begin()))
      return detail::sim_error("rename", what, EINVAL);
    state_.nodes.at(src.parent).entries.erase(src.name);
    state_.nodes.at(dst.parent).entries[dst.name] = src.ino;
    DirOp op;
    op.kind = DirOpKind::rename;
    op.seq = state_.next_seq++;
    op.dir = src.parent;
    op.to_dir = dst.parent;
    op.name = src.name;
    op.to_name = dst.name;
    op.ino = src.ino;
    op.path = from;
    op.to_path = to;
    state_.dir_ops.push_back(std::move(op));
    ++state_.generation;
    collect_garbage();
  }
  fire(FsOp::rename, to, true);
  return Status();
}

inline Status SimFs::unlink(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::unlink)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("unlink", path, l.err);
    if (l.ino == 0) return detail::sim_error("unlink", path, ENOENT);
    if (state_.nodes.at(l.ino).is_dir) return detail::sim_error("unlink", path, EISDIR);
    unlink_entry(l, path);
  }
  fire(FsOp::unlink, path, true);
  return Status();
}

inline void SimFs::unlink_entry(const Lookup& l, const std::string& path) {
  state_.nodes.at(l.parent).entries.erase(l.name);
  DirOp op;
  op.kind = DirOpKind::unlink;
  op.seq = state_.next_seq++;
  op.dir = l.parent;
  op.name = l.name;
  op.ino = l.ino;
  op.path = path;
  state_.dir_ops.push_back(std::move(op));
  ++state_.generation;
  collect_garbage();
}

inline Status SimFs::mkdir(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::mkdir)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("mkdir", path, l.err);
    if (l.ino != 0) return detail::sim_error("mkdir", path, EEXIST);
    (void)link_new(l.parent, l.name, true, path);
  }
  fire(FsOp::mkdir, path, false);
  return Status();
}

inline Status SimFs::rmdir(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::rmdir)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("rmdir", path, l.err);
    if (l.ino == 0) return detail::sim_error("rmdir", path, ENOENT);
    if (l.parent == 0) return detail::sim_error("rmdir", path, EBUSY);
    const Node& node = state_.nodes.at(l.ino);
    if (!node.is_dir) return detail::sim_error("rmdir", path, ENOTDIR);
    if (!node.entries.empty()) return detail::sim_error("rmdir", path, ENOTEMPTY);
    unlink_entry(l, path);
  }
  fire(FsOp::rmdir, path, true);
  return Status();
}

inline Status SimFs::sync_dir(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::sync_dir)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("open directory", path, l.err);
    if (l.ino == 0) return detail::sim_error("open directory", path, ENOENT);
    if (!state_.nodes.at(l.ino).is_dir) return detail::sim_error("open directory", path, ENOTDIR);
    // Walking backwards, an operation becomes durable if it touches this directory, or a directory
    // that a later durable operation touches (a journal commits a rename with what it depends on).
    std::set<std::uint64_t> forced{l.ino};
    std::vector<bool> durable(state_.dir_ops.size(), false);
    for (std::size_t i = state_.dir_ops.size(); i-- > 0;) {
      const DirOp& op = state_.dir_ops[i];
      const bool touches = forced.count(op.dir) != 0 || (op.kind == DirOpKind::rename && forced.count(op.to_dir) != 0);
      if (!touches) continue;
      durable[i] = true;
      forced.insert(op.dir);
      if (op.kind == DirOpKind::rename) forced.insert(op.to_dir);
    }
    // Operations are moved out only when some become durable: moving every one into a list that is then
    // dropped would leave the pending ones without names.
    if (std::find(durable.begin(), durable.end(), true) != durable.end()) {
      std::vector<DirOp> still_pending;
      for (std::size_t i = 0; i < state_.dir_ops.size(); ++i) {
        DirOp& op = state_.dir_ops[i];
        if (!durable[i]) {
          still_pending.push_back(std::move(op));
          continue;
        }
        auto& entries = state_.nodes.at(op.dir).durable_entries;
        switch (op.kind) {
          case DirOpKind::link: entries[op.name] = op.ino; break;
          case DirOpKind::unlink: entries.erase(op.name); break;
          case DirOpKind::rename:
            entries.erase(op.name);
            state_.nodes.at(op.to_dir).durable_entries[op.to_name] = op.ino;
            break;
        }
      }
      state_.dir_ops = std::move(still_pending);
      ++state_.generation;
      collect_garbage();
    }
  }
  fire(FsOp::sync_dir, path, true);
  return Status();
}

inline Result<std::vector<std::string>> SimFs::list_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++state_.op_counts[static_cast<std::size_t>(FsOp::list_dir)];
  const Lookup l = lookup(path);
  if (l.err != 0) return detail::sim_error("opendir", path, l.err);
  if (l.ino == 0) return detail::sim_error("opendir", path, ENOENT);
  const Node& node = state_.nodes.at(l.ino);
  if (!node.is_dir) return detail::sim_error("opendir", path, ENOTDIR);
  std::vector<std::string> names;
  names.reserve(node.entries.size());
  for (const auto& e : node.entries) names.push_back(e.first);  // std::map order is byte order, as std::sort
  return names;
}

inline Result<PathInfo> SimFs::stat(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++state_.op_counts[static_cast<std::size_t>(FsOp::stat)];
  const Lookup l = lookup(path);
  if (l.err != 0) return detail::sim_error("stat", path, l.err);
  if (l.ino == 0) return detail::sim_error("stat", path, ENOENT);
  const Node& node = state_.nodes.at(l.ino);
  return PathInfo{node.is_dir, node.is_dir ? 0 : static_cast<std::uint64_t>(node.data->size()),
                  node.is_dir ? EntryKind::directory : EntryKind::file};
}

inline Result<FileHandle> SimFs::lock(const std::string& path) {
  std::int64_t id = -1;
  bool created = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    ++state_.op_counts[static_cast<std::size_t>(FsOp::lock)];
    const Lookup l = lookup(path);
    if (l.err != 0) return detail::sim_error("open lock file", path, l.err);
    std::uint64_t ino = l.ino;
    if (ino == 0) {
      ino = link_new(l.parent, l.name, false, path);
      created = true;
    } else if (state_.nodes.at(ino).is_dir) {
      return detail::sim_error("open lock file", path, EISDIR);
    }
    if (state_.locks.count(ino) != 0) return make_error(Code::conflict, path + ": locked by another writer");
    id = state_.next_handle++;
    state_.handles[id] = Handle{ino, true, path};
    state_.locks[ino] = id;
  }
  if (created) fire(FsOp::lock, path, false);
  return FileHandle{id};
}

// --- Crash states ----------------------------------------------------------------------------

inline SimFs::DirTable SimFs::replay_dirs(const std::vector<bool>& dir_kept) const {
  // Only directories a kept operation touches are copied; the rest read their durable entries.
  DirTable table;
  auto entries = [&](std::uint64_t dir) -> std::map<std::string, std::uint64_t>& {
    auto it = table.find(dir);
    if (it != table.end()) return it->second;
    const auto node = state_.nodes.find(dir);
    return table[dir] = (node != state_.nodes.end() ? node->second.durable_entries : std::map<std::string, std::uint64_t>{});
  };
  for (std::size_t i = 0; i < state_.dir_ops.size(); ++i) {
    if (!dir_kept[i]) continue;
    const DirOp& op = state_.dir_ops[i];
    switch (op.kind) {
      case DirOpKind::link: entries(op.dir)[op.name] = op.ino; break;
      case DirOpKind::unlink: entries(op.dir).erase(op.name); break;
      case DirOpKind::rename:
        entries(op.dir).erase(op.name);
        entries(op.to_dir)[op.to_name] = op.ino;
        break;
    }
  }
  return table;
}

inline std::shared_ptr<const SimFs::CrashPlan> SimFs::plan(const CrashModel& model) const {
  if (plan_cache_ && plan_cache_->generation == state_.generation && plan_cache_->model.tear == model.tear &&
      plan_cache_->model.garble == model.garble)
    return plan_cache_;
  auto p = std::make_shared<CrashPlan>();
  p->model = model;
  p->generation = state_.generation;
  const auto exists = [&](std::uint64_t ino) { return state_.nodes.count(ino) != 0; };

  // Files some choice can reach: reachable through durable entries plus every linked or renamed name.
  DirTable all_names;
  for (const auto& n : state_.nodes)
    if (n.second.is_dir) all_names[n.first] = n.second.durable_entries;
  for (std::size_t i = 0; i < state_.dir_ops.size(); ++i) {
    const DirOp& op = state_.dir_ops[i];
    if (op.kind != DirOpKind::unlink) all_names[op.kind == DirOpKind::rename ? op.to_dir : op.dir]["\x01" + std::to_string(i)] = op.ino;
  }
  std::set<std::uint64_t> maybe;
  detail::sim_reach([&](std::uint64_t d) { const auto it = all_names.find(d); return it == all_names.end() ? nullptr : &it->second; },
                    exists, maybe);
  for (const auto ino : maybe) {
    const Node& node = state_.nodes.at(ino);
    if (node.is_dir) continue;
    for (std::size_t pos = 0; pos < node.pending.size(); ++pos) {
      const FileOp& op = node.pending[pos];
      CrashPlan::FileItem item;
      item.ino = ino;
      item.pos = pos;
      item.options.push_back(Choice{Fate::lost, 0});
      item.options.push_back(Choice{Fate::kept, 0});
      if (!op.is_truncate) {
        if (model.tear)
          for (const auto cut : detail::sim_tear_points(op.offset, op.offset + op.size)) item.options.push_back(Choice{Fate::torn, cut});
        if (model.garble) item.options.push_back(Choice{Fate::garbled, 0});
      }
      p->file_items.push_back(std::move(item));
    }
  }
  std::sort(p->file_items.begin(), p->file_items.end(), [&](const CrashPlan::FileItem& a, const CrashPlan::FileItem& b) {
    return state_.nodes.at(a.ino).pending[a.pos].seq < state_.nodes.at(b.ino).pending[b.pos].seq;
  });

  const std::size_t k = state_.dir_ops.size();
  if (k <= kExactDirOps) {
    // Every subset of directory operations, once per distinct tree it leaves. A subset is replayed as
    // a change set over the durable entries, and the tree is named by the changes in the directories
    // it reaches: equal names, equal trees. Only subdirectories and files with unsynced items matter
    // for reachability, so each directory's relevant durable entries are listed once.
    p->exact = true;
    p->total = 0;
    std::set<std::uint64_t> pending_files;
    for (const auto& item : p->file_items) pending_files.insert(item.ino);
    std::map<std::uint64_t, std::vector<std::pair<std::string, std::uint64_t>>> relevant;
    for (const auto& n : state_.nodes) {
      if (!n.second.is_dir) continue;
      for (const auto& e : n.second.durable_entries) {
        const auto child = state_.nodes.find(e.second);
        if (child != state_.nodes.end() && (child->second.is_dir || pending_files.count(e.second) != 0)) relevant[n.first].push_back(e);
      }
    }
    std::set<std::string> seen;
    for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << k); ++mask) {
      std::vector<bool> kept(k);
      std::map<std::uint64_t, std::map<std::string, std::uint64_t>> changes;  // 0: the name is gone
      for (std::size_t j = 0; j < k; ++j) {
        kept[j] = ((mask >> j) & 1) != 0;
        if (!kept[j]) continue;
        const DirOp& op = state_.dir_ops[j];
        switch (op.kind) {
          case DirOpKind::link: changes[op.dir][op.name] = op.ino; break;
          case DirOpKind::unlink: changes[op.dir][op.name] = 0; break;
          case DirOpKind::rename:
            changes[op.dir][op.name] = 0;
            changes[op.to_dir][op.to_name] = op.ino;
            break;
        }
      }
      for (auto& dir : changes) {  // drop changes that leave a name as the durable state has it
        const auto node = state_.nodes.find(dir.first);
        for (auto it = dir.second.begin(); it != dir.second.end();) {
          std::uint64_t durable = 0;
          if (node != state_.nodes.end()) {
            const auto e = node->second.durable_entries.find(it->first);
            if (e != node->second.durable_entries.end()) durable = e->second;
          }
          it = durable == it->second ? dir.second.erase(it) : std::next(it);
        }
      }
      std::set<std::uint64_t> reached_dirs, reached_files;
      std::vector<std::uint64_t> stack{1};
      const auto visit = [&](std::uint64_t ino) {
        const auto node = state_.nodes.find(ino);
        if (node == state_.nodes.end()) return;
        if (node->second.is_dir) {
          stack.push_back(ino);
        } else if (pending_files.count(ino) != 0) {
          reached_files.insert(ino);
        }
      };
      while (!stack.empty()) {
        const std::uint64_t dir = stack.back();
        stack.pop_back();
        if (!reached_dirs.insert(dir).second) continue;
        const auto changed = changes.find(dir);
        const auto listed = relevant.find(dir);
        if (listed != relevant.end())
          for (const auto& e : listed->second)
            if (changed == changes.end() || changed->second.count(e.first) == 0) visit(e.second);
        if (changed != changes.end())
          for (const auto& e : changed->second)
            if (e.second != 0) visit(e.second);
      }
      std::string signature;
      for (const auto& dir : changes) {
        if (dir.second.empty() || reached_dirs.count(dir.first) == 0) continue;
        signature += std::to_string(dir.first) + "{";
        for (const auto& e : dir.second) signature += std::to_string(e.first.size()) + ":" + e.first + "=" + std::to_string(e.second) + ";";
        signature += "}";
      }
      if (!seen.insert(signature).second) continue;
      CrashPlan::Block block;
      block.dir_kept = std::move(kept);
      for (std::size_t i = 0; i < p->file_items.size(); ++i) {
        if (reached_files.count(p->file_items[i].ino) == 0) continue;
        block.items.push_back(i);
        block.count = detail::sat_mul(block.count, p->file_items[i].options.size());
      }
      p->total = detail::sat_add(p->total, block.count);
      p->blocks.push_back(std::move(block));
    }
  } else {
    p->total = 1;
    for (std::size_t j = 0; j < k; ++j) p->total = detail::sat_mul(p->total, 2);
    for (const auto& item : p->file_items) p->total = detail::sat_mul(p->total, item.options.size());
  }
  plan_cache_ = p;
  return p;
}

inline SimFs SimFs::build_crash(const std::vector<bool>& dir_kept, const FateTable& fates) const {
  const DirTable table = replay_dirs(dir_kept);
  const auto exists = [&](std::uint64_t ino) { return state_.nodes.count(ino) != 0; };
  const auto entries_of = [&](std::uint64_t d) -> const std::map<std::string, std::uint64_t>* {
    const auto t = table.find(d);
    if (t != table.end()) return &t->second;
    const auto n = state_.nodes.find(d);
    return (n != state_.nodes.end() && n->second.is_dir) ? &n->second.durable_entries : nullptr;
  };
  std::set<std::uint64_t> reach;
  detail::sim_reach(entries_of, exists, reach);

  SimFs out;
  std::string note;
  for (std::size_t i = 0; i < state_.dir_ops.size(); ++i) {
    const DirOp& op = state_.dir_ops[i];
    note += "#" + std::to_string(op.seq) + " " +
            (op.kind == DirOpKind::link ? "link " + op.path
             : op.kind == DirOpKind::unlink ? "unlink " + op.path
                                            : "rename " + op.path + " -> " + op.to_path) +
            ": " + (dir_kept[i] ? "kept" : "lost") + "\n";
  }
  out.state_.nodes.clear();
  for (const auto ino : reach) {
    const Node& src = state_.nodes.at(ino);
    Node node;
    node.is_dir = src.is_dir;
    if (src.is_dir) {
      for (const auto& e : *entries_of(ino))
        if (reach.count(e.second) != 0) node.entries.insert(e);
      node.durable_entries = node.entries;
    } else {
      const auto f = fates.find(ino);
      const auto choice = [&](std::size_t pos) { return f != fates.end() && pos < f->second.size() ? f->second[pos] : Choice{}; };
      bool any = false;
      for (std::size_t pos = 0; pos < src.pending.size(); ++pos) {
        const FileOp& op = src.pending[pos];
        const Choice c = choice(pos);
        any = any || c.fate != Fate::lost;
        note += "#" + std::to_string(op.seq) + " " +
                (op.is_truncate ? "truncate " + op.path + " to " + std::to_string(op.size)
                                : "write " + op.path + " [" + std::to_string(op.offset) + ", " + std::to_string(op.offset + op.size) + ")") +
                ": " + fate_name(c.fate) + (c.fate == Fate::torn ? " at " + std::to_string(c.cut) : std::string()) + "\n";
      }
      if (!any) {
        node.data = src.durable;  // shared: nothing unsynced survived
      } else {
        auto bytes = std::make_shared<std::vector<unsigned char>>(*src.durable);
        for (std::size_t pos = 0; pos < src.pending.size(); ++pos) {
          const FileOp& op = src.pending[pos];
          const Choice c = choice(pos);
          if (c.fate == Fate::lost) continue;
          if (op.is_truncate) {
            bytes->resize(static_cast<std::size_t>(op.size));
            continue;
          }
          const std::uint64_t end = c.fate == Fate::torn ? c.cut : op.offset + op.size;
          if (bytes->size() < end) bytes->resize(static_cast<std::size_t>(end));
          if (c.fate == Fate::garbled) {
            for (std::uint64_t o = op.offset; o < end; ++o) (*bytes)[static_cast<std::size_t>(o)] = detail::sim_garbage(op.seq, o);
          } else {
            std::memcpy(bytes->data() + op.offset, op.bytes->data(), static_cast<std::size_t>(end - op.offset));
          }
        }
        node.data = std::move(bytes);
      }
      node.durable = node.data;
    }
    out.state_.nodes.emplace(ino, std::move(node));
  }
  out.state_.next_ino = state_.next_ino;
  out.state_.next_seq = state_.next_seq;
  out.crash_note_ = std::move(note);
  return out;
}

inline std::uint64_t SimFs::crash_state_count(const CrashModel& model) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plan(model)->total;
}

inline Result<SimFs> SimFs::crash_state(std::uint64_t index, const CrashModel& model) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto p = plan(model);
  if (index >= p->total)
    return make_error(Code::invalid_argument, "crash state " + std::to_string(index) + " does not exist: there are " +
                                                  std::to_string(p->total));
  FateTable fates;
  const auto choose = [&](std::size_t item, std::uint64_t& rest) {
    const auto& it = p->file_items[item];
    auto& slot = fates[it.ino];
    slot.resize(state_.nodes.at(it.ino).pending.size());
    slot[it.pos] = it.options[static_cast<std::size_t>(rest % it.options.size())];
    rest /= it.options.size();
  };
  std::vector<bool> kept(state_.dir_ops.size(), false);
  std::uint64_t rest = index;
  if (p->exact) {
    for (const auto& block : p->blocks) {
      if (rest >= block.count) {
        rest -= block.count;
        continue;
      }
      kept = block.dir_kept;
      for (const auto item : block.items) choose(item, rest);
      break;
    }
  } else {
    for (std::size_t j = 0; j < kept.size(); ++j) {
      kept[j] = (rest % 2) != 0;
      rest /= 2;
    }
    for (std::size_t i = 0; i < p->file_items.size(); ++i) choose(i, rest);
  }
  return build_crash(kept, fates);
}

inline SimFs SimFs::sample_crash_state(std::uint64_t seed, const CrashModel& model) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // mt19937_64's output is fixed by the C++ standard; the reductions below are ours, so a seed
  // gives the same state with every standard library.
  std::mt19937_64 rng(seed);
  std::vector<bool> kept(state_.dir_ops.size());
  for (std::size_t j = 0; j < kept.size(); ++j) kept[j] = (rng() >> 63) != 0;
  const DirTable table = replay_dirs(kept);
  std::set<std::uint64_t> reach;
  detail::sim_reach(
      [&](std::uint64_t d) -> const std::map<std::string, std::uint64_t>* {
        const auto t = table.find(d);
        if (t != table.end()) return &t->second;
        const auto n = state_.nodes.find(d);
        return (n != state_.nodes.end() && n->second.is_dir) ? &n->second.durable_entries : nullptr;
      },
      [&](std::uint64_t ino) { return state_.nodes.count(ino) != 0; }, reach);
  FateTable fates;
  for (const auto ino : reach) {
    const Node& node = state_.nodes.at(ino);
    if (node.is_dir || node.pending.empty()) continue;
    auto& slot = fates[ino];
    for (const FileOp& op : node.pending) {
      std::vector<Fate> fates_allowed{Fate::lost, Fate::kept};
      const std::uint64_t end = op.offset + op.size;
      const bool can_tear = !op.is_truncate && model.tear && !detail::sim_tear_points(op.offset, end).empty();
      if (can_tear) fates_allowed.push_back(Fate::torn);
      if (!op.is_truncate && model.garble) fates_allowed.push_back(Fate::garbled);
      Choice c;
      c.fate = fates_allowed[static_cast<std::size_t>(rng() % fates_allowed.size())];
      if (c.fate == Fate::torn) {
        // Any 512 B or 4 KiB boundary inside the write; fall back to 512 B when no page boundary is.
        std::uint64_t g = (rng() >> 63) != 0 ? 4096 : 512;
        if ((op.offset / g + 1) * g >= end) g = 512;
        const std::uint64_t first = (op.offset / g + 1) * g;
        const std::uint64_t count = (end - 1 - first) / g + 1;
        c.cut = first + (rng() % count) * g;
      }
      slot.push_back(c);
    }
  }
  return build_crash(kept, fates);
}

inline SimFs SimFs::durable_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return build_crash(std::vector<bool>(state_.dir_ops.size(), false), FateTable{});
}

inline std::size_t SimFs::unsynced_file_ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& node : state_.nodes) n += node.second.pending.size();
  return n;
}

inline std::size_t SimFs::unsynced_dir_ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.dir_ops.size();
}

// --- Tests and debugging ---------------------------------------------------------------------

inline void SimFs::set_persistence_hook(Hook hook, bool every_mutation) {
  hook_ = std::move(hook);
  hook_every_mutation_ = every_mutation;
}

inline std::uint64_t SimFs::op_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t n = 0;
  for (const auto c : state_.op_counts) n += c;
  return n;
}

inline std::uint64_t SimFs::op_count(FsOp op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.op_counts[static_cast<std::size_t>(op)];
}

inline Result<std::vector<unsigned char>> SimFs::file_content(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Lookup l = lookup(path);
  if (l.err != 0) return detail::sim_error("open", path, l.err);
  if (l.ino == 0) return detail::sim_error("open", path, ENOENT);
  const Node& node = state_.nodes.at(l.ino);
  if (node.is_dir) return detail::sim_error("open", path, EISDIR);
  return *node.data;
}

inline std::uint64_t SimFs::fingerprint() const {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamHasher hasher;
  // Depth first in name order; each record is kind, path length, path, then size and bytes for files.
  std::vector<std::pair<std::string, std::uint64_t>> stack{{"/", 1}};
  while (!stack.empty()) {
    const auto [path, ino] = stack.back();
    stack.pop_back();
    const Node& node = state_.nodes.at(ino);
    unsigned char header[9];
    header[0] = node.is_dir ? 'D' : 'F';
    const std::uint64_t len = path.size();
    for (int b = 0; b < 8; ++b) header[1 + b] = static_cast<unsigned char>(len >> (8 * b));
    hasher.update(header, sizeof header);
    hasher.update(path.data(), path.size());
    if (node.is_dir) {
      for (auto it = node.entries.rbegin(); it != node.entries.rend(); ++it) stack.emplace_back(join_path(path, it->first), it->second);
    } else {
      const std::uint64_t size = node.data->size();
      unsigned char sz[8];
      for (int b = 0; b < 8; ++b) sz[b] = static_cast<unsigned char>(size >> (8 * b));
      hasher.update(sz, sizeof sz);
      hasher.update(node.data->data(), node.data->size());
    }
  }
  return hasher.digest();
}

inline std::string SimFs::dump() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t file_ops = 0;
  for (const auto& n : state_.nodes) file_ops += n.second.pending.size();
  std::string out = "SimFs: " + std::to_string(state_.nodes.size()) + " inodes, " + std::to_string(state_.handles.size()) +
                    " open handles, " + std::to_string(state_.locks.size()) + " locks, " + std::to_string(state_.dir_ops.size()) +
                    " unsynced directory ops, " + std::to_string(file_ops) + " unsynced file ops\n";
  std::set<std::uint64_t> listed;
  std::vector<std::pair<std::string, std::uint64_t>> stack{{"/", 1}};
  const auto describe = [&](const std::string& path, std::uint64_t ino) {
    const Node& node = state_.nodes.at(ino);
    std::string line = "  " + path + "  inode " + std::to_string(ino);
    if (node.is_dir) {
      line += " dir, " + std::to_string(node.entries.size()) + " live / " + std::to_string(node.durable_entries.size()) +
              " durable entries";
    } else {
      line += " file, " + std::to_string(node.data->size()) + " B live / " + std::to_string(node.durable->size()) +
              " B durable, " + std::to_string(node.pending.size()) + " unsynced";
    }
    return line + "\n";
  };
  while (!stack.empty()) {
    const auto [path, ino] = stack.back();
    stack.pop_back();
    if (!listed.insert(ino).second) continue;
    out += describe(path, ino);
    const Node& node = state_.nodes.at(ino);
    for (auto it = node.entries.rbegin(); it != node.entries.rend(); ++it) stack.emplace_back(join_path(path, it->first), it->second);
  }
  for (const auto& n : state_.nodes)
    if (listed.count(n.first) == 0) out += describe("(no live name)", n.first);
  for (const auto& op : state_.dir_ops) {
    out += "  unsynced #" + std::to_string(op.seq) + " ";
    switch (op.kind) {
      case DirOpKind::link: out += "link " + op.path; break;
      case DirOpKind::unlink: out += "unlink " + op.path; break;
      case DirOpKind::rename: out += "rename " + op.path + " -> " + op.to_path; break;
    }
    out += " (inode " + std::to_string(op.ino) + ")\n";
  }
  for (const auto& n : state_.nodes)
    for (const auto& op : n.second.pending)
      out += "  unsynced #" + std::to_string(op.seq) + " " +
             (op.is_truncate ? "truncate " + op.path + " to " + std::to_string(op.size)
                             : "write " + op.path + " [" + std::to_string(op.offset) + ", " + std::to_string(op.offset + op.size) + ")") +
             " (inode " + std::to_string(n.first) + ")\n";
  for (const auto& h : state_.handles)
    out += "  handle " + std::to_string(h.first) + " -> " + h.second.path + " (inode " + std::to_string(h.second.ino) + ", " +
           (h.second.writable ? "read_write" : "read") + (state_.locks.count(h.second.ino) && state_.locks.at(h.second.ino) == h.first ? ", locked" : "") + ")\n";
  return out;
}

}  // namespace ckpt
