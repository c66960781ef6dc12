// ckpt: definitions for journal.hpp (spec/JOURNAL.md 3-6).
#pragma once

#include "../journal.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "../../io/atomic_file.hpp"

namespace ckpt {

namespace journal {

CKPT_INLINE const char* record_type_name(std::uint16_t type) noexcept {
  const char* name = enum_name(static_cast<RecordType>(type),
                               {{RecordType::header, "HEADER"},
                                {RecordType::pad, "PAD"},
                                {RecordType::begin, "BEGIN"},
                                {RecordType::commit, "COMMIT"},
                                {RecordType::abort, "ABORT"},
                                {RecordType::retire, "RETIRE"},
                                {RecordType::save_stats, "SAVE_STATS"},
                                {RecordType::begin_shards, "BEGIN_SHARDS"}},
                               nullptr);
  if (name != nullptr) return name;
  return (type & kIgnorableType) != 0 ? "IGNORABLE" : "UNKNOWN";
}

}  // namespace journal

CKPT_INLINE const char* abort_reason_name(AbortReason r) noexcept {
  return enum_name(r, {"writer_error", "user", "recovery"});
}

CKPT_INLINE std::uint64_t JournalRecord::txn() const noexcept {
  if (const auto* b = std::get_if<BeginRecord>(&body)) return b->txn;
  if (const auto* c = std::get_if<CommitRecord>(&body)) return c->txn;
  if (const auto* a = std::get_if<AbortRecord>(&body)) return a->txn;
  if (const auto* r = std::get_if<RetireRecord>(&body)) return r->txn;
  if (const auto* v = std::get_if<SaveRecord>(&body)) return v->txn;
  return 0;
}

CKPT_INLINE std::string JournalRecord::describe() const {
  std::string s = journal::record_type_name(type);
  if (const auto* b = std::get_if<BeginRecord>(&body)) {
    s += " txn " + std::to_string(b->txn) + " step " + std::to_string(b->step) + " world " +
         std::to_string(b->world_size) + " (" + std::to_string(b->files.size()) + " files)";
  } else if (const auto* c = std::get_if<CommitRecord>(&body)) {
    s += " txn " + std::to_string(c->txn) + " step " + std::to_string(c->step) + " manifest " +
         std::to_string(c->manifest_size) + " bytes digest " + hex64(c->manifest_digest);
  } else if (const auto* a = std::get_if<AbortRecord>(&body)) {
    s += " txn " + std::to_string(a->txn) + " step " + std::to_string(a->step) + " (" + abort_reason_name(a->reason) + ")";
  } else if (const auto* r = std::get_if<RetireRecord>(&body)) {
    s += " txn " + std::to_string(r->txn) + " step " + std::to_string(r->step);
  } else if (const auto* v = std::get_if<SaveRecord>(&body)) {
    s += " txn " + std::to_string(v->txn) + " step " + std::to_string(v->step) + " " + std::to_string(v->bytes) +
         " bytes, stall " + std::to_string(v->stall_ns) + " ns, persist " + std::to_string(v->persist_ns) + " ns" +
         (v->async ? " (async)" : "");
  } else if (const auto* h = std::get_if<JournalHeader>(&body)) {
    s += " store " + uuid_string(h->store_uuid);
  }
  return s + " at offset " + std::to_string(offset);
}

// --- Names (spec/JOURNAL.md 2.2).

CKPT_INLINE Status check_file_name(std::string_view name) {
  if (name.empty() || name.size() > journal::kMaxFileName)
    return make_error(Code::invalid_argument, "file name must be 1 to 255 bytes, got " + std::to_string(name.size()));
  if (name.front() == '.')
    return make_error(Code::invalid_argument, "file name '" + std::string(name) + "' starts with '.'");
  for (const char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                    ch == '_' || ch == '-';
    if (!ok) {
      // Never echo a control or non-ASCII byte into a message: show its code instead.
      return make_error(Code::invalid_argument, "file name holds byte 0x" +
                                                    hex64(static_cast<unsigned char>(ch)).substr(14) +
                                                    "; only [A-Za-z0-9._-] are allowed (no '/', no path)");
    }
  }
  if (name == journal::kManifestName)
    return make_error(Code::invalid_argument, "file name 'MANIFEST' is reserved for the step manifest");
  return Status();
}

CKPT_INLINE std::string step_dir_name(std::uint64_t step, std::uint64_t txn) {
  return std::string(journal::kStepDirPrefix) + std::to_string(step) + "-" + std::to_string(txn);
}

namespace detail {
// Parses a canonical decimal u64 (no sign, no leading zero except "0") from the front of s.
[[nodiscard]] CKPT_INLINE bool parse_decimal(std::string_view& s, std::uint64_t& out) noexcept {
  std::size_t n = 0;
  std::uint64_t v = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') {
    const std::uint64_t digit = static_cast<std::uint64_t>(s[n] - '0');
    if (v > (~std::uint64_t{0} - digit) / 10) return false;
    v = v * 10 + digit;
    ++n;
  }
  if (n == 0 || (n > 1 && s[0] == '0')) return false;
  out = v;
  s.remove_prefix(n);
  return true;
}
}  // namespace detail

CKPT_INLINE bool parse_step_dir_name(std::string_view name, std::uint64_t& step, std::uint64_t& txn) noexcept {
  if (name.substr(0, journal::kStepDirPrefix.size()) != journal::kStepDirPrefix) return false;
  name.remove_prefix(journal::kStepDirPrefix.size());
  std::uint64_t s = 0, t = 0;
  if (!detail::parse_decimal(name, s) || name.empty() || name.front() != '-') return false;
  name.remove_prefix(1);
  if (!detail::parse_decimal(name, t) || !name.empty()) return false;
  step = s;
  txn = t;
  return true;
}

