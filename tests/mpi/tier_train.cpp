// A training job on the tiers (spec/TIERS.md 9), one MPI rank per simulated node, run by
// tests/mpi/tier_failures.py: it resumes whatever the tiers agree on, trains to --steps, and rank 0
// prints one JSON line: the resumed step, where each rank's shards came from, and whether the final
// state is bit-identical to an uninterrupted run's. --kill PHASE:STEP:RANK makes that rank SIGKILL
// itself at that point ("train": the start of a step, after the captures in flight finished on that
// rank; the others are TierOptions::on_phase's, inside a capture or the resume).
//
//   mpirun -np 4 tier_train --root DIR --nodes n0,n1,n2,n3 --steps 10 [--kill replicating:6:1]
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <ckpt/dist/mpi_comm.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "../tier_trainer.hpp"

using namespace ckpt;
using namespace ckpt::tiers;

namespace {

constexpr std::uint64_t kElems = 1 << 15;

struct Args {
  std::string root, kill_phase;
  std::vector<std::string> nodes;
  std::uint64_t steps = 10, kill_step = 0;
  int kill_rank = -1;
  std::uint64_t norm = 0;  // floats of a replicated tensor every rank holds (the SDC canary's, spec/TIERS.md 11)
  std::uint64_t sdc_step = 0;  // flip a bit of rank sdc_rank's copy of it after training this step
  int sdc_rank = -1;
  int parity_group = 0, parity_losses = 0;  // parity groups instead of replicas (spec/TIERS.md 12)
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--root") a.root = v;
    else if (k == "--nodes") a.nodes = split(v, ',');
    else if (k == "--steps") a.steps = std::stoull(v);
    else if (k == "--kill") {
      auto p = split(v, ':');
      if (p.size() != 3) return false;
      a.kill_phase = p[0], a.kill_step = std::stoull(p[1]), a.kill_rank = std::stoi(p[2]);
    } else if (k == "--norm") {
      a.norm = std::stoull(v);
    } else if (k == "--parity") {
      auto p = split(v, ':');
      if (p.size() != 2) return false;
      a.parity_group = std::stoi(p[0]), a.parity_losses = std::stoi(p[1]);
    } else if (k == "--sdc") {
      auto p = split(v, ':');
      if (p.size() != 2) return false;
      a.sdc_step = std::stoull(p[0]), a.sdc_rank = std::stoi(p[1]);
    } else return false;
  }
  return !a.root.empty() && !a.nodes.empty();
}

