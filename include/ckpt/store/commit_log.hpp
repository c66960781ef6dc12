// ckpt: the commit log under a Store (spec/JOURNAL.md, spec/OBJECT.md 4): what a store's log says (its
// transaction table) and the few writes that make a step exist or go. One Store runs the rank commit,
// retention and verification over it; two logs implement it (LevelDB's Env plays the same part for bytes):
//
//   JournalLog   the JOURNAL file of a directory on a file system, under its LOCK (store/journal_log.hpp)
//   ObjectLog    log objects created with conditional writes on an object store (store/object_log.hpp)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../core/format.hpp"
#include "../core/problem.hpp"
#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "journal.hpp"

namespace ckpt {

enum class Access : std::uint8_t { read_only, read_write };

// Which committed steps to keep (spec/JOURNAL.md 10). The most recent commit is always kept.
struct RetentionPolicy {
  std::uint64_t keep_last = 0;   // keep the N most recent commits; 0 disables retention
  std::uint64_t keep_every = 0;  // also keep every step whose number is a multiple of K; 0: none
  [[nodiscard]] bool enabled() const noexcept { return keep_last > 0; }
};

struct StoreOptions {
  bool create_if_missing = false;      // read_write: create the directory and an empty journal
  bool allow_corrupt_journal = false;  // read_only: open despite mid-log damage and report it
  RetentionPolicy retention;           // applied after each commit
  // Shard files (spec/FORMAT.md): alignment and chunk size of what this store writes.
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  std::size_t buffer_size = std::size_t{4} << 20;
  // Opt-in: before a rank reports its finished shard, read it back through the reader's checks and verify
  // every chunk (spec/FORMAT.md 7.2). Off: the commit takes the pieces from what the writer wrote.
  bool verify_written = false;
  // Directory stores (the tiers' memory stores): a retired step's shard files move to slots/ and the next
  // steps' shards are written over them, so no page is allocated in steady state (spec/JOURNAL.md 10.1).
  bool reuse_files = false;
  // reserve_slot's mappings, pinned for device-to-host copies while mapped (spec/ASYNC.md 6.1): pin_slot is
  // called on each new mapping (its failure fails the reservation), unpin_slot before it is unmapped.
  std::function<Status(void* at, std::size_t bytes)> pin_slot;
  std::function<void(void* at)> unpin_slot;
  // Object storage (spec/OBJECT.md): how shard objects are uploaded, and how open_store reaches an s3:// URL.
  object::ObjectFsOptions io;
  object::ObjectOpener open_objects;
};

enum class TxnState : std::uint8_t {
  open,       // BEGIN without COMMIT or ABORT: in progress, or left by a crash
  committed,  // COMMIT durable: the step exists
  aborted,    // ABORT durable: its files may be removed
  retired,    // committed, then RETIRE durable: its files may be removed
};
[[nodiscard]] constexpr EnumBounds<TxnState> enum_bounds(TxnState) noexcept { return {TxnState::open, TxnState::retired}; }
[[nodiscard]] const char* txn_state_name(TxnState s) noexcept;

// Everything the journal says about one transaction.
struct TxnInfo {
  std::uint64_t txn = 0, step = 0;
  std::uint32_t world_size = 1;
  std::vector<TxnFile> files;  // from BEGIN; MANIFEST is implied
  TxnState state = TxnState::open;
  std::uint64_t begin_offset = 0;
  std::uint64_t end_offset = 0;     // COMMIT or ABORT record
  std::uint64_t retire_offset = 0;  // RETIRE record
  CommitRecord commit;              // when committed or retired
  std::optional<SaveRecord> save;   // SAVE_STATS of the commit, when the writer recorded one (spec 4.8)
  AbortReason abort_reason = AbortReason::user;
  // Whether its step directory may still exist: compaction keeps the records of an aborted or retired
  // transaction until its files are gone (spec 5.7).
  bool dir_present = true;
  [[nodiscard]] std::string dir() const { return step_dir_name(step, txn); }
};

enum class RecoveryActionKind : std::uint8_t {
  truncate_journal,  // drop the torn tail at offset (done by the rewrite)
  append_abort,      // write ABORT for a transaction left open
  remove_file,       // a file named by an aborted or retired transaction, or a leftover temporary journal
  remove_dir,        // its step directory, once empty
  sync_dir,          // make the removals durable
  append_commit,     // roll forward: an open transaction whose MANIFEST and shards all verify (spec 6.4)
  quarantine,        // move a step directory whose fate is ambiguous to quarantine/ (spec 6.8)
  rewrite_journal,   // write the journal anew from the records recovery keeps (spec 5.7, 6.4)
};
[[nodiscard]] constexpr EnumBounds<RecoveryActionKind> enum_bounds(RecoveryActionKind) noexcept {
  return {RecoveryActionKind::truncate_journal, RecoveryActionKind::rewrite_journal};
}
[[nodiscard]] const char* recovery_action_name(RecoveryActionKind k) noexcept;

struct RecoveryAction {
  RecoveryActionKind kind = RecoveryActionKind::sync_dir;
  std::string path;
  std::uint64_t txn = 0;
  std::uint64_t offset = 0, length = 0;  // truncate_journal: the torn bytes
  std::string to;                        // quarantine: where the directory goes
  CommitRecord commit;                   // append_commit: the record, from the MANIFEST on disk
  bool done = false;
  std::string error;  // set when the action was tried and failed
  [[nodiscard]] std::string describe() const;
};

// What recovery found in a store and what it did (or, in a dry run, would do). Deterministic: the same
// journal bytes and directory contents always give the same report and actions, in the same order.
struct RecoveryReport {
  std::string store;
  JournalScan journal;                       // records, torn tail, corruption
  std::vector<TxnInfo> transactions;         // every transaction the journal names, by txn id
  std::vector<Problem> problems;             // valid records that break the protocol, in the journal: blocks recovery
  std::vector<std::string> unknown_entries;  // store entries no record explains: reported, never removed
  std::vector<std::string> notes;            // e.g. files kept because no record names them
  std::vector<std::string> salvaged;         // digest-valid records of a damaged tail that recovery applies
  std::vector<Problem> log_damage;           // log objects that do not decode or do not belong (spec/OBJECT.md 4.3): reported
  std::vector<RecoveryAction> actions;       // in execution order
  std::uint64_t next_txn = 1;                // above every txn id in the journal and in any step-<s>-<t> name
  bool dry_run = true;
  bool applied = false;  // actions were carried out

