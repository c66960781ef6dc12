// Tests for cuda/xxh3_core.cuh and cuda/hash_launch.cuh, compiled for the host by the C++ compiler.
// The oracle is the system libxxhash (linked, not inlined: this file does not include ckpt/core/hash.hpp),
// so the CUDA core is proven bit-exact on every path without a GPU (spec/GPU.md 2-4).
#include <catch2/catch.hpp>

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "../cuda/hash_launch.cuh"
#include "../cuda/xxh3_core.cuh"

namespace xxh3 = ckpt::gpu::xxh3;
using ckpt::gpu::DeviceChunk;

namespace {

std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The kernel's decomposition spelled out with threads: every 1 KiB block's lane sums computed by
// whichever thread gets it, in no particular order; then the folds, the tail and the merge.
std::uint64_t hash_with_threaded_block_sums(const unsigned char* p, std::uint64_t len, unsigned threads) {
  const std::uint64_t blocks = xxh3::full_blocks(len);
  std::vector<std::uint64_t> sums(blocks * xxh3::kLanes);
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      for (std::uint64_t b = blocks; b-- > 0;) {  // backwards, strided: order must not matter
        if (b % threads != w) continue;
        for (unsigned pair = 0; pair < 4; ++pair) {
          std::uint64_t keys[xxh3::kStripesPerBlock + 1];
          xxh3::pair_keys(pair, keys);
          std::uint64_t even = 0, odd = 0;
          xxh3::block_pair_sum(xxh3::ByteLoad{}, p + b * xxh3::kBlockBytes + 16 * pair, keys, even, odd);
          sums[b * xxh3::kLanes + 2 * pair] = even;
          sums[b * xxh3::kLanes + 2 * pair + 1] = odd;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  std::uint64_t acc[xxh3::kLanes];
  for (unsigned lane = 0; lane < xxh3::kLanes; ++lane) {
    acc[lane] = xxh3::initial_acc(lane);
    for (std::uint64_t b = 0; b < blocks; ++b) acc[lane] = xxh3::fold_block(acc[lane], sums[b * xxh3::kLanes + lane], lane);
    acc[lane] += xxh3::tail_lane_sum(xxh3::ByteLoad{}, p, len, lane, 0, 1);
  }
  return xxh3::merge_accs(acc, len);
}

}  // namespace

TEST_CASE("every length from 0 to 4096 matches libxxhash at shifting alignments", "[cuda_xxh3_core]") {
  const auto data = random_bytes(4096 + 64, 1);
  std::vector<std::uint64_t> round_sums(64 * xxh3::kLanes);
  for (std::size_t len = 0; len <= 4096; ++len) {
    const unsigned char* p = data.data() + (len * 7) % 61;  // every alignment mod 64 comes round
    const std::uint64_t want = XXH3_64bits(p, len);
    INFO("length " << len);
    REQUIRE(xxh3::hash(p, len) == want);
    if (len > xxh3::kMidsizeMax) {
      REQUIRE(xxh3::hash_long_reference(p, len) == want);
      REQUIRE(xxh3::hash_long_decomposed(p, len, 8, 4, round_sums.data()) == want);
      REQUIRE(xxh3::hash_long_decomposed(p, len, 3, 1, round_sums.data()) == want);
    } else {
      REQUIRE(xxh3::hash_short(p, len) == want);
    }
  }
}

TEST_CASE("each short-input boundary matches at all 16 alignments", "[cuda_xxh3_core]") {
  const auto data = random_bytes(2048 + 16, 2);
  for (std::size_t len : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 143, 144,
                          239, 240, 241, 255, 256, 1023, 1024, 1025, 1087, 1088, 1089, 2047, 2048}) {
    for (std::size_t align = 0; align < 16; ++align) {
      INFO("length " << len << " alignment " << align);
      REQUIRE(xxh3::hash(data.data() + align, len) == XXH3_64bits(data.data() + align, len));
    }
  }
}

TEST_CASE("all-zero and all-ones inputs match (no data-dependent shortcut)", "[cuda_xxh3_core]") {
  for (unsigned char fill : {0x00, 0xFF}) {
    const std::vector<unsigned char> data(70000, fill);
    for (std::size_t len : {0, 3, 8, 16, 128, 240, 241, 1024, 4096, 65536, 70000}) {
      INFO("fill " << int(fill) << " length " << len);
      REQUIRE(xxh3::hash(data.data(), len) == XXH3_64bits(data.data(), len));
    }
  }
}

TEST_CASE("large random inputs at random alignments match, whole and decomposed", "[cuda_xxh3_core]") {
  std::mt19937_64 rng(3);
  const auto data = random_bytes((std::size_t{4} << 20) + 64, 4);
  std::vector<std::uint64_t> round_sums(64 * xxh3::kLanes);
  for (int round = 0; round < 6; ++round) {
    const std::size_t len = round == 0 ? (std::size_t{4} << 20) : 241 + rng() % (std::size_t{4} << 20);
    const std::size_t align = round == 0 ? 0 : rng() % 64;
    const unsigned char* p = data.data() + align;
    const std::uint64_t want = XXH3_64bits(p, len);
    INFO("length " << len << " alignment " << align);
    REQUIRE(xxh3::hash(p, len) == want);
    for (unsigned columns : {8u, 16u, 32u, 64u}) REQUIRE(xxh3::hash_long_decomposed(p, len, columns, 4, round_sums.data()) == want);
    REQUIRE(hash_with_threaded_block_sums(p, len, 4) == want);
  }
}

TEST_CASE("a one-bit change anywhere changes the digest", "[cuda_xxh3_core]") {
  auto data = random_bytes(3000, 5);
  const std::uint64_t before = xxh3::hash(data.data(), data.size());
  for (std::size_t at : {std::size_t{0}, std::size_t{1023}, std::size_t{1024}, std::size_t{2935}, std::size_t{2999}}) {
    data[at] ^= 0x10;
    CHECK(xxh3::hash(data.data(), data.size()) != before);
    CHECK(xxh3::hash(data.data(), data.size()) == XXH3_64bits(data.data(), data.size()));
    data[at] ^= 0x10;
  }
}

TEST_CASE("the portable 128-bit multiply equals the native one", "[cuda_xxh3_core]") {
  std::mt19937_64 rng(6);
  const std::uint64_t edges[] = {0, 1, 0xFFFFFFFFu, 0x100000000ull, ~std::uint64_t{0}, 0x8000000000000000ull};
  for (auto a : edges)
    for (auto b : edges) REQUIRE(xxh3::mul128_fold64_portable(a, b) == xxh3::mul128_fold64(a, b));
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t a = rng(), b = rng();
    REQUIRE(xxh3::mul128_fold64_portable(a, b) == xxh3::mul128_fold64(a, b));
  }
}

