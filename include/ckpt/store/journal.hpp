// ckpt: the store's write-ahead journal (spec/JOURNAL.md): append-only framed records, written in
// sync groups that each start on a fresh 4 KiB page, so no page that was ever synced is rewritten.
//
//   record = [u32 payload length][u16 type][u16 flags][payload][u64 XXH3-64, seed = record offset]
//
// This header holds the on-disk constants, the record codecs, the scanner that finds the end of the
// log (a torn tail is end of log; damage followed by valid records is reported, never skipped) and
// the writer that appends one durable group at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../core/coding.hpp"
#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "../shard/index.hpp"
#include "../io/fs.hpp"
#include "../io/posix_fs.hpp"

namespace ckpt {

namespace journal {

// --- Store layout (spec/JOURNAL.md 2).
inline constexpr std::string_view kJournalName = "JOURNAL";
inline constexpr std::string_view kLockName = "LOCK";
inline constexpr std::string_view kManifestName = "MANIFEST";
// Step directories whose fate recovery cannot prove go here, never deleted without ckpt-repair --purge (spec 6.8).
inline constexpr std::string_view kQuarantineName = "quarantine";
// Shard files of retired steps kept to be written over by a later step (StoreOptions::reuse_files, spec 10.1):
// free space, never part of a step, never read.
inline constexpr std::string_view kSlotsName = "slots";
// At most this many files wait in slots/; a retired file past it is removed as without reuse (spec 10.1).
inline constexpr std::size_t kMaxSlots = 8;
// Prefix of the temporary name a journal is written under before its rename (spec 5.1, 5.7).
inline constexpr std::string_view kJournalTempPrefix = "JOURNAL.tmp-";
// A writer compacts once the journal is past this size and twice its size after the last rewrite (spec 5.7).
inline constexpr std::uint64_t kCompactMinBytes = std::uint64_t{64} << 10;
// Whether a writer rewrites its journal now: past kCompactMinBytes and twice its size after the last rewrite.
[[nodiscard]] constexpr bool compaction_due(std::uint64_t end, std::uint64_t end_after_last_rewrite) noexcept {
  return end >= kCompactMinBytes && end >= 2 * end_after_last_rewrite;
}
// Finished transactions without files that compaction still keeps, newest first: their SAVE_STATS are
// the planner's history (spec 4.8) and their records what a report shows of the recent past.
inline constexpr std::size_t kCompactKeepHistory = 8;
inline constexpr std::string_view kStepDirPrefix = "step-";  // step-<step>-<txn>, decimal, no leading zeros

// --- Framing (spec/JOURNAL.md 3).
inline constexpr std::uint64_t kPageSize = 4096;
inline constexpr std::uint32_t kPageSizeLog2 = 12;
static_assert(std::uint64_t{1} << kPageSizeLog2 == kPageSize, "page size");
inline constexpr std::size_t kFrameHeaderSize = 8;
inline constexpr std::size_t kFrameDigestSize = 8;
inline constexpr std::size_t kFrameOverhead = kFrameHeaderSize + kFrameDigestSize;
namespace fr {
inline constexpr std::size_t kLength = 0;   // u32, payload bytes
inline constexpr std::size_t kType = 4;     // u16
inline constexpr std::size_t kFlags = 6;    // u16
inline constexpr std::size_t kPayload = 8;  // payload, then the u64 digest of [0, 8 + length)
}  // namespace fr
static_assert(fr::kPayload == kFrameHeaderSize, "payload follows the frame header");

inline constexpr std::uint16_t kFlagFirst = 0x0001;  // first record of a sync group; starts on a page boundary
inline constexpr std::uint16_t kFlagLast = 0x0002;   // last record of a sync group; ends on a page boundary
inline constexpr std::uint16_t kKnownFlags = kFlagFirst | kFlagLast;
// Types with this bit set may be skipped by a reader that does not know them; others must be understood.
inline constexpr std::uint16_t kIgnorableType = 0x8000;

enum class RecordType : std::uint16_t {
  header = 1,  // first record of the log, at offset 0
  pad = 2,     // zeros up to the next page boundary; ends a group
  begin = 3,   // a transaction starts and names every file it may create
  commit = 4,  // the transaction's step exists; carries the manifest digest
  abort = 5,   // the transaction is abandoned; its files may be removed
  retire = 6,  // a committed step leaves the store; its files may be removed
  // How long the save took, in the COMMIT's group (spec 4.8). Ignorable: readers of 1.0 skip it.
  save_stats = kIgnorableType | 7,
  // BEGIN whose files are the standard shard names of every rank: O(1) in the world size (spec 4.9, version 2).
  begin_shards = 8,
};
// Not contiguous (save_stats carries kIgnorableType): eight enumerators, named by value.
[[nodiscard]] constexpr EnumBounds<RecordType> enum_bounds(RecordType) noexcept {
  return {RecordType::header, RecordType::begin_shards, 8};
}
[[nodiscard]] const char* record_type_name(std::uint16_t type) noexcept;

// --- Payloads (spec/JOURNAL.md 4). Fixed parts; every reserved field must be zero.
inline constexpr unsigned char kMagic[8] = {'C', 'K', 'P', 'T', 'J', 'R', 'N', 'L'};
inline constexpr std::uint32_t kVersion = 2;        // what this build writes (spec 13)
inline constexpr std::uint32_t kOldestVersion = 1;  // the oldest it reads
// magic 8, version u32, page_size_log2 u32, store uuid 16, txn floor u64 (version 1: reserved, zero).
inline constexpr std::size_t kHeaderPayloadSize = 40;
inline constexpr std::size_t kBeginFixedSize = 24;     // txn u64, step u64, world_size u32, file_count u32
inline constexpr std::size_t kBeginFileFixedSize = 8;  // rank u32, name_length u16, reserved u16, then the name
inline constexpr std::size_t kCommitPayloadSize = 32;  // txn u64, step u64, manifest_size u64, manifest_digest u64
inline constexpr std::size_t kAbortPayloadSize = 24;   // txn u64, step u64, reason u32, reserved u32
inline constexpr std::size_t kRetirePayloadSize = 16;  // txn u64, step u64
inline constexpr std::size_t kBeginShardsPayloadSize = 24;  // txn u64, step u64, world_size u32, pattern u32 (spec 4.9)
inline constexpr std::uint32_t kShardPatternRanks = 1;  // one file per rank r: shard_file_name(r, world_size)
// txn u64, step u64, bytes u64, stall_ns u64, persist_ns u64, flags u32, reserved u32 (spec 4.8).
inline constexpr std::size_t kSaveStatsPayloadSize = 48;
static_assert(8 * 5 + 4 + 4 == kSaveStatsPayloadSize, "SAVE_STATS payload");
inline constexpr std::uint32_t kSaveStatsAsync = 0x1;  // the caller returned after staging (async save)
inline constexpr std::uint32_t kSaveStatsKnownFlags = kSaveStatsAsync;

// --- Decoder limits (spec/JOURNAL.md 9): checked before anything is allocated.
inline constexpr std::uint32_t kMaxPayload = std::uint32_t{64} << 20;
inline constexpr std::uint32_t kMaxWorldSize = std::uint32_t{1} << 20;
inline constexpr std::uint32_t kMaxFilesPerTxn = std::uint32_t{1} << 20;
inline constexpr std::size_t kMaxFileName = 255;
// The largest sync group a writer of this version appends (spec 3.4). A damaged tail longer than the
// largest group of the journal's version cannot be one interrupted append: it is corruption (spec 6.3).
inline constexpr std::uint64_t kMaxGroupSize = std::uint64_t{4} << 20;
inline constexpr std::uint64_t kMaxGroupSizeV1 = (std::uint64_t{kMaxPayload} + 2 * kFrameOverhead) + 2 * kPageSize;
[[nodiscard]] constexpr std::uint64_t max_group_size(std::uint32_t version) noexcept {
  return version <= 1 ? kMaxGroupSizeV1 : kMaxGroupSize;
}
static_assert(kMaxGroupSize % kPageSize == 0 && kMaxGroupSize < kMaxGroupSizeV1, "group limits");
// Sector size assumed by the torn-write classifier (spec 6.3): a device writes 512-byte sectors whole.
inline constexpr std::uint64_t kSectorSize = 512;
static_assert(kPageSize % kSectorSize == 0, "sectors tile a page");

}  // namespace journal

enum class AbortReason : std::uint32_t {
  writer_error = 1,  // an I/O error (EIO, ENOSPC, a failed fsync) stopped the save
  user = 2,          // the caller abandoned the transaction
  recovery = 3,      // a writable open found BEGIN without COMMIT or ABORT
};
[[nodiscard]] constexpr EnumBounds<AbortReason> enum_bounds(AbortReason) noexcept {
  return {AbortReason::writer_error, AbortReason::recovery};
}
[[nodiscard]] const char* abort_reason_name(AbortReason r) noexcept;

struct JournalHeader {
  Uuid store_uuid{};
  std::uint32_t version = journal::kVersion;
  // Every txn id below this was spent, even if no record of it is left (compaction drops them; spec 4.1).
  std::uint64_t txn_floor = 0;
};
// A file a transaction may create inside its step directory, and the rank that writes it.
struct TxnFile {
  std::uint32_t rank = 0;
  std::string name;
  bool operator==(const TxnFile& o) const { return rank == o.rank && name == o.name; }
};
struct BeginRecord {
  std::uint64_t txn = 0, step = 0;
  std::uint32_t world_size = 1;
  std::vector<TxnFile> files;  // shard files; MANIFEST is implied (spec/JOURNAL.md 4.3)
};
struct CommitRecord {
  std::uint64_t txn = 0, step = 0;
  std::uint64_t manifest_size = 0, manifest_digest = 0;
};
struct AbortRecord {
  std::uint64_t txn = 0, step = 0;
  AbortReason reason = AbortReason::user;
};
struct RetireRecord {
  std::uint64_t txn = 0, step = 0;
};
// What one committed save cost (spec 4.8): the bytes it wrote and how long it took. The planner and the
// deadline-bounded flush read these back (Store::save_records, Store::save_fits).
struct SaveRecord {
  std::uint64_t txn = 0, step = 0;
  std::uint64_t bytes = 0;       // shard file bytes of the step, every rank's
  std::uint64_t stall_ns = 0;    // how long the caller was blocked (a synchronous save: all of it)
  std::uint64_t persist_ns = 0;  // from the start of the save until its MANIFEST was durable
  bool async = false;            // saved through AsyncSaver: the caller returned after staging
  bool operator==(const SaveRecord& o) const {
    return txn == o.txn && step == o.step && bytes == o.bytes && stall_ns == o.stall_ns && persist_ns == o.persist_ns &&
           async == o.async;
  }
};

// One decoded record and where it sits in the file.
struct JournalRecord {
  std::uint64_t offset = 0;  // of its frame header
  std::uint64_t size = 0;    // framed bytes: header + payload + digest
  std::uint16_t type = 0;
  std::uint16_t flags = 0;
  // monostate: pad or an ignorable type.
  std::variant<std::monostate, JournalHeader, BeginRecord, CommitRecord, AbortRecord, RetireRecord, SaveRecord> body;

