// Tests for cuda/async_snapshot.cuh on cuda/host_backend.cuh (spec/ASYNC.md 6): device tensors in async
// saves are copied device-to-host on a stream into pinned staging (or, with the tiers, into the memory tier's
// slot the store pinned: 6.1), fenced before the worker writes a slab, so save() may return and the caller
// overwrite device memory at once. The host backend's lazy
// streams run a copy only when an event after it is synchronized: a slab handed over unfenced would be
// written with stale bytes and the saved step would differ.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

#include <ckpt/dist/thread_comm.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/async_save.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "../cuda/async_snapshot.cuh"
#include "../cuda/host_backend.cuh"
#include "test_util.hpp"

using namespace ckpt;
using gpu::HostBackend;

namespace {

StoreOptions small_store() {
  StoreOptions o;
  o.create_if_missing = true;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = 9;
  return o;
}

unsigned char* on_device(HostBackend& backend, const std::vector<unsigned char>& bytes) {
  void* p = nullptr;
  REQUIRE(backend.device_alloc(p, bytes.size()).ok());
  std::memcpy(p, bytes.data(), bytes.size());
  return static_cast<unsigned char*>(p);
}

// A whole 1-D U8 tensor of size bytes at data in device memory.
SaveTensor device_tensor(std::string name, const void* data, std::size_t size) {
  SaveTensor t;
  t.name = std::move(name);
  t.global_shape = t.local_shape = {size};
  t.offsets = {0};
  t.data = data;
  t.size = size;
  t.on_device = true;
  return t;
}

std::vector<unsigned char> read_back(Store& store, std::uint64_t step, const std::string& name, std::size_t n) {
  auto reader = store.open_step(step);
  REQUIRE(reader.ok());
  std::vector<unsigned char> out(n);
  REQUIRE(reader->read_tensor(name, out.data(), out.size()).ok());
  return out;
}

}  // namespace

TEST_CASE("device tensors are snapshot into pinned staging and saved exactly, even when overwritten right after save()",
          "[cuda][async]") {
  for (const bool eager : {false, true}) {
    INFO((eager ? "copies complete when queued" : "lazy streams"));
    HostBackend backend;
    backend.eager_copies_to_host = eager;
    const auto weights = ckpt_test::random_bytes(100000, 1), moments = ckpt_test::random_bytes(30000, 2);
    const auto host_part = ckpt_test::random_bytes(5000, 3);
    unsigned char* dw = on_device(backend, weights);
    unsigned char* dm = on_device(backend, moments);
    SimFs sim;
    auto store = Store::open(sim, "/store", Access::read_write, small_store());
    REQUIRE(store.ok());
    {
      gpu::DeviceSnapshot<HostBackend> snapshot(backend);
      REQUIRE(snapshot.init().ok());
      AsyncSaveOptions o;
      o.staging_bytes = 32 << 10;  // smaller than the state: slabs are reused, so fencing is tested for real
      o.slab_bytes = 8 << 10;
      o.memory = gpu::pinned_staging(backend);
      o.device = &snapshot;
      {
        auto saver = AsyncSaver::create(**store, o);
        REQUIRE(saver.ok());
        for (std::uint64_t step : {1, 2}) {
          SaveRequest r(step);
          r.add(device_tensor("w", dw, weights.size()));
          SaveTensor m = device_tensor("adam.m", dm, moments.size());
          m.optimizer = true;
          r.add(m);
          r.add_tensor("host", DType::U8, {host_part.size()}, host_part.data(), host_part.size());
          auto ticket = (*saver)->save(std::move(r));
          REQUIRE(ticket.ok());
          CHECK(backend.pending() == 0);  // every copy landed before save() returned
          // The next training step overwrites device memory at once.
          std::memset(dw, static_cast<int>(step), weights.size());
          std::memset(dm, static_cast<int>(step), moments.size());
        }
        REQUIRE((*saver)->wait().ok());
      }
      CHECK(backend.copies() >= (weights.size() + moments.size()) / (8 << 10));
    }
    CHECK(read_back(**store, 1, "w", weights.size()) == weights);
    CHECK(read_back(**store, 1, "adam.m", moments.size()) == moments);
    CHECK(read_back(**store, 1, "host", host_part.size()) == host_part);
    CHECK(read_back(**store, 2, "w", weights.size()) == std::vector<unsigned char>(weights.size(), 1));
    auto verified = (*store)->verify_step(2);
    REQUIRE(verified.ok());
    CHECK(verified->ok());
    REQUIRE(backend.device_free(dw).ok());
    REQUIRE(backend.device_free(dm).ok());
    // Pool, stream and event are all given back.
    CHECK(backend.live_allocations() == 0);
    CHECK(backend.live_streams() == 0);
    CHECK(backend.live_events() == 0);
  }
}

