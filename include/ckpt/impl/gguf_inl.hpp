// ckpt: definitions for the GGUF reader declared in foreign.hpp (spec/FOREIGN.md 5).
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

namespace ckpt {

[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_gguf(FsRef, const std::string& path) {
  return make_error(Code::unsupported, path + ": GGUF is not read yet");
}

}  // namespace ckpt
