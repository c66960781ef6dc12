// Async saves across 4 MPI ranks (spec/ASYNC.md 2, 4): every rank's worker joins the same collective
// BEGIN and COMMIT; WhenBusy::skip agrees on a control communicator so every rank skips the same steps;
// rank 2's failing disk aborts the step on every rank, and the previous step stays the latest.
// Run by cmake/tests-mpi.cmake: mpirun -np 4 test_mpi_async SCRATCH_DIR.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/store/store.hpp>

#include "mpi_test_util.hpp"

using namespace ckpt;

namespace {

StoreOptions small_options(bool create = false) {
  StoreOptions o;
  o.create_if_missing = create;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = 9;
  return o;
}

AsyncSaveOptions saver_options() {
  AsyncSaveOptions o;
  o.staging_bytes = 64 << 10;  // smaller than a rank's share: it streams through
  o.slab_bytes = 16 << 10;
  return o;
}

constexpr std::uint64_t kRows = 1024, kCols = 256;  // U8 [1024, 256]; 256 rows per rank

// Rank r's rows of step `step`: every byte is step + r (mod 256).
std::vector<unsigned char> rank_rows(int rank, std::uint64_t step) {
  return std::vector<unsigned char>(kRows / 4 * kCols, static_cast<unsigned char>(step + static_cast<std::uint64_t>(rank)));
}

SaveRequest rank_request(int rank, std::uint64_t step, const std::vector<unsigned char>& rows) {
  SaveRequest r(step);
  r.add_piece("w", DType::U8, {kRows, kCols}, {static_cast<std::uint64_t>(rank) * (kRows / 4), 0}, {kRows / 4, kCols}, rows.data(),
              rows.size());
  r.state().values["saved_by"] = "test_mpi_async";
  return r;
}

void check_step(const std::string& dir, std::uint64_t step) {
  PosixFs fs;
  auto store = Store::open(fs, dir, Access::read_only);
  MPI_CHECK(store.ok(), store.status().to_string());
  if (!store.ok()) return;
  auto reader = (*store)->open_step(step);
  MPI_CHECK(reader.ok(), reader.status().to_string());
  if (!reader.ok()) return;
  std::vector<unsigned char> all(kRows * kCols);
  MPI_CHECK_OK(reader->read_tensor("w", all.data(), all.size()));
  for (int r = 0; r < 4; ++r)
    MPI_CHECK(all[static_cast<std::size_t>(r) * (kRows / 4) * kCols + 7] == static_cast<unsigned char>(step + static_cast<std::uint64_t>(r)),
              "rank " + std::to_string(r) + "'s rows of step " + std::to_string(step));
}

void run_phases(const std::string& scratch) {
  const int rank = mpi_test::world_rank();
  auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
  auto control = MpiComm::duplicate(MPI_COMM_WORLD);
  if (!comm.ok() || !control.ok()) {
    mpi_test::fail(__FILE__, __LINE__, "MpiComm::duplicate failed");
    return;
  }
  PosixFs posix;
  const std::string dir = scratch + "/async";
  if (rank == 0) {
    std::filesystem::remove_all(scratch);  // a rerun in the same build tree starts from an empty store
    ::mkdir(scratch.c_str(), 0755);
    auto created = Store::open(posix, dir, Access::read_write, small_options(true));
    MPI_CHECK(created.ok(), created.status().to_string());
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // 1. Three async saves on every rank; each returns after staging, all commit in order.
  {
    auto store = Store::open(posix, dir, Access::read_write, small_options(), *comm);
    MPI_CHECK(store.ok(), store.status().to_string());
    if (store.ok()) {
      auto saver = AsyncSaver::create(**store, saver_options());
      MPI_CHECK(saver.ok(), saver.status().to_string());
      if (saver.ok()) {
        for (std::uint64_t step : {10, 20, 30}) {
          const auto rows = rank_rows(rank, step);
          auto ticket = (*saver)->save(rank_request(rank, step, rows));
          MPI_CHECK(ticket.ok() && !ticket->skipped, ticket.status().to_string());
        }
        MPI_CHECK_OK((*saver)->wait());
      }
      if (rank == 0) {
        MPI_CHECK((*store)->latest() && (*store)->latest()->step == 30, "step 30 is the latest");
        const auto records = (*store)->save_records();
        MPI_CHECK(records.size() == 3 && records.back().async, "three async SAVE_STATS records");
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_step(dir, 30);
  mpi_test::phase_passed("async saves on 4 ranks join one collective commit each");

  // 2. WhenBusy::skip with a control communicator: a second save arrives at once, usually while the
  // first is still in flight on some rank; whatever each rank saw, every rank decides alike.
  {
    FaultFs<PosixFs> fs(posix);
    auto store = Store::open(fs, dir, Access::read_write, small_options(), *comm);
    MPI_CHECK(store.ok(), store.status().to_string());
    if (store.ok()) {
      AsyncSaveOptions o = saver_options();
      o.when_busy = WhenBusy::skip;
      auto saver = AsyncSaver::create(**store, o, *control);
      MPI_CHECK(saver.ok(), saver.status().to_string());
      if (saver.ok()) {
        const auto rows40 = rank_rows(rank, 40), rows50 = rank_rows(rank, 50);
        auto first = (*saver)->save(rank_request(rank, 40, rows40));
        MPI_CHECK(first.ok() && !first->skipped, first.status().to_string());
        // Immediately again: at least rank 0's worker is still in the collective commit of step 40.
        auto second = (*saver)->save(rank_request(rank, 50, rows50));
        MPI_CHECK(second.ok(), second.status().to_string());
        int skipped = second.ok() && second->skipped ? 1 : 0, all_skipped = 0, any_skipped = 0;
        MPI_Allreduce(&skipped, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&skipped, &any_skipped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_CHECK(all_skipped == any_skipped, "every rank made the same skip decision");
        MPI_CHECK_OK((*saver)->wait());
        if (rank == 0) {
          const auto latest = (*store)->latest();
          MPI_CHECK(latest && latest->step == (any_skipped ? 40u : 50u), "the latest step matches the skip decision");
          std::printf("skip phase: the second save was %s on every rank\n", any_skipped ? "skipped" : "taken");
        }
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  mpi_test::phase_passed("WhenBusy::skip across ranks: every rank skips the same steps");

  // 3. Rank 2's shard writes fail with EIO: every rank's wait() reports step 60 abandoned naming rank 2.
  std::uint64_t before = 0;
  {
    FaultFs<PosixFs> fs(posix);
    auto store = Store::open(fs, dir, Access::read_write, small_options(), *comm);
    MPI_CHECK(store.ok(), store.status().to_string());
    if (store.ok()) {
      before = (*store)->latest() ? (*store)->latest()->step : 0;
      if (rank == 2) fs.set_plan(FaultPlan::from(1, Fault::io_error, fs_op_bit(FsOp::pwrite)));
      auto saver = AsyncSaver::create(**store, saver_options());
      MPI_CHECK(saver.ok(), saver.status().to_string());
      if (saver.ok()) {
        const auto rows = rank_rows(rank, 60);
        auto ticket = (*saver)->save(rank_request(rank, 60, rows));
        MPI_CHECK(ticket.ok(), ticket.status().to_string());
        const Status s = (*saver)->wait();
        MPI_CHECK(!s.ok() && s.message().find("step 60") != std::string::npos && s.message().find("rank 2") != std::string::npos,
                  "every rank reports step 60 abandoned by rank 2: " + s.to_string());
      }
      fs.set_plan({});
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    auto store = Store::open(posix, dir, Access::read_write, small_options());
    MPI_CHECK(store.ok() && !(*store)->recovery_report().corrupt(), "the store recovers cleanly");
    if (store.ok()) MPI_CHECK((*store)->latest() && (*store)->latest()->step == before, "the previous step is still the latest");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  mpi_test::phase_passed("a failing rank aborts the async save on every rank");
}

}  // namespace

int main(int argc, char** argv) {
  // The saver's worker calls MPI from its own thread while save() may use the control communicator.
  if (const int early = mpi_test::init_threaded(argc, argv, "SCRATCH_DIR")) return early;
  run_phases(argv[1]);
  return mpi_test::finish();
}
