// Tests for include/ckpt/core/coding.hpp: little-endian encoding, the bounded Decoder, and the
// overflow-proof arithmetic every bounds check on untrusted numbers relies on (spec/FORMAT.md 2.3, 8.1).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include <ckpt/core/coding.hpp>

using namespace ckpt;

namespace {
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
}

TEST_CASE("integers are written least significant byte first", "[coding]") {
  unsigned char b[8] = {};
  put_u16(b, 0x1234);
  CHECK((b[0] == 0x34 && b[1] == 0x12));
  put_u32(b, 0x12345678u);
  CHECK((b[0] == 0x78 && b[1] == 0x56 && b[2] == 0x34 && b[3] == 0x12));
  put_u64(b, 0x0102030405060708ull);
  for (int i = 0; i < 8; ++i) CHECK(b[i] == 8 - i);
}

TEST_CASE("integers read back whatever the host byte order", "[coding]") {
  const unsigned char bytes[8] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
  CHECK(get_u16(bytes) == 0xcdefu);
  CHECK(get_u32(bytes) == 0x89abcdefu);
  CHECK(get_u64(bytes) == 0x0123456789abcdefull);
  unsigned char b[8];
  for (const std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0x80}, std::uint64_t{1} << 63, kMax}) {
    put_u64(b, v);
    CHECK(get_u64(b) == v);
    put_u32(b, static_cast<std::uint32_t>(v));
    CHECK(get_u32(b) == static_cast<std::uint32_t>(v));
    put_u16(b, static_cast<std::uint16_t>(v));
    CHECK(get_u16(b) == static_cast<std::uint16_t>(v));
  }
}

TEST_CASE("float64 bits survive exactly, sign of zero and NaN payload included", "[coding]") {
  CHECK(f64_bits(1.0) == 0x3ff0000000000000ull);
  CHECK(f64_bits(-0.0) == 0x8000000000000000ull);
  CHECK(f64_bits(0.0) == 0);
  CHECK(std::signbit(bits_f64(0x8000000000000000ull)));
  CHECK(std::isinf(bits_f64(0x7ff0000000000000ull)));
  const std::uint64_t nan_payload = 0x7ff8000000001234ull;
  CHECK(std::isnan(bits_f64(nan_payload)));
  CHECK(f64_bits(bits_f64(nan_payload)) == nan_payload);
}

TEST_CASE("the encoder appends little-endian fields in call order", "[coding]") {
  Encoder e;
  e.u8(0xAA);
  e.u16(0x0102);
  e.u32(0x03040506);
  e.u64(0x0708090a0b0c0d0eull);
  e.zeros(3);
  e.raw("xy", 2);
  e.bytes("z");
  const std::string want("\xAA\x02\x01\x06\x05\x04\x03\x0e\x0d\x0c\x0b\x0a\x09\x08\x07\x00\x00\x00xyz", 21);
  CHECK(e.size() == want.size());
  CHECK(e.str() == want);
}

TEST_CASE("the decoder reads fields in order and refuses to pass the end", "[coding]") {
  const unsigned char bytes[] = {0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0xff};
  Decoder d(bytes, sizeof bytes);
  std::uint16_t a = 0;
  std::uint32_t b = 0;
  std::uint64_t c = 0;
  REQUIRE(d.u16(a));
  REQUIRE(d.u32(b));
  REQUIRE(d.u64(c));
  CHECK((a == 1 && b == 2 && c == 3));
  CHECK(d.position() == 14);
  CHECK(d.remaining() == 1);
  CHECK(d.cursor() == bytes + 14);
  // A failed read leaves the position and the output untouched.
  std::uint16_t untouched = 0x5555;
  CHECK_FALSE(d.u16(untouched));
  CHECK(untouched == 0x5555);
  CHECK(d.position() == 14);
  CHECK(d.has(1));
  CHECK_FALSE(d.has(2));
  CHECK(d.skip(1));
  CHECK(d.remaining() == 0);
  CHECK(d.has(0));
  CHECK(d.skip(0));
  CHECK_FALSE(d.skip(1));
}

