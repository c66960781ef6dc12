// ckpt: a copy of a field read under the mutex that guards it, for the getters of classes that a
// background thread updates (the async saver, the fault-injecting file system).
#pragma once

#include <mutex>

namespace ckpt {

template <typename T>
[[nodiscard]] T locked_copy(std::mutex& mutex, const T& field) {
  std::lock_guard<std::mutex> lock(mutex);
  return field;
}

}  // namespace ckpt