CKPT_INLINE std::string shard_file_name(std::uint32_t rank, std::uint32_t world_size) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05u-of-%05u.ckpt", rank, world_size);
  return buf;
}

// --- Payload codecs (spec/JOURNAL.md 4).

CKPT_INLINE PendingRecord header_record(const JournalHeader& h) {
  Encoder e;
  e.raw(journal::kMagic, 8);
  e.u32(journal::kVersion);  // a rewrite upgrades a version 1 journal (spec 13)
  e.u32(journal::kPageSizeLog2);
  e.raw(h.store_uuid.data(), h.store_uuid.size());
  e.u64(h.txn_floor);
  return PendingRecord{static_cast<std::uint16_t>(journal::RecordType::header), std::move(e.str())};
}

CKPT_INLINE std::vector<TxnFile> standard_shard_files(std::uint32_t world_size) {
  std::vector<TxnFile> files;
  files.reserve(world_size);
  for (std::uint32_t r = 0; r < world_size; ++r) files.push_back(TxnFile{r, shard_file_name(r, world_size)});
  return files;
}

CKPT_INLINE Result<PendingRecord> begin_record(const BeginRecord& b) {
  if (b.world_size == 0 || b.world_size > journal::kMaxWorldSize)
    return make_error(Code::invalid_argument, "BEGIN: world size " + std::to_string(b.world_size) + " outside [1, 2^20]");
  // The usual case, one standard shard per rank, is named by its pattern: O(1) in the world size (spec 4.9).
  bool standard = b.files.size() == b.world_size;
  for (std::uint32_t r = 0; standard && r < b.world_size; ++r)
    standard = b.files[r].rank == r && b.files[r].name == shard_file_name(r, b.world_size);
  if (standard) {
    Encoder e;
    e.u64(b.txn);
    e.u64(b.step);
    e.u32(b.world_size);
    e.u32(journal::kShardPatternRanks);
    return PendingRecord{static_cast<std::uint16_t>(journal::RecordType::begin_shards), std::move(e.str())};
  }
  if (b.files.size() > journal::kMaxFilesPerTxn)
    return make_error(Code::invalid_argument, "BEGIN: " + std::to_string(b.files.size()) + " files exceed the limit 2^20");
  std::set<std::string_view> seen;
  std::uint64_t size = journal::kBeginFixedSize;
  Encoder e;
  e.u64(b.txn);
  e.u64(b.step);
  e.u32(b.world_size);
  e.u32(static_cast<std::uint32_t>(b.files.size()));
  for (const auto& f : b.files) {
    CKPT_TRY(check_file_name(f.name).with_context("BEGIN"));
    if (f.rank >= b.world_size)
      return make_error(Code::invalid_argument, "BEGIN: file '" + f.name + "' has rank " + std::to_string(f.rank) +
                                                    " outside a world of " + std::to_string(b.world_size));
    if (!seen.insert(f.name).second)
      return make_error(Code::invalid_argument, "BEGIN: file '" + f.name + "' named twice");
    size += journal::kBeginFileFixedSize + f.name.size();
    if (size > journal::kMaxPayload)
      return make_error(Code::invalid_argument, "BEGIN: the file list exceeds the 64 MiB record limit");
    e.u32(f.rank);
    e.u16(static_cast<std::uint16_t>(f.name.size()));
    e.u16(0);
    e.bytes(f.name);
  }
  return PendingRecord{static_cast<std::uint16_t>(journal::RecordType::begin), std::move(e.str())};
}

namespace detail {
// Every transaction record's payload starts with txn and step (spec 4); `rest` encodes what follows.
template <class Rest>
[[nodiscard]] PendingRecord txn_record(journal::RecordType type, std::uint64_t txn, std::uint64_t step, Rest&& rest) {
  Encoder e;
  e.u64(txn);
  e.u64(step);
  rest(e);
  return PendingRecord{static_cast<std::uint16_t>(type), std::move(e.str())};
}
}  // namespace detail

CKPT_INLINE PendingRecord commit_record(const CommitRecord& c) {
  return detail::txn_record(journal::RecordType::commit, c.txn, c.step, [&](Encoder& e) {
    e.u64(c.manifest_size);
    e.u64(c.manifest_digest);
  });
}

CKPT_INLINE PendingRecord abort_record(const AbortRecord& a) {
  return detail::txn_record(journal::RecordType::abort, a.txn, a.step, [&](Encoder& e) {
    e.u32(static_cast<std::uint32_t>(a.reason));
    e.u32(0);
  });
}

CKPT_INLINE PendingRecord retire_record(const RetireRecord& r) {
  return detail::txn_record(journal::RecordType::retire, r.txn, r.step, [](Encoder&) {});
}

CKPT_INLINE PendingRecord save_stats_record(const SaveRecord& r) {
  return detail::txn_record(journal::RecordType::save_stats, r.txn, r.step, [&](Encoder& e) {
    e.u64(r.bytes);
    e.u64(r.stall_ns);
    e.u64(r.persist_ns);
    e.u32(r.async ? journal::kSaveStatsAsync : 0);
    e.u32(0);
  });
}

