// ckpt tools: the MPI plumbing ckpt-bench-ranks and ckpt-bench-tiers share. Included only where the
// build found MPI (CKPT_BENCH_HAVE_MPI, cmake/tools-mpi.cmake).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "bench_util.hpp"
#include "cli.hpp"

namespace ckpt::bench {

// A barrier that sleeps while it waits: MPI's blocking barrier polls, and on a machine with fewer
// cores than ranks the waiting ranks would take CPU from the ones being measured.
inline void quiet_barrier(MPI_Comm comm) {
  MPI_Request request;
  if (MPI_Ibarrier(comm, &request) != MPI_SUCCESS) throw BenchError("MPI_Ibarrier failed");
  for (int done = 0;;) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw BenchError("MPI_Test failed");
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// cli::parse on every rank, but only rank 0 prints help and usage errors; every rank exits alike.
[[nodiscard]] inline int parse_on_every_rank(CLI::App& app, int rank, int argc, char** argv) {
  if (rank == 0) return cli::parse(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error& e) {
    return e.get_exit_code() == 0 ? 0 : cli::kUsage;
  }
  return -1;
}

// The end of a benchmark's main: runs the job unless rc (from parsing) already says how it ends,
// finalizes MPI and returns the worst exit status of every rank. An exception on one rank ends the
// whole job with abort_code(e): the other ranks may be waiting in a collective for this one.
template <class Job, class AbortCode>
int finish_job(const char* tool, int rank, int rc, Job&& job, AbortCode&& abort_code) {
  if (rc < 0) {
    try {
      rc = job();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: rank %d: %s\n", tool, rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, abort_code(e));
    }
  }
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

}  // namespace ckpt::bench
