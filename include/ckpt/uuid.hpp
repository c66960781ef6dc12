// ckpt: random file identifiers (RFC 9562 version 4), so a footer can never be paired with another file's superblock.
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <random>

#include "index.hpp"

namespace ckpt {

namespace detail {

[[nodiscard]] inline std::mt19937_64 fresh_uuid_engine() {
  std::random_device device;
  std::seed_seq seq{device(), device(), device(), device(), device(), device(), device(), device()};
  return std::mt19937_64(seq);
}

// Bumped in every forked child (pthread_atfork), registered the first time a uuid is drawn.
[[nodiscard]] inline std::uint64_t fork_generation() noexcept {
  static std::atomic<std::uint64_t> generation{0};
  static const int registered = ::pthread_atfork(nullptr, nullptr, [] { generation.fetch_add(1, std::memory_order_relaxed); });
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace detail

// A forked child inherits the engine's state: without a reseed parent and child draw the same uuids,
// and two files then share one. Reseeded after fork (pthread_atfork) and whenever the pid changes
// (a raw clone() runs no fork handlers).
[[nodiscard]] inline Uuid random_uuid() {
  static thread_local std::mt19937_64 engine = detail::fresh_uuid_engine();
  static thread_local pid_t owner = ::getpid();
  static thread_local std::uint64_t generation = detail::fork_generation();
  const pid_t pid = ::getpid();
  const std::uint64_t now = detail::fork_generation();
  if (pid != owner || now != generation) {
    engine = detail::fresh_uuid_engine();
    owner = pid;
    generation = now;
  }
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
