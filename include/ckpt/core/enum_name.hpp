// ckpt: the one way an enumerator gets its name. Every *_name function that messages, JSON and logs
// spell an enum with returns enum_name(value, table), and the table is checked at compile time against
// the enum's bounds, declared beside the enum:
//
//   enum class Fate : std::uint8_t { lost, kept, torn, garbled };
//   [[nodiscard]] constexpr EnumBounds<Fate> enum_bounds(Fate) noexcept { return {Fate::lost, Fate::garbled}; }
//   ... enum_name(f, {"lost", "kept", "torn", "garbled"})
//
// enum_bounds is found by argument-dependent lookup, so it lives in the enum's namespace. An enumerator
// inserted anywhere but at the end moves `last`, and one appended is next to the line to update, so a
// table that misses a name does not compile.
#pragma once

#include <cstddef>
#include <type_traits>

namespace ckpt {

// An enum's first and last enumerators as declared, and how many it declares: last - first + 1 when
// the values are contiguous; an enum with gaps states its count and names (value, name) pairs.
template <class E>
struct EnumBounds {
  static_assert(std::is_enum_v<E>, "EnumBounds describes an enum");
  E first;
  E last;
  std::size_t count = static_cast<std::size_t>(static_cast<std::underlying_type_t<E>>(last) -
                                               static_cast<std::underlying_type_t<E>>(first)) + 1;
  [[nodiscard]] constexpr bool contiguous() const noexcept {
    return count == static_cast<std::size_t>(static_cast<std::underlying_type_t<E>>(last) -
                                             static_cast<std::underlying_type_t<E>>(first)) + 1;
  }
};

// How many enumerators E declares (its enum_bounds).
template <class E>
[[nodiscard]] constexpr std::size_t enum_count() noexcept {
  return enum_bounds(E{}).count;
}

// The name of e from names, one per enumerator in declaration order (first, first + 1, ...); `unknown`
// for a value that is no enumerator (a byte read from a file, a cast).
template <class E, std::size_t N>
[[nodiscard]] constexpr const char* enum_name(E e, const char* const (&names)[N], const char* unknown = "unknown") noexcept {
  constexpr EnumBounds<E> bounds = enum_bounds(E{});
  static_assert(bounds.contiguous(), "an enum with gaps names (value, name) pairs");
  static_assert(N == bounds.count, "one name per enumerator, in declaration order");
  using U = std::underlying_type_t<E>;
  // Below first wraps around to a huge index: one comparison rejects both sides.
  const std::size_t index = static_cast<std::size_t>(static_cast<U>(e)) - static_cast<std::size_t>(static_cast<U>(bounds.first));
  return index < N ? names[index] : unknown;
}

// One enumerator and its name, for an enum whose values have gaps.
template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of e from (value, name) pairs, one per enumerator; `unknown` for a value that is no enumerator.
template <class E, std::size_t N>
[[nodiscard]] constexpr const char* enum_name(E e, const EnumName<E> (&names)[N], const char* unknown = "unknown") noexcept {
  static_assert(N == enum_count<E>(), "one name per enumerator");
  for (const auto& n : names)
    if (n.value == e) return n.name;
  return unknown;
}

}  // namespace ckpt
