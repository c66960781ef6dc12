// libFuzzer target: a shard file (superblock, index, footer, reader and verifier). Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_index", ckpt_fuzz::shard_file(data, size));
}
