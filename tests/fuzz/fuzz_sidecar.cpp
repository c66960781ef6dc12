// libFuzzer target: a sidecar (.ckptsum) through decode_sidecar and encode_sidecar. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_sidecar", ckpt_fuzz::sidecar(data, size));
}
