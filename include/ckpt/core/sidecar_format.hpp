// ckpt: the on-disk constants of a sidecar file (spec/IDENTITY.md 4.3), apart from sidecar.hpp so that
// format detection (foreign.hpp) can read a sidecar's header without the include cycle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ckpt {

namespace sidecar {
inline constexpr unsigned char kMagic[8] = {'C', 'K', 'P', 'T', 'S', 'U', 'M', 'S'};
inline constexpr unsigned char kEndMagic[8] = {'C', 'K', 'P', 'T', 'S', 'E', 'N', 'D'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 64;
namespace hd {
inline constexpr std::size_t kMagic = 0;          // 8 bytes
inline constexpr std::size_t kVersion = 8;        // u32
inline constexpr std::size_t kFormat = 12;        // u32, ForeignFormat
inline constexpr std::size_t kChunkSizeLog2 = 16; // u32
inline constexpr std::size_t kReserved = 20;      // u32, 0
inline constexpr std::size_t kFileCount = 24;     // u64
inline constexpr std::size_t kTensorCount = 32;   // u64
inline constexpr std::size_t kMetaCount = 40;     // u64
inline constexpr std::size_t kRoot = 48;          // 16 bytes: root digest, high then low, each u64
}  // namespace hd
static_assert(hd::kRoot + 16 == kHeaderSize, "sidecar header size");
inline constexpr std::size_t kTrailerSize = 16;  // digest u64, end magic
inline constexpr std::string_view kSuffix = ".ckptsum";
// Decoder limit: at 1 MiB chunks a 256 MiB sidecar describes 32 TiB of checkpoint.
inline constexpr std::uint64_t kMaxSize = std::uint64_t{256} << 20;
inline constexpr std::uint32_t kMinChunkSizeLog2 = 12, kMaxChunkSizeLog2 = 30;
}  // namespace sidecar

}  // namespace ckpt
