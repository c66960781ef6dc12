// ckpt cuda: XXH3-64 (seed 0, default secret), written once as __host__ __device__ code (spec/GPU.md 2).
//
// nvcc compiles it into the kernels; a plain C++ compiler compiles it for the host test, which proves it
// bit-exact against libxxhash. Inputs over 240 bytes are hashed as the batched kernel does it: per 1 KiB
// block, a sum of stripe contributions that does not depend on the accumulators (computed in parallel),
// then one serial, lane-wise fold per block (spec/GPU.md 3). Data is read byte by byte, little-endian, so
// no load is ever misaligned; the kernels bring their own wide loaders for aligned chunks.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define CKPT_HD __host__ __device__ __forceinline__
#else
#define CKPT_HD inline
#endif

namespace ckpt::gpu::xxh3 {

using u8 = unsigned char;
using u32 = std::uint32_t;
using u64 = std::uint64_t;

inline constexpr u64 kStripeBytes = 64;     // one accumulate step: 8 lanes of 8 bytes
inline constexpr u64 kBlockBytes = 1024;    // 16 stripes, then one scramble
inline constexpr unsigned kStripesPerBlock = 16;
inline constexpr unsigned kLanes = 8;
inline constexpr u64 kMidsizeMax = 240;     // longer inputs take the block loop
inline constexpr unsigned kScrambleWord = 16;   // scramble key: secret bytes [128, 192)
inline constexpr unsigned kLastStripeKey = 121; // last stripe key: secret + 192 - 64 - 7
inline constexpr unsigned kMergeKey = 11;       // merge keys: secret + 11

inline constexpr u32 kPrime32_1 = 0x9E3779B1U;
inline constexpr u32 kPrime32_2 = 0x85EBCA77U;
inline constexpr u32 kPrime32_3 = 0xC2B2AE3DU;
inline constexpr u64 kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr u64 kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr u64 kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr u64 kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr u64 kPrime64_5 = 0x27D4EB2F165667C5ULL;
inline constexpr u64 kPrimeMx1 = 0x165667919E3779F9ULL;
inline constexpr u64 kPrimeMx2 = 0x9FB21C651E98DF25ULL;

// The 192-byte default secret as 24 little-endian words, plus one zero word so that 8 bytes can be
// assembled at any byte offset up to 184 without a bounds test.
#define CKPT_XXH3_SECRET_WORDS                                                                 \
  0xbe4ba423396cfeb8ULL, 0x1cad21f72c81017cULL, 0xdb979083e96dd4deULL, 0x1f67b3b7a4a44072ULL, \
      0x78e5c0cc4ee679cbULL, 0x2172ffcc7dd05a82ULL, 0x8e2443f7744608b8ULL, 0x4c263a81e69035e0ULL, \
      0xcb00c391bb52283cULL, 0xa32e531b8b65d088ULL, 0x4ef90da297486471ULL, 0xd8acdea946ef1938ULL, \
      0x3f349ce33f76faa8ULL, 0x1d4f0bc7c7bbdcf9ULL, 0x3159b4cd4be0518aULL, 0x647378d9c97e9fc8ULL, \
      0xc3ebd33483acc5eaULL, 0xeb6313faffa081c5ULL, 0x49daf0b751dd0d17ULL, 0x9e68d429265516d3ULL, \
      0xfca1477d58be162bULL, 0xce31d07ad1b8f88fULL, 0x280416958f3acb45ULL, 0x7e404bbbcafbd7afULL, 0ULL

inline constexpr u64 kSecretWords[25] = {CKPT_XXH3_SECRET_WORDS};
#if defined(__CUDACC__)
// Device copy of the same words: device code may not index a host constexpr array at run time.
static __constant__ u64 device_secret_words[25] = {CKPT_XXH3_SECRET_WORDS};
#endif

// Secret word `index` (bytes [8 * index, 8 * index + 8)), index <= 24.
CKPT_HD u64 secret_word(unsigned index) {
#if defined(__CUDA_ARCH__)
  return device_secret_words[index];
#else
  return kSecretWords[index];
#endif
}
// 8 secret bytes starting at any byte offset <= 184, little-endian.
CKPT_HD u64 secret_at(unsigned offset) {
  const unsigned word = offset >> 3, shift = (offset & 7u) * 8u;
  if (shift == 0) return secret_word(word);
  return (secret_word(word) >> shift) | (secret_word(word + 1) << (64u - shift));
}

// Little-endian reads of any alignment; compilers merge them into one load where that is legal.
CKPT_HD u64 read_le64(const u8* p) {
  u64 v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
CKPT_HD u32 read_le32(const u8* p) {
  return static_cast<u32>(p[0]) | (static_cast<u32>(p[1]) << 8) | (static_cast<u32>(p[2]) << 16) |
         (static_cast<u32>(p[3]) << 24);
}

CKPT_HD u64 rotl64(u64 v, unsigned r) { return (v << r) | (v >> (64u - r)); }
CKPT_HD u64 swap64(u64 v) {
  u64 r = 0;
  for (int i = 0; i < 8; ++i, v >>= 8) r = (r << 8) | (v & 0xFFu);
  return r;
}
// The low and high 32 bits multiplied: the per-lane product of the stripe step.
CKPT_HD u64 mul32x32(u64 v) { return static_cast<u64>(static_cast<u32>(v)) * (v >> 32); }
// 64x64 -> 128 multiply, halves xor-ed, without a 128-bit type (checked against it in the host test).
CKPT_HD u64 mul128_fold64_portable(u64 a, u64 b) {
  const u64 a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
  const u64 lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const u64 cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
  const u64 upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
  const u64 lower = (cross << 32) | (lo_lo & 0xFFFFFFFFu);
  return lower ^ upper;
}
CKPT_HD u64 mul128_fold64(u64 a, u64 b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#elif defined(__SIZEOF_INT128__)
  __extension__ typedef unsigned __int128 u128;
  const u128 product = static_cast<u128>(a) * b;
  return static_cast<u64>(product) ^ static_cast<u64>(product >> 64);
#else
  return mul128_fold64_portable(a, b);
#endif
}

CKPT_HD u64 xxh64_avalanche(u64 h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  return h ^ (h >> 32);
}
CKPT_HD u64 avalanche(u64 h) {
  h ^= h >> 37;
  h *= kPrimeMx1;
  return h ^ (h >> 32);
}
CKPT_HD u64 rrmxmx(u64 h, u64 len) {
  h ^= rotl64(h, 49) ^ rotl64(h, 24);
  h *= kPrimeMx2;
  h ^= (h >> 35) + len;
  h *= kPrimeMx2;
  return h ^ (h >> 28);
}
CKPT_HD u64 mix16(const u8* p, unsigned secret_offset) {
  return mul128_fold64(read_le64(p) ^ secret_at(secret_offset), read_le64(p + 8) ^ secret_at(secret_offset + 8));
}

// --- Inputs of 0 to 240 bytes: one thread, a fixed number of steps.
CKPT_HD u64 hash_0to16(const u8* p, u64 len) {
  if (len > 8) {
    const u64 lo = read_le64(p) ^ (secret_at(24) ^ secret_at(32));
    const u64 hi = read_le64(p + len - 8) ^ (secret_at(40) ^ secret_at(48));
    return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
  }
  if (len >= 4) {
    const u64 first = read_le32(p), last = read_le32(p + len - 4);
    const u64 keyed = (last + (first << 32)) ^ (secret_at(8) ^ secret_at(16));
    return rrmxmx(keyed, len);
  }
  if (len > 0) {
    const u32 combined = (static_cast<u32>(p[0]) << 16) | (static_cast<u32>(p[len >> 1]) << 24) |
                         static_cast<u32>(p[len - 1]) | (static_cast<u32>(len) << 8);
    const u64 flip = static_cast<u32>(secret_at(0)) ^ static_cast<u32>(secret_at(4));
    return xxh64_avalanche(combined ^ flip);
  }
  return xxh64_avalanche(secret_at(56) ^ secret_at(64));
}
CKPT_HD u64 hash_17to128(const u8* p, u64 len) {
  u64 acc = len * kPrime64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) acc += mix16(p + 48, 96) + mix16(p + len - 64, 112);
      acc += mix16(p + 32, 64) + mix16(p + len - 48, 80);
    }
    acc += mix16(p + 16, 32) + mix16(p + len - 32, 48);
  }
  acc += mix16(p, 0) + mix16(p + len - 16, 16);
  return avalanche(acc);
}
CKPT_HD u64 hash_129to240(const u8* p, u64 len) {
  u64 acc = len * kPrime64_1;
  for (unsigned i = 0; i < 8; ++i) acc += mix16(p + 16 * i, 16 * i);
  acc = avalanche(acc);
  const unsigned rounds = static_cast<unsigned>(len / 16);
  for (unsigned i = 8; i < rounds; ++i) acc += mix16(p + 16 * i, 16 * (i - 8) + 3);
  acc += mix16(p + len - 16, 136 - 17);  // last 16 bytes against secret + 119
  return avalanche(acc);
}
CKPT_HD u64 hash_short(const u8* p, u64 len) {
  if (len <= 16) return hash_0to16(p, len);
  if (len <= 128) return hash_17to128(p, len);
  return hash_129to240(p, len);
}