CKPT_INLINE Status decode_payload(JournalRecord& rec, const unsigned char* p, std::size_t n, const std::string& path) {
  using journal::RecordType;
  const std::string where = path + ": " + journal::record_type_name(rec.type) + " record at offset " + std::to_string(rec.offset);
  auto corrupt = [&](const std::string& what) { return make_error(Code::corrupt, where + ": " + what); };
  auto fixed_size = [&](std::size_t expected) -> Status {
    if (n != expected)
      return corrupt("payload is " + std::to_string(n) + " bytes, expected " + std::to_string(expected));
    return Status();
  };
  // rec.body.emplace<T>, not `rec.body = T{...}`: variant's converting assignment is an instantiation of
  // its own per alternative (header-only parse time, spec/LAYOUT.md 5).
  switch (rec.type) {
    case static_cast<std::uint16_t>(RecordType::header): {
      CKPT_TRY(fixed_size(journal::kHeaderPayloadSize));
      if (std::memcmp(p, journal::kMagic, 8) != 0) return corrupt("magic is not CKPTJRNL");
      const std::uint32_t version = get_u32(p + 8);
      if (version < journal::kOldestVersion || version > journal::kVersion)
        return make_error(Code::version, where + ": journal version " + std::to_string(version) + ", this build reads versions " +
                                             std::to_string(journal::kOldestVersion) + " to " + std::to_string(journal::kVersion));
      const std::uint32_t page_log2 = get_u32(p + 12);
      if (page_log2 != journal::kPageSizeLog2)
        return make_error(Code::version, where + ": page size 2^" + std::to_string(page_log2) + ", this build writes and reads 2^12");
      JournalHeader h;
      h.version = version;
      std::memcpy(h.store_uuid.data(), p + 16, 16);
      if (version == 1 && !detail::all_zero(p + 32, 8)) return corrupt("reserved bytes [32, 40) are not zero");
      h.txn_floor = version == 1 ? 0 : get_u64(p + 32);
      rec.body.emplace<JournalHeader>(h);
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::pad):
      if (!detail::all_zero(p, n)) return corrupt("padding holds non-zero bytes");
      rec.body.emplace<std::monostate>();
      return Status();
    case static_cast<std::uint16_t>(RecordType::begin): {
      Decoder d(p, n);
      BeginRecord b;
      std::uint32_t count = 0;
      if (!d.u64(b.txn) || !d.u64(b.step) || !d.u32(b.world_size) || !d.u32(count))
        return corrupt("payload of " + std::to_string(n) + " bytes is shorter than the 24-byte fixed part");
      if (b.world_size == 0 || b.world_size > journal::kMaxWorldSize)
        return corrupt("world size " + std::to_string(b.world_size) + " outside [1, 2^20]");
      // Bound the count by the bytes present before reserving anything (spec 9).
      if (count > journal::kMaxFilesPerTxn || count > d.remaining() / journal::kBeginFileFixedSize)
        return corrupt("file count " + std::to_string(count) + " exceeds the limit or the " + std::to_string(d.remaining()) +
                       " bytes left");
      b.files.reserve(count);
      std::set<std::string> seen;
      for (std::uint32_t i = 0; i < count; ++i) {
        TxnFile f;
        std::uint16_t len = 0, reserved = 0;
        if (!d.u32(f.rank) || !d.u16(len) || !d.u16(reserved))
          return corrupt("file entry " + std::to_string(i) + " is cut short");
        if (reserved != 0) return corrupt("file entry " + std::to_string(i) + ": reserved field is " + std::to_string(reserved) + ", expected 0");
        if (!d.has(len)) return corrupt("file entry " + std::to_string(i) + ": name of " + std::to_string(len) + " bytes runs past the payload");
        f.name.assign(reinterpret_cast<const char*>(d.cursor()), len);
        (void)d.skip(len);
        Status s = check_file_name(f.name);
        if (!s.ok()) return corrupt("file entry " + std::to_string(i) + ": " + s.message());
        if (f.rank >= b.world_size)
          return corrupt("file '" + f.name + "' has rank " + std::to_string(f.rank) + " outside a world of " + std::to_string(b.world_size));
        if (!seen.insert(f.name).second) return corrupt("file '" + f.name + "' named twice");
        b.files.push_back(std::move(f));
      }
      if (d.remaining() != 0) return corrupt(std::to_string(d.remaining()) + " trailing bytes after the file list");
      rec.body.emplace<BeginRecord>(std::move(b));
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::begin_shards): {
      CKPT_TRY(fixed_size(journal::kBeginShardsPayloadSize));
      BeginRecord b;
      b.txn = get_u64(p);
      b.step = get_u64(p + 8);
      b.world_size = get_u32(p + 16);
      if (b.world_size == 0 || b.world_size > journal::kMaxWorldSize)
        return corrupt("world size " + std::to_string(b.world_size) + " outside [1, 2^20]");
      if (get_u32(p + 20) != journal::kShardPatternRanks)
        return corrupt("file pattern " + std::to_string(get_u32(p + 20)) + ", expected 1 (one standard shard per rank)");
      b.files = standard_shard_files(b.world_size);
      rec.body.emplace<BeginRecord>(std::move(b));
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::commit): {
      CKPT_TRY(fixed_size(journal::kCommitPayloadSize));
      rec.body.emplace<CommitRecord>(CommitRecord{get_u64(p), get_u64(p + 8), get_u64(p + 16), get_u64(p + 24)});
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::abort): {
      CKPT_TRY(fixed_size(journal::kAbortPayloadSize));
      const std::uint32_t reason = get_u32(p + 16);
      if (reason < 1 || reason > 3) return corrupt("abort reason " + std::to_string(reason) + " is not 1, 2 or 3");
      if (get_u32(p + 20) != 0) return corrupt("reserved field is not zero");
      rec.body.emplace<AbortRecord>(AbortRecord{get_u64(p), get_u64(p + 8), static_cast<AbortReason>(reason)});
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::retire): {
      CKPT_TRY(fixed_size(journal::kRetirePayloadSize));
      rec.body.emplace<RetireRecord>(RetireRecord{get_u64(p), get_u64(p + 8)});
      return Status();
    }
    case static_cast<std::uint16_t>(RecordType::save_stats): {
      CKPT_TRY(fixed_size(journal::kSaveStatsPayloadSize));
      const std::uint32_t flags = get_u32(p + 40);
      if ((flags & ~journal::kSaveStatsKnownFlags) != 0) return corrupt("unknown flags " + hex64(flags));
      if (get_u32(p + 44) != 0) return corrupt("reserved field is not zero");
      if (get_u64(p + 24) > get_u64(p + 32))
        return corrupt("stall of " + std::to_string(get_u64(p + 24)) + " ns exceeds the save's " + std::to_string(get_u64(p + 32)) + " ns");
      rec.body.emplace<SaveRecord>(SaveRecord{get_u64(p), get_u64(p + 8), get_u64(p + 16), get_u64(p + 24), get_u64(p + 32),
                                              (flags & journal::kSaveStatsAsync) != 0});
      return Status();
    }
    default:
      if ((rec.type & journal::kIgnorableType) != 0) {
        rec.body.emplace<std::monostate>();
        return Status();
      }
      if (rec.type == 0) return corrupt("record type 0 is never written");
      return make_error(Code::version, where + ": record type " + std::to_string(rec.type) +
                                           " must be understood and this build does not know it (written by a newer ckpt?)");
  }
}

