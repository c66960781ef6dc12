// libFuzzer target: a pickle through decode_pickle, then as DCP .metadata through open_dcp. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_pickle", ckpt_fuzz::pickle(data, size));
}