TEST_CASE("the decoder cannot be driven past its end by huge lengths", "[coding]") {
  const unsigned char bytes[4] = {1, 2, 3, 4};
  Decoder d(bytes, sizeof bytes);
  REQUIRE(d.skip(2));
  // pos + n would wrap around for these n; the check is n > size - pos, which cannot.
  for (const std::size_t n : {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() - 1,
                              std::numeric_limits<std::size_t>::max() / 2 + 1, std::size_t{3}}) {
    INFO("n = " << n);
    CHECK_FALSE(d.has(n));
    CHECK_FALSE(d.skip(n));
    CHECK(d.position() == 2);
  }
  std::uint64_t v = 0;
  CHECK_FALSE(d.u64(v));
  Decoder empty(nullptr, 0);
  CHECK(empty.remaining() == 0);
  std::uint16_t w = 0;
  CHECK_FALSE(empty.u16(w));
}

TEST_CASE("checked arithmetic reports overflow at 2^64", "[coding]") {
  struct Case { std::uint64_t a, b; bool add_ok, mul_ok; };
  const Case cases[] = {
      {0, 0, true, true},
      {kMax, 0, true, true},
      {kMax, 1, false, true},
      {kMax - 1, 1, true, true},
      {kMax / 2 + 1, 2, true, false},
      {kMax / 2, 2, true, true},
      {1, kMax, false, true},
      {kMax, kMax, false, false},
      {std::uint64_t{1} << 32, std::uint64_t{1} << 32, true, false},
      {(std::uint64_t{1} << 32) - 1, (std::uint64_t{1} << 32) + 1, true, true},  // 2^64 - 1 exactly
      {std::uint64_t{1} << 63, std::uint64_t{1} << 63, false, false},
      {std::uint64_t{1} << 63, 2, true, false},
      {0, kMax, true, true},
  };
  for (const auto& c : cases) {
    INFO("a = " << c.a << ", b = " << c.b);
    std::uint64_t out = 12345;
    CHECK(checked_add(c.a, c.b, out) == c.add_ok);
    if (c.add_ok) CHECK(out == c.a + c.b);
    out = 12345;
    CHECK(checked_mul(c.a, c.b, out) == c.mul_ok);
    if (c.mul_ok) CHECK(out == c.a * c.b);
  }
}

TEST_CASE("range_within accepts exactly the ranges inside the size, without overflow", "[coding]") {
  struct Case { std::uint64_t off, len, size; bool inside; };
  const Case cases[] = {
      {0, 0, 0, true},            // the empty range at the end of an empty file
      {0, 1, 0, false},
      {1, 0, 0, false},           // an empty range past the end is still outside
      {0, 10, 10, true},
      {10, 0, 10, true},          // empty, exactly at the end
      {9, 1, 10, true},
      {9, 2, 10, false},
      {11, 0, 10, false},
      {10, kMax - 5, 20, false},  // off + len wraps to 4: a naive `off + len <= size` would accept it
      {kMax, 1, kMax, false},
      {kMax, 0, kMax, true},
      {0, kMax, kMax, true},
      {1, kMax, kMax, false},
      {kMax - 1, 1, kMax, true},
      {kMax - 1, 2, kMax, false},
      {kMax, kMax, kMax, false},
      {1, kMax - 1, kMax, true},
  };
  for (const auto& c : cases) {
    INFO("off = " << c.off << ", len = " << c.len << ", size = " << c.size);
    CHECK(range_within(c.off, c.len, c.size) == c.inside);
  }
}

TEST_CASE("align_up rounds to the next multiple of a power of two", "[coding]") {
  CHECK(align_up(0, 64) == 0);
  CHECK(align_up(1, 64) == 64);
  CHECK(align_up(63, 64) == 64);
  CHECK(align_up(64, 64) == 64);
  CHECK(align_up(65, 64) == 128);
  CHECK(align_up(128, 64) == 128);  // data offset of a file aligned to 64 (spec 3.4)
  CHECK(align_up(128, 4096) == 4096);
  CHECK(align_up(0x98, 64) == 0xc0);  // the padding of the worked example (spec 11)
  CHECK(align_up(200, 8) == 200);
  CHECK(align_up(201, 8) == 208);
  CHECK(align_up(std::uint64_t{1} << 40, std::uint64_t{1} << 21) == std::uint64_t{1} << 40);
}

TEST_CASE("hex64 prints sixteen lowercase digits", "[coding]") {
  CHECK(hex64(0) == "0000000000000000");
  CHECK(hex64(0x2d06800538d394c2ull) == "2d06800538d394c2");
  CHECK(hex64(kMax) == "ffffffffffffffff");
  CHECK(hex64(0xABull) == "00000000000000ab");
}
