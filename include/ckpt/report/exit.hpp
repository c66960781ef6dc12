// ckpt: the exit status every front end derives from a report (README "Exit codes", spec/REPORTS.md 2):
// the tools return it, the Python reports carry it as exit_code.
#pragma once

#include "../core/error.hpp"

namespace ckpt::report {

enum Exit : int {
  kOk = 0,         // nothing wrong
  kIntegrity = 1,  // damage or an incomplete file was found, or a checkpoint is not the pinned one
  kUsage = 2,      // bad arguments, unreadable path, I/O error, unsupported request
};

// Damage found in data maps to 1; everything else that stops a check maps to 2.
[[nodiscard]] inline int exit_for(Code code) noexcept {
  return (code == Code::corrupt || code == Code::incomplete) ? kIntegrity : kUsage;
}

// A problem found inside a checkpoint: damage (1) unless the bytes could not be read or the request
// was wrong (2). A missing file of a step is damage here, while a path that is not found is exit_for's 2.
[[nodiscard]] inline int problem_exit(Code code) noexcept {
  return code == Code::io || code == Code::invalid_argument || code == Code::unsupported ? kUsage : kIntegrity;
}

}  // namespace ckpt::report
