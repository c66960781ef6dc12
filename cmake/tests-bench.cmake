# test_bench_util runs the ckpt-bench program end to end on a few MiB: build it first, or skip the test.
if(TARGET test_bench_util)
  if(TARGET ckpt-bench)
    add_dependencies(test_bench_util ckpt-bench)
    target_link_libraries(test_bench_util PRIVATE nlohmann_json::nlohmann_json)
  else()
    set_tests_properties(test_bench_util PROPERTIES DISABLED TRUE)
  endif()
endif()
