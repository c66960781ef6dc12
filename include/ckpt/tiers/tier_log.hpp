// ckpt: the tier log (spec/TIERS.md 5): where each step lives, as records of its transitions
// (captured, held, replicated, persisted, evicted) and of what resume learned (a copy set aside, a
// step that failed to load, the step resumed). One log per rank's memory root, in the journal's own
// framing (spec/JOURNAL.md 3: sync groups on fresh pages, digests seeded by offset, a torn tail is end
// of log), with record types of its own in the journal's ignorable range. Every record carries the
// step's content digest, so tiers agree on what a step is, not on which files exist.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../identity/identity.hpp"
#include "../io/fs.hpp"
#include "../store/journal.hpp"

namespace ckpt::tiers {

namespace tier_log {
// Record type = journal::kIgnorableType | kTypeBase | event (spec/TIERS.md 5.2).
inline constexpr std::uint16_t kTypeBase = 0x0100;
// step u64, world u32, shard u32, step digest 16, shard digest 16, txn u64, copies u32, detail length u32.
inline constexpr std::size_t kFixedSize = 64;
static_assert(8 + 4 + 4 + 16 + 16 + 8 + 4 + 4 == kFixedSize, "tier record fixed part");
inline constexpr std::uint32_t kMaxDetail = journal::kMaxPayload - kFixedSize;
}  // namespace tier_log

enum class TierEvent : std::uint16_t {
  captured = 1,     // this rank's shard of the step is committed in its memory store; detail: every shard's digest
  held = 2,         // a replica of shard `shard` arrived, every chunk verified, committed in held-<shard>
  replicated = 3,   // every shard of the step has `copies` verified replicas in other domains
  persisted = 4,    // the step is committed in the persistent store (txn), its content digest checked
  evicted = 5,      // retention retired this copy (shard `shard`, store txn)
  set_aside = 6,    // this copy failed verification at resume: never used again, never deleted
  load_failed = 7,  // the job could not load this (step, digest): never chosen again (Megatron-LM #5281)
  resumed = 8,      // the job resumed this (step, digest)
  skipped = 9,      // a capture due at this step was not taken: the previous one was still in the background
  sdc = 10,         // ranks holding the same bytes disagreed on them (silent data corruption): never a step of any tier
  parity = 11,      // this rank committed parity segments of the step in its parity store (txn); detail: the layout (12.3)
  rebuilt = 12,     // this rank's shard of the step was rebuilt from its parity group, verified, committed in own (txn)
};
[[nodiscard]] constexpr EnumBounds<TierEvent> enum_bounds(TierEvent) noexcept { return {TierEvent::captured, TierEvent::rebuilt}; }
[[nodiscard]] const char* tier_event_name(TierEvent e) noexcept;

struct TierRecord {
  TierEvent event = TierEvent::captured;
  std::uint64_t step = 0;
  std::uint32_t world = 0;  // ranks that wrote the step
  std::uint32_t shard = 0;  // whose shard (a rank of the step's world)
  Digest128 step_digest, shard_digest;
  std::uint64_t txn = 0;    // the store transaction the record is about (memory, held or persistent)
  std::uint32_t copies = 0;
  std::string detail;       // captured: world x 16-byte shard digests; set_aside/load_failed: why; sdc: encode_sdc
  std::uint64_t offset = 0; // where it sits in the log (read back)
  [[nodiscard]] std::string describe() const;
};

// The captured record's detail: every shard's digest, in rank order.
[[nodiscard]] std::string encode_shard_digests(const std::vector<Digest128>& digests);
[[nodiscard]] Result<std::vector<Digest128>> decode_shard_digests(const TierRecord& r, const std::string& where);

// A canary's finding (spec/TIERS.md 11): the holders of a replicated tensor disagree on a chunk's digest.
struct SdcFinding {
  std::uint64_t step = 0;
  std::string tensor;
  std::uint64_t chunk = 0;             // the first chunk (of the tensor's bytes, chunk_size each) whose digests differ
  std::uint64_t chunks_differing = 0;  // how many chunks differ in all
  std::uint32_t odd_rank = kNoRank;    // the one holder whose digest differs from every other's (3 or more holders)
  std::vector<std::pair<std::uint32_t, std::uint64_t>> digests;  // each holder's (rank, digest of that chunk)
  static constexpr std::uint32_t kNoRank = 0xffffffffu;
  [[nodiscard]] std::string describe() const;
};
// What the canary calls a piece of a data-parallel tensor that its owner saves and a replica holder holds live
// (spec/TIERS.md 11.1): "name@o0,o1,..." (its offsets in decimal).
[[nodiscard]] std::string live_piece_key(std::string_view tensor, const std::vector<std::uint64_t>& offsets);
// The SDC record's detail: u32 name length, name, u64 chunk, u64 chunks differing, u32 odd rank, u32 holders,
// then per holder u32 rank and u64 digest (little endian).
[[nodiscard]] std::string encode_sdc(const SdcFinding& f);
[[nodiscard]] Result<SdcFinding> decode_sdc(const TierRecord& r, const std::string& where);
// Compares each replicated tensor's chunk digests across its holders: (name, rank, digests) per holder.
[[nodiscard]] std::vector<SdcFinding> compare_replicas(
    std::uint64_t step, const std::vector<std::tuple<std::string, std::uint32_t, std::vector<std::uint64_t>>>& held);

// Reads a tier log without writing; a missing log is an empty one. Mid-log damage is Code::corrupt.
[[nodiscard]] Result<std::vector<TierRecord>> read_tier_log(FsRef fs, const std::string& dir);

class TierLog {
 public:
  // Opens dir/TIERS for appending, creating it (durably) when missing and cutting a torn tail.
  [[nodiscard]] static Result<TierLog> open(FsRef fs, const std::string& dir);
  [[nodiscard]] const std::vector<TierRecord>& records() const noexcept { return records_; }
  // One durable sync group: the records exist once this returns ok.
  [[nodiscard]] Status append(std::vector<TierRecord> records);
  // Rewrites the log keeping the records `keep` accepts (temporary name, fsync, rename, directory fsync).
  [[nodiscard]] Status compact(const std::function<bool(const TierRecord&)>& keep);
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  TierLog(FsRef fs, std::string path, JournalWriter writer, JournalHeader header)
      : fs_(fs), path_(std::move(path)), writer_(std::move(writer)), header_(header) {}
  FsRef fs_;
  std::string path_;
  JournalWriter writer_;
  JournalHeader header_;
  std::vector<TierRecord> records_;
};

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/tier_log_inl.hpp"
#endif
