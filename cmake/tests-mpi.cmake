# MPI tests (spec/SHARDING.md 9), label `mpi`, each under `mpirun -np 4 --oversubscribe`:
# - mpi_sharded: save with 4 ranks, load with 1-4, reshard 4 -> 3 -> 4, a failing rank, overlapping pieces.
# - mpi_async: async saves on 4 ranks, a skip decision every rank shares, a failing rank (spec/ASYNC.md).
# - mpi_comm: MpiComm's recv_into and recv, every rank sending to its neighbour at once (spec/TIERS.md 4.2).
# - mpi_kill_save then mpi_kill_recovery: rank 2 SIGKILLs itself mid-shard (mpirun tears the job down, so
#   the first is expected to fail); a single process then recovers the store and checks the result.
# - mpi_bench_ranks: ckpt-bench-ranks on a few MiB, so the benchmark keeps working.
# CI runs as root, which mpirun refuses unless told; shared memory (vader) without the single-copy
# mechanism works in containers; OpenMPI leaks by design, so ASan's leak check is off for these.
if(NOT CKPT_HAVE_MPI OR NOT MPIEXEC_EXECUTABLE)
  return()
endif()

set(CKPT_MPI_TEST_DIR ${PROJECT_SOURCE_DIR}/tests/mpi)
foreach(name test_mpi_sharded test_mpi_kill test_mpi_async test_mpi_comm)
  add_executable(${name} ${CKPT_MPI_TEST_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE ${CKPT_LIB} MPI::MPI_CXX)
  target_compile_options(${name} PRIVATE ${CKPT_WARNINGS})
endforeach()
add_executable(check_kill_recovery ${CKPT_MPI_TEST_DIR}/check_kill_recovery.cpp)
target_link_libraries(check_kill_recovery PRIVATE ${CKPT_LIB})
target_compile_options(check_kill_recovery PRIVATE ${CKPT_WARNINGS})

set(CKPT_MPIEXEC_FLAGS ${MPIEXEC_NUMPROC_FLAG} 4)
if(MPI_CXX_LIBRARY_VERSION_STRING MATCHES "Open MPI" OR MPIEXEC_EXECUTABLE MATCHES "openmpi")
  list(APPEND CKPT_MPIEXEC_FLAGS --oversubscribe)
endif()
set(CKPT_MPI_TEST_ENV
    OMPI_ALLOW_RUN_AS_ROOT=1
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    OMPI_MCA_btl=self,vader
    OMPI_MCA_btl_vader_single_copy_mechanism=none
    OMPI_MCA_rmaps_base_oversubscribe=1
    OMPI_MCA_mpi_yield_when_idle=1
    ASAN_OPTIONS=detect_leaks=0)

function(ckpt_mpi_test name)
  add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${CKPT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${CKPT_MPI_TEST_ENV}"
                       WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endfunction()

ckpt_mpi_test(mpi_sharded $<TARGET_FILE:test_mpi_sharded> ${PROJECT_BINARY_DIR}/mpi-sharded)
ckpt_mpi_test(mpi_async $<TARGET_FILE:test_mpi_async> ${PROJECT_BINARY_DIR}/mpi-async)
ckpt_mpi_test(mpi_comm $<TARGET_FILE:test_mpi_comm> ${PROJECT_BINARY_DIR}/mpi-comm)

set(CKPT_MPI_KILL_STORE ${PROJECT_BINARY_DIR}/mpi-kill-store)
ckpt_mpi_test(mpi_kill_save $<TARGET_FILE:test_mpi_kill> ${CKPT_MPI_KILL_STORE})
set_tests_properties(mpi_kill_save PROPERTIES WILL_FAIL TRUE FIXTURES_SETUP mpi_kill)
add_test(NAME mpi_kill_recovery COMMAND check_kill_recovery ${CKPT_MPI_KILL_STORE})
set_tests_properties(mpi_kill_recovery PROPERTIES LABELS mpi TIMEOUT 60 FIXTURES_REQUIRED mpi_kill WORKING_DIRECTORY ${PROJECT_BINARY_DIR})

# tiers (spec/TIERS.md 9): the failure table, each case a job killed, damaged and resumed by tier_failures.py.
add_executable(tier_train ${CKPT_MPI_TEST_DIR}/tier_train.cpp)
target_link_libraries(tier_train PRIVATE ${CKPT_LIB} MPI::MPI_CXX)
target_compile_options(tier_train PRIVATE ${CKPT_WARNINGS})
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME mpi_tier_failures
           COMMAND ${Python3_EXECUTABLE} ${CKPT_MPI_TEST_DIR}/tier_failures.py ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:tier_train>
                   ${PROJECT_BINARY_DIR}/mpi-tiers ${CKPT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS})
  set_tests_properties(mpi_tier_failures PROPERTIES LABELS mpi TIMEOUT 900 ENVIRONMENT "${CKPT_MPI_TEST_ENV}"
                       WORKING_DIRECTORY ${PROJECT_BINARY_DIR} FIXTURES_SETUP mpi_tiers)
  # What the table left behind, read by an independent implementation of spec/TIERS.md 5 (xxhash package).
  add_test(NAME interop_tiers COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/interop/test_tiers_interop.py
                                      ${PROJECT_BINARY_DIR}/mpi-tiers)
  set_tests_properties(interop_tiers PROPERTIES LABELS "interop;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                       FIXTURES_REQUIRED mpi_tiers WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()

if(TARGET ckpt-bench-ranks)
  ckpt_mpi_test(mpi_bench_ranks $<TARGET_FILE:ckpt-bench-ranks> --dir ${PROJECT_BINARY_DIR} --size 4MiB --ranks 1,2,4 --json)
endif()
# mpi_bench_tiers: the tiers benchmark's whole run (bench/bench-tiers.py: capture, DCP when torch is there,
# restarts from each tier) on 16 MiB, so it keeps working; it checks where each restart loaded from, never times.
if(TARGET ckpt-bench-tiers AND Python3_FOUND)
  string(REPLACE ";" " " CKPT_BENCH_TIERS_MPIRUN "${MPIEXEC_EXECUTABLE};${MPIEXEC_PREFLAGS}")
  add_test(NAME mpi_bench_tiers
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/bench-tiers.py --bench $<TARGET_FILE:ckpt-bench-tiers>
                   --mpirun "${CKPT_BENCH_TIERS_MPIRUN}" --ranks 4 --size 16MiB --repeat 2 --resumes 1 --dir ${PROJECT_BINARY_DIR}
                   --json ${PROJECT_BINARY_DIR}/bench-tiers.json)
  set_tests_properties(mpi_bench_tiers PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${CKPT_MPI_TEST_ENV}"
                       WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endif()
