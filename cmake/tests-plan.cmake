# The planner (spec/PLAN.md): test_plan_tool runs ckpt-plan as built, so it is built first (or the
# test is skipped without the tools); interop_plan_oracle recomputes Young and Daly with Python's math
# module from the same inputs and compares them with ckpt-plan --json.
if(TARGET test_plan_tool)
  if(CKPT_BUILD_TOOLS)
    add_dependencies(test_plan_tool ckpt-plan)
  else()
    set_tests_properties(test_plan_tool PROPERTIES DISABLED TRUE)
  endif()
  set_tests_properties(test_plan_tool PROPERTIES LABELS plan)
endif()
if(TARGET test_planner)
  set_tests_properties(test_planner PROPERTIES LABELS plan)
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_plan_oracle
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_plan_oracle.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_plan_oracle PROPERTIES
    LABELS "interop;plan"
    SKIP_RETURN_CODE 77
    TIMEOUT 300
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
