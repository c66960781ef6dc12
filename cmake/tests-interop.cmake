# Interop with independent implementations: the Python safetensors package against ckpt-convert.
# The script exits 77 (skipped) when the Python oracles are not installed.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_safetensors
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_safetensors_interop.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_safetensors PROPERTIES
    LABELS interop
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
# Identity (root digests, pins, diffs) and sidecars, against the safetensors and xxhash packages.
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_identity
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_identity_interop.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_identity PROPERTIES
    LABELS interop
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
# Round trips through ckpt-convert, ckpt-reshard and ckpt-merge give back tensors and __metadata__ (issue 22).
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_round_trip
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_round_trip_interop.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_round_trip PROPERTIES
    LABELS interop
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()

# The interpreter every Python test above and below runs is the pinned environment (docs/dependencies.md):
# an oracle skipped or a server of another version cannot hide behind a drifted system.
if(Python3_Interpreter_FOUND)
  add_test(NAME python_env_pinned
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check-python-env.py ${PROJECT_SOURCE_DIR}/tools/constraints.txt)
  set_tests_properties(python_env_pinned PROPERTIES LABELS interop SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
