// ckpt: the chunk and structure digest, XXH3-64 with seed 0 (spec/FORMAT.md 2.2).
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace ckpt
