// ckpt-bench-ranks: save and load throughput of a step written by 1, 2, 4... MPI ranks, against raw
// parallel writes and reads of the same bytes by the same ranks in the same run (spec/SHARDING.md 9).
//
//   mpirun -np 4 ckpt-bench-ranks --dir /scratch --size 1GiB --ranks 1,2,4 --repeat 3
//
// For each rank count k (the first k ranks; the others wait), S bytes (a U8 tensor of rows of 4 KiB,
// split evenly by rows) are saved as one committed step through the store's multi-rank transaction
// (collective begin, one shard per rank, coverage check, COMMIT by rank 0), and the same bytes are
// written raw: each rank its own file, pwrite in 8 MiB blocks, fsync, then the directory. Loads read
// each rank's rows back, verifying every chunk, against raw preads of the raw files; the page cache is
// dropped for those files first (posix_fadvise), so loads come from the device unless --warm.
// Built only where MPI is found (cmake/tools-mpi.cmake); elsewhere it says so and exits 2.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

#ifdef CKPT_BENCH_HAVE_MPI

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <thread>

#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/store/sharded.hpp>
#include <ckpt/store/store.hpp>

#include "bench_mpi.hpp"

namespace {

constexpr const char* kTool = "ckpt-bench-ranks";
using ckpt::bench::check;
using ckpt::bench::quiet_barrier;
constexpr std::uint64_t kRow = 4096;

struct Settings {
  std::string dir = ".";
  std::uint64_t size = std::uint64_t{256} << 20;
  std::vector<int> ranks = {1, 2, 4};
  int repeat = 3;
  bool warm = false;
  bool json = false;
};

struct Row {
  int ranks = 0;
  std::vector<double> save_ckpt, save_raw, load_ckpt, load_raw;
};

double mib_per_s(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / (1024.0 * 1024.0) / seconds : 0.0;
}

// One round for k ranks on the sub-communicator `comm`; returns the four timings (rank 0's view,
// barrier to barrier, so each is the slowest rank's).
std::vector<double> round_for(ckpt::MpiComm& comm, const Settings& s, const std::string& dir, int round) {
  const int rank = comm.rank(), k = comm.size();
  const std::uint64_t rows = s.size / kRow;
  const auto [first, count] = ckpt::split_range(rows, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(rank));
  const std::size_t bytes = static_cast<std::size_t>(count * kRow);
  ckpt::bench::Buffer data(bytes);
  ckpt::bench::fill_random(data.data(), bytes, 0x5eed + static_cast<std::uint64_t>(round) * 131 + static_cast<std::uint64_t>(first));
  const std::string store_path = dir + "/store-" + std::to_string(k) + "-" + std::to_string(round);
  const std::string raw_path = dir + "/raw-" + std::to_string(k) + "-" + std::to_string(round) + "-" + std::to_string(rank);
  ckpt::PosixFs fs;
  std::vector<double> out;
  auto timed = [&](const std::function<void()>& work) {
    quiet_barrier(comm.native());
    ckpt::bench::Stopwatch watch;
    work();
    quiet_barrier(comm.native());
    out.push_back(watch.seconds());
  };

  // Raw parallel write: each rank its own file, then rank 0 makes the directory entries durable.
  timed([&] {
    ckpt::bench::raw_write_file(raw_path, data.data(), bytes, std::size_t{8} << 20);
    quiet_barrier(comm.native());
    if (rank == 0) ckpt::bench::fsync_dir(dir);
  });
  // The same bytes as one committed step across k ranks.
  std::string shard_path;
  timed([&] {
    ckpt::StoreOptions options;
    options.create_if_missing = true;
    auto store = ckpt::Store::open(fs, store_path, ckpt::Access::read_write, options, comm);
    check(store.status(), "open " + store_path);
    auto tx = (*store)->begin(1);
    check(tx.status(), "begin");
    check((*tx)->begin_piece("w", ckpt::DType::U8, {rows, kRow}, {first, 0}, {count, kRow}), "begin_piece");
    check((*tx)->write(data.data(), bytes), "write");
    check((*tx)->end_piece(), "end_piece");
    auto committed = (*tx)->commit();
    check(committed.status(), "commit");
    shard_path = store_path + "/" + committed->step.dir + "/" + committed->step.files[static_cast<std::size_t>(rank)].name;
  });
  if (!s.warm) {
    ckpt::bench::drop_cached_pages(raw_path);
    ckpt::bench::drop_cached_pages(shard_path);
  }
  ckpt::bench::Buffer back(bytes);
  timed([&] { (void)ckpt::bench::raw_read_file(raw_path, back.data(), bytes, std::size_t{8} << 20); });
  timed([&] {
    auto store = ckpt::Store::open(fs, store_path, ckpt::Access::read_only);
    check(store.status(), "open " + store_path);
    auto reader = (*store)->open_latest();
    check(reader.status(), "open step");
    check(reader->read_slice("w", {first, 0}, {count, kRow}, back.data(), bytes, ckpt::ReadCheck::touched), "read_slice");
  });
  if (std::memcmp(back.data(), data.data(), bytes) != 0) throw ckpt::bench::BenchError("rank " + std::to_string(rank) + ": loaded bytes differ");
  check(comm.barrier(), "barrier");
  ckpt::bench::remove_if_present(raw_path);
  if (rank == 0) std::filesystem::remove_all(store_path);
  return out;  // save raw, save ckpt, load raw, load ckpt
}

int run(const Settings& s) {
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const int k : s.ranks)
    if (k < 1 || k > world) {
      if (rank == 0) std::fprintf(stderr, "%s: --ranks %d: the job has %d ranks (mpirun -np)\n", kTool, k, world);
      return ckpt::cli::kUsage;
    }
  if (s.size < kRow * static_cast<std::uint64_t>(world)) {
    if (rank == 0) std::fprintf(stderr, "%s: --size must be at least 4 KiB per rank\n", kTool);
    return ckpt::cli::kUsage;
  }
  std::string dir;
  if (rank == 0) {
    char tmpl[4096];
    std::snprintf(tmpl, sizeof tmpl, "%s/ckpt-bench-ranks-XXXXXX", s.dir.c_str());
    if (::mkdtemp(tmpl) == nullptr) ckpt::bench::throw_errno("cannot create a scratch directory in " + s.dir);
    dir = tmpl;
  }
  auto world_comm = ckpt::MpiComm::duplicate(MPI_COMM_WORLD);
  check(world_comm.status(), "MPI_Comm_dup");
  check(world_comm->broadcast(dir, 0), "broadcast");
  std::vector<Row> rows;
  std::string failure;
  for (const int k : s.ranks) {
    Row row;
    row.ranks = k;
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub != MPI_COMM_NULL) {
      {
        auto comm = ckpt::MpiComm::duplicate(sub);
        check(comm.status(), "MPI_Comm_dup");
        for (int i = 0; i < s.repeat; ++i) {
          const auto t = round_for(*comm, s, dir, i);
          row.save_raw.push_back(t[0]);
          row.save_ckpt.push_back(t[1]);
          row.load_raw.push_back(t[2]);
          row.load_ckpt.push_back(t[3]);
        }
      }
      MPI_Comm_free(&sub);
    }
    quiet_barrier(world_comm->native());  // ranks beyond k wait here without spinning
    rows.push_back(row);
  }
  if (rank == 0) std::filesystem::remove_all(dir);
  if (rank != 0) return ckpt::cli::kOk;

  const auto median = [](const std::vector<double>& v) { return ckpt::bench::summarize(v).median; };
  if (s.json) {
    nlohmann::json j;
    j["size"] = s.size;
    j["repeat"] = s.repeat;
    j["world"] = world;
    j["cold_load"] = !s.warm;
    j["unit"] = "MiB/s, median of the repeats";
    j["results"] = nlohmann::json::array();
    for (const auto& r : rows) {
      const double sc = mib_per_s(s.size, median(r.save_ckpt)), sr = mib_per_s(s.size, median(r.save_raw));
      const double lc = mib_per_s(s.size, median(r.load_ckpt)), lr = mib_per_s(s.size, median(r.load_raw));
      j["results"].push_back({{"ranks", r.ranks},
                              {"save_ckpt", sc}, {"save_raw", sr}, {"save_ratio", sr > 0 ? sc / sr : 0.0},
                              {"load_ckpt", lc}, {"load_raw", lr}, {"load_ratio", lr > 0 ? lc / lr : 0.0}});
    }
    ckpt::cli::print_json(j);
  } else {
    std::printf("ckpt-bench-ranks: %s per rank count, %d repeat%s (median), loads %s; MiB/s\n",
                ckpt::cli::human_bytes(static_cast<double>(s.size)).c_str(), s.repeat, s.repeat == 1 ? "" : "s",
                s.warm ? "from the page cache" : "after dropping cached pages");
    std::printf("%5s  %10s  %10s  %6s  %10s  %10s  %6s\n", "ranks", "save ckpt", "save raw", "ratio", "load ckpt", "load raw", "ratio");
    for (const auto& r : rows) {
      const double sc = mib_per_s(s.size, median(r.save_ckpt)), sr = mib_per_s(s.size, median(r.save_raw));
      const double lc = mib_per_s(s.size, median(r.load_ckpt)), lr = mib_per_s(s.size, median(r.load_raw));
      std::printf("%5d  %10.0f  %10.0f  %6.2f  %10.0f  %10.0f  %6.2f\n", r.ranks, sc, sr, sr > 0 ? sc / sr : 0.0, lc, lr,
                  lr > 0 ? lc / lr : 0.0);
    }
  }
  return ckpt::cli::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Settings s;
  std::string size_text = "256MiB", ranks_text = "1,2,4";
  CLI::App app{"Save and load throughput of one step written by 1, 2, 4... MPI ranks, against raw parallel\n"
               "writes (pwrite + fsync, one file per rank) and reads of the same bytes in the same run.\n"
               "Run under mpirun with at least as many ranks as the largest count:\n"
               "  mpirun -np 4 ckpt-bench-ranks --dir /scratch --size 1GiB\n"
               "With more ranks than cores, let MPI yield while it waits (Open MPI: --mca mpi_yield_when_idle 1),\n"
               "or ranks spinning in the store's gather take CPU from the ranks still writing.\n"
               "The size is the whole step, split evenly among the ranks of each count.\n\n"
               "Exit status: 0 measured, 2 bad arguments or an I/O error.",
               kTool};
  app.add_option("--dir", s.dir, "scratch directory on the file system to measure (default .)");
  app.add_option("--size", size_text, "bytes per step, e.g. 256MiB (default), 4GiB");
  app.add_option("--ranks", ranks_text, "rank counts to measure, comma separated (default 1,2,4)");
  app.add_option("--repeat", s.repeat, "rounds per rank count; the median is reported (default 3)")->check(CLI::Range(1, 100));
  app.add_flag("--warm", s.warm, "load from the page cache instead of dropping the files' cached pages first");
  app.add_flag("--json", s.json, "print a JSON document instead of the table");
  int rc = ckpt::bench::parse_on_every_rank(app, rank, argc, argv);
  if (rc < 0) {
    const auto size = ckpt::bench::parse_size(size_text);
    if (!size) {
      if (rank == 0) std::fprintf(stderr, "%s: --size '%s' is not a size\n", kTool, size_text.c_str());
      rc = ckpt::cli::kUsage;
    } else {
      s.size = *size;
    }
    s.ranks.clear();
    std::size_t at = 0;
    while (rc < 0 && at <= ranks_text.size()) {
      const std::size_t comma = std::min(ranks_text.find(',', at), ranks_text.size());
      const std::string item = ranks_text.substr(at, comma - at);
      if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) {
        if (rank == 0) std::fprintf(stderr, "%s: --ranks '%s': expected counts like 1,2,4\n", kTool, ranks_text.c_str());
        rc = ckpt::cli::kUsage;
        break;
      }
      s.ranks.push_back(std::stoi(item));
      at = comma + 1;
    }
  }
  return ckpt::bench::finish_job(kTool, rank, rc, [&] { return run(s); }, [](const std::exception&) { return ckpt::cli::kUsage; });
}

#else  // no MPI in this build

int main(int argc, char** argv) {
  CLI::App app{"Save and load throughput of one step written by several MPI ranks. This build of ckpt has no MPI\n"
               "(CMake did not find it), so this program only says so.",
               "ckpt-bench-ranks"};
  return ckpt::cli::main_without("MPI", app, argc, argv);
}

#endif
