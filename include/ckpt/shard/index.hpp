// ckpt: the in-memory form of a shard file's superblock, index and footer, with their codecs.
// Decoding treats every byte as hostile: each count, offset and length is checked before use.
#pragma once

#include <array>
#include <optional>
#include <utility>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../core/coding.hpp"
#include "../core/error.hpp"
#include "../core/format.hpp"
#include "../core/uuid.hpp"
#include "../core/value.hpp"

namespace ckpt {

using DType = format::DType;
using Shape = std::vector<std::uint64_t>;

struct Superblock {
  std::uint32_t version = format::kVersion;
  std::uint64_t compat = 0, ro_compat = 0, incompat = 0;
  Uuid uuid{};
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  std::uint32_t hash_id = format::kHashXxh3_64;
  std::uint64_t data_offset = 0;  // align_up(kSuperblockSize, alignment)

  [[nodiscard]] std::uint64_t alignment() const noexcept { return std::uint64_t{1} << alignment_log2; }
  [[nodiscard]] std::uint64_t chunk_size() const noexcept { return std::uint64_t{1} << chunk_size_log2; }
};

struct Footer {
  std::uint64_t index_offset = 0, index_length = 0, index_digest = 0;
  Uuid uuid{};
  std::uint32_t version = format::kVersion;
};

struct ChunkRecord {
  std::uint64_t offset = 0;  // absolute file offset
  std::uint64_t length = 0;
  std::uint64_t digest = 0;  // XXH3-64 of the chunk's bytes
};

struct PieceRecord {
  std::uint64_t tensor = 0;  // index into Index::tensors
  Shape offsets;             // global offsets of the piece's first element
  Shape shape;               // local shape; row-major, contiguous in the file
  std::uint64_t data_offset = 0, data_length = 0;
  std::uint64_t chunk_first = 0, chunk_count = 0;
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::U8;
  Shape shape;  // global shape
  std::uint64_t piece_first = 0, piece_count = 0;
};

struct MetaEntry {
  std::string key;
  Value value;
};

struct Index {
  std::vector<TensorRecord> tensors;
  std::vector<PieceRecord> pieces;
  std::vector<ChunkRecord> chunks;
  std::vector<MetaEntry> metadata;

  [[nodiscard]] const TensorRecord* find_tensor(std::string_view name) const;
  [[nodiscard]] const MetaEntry* find_metadata(std::string_view key) const;
  [[nodiscard]] std::size_t tensor_position(const TensorRecord& t) const noexcept {
    return static_cast<std::size_t>(&t - tensors.data());
  }
  void rebuild_lookup();

 private:
  std::unordered_map<std::string, std::size_t> tensor_by_name_;
  std::unordered_map<std::string, std::size_t> meta_by_key_;
};

// Element count of a shape, or false on overflow.
[[nodiscard]] bool shape_elements(const Shape& shape, std::uint64_t& out) noexcept;
// Byte size of a tensor or piece of this shape and dtype, or false on overflow.
[[nodiscard]] bool shape_bytes(const Shape& shape, DType dtype, std::uint64_t& out) noexcept;
// A hyper-rectangle given by its offsets and shape (views into piece records).
struct SliceRef {
  const Shape* offsets;
  const Shape* shape;
};
// Positions (first < second) of two non-empty slices that share an element, or nullopt when none do.
[[nodiscard]] std::optional<std::pair<std::size_t, std::size_t>> find_overlapping_slices(const std::vector<SliceRef>& slices,
                                                                                        std::size_t rank);
[[nodiscard]] std::string shape_string(const Shape& shape);
// The one check of a read slice against a tensor (spec/FORMAT.md 7.2): rank, bounds (that cannot
// overflow) and, unless dst_size is kAnySize, the buffer size. Returns the slice's element count.
inline constexpr std::size_t kAnySize = ~std::size_t{0};
[[nodiscard]] Result<std::uint64_t> check_slice(const TensorRecord& tensor, const Shape& offsets, const Shape& shape,
                                                std::size_t dst_size = kAnySize);
[[nodiscard]] bool valid_utf8(std::string_view s) noexcept;

[[nodiscard]] std::array<unsigned char, format::kSuperblockSize> encode_superblock(const Superblock& sb);
[[nodiscard]] Result<Superblock> decode_superblock(const unsigned char* bytes, const std::string& path);
[[nodiscard]] std::array<unsigned char, format::kFooterSize> encode_footer(const Footer& footer);
[[nodiscard]] Result<Footer> decode_footer(const unsigned char* bytes, std::uint64_t file_size,
                                           const std::string& path);
// Canonical encoding: tensors, pieces and chunks in table order, then the blob (names, keys, values).
[[nodiscard]] std::string encode_index(const Index& index);
// Validates everything the index says against the superblock and the index position (spec 5.7).
[[nodiscard]] Result<Index> decode_index(const unsigned char* bytes, std::size_t size, const Superblock& sb,
                                         std::uint64_t index_offset, const std::string& path);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/index_inl.hpp"
#endif