// --- Inputs over 240 bytes: 8 accumulator lanes, 1 KiB blocks (spec/GPU.md 3).
CKPT_HD u64 initial_acc(unsigned lane) {
  switch (lane) {
    case 0: return kPrime32_3;
    case 1: return kPrime64_1;
    case 2: return kPrime64_2;
    case 3: return kPrime64_3;
    case 4: return kPrime64_4;
    case 5: return kPrime32_2;
    case 6: return kPrime64_5;
    default: return kPrime32_1;
  }
}
// Contribution of one stripe to lane i: the neighbour's data word plus the keyed product of its own.
CKPT_HD u64 lane_contribution(u64 own_word, u64 neighbour_word, u64 key) {
  return neighbour_word + mul32x32(own_word ^ key);
}
// A 16-byte slice (words 2p and 2p+1) of a stripe feeds exactly lanes 2p and 2p+1.
CKPT_HD void accumulate_pair(u64& sum_even, u64& sum_odd, u64 word_even, u64 word_odd, u64 key_even, u64 key_odd) {
  sum_even += lane_contribution(word_even, word_odd, key_even);
  sum_odd += lane_contribution(word_odd, word_even, key_odd);
}
// Stripe s of a block uses key bytes [8s, 8s + 64): lane pair p needs words s + 2p and s + 2p + 1.
CKPT_HD void pair_keys(unsigned pair, u64 (&keys)[kStripesPerBlock + 1]) {
  for (unsigned j = 0; j <= kStripesPerBlock; ++j) keys[j] = secret_word(2 * pair + j);
}
// The sum over the 16 stripes of one block for lane pair p: independent of the accumulators, so all
// blocks of an input can be summed at once. `slice` is block + 16p; load(q, even, odd) reads 16 bytes.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Load>
CKPT_HD void block_pair_sum(const Load& load, const u8* slice, const u64 (&keys)[kStripesPerBlock + 1], u64& sum_even,
                            u64& sum_odd) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (unsigned s = 0; s < kStripesPerBlock; ++s) {
    u64 even, odd;
    load(slice + s * kStripeBytes, even, odd);
    accumulate_pair(sum_even, sum_odd, even, odd, keys[s], keys[s + 1]);
  }
}
// End of a block for one lane: add the block's sum, then scramble (xorshift 47, key, multiply).
CKPT_HD u64 fold_block(u64 acc, u64 block_sum, unsigned lane) {
  acc += block_sum;
  acc ^= acc >> 47;
  acc ^= secret_word(kScrambleWord + lane);
  return acc * kPrime32_1;
}
// Blocks that end with a scramble: all but the last (possibly full) 1 KiB of the input.
CKPT_HD u64 full_blocks(u64 len) { return (len - 1) / kBlockBytes; }
// The rest of the input for one lane, summed over stripes first, first + step, ... of the partial last
// block, plus (for first == 0) the final 64 bytes against secret + 121. No scramble follows.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class LoadWord>
CKPT_HD u64 tail_lane_sum(const LoadWord& load_word, const u8* input, u64 len, unsigned lane, unsigned first,
                          unsigned step) {
  const u64 block_start = full_blocks(len) * kBlockBytes;
  const unsigned stripes = static_cast<unsigned>(((len - 1) - block_start) / kStripeBytes);
  const u8* block = input + block_start;
  u64 sum = 0;
  for (unsigned s = first; s < stripes; s += step) {
    const u8* stripe = block + s * kStripeBytes;
    sum += lane_contribution(load_word(stripe + 8 * lane), load_word(stripe + 8 * (lane ^ 1u)), secret_word(s + lane));
  }
  if (first == 0) {
    const u8* last = input + len - kStripeBytes;
    sum += lane_contribution(read_le64(last + 8 * lane), read_le64(last + 8 * (lane ^ 1u)),
                             secret_at(kLastStripeKey + 8 * lane));
  }
  return sum;
}
CKPT_HD u64 merge_accs(const u64 (&acc)[kLanes], u64 len) {
  u64 result = len * kPrime64_1;
  for (unsigned i = 0; i < 4; ++i)
    result += mul128_fold64(acc[2 * i] ^ secret_at(kMergeKey + 16 * i), acc[2 * i + 1] ^ secret_at(kMergeKey + 16 * i + 8));
  return avalanche(result);
}

