# One Catch2 executable per tests/test_*.cpp, sharing one compiled main.
add_library(ckpt_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/main.cpp)
target_link_libraries(ckpt_test_main PUBLIC Catch2::Catch2)
file(GLOB CKPT_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/test_*.cpp)
# Object-store tests need ckpt::s3 and a server: cmake/tests-object.cmake registers them.
list(FILTER CKPT_TEST_SOURCES EXCLUDE REGEX "/test_s3_[^/]*\\.cpp$")
# The gloo communicator's test needs libgloo: built only where it was found (cmake/tests-gloo.cmake links it).
if(NOT CKPT_HAVE_GLOO)
  list(FILTER CKPT_TEST_SOURCES EXCLUDE REGEX "/test_gloo_comm\\.cpp$")
endif()
foreach(src ${CKPT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} $<TARGET_OBJECTS:ckpt_test_main>)
  target_link_libraries(${name} PRIVATE ${CKPT_LIB} Catch2::Catch2)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/tools ${PROJECT_SOURCE_DIR}/bench)
  target_compile_options(${name} PRIVATE ${CKPT_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    CKPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" CKPT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

# A Python oracle test: tests/interop/<script> checks the built tools against an independent
# implementation, given the build directory. It exits 77 (reported as skipped, not passed) when its
# Python package is not installed. LABELS default to interop, TIMEOUT to 600 s.
find_package(Python3 COMPONENTS Interpreter QUIET)
function(ckpt_python_oracle_test name script)
  cmake_parse_arguments(arg "" "TIMEOUT" "LABELS" ${ARGN})
  if(NOT Python3_Interpreter_FOUND OR NOT CKPT_BUILD_TOOLS)
    return()
  endif()
  if(NOT arg_LABELS)
    set(arg_LABELS interop)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  add_test(NAME ${name}
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/${script} ${PROJECT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES
    LABELS "${arg_LABELS}"
    SKIP_RETURN_CODE 77
    TIMEOUT ${arg_TIMEOUT}
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endfunction()

# Extra test registrations (interop scripts, consumer project, CUDA, MPI) live in their own files.
file(GLOB CKPT_TEST_EXTRAS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tests-*.cmake)
foreach(extra ${CKPT_TEST_EXTRAS})
  include(${extra})
endforeach()
