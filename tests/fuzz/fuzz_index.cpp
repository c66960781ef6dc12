// libFuzzer target: a shard file (superblock, index, footer, reader and verifier). Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string broken = ckpt_fuzz::shard_file(data, size);
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_index: %s\n", broken.substr(0, 2000).c_str());
    std::abort();
  }
  return 0;
}