TEST_CASE("the secret at unaligned offsets is the little-endian byte sequence", "[cuda_xxh3_core]") {
  unsigned char bytes[25 * 8];
  for (unsigned w = 0; w < 25; ++w)
    for (unsigned b = 0; b < 8; ++b) bytes[8 * w + b] = static_cast<unsigned char>(xxh3::kSecretWords[w] >> (8 * b));
  for (unsigned off = 0; off <= 184; ++off) REQUIRE(xxh3::secret_at(off) == xxh3::read_le64(bytes + off));
}

TEST_CASE("a whole chunk table hashes as libxxhash does, on every grid shape", "[cuda_xxh3_core]") {
  std::mt19937_64 rng(7);
  const auto data = random_bytes(std::size_t{1} << 20, 8);
  std::vector<DeviceChunk> chunks;
  for (std::size_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 65536}) chunks.push_back({data.data() + 5, len});
  while (chunks.size() < 1200) {
    const int kind = static_cast<int>(rng() % 8);
    const std::uint64_t len = kind < 3 ? rng() % 241 : kind < 6 ? 241 + rng() % 4000 : kind == 6 ? rng() % 70000 : rng() % (std::uint64_t{1} << 18);
    const std::size_t at = static_cast<std::size_t>(rng() % (data.size() - len + 1));
    chunks.push_back({data.data() + at, len});
  }
  std::vector<std::uint64_t> want(chunks.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) want[i] = XXH3_64bits(chunks[i].data, chunks[i].length);

  // Every thread block size the kernel can be launched with, over the planner's order.
  for (unsigned threads : {32u, 64u, 128u, 256u}) {
    for (std::size_t count : {std::size_t{15}, std::size_t{300}, chunks.size()}) {
      INFO(threads << " threads per block, " << count << " chunks");
      const auto plan = ckpt::gpu::plan_hash(chunks.data(), count, 132);
      REQUIRE(plan.order.size() == count);
      std::vector<std::uint32_t> seen(plan.order);
      std::sort(seen.begin(), seen.end());
      for (std::size_t i = 0; i < count; ++i) REQUIRE(seen[i] == i);  // a permutation
      for (std::uint32_t i = 0; i < plan.long_count; ++i) REQUIRE(chunks[plan.order[i]].length > xxh3::kMidsizeMax);
      for (std::size_t i = plan.long_count; i < count; ++i) REQUIRE(chunks[plan.order[i]].length <= xxh3::kMidsizeMax);
      for (std::uint32_t i = 1; i < plan.long_count; ++i) REQUIRE(chunks[plan.order[i - 1]].length >= chunks[plan.order[i]].length);
      REQUIRE(plan.blocks == plan.long_count + (count - plan.long_count + plan.threads - 1) / plan.threads);

      std::vector<std::uint64_t> digests(count, 0), expected(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(count));
      for (std::size_t i = 0; i < count; i += 97) expected[i] ^= 1;  // these must be reported
      std::uint32_t mismatch_count = 0;
      std::vector<std::uint32_t> mismatches(count);
      ckpt::gpu::HashLaunch launch;
      launch.chunks = chunks.data();
      launch.order = plan.order.data();
      launch.long_count = plan.long_count;
      launch.count = static_cast<std::uint32_t>(count);
      launch.digests = digests.data();
      launch.expected = expected.data();
      launch.mismatch_count = &mismatch_count;
      launch.mismatches = mismatches.data();
      launch.threads = threads;
      launch.blocks = static_cast<std::uint32_t>(plan.long_count + (count - plan.long_count + threads - 1) / threads);
      launch.shared_bytes = ckpt::gpu::launch_shared_bytes(threads);
      ckpt::gpu::run_hash_launch_on_host(launch);
      for (std::size_t i = 0; i < count; ++i) REQUIRE(digests[i] == want[i]);
      mismatches.resize(mismatch_count);
      std::sort(mismatches.begin(), mismatches.end());
      std::vector<std::uint32_t> flipped;
      for (std::size_t i = 0; i < count; i += 97) flipped.push_back(static_cast<std::uint32_t>(i));
      REQUIRE(mismatches == flipped);
    }
  }
}

