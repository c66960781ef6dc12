// ckpt: explicit little-endian encoding; byte order on disk is never host order (spec/FORMAT.md 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ckpt {

inline void put_u16(unsigned char* p, std::uint16_t v) noexcept {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
inline void put_u32(unsigned char* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
[[nodiscard]] inline std::uint16_t get_u16(const unsigned char* p) noexcept {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
[[nodiscard]] inline std::uint32_t get_u32(const unsigned char* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
[[nodiscard]] inline std::uint64_t get_u64(const unsigned char* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
[[nodiscard]] inline std::uint64_t f64_bits(double d) noexcept {
  std::uint64_t v;
  std::memcpy(&v, &d, sizeof v);
  return v;
}
[[nodiscard]] inline double bits_f64(std::uint64_t v) noexcept {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}

// Appends little-endian fields to a byte string (the index and journal encoders use it).
class Encoder {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { unsigned char b[2]; put_u16(b, v); raw(b, 2); }
  void u32(std::uint32_t v) { unsigned char b[4]; put_u32(b, v); raw(b, 4); }
  void u64(std::uint64_t v) { unsigned char b[8]; put_u64(b, v); raw(b, 8); }
  void zeros(std::size_t n) { out_.append(n, '\0'); }
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  void bytes(std::string_view s) { out_.append(s.data(), s.size()); }
  [[nodiscard]] std::size_t size() const noexcept { return out_.size(); }
  [[nodiscard]] std::string& str() noexcept { return out_; }

 private:
  std::string out_;
};

// Reads little-endian fields from a bounded span; every read is checked, none can overflow.
class Decoder {
 public:
  Decoder(const unsigned char* data, std::size_t size) noexcept : data_(data), size_(size) {}
  [[nodiscard]] std::size_t position() const noexcept { return pos_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return size_ - pos_; }
  [[nodiscard]] bool has(std::size_t n) const noexcept { return n <= size_ - pos_; }
  [[nodiscard]] bool u8(std::uint8_t& v) noexcept { return take(1) && (v = data_[pos_ - 1], true); }
  [[nodiscard]] bool u16(std::uint16_t& v) noexcept { return take(2) && (v = get_u16(data_ + pos_ - 2), true); }
  [[nodiscard]] bool u32(std::uint32_t& v) noexcept { return take(4) && (v = get_u32(data_ + pos_ - 4), true); }
  [[nodiscard]] bool u64(std::uint64_t& v) noexcept { return take(8) && (v = get_u64(data_ + pos_ - 8), true); }
  [[nodiscard]] bool skip(std::size_t n) noexcept { return take(n); }
  // n bytes into out; checked before anything is allocated.
  [[nodiscard]] bool str(std::size_t n, std::string& out) {
    if (!has(n)) return false;
    out.assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }
  [[nodiscard]] const unsigned char* cursor() const noexcept { return data_ + pos_; }

 private:
  [[nodiscard]] bool take(std::size_t n) noexcept {
    if (n > size_ - pos_) return false;
    pos_ += n;
    return true;
  }
  const unsigned char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Overflow-proof arithmetic used by every bounds check on untrusted numbers.
[[nodiscard]] inline bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  return !__builtin_add_overflow(a, b, &out);
}
[[nodiscard]] inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}
// True when [off, off+len) lies inside [0, size); written so it cannot overflow.
[[nodiscard]] inline bool range_within(std::uint64_t off, std::uint64_t len, std::uint64_t size) noexcept {
  return off <= size && len <= size - off;
}
[[nodiscard]] constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t alignment) noexcept {
  return (v + alignment - 1) & ~(alignment - 1);
}

[[nodiscard]] inline std::string hex64(std::uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace ckpt
