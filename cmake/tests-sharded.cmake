# test_sharded runs the ckpt-reshard and ckpt-merge programs end to end when they are built
# (spec/SHARDING.md 6); without the tools it still runs its library tests.
find_package(nlohmann_json 3 REQUIRED)
if(TARGET test_sharded)
  target_link_libraries(test_sharded PRIVATE nlohmann_json::nlohmann_json)
  if(TARGET ckpt-reshard AND TARGET ckpt-merge)
    add_dependencies(test_sharded ckpt-reshard ckpt-merge)
    target_compile_definitions(test_sharded PRIVATE CKPT_TEST_TOOLS=1)
  endif()
endif()
