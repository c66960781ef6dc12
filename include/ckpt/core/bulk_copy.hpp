// ckpt: the copy of a capture into its slot and of a load out of a mapped file: bytes nobody reads
// again soon, so they bypass the caches (spec/TIERS.md 2.1); and the same copy hashing what it copies,
// a verified load in one pass over memory (spec/TIERS.md 7.2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hash.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define CKPT_BULK_COPY_STREAMS 1
#else
#define CKPT_BULK_COPY_STREAMS 0
#endif

namespace ckpt {

// From this size a copy streams. glibc's memcpy streams only above about 3/4 of the last-level cache
// (hundreds of MiB on some servers), so a state of many 16 MiB tensors was copied through the cache:
// 1.7x the time of one large memcpy of the same bytes (docs/performance.md, bulk copy).
inline constexpr std::size_t kBulkCopyMin = std::size_t{1} << 20;

namespace detail {
inline constexpr std::size_t kBulkPage = 4096;    // the interleave: four pages' streams at once
inline constexpr std::size_t kBulkLine = 64;      // one cache line per stream per round
inline constexpr std::size_t kBulkRound = 4 * kBulkPage;
static_assert(kBulkPage % kBulkLine == 0 && kBulkLine % 16 == 0, "a round is whole lines of 16-byte stores");
static_assert(kBulkCopyMin >= 2 * kBulkRound, "a streamed copy has at least one whole round after its head");

// One round of 16 KiB: four pages interleaved, a line of each per step, with non-temporal 16-byte
// stores (SSE2, every x86-64 CPU) as glibc's large copy does, so the destination's lines are never read
// for ownership. d is 16-byte aligned.
inline void stream_round(unsigned char* d, const unsigned char* s) noexcept {
#if CKPT_BULK_COPY_STREAMS
  for (std::size_t line = 0; line < kBulkPage; line += kBulkLine)
    for (std::size_t page = 0; page < 4; ++page) {
      const unsigned char* from = s + page * kBulkPage + line;
      unsigned char* to = d + page * kBulkPage + line;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(to), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), e);
    }
#else
  std::memcpy(d, s, kBulkRound);
#endif
}

// The streamed copy: a head up to the destination's 64-byte line, whole rounds, the tail; `each` sees every
// stretch of the source just after it was copied (while its lines are in L1), in order.
template <class Each>
inline void streamed(unsigned char* d, const unsigned char* s, std::size_t n, Each&& each) noexcept {
  const std::size_t head = (kBulkLine - reinterpret_cast<std::uintptr_t>(d) % kBulkLine) % kBulkLine;
  std::memcpy(d, s, head);
  each(s, head);
  d += head, s += head, n -= head;
  for (std::size_t r = n / kBulkRound; r > 0; --r, d += kBulkRound, s += kBulkRound, n -= kBulkRound) {
    stream_round(d, s);
    each(s, kBulkRound);
  }
#if CKPT_BULK_COPY_STREAMS
  _mm_sfence();  // streamed stores are weakly ordered: visible before anyone is told the bytes are there
#endif
  std::memcpy(d, s, n);
  each(s, n);
}
}  // namespace detail

// memcpy's contract (no overlap). From kBulkCopyMin on x86-64 the streamed copy above; elsewhere memcpy.
inline void bulk_copy(void* dst, const void* src, std::size_t n) noexcept {
  if (CKPT_BULK_COPY_STREAMS && n >= kBulkCopyMin) {
    detail::streamed(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n, [](const unsigned char*, std::size_t) {});
    return;
  }
  std::memcpy(dst, src, n);
}

// bulk_copy that returns the XXH3-64 of the bytes (spec/FORMAT.md 2.2): each 16 KiB round is hashed right
// after it is copied, from the source lines the copy just brought into L1, so a verified load reads memory
// once (1.4x a memcpy here where hashing after the copy took 2.0x: docs/performance.md). The source must not
// change meanwhile (a committed file's mapping); below kBulkCopyMin, memcpy then a hash of the destination.
[[nodiscard]] inline std::uint64_t copy_hashed(void* dst, const void* src, std::size_t n) noexcept {
  if (CKPT_BULK_COPY_STREAMS && n >= kBulkCopyMin) {
    StreamHasher hasher;  // streaming XXH3 gives the one-shot digest (spec/FORMAT.md 2.2)
    detail::streamed(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n,
                     [&hasher](const unsigned char* at, std::size_t len) { hasher.update(at, len); });
    return hasher.digest();
  }
  std::memcpy(dst, src, n);
  return xxh3_64(dst, n);
}

}  // namespace ckpt
