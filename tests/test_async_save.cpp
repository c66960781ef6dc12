// Tests for async_save.hpp, staging_pool.hpp and flush.hpp (spec/ASYNC.md): saves that return after
// staging and persist in the background through the store's commit protocol; bounded staging that a
// larger state streams through; K saves in flight with wait or skip; background failures reported at
// the next call and by wait(); in-order commits with retention after them; deadline-bounded flushes;
// the same across ranks (threads over ThreadComm).
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include "store_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;
using namespace std::chrono_literals;

namespace {

const char* const kStore = "/store";

StoreOptions small_store(bool create = true) { return ckpt_test::small_store_options(create, 9); }

AsyncSaveOptions small_saver(std::size_t staging = 64 << 10, std::size_t slab = 16 << 10) {
  AsyncSaveOptions o;
  o.staging_bytes = staging;
  o.slab_bytes = slab;
  return o;
}

// A writable store at kStore on fs with the tests' small settings.
template <class Fs>
std::unique_ptr<Store> open_store(Fs& fs, bool create = true) {
  auto store = Store::open(fs, kStore, Access::read_write, small_store(create));
  REQUIRE(store.ok());
  return std::move(store).value();
}

std::unique_ptr<AsyncSaver> start_saver(Store& store, const AsyncSaveOptions& o = small_saver()) {
  auto saver = AsyncSaver::create(store, o);
  REQUIRE(saver.ok());
  return std::move(saver).value();
}

// The tensors of a step: a function of the step number, so any step can be checked bit for bit.
struct StepData {
  std::vector<unsigned char> weights, moments, tiny;
  explicit StepData(std::uint64_t step, std::size_t weight_bytes = 40000)
      : weights(ckpt_test::random_bytes(weight_bytes, step * 3 + 1)),
        moments(ckpt_test::random_bytes(5000, step * 3 + 2)),
        tiny(ckpt_test::random_bytes(3, step * 3 + 3)) {}
  SaveRequest request(std::uint64_t step) const {
    SaveRequest r(step);
    r.add_tensor("w", DType::U8, {weights.size()}, weights.data(), weights.size());
    r.add_tensor("empty", DType::F32, {0, 4}, nullptr, 0);
    r.add_optimizer_tensor("adam.m", DType::U8, {moments.size()}, moments.data(), moments.size());
    r.add_tensor("tiny", DType::U8, {tiny.size()}, tiny.data(), tiny.size());
    r.state().rng = "rng-" + std::to_string(step);
    r.state().values["lr"] = 0.25;
    return r;
  }
};

// "" when the step holds exactly StepData(step) and verifies.
std::string check_step(Store& store, std::uint64_t step, std::size_t weight_bytes = 40000) {
  const StepData want(step, weight_bytes);
  auto reader = store.open_step(step);
  if (!reader.ok()) return reader.status().to_string();
  std::vector<unsigned char> w(want.weights.size()), m(want.moments.size()), t(want.tiny.size());
  Status s = reader->read_tensor("w", w.data(), w.size());
  if (s.ok()) s = reader->read_tensor("adam.m", m.data(), m.size());
  if (s.ok()) s = reader->read_tensor("tiny", t.data(), t.size());
  if (s.ok()) s = reader->read_tensor("empty", nullptr, 0);
  if (!s.ok()) return s.to_string();
  if (w != want.weights || m != want.moments || t != want.tiny) return "tensor bytes differ";
  const TrainingState& st = reader->state();
  if (st.step != step || st.rng != "rng-" + std::to_string(step)) return "training state differs";
  if (st.optimizer_tensors != std::vector<std::string>{"adam.m"}) return "optimizer tensors differ";
  auto verified = store.verify_step(step);
  if (!verified.ok()) return verified.status().to_string();
  if (!verified->ok()) return "verify_step found damage";
  return "";
}

// Saves StepData(step) for each step through saver, then waits for every save to commit.
void save_and_wait(AsyncSaver& saver, std::initializer_list<std::uint64_t> steps) {
  for (const std::uint64_t step : steps) {
    const StepData d(step);
    REQUIRE(saver.save(d.request(step)).ok());
  }
  REQUIRE(saver.wait().ok());
}

std::vector<std::uint64_t> live_steps(const std::vector<StepInfo>& steps) {
  std::vector<std::uint64_t> out;
  for (const auto& s : steps) out.push_back(s.step);
  return out;
}

// Holds the saver's worker inside an Fs operation (a SimFs persistence hook runs on the calling thread).
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool closed = false;
  std::atomic<int> waiting{0};
  void hold() {
    std::unique_lock<std::mutex> lock(m);
    if (!closed) return;
    ++waiting;
    cv.wait(lock, [&] { return !closed; });
    --waiting;
  }
  void close() {
    std::lock_guard<std::mutex> lock(m);
    closed = true;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(m);
      closed = false;
    }
    cv.notify_all();
  }
  void until_held() {
    while (waiting.load() == 0) std::this_thread::sleep_for(1ms);
  }
};

}  // namespace