  [[nodiscard]] std::uint64_t end() const noexcept { return offset + size; }
  [[nodiscard]] std::uint64_t txn() const noexcept;  // 0 for header and pad
  [[nodiscard]] std::string describe() const;        // "COMMIT txn 7 step 300 at offset 12288"
};

// A record waiting to be framed into a group.
struct PendingRecord {
  std::uint16_t type = 0;
  std::string payload;
};

// --- Names (spec/JOURNAL.md 2.2). Every name read from the journal or a manifest goes through these.
// A file name inside a step directory: 1-255 bytes of [A-Za-z0-9._-], not starting with '.', not MANIFEST.
[[nodiscard]] Status check_file_name(std::string_view name);
[[nodiscard]] std::string step_dir_name(std::uint64_t step, std::uint64_t txn);
// Parses "step-<step>-<txn>" exactly as step_dir_name writes it; false for anything else.
[[nodiscard]] bool parse_step_dir_name(std::string_view name, std::uint64_t& step, std::uint64_t& txn) noexcept;
// The shard file of one rank: "shard-<rank>-of-<world>.ckpt", both at least 5 digits.
[[nodiscard]] std::string shard_file_name(std::uint32_t rank, std::uint32_t world_size);

// --- Payload codecs. Decoders take untrusted bytes and check every field.
[[nodiscard]] PendingRecord header_record(const JournalHeader& h);
// BEGIN_SHARDS when the files are exactly the standard shard names of every rank, else BEGIN; checks names and limits.
[[nodiscard]] Result<PendingRecord> begin_record(const BeginRecord& b);
// The files of a BEGIN_SHARDS record: shard_file_name(r, world_size) for every rank r.
[[nodiscard]] std::vector<TxnFile> standard_shard_files(std::uint32_t world_size);
[[nodiscard]] PendingRecord commit_record(const CommitRecord& c);
[[nodiscard]] PendingRecord abort_record(const AbortRecord& a);
[[nodiscard]] PendingRecord retire_record(const RetireRecord& r);
[[nodiscard]] PendingRecord save_stats_record(const SaveRecord& r);
// Decodes a digest-valid record's payload; Code::corrupt names the field, Code::version an unknown type.
[[nodiscard]] Status decode_payload(JournalRecord& rec, const unsigned char* payload, std::size_t length,
                                    const std::string& path);

// --- Framing.
// The digest of a frame whose header starts at `offset` (spec/JOURNAL.md 3.2).
[[nodiscard]] std::uint64_t frame_digest(const unsigned char* header_and_payload, std::size_t n, std::uint64_t offset) noexcept;
// Appends one framed record for file offset `offset` to out.
void frame_record(std::string& out, std::uint16_t type, std::uint16_t flags, std::string_view payload, std::uint64_t offset);
// Frames records as one sync group starting at page-aligned `offset`: FIRST on the first record, LAST on
// the last, and a PAD record filling to the next page boundary unless the last record ends exactly on one.
// Each record's offset is appended to offsets when given. records must not be empty.
[[nodiscard]] std::string encode_group(const std::vector<PendingRecord>& records, std::uint64_t offset,
                                       std::vector<std::uint64_t>* offsets = nullptr);

// --- Scanning (spec/JOURNAL.md 6).
// Bytes the scanner could not accept, with the valid records it found inside them.
struct JournalDamage {
  std::uint64_t offset = 0, length = 0;  // [offset, offset + length): from the group start to the next group or EOF
  std::uint64_t bad_offset = 0;          // the first record that failed
  std::string reason;                    // what failed there, expected and found
  // Digest-valid records of the damaged bytes, not applied by the scan, in file order: those before the
  // failure, then any found by following frame lengths past it. Recovery decides on them (spec 6.4).
  std::vector<JournalRecord> unapplied;
  // For a torn tail: the bytes look like an interrupted append (the file ends inside the group, or a
  // sector of the failing record was never written). False: every byte is there and still does not
  // check out, which is damage to durable data, reported (spec 6.3).
  bool clean_tear = true;
};

struct JournalScan {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint64_t end = 0;  // end of the valid log: a page boundary, where the next group goes
  bool has_header = false;
  JournalHeader header;
  std::vector<JournalRecord> records;  // applied records in log order, pads left out
  std::optional<JournalDamage> torn_tail;  // end of log: an incomplete last group with nothing valid after it
  std::vector<JournalDamage> corruption;   // damage followed by valid groups, or a digest-valid record that breaks a rule
  std::uint64_t groups = 0;                // complete groups applied

