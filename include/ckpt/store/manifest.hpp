// ckpt: the MANIFEST of one step (spec/JOURNAL.md 7): which shard files make the step, with each
// file's size, UUID and index digest (which pins every chunk digest, so every byte), the world size,
// and the training state. The COMMIT record carries the manifest's digest, so the journal pins it.
//
//   header (64 bytes) | shard table | training state | u64 XXH3-64 of everything before it
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/coding.hpp"
#include "../core/error.hpp"
#include "../shard/index.hpp"
#include "journal.hpp"
#include "../shard/shard_writer.hpp"
#include "training_state.hpp"

namespace ckpt {

namespace manifest {
inline constexpr unsigned char kMagic[8] = {'C', 'K', 'P', 'T', 'M', 'A', 'N', 'I'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 64;
namespace hd {
inline constexpr std::size_t kMagic = 0;        // 8 bytes
inline constexpr std::size_t kVersion = 8;      // u32
inline constexpr std::size_t kHeaderSize = 12;  // u32, == 64
inline constexpr std::size_t kTxn = 16;         // u64
inline constexpr std::size_t kStep = 24;        // u64
inline constexpr std::size_t kWorldSize = 32;   // u32
inline constexpr std::size_t kShardCount = 36;  // u32
inline constexpr std::size_t kStoreUuid = 40;   // 16 bytes, == the journal HEADER's
inline constexpr std::size_t kBodyLength = 56;  // u64, bytes between header and digest
}  // namespace hd
static_assert(hd::kBodyLength + 8 == kHeaderSize, "manifest header size");
// Shard entry: rank u32, name_length u16, reserved u16, file_size u64, uuid 16, index_digest u64,
// data_bytes u64, tensor_count u64, chunk_count u64, then the name.
inline constexpr std::size_t kShardEntryFixedSize = 64;
static_assert(4 + 2 + 2 + 8 + 16 + 8 + 8 + 8 + 8 == kShardEntryFixedSize, "shard entry");
inline constexpr std::size_t kDigestSize = 8;
// Decoder limit: a manifest larger than this is refused before it is read (spec 9).
inline constexpr std::uint64_t kMaxSize = std::uint64_t{256} << 20;
}  // namespace manifest

// One shard file of a step, as its writer finished it.
struct ManifestShard {
  std::uint32_t rank = 0;
  std::string name;  // inside the step directory
  std::uint64_t file_size = 0;
  Uuid uuid{};
  std::uint64_t index_digest = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t tensor_count = 0, chunk_count = 0;
  bool operator==(const ManifestShard& o) const {
    return rank == o.rank && name == o.name && file_size == o.file_size && uuid == o.uuid &&
           index_digest == o.index_digest && data_bytes == o.data_bytes && tensor_count == o.tensor_count &&
           chunk_count == o.chunk_count;
  }
};

struct Manifest {
  std::uint64_t txn = 0, step = 0;
  std::uint32_t world_size = 1;
  Uuid store_uuid{};
  std::vector<ManifestShard> shards;  // in rank order; every rank has at least one
  TrainingState state;                // state.step == step
};

// What a rank sends the coordinator for its shard (spec 8): the manifest entry of a ShardSummary.
[[nodiscard]] ManifestShard manifest_shard(std::uint32_t rank, const std::string& name, const ShardSummary& summary);
void encode_manifest_shard(Encoder& out, const ManifestShard& shard);
[[nodiscard]] Status decode_manifest_shard(Decoder& in, ManifestShard& shard, const std::string& where);

// Checks the invariants decode enforces, so a writer never produces a manifest a reader refuses.
[[nodiscard]] Status check_manifest(const Manifest& m);
// Canonical bytes of the MANIFEST file, ending with their digest.
[[nodiscard]] std::string encode_manifest(const Manifest& m);
// The digest the COMMIT record carries: the manifest's last 8 bytes, XXH3-64 of all before them.
[[nodiscard]] std::uint64_t manifest_digest(const unsigned char* bytes, std::size_t size) noexcept;
// Decodes untrusted bytes: digest, magic, version, every count and name checked (spec 7.4).
[[nodiscard]] Result<Manifest> decode_manifest(const unsigned char* bytes, std::size_t size, const std::string& path);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/manifest_inl.hpp"
#endif
