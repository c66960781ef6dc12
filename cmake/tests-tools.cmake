# test_tools runs the ckpt-inspect and ckpt-verify programs: build them first, or skip the test.
if(TARGET test_tools)
  if(CKPT_BUILD_TOOLS)
    add_dependencies(test_tools ckpt-inspect ckpt-verify)
  else()
    set_tests_properties(test_tools PROPERTIES DISABLED TRUE)
  endif()
endif()
