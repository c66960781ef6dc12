// A rank killed mid-save (spec/SHARDING.md 8), run as `mpirun -np 4 test_mpi_kill STORE`: step 1 is
// saved across 4 ranks; then step 2 begins, ranks 0, 1 and 3 write their whole shard and wait in
// commit(), and rank 2 writes half of its shard, leaves a marker next to the store, and SIGKILLs
// itself. mpirun then tears the job down, so this program never exits 0: CTest expects it to fail,
// and check_kill_recovery (one process, writable open) checks what recovery makes of the store.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/store/store.hpp>

#include "../sharded_fixture.hpp"
#include "mpi_test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

constexpr std::uint64_t kRowBytes = std::uint64_t{1} << 20;  // each rank's part of step 2: 1 MiB

StoreOptions options() {
  StoreOptions o;
  o.create_if_missing = true;
  o.chunk_size_log2 = 16;
  return o;
}

void run(const std::string& path) {
  const int rank = mpi_test::world_rank();
  const auto r = static_cast<std::uint32_t>(rank);
  if (rank == 0) {
    fsys::remove_all(path);
    fsys::remove(path + ".marker");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
  MPI_CHECK_OK(comm.status());
  if (!comm.ok()) return;
  PosixFs fs;
  auto store = Store::open(fs, path, Access::read_write, options(), *comm);
  MPI_CHECK_OK(store.status());
  if (!store.ok()) return;
  {
    auto tx = (*store)->begin(1);
    MPI_CHECK_OK(tx.status());
    if (!tx.ok()) return;
    MPI_CHECK_OK(sharded_fixture::save_rank(**tx, 4, r, 1));
    MPI_CHECK_OK((*tx)->commit().status());
  }
  // A file of the user's in the store: recovery must leave it alone.
  if (rank == 0) std::ofstream(path + "/README") << "not the store's\n";
  if (!mpi_test::phase_passed("step 1 saved across 4 ranks")) return;

  auto tx = (*store)->begin(2);
  MPI_CHECK_OK(tx.status());
  if (!tx.ok()) return;
  std::vector<unsigned char> row(kRowBytes, static_cast<unsigned char>(0x40 + rank));
  MPI_CHECK_OK((*tx)->begin_piece("big", DType::U8, {4, kRowBytes}, {r, 0}, {1, kRowBytes}));
  MPI_CHECK_OK((*tx)->write(row.data(), row.size() / 2));
  if (rank == 2) {
    // Half the shard is in the file (direct pwrite); say so, then die without a chance to clean up.
    std::ofstream(path + ".marker") << "rank 2 wrote half of its shard of step 2, then SIGKILL\n";
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
  MPI_CHECK_OK((*tx)->write(row.data() + row.size() / 2, row.size() - row.size() / 2));
  MPI_CHECK_OK((*tx)->end_piece());
  // Waits in the gather for rank 2's report, which never comes: mpirun kills this rank there.
  auto result = (*tx)->commit();
  std::fprintf(stderr, "rank %d: commit returned %s although rank 2 died\n", rank, result.status().to_string().c_str());
  mpi_test::fail(__FILE__, __LINE__, "commit returned");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (!mpi_test::four_ranks_and_a_path(argc, argv, "STORE")) return 2;
  run(argv[1]);
  return mpi_test::finish();
}
