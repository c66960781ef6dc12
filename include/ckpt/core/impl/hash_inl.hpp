// ckpt: definitions of core/hash.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "../hash.hpp"

namespace ckpt {

namespace detail {

// Each unit's long-input kernels: xxhash.h's own accumulate and scramble kernels inlined into
// functions compiled for that unit (spec/FORMAT.md 2.2.1).
#if CKPT_HASH_DISPATCH
// A kernel leaves the upper vector registers clean (vzeroupper): GCC does not add it to these target
// functions, and SSE code run after a dirty AVX-512 state ran 4.5x slower on AMD EPYC (Zen 4) here.
#define CKPT_HASH_KERNELS(unit, target, clean)                                                                \
  target inline XXH64_hash_t long64_##unit(const void* p, std::size_t n) noexcept {                            \
    const auto h = XXH3_hashLong_64b_internal(p, n, XXH3_kSecret, sizeof(XXH3_kSecret), XXH3_accumulate_512_##unit, \
                                              XXH3_scrambleAcc_##unit);                                       \
    return clean, h;                                                                                          \
  }                                                                                                           \
  target inline XXH128_hash_t long128_##unit(const void* p, std::size_t n) noexcept {                          \
    const auto h = XXH3_hashLong_128b_internal(p, n, XXH3_kSecret, sizeof(XXH3_kSecret), XXH3_accumulate_512_##unit, XXH3_scrambleAcc_##unit); \
    return clean, h;                                                                                          \
  }                                                                                                           \
  target inline XXH_errorcode update64_##unit(XXH3_state_t* s, const void* p, std::size_t n) noexcept {       \
    const auto e = XXH3_update(s, static_cast<const xxh_u8*>(p), n, XXH3_accumulate_512_##unit, XXH3_scrambleAcc_##unit); \
    return clean, e;                                                                                          \
  }
// GCC 12 warns of an uninitialized variable inside its own AVX-512 intrinsics (_mm512_undefined, GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
CKPT_HASH_KERNELS(sse2, XXH_TARGET_SSE2, (void)0)
CKPT_HASH_KERNELS(avx2, XXH_TARGET_AVX2, _mm256_zeroupper())
CKPT_HASH_KERNELS(avx512, XXH_TARGET_AVX512, _mm256_zeroupper())
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef CKPT_HASH_KERNELS
#endif

inline XXH64_hash_t long64_build(const void* p, std::size_t n) noexcept { return XXH3_64bits(p, n); }
inline XXH128_hash_t long128_build(const void* p, std::size_t n) noexcept { return XXH3_128bits(p, n); }
inline XXH_errorcode update64_build(XXH3_state_t* s, const void* p, std::size_t n) noexcept {
  return XXH3_64bits_update(s, p, n);
}

inline const HashKernels& kernels_of(HashUnit u) noexcept {
#if CKPT_HASH_DISPATCH
  static const HashKernels sse2{HashUnit::sse2, long64_sse2, long128_sse2, update64_sse2};
  static const HashKernels avx2{HashUnit::avx2, long64_avx2, long128_avx2, update64_avx2};
  static const HashKernels avx512{HashUnit::avx512, long64_avx512, long128_avx512, update64_avx512};
  if (u == HashUnit::sse2) return sse2;
  if (u == HashUnit::avx2) return avx2;
  if (u == HashUnit::avx512) return avx512;
#endif
  (void)u;
  static const HashKernels build{HashUnit::build, long64_build, long128_build, update64_build};
  return build;
}

// The default unit: AVX2 where the CPU has it, else SSE2; AVX-512 only when asked for (CKPT_HASH_UNIT or
// set_hash_unit): here it gained nothing on 1 MiB chunks and lost badly on one long input (spec/FORMAT.md 2.2.1).
inline HashUnit default_hash_unit() noexcept {
  const std::vector<HashUnit> units = hash_units();
  if (const char* asked = std::getenv("CKPT_HASH_UNIT")) {
    for (const HashUnit u : units)
      if (std::string_view(asked) == hash_unit_name(u)) return u;
  }
  for (const HashUnit u : units)
    if (u == HashUnit::avx2) return u;
  return units.front();
}

// The kernels in use, one pointer: the unit is theirs (HashKernels::unit), so the two never disagree.
inline std::atomic<const HashKernels*>& chosen_kernels() noexcept {
  static std::atomic<const HashKernels*> chosen{nullptr};
  return chosen;
}

CKPT_INLINE const HashKernels& hash_kernels() noexcept {
  const HashKernels* k = chosen_kernels().load(std::memory_order_acquire);
  if (k != nullptr) return *k;
  // First use: the default, unless set_hash_unit chose first (then its choice stays).
  const HashKernels* none = nullptr;
  const HashKernels* fallback = &kernels_of(default_hash_unit());
  chosen_kernels().compare_exchange_strong(none, fallback, std::memory_order_acq_rel);
  return *chosen_kernels().load(std::memory_order_acquire);
}

}  // namespace detail

CKPT_INLINE const char* hash_unit_name(HashUnit u) noexcept { return enum_name(u, {"build", "sse2", "avx2", "avx512"}); }

CKPT_INLINE std::vector<HashUnit> hash_units() noexcept {
#if CKPT_HASH_DISPATCH
  std::vector<HashUnit> units{HashUnit::sse2};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) units.push_back(HashUnit::avx2);
  if (__builtin_cpu_supports("avx512f")) units.push_back(HashUnit::avx512);
  return units;
#else
  return {HashUnit::build};
#endif
}

CKPT_INLINE HashUnit hash_unit() noexcept { return detail::hash_kernels().unit; }

CKPT_INLINE bool set_hash_unit(HashUnit u) noexcept {
  const std::vector<HashUnit> units = hash_units();
  if (std::find(units.begin(), units.end(), u) == units.end()) return false;
  detail::chosen_kernels().store(&detail::kernels_of(u), std::memory_order_release);
  return true;
}

CKPT_INLINE std::string Digest128::hex() const {
  char buf[kDigest128HexLength + 1];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high), static_cast<unsigned long long>(low));
  return std::string(buf, kDigest128HexLength);
}

CKPT_INLINE Digest128 xxh3_128(const void* data, std::size_t size) noexcept {
  const XXH128_hash_t h = size <= XXH3_MIDSIZE_MAX ? XXH3_128bits(data, size) : detail::hash_kernels().long128(data, size);
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
