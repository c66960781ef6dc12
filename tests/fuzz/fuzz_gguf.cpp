// libFuzzer target: a GGUF file through open_gguf. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_gguf", ckpt_fuzz::gguf(data, size));
}
