// ckpt: an enumerator's name from a table in declaration order, for the *_name functions that
// messages, JSON and logs spell enums with (enumerators numbered 0, 1, 2, ... as declared).
#pragma once

#include <cstddef>

namespace ckpt {

template <class E, std::size_t N>
[[nodiscard]] constexpr const char* enum_name(E e, const char* const (&names)[N]) noexcept {
  const auto i = static_cast<std::size_t>(e);
  return i < N ? names[i] : "unknown";
}

}  // namespace ckpt
