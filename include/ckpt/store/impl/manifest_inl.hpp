// ckpt: definitions for manifest.hpp (spec/JOURNAL.md 7).
#pragma once

#include "../manifest.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <cstring>
#include <set>

namespace ckpt {

CKPT_INLINE ManifestShard manifest_shard(std::uint32_t rank, const std::string& name, const ShardSummary& summary) {
  ManifestShard s;
  s.rank = rank;
  s.name = name;
  s.file_size = summary.file_size;
  s.uuid = summary.uuid;
  s.index_digest = summary.index_digest;
  s.data_bytes = summary.data_bytes;
  s.tensor_count = summary.tensor_count;
  s.chunk_count = summary.chunk_count;
  return s;
}

CKPT_INLINE void encode_manifest_shard(Encoder& out, const ManifestShard& s) {
  out.u32(s.rank);
  out.u16(static_cast<std::uint16_t>(s.name.size()));
  out.u16(0);
  out.u64(s.file_size);
  out.raw(s.uuid.data(), s.uuid.size());
  out.u64(s.index_digest);
  out.u64(s.data_bytes);
  out.u64(s.tensor_count);
  out.u64(s.chunk_count);
  out.bytes(s.name);
}

CKPT_INLINE Status decode_manifest_shard(Decoder& in, ManifestShard& s, const std::string& where) {
  const std::size_t at = in.position();
  auto corrupt = [&](const std::string& what) {
    return make_error(Code::corrupt, where + ": shard entry at byte " + std::to_string(at) + ": " + what);
  };
  std::uint16_t len = 0, reserved = 0;
  if (!in.has(manifest::kShardEntryFixedSize)) return corrupt("cut short");
  (void)in.u32(s.rank);
  (void)in.u16(len);
  (void)in.u16(reserved);
  (void)in.u64(s.file_size);
  std::memcpy(s.uuid.data(), in.cursor(), 16);
  (void)in.skip(16);
  (void)in.u64(s.index_digest);
  (void)in.u64(s.data_bytes);
  (void)in.u64(s.tensor_count);
  (void)in.u64(s.chunk_count);
  if (reserved != 0) return corrupt("reserved field is " + std::to_string(reserved) + ", expected 0");
  if (!in.has(len)) return corrupt("name of " + std::to_string(len) + " bytes runs past the end");
  s.name.assign(reinterpret_cast<const char*>(in.cursor()), len);
  (void)in.skip(len);
  // A name from disk becomes a path: it must stay inside its step directory (spec 2.2).
  Status name_ok = check_file_name(s.name);
  if (!name_ok.ok()) return corrupt(name_ok.message());
  return Status();
}

CKPT_INLINE Status check_manifest(const Manifest& m) {
  if (m.world_size == 0 || m.world_size > journal::kMaxWorldSize)
    return make_error(Code::invalid_argument, "manifest: world size " + std::to_string(m.world_size) + " outside [1, 2^20]");
  if (m.shards.size() > journal::kMaxFilesPerTxn)
    return make_error(Code::invalid_argument, "manifest: more than 2^20 shard files");
  if (m.state.step != m.step)
    return make_error(Code::invalid_argument, "manifest: training state step " + std::to_string(m.state.step) +
                                                  " differs from the step " + std::to_string(m.step));
  std::set<std::string_view> names;
  std::vector<bool> has_rank(m.world_size, false);
  for (const auto& s : m.shards) {
    CKPT_TRY(check_file_name(s.name).with_context("manifest"));
    if (s.rank >= m.world_size)
      return make_error(Code::invalid_argument, "manifest: shard '" + s.name + "' has rank " + std::to_string(s.rank) +
                                                    " outside a world of " + std::to_string(m.world_size));
    if (!names.insert(s.name).second) return make_error(Code::invalid_argument, "manifest: shard '" + s.name + "' listed twice");
    has_rank[s.rank] = true;
  }
  for (std::uint32_t r = 0; r < m.world_size; ++r)
    if (!has_rank[r]) return make_error(Code::invalid_argument, "manifest: rank " + std::to_string(r) + " has no shard file");
  return check_training_state(m.state).with_context("manifest");
}

CKPT_INLINE std::string encode_manifest(const Manifest& m) {
  Encoder body;
  for (const auto& s : m.shards) encode_manifest_shard(body, s);
  encode_training_state(body, m.state);
  Encoder out;
  out.raw(manifest::kMagic, 8);
  out.u32(manifest::kVersion);
  out.u32(static_cast<std::uint32_t>(manifest::kHeaderSize));
  out.u64(m.txn);
  out.u64(m.step);
  out.u32(m.world_size);
  out.u32(static_cast<std::uint32_t>(m.shards.size()));
  out.raw(m.store_uuid.data(), m.store_uuid.size());
  out.u64(body.size());
  out.bytes(body.str());
  out.u64(xxh3_64(out.str().data(), out.size()));
  return std::move(out.str());
}

CKPT_INLINE std::uint64_t manifest_digest(const unsigned char* bytes, std::size_t size) noexcept {
  return size < manifest::kDigestSize ? 0 : get_u64(bytes + size - manifest::kDigestSize);
}

CKPT_INLINE Result<Manifest> decode_manifest(const unsigned char* bytes, std::size_t size, const std::string& path) {
  using namespace manifest;
  auto corrupt = [&](std::uint64_t offset, const std::string& what) {
    return make_error(Code::corrupt, path + ": offset " + std::to_string(offset) + ": " + what);
  };
  if (size > kMaxSize) return corrupt(0, "manifest of " + std::to_string(size) + " bytes exceeds the 256 MiB limit");
  if (size < kHeaderSize + kDigestSize)
    return make_error(Code::incomplete, path + ": manifest is " + std::to_string(size) + " bytes, smaller than header and digest (72)");
  const std::uint64_t expected = get_u64(bytes + size - kDigestSize);
  const std::uint64_t found = xxh3_64(bytes, size - kDigestSize);
  if (expected != found)
    return corrupt(size - kDigestSize, "manifest digest expected " + hex64(expected) + ", found " + hex64(found));
  if (std::memcmp(bytes + hd::kMagic, kMagic, 8) != 0) return corrupt(0, "magic is not CKPTMANI");
  const std::uint32_t version = get_u32(bytes + hd::kVersion);
  if (version != kVersion)
    return make_error(Code::version, path + ": manifest version " + std::to_string(version) + ", this build reads version 1");
  if (get_u32(bytes + hd::kHeaderSize) != kHeaderSize)
    return corrupt(hd::kHeaderSize, "header size " + std::to_string(get_u32(bytes + hd::kHeaderSize)) + ", expected 64");
  Manifest m;
  m.txn = get_u64(bytes + hd::kTxn);
  m.step = get_u64(bytes + hd::kStep);
  m.state.step = m.step;
  m.world_size = get_u32(bytes + hd::kWorldSize);
  const std::uint32_t shard_count = get_u32(bytes + hd::kShardCount);
  std::memcpy(m.store_uuid.data(), bytes + hd::kStoreUuid, 16);
  const std::uint64_t body_length = get_u64(bytes + hd::kBodyLength);
  if (body_length != size - kHeaderSize - kDigestSize)
    return corrupt(hd::kBodyLength, "body length " + std::to_string(body_length) + ", the file holds " +
                                        std::to_string(size - kHeaderSize - kDigestSize));
  if (m.world_size == 0 || m.world_size > journal::kMaxWorldSize)
    return corrupt(hd::kWorldSize, "world size " + std::to_string(m.world_size) + " outside [1, 2^20]");
  // Bound the shard count by the bytes present before reserving anything (spec 9).
  if (shard_count > journal::kMaxFilesPerTxn || shard_count > body_length / kShardEntryFixedSize)
    return corrupt(hd::kShardCount, "shard count " + std::to_string(shard_count) + " exceeds the limit or the " +
                                        std::to_string(body_length) + "-byte body");
  Decoder in(bytes + kHeaderSize, static_cast<std::size_t>(body_length));
  m.shards.reserve(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    ManifestShard s;
    CKPT_TRY(decode_manifest_shard(in, s, path + " (body)"));
    m.shards.push_back(std::move(s));
  }
  CKPT_TRY(decode_training_state(in, m.state, path + " (body)"));
  if (in.remaining() != 0)
    return corrupt(kHeaderSize + in.position(), std::to_string(in.remaining()) + " trailing bytes after the training state");
  Status s = check_manifest(m);
  if (!s.ok()) return make_error(Code::corrupt, path + ": " + s.message());
  return Result<Manifest>(std::move(m));
}

}  // namespace ckpt
