// ckpt: the constants of GGUF, llama.cpp's single-file model format (spec/FOREIGN.md 5): the header
// fields, the metadata value types, and the table of ggml tensor types with their block and type
// sizes. The reader is open_gguf (foreign.hpp); this header is constants only.
//
//   "GGUF" | version u32 | tensor_count u64 | kv_count u64 | kv pairs | tensor infos | padding | data
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../core/enum_name.hpp"
#include "../core/format.hpp"

namespace ckpt::gguf {

inline constexpr std::string_view kMagic = "GGUF";  // bytes 47 47 55 46
inline constexpr std::uint32_t kMinVersion = 2;     // v1 had 32-bit counts and lengths: refused
inline constexpr std::uint32_t kMaxVersion = 3;     // v3 added big-endian files (refused: see 5.1)
inline constexpr std::size_t kHeaderSize = 4 + 4 + 8 + 8;  // magic, version, tensor_count, kv_count
static_assert(kHeaderSize == 24, "fixed header");
inline constexpr std::uint32_t kDefaultAlignment = 32;
inline constexpr std::string_view kAlignmentKey = "general.alignment";
inline constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Decoder limits (spec/FOREIGN.md 5.6).
inline constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{1} << 30;  // kv pairs and tensor infos
inline constexpr std::uint64_t kMaxKvCount = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kMaxTensorCount = std::uint64_t{1} << 20;
inline constexpr std::uint32_t kMaxArrayDepth = 8;                       // nested ARRAY values
inline constexpr std::uint64_t kMaxShownElements = 16;                    // longer arrays are summarised
inline constexpr std::size_t kMaxShownArrayText = 1024;                    // so is an array whose text is longer
inline constexpr std::size_t kMaxShownString = 64 * 1024;                  // and a longer string value

// Metadata value types (gguf_metadata_value_type).
enum class ValueType : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
[[nodiscard]] constexpr EnumBounds<ValueType> enum_bounds(ValueType) noexcept { return {ValueType::u8, ValueType::f64}; }
inline constexpr std::uint32_t kValueTypeCount = static_cast<std::uint32_t>(enum_count<ValueType>());

// The name a value type has in metadata text ("[3 x u32: 1, 2, 3]"); null for an unknown code.
[[nodiscard]] constexpr const char* value_type_name(std::uint32_t type) noexcept {
  return enum_name(static_cast<ValueType>(type),
                   {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}, nullptr);
}
// Bytes of a fixed-size value; 0 for string and array, whose size is in the file.
[[nodiscard]] constexpr std::uint64_t value_fixed_size(std::uint32_t type) noexcept {
  constexpr std::uint8_t sizes[kValueTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return type < kValueTypeCount ? sizes[type] : 0;
}
// The fewest bytes a value of the type takes: what a count is checked against before anything is
// allocated (a string is at least its u64 length, an array its u32 type and u64 count).
[[nodiscard]] constexpr std::uint64_t value_min_size(std::uint32_t type) noexcept {
  if (type == static_cast<std::uint32_t>(ValueType::string)) return 8;
  if (type == static_cast<std::uint32_t>(ValueType::array)) return 12;
  return value_fixed_size(type);
}
inline constexpr std::uint64_t kMinKvSize = 8 + 4 + 1;              // empty key, type, one byte
inline constexpr std::uint64_t kMinTensorInfoSize = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset

// One ggml tensor type: `block` elements of dimension 0 are stored in `size` bytes.
struct TypeInfo {
  std::uint32_t id;
  std::string_view name;  // ggml's name; for the eight plain types also the safetensors spelling
  std::uint32_t block;
  std::uint32_t size;
};

// Every type the gguf Python package knows (GGML_QUANT_SIZES, gguf-py 0.19). Ids 4, 5, 31-33 and
// 36-38 were removed from ggml and are unknown here, as there.
inline constexpr std::uint32_t kQK_K = 256;  // super-block of the K and IQ quantisations
inline constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4},
    {1, "F16", 1, 2},
    {2, "Q4_0", 32, 2 + 16},
    {3, "Q4_1", 32, 2 + 2 + 16},
    {6, "Q5_0", 32, 2 + 4 + 16},
    {7, "Q5_1", 32, 2 + 2 + 4 + 16},
    {8, "Q8_0", 32, 2 + 32},
    {9, "Q8_1", 32, 4 + 4 + 32},
    {10, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4},
    {11, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12},
    {12, "Q4_K", kQK_K, 2 + 2 + kQK_K / 2 + 12},
    {13, "Q5_K", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 8 + 12},
    {14, "Q6_K", kQK_K, 2 + kQK_K / 2 + kQK_K / 4 + kQK_K / 16},
    {15, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8},
    {16, "IQ2_XXS", kQK_K, 2 + kQK_K / 4},
    {17, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32},
    {18, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8},
    {19, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16},
    {20, "IQ4_NL", 32, 2 + 16},
    {21, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4},
    {22, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16},
    {23, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64},
    {24, "I8", 1, 1},
    {25, "I16", 1, 2},
    {26, "I32", 1, 4},
    {27, "I64", 1, 8},
    {28, "F64", 1, 8},
    {29, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32},
    {30, "BF16", 1, 2},
    {34, "TQ1_0", kQK_K, 2 + 4 * 13},
    {35, "TQ2_0", kQK_K, 2 + 64},
    {39, "MXFP4", 32, 1 + 16},
    {40, "NVFP4", 64, 4 + 32},
    {41, "Q1_0", 128, 2 + 16},
};
inline constexpr std::size_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);
static_assert(kTypeCount == 34, "one entry per ggml type gguf-py knows");

