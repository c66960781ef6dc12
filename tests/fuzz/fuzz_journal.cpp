// libFuzzer target: a JOURNAL file through scan_journal_bytes. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string broken = ckpt_fuzz::journal(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_journal: %s\n", broken.substr(0, 2000).c_str());
    std::abort();
  }
  return 0;
}