// --- Framing (spec/JOURNAL.md 3).

CKPT_INLINE std::uint64_t frame_digest(const unsigned char* header_and_payload, std::size_t n, std::uint64_t offset) noexcept {
  // Seeded with the record's own offset: a record is valid only where it was written (spec 3.2).
  return XXH3_64bits_withSeed(header_and_payload, n, offset);
}

CKPT_INLINE void frame_record(std::string& out, std::uint16_t type, std::uint16_t flags, std::string_view payload,
                         std::uint64_t offset) {
  const std::size_t start = out.size();
  unsigned char header[journal::kFrameHeaderSize];
  put_u32(header + journal::fr::kLength, static_cast<std::uint32_t>(payload.size()));
  put_u16(header + journal::fr::kType, type);
  put_u16(header + journal::fr::kFlags, flags);
  out.append(reinterpret_cast<const char*>(header), sizeof header);
  out.append(payload.data(), payload.size());
  unsigned char digest[8];
  put_u64(digest, frame_digest(reinterpret_cast<const unsigned char*>(out.data() + start), out.size() - start, offset));
  out.append(reinterpret_cast<const char*>(digest), 8);
}

CKPT_INLINE std::string encode_group(const std::vector<PendingRecord>& records, std::uint64_t offset,
                                std::vector<std::uint64_t>* offsets) {
  using journal::kFrameOverhead;
  using journal::kPageSize;
  std::string out;
  if (records.empty()) return out;
  std::uint64_t end = offset;
  for (const auto& r : records) end += kFrameOverhead + r.payload.size();
  const bool needs_pad = end % kPageSize != 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    std::uint16_t flags = 0;
    if (i == 0) flags |= journal::kFlagFirst;
    if (i + 1 == records.size() && !needs_pad) flags |= journal::kFlagLast;
    if (offsets != nullptr) offsets->push_back(offset + out.size());
    frame_record(out, records[i].type, flags, records[i].payload, offset + out.size());
  }
  if (needs_pad) {
    // A pad needs 16 bytes of frame; when fewer remain in this page it runs to the end of the next one.
    std::uint64_t room = kPageSize - end % kPageSize;
    if (room < kFrameOverhead) room += kPageSize;
    const std::string zeros(static_cast<std::size_t>(room - kFrameOverhead), '\0');
    frame_record(out, static_cast<std::uint16_t>(journal::RecordType::pad), journal::kFlagLast, zeros, offset + out.size());
  }
  return out;
}

// --- Scanning (spec/JOURNAL.md 6).

CKPT_INLINE std::string JournalScan::corruption_summary() const {
  std::string s;
  if (!has_header && corruption.empty()) s = path + ": no valid HEADER record at offset 0";
  for (const auto& d : corruption) {
    if (!s.empty()) s += "; ";
    s += path + ": corrupt bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + ") (" +
         std::to_string(d.length) + " bytes): " + d.reason;
  }
  return s;
}

namespace detail {

// Journal bytes held in memory, or read through an Fs in windows of 1 MiB (or one whole record when
// larger). One type rather than a template parameter of the scan below, so that the scan is compiled
// once: header-only parse time (spec/LAYOUT.md 5).
class JournalSource {
 public:
  explicit JournalSource(std::string_view bytes) noexcept : bytes_(bytes), size_(bytes.size()) {}
  JournalSource(const FsRef& fs, FileHandle file, const std::string& path, std::uint64_t size) noexcept
      : fs_(&fs), file_(file), path_(&path), size_(size) {}
  [[nodiscard]] Status read(std::uint64_t off, std::size_t n, const unsigned char*& out) {
    if (fs_ == nullptr) {
      if (!range_within(off, n, bytes_.size())) return make_error(Code::incomplete, "read past the end of the journal");
      out = reinterpret_cast<const unsigned char*>(bytes_.data()) + off;
      return Status();
    }
    if (!range_within(off, n, size_)) return make_error(Code::incomplete, *path_ + ": read past the end of the journal");
    if (!(off >= window_off_ && range_within(off - window_off_, n, window_.size()))) {
      constexpr std::size_t kWindow = std::size_t{1} << 20;
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(std::max(n, kWindow), size_ - off));
      window_.resize(want);
      window_off_ = off;
      Status s = read_exact(*fs_, file_, *path_, window_.data(), want, off);
      if (!s.ok()) {
        window_.clear();
        return s;
      }
    }
    out = window_.data() + (off - window_off_);
    return Status();
  }

