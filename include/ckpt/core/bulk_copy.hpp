// ckpt: the copy of a capture into its slot and of a load out of a mapped file: bytes nobody reads
// again soon, so they bypass the caches (spec/TIERS.md 2.1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

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
}  // namespace detail

// memcpy's contract (no overlap). Large copies on x86-64: non-temporal 16-byte stores (SSE2, every
// x86-64 CPU), four pages interleaved as glibc's large copy does, so the destination's lines are never
// read for ownership; a head up to the 64-byte line and the tail go through memcpy. Elsewhere memcpy.
inline void bulk_copy(void* dst, const void* src, std::size_t n) noexcept {
#if CKPT_BULK_COPY_STREAMS
  if (n >= kBulkCopyMin) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    const std::size_t head = (detail::kBulkLine - reinterpret_cast<std::uintptr_t>(d) % detail::kBulkLine) % detail::kBulkLine;
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
    const std::size_t rounds = n / detail::kBulkRound;
    for (std::size_t r = 0; r < rounds; ++r, d += detail::kBulkRound, s += detail::kBulkRound)
      for (std::size_t line = 0; line < detail::kBulkPage; line += detail::kBulkLine)
        for (std::size_t page = 0; page < 4; ++page) {
          const unsigned char* from = s + page * detail::kBulkPage + line;
          unsigned char* to = d + page * detail::kBulkPage + line;
          const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
          const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
          const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
          _mm_stream_si128(reinterpret_cast<__m128i*>(to), a);
          _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), b);
          _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), c);
          _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), e);
        }
    _mm_sfence();  // streamed stores are weakly ordered: visible before anyone is told the bytes are there
    std::memcpy(d, s, n % detail::kBulkRound);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace ckpt
