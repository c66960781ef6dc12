// MpiComm's point-to-point members across 4 MPI ranks (spec/TIERS.md 4.2): recv_into puts a message that
// fits straight at the destination and a longer one in the string, from every rank to its neighbour at
// once; recv (recv_into without a destination) gets every size whole.
// Run by cmake/tests-mpi.cmake: mpirun -np 4 test_mpi_comm SCRATCH_DIR.
#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/dist/mpi_comm.hpp>

#include "mpi_test_util.hpp"

using namespace ckpt;

namespace {

constexpr std::size_t kRoom = std::size_t{1} << 20;  // the receiver's destination
const std::vector<std::size_t> kSizes{0, 1, 4096, kRoom - 1, kRoom, kRoom + 1, 3 * kRoom};

// Message i from rank r: every byte depends on both and on its place, so a misplaced byte is found.
std::string pattern(std::size_t n, int r, std::size_t i) {
  std::string s(n, '\0');
  for (std::size_t k = 0; k < n; ++k) s[k] = static_cast<char>((k * 131 + static_cast<std::size_t>(r) * 17 + i * 7) & 0xff);
  return s;
}

void run_phases() {
  const int rank = mpi_test::world_rank();
  auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
  if (!comm.ok()) {
    mpi_test::fail(__FILE__, __LINE__, "MpiComm::duplicate failed: " + comm.status().to_string());
    return;
  }
  const int next = (rank + 1) % 4, prev = (rank + 3) % 4;

  // 1. recv_into: each rank sends to its next from a second thread (a ring of blocking sends could wait on
  // each other) while its main thread receives from its previous.
  {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kSizes.size(); ++i) out.push_back(pattern(kSizes[i], rank, i));
    std::vector<char> dst(kRoom + 64, '-');
    std::string bytes;
    Status sent;
    std::thread sender([&] {
      for (std::size_t i = 0; i < kSizes.size() && sent.ok(); ++i) sent = comm->send(out[i], next, 7);
    });
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      std::fill(dst.begin(), dst.end(), '-');
      bytes = "stale";
      auto got = comm->recv_into(dst.data(), kRoom, bytes, prev, 7);
      MPI_CHECK(got.ok(), "recv_into message " + std::to_string(i) + ": " + got.status().to_string());
      if (!got.ok()) break;
      const bool fits = kSizes[i] <= kRoom;
      const std::string expected = pattern(kSizes[i], prev, i);
      MPI_CHECK(got->in_place == fits, "message " + std::to_string(i) + " of " + std::to_string(kSizes[i]) + " bytes: landed " +
                                           (got->in_place ? "in place" : "in the string"));
      MPI_CHECK(got->size == kSizes[i], "message " + std::to_string(i) + ": size " + std::to_string(got->size));
      if (fits) {
        MPI_CHECK(std::string(dst.data(), kSizes[i]) == expected, "message " + std::to_string(i) + " differs in place");
        MPI_CHECK(std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(kSizes[i]), dst.end(), [](char c) { return c == '-'; }),
                  "message " + std::to_string(i) + " wrote past its size");
      } else {
        MPI_CHECK(bytes == expected, "message " + std::to_string(i) + " differs in the string");
        MPI_CHECK(dst[0] == '-', "message " + std::to_string(i) + " touched the destination it does not fit");
      }
    }
    sender.join();
    MPI_CHECK_OK(sent);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  mpi_test::phase_passed("recv_into lands a message that fits in place and a longer one in the string");

  // 2. recv: the same messages whole, in order, on another tag.
  {
    Status sent;
    std::thread sender([&] {
      for (std::size_t i = 0; i < kSizes.size() && sent.ok(); ++i) sent = comm->send(pattern(kSizes[i], rank, i), next, 8);
    });
    std::string bytes;
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      MPI_CHECK_OK(comm->recv(bytes, prev, 8));
      MPI_CHECK(bytes == pattern(kSizes[i], prev, i), "recv message " + std::to_string(i) + " differs");
    }
    sender.join();
    MPI_CHECK_OK(sent);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  mpi_test::phase_passed("recv gets every size whole and in order");
}

}  // namespace

int main(int argc, char** argv) {
  // Each rank sends from a second thread while its main thread receives.
  if (const int early = mpi_test::init_threaded(argc, argv, "SCRATCH_DIR")) return early;
  run_phases();
  return mpi_test::finish();
}