struct ByteLoad {
  CKPT_HD void operator()(const u8* p, u64& even, u64& odd) const {
    even = read_le64(p);
    odd = read_le64(p + 8);
  }
  CKPT_HD u64 operator()(const u8* p) const { return read_le64(p); }
};

// Straight transcription of the long loop, stripe by stripe: the reference the decomposition must match.
CKPT_HD u64 hash_long_reference(const u8* p, u64 len) {
  u64 acc[kLanes];
  for (unsigned i = 0; i < kLanes; ++i) acc[i] = initial_acc(i);
  const u64 blocks = full_blocks(len);
  auto stripe = [&acc](const u8* q, unsigned key_offset) {
    for (unsigned i = 0; i < kLanes; ++i) {
      const u64 word = read_le64(q + 8 * i);
      acc[i ^ 1u] += word;
      acc[i] += mul32x32(word ^ secret_at(key_offset + 8 * i));
    }
  };
  for (u64 b = 0; b < blocks; ++b) {
    for (unsigned s = 0; s < kStripesPerBlock; ++s) stripe(p + b * kBlockBytes + s * kStripeBytes, 8 * s);
    for (unsigned i = 0; i < kLanes; ++i) acc[i] = fold_block(acc[i], 0, i);
  }
  const u64 rest = ((len - 1) - blocks * kBlockBytes) / kStripeBytes;
  for (unsigned s = 0; s < rest; ++s) stripe(p + blocks * kBlockBytes + s * kStripeBytes, 8 * s);
  stripe(p + len - kStripeBytes, kLastStripeKey);
  return merge_accs(acc, len);
}

