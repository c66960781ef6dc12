// Shared by tests/test_memory_root.cpp and tests/test_memory_root_tools.cpp: a memory root made by the
// tiered checkpointer (4 ranks as threads over ThreadComm, as tests/test_tiered.cpp runs them). The
// topology puts each rank on its own node, but every rank keeps its rank directory under one root, so
// the root holds every shard twice: in its rank's own/ and, as a replica, in another rank's held-<s>/.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/dist/thread_comm.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "tier_trainer.hpp"

namespace memory_root_fixture {

namespace fsys = std::filesystem;

constexpr std::uint64_t kElems = 1 << 13;  // floats per tensor: 32 KiB, 8 KiB per rank of 4 (two 4 KiB chunks)
constexpr int kWorld = 4;

// Trains every rank through step `run_to` (captures 2, 4, 6; step 4 persisted; two memory steps kept:
// 4 and 6) with the memory root dir/mem and the persistent store dir/persistent. Returns each rank's error.
// sdc_step: every rank holds a replicated tensor and rank 2's copy gets a bit flipped before that capture
// (the SDC canary's finding, spec/TIERS.md 11); train through that step only.
// parity_group: parity groups of that many nodes surviving one loss instead of replicas (spec/TIERS.md 12).
inline std::vector<ckpt::Status> train(const fsys::path& dir, std::uint64_t run_to = 7, std::uint64_t sdc_step = 0, int parity_group = 0) {
  ckpt::ThreadGroup group(kWorld);
  std::vector<ckpt::Status> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      ckpt::ThreadComm comm(group, r);
      ckpt::PosixFs fs;
      auto fail = [&](const ckpt::Status& s) {
        errors[static_cast<std::size_t>(r)] = s;
        comm.leave(s);
      };
      ckpt::tiers::TierOptions o;
      o.memory_root = (dir / "mem").string();
      o.persistent = (dir / "persistent").string();
      o.memory_every = 2, o.persist_every = 4, o.replicas = 1, o.memory_keep = 2;
      if (parity_group != 0) o.replicas = 0, o.parity_group = parity_group, o.parity_losses = 1;
      o.chunk_size_log2 = 12;
      o.check_free_space = false;
      o.when_busy = ckpt::WhenBusy::wait;  // every capture taken: the fixture's steps are known
      ckpt::tiers::Topology t;
      for (int n = 0; n < kWorld; ++n) t.node_of_rank.push_back("n" + std::to_string(n));
      o.topology = t;
      auto tiers = ckpt::tiers::TieredCheckpointer::create(fs, comm, o);
      if (!tiers.ok()) return fail(tiers.status());
      tier_trainer::Trainer trainer(kElems, kWorld, r);
      if (sdc_step != 0) trainer.with_norm(3000);
      auto resumed = (*tiers)->resume([&](ckpt::tiers::TierView& v) { return trainer.load(v); });
      if (!resumed.ok()) return fail(resumed.status());
      for (std::uint64_t s = resumed->next_step() == 0 ? 1 : resumed->next_step(); s <= run_to; ++s) {
        trainer.train(s);
        if (r == 2 && s == sdc_step) trainer.norm[1500] = -trainer.norm[1500];  // the sign bit: chunk 1 of "norm"
        auto step = (*tiers)->step(s, [&](ckpt::SaveRequest& req) { trainer.fill(req); });
        if (!step.ok()) return fail(step.status());
      }
      if (ckpt::Status waited = (*tiers)->wait(); !waited.ok()) return fail(waited);
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Where a test program keeps its roots: test-memory-root/<program> under the build directory, so programs that
// ctest runs at once (test_memory_root, test_memory_root_tools) never remove each other's.
inline fsys::path program_dir() { return fsys::path(CKPT_BINARY_DIR) / "test-memory-root" / fsys::path(__BASE_FILE__).stem(); }

// A trained root, made once per test program under the build directory and copied for each test that
// damages it (copies keep the tree as it is: the tier is plain files).
inline const fsys::path& pristine() {
  static const fsys::path dir = [] {
    const fsys::path d = program_dir() / "pristine";
    fsys::remove_all(d);
    fsys::create_directories(d);
    const auto errors = train(d);
    for (const auto& e : errors) {
      INFO(e.to_string());
      REQUIRE(e.ok());
    }
    return d;
  }();
  return dir;
}

// A fresh copy of the pristine root and persistent store under test-memory-root/<program>/<name>.
inline fsys::path fresh_copy(const std::string& name) {
  const fsys::path dir = program_dir() / name;
  const fsys::path& from = pristine();
  fsys::remove_all(dir);
  fsys::create_directories(dir);
  fsys::copy(from, dir, fsys::copy_options::recursive);
  return dir;
}

// The shard file of `step` in a memory store directory (one shard per memory step).
inline fsys::path shard_file(const fsys::path& store, std::uint64_t step) {
  for (const auto& e : fsys::directory_iterator(store)) {
    if (e.path().filename().string().rfind("step-" + std::to_string(step) + "-", 0) != 0) continue;
    for (const auto& f : fsys::directory_iterator(e.path()))
      if (f.path().extension() == ".ckpt") return f.path();
  }
  FAIL("no shard of step " << step << " in " << store);
  return {};
}

// Flips one byte at `offset` of a file.
inline void flip_byte(const fsys::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x10));
}

// Flips a byte in the middle of the tensor data of the shard of `step` in a memory store.
inline void flip_shard_data(const fsys::path& store, std::uint64_t step) { flip_byte(shard_file(store, step), 8192); }

}  // namespace memory_root_fixture
