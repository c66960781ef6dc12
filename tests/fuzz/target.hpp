// What every libFuzzer target of this folder does with a harness's answer: "" goes on, anything else
// is an invariant broken, printed (cut to 2000 bytes) and aborted on so libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.hpp"

namespace ckpt_fuzz {

inline int abort_if_broken(const char* target, const std::string& broken) {
  if (!broken.empty()) {
    std::fprintf(stderr, "%s: %s\n", target, broken.substr(0, 2000).c_str());
    std::abort();
  }
  return 0;
}

}  // namespace ckpt_fuzz
