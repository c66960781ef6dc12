// ckpt: definitions for tiers/tier_log.hpp (spec/TIERS.md 5).
#pragma once

#include <algorithm>
#include <map>
#include <set>

#include "../../core/coding.hpp"
#include "../../core/uuid.hpp"
#include "../../store/memory_layout.hpp"
#include "../tier_log.hpp"

namespace ckpt::tiers {

CKPT_INLINE const char* tier_event_name(TierEvent e) noexcept {
  // Upper case like the journal's record types, the unknown one too.
  return enum_name(e, {"CAPTURED", "HELD", "REPLICATED", "PERSISTED", "EVICTED", "SET_ASIDE", "LOAD_FAILED", "RESUMED", "SKIPPED", "SDC", "PARITY", "REBUILT"},
                   "UNKNOWN");
}

CKPT_INLINE std::string live_piece_key(std::string_view tensor, const std::vector<std::uint64_t>& offsets) {
  std::string key(tensor);
  key += '@';
  for (std::size_t i = 0; i < offsets.size(); ++i) key += (i ? "," : "") + std::to_string(offsets[i]);
  return key;
}

CKPT_INLINE std::string TierRecord::describe() const {
  std::string s = std::string(tier_event_name(event)) + " step " + std::to_string(step) + " (" + step_digest.hex().substr(0, 12) +
                  ") shard " + std::to_string(shard) + "/" + std::to_string(world);
  if (txn != 0) s += " txn " + std::to_string(txn);
  if (event == TierEvent::replicated) s += " copies " + std::to_string(copies);
  if ((event == TierEvent::set_aside || event == TierEvent::load_failed) && !detail.empty()) s += ": " + detail;
  if (event == TierEvent::sdc) {
    auto f = decode_sdc(*this, "");
    s += ": " + (f.ok() ? f->describe() : f.status().message());
  }
  return s;
}

CKPT_INLINE std::string SdcFinding::describe() const {
  std::string s = "tensor '" + tensor + "' chunk " + std::to_string(chunk);
  if (chunks_differing > 1) s += " (and " + std::to_string(chunks_differing - 1) + " more chunks)";
  s += odd_rank != kNoRank ? ": rank " + std::to_string(odd_rank) + " differs from every other holder" : ": the holders disagree";
  std::string list;
  for (const auto& [rank, digest] : digests) list += (list.empty() ? "" : ", ") + std::to_string(rank) + "=" + hex64(digest);
  return s + " (rank=digest: " + list + ")";
}

CKPT_INLINE std::string encode_sdc(const SdcFinding& f) {
  Encoder out;
  out.u32(static_cast<std::uint32_t>(f.tensor.size()));
  out.bytes(f.tensor);
  out.u64(f.chunk), out.u64(f.chunks_differing), out.u32(f.odd_rank), out.u32(static_cast<std::uint32_t>(f.digests.size()));
  for (const auto& [rank, digest] : f.digests) out.u32(rank), out.u64(digest);
  return std::move(out.str());
}

CKPT_INLINE Result<SdcFinding> decode_sdc(const TierRecord& r, const std::string& where) {
  SdcFinding f;
  f.step = r.step;
  Decoder d(reinterpret_cast<const unsigned char*>(r.detail.data()), r.detail.size());
  std::uint32_t name_length = 0, holders = 0;
  bool ok = d.u32(name_length) && d.str(name_length, f.tensor) && d.u64(f.chunk) && d.u64(f.chunks_differing) && d.u32(f.odd_rank) &&
            d.u32(holders) && holders <= d.remaining() / 12;
  for (std::uint32_t i = 0; ok && i < holders; ++i) {
    std::uint32_t rank = 0;
    std::uint64_t digest = 0;
    ok = d.u32(rank) && d.u64(digest);
    f.digests.emplace_back(rank, digest);
  }
  if (!ok || d.remaining() != 0)
    return make_error(Code::corrupt, where + (where.empty() ? "" : ": ") + "SDC record of step " + std::to_string(r.step) + ": " +
                                         std::to_string(r.detail.size()) + " bytes of detail do not decode (spec/TIERS.md 11.2)");
  return f;
}

CKPT_INLINE std::vector<SdcFinding> compare_replicas(
    std::uint64_t step, const std::vector<std::tuple<std::string, std::uint32_t, std::vector<std::uint64_t>>>& held) {
  std::map<std::string, std::vector<std::pair<std::uint32_t, const std::vector<std::uint64_t>*>>> by_name;
  for (const auto& [name, rank, digests] : held) by_name[name].emplace_back(rank, &digests);
  std::vector<SdcFinding> out;
  for (const auto& [name, holders] : by_name) {
    if (holders.size() < 2) continue;
    std::size_t chunks = 0;
    for (const auto& h : holders) chunks = std::max(chunks, h.second->size());
    // A holder with fewer chunks differs from the others at the first one it lacks (digest 0 stands for none).
    const auto digest_at = [](const std::vector<std::uint64_t>& v, std::size_t c) { return c < v.size() ? v[c] : 0; };
    SdcFinding f;
    f.step = step, f.tensor = name;
    for (std::size_t c = 0; c < chunks; ++c) {
      bool same = true;
      for (const auto& h : holders) same = same && digest_at(*h.second, c) == digest_at(*holders.front().second, c);
      if (same) continue;
      if (f.chunks_differing++ > 0) continue;
      f.chunk = c;
      for (const auto& h : holders) f.digests.emplace_back(h.first, digest_at(*h.second, c));
    }
    if (f.chunks_differing == 0) continue;
    // The odd one out: every holder but one agrees (needs three holders to say which).
    if (f.digests.size() >= 3)
      for (std::size_t i = 0; i < f.digests.size(); ++i) {
        std::set<std::uint64_t> others;
        for (std::size_t j = 0; j < f.digests.size(); ++j)
          if (j != i) others.insert(f.digests[j].second);
        if (others.size() == 1 && *others.begin() != f.digests[i].second) f.odd_rank = f.digests[i].first;
      }
    out.push_back(std::move(f));
  }
  return out;
}

CKPT_INLINE std::string encode_shard_digests(const std::vector<Digest128>& digests) {
  Encoder out;
  for (const auto& d : digests) out.u64(d.high), out.u64(d.low);
  return std::move(out.str());
}

CKPT_INLINE Result<std::vector<Digest128>> decode_shard_digests(const TierRecord& r, const std::string& where) {
  if (r.detail.size() != std::size_t{16} * r.world)
    return make_error(Code::corrupt, where + ": " + r.describe() + ": expected " + std::to_string(16ull * r.world) +
                                         " bytes of shard digests, found " + std::to_string(r.detail.size()));
  std::vector<Digest128> out(r.world);
  const auto* p = reinterpret_cast<const unsigned char*>(r.detail.data());
  for (std::uint32_t i = 0; i < r.world; ++i) out[i] = Digest128{get_u64(p + 16 * i), get_u64(p + 16 * i + 8)};
  return out;
}

namespace detail {

[[nodiscard]] CKPT_INLINE bool is_tier_type(std::uint16_t type) noexcept {
  const std::uint16_t base = journal::kIgnorableType | tier_log::kTypeBase;
  return type > base && type <= base + static_cast<std::uint16_t>(enum_bounds(TierEvent{}).last);
}

[[nodiscard]] CKPT_INLINE PendingRecord tier_record(const TierRecord& r) {
  Encoder out;
  out.u64(r.step), out.u32(r.world), out.u32(r.shard);
  out.u64(r.step_digest.high), out.u64(r.step_digest.low), out.u64(r.shard_digest.high), out.u64(r.shard_digest.low);
  out.u64(r.txn), out.u32(r.copies), out.u32(static_cast<std::uint32_t>(r.detail.size()));
  out.bytes(r.detail);
  return PendingRecord{static_cast<std::uint16_t>(journal::kIgnorableType | tier_log::kTypeBase | static_cast<std::uint16_t>(r.event)),
                       std::move(out.str())};
}

[[nodiscard]] CKPT_INLINE Result<TierRecord> decode_tier_record(const JournalRecord& rec, const unsigned char* p, std::size_t n,
                                                                const std::string& path) {
  const std::string where = path + ": tier record at offset " + std::to_string(rec.offset);
  if (n < tier_log::kFixedSize)
    return make_error(Code::corrupt, where + ": expected at least " + std::to_string(tier_log::kFixedSize) + " bytes, found " + std::to_string(n));
  TierRecord r;
  r.event = static_cast<TierEvent>(rec.type & 0xff);
  r.offset = rec.offset;
  r.step = get_u64(p), r.world = get_u32(p + 8), r.shard = get_u32(p + 12);
  r.step_digest = Digest128{get_u64(p + 16), get_u64(p + 24)};
  r.shard_digest = Digest128{get_u64(p + 32), get_u64(p + 40)};
  r.txn = get_u64(p + 48), r.copies = get_u32(p + 56);
  const std::uint32_t detail = get_u32(p + 60);
  if (detail != n - tier_log::kFixedSize)
    return make_error(Code::corrupt, where + ": detail length " + std::to_string(detail) + " but " +
                                         std::to_string(n - tier_log::kFixedSize) + " bytes follow");
  if (r.world == 0 || r.world > journal::kMaxWorldSize || r.shard >= r.world)
    return make_error(Code::corrupt, where + ": shard " + std::to_string(r.shard) + " of a world of " + std::to_string(r.world));
  r.detail.assign(reinterpret_cast<const char*>(p + tier_log::kFixedSize), detail);
  return r;
}

// The tier records of a scanned log, their payloads read back from the file.
[[nodiscard]] CKPT_INLINE Result<std::vector<TierRecord>> tier_records(FsRef fs, FileHandle file, const JournalScan& scan) {
  std::vector<TierRecord> out;
  std::string payload;
  for (const auto& rec : scan.records) {
    if (!is_tier_type(rec.type)) continue;
    const std::uint64_t n = rec.size - journal::kFrameOverhead;  // the scan checked the frame against the file
    payload.resize(static_cast<std::size_t>(n));
    CKPT_TRY(read_exact(fs, file, scan.path, payload.empty() ? nullptr : &payload[0], payload.size(), rec.offset + journal::kFrameHeaderSize));
    CKPT_ASSIGN_OR_RETURN(TierRecord r, decode_tier_record(rec, reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), scan.path));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace detail

CKPT_INLINE Result<std::vector<TierRecord>> read_tier_log(FsRef fs, const std::string& dir) {
  const std::string path = join_path(dir, std::string(memory_layout::kTierLog));
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) {
    if (file.status().code() == Code::not_found) return std::vector<TierRecord>{};
    return file.status();
  }
  ScopedFile scoped(fs, *file);
  CKPT_ASSIGN_OR_RETURN(JournalScan scan, scan_journal(fs, scoped.get(), path));
  if (scan.corrupt()) return make_error(Code::corrupt, path + ": " + scan.corruption_summary());
  return detail::tier_records(fs, scoped.get(), scan);
}

CKPT_INLINE Result<TierLog> TierLog::open(FsRef fs, const std::string& dir) {
  const std::string path = join_path(dir, std::string(memory_layout::kTierLog));
  auto probe = fs.stat(path);
  if (!probe.ok()) {
    if (probe.status().code() != Code::not_found) return probe.status();
    JournalHeader h;
    h.store_uuid = random_uuid();
    CKPT_TRY(JournalWriter::create(fs, path, h));
  }
  std::vector<TierRecord> records;
  JournalScan scan;
  {
    auto file = fs.open(path, OpenMode::read);
    if (!file.ok()) return file.status();
    ScopedFile scoped(fs, *file);
    CKPT_ASSIGN_OR_RETURN(scan, scan_journal(fs, scoped.get(), path));
    if (scan.corrupt()) return make_error(Code::corrupt, path + ": " + scan.corruption_summary());
    CKPT_ASSIGN_OR_RETURN(records, detail::tier_records(fs, scoped.get(), scan));
  }
  CKPT_ASSIGN_OR_RETURN(JournalWriter writer, JournalWriter::open(fs, path, scan.end));
  if (scan.file_size > scan.end) CKPT_TRY(writer.truncate_tail(scan.end));  // a torn tail is end of log (spec/JOURNAL.md 6.3)
  TierLog log(fs, path, std::move(writer), scan.header);
  log.records_ = std::move(records);
  return log;
}

CKPT_INLINE Status TierLog::append(std::vector<TierRecord> records) {
  if (records.empty()) return Status();
  std::vector<PendingRecord> pending;
  for (const auto& r : records) {
    if (r.detail.size() > tier_log::kMaxDetail) return make_error(Code::invalid_argument, path_ + ": tier record detail too long");
    // Never write what a reader must refuse (spec/TIERS.md 5.2): the log would be corrupt from then on.
    if (r.world == 0 || r.world > journal::kMaxWorldSize || r.shard >= r.world)
      return make_error(Code::invalid_argument, path_ + ": " + r.describe() + ": shard " + std::to_string(r.shard) + " of a world of " +
                                                    std::to_string(r.world) + " is not a valid tier record");
    pending.push_back(detail::tier_record(r));
  }
  CKPT_TRY(writer_.append_group(pending));
  const auto& offsets = writer_.last_offsets();
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (i < offsets.size()) records[i].offset = offsets[i];
    records_.push_back(std::move(records[i]));
  }
  return Status();
}

CKPT_INLINE Status TierLog::compact(const std::function<bool(const TierRecord&)>& keep) {
  std::vector<TierRecord> kept;
  std::vector<std::vector<PendingRecord>> groups;
  for (const auto& r : records_)
    if (keep(r)) {
      kept.push_back(r);
      groups.push_back({detail::tier_record(r)});
    }
  std::vector<std::uint64_t> offsets;
  CKPT_ASSIGN_OR_RETURN(std::uint64_t end, JournalWriter::rewrite(fs_, path_, header_, groups, &offsets));
  CKPT_ASSIGN_OR_RETURN(JournalWriter writer, JournalWriter::open(fs_, path_, end));
  writer_ = std::move(writer);
  for (std::size_t i = 0; i < kept.size() && i < offsets.size(); ++i) kept[i].offset = offsets[i];
  records_ = std::move(kept);
  return Status();
}

}  // namespace ckpt::tiers
