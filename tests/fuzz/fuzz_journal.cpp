// libFuzzer target: a JOURNAL file through scan_journal_bytes. Built by cmake/fuzz.cmake, run by tools/fuzz.sh.
#include "target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  return ckpt_fuzz::abort_if_broken("fuzz_journal", ckpt_fuzz::journal(data, size));
}
