# ckpt_cuda_target(<target>): what every nvcc-built target of ckpt shares (spec/GPU.md 9). Included by
# tools-cuda.cmake and tests-cuda.cmake. Each .cu is compiled once for all CMAKE_CUDA_ARCHITECTURES
# (80 and 90 by default): one nvcc invocation, one fat binary. The host compiler gets the project's
# warnings; EDG's #2810 ("ignoring return value type with nodiscard") is off because EDG raises it
# for every `status = f()` assignment, which GCC and Clang rightly accept.
include_guard(GLOBAL)
function(ckpt_cuda_target target)
  target_link_libraries(${target} PRIVATE ${CKPT_LIB} CUDA::cudart_static)
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
  string(REPLACE ";" "," host_warnings "${CKPT_WARNINGS}")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${host_warnings} --diag-suppress=2810>)
endfunction()
