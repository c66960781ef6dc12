// ckpt: typed metadata values stored in a file's index (spec/FORMAT.md 5.6).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "enum_name.hpp"
#include "format.hpp"

namespace ckpt {

// Raw bytes, kept distinct from UTF-8 text.
struct Bytes {
  std::string data;
  bool operator==(const Bytes& o) const { return data == o.data; }
};

// One of five alternatives, in the order of the on-disk codes (type() is index + 1). A tagged union,
// not std::variant: the variant's machinery was a large part of header-only parse time (spec/LAYOUT.md 5.1).
// Copy and move behave as the variant's did; as_*() of another alternative throws std::bad_variant_access.
class Value {
 public:
  Value() noexcept : Value(std::int64_t{0}) {}
  Value(std::int64_t v) noexcept : int_(v), index_(0) {}             // NOLINT implicit
  Value(int v) noexcept : int_(v), index_(0) {}                      // NOLINT implicit
  Value(double v) noexcept : float_(v), index_(1) {}                 // NOLINT implicit
  Value(bool v) noexcept : bool_(v), index_(2) {}                    // NOLINT implicit
  Value(std::string v) noexcept : string_(std::move(v)), index_(3) {}  // NOLINT implicit
  Value(const char* v) : string_(v), index_(3) {}                    // NOLINT implicit
  Value(Bytes v) noexcept : bytes_(std::move(v)), index_(4) {}       // NOLINT implicit
  Value(const Value& o) : index_(o.index_) { construct_from(o); }
  Value(Value&& o) noexcept : index_(o.index_) { construct_from(std::move(o)); }
  Value& operator=(const Value& o) {
    if (this != &o) *this = Value(o);  // a copy that throws leaves this as it was
    return *this;
  }
  Value& operator=(Value&& o) noexcept {
    if (this == &o) return *this;
    if (index_ == o.index_ && index_ == 3) {
      string_ = std::move(o.string_);
    } else if (index_ == o.index_ && index_ == 4) {
      bytes_ = std::move(o.bytes_);
    } else {
      destroy();
      index_ = o.index_;
      construct_from(std::move(o));
    }
    return *this;
  }
  ~Value() { destroy(); }

  [[nodiscard]] format::ValueType type() const noexcept { return static_cast<format::ValueType>(index_ + 1); }
  [[nodiscard]] bool is_int() const noexcept { return index_ == 0; }
  [[nodiscard]] bool is_float() const noexcept { return index_ == 1; }
  [[nodiscard]] bool is_bool() const noexcept { return index_ == 2; }
  [[nodiscard]] bool is_string() const noexcept { return index_ == 3; }
  [[nodiscard]] bool is_bytes() const noexcept { return index_ == 4; }
  [[nodiscard]] std::int64_t as_int() const { return check(0), int_; }
  [[nodiscard]] double as_float() const { return check(1), float_; }
  [[nodiscard]] bool as_bool() const { return check(2), bool_; }
  [[nodiscard]] const std::string& as_string() const { return check(3), string_; }
  [[nodiscard]] const std::string& as_bytes() const { return check(4), bytes_.data; }
  // Same alternative, then its ==.
  bool operator==(const Value& o) const {
    if (index_ != o.index_) return false;
    switch (index_) {
      case 0: return int_ == o.int_;
      case 1: return float_ == o.float_;
      case 2: return bool_ == o.bool_;
      case 3: return string_ == o.string_;
      default: return bytes_ == o.bytes_;
    }
  }
  bool operator!=(const Value& o) const { return !(*this == o); }

 private:
  void check(std::uint8_t index) const {
    if (index_ != index) throw std::bad_variant_access();  // what std::get threw
  }
  // Constructs o's alternative in this union, whose index_ is already o's and which holds nothing.
  void construct_from(const Value& o) {
    switch (index_) {
      case 0: int_ = o.int_; break;
      case 1: float_ = o.float_; break;
      case 2: bool_ = o.bool_; break;
      case 3: ::new (static_cast<void*>(&string_)) std::string(o.string_); break;
      default: ::new (static_cast<void*>(&bytes_)) Bytes(o.bytes_); break;
    }
  }
  void construct_from(Value&& o) noexcept {
    switch (index_) {
      case 0: int_ = o.int_; break;
      case 1: float_ = o.float_; break;
      case 2: bool_ = o.bool_; break;
      case 3: ::new (static_cast<void*>(&string_)) std::string(std::move(o.string_)); break;
      default: ::new (static_cast<void*>(&bytes_)) Bytes(std::move(o.bytes_)); break;
    }
  }
  void destroy() noexcept {
    if (index_ == 3) string_.~basic_string();
    else if (index_ == 4) bytes_.~Bytes();
  }

  union {
    std::int64_t int_;
    double float_;
    bool bool_;
    std::string string_;
    Bytes bytes_;
  };
  std::uint8_t index_;
};
static_assert(static_cast<int>(format::ValueType::bytes) == 5, "variant order matches the on-disk codes");

[[nodiscard]] inline const char* value_type_name(format::ValueType t) noexcept {
  return enum_name(t, {"int64", "float64", "bool", "string", "bytes"});
}

}  // namespace ckpt
