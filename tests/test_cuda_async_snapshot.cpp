// Tests for cuda/async_snapshot.cuh on cuda/host_backend.cuh (spec/ASYNC.md 6): device tensors in async
// saves are copied device-to-host on a stream into pinned staging, fenced before the worker writes a
// slab, so save() may return and the caller overwrite device memory at once. The host backend's lazy
// streams run a copy only when an event after it is synchronized: a slab handed over unfenced would be
// written with stale bytes and the saved step would differ.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/testing/sim_fs.hpp>

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