  // Mid-log damage or protocol problems: only ckpt-repair may change such a store.
  [[nodiscard]] bool corrupt() const noexcept { return journal.corrupt() || !problems.empty(); }
  // A damaged tail that is not a clean tear (spec 6.3): recovery salvages it, readers report it.
  [[nodiscard]] bool tail_damaged() const noexcept { return journal.tail_damaged(); }
  // Nothing torn, nothing corrupt, nothing to clean up (the rewrite every writable open does aside).
  [[nodiscard]] bool clean() const noexcept;
  // Code::corrupt naming every problem and telling the user to run ckpt-repair; ok when not corrupt.
  [[nodiscard]] Status corruption_status() const;
};

// Reads a store and plans its recovery without writing or locking anything (a dry run).
[[nodiscard]] Result<RecoveryReport> check_store(FsRef fs, const std::string& path);
// Takes the writer lock, then plans and (unless dry_run) runs recovery. A corrupt journal is reported,
// not changed: the report comes back with corrupt() set and applied false.
[[nodiscard]] Result<RecoveryReport> recover_store(FsRef fs, const std::string& path, bool dry_run);

// What garbage collection found and did (spec/OBJECT.md 4.5).
struct GarbageReport {
  std::vector<std::string> removed;          // objects of dead transactions deleted
  std::vector<std::string> aborted_uploads;  // multipart uploads of dead transactions aborted
  std::vector<std::string> kept;             // transactions whose fate cannot be proven: never deleted
  bool dry_run = true;
};

// What a transaction's COMMIT attempt left behind when it failed.
enum class CommitDoubt : std::uint8_t {
  none,      // provably not committed: its files may be removed
  in_doubt,  // the commit may be durable: nothing may be removed, recovery or the next listing decides
};

// The log of one store. Rank 0 (or the one process) holds the writer's view; every call but decode runs
// there. Step directories live on fs() under step_root(); a step's files are named by its BEGIN.
class CommitLog {
 public:
  virtual ~CommitLog() = default;
  // The store's path or URL, for messages and reports.
  [[nodiscard]] virtual const std::string& location() const noexcept = 0;
  // Where step directories are: fs() and the prefix StepReader::open joins their names to.
  [[nodiscard]] virtual FsRef fs() noexcept = 0;
  [[nodiscard]] virtual const std::string& step_root() const noexcept = 0;
  // Takes the store's options before anything else (an object store's upload sizes, spec/OBJECT.md 3.2).
  virtual void configure(const StoreOptions&) {}
  // Whether a writer excludes every other writer while it is open (the journal's LOCK): a writer's view
  // then never goes stale. Object storage has no lock: a refresh lists the log again.
  [[nodiscard]] virtual bool exclusive() const noexcept = 0;
  // The writer's open: the journal takes the LOCK and recovers (spec/JOURNAL.md 6.4); an object store is
  // probed for conditional writes and its identity read or created (spec/OBJECT.md 4.6).
  [[nodiscard]] virtual Result<RecoveryReport> open_writer(const StoreOptions& options) = 0;
  // Reads the log as it is now. The bytes go to the other ranks, which decode them; a log that every
  // rank reads for itself (a journal on a shared file system) returns none, and decode reads it.
  [[nodiscard]] virtual Result<std::string> read(const StoreOptions& options) = 0;
  [[nodiscard]] virtual Result<RecoveryReport> decode(const std::string& bytes, const StoreOptions& options) = 0;
  // The writer's failure that forbids further writes (a journal write that may or may not be durable, spec/JOURNAL.md 5.4).
  [[nodiscard]] virtual Status failure() const = 0;
  // The id of a new transaction, never reused: the journal's next id, or 63 random bits on objects.
  [[nodiscard]] virtual std::uint64_t new_txn(std::uint64_t next) = 0;
  // Makes t begun: BEGIN + fdatasync and the step directory durable (journal; t's offsets set), or nothing
  // that lasts (objects: the commit object records BEGIN; a retired commit of the step number is removed
  // so that the number can be committed again).
  [[nodiscard]] virtual Status begin(TxnInfo& t, const std::vector<TxnInfo>& table) = 0;
  // The MANIFEST, durable under its final name, once every shard is.
  [[nodiscard]] virtual Status write_manifest(const TxnInfo& t, const std::string& bytes) = 0;
  // The commit point: COMMIT (+ SAVE_STATS). On failure `doubt` says whether it may still be durable.
  [[nodiscard]] virtual Status commit(TxnInfo& t, const CommitRecord& c, const SaveRecord& stats, CommitDoubt& doubt) = 0;
  // ABORT where it can still be written, then every file the transaction made removed.
  [[nodiscard]] virtual Status abort(TxnInfo& t, AbortReason reason) = 0;
  // RETIRE for each, durable before any of their files go; then the files.
  [[nodiscard]] virtual Status retire(const std::vector<TxnInfo*>& txns) = 0;
  // RETIRE, and the files kept out of the way instead of removed (a directory's go to quarantine/, spec/JOURNAL.md 6.8).
  [[nodiscard]] virtual Status set_aside(TxnInfo& t) = 0;
  // Between saves: the journal is rewritten when it has outgrown the live steps (force: now; spec/JOURNAL.md 5.7).
  [[nodiscard]] virtual Status maintain(std::vector<TxnInfo>& table, std::uint64_t next_txn, bool force) = 0;
  // Removes what transactions proven dead left (objects, spec/OBJECT.md 4.5); a journal's recovery does it at open.
  [[nodiscard]] virtual Result<GarbageReport> collect_garbage(const std::vector<TxnInfo>& table, bool dry_run) = 0;
};

}  // namespace ckpt
