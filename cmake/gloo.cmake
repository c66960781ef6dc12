# gloo (Debian's libgloo-dev): the TCP transport of GlooComm (include/ckpt/dist/gloo_comm.hpp), over which
# the tiers move bytes between ranks in C++ (spec/TIERS.md 4.7). Optional for the library and its tools,
# required by the Python package (python/CMakeLists.txt). ckpt::gloo links it; CKPT_HAVE_GLOO says whether.
option(CKPT_GLOO "Build the gloo communicator and its tests when libgloo is available" ON)
set(CKPT_HAVE_GLOO OFF)
if(CKPT_GLOO)
  find_package(Gloo CONFIG QUIET)
  if(TARGET gloo)
    set(CKPT_HAVE_GLOO ON)
    add_library(ckpt_gloo INTERFACE)
    target_link_libraries(ckpt_gloo INTERFACE gloo Threads::Threads)
    add_library(ckpt::gloo ALIAS ckpt_gloo)
  else()
    message(STATUS "ckpt: gloo communicator off (needs libgloo-dev)")
  endif()
endif()