  [[nodiscard]] bool corrupt() const noexcept { return !corruption.empty() || !has_header; }
  // A damaged tail that is not a clean tear: readers report it (ckpt-verify exits 1), recovery salvages it.
  [[nodiscard]] bool tail_damaged() const noexcept { return torn_tail && !torn_tail->clean_tear; }
  // One line per problem, for errors and reports.
  [[nodiscard]] std::string corruption_summary() const;
};

// Reads the journal up to its size at the time of the call. Fails only when it cannot be read, or with
// Code::version for a record this build must understand but does not; damage is reported in the scan.
[[nodiscard]] Result<JournalScan> scan_journal(FsRef fs, FileHandle file, const std::string& path);
[[nodiscard]] Result<JournalScan> scan_journal(FsRef fs, const std::string& path);
// The same over bytes in memory (tests and tools).
[[nodiscard]] Result<JournalScan> scan_journal_bytes(std::string_view bytes, const std::string& path = "JOURNAL");

// --- Appending (spec/JOURNAL.md 5).
// Appends whole sync groups at a page boundary and makes each durable with fdatasync before returning.
// After any write or sync failure the writer refuses every later append: the state of the failed pages
// is unknown (fsync errors are not retryable), so only a reopen and its recovery may decide it.
class JournalWriter {
 public:
  JournalWriter(FsRef fs, std::string path, FileHandle file, std::uint64_t end) noexcept
      : fs_(fs), path_(std::move(path)), file_(file), end_(end) {}
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;
  JournalWriter(JournalWriter&& o) noexcept;
  JournalWriter& operator=(JournalWriter&& o) noexcept;
  ~JournalWriter();