TEST_CASE("an async save commits exactly what a synchronous save would, with its timing recorded", "[async]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto store = Store::open(fs, dir.file("store"), Access::read_write, small_store());
  REQUIRE(store.ok());
  {
    auto saver = AsyncSaver::create(**store, small_saver());
    REQUIRE(saver.ok());
    for (std::uint64_t step : {10, 20, 30}) {
      const StepData data(step);
      auto ticket = (*saver)->save(data.request(step));
      REQUIRE(ticket.ok());
      CHECK_FALSE(ticket->skipped);
      CHECK(ticket->step == step);
    }  // the request's memory is gone here: staging copied it
    REQUIRE((*saver)->wait().ok());
    CHECK((*saver)->saves_committed() == 3);
    REQUIRE((*saver)->last_committed());
    CHECK((*saver)->last_committed()->step == 30);
  }
  for (std::uint64_t step : {10, 20, 30}) CHECK(check_step(**store, step) == "");
  // SAVE_STATS (spec/JOURNAL.md 4.8), read back by a fresh read-only open.
  auto reopened = Store::open(fs, dir.file("store"), Access::read_only);
  REQUIRE(reopened.ok());
  const auto records = (*reopened)->save_records();
  REQUIRE(records.size() == 3);
  for (const auto& r : records) {
    CHECK(r.async);
    CHECK(r.bytes > 40000);
    CHECK(r.stall_ns <= r.persist_ns);
    CHECK(r.persist_ns > 0);
  }
  CHECK(records[2].step == 30);
  const SaveEstimate e = (*reopened)->estimate_save();
  REQUIRE(e.known());
  CHECK(e.bytes == records[2].bytes);
  CHECK(e.seconds > 0);
  CHECK((*reopened)->save_fits(3600.0) == std::optional<bool>(true));
  CHECK((*reopened)->save_fits(0.0) == std::optional<bool>(false));
}

TEST_CASE("a synchronous commit records a save whose stall is the whole save", "[async][journal]") {
  SimFs sim;
  auto store = Store::open(sim, kStore, Access::read_write, small_store());
  REQUIRE(store.ok());
  CHECK((*store)->save_fits(1.0) == std::nullopt);  // nothing recorded yet
  {
    auto tx = (*store)->begin(5);
    REQUIRE(tx.ok());
    const StepData data(5);
    REQUIRE((*tx)->add_tensor("w", DType::U8, {data.weights.size()}, data.weights.data(), data.weights.size()).ok());
    REQUIRE((*tx)->commit().ok());
  }
  const auto records = (*store)->save_records();
  REQUIRE(records.size() == 1);
  CHECK_FALSE(records[0].async);
  CHECK(records[0].stall_ns == records[0].persist_ns);
  // The record is in the COMMIT's group, so a reopen (and recovery) finds it with the step.
  store->reset();
  auto reopened = Store::open(sim, kStore, Access::read_write, small_store(false));
  REQUIRE(reopened.ok());
  REQUIRE((*reopened)->save_records().size() == 1);
  CHECK((*reopened)->save_records()[0] == records[0]);
}

TEST_CASE("a state larger than the staging pool streams through it", "[async]") {
  SimFs sim;
  auto store = open_store(sim);
  constexpr std::size_t kBig = 300000;  // 37 slabs of 8 KiB through a pool of 4
  {
    auto saver = start_saver(*store, small_saver(32 << 10, 8 << 10));
    CHECK(saver->pool()->slab_count() == 4);
    for (std::uint64_t step : {1, 2}) {
      const StepData data(step, kBig);
      auto ticket = saver->save(data.request(step));
      REQUIRE(ticket.ok());
    }
    REQUIRE(saver->wait().ok());
    CHECK(saver->pool()->free_slabs() == 4);  // every slab came back
  }
  CHECK(check_step(*store, 1, kBig) == "");
  CHECK(check_step(*store, 2, kBig) == "");
}

