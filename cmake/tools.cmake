# Every tools/ckpt-*.cpp is a thin main over the library; shared CLI plumbing is tools/cli.hpp.
# The benchmarks (bench/ckpt-bench*.cpp, helpers bench/bench_*.hpp) and the example trainer
# (examples/ckpt-demo-train.cpp) are built the same way and land beside the tools in the build
# directory (build/ckpt-bench), where tests and scripts run them; only the tools are installed.
set(CKPT_TOOLS "")     # installed
set(CKPT_PROGRAMS "")  # tools, benchmarks and examples: what tools-*.cmake below adds to
foreach(folder tools bench examples)
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/ckpt-*.cpp)
  foreach(src ${sources})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE ${CKPT_LIB} CLI11::CLI11 nlohmann_json::nlohmann_json)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tools ${PROJECT_SOURCE_DIR}/${folder})
    target_compile_options(${name} PRIVATE ${CKPT_WARNINGS})
    list(APPEND CKPT_PROGRAMS ${name})
    if(folder STREQUAL "tools")
      list(APPEND CKPT_TOOLS ${name})
      install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    endif()
  endforeach()
endforeach()
# Tool-specific additions (GPU back end, MPI) live in their own files here.
file(GLOB CKPT_TOOL_EXTRAS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tools-*.cmake)
foreach(extra ${CKPT_TOOL_EXTRAS})
  include(${extra})
endforeach()