// The position of the type with this id in kTypes; kTypeCount for an unknown or removed one. (The
// static_asserts below go through positions, not pointers: GCC's -fsanitize=undefined makes a
// pointer compared with null in a constant expression non-constant.)
[[nodiscard]] constexpr std::size_t type_index(std::uint32_t id) noexcept {
  for (std::size_t i = 0; i < kTypeCount; ++i)
    if (kTypes[i].id == id) return i;
  return kTypeCount;
}
// The type with this id; null for an unknown or removed one.
[[nodiscard]] constexpr const TypeInfo* type_info(std::uint32_t id) noexcept {
  const std::size_t i = type_index(id);
  return i < kTypeCount ? &kTypes[i] : nullptr;
}

// A type ckpt has (spec/FORMAT.md 4.1) is one element per block, under the same name and size.
[[nodiscard]] constexpr bool plain_type_matches_ckpt(std::uint32_t id) noexcept {
  const std::size_t i = type_index(id);
  if (i == kTypeCount || kTypes[i].block != 1) return false;
  for (const auto& d : format::kDTypes)
    if (d.name == kTypes[i].name) return d.size == kTypes[i].size;
  return false;
}
static_assert(plain_type_matches_ckpt(0) && plain_type_matches_ckpt(1) && plain_type_matches_ckpt(24) &&
                  plain_type_matches_ckpt(25) && plain_type_matches_ckpt(26) && plain_type_matches_ckpt(27) &&
                  plain_type_matches_ckpt(28) && plain_type_matches_ckpt(30),
              "F32, F16, I8, I16, I32, I64, F64, BF16 are ckpt's dtypes of the same name and size");
static_assert(kTypes[type_index(8)].block == 32 && kTypes[type_index(8)].size == 34, "Q8_0: 32 int8 and an f16 scale");
static_assert(kTypes[type_index(12)].size == 144 && kTypes[type_index(14)].size == 210, "Q4_K 144, Q6_K 210 bytes per 256");
static_assert(type_index(4) == kTypeCount && type_index(31) == kTypeCount && type_index(36) == kTypeCount, "removed types");

}  // namespace ckpt::gguf
