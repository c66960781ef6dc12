# Golden files and the independent Python reader (spec/README.md).
# test_golden reads and writes JSON descriptions of the golden files.
find_package(nlohmann_json 3 REQUIRED)
target_link_libraries(test_golden PRIVATE nlohmann_json::nlohmann_json)

# Interop: an independent reader written from spec/FORMAT.md checks golden and fresh files with the
# Python xxhash package (spec/README.md). Reported as skipped (exit 77), not passed, without xxhash.
# Fresh files come from test_golden "[interop_fresh]" and, when the tool is built, from ckpt-convert
# over a safetensors file made by the Python safetensors package.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(CKPT_INTEROP_CONVERT "")
  if(TARGET ckpt-convert)
    set(CKPT_INTEROP_CONVERT --convert $<TARGET_FILE:ckpt-convert>)
  endif()
  add_test(NAME interop_xxhash_oracle
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_xxhash_oracle.py
                   --golden-dir ${PROJECT_SOURCE_DIR}/spec/golden
                   --fresh-writer $<TARGET_FILE:test_golden>
                   ${CKPT_INTEROP_CONVERT}
                   --work-dir ${PROJECT_BINARY_DIR}/interop-xxhash)
  set_tests_properties(interop_xxhash_oracle PROPERTIES LABELS interop SKIP_RETURN_CODE 77 TIMEOUT 300
                       WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
