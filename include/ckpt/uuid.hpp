// ckpt: random file identifiers (RFC 9562 version 4), so a footer can never be paired with another file's superblock.
#pragma once

#include <random>

#include "index.hpp"

namespace ckpt {

[[nodiscard]] inline Uuid random_uuid() {
  static thread_local std::mt19937_64 engine{[] {
    std::random_device device;
    std::seed_seq seq{device(), device(), device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seq);
  }()};
  Uuid u{};
  for (std::size_t i = 0; i < u.size(); i += 8) {
    const std::uint64_t r = engine();
    for (std::size_t k = 0; k < 8; ++k) u[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  u[6] = static_cast<unsigned char>((u[6] & 0x0F) | 0x40);
  u[8] = static_cast<unsigned char>((u[8] & 0x3F) | 0x80);
  return u;
}

}  // namespace ckpt
