# Interop of the GGUF reader with an independent implementation: the gguf Python package (gguf-py)
# writes and reads the files, ckpt-inspect and ckpt-verify describe and check them.
# The script exits 77 (skipped) when the package is not installed.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND AND CKPT_BUILD_TOOLS)
  add_test(NAME interop_gguf
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_gguf_interop.py ${PROJECT_BINARY_DIR})
  set_tests_properties(interop_gguf PROPERTIES
    LABELS interop
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
