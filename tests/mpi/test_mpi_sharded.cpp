// Multi-rank saves over MPI (spec/SHARDING.md), run as `mpirun -np 4 test_mpi_sharded DIR`:
//   1. a save across 4 ranks (uneven, inner-dimension and 2-D grid splits, a rank with nothing,
//      replicated tensors, a scalar);
//   2. loading it back with 1, 2, 3 and 4 ranks, each reading only its region: bit-identical;
//   3. a reshard round trip 4 -> 3 -> 4 through collective saves: every tensor bit-identical;
//   4. an I/O error on rank 2 abandons the step on every rank with the same Status;
//   5. pieces overlapping across ranks are refused on every rank, naming tensor and region;
//   6. a rank that returns early (its open transaction destroyed) fails the others' commit, no hang.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/store/store.hpp>

#include "../sharded_fixture.hpp"
#include "../store_test_util.hpp"
#include "mpi_test_util.hpp"

using namespace ckpt;
using namespace sharded_fixture;
namespace fsys = std::filesystem;

namespace {

StoreOptions small_options() { return ckpt_test::small_store_options(); }

std::string as_string(const std::vector<unsigned char>& v) { return std::string(v.begin(), v.end()); }

// Every rank's Status message must be the same: rank 0 compares what the others send.
void check_same_everywhere(MpiComm& comm, const Status& s, const char* what) {
  auto all = comm.gather(s.to_string(), 0);
  MPI_CHECK_OK(all.status());
  if (comm.rank() == 0 && all.ok())
    for (std::size_t r = 1; r < all->size(); ++r)
      MPI_CHECK((*all)[r] == (*all)[0], std::string(what) + ": rank " + std::to_string(r) + " returned '" + (*all)[r] +
                                            "', rank 0 '" + (*all)[0] + "'");
}

// Writes this rank's save slice of every tensor, read from another step at whatever world it was saved.
Status reshard_rank(StepReader& from, Transaction& tx, std::uint32_t world, std::uint32_t rank) {
  for (const auto& t : specs()) {
    const Slice slice = save_box(t, world, rank);
    std::vector<unsigned char> part(elements(slice.shape) * element_size(t.dtype));
    if (t.split != Split::replicated && part.empty()) continue;
    CKPT_TRY(from.read_slice(t.name, slice.offsets, slice.shape, part.data(), part.size()));
    if (t.split == Split::replicated) {
      CKPT_TRY(tx.add_replicated_tensor(t.name, t.dtype, t.shape, part.data(), part.size(), 0));
      continue;
    }
    CKPT_TRY(tx.begin_piece(t.name, t.dtype, t.shape, slice.offsets, slice.shape));
    CKPT_TRY(tx.write(part.data(), part.size()));
    CKPT_TRY(tx.end_piece());
  }
  if (rank == 0) tx.state() = from.state();
  return Status();
}

// Reshards the latest step of store `from` (saved by `from_world` ranks) into step 1 of store `to`,
// written collectively by the `world` ranks of comm, this one being `rank`.
void reshard_store(PosixFs& fs, const std::string& from_path, const std::string& to_path, MpiComm& comm, std::uint32_t from_world,
                   std::uint32_t world, std::uint32_t rank) {
  auto from = Store::open(fs, from_path, Access::read_only);
  auto to = Store::open(fs, to_path, Access::read_write, small_options(), comm);
  MPI_CHECK_OK(from.status());
  MPI_CHECK_OK(to.status());
  if (!from.ok() || !to.ok()) return;
  MPI_CHECK((*from)->latest() && (*from)->latest()->world_size == from_world,
            "the source step has " + std::to_string(from_world) + " shards");
  auto reader = (*from)->open_latest();
  auto tx = (*to)->begin(1);
  MPI_CHECK_OK(reader.status());
  MPI_CHECK_OK(tx.status());
  if (reader.ok() && tx.ok()) {
    MPI_CHECK_OK(reshard_rank(*reader, **tx, world, rank));
    MPI_CHECK_OK((*tx)->commit().status());
  }
}

// Phase 2: the first `world` ranks each read their even split along dimension 0; rank 0 reassembles.
void load_with(PosixFs& fs, const std::string& store_path, int world) {
  const int rank = mpi_test::world_rank();
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < world ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub == MPI_COMM_NULL) return;
  {
    auto comm = MpiComm::duplicate(sub);
    MPI_CHECK_OK(comm.status());
    auto store = Store::open(fs, store_path, Access::read_only, {}, *comm);  // collective read-only open
    MPI_CHECK_OK(store.status());
    if (store.ok()) {
      auto reader = (*store)->open_latest();
      MPI_CHECK_OK(reader.status());
      for (const auto& t : specs()) {
        const Slice slice = load_box(t, static_cast<std::uint32_t>(world), static_cast<std::uint32_t>(rank));
        std::vector<unsigned char> part(elements(slice.shape) * element_size(t.dtype));
        if (reader.ok() && !part.empty()) MPI_CHECK_OK(reader->read_slice(t.name, slice.offsets, slice.shape, part.data(), part.size()));
        auto parts = comm->gather(as_string(part), 0);
        MPI_CHECK_OK(parts.status());
        if (rank != 0 || !parts.ok()) continue;
        const auto expected = global_bytes(t, 1);
        std::vector<unsigned char> assembled(expected.size(), 0xEE);
        for (int r = 0; r < world; ++r) {
          const std::string& bytes = (*parts)[static_cast<std::size_t>(r)];
          place(assembled, t, load_box(t, static_cast<std::uint32_t>(world), static_cast<std::uint32_t>(r)),
                std::vector<unsigned char>(bytes.begin(), bytes.end()));
        }
        MPI_CHECK(assembled == expected, "tensor '" + t.name + "' loaded by " + std::to_string(world) + " ranks differs");
      }
    }
  }
  MPI_Comm_free(&sub);
}

}  // namespace