 private:
  std::string_view bytes_;        // in memory: the bytes
  const FsRef* fs_ = nullptr;     // through an Fs: null in memory
  FileHandle file_{};
  const std::string* path_ = nullptr;
  std::uint64_t size_;
  std::vector<unsigned char> window_;
  std::uint64_t window_off_ = 0;
};

// Reads and checks one frame at off. Returns false with `why` set when the frame is not a valid record
// (too short, length over the limit, digest mismatch): the caller decides whether that is a torn tail.
[[nodiscard]] CKPT_INLINE Result<bool> read_frame(JournalSource& src, std::uint64_t size, std::uint64_t off, JournalRecord& rec,
                                      const unsigned char*& payload, std::string& why) {
  using namespace journal;
  const std::uint64_t left = size - off;
  const std::string at = "record at offset " + std::to_string(off) + ": ";
  if (left < kFrameOverhead) {
    why = at + "only " + std::to_string(left) + " bytes before the end of the file, a record needs at least 16";
    return false;
  }
  const unsigned char* h = nullptr;
  Status s = src.read(off, kFrameHeaderSize, h);
  if (s.code() == Code::incomplete) {  // the file shrank under a reader: as good as a torn tail
    why = at + s.message();
    return false;
  }
  CKPT_TRY(s);
  const std::uint32_t length = get_u32(h + fr::kLength);
  const std::uint16_t type = get_u16(h + fr::kType);
  const std::uint16_t flags = get_u16(h + fr::kFlags);
  if (length > kMaxPayload) {
    why = at + "payload length " + std::to_string(length) + " exceeds the limit " + std::to_string(kMaxPayload);
    return false;
  }
  if (length > left - kFrameOverhead) {
    why = at + "a record of " + std::to_string(length + kFrameOverhead) + " bytes runs past the end of the file (" +
          std::to_string(left) + " bytes left)";
    return false;
  }
  const unsigned char* frame = nullptr;
  s = src.read(off, kFrameOverhead + length, frame);
  if (s.code() == Code::incomplete) {
    why = at + s.message();
    return false;
  }
  CKPT_TRY(s);
  const std::uint64_t expected = get_u64(frame + kFrameHeaderSize + length);
  const std::uint64_t found = frame_digest(frame, kFrameHeaderSize + length, off);
  if (expected != found) {
    why = at + std::string(record_type_name(type)) + " of " + std::to_string(length) + " payload bytes: digest expected " +
          hex64(expected) + ", found " + hex64(found);
    return false;
  }
  // Every field of rec set anew (not `rec = JournalRecord{}`: the record's variant assignment would be
  // instantiated for this line alone, header-only parse time, spec/LAYOUT.md 5).
  rec.body.emplace<std::monostate>();
  rec.offset = off;
  rec.size = kFrameOverhead + length;
  rec.type = type;
  rec.flags = flags;
  payload = frame + kFrameHeaderSize;
  return true;
}

// The search for the next group after damage (spec 6.3) costs O(size): a page is a candidate only when
// its frame header could start a group (FIRST set, no unknown flag, a type that may open a group, a
// length that fits), and the bytes hashed for candidates are capped at a budget proportional to the
// journal's size. When the budget runs out the search stops undecided, which makes the damage
// corruption: recovery never cuts bytes it could not examine.
struct GroupSearch {
  std::uint64_t budget = 0;  // bytes left to hash for candidates
  bool exhausted = false;
};

[[nodiscard]] CKPT_INLINE bool may_start_group(std::uint16_t type, std::uint16_t flags, std::uint32_t length) noexcept {
  using journal::RecordType;
  if ((flags & journal::kFlagFirst) == 0 || (flags & ~journal::kKnownFlags) != 0) return false;
  switch (type) {
    case static_cast<std::uint16_t>(RecordType::begin): return length >= journal::kBeginFixedSize;
    case static_cast<std::uint16_t>(RecordType::begin_shards): return length == journal::kBeginShardsPayloadSize;
    case static_cast<std::uint16_t>(RecordType::commit): return length == journal::kCommitPayloadSize;
    case static_cast<std::uint16_t>(RecordType::abort): return length == journal::kAbortPayloadSize;
    case static_cast<std::uint16_t>(RecordType::retire): return length == journal::kRetirePayloadSize;
    default: return (type & journal::kIgnorableType) != 0 && length <= journal::kMaxPayload;
  }
}

// The first page boundary at or after `from` holding a valid record that starts a group, or size when none.
[[nodiscard]] CKPT_INLINE Result<std::uint64_t> next_group_start(JournalSource& src, std::uint64_t size, std::uint64_t from, GroupSearch& search) {
  for (std::uint64_t p = align_up(from, journal::kPageSize); p < size; p += journal::kPageSize) {
    if (size - p < journal::kFrameOverhead) break;
    const unsigned char* h = nullptr;
    Status s = src.read(p, journal::kFrameHeaderSize, h);
    if (s.code() == Code::incomplete) break;
    CKPT_TRY(s);
    const std::uint32_t length = get_u32(h + journal::fr::kLength);
    if (!may_start_group(get_u16(h + journal::fr::kType), get_u16(h + journal::fr::kFlags), length)) continue;
    if (length > size - p - journal::kFrameOverhead) continue;
    const std::uint64_t cost = journal::kFrameOverhead + std::uint64_t{length};
    if (cost > search.budget) {
      search.exhausted = true;
      return p;  // undecided: treated as a group boundary, so the bytes before it are corruption
    }
    search.budget -= cost;
    JournalRecord rec;
    const unsigned char* payload = nullptr;
    std::string why;
    CKPT_ASSIGN_OR_RETURN(const bool valid, read_frame(src, size, p, rec, payload, why));
    if (valid && (rec.flags & journal::kFlagFirst) != 0) return p;
  }
  return size;
}

