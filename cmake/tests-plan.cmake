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
ckpt_python_oracle_test(interop_plan_oracle test_plan_oracle.py LABELS interop plan TIMEOUT 300)
