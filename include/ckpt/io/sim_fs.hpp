// ckpt: an in-memory Fs with a persistence model, to enumerate every state a crash can leave.
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

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../error.hpp"
#include "fs.hpp"
#include "fs_op.hpp"

namespace ckpt {

// The fate of one unsynced item at a crash (see the model above).
enum class Fate : std::uint8_t { lost, kept, torn, garbled };
[[nodiscard]] inline const char* fate_name(Fate f) noexcept {
  switch (f) {
    case Fate::lost: return "lost";
    case Fate::kept: return "kept";
    case Fate::torn: return "torn";
    case Fate::garbled: return "garbled";
  }
  return "unknown";
}

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
  void make_file_durable(Node& n);
  // Applies an injected writeback error to the sync of the file at path; true when it fails.
  [[nodiscard]] bool take_sync_error(Node& n, const std::string& path);
  void collect_garbage();
  [[nodiscard]] std::shared_ptr<const CrashPlan> plan(const CrashModel& model) const;
  [[nodiscard]] DirTable replay_dirs(const std::vector<bool>& dir_kept) const;
  [[nodiscard]] SimFs build_crash(const std::vector<bool>& dir_kept, const FateTable& fates) const;
  void fire(FsOp op, const std::string& path, bool barrier);

  State state_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const CrashPlan> plan_cache_;
  Hook hook_;
  bool hook_every_mutation_ = false;
  bool in_hook_ = false;
  std::uint64_t points_ = 0;
  std::string crash_note_;
  std::uint64_t sync_error_in_ = 0;  // syncs left before the failing one; 0: none armed
  std::uint64_t sync_errors_taken_ = 0;
  std::string sync_error_path_;
};

}  // namespace ckpt

#include "../impl/sim_fs_inl.hpp"
