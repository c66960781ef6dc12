# Optional instruction-set level for the tools, e.g. -DCKPT_TOOLS_ARCH=x86-64-v3 (AVX2) or native.
# The headers never require it: XXH3 picks its widest kernel at compile time (SSE2 on plain x86-64),
# and the library must build and run on any x86-64. AVX2 doubles XXH3 on data already in cache, so
# it helps the pread verify and load paths; on data streamed from DRAM (mmap verify) it changes
# little, and the binaries then run only on CPUs of that level (docs/performance.md, ckpt-bench).
set(CKPT_TOOLS_ARCH "" CACHE STRING "Compile the ckpt-* tools with -march=<value> (empty: the compiler's default)")
if(CKPT_TOOLS_ARCH)
  foreach(tool ${CKPT_PROGRAMS})
    target_compile_options(${tool} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=${CKPT_TOOLS_ARCH}>)
  endforeach()
  message(STATUS "ckpt: tools compiled with -march=${CKPT_TOOLS_ARCH}")
endif()