TEST_CASE("the planner gives few long chunks bigger thread blocks and many chunks small ones", "[cuda_xxh3_core]") {
  std::vector<unsigned char> dummy(1);
  auto plan_for = [&](std::size_t count, std::uint64_t len, unsigned sms) {
    std::vector<DeviceChunk> chunks(count, DeviceChunk{dummy.data(), len});
    return ckpt::gpu::plan_hash(chunks.data(), chunks.size(), sms);
  };
  CHECK(plan_for(4096, std::uint64_t{1} << 20, 132).threads == 32);   // 4 GiB in 1 MiB chunks: one warp each
  CHECK(plan_for(64, std::uint64_t{1} << 20, 132).threads == 256);    // one 64 MiB staging block
  CHECK(plan_for(1000, std::uint64_t{1} << 20, 132).threads == 128);
  CHECK(plan_for(2000, std::uint64_t{1} << 20, 132).threads == 64);
  CHECK(plan_for(4, std::uint64_t{1} << 30, 132).threads == 256);     // a few huge chunks
  CHECK(plan_for(64, 4096, 132).threads == 32);                       // 3 blocks each: more warps are idle
  {  // thousands of 64 KiB chunks and one of 8 MiB: the big one would finish last with one warp
    std::vector<DeviceChunk> chunks(5000, DeviceChunk{dummy.data(), std::uint64_t{64} << 10});
    chunks.push_back(DeviceChunk{dummy.data(), std::uint64_t{8} << 20});
    CHECK(ckpt::gpu::plan_hash(chunks.data(), chunks.size(), 132).threads > 32);
    CHECK(ckpt::gpu::plan_hash(chunks.data(), chunks.size(), 132).order.front() == 5000);  // longest first
  }
  const auto tiny = plan_for(1000, 100, 132);
  CHECK(tiny.long_count == 0);
  CHECK(tiny.blocks == (1000 + tiny.threads - 1) / tiny.threads);
  CHECK(plan_for(0, 0, 132).blocks == 0);
}
