// Crash exploration across tier transitions (spec/TIERS.md 9) on the simulated file system: a job of 2
// ranks on 2 nodes captures, replicates and promotes steps while every persistence point is recorded;
// each recorded moment is crashed (unsynced writes lost, torn or garbled, unsynced directory entries
// lost) and a new job resumes on the crash state. The oracle: the resume succeeds, the state it loads
// is bit-identical to an uninterrupted run at that step (so it was complete and verified), and it is
// never older than the last step whose promotion had been acknowledged (no persisted step is lost).
// The same again with the memory roots gone as well: a power cut empties tmpfs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/dist/thread_comm.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "tier_trainer.hpp"

using namespace ckpt;
using namespace ckpt::tiers;

namespace {

constexpr std::uint64_t kElems = 1 << 11;
constexpr int kWorld = 2;
constexpr std::uint64_t kSteps = 8;

TierOptions options(int rank) {
  TierOptions o;
  o.memory_root = "/mem-n" + std::to_string(rank);
  o.persistent = "/persistent";
  o.memory_every = 2, o.persist_every = 4, o.replicas = 1, o.memory_keep = 2, o.chunk_size_log2 = 12;
  o.check_free_space = false;  // statvfs knows nothing of a simulated file system
  o.staging_bytes = 1 << 20;
  o.when_busy = WhenBusy::wait;  // every capture taken: the crash points are the same in every run
  Topology t;
  t.node_of_rank = {"n0", "n1"};
  o.topology = t;
  return o;
}

struct Moment {
  SimFs fs;
  std::uint64_t acked_persisted = 0;
  PersistencePoint point;
};

struct Outcome {
  bool ok = true;
  std::string error;
  Resumed resumed;
  std::vector<std::string> slices;
};

// One job on fs: resume, then train through `steps` (0: resume only).
Outcome job(SimFs& fs, std::uint64_t steps) {
  ThreadGroup group(kWorld);
  Outcome out;
  out.slices.resize(kWorld);
  std::vector<Resumed> resumed(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      auto fail = [&](const Status& s) {
        errors[static_cast<std::size_t>(r)] = s.to_string();
        comm.leave(s);
      };
      auto tiers = TieredCheckpointer::create(fs, comm, options(r));
      if (!tiers.ok()) return fail(tiers.status());
      tier_trainer::Trainer trainer(kElems, kWorld, r);
      auto res = (*tiers)->resume([&](TierView& v) { return trainer.load(v); });
      if (!res.ok()) return fail(res.status());
      resumed[static_cast<std::size_t>(r)] = *res;
      for (std::uint64_t s = res->next_step() == 0 ? 1 : res->next_step(); s <= steps; ++s) {
        trainer.train(s);
        auto st = (*tiers)->step(s, [&](SaveRequest& req) { trainer.fill(req); });
        if (!st.ok()) return fail(st.status());
      }
      Status w = (*tiers)->wait();
      if (!w.ok()) return fail(w);
      out.slices[static_cast<std::size_t>(r)] = trainer.bytes();
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) out.ok = false, out.error += e + "; ";
  out.resumed = resumed[0];
  return out;
}

// Removes a directory tree of the simulated file system (a node's tmpfs after a power cut).
void remove_tree(SimFs& fs, const std::string& path) {
  auto st = fs.stat(path);
  if (!st.ok()) return;
  if (st->is_dir) {
    auto names = fs.list_dir(path);
    if (names.ok())
      for (const auto& n : *names) remove_tree(fs, path + "/" + n);
    (void)fs.rmdir(path);
  } else {
    (void)fs.unlink(path);
  }
}

}  // namespace

TEST_CASE("crash states across tier transitions resume only complete verified steps and lose no persisted one", "[tiered][crash]") {
  SimFs sim;
  std::vector<Moment> moments;
  std::mutex mutex;
  std::atomic<std::uint64_t> acked_persisted{0};
  // Acknowledged promotions: what a rank's checkpointer says was persisted (after the COMMIT was durable).
  sim.set_persistence_hook([&](const SimFs& fs, const PersistencePoint& p) {
    std::lock_guard<std::mutex> lock(mutex);
    moments.push_back(Moment{SimFs(fs), acked_persisted.load(), p});
  });
  {
    ThreadGroup group(kWorld);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(kWorld);
    for (int r = 0; r < kWorld; ++r)
      threads.emplace_back([&, r] {
        ThreadComm comm(group, r);
        auto tiers = TieredCheckpointer::create(sim, comm, options(r));
        if (!tiers.ok()) return (void)(errors[static_cast<std::size_t>(r)] = tiers.status().to_string());
        tier_trainer::Trainer trainer(kElems, kWorld, r);
        auto res = (*tiers)->resume([&](TierView& v) { return trainer.load(v); });
        if (!res.ok()) return (void)(errors[static_cast<std::size_t>(r)] = res.status().to_string());
        for (std::uint64_t s = 1; s <= kSteps; ++s) {
          trainer.train(s);
          auto st = (*tiers)->step(s, [&](SaveRequest& req) { trainer.fill(req); });
          if (!st.ok()) return (void)(errors[static_cast<std::size_t>(r)] = st.status().to_string());
          // Promotion is acknowledged on every rank once its PERSISTED record is written.
          std::uint64_t seen = (*tiers)->steps_persisted();
          std::uint64_t prev = acked_persisted.load();
          while (r == 0 && seen > prev && !acked_persisted.compare_exchange_weak(prev, seen)) {
          }
        }
        if (!(*tiers)->wait().ok()) errors[static_cast<std::size_t>(r)] = "wait failed";
        if (r == 0) acked_persisted = std::max<std::uint64_t>(acked_persisted.load(), (*tiers)->steps_persisted());
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) REQUIRE(e.empty());
  }
  sim.set_persistence_hook(nullptr);
  REQUIRE(moments.size() > 50);
  // Every moment, each crashed with two sampled fates of its unsynced items, then once more after a power cut.
  std::size_t checked = 0, from_memory = 0, from_persistent = 0;
  std::map<std::uint64_t, std::string> references;
  for (std::size_t i = 0; i < moments.size(); ++i) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool power_cut = variant == 2;
      SimFs crashed = moments[i].fs.sample_crash_state(i * 3 + static_cast<std::uint64_t>(variant));
      if (power_cut)
        for (int r = 0; r < kWorld; ++r) remove_tree(crashed, "/mem-n" + std::to_string(r));
      INFO("moment " << i << " of " << moments.size() << " (" << fs_op_name(moments[i].point.op) << " " << moments[i].point.path
                     << "), power cut " << power_cut << ", acknowledged persisted step " << moments[i].acked_persisted << "\n"
                     << crashed.crash_note());
      Outcome o = job(crashed, 0);
      INFO("the resume said: " << o.error);
      REQUIRE(o.ok);
      const std::uint64_t step = o.resumed.fresh ? 0 : o.resumed.step;
      CHECK(step >= moments[i].acked_persisted);
      if (!o.resumed.fresh) {
        if (!references.count(step)) references[step] = tier_trainer::reference(kElems, step);
        CHECK(tier_trainer::assemble(o.slices, kElems) == references[step]);
        (power_cut ? from_persistent : from_memory) += 1;
      }
      ++checked;
    }
  }
  WARN(checked << " crash states checked (" << from_memory << " resumed with memory, " << from_persistent
               << " after a power cut from the persistent store) of " << moments.size() << " persistence points");
  CHECK(from_persistent > 0);
  CHECK(from_memory > 0);
}
