// libFuzzer target: a safetensors file's header. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_safetensors", ckpt_fuzz::safetensors(data, size));
}
