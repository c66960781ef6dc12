// Multi-rank saves over MPI into an object store (spec/OBJECT.md 4.7), run by cmake/tests-object.cmake as
// `s3-test-server.py --server moto run -- mpirun -np 4 test_mpi_objects`:
//   1. rank 0 alone probes and lists; every rank agrees on the (empty) store;
//   2. 4 ranks each upload their piece of every tensor over their own connections, rank 0 commits;
//   3. every rank reopens the store and reads the whole tensor back, verified;
//   4. a rank that abandons the save (abort on rank 2 only is refused; its transaction dropped) makes
//      every other rank's commit fail, and the step before stays the latest.
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>

#include "../test_util.hpp"
#include "mpi_test_util.hpp"

using namespace ckpt;
using namespace ckpt::object;

namespace {

constexpr std::size_t kPiece = std::size_t{6} << 20;  // each rank's piece: two parts of S3's smallest size

StoreOptions options() {
  StoreOptions o;
  o.create_if_missing = true;
  o.io.part_size = limits::kMinPartSize;
  o.io.parallel_parts = 2;
  return o;
}

Status save(Store& store, std::uint64_t step, int rank, const std::vector<unsigned char>& full, bool drop) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  CKPT_TRY(tx->begin_piece("w", DType::U8, Shape{full.size()}, Shape{static_cast<std::uint64_t>(rank) * kPiece}, Shape{kPiece}));
  CKPT_TRY(tx->write(full.data() + static_cast<std::size_t>(rank) * kPiece, kPiece));
  CKPT_TRY(tx->end_piece());
  if (drop) return make_error(Code::cancelled, "rank dropped its transaction");  // destroyed here, uncommitted
  return tx->commit().status();
}

void run(MpiComm& comm, const std::string& url) {
  const int rank = comm.rank();
  auto client = open_s3_url(url);
  MPI_CHECK_OK(client.status());
  if (!client.ok()) return;
  auto store = Store::open(object_log(**client), Access::read_write, options(), comm);
  MPI_CHECK_OK(store.status());
  if (!store.ok()) return;
  MPI_CHECK(!(*store)->latest(), "a new store has no step");
  const auto step1 = ckpt_test::random_bytes(4 * kPiece, 1), step2 = ckpt_test::random_bytes(4 * kPiece, 2);
  MPI_CHECK_OK(save(**store, 1, rank, step1, false));
  if (!mpi_test::phase_passed("4 ranks save one step into the object store")) return;

  auto reader_client = open_s3_url(url);
  MPI_CHECK_OK(reader_client.status());
  auto reader = Store::open(object_log(**reader_client), Access::read_only, StoreOptions{}, comm);
  MPI_CHECK_OK(reader.status());
  if (reader.ok()) {
    auto step = (*reader)->open_step(1);
    MPI_CHECK_OK(step.status());
    std::vector<unsigned char> got(step1.size());
    if (step.ok()) MPI_CHECK_OK(step->read_tensor("w", got.data(), got.size()));
    MPI_CHECK(got == step1, "step 1 reads back bit for bit on rank " + std::to_string(rank));
  }
  mpi_test::phase_passed("every rank reads the step back, verified");

  // Rank 2 drops its transaction: it leaves the communicator, so the others' commit fails, not hangs.
  Status s = save(**store, 2, rank, step2, rank == 2);
  MPI_CHECK(!s.ok(), "the save of step 2 must fail on rank " + std::to_string(rank));
  mpi_test::phase_passed("a rank that drops the save fails it everywhere");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* base = std::getenv("CKPT_S3_TEST_URL");
  if (world != 4 || base == nullptr) {
    if (mpi_test::world_rank() == 0) std::fprintf(stderr, "usage: CKPT_S3_TEST_URL=s3://bucket/ mpirun -np 4 %s\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  {
    auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
    MPI_CHECK_OK(comm.status());
    if (comm.ok()) {
      // One fresh prefix for the job, drawn by rank 0.
      std::string prefix = "mpi" + std::to_string(std::random_device{}());
      MPI_CHECK_OK(comm->broadcast(prefix, 0));
      run(*comm, std::string(base) + prefix);
      // After a rank left, the communicator is broken for collectives: judge with MPI directly.
    }
  }
  return mpi_test::finish();
}
