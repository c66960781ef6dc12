// Tests for include/ckpt/core/bulk_copy.hpp: the streamed copy gives memcpy's bytes for every size and
// alignment around its thresholds (the 1 MiB start, the 64-byte head, 16 KiB rounds and the tail), and
// copy_hashed's digest is XXH3-64's one-shot digest of those bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <ckpt/core/bulk_copy.hpp>

namespace {

// A deterministic, position-dependent pattern: a byte copied to the wrong place is found.
std::vector<unsigned char> pattern(std::size_t n) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  return v;
}

}  // namespace

TEST_CASE("bulk_copy copies exactly the bytes asked for, at any size and alignment") {
  const std::size_t big = ckpt::kBulkCopyMin + 3 * 16384 + 4096;
  const auto src = pattern(big + 128);
  const std::size_t sizes[] = {0,
                               1,
                               63,
                               4095,
                               ckpt::kBulkCopyMin - 1,
                               ckpt::kBulkCopyMin,
                               ckpt::kBulkCopyMin + 1,
                               ckpt::kBulkCopyMin + 16384 - 1,
                               ckpt::kBulkCopyMin + 16384 + 63,
                               big};
  for (const std::size_t n : sizes)
    for (const std::size_t dst_off : {0, 1, 17, 63})
      for (const std::size_t src_off : {0, 5, 64}) {
        CAPTURE(n, dst_off, src_off);
        std::vector<unsigned char> dst(big + 256, 0xA5);
        ckpt::bulk_copy(dst.data() + dst_off, src.data() + src_off, n);
        const auto untouched = [](unsigned char b) { return b == 0xA5; };
        REQUIRE(std::all_of(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(dst_off), untouched));  // nothing before
        REQUIRE(std::equal(src.begin() + static_cast<std::ptrdiff_t>(src_off), src.begin() + static_cast<std::ptrdiff_t>(src_off + n),
                           dst.begin() + static_cast<std::ptrdiff_t>(dst_off)));
        REQUIRE(std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(dst_off + n), dst.end(), untouched));  // nothing after
      }
}

TEST_CASE("copy_hashed copies as bulk_copy does and returns the XXH3-64 of the bytes") {
  const std::size_t big = ckpt::kBulkCopyMin + 3 * 16384 + 4096;
  const auto src = pattern(big + 128);
  const std::size_t sizes[] = {0, 1, 240, 241, 4095, ckpt::kBulkCopyMin - 1, ckpt::kBulkCopyMin, ckpt::kBulkCopyMin + 1,
                               ckpt::kBulkCopyMin + 16384 + 63, big};
  for (const std::size_t n : sizes)
    for (const std::size_t dst_off : {0, 1, 63})
      for (const std::size_t src_off : {0, 5}) {
        CAPTURE(n, dst_off, src_off);
        std::vector<unsigned char> dst(big + 256, 0xA5);
        const std::uint64_t digest = ckpt::copy_hashed(dst.data() + dst_off, src.data() + src_off, n);
        REQUIRE(digest == ckpt::xxh3_64(src.data() + src_off, n));  // the one-shot digest, whatever the windows
        const auto untouched = [](unsigned char b) { return b == 0xA5; };
        REQUIRE(std::all_of(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(dst_off), untouched));
        REQUIRE(std::equal(src.begin() + static_cast<std::ptrdiff_t>(src_off), src.begin() + static_cast<std::ptrdiff_t>(src_off + n),
                           dst.begin() + static_cast<std::ptrdiff_t>(dst_off)));
        REQUIRE(std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(dst_off + n), dst.end(), untouched));
      }
}
