// ckpt: definitions for the PyTorch DCP reader declared in foreign.hpp (spec/FOREIGN.md 4).
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

namespace ckpt {

[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_dcp(FsRef, const std::string& dir) {
  return make_error(Code::unsupported, dir + ": PyTorch DCP is not read yet");
}

}  // namespace ckpt
