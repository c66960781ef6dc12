// libFuzzer target: a Hugging Face *.safetensors.index.json, then the set it names. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_hf_index", ckpt_fuzz::hf_index(data, size));
}
