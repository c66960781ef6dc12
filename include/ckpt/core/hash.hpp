// ckpt: the chunk and structure digest, XXH3-64 with seed 0 (spec/FORMAT.md 2.2), and XXH3-128, the
// digest of content identity and of the tiers' steps (spec/IDENTITY.md 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "enum_name.hpp"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // header-only: the hash is inlined where data is moved, no library to link
#endif
// Run-time choice of the vector unit (spec/FORMAT.md 2.2.1): on x86-64, xxhash.h's own kernels for SSE2,
// AVX2 and AVX-512 are compiled side by side and one is chosen at run time. On in the compiled library
// (ckpt::compiled, which tools and Python use); a header-only program opts in with CKPT_HASH_DISPATCH=1,
// at about 0.2 s more parse per translation unit (<immintrin.h>). Off under nvcc and where xxhash.h came
// first without the kernels: then the kernel is the one the compiler flags chose (SSE2 by default).
#if !defined(CKPT_HASH_DISPATCH) && defined(CKPT_BUILDING_LIBRARY)
#define CKPT_HASH_DISPATCH 1
#endif
#if defined(CKPT_HASH_DISPATCH) && CKPT_HASH_DISPATCH && !CKPT_DECLARATIONS_ONLY && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(XXHASH_H_5627135585666179)
#undef CKPT_HASH_DISPATCH
#define CKPT_HASH_DISPATCH 1
#define XXH_X86DISPATCH
#define XXH_DISPATCH_AVX2 1
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_SSE2  // x86-64 always has SSE2: no attribute, so nothing stops inlining
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#define XXH_TARGET_AVX512 __attribute__((__target__("avx512f")))
#include <immintrin.h>  // the AVX2 and AVX-512 types the kernels use, whatever the build's flags
#else
#undef CKPT_HASH_DISPATCH
#define CKPT_HASH_DISPATCH 0
#endif
#include <xxhash.h>

namespace ckpt {

// The vector unit XXH3's long inputs (over 240 bytes) run on; every unit gives the same digests.
// `build` is the kernel the compiler flags chose (the only one where run-time choice is unavailable).
enum class HashUnit : std::uint8_t { build, sse2, avx2, avx512 };
[[nodiscard]] constexpr EnumBounds<HashUnit> enum_bounds(HashUnit) noexcept { return {HashUnit::build, HashUnit::avx512}; }
[[nodiscard]] const char* hash_unit_name(HashUnit u) noexcept;

// The units this CPU and build can run, slowest first.
[[nodiscard]] std::vector<HashUnit> hash_units() noexcept;
// The unit in use: CKPT_HASH_UNIT (a hash_unit_name) where this CPU has it, else AVX2 where it has that,
// else SSE2 (spec/FORMAT.md 2.2.1).
[[nodiscard]] HashUnit hash_unit() noexcept;
// Uses u from now on, for tests and benchmarks; false (and no change) where u is not in hash_units().
[[nodiscard]] bool set_hash_unit(HashUnit u) noexcept;

namespace detail {
struct HashKernels {
  HashUnit unit;
  XXH64_hash_t (*long64)(const void*, std::size_t) noexcept;
  XXH128_hash_t (*long128)(const void*, std::size_t) noexcept;
  XXH_errorcode (*update64)(XXH3_state_t*, const void*, std::size_t) noexcept;
};
[[nodiscard]] const HashKernels& hash_kernels() noexcept;
}  // namespace detail

[[nodiscard]] inline std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept {
  // Up to XXH3_MIDSIZE_MAX (240) bytes XXH3 runs no vector kernel: the inline one-shot path.
  return size <= XXH3_MIDSIZE_MAX ? XXH3_64bits(data, size) : detail::hash_kernels().long64(data, size);
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
  void update(const void* data, std::size_t size) noexcept { (void)detail::hash_kernels().update64(&state_, data, size); }
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
