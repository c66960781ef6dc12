# CUDA tests (spec/GPU.md 9).
# - test_cuda_xxh3_core (host, always built): the __host__ __device__ core compiled by the C++ compiler
#   and checked against the system libxxhash, which is the oracle here, so it is linked, not inlined.
# - tests/cuda/test_*.cu (nvcc, only with CUDA): built in every CUDA build, so an nvcc failure fails the
#   build; run on a GPU, and report SKIPPED (exit 77) where there is none, never passed.
if(TARGET test_cuda_xxh3_core)
  find_library(CKPT_XXHASH_LIBRARY NAMES xxhash REQUIRED)
  target_link_libraries(test_cuda_xxh3_core PRIVATE ${CKPT_XXHASH_LIBRARY})
endif()

# The prepared device script must at least parse: it runs only in a GPU session (spec/GPU.md 10).
find_program(CKPT_BASH bash)
if(CKPT_BASH)
  add_test(NAME gpu_device_check_syntax COMMAND ${CKPT_BASH} -n ${PROJECT_SOURCE_DIR}/tools/gpu-device-check.sh)
  set_tests_properties(gpu_device_check_syntax PROPERTIES LABELS build)
endif()

if(CKPT_HAVE_CUDA AND NOT CKPT_SANITIZE)
  include(${PROJECT_SOURCE_DIR}/cmake/cuda-target.cmake)
  file(GLOB CKPT_CUDA_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cuda/test_*.cu)
  foreach(src ${CKPT_CUDA_TEST_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    set(name cuda_${name})
    add_executable(${name} ${src})
    ckpt_cuda_target(${name})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${name} PRIVATE CKPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" CKPT_BINARY_DIR="${PROJECT_BINARY_DIR}")
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;no_sanitize" WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  endforeach()
  # The device benchmark (tools/gpu-device-check.sh runs it); built so that it keeps compiling.
  add_executable(ckpt-gpu-bench ${PROJECT_SOURCE_DIR}/tests/cuda/gpu_bench.cu)
  ckpt_cuda_target(ckpt-gpu-bench)
endif()
