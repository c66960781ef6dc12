# The GPU back end of ckpt-verify (tools/gpu_verify.hpp, spec/GPU.md 6), when nvcc was found.
# Each .cu file is compiled once by nvcc for every architecture in CMAKE_CUDA_ARCHITECTURES (80 and
# 90 by default): one invocation, one fat binary.
if(NOT CKPT_HAVE_CUDA)
  return()
endif()
if(CKPT_SANITIZE)
  message(STATUS "ckpt: CUDA targets skipped in the sanitizer build (nvcc takes no -fsanitize)")
  return()
endif()

include(${PROJECT_SOURCE_DIR}/cmake/cuda-target.cmake)

if(TARGET ckpt-verify)
  add_library(ckpt_gpu_verify STATIC ${PROJECT_SOURCE_DIR}/tools/gpu_verify_cuda.cu)
  ckpt_cuda_target(ckpt_gpu_verify)
  target_include_directories(ckpt_gpu_verify PRIVATE ${PROJECT_SOURCE_DIR}/tools)
  target_compile_definitions(ckpt_gpu_verify PUBLIC CKPT_GPU_TOOLS)
  target_link_libraries(ckpt-verify PRIVATE ckpt_gpu_verify CUDA::cudart_static)
endif()
