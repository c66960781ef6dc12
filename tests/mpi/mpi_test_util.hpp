// Helpers for the MPI tests (tests/mpi/*.cpp, run by cmake/tests-mpi.cmake under mpirun): checks that
// count failures on each rank and a verdict every rank agrees on, so the job exits 0 only when every
// rank passed. Catch2 is not used here: its report would be printed once per rank.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ckpt/dist/mpi_comm.hpp>

namespace mpi_test {

inline int& failures() {
  static int count = 0;
  return count;
}

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline void fail(const char* file, int line, const std::string& what) {
  ++failures();
  std::fprintf(stderr, "rank %d: %s:%d: FAILED: %s\n", world_rank(), file, line, what.c_str());
}

// CHECK(condition, message): counts and reports a failure, goes on.
#define MPI_CHECK(cond, msg)                                                                   \
  do {                                                                                         \
    if (!(cond)) ::mpi_test::fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg));     \
  } while (0)
// A Status that must be ok.
#define MPI_CHECK_OK(expr)                                                                     \
  do {                                                                                         \
    const ::ckpt::Status mpi_check_status_ = (expr);                                           \
    if (!mpi_check_status_.ok()) ::mpi_test::fail(__FILE__, __LINE__, #expr + std::string(": ") + mpi_check_status_.to_string()); \
  } while (0)

// Prints the phase on rank 0 and returns whether every rank passed so far (a collective).
inline bool phase_passed(const char* name) {
  int mine = failures(), total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank() == 0) std::printf("%s: %s\n", total == 0 ? "passed" : "FAILED", name);
  std::fflush(stdout);
  return total == 0;
}

// Whether the job is the 4 ranks these tests are written for, given one path (named `arg` in the
// usage rank 0 prints otherwise). When not, MPI is finalized and main returns 2.
[[nodiscard]] inline bool four_ranks_and_a_path(int argc, char** argv, const char* arg) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 4 && argc == 2) return true;
  if (world_rank() == 0) std::fprintf(stderr, "usage: mpirun -np 4 %s %s\n", argv[0], arg);
  MPI_Finalize();
  return false;
}

// MPI_Init_thread asking for MPI_THREAD_MULTIPLE (a test whose ranks call MPI from two threads), then
// four_ranks_and_a_path. 0 to go on; else main's exit status (MPI finalized): 2 usage, 1 no thread support.
[[nodiscard]] inline int init_threaded(int& argc, char**& argv, const char* arg) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (!four_ranks_and_a_path(argc, argv, arg)) return 2;
  if (provided >= MPI_THREAD_MULTIPLE) return 0;
  if (world_rank() == 0) std::fprintf(stderr, "this MPI does not provide MPI_THREAD_MULTIPLE (got %d)\n", provided);
  MPI_Finalize();
  return 1;
}

// Exit status of the job: 0 when no rank failed anywhere.
inline int finish() {
  int mine = failures(), total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

}  // namespace mpi_test