TEST_CASE("in place, each tensor is copied once into the store's next file: no staging pool, its bytes not written again",
          "[async][in_place]") {
  // spec/ASYNC.md 3.1: the same steps through a staging saver and an in-place saver over two memory-style
  // stores (reuse_files); the in-place saver's file writes are the superblock, padding, index and footer only.
  ckpt_test::TempDir dir;
  PosixFs posix;
  constexpr std::size_t kWeights = 400000;
  auto saves = [&](const std::string& path, bool in_place, std::vector<std::uint64_t>* staged_steps) {
    FaultFs<PosixFs> fs(posix, FaultPlan{Fault::none, 0, false, fs_op_bit(FsOp::pwrite)});
    StoreOptions so = small_store();
    so.reuse_files = true;
    so.retention = RetentionPolicy{2, 0};
    auto store = Store::open(fs, path, Access::read_write, so);
    REQUIRE(store.ok());
    AsyncSaveOptions o = small_saver();
    o.in_place = in_place;
    if (in_place) o.before_stage = [&](std::uint64_t step) { staged_steps->push_back(step); return Status(); };
    std::uint64_t writes = 0;
    {
      auto saver = start_saver(**store, o);
      CHECK((saver->pool() == nullptr) == in_place);
      fs.set_plan(FaultPlan{Fault::none, 0, false, fs_op_bit(FsOp::pwrite)});
      for (std::uint64_t step = 1; step <= 5; ++step) {
        const StepData d(step, kWeights);
        REQUIRE(saver->save(d.request(step)).ok());
      }
      REQUIRE(saver->wait().ok());
      writes = fs.count();
    }
    for (std::uint64_t step : {4, 5}) CHECK(check_step(**store, step, kWeights) == "");
    CHECK(live_steps((*store)->steps()) == std::vector<std::uint64_t>{4, 5});
    return writes;
  };
  std::vector<std::uint64_t> before;
  const std::uint64_t staged = saves(dir.file("staged"), false, nullptr);
  const std::uint64_t in_place = saves(dir.file("in-place"), true, &before);
  CHECK(before == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  // 395 KiB of tensors per step through 4 KiB write buffers: about 100 writes per step staged, none of them
  // in place (the journal's, manifests' and each file's own writes are the same in both).
  INFO("pwrite calls: staged " << staged << ", in place " << in_place);
  CHECK(in_place + 5 * 90 <= staged);
  // One save at a time (the slot is reserved while the worker is idle), on a file system that maps.
  StoreOptions so = small_store();
  so.reuse_files = true;
  auto store = Store::open(posix, dir.file("refused"), Access::read_write, so);
  REQUIRE(store.ok());
  AsyncSaveOptions two = small_saver();
  two.in_place = true;
  two.max_in_flight = 2;
  CHECK(AsyncSaver::create(**store, two).status().code() == Code::invalid_argument);
  SimFs sim;
  auto simulated = open_store(sim);
  two.max_in_flight = 1;
  CHECK(AsyncSaver::create(*simulated, two).status().code() == Code::unsupported);
}

TEST_CASE("the staging pool is cut into page-aligned slabs and rejects impossible sizes", "[async][staging]") {
  auto pool = StagingPool::create(100000, 10000);
  REQUIRE(pool.ok());
  CHECK((*pool)->slab_bytes() == 8192);
  CHECK((*pool)->slab_count() == 12);
  CHECK((*pool)->free_slabs() == 12);
  unsigned char* a = (*pool)->acquire();
  REQUIRE(a != nullptr);
  CHECK((*pool)->owns(a));
  CHECK((*pool)->free_slabs() == 11);
  (*pool)->release(a);
  CHECK((*pool)->free_slabs() == 12);
  // An empty pool gives nothing back before its deadline.
  std::vector<unsigned char*> all;
  for (std::size_t i = 0; i < 12; ++i) all.push_back((*pool)->acquire());
  CHECK((*pool)->acquire(nullptr, std::chrono::steady_clock::now() + 20ms) == nullptr);
  CHECK((*pool)->acquire([] { return true; }) == nullptr);
  for (auto* s : all) (*pool)->release(s);
  CHECK(StagingPool::create(100000, 100).status().code() == Code::invalid_argument);
  CHECK(StagingPool::create(4000, 4096).status().code() == Code::invalid_argument);
}

TEST_CASE("with one save in flight the next one waits or is skipped, as the caller chose", "[async]") {
  for (const WhenBusy policy : {WhenBusy::wait, WhenBusy::skip}) {
    INFO((policy == WhenBusy::wait ? "wait" : "skip"));
    SimFs sim;
    Gate gate;
    auto store = open_store(sim);
    sim.set_persistence_hook([&](const SimFs&, const PersistencePoint&) { gate.hold(); });
    AsyncSaveOptions o = small_saver();
    o.when_busy = policy;
    auto saver = start_saver(*store, o);
    gate.close();
    const StepData one(1), two(2);
    REQUIRE(saver->save(one.request(1)).ok());
    gate.until_held();  // step 1 is persisting and cannot finish
    CHECK(saver->in_flight() == 1);
    if (policy == WhenBusy::skip) {
      auto ticket = saver->save(two.request(2));
      REQUIRE(ticket.ok());
      CHECK(ticket->skipped);
      CHECK(saver->saves_skipped() == 1);
      gate.open();
    } else {
      std::thread opener([&] {
        std::this_thread::sleep_for(30ms);
        gate.open();
      });
      auto ticket = saver->save(two.request(2));  // blocks until step 1 committed
      opener.join();
      REQUIRE(ticket.ok());
      CHECK_FALSE(ticket->skipped);
      CHECK(ticket->stall >= 20ms);
    }
    REQUIRE(saver->wait().ok());
    sim.set_persistence_hook(nullptr);
    const auto want = policy == WhenBusy::skip ? std::vector<std::uint64_t>{1} : std::vector<std::uint64_t>{1, 2};
    CHECK(live_steps(store->steps()) == want);
  }
}

TEST_CASE("with two saves in flight the next is staged while the first persists, and commits after it", "[async]") {
  SimFs sim;
  Gate gate;
  auto store = open_store(sim);
  sim.set_persistence_hook([&](const SimFs&, const PersistencePoint&) { gate.hold(); });
  AsyncSaveOptions o = small_saver(256 << 10);
  o.max_in_flight = 2;
  o.when_busy = WhenBusy::skip;
  std::vector<std::uint64_t> completed;
  o.on_complete = [&](const SaveOutcome& out) {
    CHECK(out.status.ok());
    completed.push_back(out.step);
  };
  auto saver = start_saver(*store, o);
  gate.close();
  const StepData a(1), b(2), c(3);
  REQUIRE(saver->save(a.request(1)).ok());
  gate.until_held();
  auto second = saver->save(b.request(2));  // staged, not blocked
  REQUIRE(second.ok());
  CHECK_FALSE(second->skipped);
  CHECK(saver->in_flight() == 2);
  auto third = saver->save(c.request(3));  // over the limit: skipped
  REQUIRE(third.ok());
  CHECK(third->skipped);
  gate.open();
  REQUIRE(saver->wait().ok());
  sim.set_persistence_hook(nullptr);
  CHECK(completed == std::vector<std::uint64_t>{1, 2});
  CHECK(live_steps(store->steps()) == std::vector<std::uint64_t>{1, 2});
  CHECK(check_step(*store, 1) == "");
  CHECK(check_step(*store, 2) == "");
}

TEST_CASE("retention runs after each async commit, in the background, and steps commit in order", "[async]") {
  SimFs sim;
  StoreOptions so = small_store();
  so.retention.keep_last = 2;
  auto store = Store::open(sim, kStore, Access::read_write, so);
  REQUIRE(store.ok());
  AsyncSaveOptions o = small_saver(256 << 10);
  o.max_in_flight = 3;
  std::vector<std::uint64_t> completed, retired;
  o.on_complete = [&](const SaveOutcome& out) {
    REQUIRE(out.commit);
    completed.push_back(out.step);
    for (const auto& r : out.commit->retired) retired.push_back(r.step);
  };
  {
    auto saver = AsyncSaver::create(**store, o);
    REQUIRE(saver.ok());
    std::vector<StepData> data;
    for (std::uint64_t step = 1; step <= 6; ++step) {
      const StepData d(step);
      REQUIRE((*saver)->save(d.request(step)).ok());
    }
    REQUIRE((*saver)->wait().ok());
  }
  CHECK(completed == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
  CHECK(retired == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(live_steps((*store)->steps()) == std::vector<std::uint64_t>{5, 6});
  CHECK(check_step(**store, 6) == "");
}

TEST_CASE("a background failure at any operation is reported by the next call and by wait, naming the step", "[async][fault]") {
  // Count the operations of one async save of step 30 over a store with steps 10 and 20.
  SimFs base;
  {
    auto store = open_store(base);
    save_and_wait(*start_saver(*store), {10, 20});
  }
  std::uint64_t ops = 0;
  {
    SimFs sim(base);
    FaultFs<SimFs> counting(sim);
    auto store = open_store(counting, false);
    auto saver = start_saver(*store);
    counting.set_plan({});
    save_and_wait(*saver, {30});
    ops = counting.count();
  }
  REQUIRE(ops >= 12);
  std::uint64_t reported_by_wait = 0, reported_by_save = 0, in_doubt = 0;
  for (const Fault fault : {Fault::no_space, Fault::io_error}) {
    for (std::uint64_t n = 1; n <= ops; ++n) {
      INFO(fault_name(fault) << " at operation " << n << " of " << ops);
      SimFs sim(base);
      FaultFs<SimFs> faulty(sim);
      auto opened = open_store(faulty, false);
      Store& store = *opened;
      auto saver = start_saver(store);
      faulty.set_plan(FaultPlan::nth(n, fault));
      const StepData d30(30), d40(40);
      REQUIRE(saver->save(d30.request(30)).ok());
      Status reported;
      if (n % 2 == 0) {
        reported = saver->wait();
        ++reported_by_wait;
      } else {
        // Not waited for: the next save() reports it and is not taken.
        while (saver->in_flight() != 0) std::this_thread::sleep_for(1ms);
        auto next = saver->save(d40.request(40));
        REQUIRE_FALSE(next.ok());
        reported = next.status();
        CHECK(reported.message().find("step 40 not taken") != std::string::npos);
        ++reported_by_save;
      }
      REQUIRE(faulty.faults() == 1);
      faulty.set_plan({});
      REQUIRE_FALSE(reported.ok());
      CHECK(reported.code() == Code::io);
      CHECK(reported.message().find("step 30") != std::string::npos);
      CHECK(reported.message().find("injected fault") != std::string::npos);
      CHECK(saver->wait().ok());  // reported once, not twice
      if (store.failed()) {
        ++in_doubt;  // the COMMIT's durability is unknown until a reopen decides (spec/JOURNAL.md 5.4)
        continue;
      }
      REQUIRE(store.latest());
      CHECK(store.latest()->step == 20);
      // The saver goes on: the next save works.
      REQUIRE(saver->save(d40.request(40)).ok());
      REQUIRE(saver->wait().ok());
      CHECK(store.latest()->step == 40);
      CHECK(check_step(store, 40) == "");
      CHECK(check_step(store, 20) == "");
    }
  }
  CHECK(reported_by_wait > 0);
  CHECK(reported_by_save > 0);
  CHECK(in_doubt > 0);
}

TEST_CASE("a flush that cannot finish the save in flight before its deadline abandons it cleanly", "[async][flush]") {
  SimFs sim;
  Gate gate;
  auto store = open_store(sim);
  save_and_wait(*start_saver(*store), {1});
  sim.set_persistence_hook([&](const SimFs&, const PersistencePoint&) { gate.hold(); });
  auto saver = start_saver(*store);
  gate.close();
  const StepData d2(2);
  REQUIRE(saver->save(d2.request(2)).ok());
  gate.until_held();
  std::thread opener([&] {
    std::this_thread::sleep_for(60ms);  // the stuck operation returns after the deadline
    gate.open();
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status flushed = saver->flush(t0 + 40ms);
  opener.join();
  CHECK(flushed.code() == Code::cancelled);
  CHECK(flushed.message().find("step 2") != std::string::npos);
  // No more saves are taken.
  auto after = saver->save(d2.request(3));
  CHECK(after.status().code() == Code::cancelled);
  sim.set_persistence_hook(nullptr);
  REQUIRE(store->latest());
  CHECK(store->latest()->step == 1);
  CHECK(check_step(*store, 1) == "");
  // The abandoned step left nothing: ABORT written, its directory removed.
  auto entries = sim.list_dir(kStore);
  REQUIRE(entries.ok());
  std::sort(entries->begin(), entries->end());
  CHECK(*entries == std::vector<std::string>{"JOURNAL", "LOCK", store->latest()->dir});
}

TEST_CASE("a flush with time to spare commits the save in flight", "[async][flush]") {
  SimFs sim;
  auto store = open_store(sim);
  auto saver = start_saver(*store);
  const StepData d(7);
  REQUIRE(saver->save(d.request(7)).ok());
  CHECK(saver->flush(std::chrono::steady_clock::now() + 60s).ok());
  REQUIRE(store->latest());
  CHECK(store->latest()->step == 7);
  CHECK(check_step(*store, 7) == "");
}

TEST_CASE("a signal handler's flush request is seen by the saver and keeps the earliest deadline", "[async][flush]") {
  clear_flush_request();
  CHECK_FALSE(flush_requested());
  REQUIRE(install_flush_handler({SIGUSR1}, 250ms).ok());
  CHECK(install_flush_handler({SIGUSR1}, 0ms).code() == Code::invalid_argument);
  const auto before = std::chrono::steady_clock::now();
  REQUIRE(std::raise(SIGUSR1) == 0);
  const auto requested = flush_requested();
  REQUIRE(requested);
  CHECK(flush_signal() == SIGUSR1);
  CHECK(*requested >= before + 200ms);
  CHECK(*requested <= std::chrono::steady_clock::now() + 260ms);
  request_flush(10s);  // a later, longer request does not extend the hold-up
  CHECK(*flush_requested() <= *requested + 1ms);
  // A saver obeys it without a flush() call: no new save is taken.
  SimFs sim;
  auto store = open_store(sim);
  auto saver = start_saver(*store);
  const StepData d(1);
  CHECK(saver->save(d.request(1)).status().code() == Code::cancelled);
  clear_flush_request();
  CHECK(saver->save(d.request(1)).ok());
  CHECK(saver->wait().ok());
  std::signal(SIGUSR1, SIG_DFL);
}

namespace {

// Runs body(rank, fs, comm) on kWorld threads, each with its own FaultFs over one SimFs.
template <class Body>
std::vector<Status> run_async_ranks(SimFs& sim, int world, Body&& body) {
  ThreadGroup group(world);
  std::vector<Status> results(static_cast<std::size_t>(world));
  std::vector<std::unique_ptr<FaultFs<SimFs>>> fss;
  for (int r = 0; r < world; ++r) fss.push_back(std::make_unique<FaultFs<SimFs>>(sim));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      results[static_cast<std::size_t>(r)] = body(r, *fss[static_cast<std::size_t>(r)], comm);
    });
  for (auto& t : threads) t.join();
  return results;
}

// Rank r holds rows [64 r, 64 r + 64) of a 256 x 100 U8 tensor "w", each byte step / 100 + r.
Status save_rank_steps(int r, FaultFs<SimFs>& fs, ThreadComm& comm, const std::vector<std::uint64_t>& steps, int failing_rank) {
  CKPT_ASSIGN_OR_RETURN(auto store, (Store::open(fs, kStore, Access::read_write, small_store(false), comm)));
  CKPT_ASSIGN_OR_RETURN(auto saver, AsyncSaver::create(*store, small_saver()));
  // The failing rank's shard writes fail with EIO from now on; the other ranks' do not.
  if (r == failing_rank) fs.set_plan(FaultPlan::from(1, Fault::io_error, fs_ops::data_writes));
  for (const std::uint64_t step : steps) {
    std::vector<unsigned char> rows(64 * 100, static_cast<unsigned char>(step / 100 + static_cast<std::uint64_t>(r)));
    SaveRequest req(step);
    req.add_piece("w", DType::U8, {256, 100}, {static_cast<std::uint64_t>(r) * 64, 0}, {64, 100}, rows.data(), rows.size());
    // Every rank holds "b"; only its owner (rank 0) writes it, so the pieces never overlap (SHARDING.md 3.3).
    const std::vector<unsigned char> bias(100, static_cast<unsigned char>(step / 100));
    req.add_replicated_tensor("b", DType::U8, {100}, bias.data(), bias.size());
    req.state().values["note"] = "from rank 0";
    CKPT_ASSIGN_OR_RETURN(auto ticket, saver->save(std::move(req)));
    (void)ticket;
  }  // rows are gone: staged
  return saver->wait();
}

}  // namespace

TEST_CASE("async saves across ranks join one collective commit, and one rank's failure aborts the step everywhere", "[async][ranks]") {
  constexpr int kWorld = 4;
  SimFs sim;
  {
    auto created = Store::open(sim, kStore, Access::read_write, small_store());
    REQUIRE(created.ok());
  }
  const auto ok = run_async_ranks(sim, kWorld, [](int r, FaultFs<SimFs>& fs, ThreadComm& comm) {
    return save_rank_steps(r, fs, comm, {100, 200}, -1);
  });
  for (int r = 0; r < kWorld; ++r) CHECK(ok[static_cast<std::size_t>(r)].to_string() == "ok");
  {
    auto check = Store::open(sim, kStore, Access::read_only);
    REQUIRE(check.ok());
    CHECK(live_steps((*check)->steps()) == std::vector<std::uint64_t>{100, 200});
    auto reader = (*check)->open_step(200);
    REQUIRE(reader.ok());
    CHECK(reader->shard_count() == 4);
    std::vector<unsigned char> all(256 * 100);
    REQUIRE(reader->read_tensor("w", all.data(), all.size()).ok());
    for (int r = 0; r < kWorld; ++r) CHECK(all[static_cast<std::size_t>(r) * 6400 + 99] == static_cast<unsigned char>(2 + r));
    std::vector<unsigned char> bias(100);
    REQUIRE(reader->read_tensor("b", bias.data(), bias.size()).ok());
    CHECK(bias == std::vector<unsigned char>(100, 2));
    CHECK(reader->shard(0).index().find_tensor("b") != nullptr);
    for (std::size_t k = 1; k < 4; ++k) CHECK(reader->shard(k).index().find_tensor("b") == nullptr);
    REQUIRE((*check)->save_records().size() == 2);
    CHECK((*check)->save_records()[1].async);
  }

  // Step 300: rank 2's writes fail. Every rank's wait() reports the step abandoned, naming rank 2.
  const auto failed = run_async_ranks(sim, kWorld, [](int r, FaultFs<SimFs>& fs, ThreadComm& comm) {
    return save_rank_steps(r, fs, comm, {300}, 2);
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << failed[static_cast<std::size_t>(r)].to_string());
    CHECK_FALSE(failed[static_cast<std::size_t>(r)].ok());
    CHECK(failed[static_cast<std::size_t>(r)].message().find("step 300") != std::string::npos);
    CHECK(failed[static_cast<std::size_t>(r)].message().find("rank 2") != std::string::npos);
  }
  auto check = Store::open(sim, kStore, Access::read_write, small_store(false));
  REQUIRE(check.ok());
  CHECK_FALSE((*check)->recovery_report().corrupt());
  CHECK(live_steps((*check)->steps()) == std::vector<std::uint64_t>{100, 200});
}

TEST_CASE("the worker runs at worker_nice, below the training thread, and at the caller's priority without it", "[async]") {
  // spec/ASYNC.md 1, "Background priority": with every core busy the caller's copy wins over a worker's hash.
  const auto nice_of_this_thread = [] {
    errno = 0;
    return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
  };
  const int caller = nice_of_this_thread();
  for (const int asked : {0, 10}) {
    INFO("worker_nice " << asked);
    SimFs sim;
    auto store = open_store(sim);
    AsyncSaveOptions o = small_saver(256 << 10);
    o.worker_nice = asked;
    int seen = -100;
    o.on_complete = [&](const SaveOutcome&) { seen = nice_of_this_thread(); };  // on the worker
    auto saver = start_saver(*store, o);
    const StepData d(1);
    REQUIRE(saver->save(d.request(1)).ok());
    REQUIRE(saver->wait().ok());
    CHECK(seen == std::max(caller, asked));
    CHECK(nice_of_this_thread() == caller);  // the caller's own priority is left as it was
  }
}
