# test_tool_inputs runs every tool on a FIFO, a directory, a dangling symlink, /dev/zero, a missing
# path and bad arguments (each must exit 2 at once): the tools are built first, or the test is skipped.
if(TARGET test_tool_inputs)
  if(CKPT_BUILD_TOOLS)
    foreach(tool ckpt-inspect ckpt-verify ckpt-repair ckpt-convert ckpt-merge ckpt-reshard ckpt-bench ckpt-plan ckpt-demo-train)
      if(TARGET ${tool})
        add_dependencies(test_tool_inputs ${tool})
      endif()
    endforeach()
    set_tests_properties(test_tool_inputs PROPERTIES LABELS tools TIMEOUT 300)
  else()
    set_tests_properties(test_tool_inputs PROPERTIES DISABLED TRUE)
  endif()
endif()