// Whether a damaged tail looks like an interrupted append (spec 6.3): the file ends inside the failing
// record, or one of the 512-byte sectors it covers is all zeros (never written: the journal only ever
// grows by appends, and bytes past an old end read as zeros). A PAD's bytes are known in advance, so a
// PAD counts as torn only when each of its sectors is either what the writer wrote or zeros.
[[nodiscard]] CKPT_INLINE Result<bool> looks_torn(JournalSource& src, std::uint64_t size, std::uint64_t off) {
  using namespace journal;
  if (size - off < kFrameHeaderSize) return true;
  const unsigned char* h = nullptr;
  Status s = src.read(off, kFrameHeaderSize, h);
  if (s.code() == Code::incomplete) return true;
  CKPT_TRY(s);
  const std::uint32_t length = get_u32(h + fr::kLength);
  std::string expected_pad;
  std::uint64_t end = 0;
  if (get_u16(h + fr::kType) == static_cast<std::uint16_t>(RecordType::pad)) {
    std::uint64_t room = kPageSize - off % kPageSize;
    if (room < kFrameOverhead) room += kPageSize;
    frame_record(expected_pad, static_cast<std::uint16_t>(RecordType::pad), kFlagLast,
                 std::string(static_cast<std::size_t>(room - kFrameOverhead), '\0'), off);
    end = off + room;
  } else {
    if (length > kMaxPayload) return false;  // a length no writer uses, in a header that was written
    end = off + kFrameOverhead + length;
  }
  if (end > size) return true;  // the file ends inside the record
  const std::uint64_t first = off - off % kSectorSize;
  for (std::uint64_t sec = first; sec < end; sec += kSectorSize) {
    const std::uint64_t n = std::min(kSectorSize, size - sec);
    const unsigned char* bytes = nullptr;
    s = src.read(sec, static_cast<std::size_t>(n), bytes);
    if (s.code() == Code::incomplete) return true;
    CKPT_TRY(s);
    const bool zero = all_zero(bytes, static_cast<std::size_t>(n));
    if (expected_pad.empty()) {
      if (zero) return true;  // a sector of the record never written
      continue;
    }
    // A PAD's sector is either what the writer wrote there or never written (zeros); anything else is damage.
    const std::uint64_t lo = std::max(sec, off), hi = std::min(sec + n, end);
    if (!zero && std::memcmp(bytes + (lo - sec), expected_pad.data() + (lo - off), static_cast<std::size_t>(hi - lo)) != 0)
      return false;
  }
  return !expected_pad.empty();  // every sector of a PAD is as written or zero; any other record was all there
}

// Digest-valid records after a failure at `bad` inside [bad, end): follows the frame lengths that
// headers give, so a record damaged only in its payload or digest does not hide the ones after it.
[[nodiscard]] CKPT_INLINE Result<std::vector<JournalRecord>> records_after(JournalSource& src, std::uint64_t size, std::uint64_t bad, std::uint64_t end,
                                                               const std::string& path) {
  using namespace journal;
  std::vector<JournalRecord> found;
  std::uint64_t off = bad;
  while (off < end && end - off >= kFrameOverhead) {
    const unsigned char* h = nullptr;
    Status s = src.read(off, kFrameHeaderSize, h);
    if (s.code() == Code::incomplete) break;
    CKPT_TRY(s);
    if (all_zero(h, kFrameHeaderSize)) break;  // never written: nothing further was appended
    const std::uint32_t length = get_u32(h + fr::kLength);
    if (length > kMaxPayload || length > end - off - kFrameOverhead) break;
    JournalRecord rec;
    const unsigned char* payload = nullptr;
    std::string why;
    CKPT_ASSIGN_OR_RETURN(const bool valid, read_frame(src, size, off, rec, payload, why));
    if (valid && (rec.flags & ~kKnownFlags) == 0 &&
        decode_payload(rec, payload, static_cast<std::size_t>(rec.size - kFrameOverhead), path).ok() &&
        rec.type != static_cast<std::uint16_t>(RecordType::pad) && rec.type != static_cast<std::uint16_t>(RecordType::header))
      found.push_back(std::move(rec));
    off += kFrameOverhead + length;
  }
  return found;
}

