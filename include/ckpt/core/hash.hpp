// ckpt: the chunk and structure digest, XXH3-64 with seed 0 (spec/FORMAT.md 2.2), and XXH3-128, the
// digest of content identity and of the tiers' steps (spec/IDENTITY.md 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config.hpp"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // header-only: the hash is inlined where data is moved, no library to link
#endif
#include <xxhash.h>

namespace ckpt {

[[nodiscard]] inline std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept {
  return XXH3_64bits(data, size);
}

// Streaming XXH3-64: the writer feeds each chunk in pieces as the caller hands data over.
class StreamHasher {
 public:
  StreamHasher() noexcept { reset(); }
  // The state is plain data (XXH3_copyState is a copy of it), so a hasher moves with its writer.
  StreamHasher(const StreamHasher& o) noexcept { XXH3_copyState(&state_, &o.state_); }
  StreamHasher& operator=(const StreamHasher& o) noexcept {
    XXH3_copyState(&state_, &o.state_);
    return *this;
  }
  void reset() noexcept { (void)XXH3_64bits_reset(&state_); }
  void update(const void* data, std::size_t size) noexcept { (void)XXH3_64bits_update(&state_, data, size); }
  [[nodiscard]] std::uint64_t digest() const noexcept { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

inline constexpr std::size_t kDigest128HexLength = 32;  // a Digest128 as lowercase hex

// XXH3-128 (seed 0), high half first: its hex is xxhash's canonical (big-endian) form.
struct Digest128 {
  std::uint64_t high = 0, low = 0;
  bool operator==(const Digest128& o) const noexcept { return high == o.high && low == o.low; }
  bool operator!=(const Digest128& o) const noexcept { return !(*this == o); }
  [[nodiscard]] std::string hex() const;
};
[[nodiscard]] Digest128 xxh3_128(const void* data, std::size_t size) noexcept;
// 32 hex digits, either case, optionally after "ckpt:" (how pins may spell it); nullopt otherwise.
[[nodiscard]] std::optional<Digest128> parse_digest(std::string_view text) noexcept;

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/hash_inl.hpp"
#endif
