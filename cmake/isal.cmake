# ISA-L (Debian's libisal-dev): Reed-Solomon erasure codes for the memory tier's parity groups
# (include/ckpt/tiers/parity.hpp, spec/TIERS.md 12). Found: the library target links it and defines
# CKPT_HAVE_ISAL=1; not found: a job asking for parity is refused at create() (Code::unsupported).
set(CKPT_HAVE_ISAL OFF)
find_path(CKPT_ISAL_INCLUDE_DIR isa-l/erasure_code.h)
find_library(CKPT_ISAL_LIBRARY NAMES isal)
if(CKPT_ISAL_INCLUDE_DIR AND CKPT_ISAL_LIBRARY)
  set(CKPT_HAVE_ISAL ON)
  # Installed, the package names the library (-lisal) and keeps the definition, so a consumer of ckpt::compiled
  # (built with parity) links what it calls; ISA-L's headers and library are on the system paths (Debian's).
  target_include_directories(ckpt SYSTEM INTERFACE $<BUILD_INTERFACE:${CKPT_ISAL_INCLUDE_DIR}>)
  target_link_libraries(ckpt INTERFACE $<BUILD_INTERFACE:${CKPT_ISAL_LIBRARY}> $<INSTALL_INTERFACE:isal>)
  target_compile_definitions(ckpt INTERFACE CKPT_HAVE_ISAL=1)
else()
  message(STATUS "ckpt: erasure-coded memory tiers off (needs libisal-dev)")
endif()