// Rules a digest-valid record must also follow (spec 6.2). A break is corruption even at the tail:
// a torn write cannot produce a record whose digest matches.
[[nodiscard]] CKPT_INLINE Status check_record_rules(JournalRecord& rec, const unsigned char* payload, std::uint64_t group_start,
                                               const std::string& path) {
  using namespace journal;
  const std::string where = path + ": " + record_type_name(rec.type) + " record at offset " + std::to_string(rec.offset);
  if ((rec.flags & ~kKnownFlags) != 0)
    return make_error(Code::version, where + ": unknown flag bits 0x" + hex64(rec.flags & ~kKnownFlags).substr(12) +
                                         " (written by a newer ckpt?)");
  CKPT_TRY(decode_payload(rec, payload, static_cast<std::size_t>(rec.size - kFrameOverhead), path));
  const bool first = (rec.flags & kFlagFirst) != 0, last = (rec.flags & kFlagLast) != 0;
  if (first != (rec.offset == group_start))
    return make_error(Code::corrupt, where + (first ? ": FIRST flag inside a group that started at offset " + std::to_string(group_start)
                                                    : ": a group must start with a FIRST record"));
  if (last && rec.end() % kPageSize != 0)
    return make_error(Code::corrupt, where + ": LAST record ends at " + std::to_string(rec.end()) + ", not on a page boundary");
  if (rec.type == static_cast<std::uint16_t>(RecordType::pad) && !last)
    return make_error(Code::corrupt, where + ": padding that does not end its group");
  const bool is_header = rec.type == static_cast<std::uint16_t>(RecordType::header);
  if (is_header != (rec.offset == 0))
    return make_error(Code::corrupt, where + (is_header ? ": HEADER away from offset 0" : ": the log must start with HEADER"));
  return Status();
}

[[nodiscard]] CKPT_INLINE Result<JournalScan> scan_core(JournalSource& src, std::uint64_t size, const std::string& path) {
  JournalScan scan;
  scan.path = path;
  scan.file_size = size;
  // Candidate bytes the damage search may hash: 4x the journal plus one largest record (spec 6.3).
  const std::uint64_t search_budget = 4 * size + journal::kMaxPayload;
  GroupSearch search{search_budget, false};
  std::uint64_t off = 0, group_start = 0;
  std::vector<JournalRecord> pending;  // records of the group being read; applied only when it completes
  for (;;) {
    std::string why;
    bool hard = false;  // a rule broken by a digest-valid record: never a torn write
    if (off == size) {
      if (pending.empty()) break;
      why = "the log ends inside the sync group that started at offset " + std::to_string(group_start);
    } else {
      JournalRecord rec;
      const unsigned char* payload = nullptr;
      CKPT_ASSIGN_OR_RETURN(const bool valid, read_frame(src, size, off, rec, payload, why));
      if (valid) {
        Status rules = check_record_rules(rec, payload, group_start, path);
        if (rules.code() == Code::version) return rules;
        if (rules.ok()) {
          off = rec.end();
          const bool last = (rec.flags & journal::kFlagLast) != 0;
          if (rec.type != static_cast<std::uint16_t>(journal::RecordType::pad)) pending.push_back(std::move(rec));
          if (last) {
            for (auto& r : pending) {
              if (const auto* h = std::get_if<JournalHeader>(&r.body)) {
                scan.has_header = true;
                scan.header = *h;
              }
              scan.records.push_back(std::move(r));
            }
            pending.clear();
            ++scan.groups;
            group_start = off;
          }
          continue;
        }
        why = rules.message();
        hard = true;
      }
    }
    // Damage at off. Valid groups after it mean the damage is in the middle of the log (spec 6.3).
    JournalDamage damage;
    damage.offset = group_start;
    damage.bad_offset = off;
    damage.reason = std::move(why);
    damage.unapplied = std::move(pending);
    pending.clear();
    // A FIRST record inside an unfinished group may itself start the next valid group, so look there too.
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t next, next_group_start(src, size, off > group_start ? off : off + 1, search));
    damage.length = next - group_start;
    if (off < next) {
      CKPT_ASSIGN_OR_RETURN(auto after, records_after(src, size, off, next, path));
      // A record that failed the rules at `off` was digest-valid: it is listed once, by records_after.
      for (auto& r : after) damage.unapplied.push_back(std::move(r));
    }
    if (search.exhausted) {
      damage.reason += "; the search for the next group stopped after examining " + std::to_string(search_budget) +
                       " bytes, so what follows cannot be told apart from damage";
      scan.corruption.push_back(std::move(damage));
      group_start = next;  // nothing after an undecided search is applied
      break;
    }
    if (next < size) {
      scan.corruption.push_back(std::move(damage));
      off = group_start = next;
      continue;
    }
    const std::uint64_t limit = journal::max_group_size(scan.has_header ? scan.header.version : journal::kVersion);
    if (!hard && damage.length > limit) {
      damage.reason += "; the damaged tail of " + std::to_string(damage.length) + " bytes is longer than any sync group (" +
                       std::to_string(limit) + " bytes), so it is not an interrupted append";
      hard = true;
    }
    if (hard) {
      scan.corruption.push_back(std::move(damage));
    } else {
      CKPT_ASSIGN_OR_RETURN(damage.clean_tear, looks_torn(src, size, off));
      scan.torn_tail = std::move(damage);
    }
    break;
  }
  scan.end = group_start;
  return Result<JournalScan>(std::move(scan));
}

}  // namespace detail

CKPT_INLINE Result<JournalScan> scan_journal(FsRef fs, FileHandle file, const std::string& path) {
  // The size is read once: bytes appended while we scan belong to a later scan (spec 6.5).
  auto size = fs.file_size(file);
  if (!size.ok()) return size.status().with_context(path);
  detail::JournalSource src(fs, file, path, *size);
  return detail::scan_core(src, *size, path);
}

CKPT_INLINE Result<JournalScan> scan_journal(FsRef fs, const std::string& path) {
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) return file.status();
  ScopedFile scoped(fs, *file);
  return scan_journal(fs, scoped.get(), path);
}

CKPT_INLINE Result<JournalScan> scan_journal_bytes(std::string_view bytes, const std::string& path) {
  detail::JournalSource src(bytes);
  return detail::scan_core(src, bytes.size(), path);
}

