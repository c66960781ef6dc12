# One Catch2 executable per tests/test_*.cpp, sharing one compiled main.
add_library(ckpt_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/main.cpp)
target_link_libraries(ckpt_test_main PUBLIC Catch2::Catch2)
file(GLOB CKPT_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/test_*.cpp)
# Object-store tests need ckpt::s3 and a server: cmake/tests-object.cmake registers them.
list(FILTER CKPT_TEST_SOURCES EXCLUDE REGEX "/test_s3_[^/]*\\.cpp$")
foreach(src ${CKPT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} $<TARGET_OBJECTS:ckpt_test_main>)
  target_link_libraries(${name} PRIVATE ${CKPT_LIB} Catch2::Catch2)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/tools)
  target_compile_options(${name} PRIVATE ${CKPT_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    CKPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" CKPT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()
# Extra test registrations (interop scripts, consumer project, CUDA, MPI) live in their own files.
file(GLOB CKPT_TEST_EXTRAS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tests-*.cmake)
foreach(extra ${CKPT_TEST_EXTRAS})
  include(${extra})
endforeach()