namespace {

void run_phases(const std::string& base) {
  const int rank = mpi_test::world_rank();
  if (rank == 0) {
    fsys::remove_all(base);
    fsys::create_directories(base);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().to_string().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  PosixFs fs;
  const std::string a = base + "/a", b = base + "/b", c = base + "/c", d = base + "/d", e = base + "/e";
  const auto r = static_cast<std::uint32_t>(rank);

  // 1. Save step 1 across 4 ranks.
  {
    auto store = Store::open(fs, a, Access::read_write, small_options(), *comm);
    MPI_CHECK_OK(store.status());
    MPI_CHECK(store.ok() && (*store)->coordinator() == (rank == 0), "only rank 0 coordinates");
    if (store.ok()) {
      auto tx = (*store)->begin(1);
      MPI_CHECK_OK(tx.status());
      if (tx.ok()) {
        MPI_CHECK_OK(save_rank(**tx, 4, r, 1));
        auto committed = (*tx)->commit();
        MPI_CHECK_OK(committed.status());
        if (committed.ok()) {
          MPI_CHECK(committed->step.step == 1 && committed->step.world_size == 4 && committed->step.files.size() == 4,
                    "every rank learns the committed step");
          MPI_CHECK((*store)->latest() && (*store)->latest()->txn == committed->step.txn, "every rank's view has the commit");
        }
      }
    }
  }
  mpi_test::phase_passed("save across 4 ranks");

  // 2. Load with 1, 2, 3 and 4 ranks.
  for (int w = 1; w <= 4; ++w) {
    load_with(fs, a, w);
    mpi_test::phase_passed(("load with " + std::to_string(w) + " rank" + (w == 1 ? "" : "s")).c_str());
  }

  // 3. Reshard 4 -> 3 -> 4 through collective saves, then compare every tensor whole.
  {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub != MPI_COMM_NULL) {
      {
        auto three = MpiComm::duplicate(sub);
        MPI_CHECK_OK(three.status());
        if (three.ok()) reshard_store(fs, a, b, *three, 4, 3, r);
      }
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    reshard_store(fs, b, c, *comm, 3, 4, r);
    if (rank == 0) {
      auto original = Store::open(fs, a, Access::read_only);
      auto final_store = Store::open(fs, c, Access::read_only);
      MPI_CHECK_OK(original.status());
      MPI_CHECK_OK(final_store.status());
      if (original.ok() && final_store.ok()) {
        auto ra = (*original)->open_latest();
        auto rc = (*final_store)->open_latest();
        MPI_CHECK_OK(ra.status());
        MPI_CHECK_OK(rc.status());
        if (ra.ok() && rc.ok()) {
          MPI_CHECK(rc->shard_count() == 4, "the final step has 4 shards");
          MPI_CHECK(rc->tensor_names() == ra->tensor_names(), "same tensors");
          for (const auto& t : specs()) {
            std::vector<unsigned char> x(elements(t.shape) * element_size(t.dtype)), y(x.size());
            MPI_CHECK_OK(ra->read_tensor(t.name, x.data(), x.size()));
            MPI_CHECK_OK(rc->read_tensor(t.name, y.data(), y.size()));
            MPI_CHECK(x == y && y == global_bytes(t, 1), "tensor '" + t.name + "' differs after 4 -> 3 -> 4");
          }
          MPI_CHECK(rc->state() == ra->state(), "the training state survives the round trip");
          MPI_CHECK_OK((*final_store)->verify_step(1).status());
        }
      }
    }
  }
  mpi_test::phase_passed("reshard round trip 4 -> 3 -> 4");

  // 4. Rank 2's disk fails mid-save: every rank returns the same error; the previous step stays latest.
  {
    PosixFs posix;
    FaultFs<PosixFs> faulty(posix, rank == 2 ? FaultPlan::nth(1, Fault::io_error, fs_op_bit(FsOp::pwrite)) : FaultPlan{});
    FaultFs<PosixFs> good(posix);
    {
      auto store = Store::open(good, d, Access::read_write, small_options(), *comm);
      MPI_CHECK_OK(store.status());
      auto tx = (*store)->begin(1);
      MPI_CHECK_OK(tx.status());
      MPI_CHECK_OK(save_rank(**tx, 4, r, 1));
      MPI_CHECK_OK((*tx)->commit().status());
    }
    Status result;
    {
      auto store = Store::open(faulty, d, Access::read_write, small_options(), *comm);
      MPI_CHECK_OK(store.status());
      auto tx = (*store)->begin(2);
      MPI_CHECK_OK(tx.status());
      std::vector<unsigned char> row(64 << 10, static_cast<unsigned char>(rank));  // one direct pwrite inside write()
      Status s = (*tx)->begin_piece("big", DType::U8, {4, 64 << 10}, {r, 0}, {1, 64 << 10});
      if (s.ok()) s = (*tx)->write(row.data(), row.size());
      if (s.ok()) s = (*tx)->end_piece();
      MPI_CHECK(rank == 2 ? s.code() == Code::io : s.ok(), "only rank 2 sees its write fail at once: " + s.to_string());
      result = (*tx)->commit().status();
    }
    MPI_CHECK(result.code() == Code::io, "commit fails on every rank: " + result.to_string());
    MPI_CHECK(result.message().find("abandoned on every rank, the previous step is untouched: rank 2: ") != std::string::npos,
              "names rank 2: " + result.message());
    check_same_everywhere(*comm, result, "the failed commit");
    auto store = Store::open(posix, d, Access::read_only);
    MPI_CHECK_OK(store.status());
    if (store.ok()) {
      MPI_CHECK((*store)->latest() && (*store)->latest()->step == 1, "step 1 is still the latest");
      const auto& txns = (*store)->transactions();
      MPI_CHECK(txns.size() == 2 && txns[1].state == TxnState::aborted && !fsys::exists(d + "/" + txns[1].dir()),
                "the failed transaction is aborted and its files removed");
    }
  }
  mpi_test::phase_passed("an I/O error on rank 2 aborts on every rank");

  // 5. Ranks 1 and 2 write overlapping rows: refused on every rank before commit.
  {
    Status result;
    {
      auto store = Store::open(fs, e, Access::read_write, small_options(), *comm);
      MPI_CHECK_OK(store.status());
      auto tx = (*store)->begin(1);
      MPI_CHECK_OK(tx.status());
      // Rows: rank 0 [0, 2), rank 1 [2, 5), rank 2 [4, 6), rank 3 [6, 8): row 4 twice.
      const std::uint64_t first[] = {0, 2, 4, 6}, count[] = {2, 3, 2, 2};
      std::vector<unsigned char> bytes(count[rank] * 3, 7);
      MPI_CHECK_OK((*tx)->begin_piece("w", DType::U8, {8, 3}, {first[rank], 0}, {count[rank], 3}));
      MPI_CHECK_OK((*tx)->write(bytes.data(), bytes.size()));
      MPI_CHECK_OK((*tx)->end_piece());
      result = (*tx)->commit().status();
    }
    MPI_CHECK(result.code() == Code::invalid_argument, result.to_string());
    MPI_CHECK(result.message().find("tensor 'w': the piece of rank 1 at offsets [2, 0] shape [3, 3] and the piece of rank 2 at "
                                    "offsets [4, 0] shape [2, 3] overlap in offsets [4, 0] shape [1, 3]") != std::string::npos,
              result.message());
    check_same_everywhere(*comm, result, "the refused commit");
    auto store = Store::open(fs, e, Access::read_only);
    MPI_CHECK(store.ok() && !(*store)->latest(), "nothing was committed");
  }
  mpi_test::phase_passed("overlapping pieces across ranks are refused everywhere");

  // 6. Rank 1 returns early, destroying its open transaction: its destructor enters no collective; it
  // leaves the communicator, so the other ranks' commit fails naming it instead of waiting (spec 3.4).
  {
    auto broken = MpiComm::duplicate(MPI_COMM_WORLD);  // this one ends broken; *comm stays usable
    MPI_CHECK_OK(broken.status());
    const std::string g = base + "/g";
    Status result;
    if (broken.ok()) {
      auto store = Store::open(fs, g, Access::read_write, small_options(), *broken);
      MPI_CHECK_OK(store.status());
      auto tx = (*store)->begin(1);
      MPI_CHECK_OK(tx.status());
      MPI_CHECK_OK(save_rank(**tx, 4, r, 1));
      if (rank != 1) result = (*tx)->commit().status();
    }  // rank 1: transaction and store destroyed here, without waiting for anyone
    if (rank != 1)
      MPI_CHECK(!result.ok() && result.message().find("rank 1 dropped step 1 (txn 1)") != std::string::npos,
                "the others' commit fails naming rank 1: " + result.to_string());
    MPI_CHECK_OK(comm->barrier());  // rank 0 has abandoned the step by now
    auto store = Store::open(fs, g, Access::read_only);
    MPI_CHECK_OK(store.status());
    if (store.ok()) {
      const auto& txns = (*store)->transactions();
      MPI_CHECK(!(*store)->latest() && txns.size() == 1 && txns[0].state == TxnState::aborted &&
                    !fsys::exists(g + "/" + txns[0].dir()),
                "nothing committed; the dropped transaction is aborted and its files removed");
    }
  }
  mpi_test::phase_passed("a rank that drops its transaction fails the others' commit; nobody hangs");

}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (!mpi_test::four_ranks_and_a_path(argc, argv, "SCRATCH_DIR")) return 2;
  run_phases(argv[1]);  // every communicator it made is freed before MPI_Finalize
  return mpi_test::finish();
}
