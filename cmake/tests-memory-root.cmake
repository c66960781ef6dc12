# test_memory_root_tools runs ckpt-inspect, ckpt-verify and ckpt-repair on a memory root: build them
# first, or skip the test.
if(TARGET test_memory_root_tools)
  if(CKPT_BUILD_TOOLS)
    add_dependencies(test_memory_root_tools ckpt-inspect ckpt-verify ckpt-repair)
  else()
    set_tests_properties(test_memory_root_tools PROPERTIES DISABLED TRUE)
  endif()
endif()
