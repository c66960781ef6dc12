# ckpt-bench-s3 keeps working (issue 23 "What to measure"): one small run under moto, label object,
# checked by tests/check_bench_s3.py for exit 0 and a JSON document with its four contenders. Nothing is
# judged on time: moto is Python and slow, and docs/performance.md's numbers come from a full run on SeaweedFS.
if(NOT CKPT_HAVE_S3 OR NOT TARGET ckpt-bench-s3)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Python3_Interpreter_FOUND)
  return()
endif()
add_test(NAME bench_s3_moto
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server moto
                 run -- ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_bench_s3.py
                 $<TARGET_FILE:ckpt-bench-s3> --size 32MiB --repeat 1 --json)
set_tests_properties(bench_s3_moto PROPERTIES LABELS object TIMEOUT 300 WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
