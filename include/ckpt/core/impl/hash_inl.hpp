// ckpt: definitions of core/hash.hpp.
#pragma once

#include <cstdio>

#include "../hash.hpp"

namespace ckpt {

CKPT_INLINE std::string Digest128::hex() const {
  char buf[kDigest128HexLength + 1];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high), static_cast<unsigned long long>(low));
  return std::string(buf, kDigest128HexLength);
}

CKPT_INLINE Digest128 xxh3_128(const void* data, std::size_t size) noexcept {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return Digest128{h.high64, h.low64};
}

CKPT_INLINE std::optional<Digest128> parse_digest(std::string_view text) noexcept {
  if (text.size() > 5 && text.substr(0, 5) == "ckpt:") text.remove_prefix(5);
  if (text.size() != kDigest128HexLength) return std::nullopt;
  Digest128 d;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    unsigned v = 0;
    if (c >= '0' && c <= '9') v = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') v = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v = static_cast<unsigned>(c - 'A' + 10);
    else return std::nullopt;
    std::uint64_t& half = i < 16 ? d.high : d.low;
    half = (half << 4) | v;
  }
  return d;
}

}  // namespace ckpt