TEST_CASE("a failed device copy abandons that save, reports it, and the next save works", "[cuda][async]") {
  HostBackend backend;
  SimFs sim;
  auto store = Store::open(sim, "/store", Access::read_write, small_store());
  REQUIRE(store.ok());
  const auto bytes = ckpt_test::random_bytes(20000, 9);
  unsigned char* d = on_device(backend, bytes);
  gpu::DeviceSnapshot<HostBackend> snapshot(backend);
  REQUIRE(snapshot.init().ok());
  AsyncSaveOptions o;
  o.staging_bytes = 32 << 10;
  o.slab_bytes = 8 << 10;
  o.memory = gpu::pinned_staging(backend);
  o.device = &snapshot;
  {
    auto saver = AsyncSaver::create(**store, o);
    REQUIRE(saver.ok());
    auto request = [&](std::uint64_t step, const void* src) {
      SaveRequest r(step);
      r.add(device_tensor("w", src, bytes.size()));
      return r;
    };
    // A host pointer marked as device memory: the backend refuses the copy.
    auto bad = (*saver)->save(request(1, bytes.data()));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message().find("step 1") != std::string::npos);
    CHECK(bad.status().message().find("device snapshot of 'w'") != std::string::npos);
    CHECK((*saver)->wait().ok());  // reported once, by save() itself
    CHECK_FALSE((*store)->latest());
    REQUIRE((*saver)->save(request(2, d)).ok());
    REQUIRE((*saver)->wait().ok());
    CHECK((*saver)->pool()->free_slabs() == (*saver)->pool()->slab_count());
  }
  REQUIRE((*store)->latest());
  CHECK((*store)->latest()->step == 2);
  CHECK(read_back(**store, 2, "w", bytes.size()) == bytes);
  REQUIRE(backend.device_free(d).ok());
}

TEST_CASE("the tiers copy device tensors straight into the memory tier's slots, each pinned once while mapped", "[cuda][tiers]") {
  namespace fsys = std::filesystem;
  HostBackend backend;
  const auto first = ckpt_test::random_bytes(100000, 4);
  unsigned char* dw = on_device(backend, first);
  const fsys::path dir = fsys::path(CKPT_BINARY_DIR) / "test-cuda-tiers";
  fsys::remove_all(dir);
  PosixFs fs;
  ThreadGroup group(1);
  ThreadComm comm(group, 0);
  tiers::TierOptions o;
  o.memory_root = (dir / "mem").string();
  o.replicas = 0, o.memory_every = 1, o.persist_every = 0, o.memory_keep = 2, o.chunk_size_log2 = 12;
  o.when_busy = WhenBusy::wait;  // every capture taken
  std::vector<unsigned char> last;  // the device bytes the newest capture saw
  {
    gpu::DeviceSnapshot<HostBackend> snapshot(backend);
    REQUIRE(snapshot.init().ok());
    o.device = &snapshot;
    auto t = tiers::TieredCheckpointer::create(fs, comm, o);
    REQUIRE(t.ok());
    REQUIRE((*t)->resume([](tiers::TierView&) { return Status(); }).ok());
    for (std::uint64_t step = 1; step <= 5; ++step) {
      last.assign(dw, dw + first.size());
      auto out = (*t)->step(step, [&](SaveRequest& r) { r.add(device_tensor("w", dw, first.size())); });
      INFO(out.status().to_string());
      REQUIRE(out.ok());
      CHECK(backend.pending() == 0);                          // landed before step() returned
      std::memset(dw, static_cast<int>(step), first.size());  // the next training step overwrites device memory
      REQUIRE((*t)->wait().ok());
      CHECK(backend.live_allocations() == 1);  // the device tensor alone: no pinned staging pool
    }
    CHECK(backend.registrations() == 2);  // the ring's two files, each pinned when first mapped, then reused
    CHECK(backend.live_registrations() == 2);
    CHECK((*t)->notes().empty());
    t->reset();  // unmaps the slots: each is unpinned first
    CHECK(backend.live_registrations() == 0);
  }
  REQUIRE(backend.device_free(dw).ok());
  // A restarted process (no device) loads the newest capture: the bytes the device held at step 5.
  o.device = nullptr;
  auto t = tiers::TieredCheckpointer::create(fs, comm, o);
  REQUIRE(t.ok());
  std::vector<unsigned char> loaded(first.size());
  auto resumed = (*t)->resume([&](tiers::TierView& v) { return v.read_tensor("w", loaded.data(), loaded.size()); });
  REQUIRE(resumed.ok());
  CHECK(resumed->step == 5);
  CHECK(loaded == last);
}
