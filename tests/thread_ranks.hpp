// Runs one body per rank on threads over one ThreadGroup (thread_comm.hpp), the multi-rank protocol
// without MPI. A rank whose body fails leaves the group, so the others' collectives fail instead of
// waiting; a hang here is a failure of the protocol under test.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include <ckpt/dist/thread_comm.hpp>

namespace ckpt_test {

// Runs body(rank, comm) on `world` threads, one ThreadComm each; returns each rank's Status.
inline std::vector<ckpt::Status> run_ranks(int world, const std::function<ckpt::Status(std::uint32_t, ckpt::ThreadComm&)>& body) {
  ckpt::ThreadGroup group(world);
  std::vector<ckpt::Status> out(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ckpt::ThreadComm comm(group, r);
      out[static_cast<std::size_t>(r)] = body(static_cast<std::uint32_t>(r), comm);
      if (!out[static_cast<std::size_t>(r)].ok()) comm.leave(out[static_cast<std::size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace ckpt_test
