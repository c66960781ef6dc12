// libFuzzer target: a MANIFEST file and the training state codec. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string broken = ckpt_fuzz::manifest(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_manifest: %s\n", broken.substr(0, 2000).c_str());
    std::abort();
  }
  return 0;
}
