// libFuzzer target: a MANIFEST file and the training state codec. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_manifest", ckpt_fuzz::manifest(data, size));
}