  // Opens an existing journal for appending at `end` (a page boundary from scan_journal).
  [[nodiscard]] static Result<JournalWriter> open(FsRef fs, std::string path, std::uint64_t end);
  // Creates a journal holding only its header group, durably: temporary name, fsync, rename, fsync dir.
  [[nodiscard]] static Status create(FsRef fs, const std::string& path, const JournalHeader& header);
  // Replaces the journal at path by a new one holding the header and then `groups`, one sync group each
  // (one per transaction, so damage to one stays one transaction's), the same way: nothing of the old
  // file is trusted or kept (compaction, spec 5.7). Returns the new file's end. A crash leaves the old
  // journal or the new one. Each record's offset in the new file is appended to offsets when given.
  [[nodiscard]] static Result<std::uint64_t> rewrite(FsRef fs, const std::string& path, const JournalHeader& header,
                                                     const std::vector<std::vector<PendingRecord>>& groups,
                                                     std::vector<std::uint64_t>* offsets = nullptr);

  // Cuts a torn tail off at `end` (a page boundary) and fsyncs, so the next group starts there.
  [[nodiscard]] Status truncate_tail(std::uint64_t end);
  // Writes one group and fdatasyncs it; the records are durable when this returns ok. Before writing it
  // checks that the file at path is still the one it holds and still ends where its last group ended,
  // and fails closed otherwise (a second writer that bypassed the lock, a replaced journal; spec 5.8).
  [[nodiscard]] Status append_group(const std::vector<PendingRecord>& records);
  // Offset of each record of the last group appended (for reports).
  [[nodiscard]] const std::vector<std::uint64_t>& last_offsets() const noexcept { return last_offsets_; }

  [[nodiscard]] std::uint64_t end() const noexcept { return end_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] bool failed() const noexcept { return !failure_.ok(); }
  // Refuses every later append with s: the file this writer holds may no longer be the journal.
  [[nodiscard]] Status poison(const Status& s) { return fail(s); }
  [[nodiscard]] const Status& failure() const noexcept { return failure_; }

 private:
  [[nodiscard]] Status fail(const Status& s);
  [[nodiscard]] Status check_unchanged();

  FsRef fs_;
  std::string path_;
  FileHandle file_;
  std::uint64_t end_ = 0;
  Status failure_;
  std::vector<std::uint64_t> last_offsets_;
};

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/journal_inl.hpp"
#endif
