// ckpt: every on-disk constant and fixed layout of format v1, in one place (spec/FORMAT.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "enum_name.hpp"

namespace ckpt::format {

inline constexpr std::uint32_t kVersion = 1;

// --- Superblock (spec 3): at offset 0, kSuperblockSize bytes, then zeros up to the data offset.
inline constexpr unsigned char kSuperblockMagic[8] = {0x89, 'C', 'K', 'P', 'T', 0x0D, 0x0A, 0x1A};
inline constexpr std::size_t kSuperblockSize = 128;
namespace sb {
inline constexpr std::size_t kMagic = 0;            // 8 bytes
inline constexpr std::size_t kVersion = 8;          // u32
inline constexpr std::size_t kSize = 12;            // u32, == kSuperblockSize
inline constexpr std::size_t kCompat = 16;          // u64, unknown bits ignored
inline constexpr std::size_t kRoCompat = 24;        // u64, unknown bits: read-only access
inline constexpr std::size_t kIncompat = 32;        // u64, unknown bits: refuse
inline constexpr std::size_t kUuid = 40;            // 16 bytes
inline constexpr std::size_t kAlignmentLog2 = 56;   // u32
inline constexpr std::size_t kChunkSizeLog2 = 60;   // u32
inline constexpr std::size_t kHashId = 64;          // u32
inline constexpr std::size_t kReserved0 = 68;       // u32, zero
inline constexpr std::size_t kDataOffset = 72;      // u64, == align_up(128, alignment)
inline constexpr std::size_t kReserved1 = 80;       // 40 bytes, zero
inline constexpr std::size_t kDigest = 120;         // u64, XXH3-64 of bytes [0, 120)
}  // namespace sb
static_assert(sb::kReserved1 + 40 == sb::kDigest, "superblock reserved area");
static_assert(sb::kDigest + 8 == kSuperblockSize, "superblock digest is its last field");

// --- Footer (spec 6): the last kFooterSize bytes of the file.
inline constexpr unsigned char kFooterMagic[8] = {'C', 'K', 'P', 'T', 'F', 'E', 'N', 'D'};
inline constexpr std::size_t kFooterSize = 64;
namespace ft {
inline constexpr std::size_t kIndexOffset = 0;   // u64
inline constexpr std::size_t kIndexLength = 8;   // u64
inline constexpr std::size_t kIndexDigest = 16;  // u64, XXH3-64 of the index bytes
inline constexpr std::size_t kUuid = 24;         // 16 bytes, == superblock uuid
inline constexpr std::size_t kVersion = 40;      // u32, == superblock version
inline constexpr std::size_t kReserved = 44;     // u32, zero
inline constexpr std::size_t kDigest = 48;       // u64, XXH3-64 of bytes [0, 48)
inline constexpr std::size_t kMagic = 56;        // 8 bytes
}  // namespace ft
static_assert(ft::kMagic + 8 == kFooterSize, "footer magic is its last field");

// --- Index (spec 5): header then tables, each directly after the previous.
inline constexpr unsigned char kIndexMagic[8] = {'C', 'K', 'P', 'T', 'I', 'N', 'D', 'X'};
inline constexpr std::size_t kIndexHeaderSize = 64;
namespace ix {
inline constexpr std::size_t kMagic = 0;         // 8 bytes
inline constexpr std::size_t kTensorCount = 8;   // u64
inline constexpr std::size_t kPieceCount = 16;   // u64
inline constexpr std::size_t kChunkCount = 24;   // u64
inline constexpr std::size_t kDimCount = 32;     // u64
inline constexpr std::size_t kMetaCount = 40;    // u64
inline constexpr std::size_t kBlobSize = 48;     // u64
inline constexpr std::size_t kReserved = 56;     // u64, zero
}  // namespace ix
static_assert(ix::kReserved + 8 == kIndexHeaderSize, "index header size");

inline constexpr std::size_t kTensorRecordSize = 40;  // name_off u64, name_len u32, dtype u16, ndim u16, shape_first u64, piece_first u64, piece_count u64
inline constexpr std::size_t kPieceRecordSize = 48;   // tensor u64, data_offset u64, data_length u64, chunk_first u64, chunk_count u64, dims_first u64
inline constexpr std::size_t kChunkRecordSize = 24;   // file_offset u64, length u64, digest u64
inline constexpr std::size_t kDimRecordSize = 8;      // u64
inline constexpr std::size_t kMetaRecordSize = 32;    // key_off u64, key_len u32, type u16, reserved u16, value u64, value_len u64
static_assert(8 + 4 + 2 + 2 + 8 + 8 + 8 == kTensorRecordSize, "tensor record");
static_assert(6 * 8 == kPieceRecordSize, "piece record");
static_assert(3 * 8 == kChunkRecordSize, "chunk record");
static_assert(8 + 4 + 2 + 2 + 8 + 8 == kMetaRecordSize, "metadata record");

// --- Parameters and decoder limits (spec 8).
inline constexpr std::uint32_t kHashXxh3_64 = 1;  // XXH3-64, seed 0
inline constexpr std::uint32_t kMinAlignmentLog2 = 6;
inline constexpr std::uint32_t kMaxAlignmentLog2 = 21;
inline constexpr std::uint32_t kDefaultAlignmentLog2 = 12;
inline constexpr std::uint32_t kMinChunkSizeLog2 = 12;
inline constexpr std::uint32_t kMaxChunkSizeLog2 = 30;
inline constexpr std::uint32_t kDefaultChunkSizeLog2 = 20;
inline constexpr std::uint32_t kMaxRank = 64;
inline constexpr std::uint64_t kMaxNameLength = 65535;
inline constexpr std::uint64_t kMaxIndexLength = std::uint64_t{1} << 32;
inline constexpr std::uint64_t kMaxPiecesPerTensor = 4096;
// Feature bits defined by v1: none. Every bit is reserved and must be zero when written.
inline constexpr std::uint64_t kKnownCompat = 0;
inline constexpr std::uint64_t kKnownRoCompat = 0;
inline constexpr std::uint64_t kKnownIncompat = 0;

// --- Element types (spec 4.1). Codes are stable forever; sizes are bytes per element.
enum class DType : std::uint16_t {
  BOOL = 1, U8 = 2, I8 = 3, U16 = 4, I16 = 5, U32 = 6, I32 = 7, U64 = 8, I64 = 9,
  F16 = 10, BF16 = 11, F32 = 12, F64 = 13, F8_E4M3 = 14, F8_E5M2 = 15, F8_E8M0 = 16, C64 = 17,
};
[[nodiscard]] constexpr EnumBounds<DType> enum_bounds(DType) noexcept { return {DType::BOOL, DType::C64}; }
struct DTypeInfo {
  DType dtype;
  std::string_view name;  // safetensors spelling
  std::uint32_t size;
};
inline constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},       {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2},     {DType::U32, "U32", 4},
    {DType::I32, "I32", 4},   {DType::U64, "U64", 8},     {DType::I64, "I64", 8},
    {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},   {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1}, {DType::C64, "C64", 8},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == enum_count<DType>(), "one entry per dtype code");

[[nodiscard]] constexpr const DTypeInfo* dtype_info(std::uint16_t code) noexcept {
  for (const auto& d : kDTypes)
    if (static_cast<std::uint16_t>(d.dtype) == code) return &d;
  return nullptr;
}
[[nodiscard]] constexpr const DTypeInfo* dtype_info(DType d) noexcept {
  return dtype_info(static_cast<std::uint16_t>(d));
}
[[nodiscard]] constexpr const DTypeInfo* dtype_by_name(std::string_view name) noexcept {
  for (const auto& d : kDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

// --- Typed metadata values (spec 5.6).
enum class ValueType : std::uint16_t { int64 = 1, float64 = 2, boolean = 3, string = 4, bytes = 5 };
[[nodiscard]] constexpr EnumBounds<ValueType> enum_bounds(ValueType) noexcept { return {ValueType::int64, ValueType::bytes}; }

}  // namespace ckpt::format