void maybe_die(const Args& a, int rank, const char* phase, std::uint64_t step) {
  if (rank == a.kill_rank && step == a.kill_step && a.kill_phase == phase) {
    std::fprintf(stderr, "rank %d: SIGKILL at %s of step %llu\n", rank, phase, static_cast<unsigned long long>(step));
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

int run(const Args& a) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (static_cast<int>(a.nodes.size()) != world) {
    if (rank == 0) std::fprintf(stderr, "tier_train: %zu nodes named for %d ranks\n", a.nodes.size(), world);
    return 2;
  }
  auto comm = MpiComm::duplicate(MPI_COMM_WORLD);
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().to_string().c_str()), 2;
  // Promotions on a promoter of their own (spec/TIERS.md 4.4), so the kills during promotion hit that thread.
  auto control = MpiComm::duplicate(MPI_COMM_WORLD), promotion = MpiComm::duplicate(MPI_COMM_WORLD);
  if (!control.ok() || !promotion.ok()) return std::fprintf(stderr, "MPI_Comm_dup failed\n"), 2;
  PosixFs fs;
  TierOptions o;
  o.memory_root = a.root + "/node-" + a.nodes[static_cast<std::size_t>(rank)];
  o.persistent = a.root + "/persistent";
  o.memory_every = 2, o.persist_every = 4, o.replicas = 1, o.memory_keep = 2, o.chunk_size_log2 = 12;
  o.transfer_block = 10000;
  if (a.parity_group != 0) o.replicas = 0, o.parity_group = a.parity_group, o.parity_losses = a.parity_losses;
  o.when_busy = WhenBusy::wait;  // every capture taken: the kill points name steps that exist
  Topology t;
  t.node_of_rank = a.nodes;
  o.topology = t;
  o.on_phase = [&](const char* phase, std::uint64_t step) { maybe_die(a, rank, phase, step); };
  o.on_sdc = [&](const SdcFinding& f) {
    std::fprintf(stderr, "rank %d: SDC at step %llu: %s\n", rank, static_cast<unsigned long long>(f.step), f.describe().c_str());
  };
  auto tiers = TieredCheckpointer::create(fs, *comm, *control, *promotion, o);
  if (!tiers.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, tiers.status().to_string().c_str()), 1;
  tier_trainer::Trainer trainer(kElems, world, rank);
  if (a.norm != 0) trainer.with_norm(a.norm);
  auto resumed = (*tiers)->resume([&](TierView& v) { return trainer.load(v); });
  if (!resumed.ok()) return std::fprintf(stderr, "rank %d: resume: %s\n", rank, resumed.status().to_string().c_str()), 1;
  for (const auto& s : resumed->setbacks) std::fprintf(stderr, "rank %d: setback: %s\n", rank, s.c_str());
  for (std::uint64_t s = resumed->next_step() == 0 ? 1 : resumed->next_step(); s <= a.steps; ++s) {
    // A failure between steps, once the captures in flight are done (a capture takes far less than an
    // interval); failures inside a capture are the other phases.
    if (rank == a.kill_rank && s == a.kill_step && a.kill_phase == "train") (void)(*tiers)->wait();
    maybe_die(a, rank, "train", s);
    trainer.train(s);
    if (rank == a.sdc_rank && s == a.sdc_step && !trainer.norm.empty()) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &trainer.norm[trainer.norm.size() / 2], 4);
      bits ^= 1u << 3;  // a silent bit flip in this rank's copy of a tensor every rank holds
      std::memcpy(&trainer.norm[trainer.norm.size() / 2], &bits, 4);
    }
    auto step = (*tiers)->step(s, [&](SaveRequest& r) { trainer.fill(r); });
    if (!step.ok()) return std::fprintf(stderr, "rank %d: step %llu: %s\n", rank, static_cast<unsigned long long>(s), step.status().to_string().c_str()), 1;
  }
  Status waited = (*tiers)->wait();
  if (!waited.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, waited.to_string().c_str()), 1;
  // Gather every rank's slice and where it loaded from; rank 0 compares with the uninterrupted run.
  std::string sources;
  for (const auto& s : resumed->sources) sources += (sources.empty() ? "" : "; ") + s;
  auto slices = comm->gather(trainer.bytes(), 0);
  auto where = comm->gather(sources, 0);
  if (!slices.ok() || !where.ok()) return 1;
  if (rank == 0) {
    bool identical = tier_trainer::assemble(*slices, kElems) == tier_trainer::reference(kElems, a.steps);
    if (a.norm != 0) {
      tier_trainer::Trainer reference(kElems, 1, 0);
      reference.with_norm(a.norm);
      for (std::uint64_t s = 1; s <= a.steps; ++s) reference.train(s);
      identical = identical && trainer.norm == reference.norm;  // rank 0's copy; every rank loaded the same
    }
    std::printf("{\"resumed\": %lld, \"world_of_step\": %u, \"identical\": %s, \"sources\": [", resumed->fresh ? -1LL : static_cast<long long>(resumed->step),
                resumed->world, identical ? "true" : "false");
    for (std::size_t r = 0; r < where->size(); ++r) std::printf("%s\"%s\"", r ? ", " : "", json_escape((*where)[r]).c_str());
    std::printf("]}\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  Args a;
  int rc = 2;
  if (provided < MPI_THREAD_MULTIPLE) std::fprintf(stderr, "tier_train: MPI_THREAD_MULTIPLE is not available\n");
  else if (!parse(argc, argv, a)) std::fprintf(stderr, "usage: mpirun -np W tier_train --root DIR --nodes N0,N1,... --steps N [--kill PHASE:STEP:RANK] [--norm N [--sdc STEP:RANK]] [--parity NODES:LOSSES]\n");
  else rc = run(a);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
