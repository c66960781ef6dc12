// ckpt: typed metadata values stored in a file's index (spec/FORMAT.md 5.6).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "format.hpp"

namespace ckpt {

// Raw bytes, kept distinct from UTF-8 text.
struct Bytes {
  std::string data;
  bool operator==(const Bytes& o) const { return data == o.data; }
};

class Value {
 public:
  using Storage = std::variant<std::int64_t, double, bool, std::string, Bytes>;

  Value() : v_(std::int64_t{0}) {}
  Value(std::int64_t v) : v_(v) {}                          // NOLINT implicit
  Value(int v) : v_(std::int64_t{v}) {}                     // NOLINT implicit
  Value(double v) : v_(v) {}                                // NOLINT implicit
  Value(bool v) : v_(v) {}                                  // NOLINT implicit
  Value(std::string v) : v_(std::move(v)) {}                // NOLINT implicit
  Value(const char* v) : v_(std::string(v)) {}              // NOLINT implicit
  Value(Bytes v) : v_(std::move(v)) {}                      // NOLINT implicit

  [[nodiscard]] format::ValueType type() const noexcept {
    return static_cast<format::ValueType>(v_.index() + 1);
  }
  [[nodiscard]] const Storage& storage() const noexcept { return v_; }
  [[nodiscard]] bool is_int() const noexcept { return v_.index() == 0; }
  [[nodiscard]] bool is_float() const noexcept { return v_.index() == 1; }
  [[nodiscard]] bool is_bool() const noexcept { return v_.index() == 2; }
  [[nodiscard]] bool is_string() const noexcept { return v_.index() == 3; }
  [[nodiscard]] bool is_bytes() const noexcept { return v_.index() == 4; }
  [[nodiscard]] std::int64_t as_int() const { return std::get<0>(v_); }
  [[nodiscard]] double as_float() const { return std::get<1>(v_); }
  [[nodiscard]] bool as_bool() const { return std::get<2>(v_); }
  [[nodiscard]] const std::string& as_string() const { return std::get<3>(v_); }
  [[nodiscard]] const std::string& as_bytes() const { return std::get<4>(v_).data; }
  // What std::variant's == does (same alternative, then its ==), without instantiating it: header-only
  // parse time (spec/LAYOUT.md 5).
  bool operator==(const Value& o) const {
    if (v_.index() != o.v_.index()) return false;
    if (v_.valueless_by_exception()) return true;
    switch (v_.index()) {
      case 0: return as_int() == o.as_int();
      case 1: return as_float() == o.as_float();
      case 2: return as_bool() == o.as_bool();
      case 3: return as_string() == o.as_string();
      default: return as_bytes() == o.as_bytes();
    }
  }
  bool operator!=(const Value& o) const { return !(*this == o); }

 private:
  Storage v_;
};
static_assert(static_cast<int>(format::ValueType::bytes) == 5, "variant order matches the on-disk codes");

[[nodiscard]] inline const char* value_type_name(format::ValueType t) noexcept {
  switch (t) {
    case format::ValueType::int64: return "int64";
    case format::ValueType::float64: return "float64";
    case format::ValueType::boolean: return "bool";
    case format::ValueType::string: return "string";
    case format::ValueType::bytes: return "bytes";
  }
  return "unknown";
}

}  // namespace ckpt
