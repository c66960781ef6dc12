// Tests for include/ckpt/core/hash.hpp: the XXH3 digests are the same on every vector unit this CPU
// runs (spec/FORMAT.md 2.2.1), one-shot, streamed in any pieces, 64 and 128 bits, against xxhash's own
// portable entry points; the golden vectors (test_golden) and the Python xxhash oracle pin the values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ckpt/core/hash.hpp>

using namespace ckpt;

namespace {

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  return v;
}

// Lengths of every class: short (no vector kernel), one stripe, one block, blocks and a partial stripe.
const std::size_t kLengths[] = {0,    1,    16,   17,   128,  129,  240,   241,   255,       256,
                                1023, 1024, 1025, 4096, 5000, 65543, 1 << 20, (1 << 20) + 13};

// Restores the unit in use after a test that chose others.
struct UnitGuard {
  HashUnit saved = hash_unit();
  ~UnitGuard() { (void)set_hash_unit(saved); }
};

}  // namespace

TEST_CASE("the unit in use is one this CPU runs, and a unit it cannot run is refused", "[hash]") {
  const std::vector<HashUnit> units = hash_units();
  REQUIRE(!units.empty());
  CHECK(std::find(units.begin(), units.end(), hash_unit()) != units.end());
  UnitGuard guard;
  for (const HashUnit u : {HashUnit::build, HashUnit::sse2, HashUnit::avx2, HashUnit::avx512}) {
    const bool runs = std::find(units.begin(), units.end(), u) != units.end();
    INFO(hash_unit_name(u));
    CHECK(set_hash_unit(u) == runs);
    if (runs) CHECK(hash_unit() == u);
  }
#if defined(__x86_64__) && defined(CKPT_SEPARATE_COMPILATION)
  CHECK(units.front() == HashUnit::sse2);  // the compiled library chooses at run time; every x86-64 CPU has SSE2
#endif
}

TEST_CASE("every unit gives xxhash's digests, one-shot and streamed in any pieces", "[hash]") {
  UnitGuard guard;
  CHECK(xxh3_64("", 0) == 0x2D06800538D394C2ull);  // published by the XXH3 authors
  for (const std::size_t n : kLengths) {
    const std::vector<unsigned char> data = pattern(n, static_cast<unsigned>(n));
    const std::uint64_t want64 = XXH3_64bits(data.data(), n);  // xxhash's entry point, the build's kernel
    const XXH128_hash_t want128 = XXH3_128bits(data.data(), n);
    for (const HashUnit u : hash_units()) {
      REQUIRE(set_hash_unit(u));
      INFO(hash_unit_name(u) << ", " << n << " bytes");
      CHECK(xxh3_64(data.data(), n) == want64);
      const Digest128 d = xxh3_128(data.data(), n);
      CHECK(d.high == want128.high64);
      CHECK(d.low == want128.low64);
      for (const std::size_t piece : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{1000}, std::size_t{65536}}) {
        StreamHasher h;
        for (std::size_t at = 0; at < n; at += piece) h.update(data.data() + at, std::min(piece, n - at));
        CHECK(h.digest() == want64);
      }
    }
  }
}

TEST_CASE("a hasher started on one unit finishes on another with the same digest", "[hash]") {
  // The streaming state is the same on every unit: a unit changed mid-stream changes nothing.
  UnitGuard guard;
  const std::vector<HashUnit> units = hash_units();
  const std::vector<unsigned char> data = pattern(300000, 7);
  StreamHasher h;
  std::size_t at = 0;
  for (std::size_t i = 0; at < data.size(); ++i) {
    REQUIRE(set_hash_unit(units[i % units.size()]));
    const std::size_t piece = std::min<std::size_t>(4099 * (i + 1), data.size() - at);
    h.update(data.data() + at, piece);
    at += piece;
  }
  CHECK(h.digest() == XXH3_64bits(data.data(), data.size()));
}