// --- Appending (spec/JOURNAL.md 5).

CKPT_INLINE JournalWriter::JournalWriter(JournalWriter&& o) noexcept
    : fs_(o.fs_), path_(std::move(o.path_)), file_(std::exchange(o.file_, FileHandle{})), end_(o.end_),
      failure_(std::move(o.failure_)), last_offsets_(std::move(o.last_offsets_)) {}

CKPT_INLINE JournalWriter& JournalWriter::operator=(JournalWriter&& o) noexcept {
  if (this != &o) {
    if (file_.valid()) fs_.close(file_).ignore_error();
    fs_ = o.fs_;
    path_ = std::move(o.path_);
    file_ = std::exchange(o.file_, FileHandle{});
    end_ = o.end_;
    failure_ = std::move(o.failure_);
    last_offsets_ = std::move(o.last_offsets_);
  }
  return *this;
}

CKPT_INLINE JournalWriter::~JournalWriter() {
  // Every group was fdatasynced before its append returned, so a close error loses nothing.
  if (file_.valid()) fs_.close(file_).ignore_error();
}

CKPT_INLINE Result<JournalWriter> JournalWriter::open(FsRef fs, std::string path, std::uint64_t end) {
  if (end % journal::kPageSize != 0)
    return make_error(Code::invalid_argument, path + ": append offset " + std::to_string(end) + " is not on a page boundary");
  auto file = fs.open(path, OpenMode::read_write);
  if (!file.ok()) return file.status();
  return JournalWriter(fs, std::move(path), *file, end);
}

CKPT_INLINE Status JournalWriter::create(FsRef fs, const std::string& path, const JournalHeader& header) {
  // Created under a temporary name and renamed: JOURNAL exists only with a durable header (spec 5.1).
  CKPT_ASSIGN_OR_RETURN(auto file, AtomicFile::create(fs, path));
  const std::string bytes = encode_group({header_record(header)}, 0);
  CKPT_TRY(file.write(bytes.data(), bytes.size()));
  return file.commit();
}

CKPT_INLINE Result<std::uint64_t> JournalWriter::rewrite(FsRef fs, const std::string& path, const JournalHeader& header,
                                                 const std::vector<std::vector<PendingRecord>>& groups,
                                                 std::vector<std::uint64_t>* offsets) {
  CKPT_ASSIGN_OR_RETURN(auto file, AtomicFile::create(fs, path));
  std::string bytes = encode_group({header_record(header)}, 0);
  for (const auto& g : groups)
    if (!g.empty()) bytes += encode_group(g, bytes.size(), offsets);
  CKPT_TRY(file.write(bytes.data(), bytes.size()));
  CKPT_TRY(file.commit());
  return static_cast<std::uint64_t>(bytes.size());
}

CKPT_INLINE Status JournalWriter::check_unchanged() {
  // The lock is advisory and not every file system honours it (spec 5.8): before writing, make sure the
  // journal is still the file this writer holds and that nobody appended or cut it.
  auto held = fs_.file_size(file_);
  if (!held.ok()) return fail(held.status());
  auto at_path = fs_.stat(path_);
  if (!at_path.ok()) return fail(at_path.status().with_context("the journal is gone"));
  if (*held != end_ || at_path->size != end_)
    return fail(make_error(Code::conflict, path_ + ": expected the journal to end at offset " + std::to_string(end_) +
                                               ", found " + std::to_string(*held) + " bytes in the open file and " +
                                               std::to_string(at_path->size) + " at its path: another writer changed it "
                                               "(was LOCK deleted, or is flock not shared across nodes here?); refusing to append"));
  return Status();
}

CKPT_INLINE Status JournalWriter::fail(const Status& s) {
  if (failure_.ok()) failure_ = s.with_context(path_);
  return failure_;
}

CKPT_INLINE Status JournalWriter::truncate_tail(std::uint64_t end) {
  if (!failure_.ok()) return failure_;
  if (end % journal::kPageSize != 0)
    return make_error(Code::invalid_argument, path_ + ": truncation offset " + std::to_string(end) + " is not on a page boundary");
  Status s = fs_.truncate(file_, end);
  if (!s.ok()) return fail(s);
  // fsync, not fdatasync: the size shrank, and stale bytes must not come back after a crash (spec 6.4).
  s = fs_.sync(file_);
  if (!s.ok()) return fail(s);
  end_ = end;
  return Status();
}

CKPT_INLINE Status JournalWriter::append_group(const std::vector<PendingRecord>& records) {
  if (!failure_.ok()) return failure_;
  if (records.empty()) return Status();
  for (const auto& r : records)
    if (r.payload.size() > journal::kMaxPayload)
      return make_error(Code::invalid_argument, path_ + ": record of " + std::to_string(r.payload.size()) + " bytes exceeds the 64 MiB limit");
  CKPT_TRY(check_unchanged());
  last_offsets_.clear();
  // Each group starts on a fresh page: no page that an earlier fdatasync made durable is written again (spec 5.2).
  const std::string bytes = encode_group(records, end_, &last_offsets_);
  if (bytes.size() > journal::kMaxGroupSize)
    return make_error(Code::invalid_argument, path_ + ": a sync group of " + std::to_string(bytes.size()) +
                                                  " bytes exceeds the limit of " + std::to_string(journal::kMaxGroupSize));
  Status s = fs_.pwrite(file_, bytes.data(), bytes.size(), end_);
  if (!s.ok()) return fail(s);
  s = fs_.sync_data(file_);
  if (!s.ok()) return fail(s);
  end_ += bytes.size();
  return Status();
}

}  // namespace ckpt
