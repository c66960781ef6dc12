# Interop with PyTorch Distributed Checkpoint: torch.distributed.checkpoint writes DCP directories
# (one process, two gloo ranks) that ckpt-inspect and ckpt-verify must describe as dcp's own reader
# does (tests/interop/test_dcp_interop.py). The script exits 77 (skipped) when torch is not installed.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_dcp
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_dcp_interop.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_dcp PROPERTIES
    LABELS interop
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
