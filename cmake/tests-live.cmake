# Readers of a live store (issue 9): test_live_readers runs ckpt-verify and ckpt-inspect as built
# against a store its writer thread saves and retires in a tight loop, so the tools are built first
# (without them it still runs its library tests and reports the tool checks as skipped).
if(TARGET test_live_readers)
  if(TARGET ckpt-verify AND TARGET ckpt-inspect)
    add_dependencies(test_live_readers ckpt-verify ckpt-inspect)
  endif()
  set_tests_properties(test_live_readers PROPERTIES LABELS store TIMEOUT 300)
endif()
