# Drives the consumer test (cmake -P); registered by cmake/tests-build.cmake.
#   -DCKPT_SOURCE_DIR=<ckpt tree> -DWORK_DIR=<scratch> -DMODE=install|subdirectory
#   -DGENERATOR=<generator> -DCXX_COMPILER=<compiler>
# install: configure ckpt without tools and tests, build it (the compiled library), cmake --install it
# into WORK_DIR/prefix, then build the consumer with find_package(ckpt). subdirectory: build the consumer with add_subdirectory(ckpt).
cmake_minimum_required(VERSION 3.18)
foreach(var CKPT_SOURCE_DIR WORK_DIR MODE)
  if(NOT ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "consumer test: `${cmd}` failed (${rc})\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# No build type: the consumer compiles without optimisation (fast), and the subdirectory mode
# checks that adding ckpt does not force a build type on its parent project.
set(common "")
if(GENERATOR)
  list(APPEND common -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND common -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/run)
set(consumer_src ${CKPT_SOURCE_DIR}/tests/consumer)
if(MODE STREQUAL "install")
  # Debug without flags: the top-level default (Release) compiles the library at -O3, 136 s against 50 s
  # here, for a test of how it installs and is found, not of its speed.
  step(${CMAKE_COMMAND} -S ${CKPT_SOURCE_DIR} -B ${WORK_DIR}/ckpt-build ${common}
       -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=
       -DCKPT_BUILD_TOOLS=OFF -DCKPT_BUILD_TESTS=OFF -DCKPT_CUDA=OFF -DCKPT_MPI=OFF
       -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  step(${CMAKE_COMMAND} --build ${WORK_DIR}/ckpt-build)
  step(${CMAKE_COMMAND} --install ${WORK_DIR}/ckpt-build)
  foreach(installed include/ckpt/ckpt.hpp include/ckpt/shard/impl/index_inl.hpp include/ckpt/io/posix_fs.hpp
                    include/ckpt/testing/sim_fs.hpp include/ckpt/testing/fault_fs.hpp)
    if(NOT EXISTS ${WORK_DIR}/prefix/${installed})
      message(FATAL_ERROR "consumer test: ${installed} was not installed")
    endif()
  endforeach()
  # Exactly the public headers (spec/LAYOUT.md 1.2): include/ckpt and cuda/, nothing a tool, benchmark or test uses alone.
  file(GLOB_RECURSE public RELATIVE ${CKPT_SOURCE_DIR}/include/ckpt ${CKPT_SOURCE_DIR}/include/ckpt/*.hpp)
  file(GLOB cuda_headers RELATIVE ${CKPT_SOURCE_DIR} ${CKPT_SOURCE_DIR}/cuda/*.cuh)
  list(APPEND public ${cuda_headers})
  file(GLOB_RECURSE installed_files RELATIVE ${WORK_DIR}/prefix/include/ckpt ${WORK_DIR}/prefix/include/ckpt/*)
  list(SORT public)
  list(SORT installed_files)
  if(NOT public STREQUAL installed_files)
    set(extra ${installed_files})
    list(REMOVE_ITEM extra ${public})
    set(missing ${public})
    list(REMOVE_ITEM missing ${installed_files})
    message(FATAL_ERROR "consumer test: installed headers differ from include/ckpt and cuda/: extra '${extra}', missing '${missing}'")
  endif()
  file(GLOB_RECURSE other_headers ${WORK_DIR}/prefix/include/bench_util.hpp ${WORK_DIR}/prefix/include/cli.hpp)
  if(other_headers)
    message(FATAL_ERROR "consumer test: tool or benchmark headers were installed: ${other_headers}")
  endif()
  step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/consumer-build ${common}
       -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
elseif(MODE STREQUAL "subdirectory")
  step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/consumer-build ${common}
       -DCKPT_CONSUMER_SOURCE_DIR=${CKPT_SOURCE_DIR})
  file(STRINGS ${WORK_DIR}/consumer-build/CMakeCache.txt build_type REGEX "^CMAKE_BUILD_TYPE:")
  if(NOT build_type MATCHES "^CMAKE_BUILD_TYPE:[A-Z]+=$")
    message(FATAL_ERROR "consumer test: add_subdirectory(ckpt) changed the parent's build type: ${build_type}")
  endif()
else()
  message(FATAL_ERROR "run.cmake: MODE must be install or subdirectory, not '${MODE}'")
endif()
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
foreach(program consumer consumer_compiled)
  step(${WORK_DIR}/consumer-build/${program} ${WORK_DIR}/run)
  message(STATUS "${program}: ${step_output}")
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