// The kernel's algorithm, run by one host thread: `columns` blocks are summed per round (in reverse
// order here, to show the sums are order-free), then folded in order; the tail is split into `tail_split`
// stripe subsets per lane as the kernel's first warp splits it. Equals hash_long_reference.
CKPT_HD u64 hash_long_decomposed(const u8* p, u64 len, unsigned columns, unsigned tail_split, u64* round_sums) {
  u64 acc[kLanes];
  for (unsigned i = 0; i < kLanes; ++i) acc[i] = initial_acc(i);
  const u64 blocks = full_blocks(len);
  for (u64 first = 0; first < blocks; first += columns) {
    const u64 in_round = blocks - first < columns ? blocks - first : columns;
    for (u64 c = in_round; c-- > 0;) {
      for (unsigned pair = 0; pair < 4; ++pair) {
        u64 keys[kStripesPerBlock + 1];
        pair_keys(pair, keys);
        u64 even = 0, odd = 0;
        block_pair_sum(ByteLoad{}, p + (first + c) * kBlockBytes + 16 * pair, keys, even, odd);
        round_sums[c * kLanes + 2 * pair] = even;
        round_sums[c * kLanes + 2 * pair + 1] = odd;
      }
    }
    for (unsigned lane = 0; lane < kLanes; ++lane)
      for (u64 c = 0; c < in_round; ++c) acc[lane] = fold_block(acc[lane], round_sums[c * kLanes + lane], lane);
  }
  for (unsigned lane = 0; lane < kLanes; ++lane)
    for (unsigned part = tail_split; part-- > 0;) acc[lane] += tail_lane_sum(ByteLoad{}, p, len, lane, part, tail_split);
  return merge_accs(acc, len);
}

// XXH3_64bits(data, len) with seed 0 and the default secret.
CKPT_HD u64 hash(const void* data, u64 len) {
  const u8* p = static_cast<const u8*>(data);
  return len <= kMidsizeMax ? hash_short(p, len) : hash_long_reference(p, len);
}

}  // namespace ckpt::gpu::xxh3
