# The store tests: test_repair_tool runs ckpt-repair, ckpt-inspect, ckpt-verify and ckpt-demo-train
# as built, so they are built first (or the test is skipped without the tools). The crash, SIGKILL
# and tool tests each write many small stores: they run with a test-specific timeout and label.
if(TARGET test_repair_tool)
  if(CKPT_BUILD_TOOLS)
    add_dependencies(test_repair_tool ckpt-repair ckpt-inspect ckpt-verify ckpt-demo-train)
  else()
    set_tests_properties(test_repair_tool PROPERTIES DISABLED TRUE)
  endif()
endif()
foreach(name test_crash_exploration test_sigkill test_repair_tool)
  if(TARGET ${name})
    set_tests_properties(${name} PROPERTIES LABELS store TIMEOUT 600)
  endif()
endforeach()
