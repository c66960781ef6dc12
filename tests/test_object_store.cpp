// The object-store protocol (spec/OBJECT.md 3-4) over MemoryObjects: uploads that appear only when
// completed, commits by create-only objects, racing writers, retention, garbage collection, and a
// crash oracle at every request boundary of a save and of retention.
#include <catch2/catch.hpp>

#include <ckpt/store/async_save.hpp>
#include <ckpt/io/object/object_fs.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/testing/memory_objects.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "store_test_util.hpp"
#include "test_util.hpp"
#include "thread_ranks.hpp"

using namespace ckpt;
using namespace ckpt::object;
using ckpt::testing::MemoryObjects;
using Fault = MemoryObjects::Fault;
using Op = MemoryObjects::Op;

namespace {

// The transactions the store's log names in a state, by txn id.
[[nodiscard]] std::vector<std::uint64_t> txns_in(const Store& store, TxnState state) {
  std::vector<std::uint64_t> out;
  for (const auto& t : store.transactions())
    if (t.state == state) out.push_back(t.txn);
  return out;
}
[[nodiscard]] std::vector<std::uint64_t> retired_txns(const Store& store) { return txns_in(store, TxnState::retired); }
[[nodiscard]] std::vector<std::uint64_t> aborted_txns(const Store& store) { return txns_in(store, TxnState::aborted); }

}  // namespace

namespace {

StoreOptions small_parts() {
  StoreOptions o;
  o.create_if_missing = true;
  o.io.part_size = 64 << 10;  // several parts per shard, so part uploads and completion are exercised
  o.io.parallel_parts = 3;
  o.chunk_size_log2 = 14;
  return o;
}

std::vector<unsigned char> tensor_bytes(std::uint64_t step) { return ckpt_test::random_bytes(200000 + step, step); }

// Saves step `step` with one tensor; returns the commit's status.
Status save_step(Store& store, std::uint64_t step) {
  const auto bytes = tensor_bytes(step);
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  CKPT_TRY(tx->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()));
  tx->state().values["lr"] = Value(0.5);
  return tx->commit().status();
}

// A writable store on objects (small parts) holding these steps, each saved by save_step.
Result<std::unique_ptr<Store>> store_with_steps(MemoryObjects& objects, std::initializer_list<std::uint64_t> steps) {
  auto store = Store::open(object_log(objects), Access::read_write, small_parts());
  REQUIRE(store.ok());
  for (const std::uint64_t step : steps) REQUIRE(save_step(**store, step).ok());
  return store;
}

// Makes a store on objects, then runs body on `world` ranks, each with its own client (a view of the same
// objects) and its rank's collective open of the store.
std::vector<Status> run_object_ranks(MemoryObjects& objects, int world,
                                     const std::function<Status(std::uint32_t, MemoryObjects&, Store*)>& body) {
  REQUIRE(Store::open(object_log(objects), Access::read_write, small_parts()).ok());
  return ckpt_test::run_ranks(world, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    MemoryObjects mine = objects.view();
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(object_log(mine), Access::read_write, small_parts(), comm));
    return body(rank, mine, store.get());
  });
}

// The oracle: the step reads back bit for bit, and every chunk of every shard verifies.
void check_step(Store& store, std::uint64_t step) {
  auto reader = store.open_step(step);
  REQUIRE(reader.ok());
  const auto expected = tensor_bytes(step);
  std::vector<unsigned char> got(expected.size());
  REQUIRE(reader->read_tensor("w", got.data(), got.size()).ok());
  REQUIRE(got == expected);
  for (const auto& shard : reader->info().files) {
    auto report = verify_file(store.fs(), join_path(reader->info().dir, shard.name));
    REQUIRE(report.ok());
    REQUIRE(report->ok());
  }
}

// Opens name for a new upload and writes bytes to it (parts go up as they fill; nothing is visible before sync).
FileHandle start_upload(ObjectFs& fs, const std::string& name, const std::vector<unsigned char>& bytes) {
  auto f = fs.open(name, OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, bytes.data(), 100000, 0).ok());
  REQUIRE(fs.pwrite(*f, bytes.data() + 100000, bytes.size() - 100000, 100000).ok());
  return *f;
}

}  // namespace

TEST_CASE("an object upload appears only when synced, in parts sent in parallel", "[object_fs]") {
  MemoryObjects objects;
  ObjectFs fs(objects, ObjectFsOptions{64 << 10, 4});
  const auto bytes = ckpt_test::random_bytes(300000, 1);
  const FileHandle f = start_upload(fs, "a/b.bin", bytes);
  CHECK(objects.objects().count("a/b.bin") == 0);  // parts uploaded, nothing visible
  CHECK(objects.open_uploads() == 1);
  REQUIRE(fs.sync(f).ok());
  REQUIRE(fs.close(f).ok());
  CHECK(objects.objects().at("a/b.bin") == std::string(bytes.begin(), bytes.end()));
  CHECK(objects.open_uploads() == 0);
  // Read back through ranged GETs.
  auto r = fs.open("a/b.bin", OpenMode::read);
  REQUIRE(r.ok());
  std::vector<unsigned char> back(1000);
  auto n = fs.pread(*r, back.data(), back.size(), 299500);
  REQUIRE(n.ok());
  CHECK(*n == 500);
  CHECK(std::memcmp(back.data(), bytes.data() + 299500, 500) == 0);
  REQUIRE(fs.close(*r).ok());
  auto listed = fs.list_dir("a");
  REQUIRE(listed.ok());
  CHECK(*listed == std::vector<std::string>{"b.bin"});
  auto st = fs.stat("a");
  REQUIRE(st.ok());
  CHECK(st->is_dir);
}

TEST_CASE("a large read is split into parallel ranged GETs, and reads in order are fetched ahead", "[object_fs]") {
  MemoryObjects objects;
  const auto bytes = ckpt_test::random_bytes(1000000, 7);
  objects.set_object("big", std::string(bytes.begin(), bytes.end()));
  std::atomic<int> gets{0};
  objects.set_hook([&](const MemoryObjects::Request& r) {
    if (r.op == Op::get) ++gets;
    return Fault::none;
  });
  ObjectFs fs(objects, ObjectFsOptions{64 << 10, 4});
  auto f = fs.open("big", OpenMode::read);
  REQUIRE(f.ok());
  SECTION("one large read: several GETs of at least a part each, the right bytes") {
    std::vector<unsigned char> back(bytes.size() - 1000);
    auto n = fs.pread(*f, back.data(), back.size(), 1000);
    REQUIRE(n.ok());
    CHECK(*n == back.size());
    CHECK(std::memcmp(back.data(), bytes.data() + 1000, back.size()) == 0);
    CHECK(gets.load() == 4);  // 999000 bytes in 4 ranges of 249750 (>= 64 KiB), 4 at once
    // Past the end: the read stops at the object's end.
    std::vector<unsigned char> tail(300000);
    auto t = fs.pread(*f, tail.data(), tail.size(), bytes.size() - 200000);
    REQUIRE(t.ok());
    CHECK(*t == 200000);
    CHECK(std::memcmp(tail.data(), bytes.data() + bytes.size() - 200000, 200000) == 0);
  }
  SECTION("small reads in order: parts fetched ahead, the right bytes, fewer GETs than reads") {
    std::vector<unsigned char> back(bytes.size());
    const std::size_t step = 10000;  // 100 reads of 10000 bytes; parts are 65536
    for (std::size_t off = 0; off < bytes.size(); off += step) {
      auto n = fs.pread(*f, back.data() + off, std::min(step, bytes.size() - off), off);
      REQUIRE(n.ok());
      REQUIRE(*n == std::min(step, bytes.size() - off));
    }
    CHECK(back == bytes);
    CHECK(gets.load() < 25);  // 1 + the ~16 parts of the object, not 100
    // A read elsewhere ends the read-ahead and still returns the right bytes.
    std::vector<unsigned char> some(5000);
    auto n = fs.pread(*f, some.data(), some.size(), 12345);
    REQUIRE(n.ok());
    CHECK(std::memcmp(some.data(), bytes.data() + 12345, some.size()) == 0);
  }
  SECTION("a GET fetched ahead that fails fails the read that needs it") {
    std::vector<unsigned char> back(10000);
    REQUIRE(fs.pread(*f, back.data(), back.size(), 0).ok());
    objects.set_hook([](const MemoryObjects::Request& r) { return r.op == Op::get ? Fault::fail : Fault::none; });
    auto n = fs.pread(*f, back.data(), back.size(), 10000);
    CHECK(n.status().code() == Code::io);
    objects.set_hook(nullptr);
    n = fs.pread(*f, back.data(), back.size(), 20000);  // the next read asks again
    REQUIRE(n.ok());
    CHECK(std::memcmp(back.data(), bytes.data() + 20000, back.size()) == 0);
  }
  REQUIRE(fs.close(*f).ok());
}

TEST_CASE("an upload closed before sync is aborted, never completed", "[object_fs]") {
  MemoryObjects objects;
  ObjectFs fs(objects, ObjectFsOptions{64 << 10, 2});
  const FileHandle f = start_upload(fs, "x", ckpt_test::random_bytes(200000, 2));
  REQUIRE(fs.close(f).ok());
  CHECK(objects.objects().empty());
  CHECK(objects.open_uploads() == 0);
}

TEST_CASE("object writes must append, and objects are never replaced", "[object_fs]") {
  MemoryObjects objects;
  ObjectFs fs(objects);
  objects.set_object("taken", "old");
  auto f = fs.open("taken", OpenMode::create_new);
  REQUIRE(f.ok());
  CHECK(fs.pwrite(*f, "abc", 3, 5).code() == Code::unsupported);
  REQUIRE(fs.pwrite(*f, "abc", 3, 0).ok());
  CHECK(fs.sync(*f).code() == Code::conflict);
  CHECK(objects.objects().at("taken") == "old");
  REQUIRE(fs.close(*f).ok());
  CHECK(fs.rename("taken", "other").code() == Code::unsupported);
  CHECK(fs.open("taken", OpenMode::read_write).status().code() == Code::unsupported);
}

TEST_CASE("a failed part aborts the upload and fails the file", "[object_fs]") {
  MemoryObjects objects;
  objects.set_hook([](const MemoryObjects::Request& r) { return r.op == Op::upload_part && r.number >= 3 ? Fault::fail : Fault::none; });
  ObjectFs fs(objects, ObjectFsOptions{64 << 10, 2});
  const auto bytes = ckpt_test::random_bytes(400000, 3);
  auto f = fs.open("y", OpenMode::create_new);
  REQUIRE(f.ok());
  Status s = fs.pwrite(*f, bytes.data(), bytes.size(), 0);
  if (s.ok()) s = fs.sync(*f);
  CHECK(s.code() == Code::io);
  CHECK(fs.sync(*f).code() == Code::io);  // the first error, every time
  REQUIRE(fs.close(*f).ok());
  CHECK(objects.objects().empty());
  CHECK(objects.open_uploads() == 0);
}

TEST_CASE("a store on objects saves, lists and reads back steps", "[object_store]") {
  MemoryObjects objects;
  {
    auto store = store_with_steps(objects, {10, 20});
    CHECK((*store)->latest()->step == 20);
    CHECK(save_step(**store, 20).code() == Code::conflict);  // a step is committed once
  }
  MemoryObjects reader = objects.view();
  auto store = Store::open(object_log(reader), Access::read_only);
  REQUIRE(store.ok());
  REQUIRE((*store)->steps().size() == 2);
  CHECK((*store)->latest()->step == 20);
  check_step(**store, 10);
  check_step(**store, 20);
  auto step = (*store)->open_step(20);
  REQUIRE(step.ok());
  CHECK(step->manifest().state.values.at("lr") == Value(0.5));
  CHECK(objects.objects().count(commit_key(20)) == 1);
  CHECK(objects.open_uploads() == 0);
}

TEST_CASE("opening a missing store read-only is not found and creates nothing", "[object_store]") {
  MemoryObjects objects;
  auto store = Store::open(object_log(objects), Access::read_only);
  CHECK(store.status().code() == Code::not_found);
  CHECK(objects.objects().empty());
}

TEST_CASE("a server that ignores conditional writes is refused at open", "[object_store]") {
  MemoryObjects objects;
  objects.ignore_conditions(true);
  auto store = Store::open(object_log(objects), Access::read_write, small_parts());
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == Code::unsupported);
  CHECK(store.status().message().find("If-None-Match") != std::string::npos);
}

TEST_CASE("two writers racing for one step: exactly one commits", "[object_store]") {
  MemoryObjects objects;
  REQUIRE(Store::open(object_log(objects), Access::read_write, small_parts()).ok());
  MemoryObjects a_client = objects.view(), b_client = objects.view();
  auto a = Store::open(object_log(a_client), Access::read_write, small_parts());
  auto b = Store::open(object_log(b_client), Access::read_write, small_parts());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const auto wa = ckpt_test::random_bytes(100000, 7), wb = ckpt_test::random_bytes(100000, 8);
  auto ta = (*a)->begin(5);
  auto tb = (*b)->begin(5);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  REQUIRE((*ta)->add_tensor("w", DType::U8, Shape{wa.size()}, wa.data(), wa.size()).ok());
  REQUIRE((*tb)->add_tensor("w", DType::U8, Shape{wb.size()}, wb.data(), wb.size()).ok());
  auto ca = (*ta)->commit();
  auto cb = (*tb)->commit();
  CHECK(ca.ok());
  CHECK(cb.status().code() == Code::conflict);
  MemoryObjects reader_client = objects.view();
  auto reader = Store::open(object_log(reader_client), Access::read_only);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->steps().size() == 1);
  CHECK((*reader)->latest()->txn == (*ta)->txn());
  auto step = (*reader)->open_step(5);
  REQUIRE(step.ok());
  std::vector<unsigned char> got(wa.size());
  REQUIRE(step->read_tensor("w", got.data(), got.size()).ok());
  CHECK(got == wa);
  // The loser's objects are gone: its step's commit names another transaction.
  for (const auto& [key, bytes] : objects.objects()) CHECK(key.find(step_dir_name(5, (*tb)->txn())) == std::string::npos);
}

TEST_CASE("a lost response to the MANIFEST or commit PUT is resolved by reading the object back", "[object_store]") {
  for (const char* suffix : {".commit", "/MANIFEST"}) {
    INFO(suffix);
    MemoryObjects objects;
    auto store = Store::open(object_log(objects), Access::read_write, small_parts());
    REQUIRE(store.ok());
    const std::string end(suffix);
    objects.set_hook([&](const MemoryObjects::Request& r) {
      const bool match = r.op == Op::put && r.key.size() >= end.size() && r.key.compare(r.key.size() - end.size(), end.size(), end) == 0;
      return match ? Fault::lose_response : Fault::none;
    });
    REQUIRE(save_step(**store, 3).ok());
    objects.set_hook({});
    MemoryObjects reader_client = objects.view();
    auto reader = Store::open(object_log(reader_client), Access::read_only);
    REQUIRE(reader.ok());
    check_step(**reader, 3);
  }
}

TEST_CASE("a damaged commit object is reported and its step is not listed", "[object_store]") {
  MemoryObjects objects;
  {
    auto store = store_with_steps(objects, {1, 2});
  }
  std::string bytes = objects.objects().at(commit_key(2));
  bytes[4096 + 20] ^= 0x10;
  objects.set_object(commit_key(2), bytes);
  MemoryObjects reader_client = objects.view();
  auto store = Store::open(object_log(reader_client), Access::read_only);
  REQUIRE(store.ok());
  CHECK((*store)->latest()->step == 1);
  REQUIRE((*store)->recovery_report().log_damage.size() == 1);
  const Problem& damage = (*store)->recovery_report().log_damage[0];
  CHECK(damage.message.find(commit_key(2)) != std::string::npos);
  CHECK(damage.region == "log object");
  CHECK(damage.code == Code::corrupt);
  CHECK(damage.file.find(commit_key(2)) != std::string::npos);  // the object itself
}

TEST_CASE("a flipped byte in a shard object is found by the chunk digests", "[object_store]") {
  MemoryObjects objects;
  auto store = store_with_steps(objects, {1});
  const StepInfo info = *(*store)->latest();
  const std::string key = info.dir + "/" + info.files[0].name;
  std::string bytes = objects.objects().at(key);
  bytes[4096 + 1000] ^= 1;
  objects.set_object(key, bytes);
  auto step = (*store)->open_step(info);
  REQUIRE(step.ok());
  std::vector<unsigned char> got(tensor_bytes(1).size());
  CHECK(step->read_tensor("w", got.data(), got.size()).code() == Code::corrupt);
  auto report = verify_file((*store)->fs(), key);
  REQUIRE(report.ok());
  CHECK_FALSE(report->ok());
}

TEST_CASE("a save killed at every request boundary leaves the last commit or the new one, bit for bit", "[object_store][crash]") {
  // Count the requests of one whole save, then kill the writer before each of them in turn.
  std::uint64_t total = 0;
  {
    MemoryObjects objects;
    auto store = store_with_steps(objects, {1});
    const std::uint64_t before = objects.requests();
    REQUIRE(save_step(**store, 2).ok());
    total = objects.requests() - before;
  }
  REQUIRE(total >= 8);
  std::uint64_t saw_old = 0, saw_new = 0;
  for (std::uint64_t kill = 0; kill <= total; ++kill) {
    for (const Fault fault : {Fault::crash, Fault::lose_response}) {
      MemoryObjects objects;
      {
        auto store = store_with_steps(objects, {1});
        const std::uint64_t start = objects.requests();
        objects.set_hook([&](const MemoryObjects::Request& r) { return r.number == start + kill ? fault : Fault::none; });
        Status s = save_step(**store, 2);
        (void)s;  // failed or not: the oracle judges what is stored
      }
      INFO("fault " << static_cast<int>(fault) << " at request " << kill << " of " << total);
      MemoryObjects restarted = objects.view();  // a new process: no faults
      auto store = Store::open(object_log(restarted), Access::read_write, small_parts());
      REQUIRE(store.ok());
      CHECK((*store)->recovery_report().log_damage.empty());
      const auto latest = (*store)->latest();
      REQUIRE(latest);
      REQUIRE((latest->step == 1 || latest->step == 2));
      (latest->step == 1 ? saw_old : saw_new) += 1;
      for (const auto& s : (*store)->steps()) check_step(**store, s.step);
      // Cleanup never removes a committed step, and the next save goes through.
      auto cleanup = (*store)->collect_garbage(false);
      REQUIRE(cleanup.ok());
      for (const auto& s : (*store)->steps()) check_step(**store, s.step);
      REQUIRE(save_step(**store, 3).ok());
      check_step(**store, 3);
      // A writer that lived aborted its uploads; a killed one's stay, reported and kept (no proof it is dead).
      if (fault == Fault::lose_response) CHECK(restarted.open_uploads() == 0);
      if (restarted.open_uploads() > 0) CHECK_FALSE(cleanup->kept.empty());
    }
  }
  CHECK(saw_old > 0);
  CHECK(saw_new > 0);
}

TEST_CASE("retention retires before it deletes, and a crash in it never loses a kept step", "[object_store][crash]") {
  StoreOptions options = small_parts();
  options.retention.keep_last = 2;
  std::uint64_t total = 0;
  {
    MemoryObjects objects;
    auto store = Store::open(object_log(objects), Access::read_write, options);
    REQUIRE(store.ok());
    REQUIRE(save_step(**store, 1).ok());
    REQUIRE(save_step(**store, 2).ok());
    const std::uint64_t before = objects.requests();
    REQUIRE(save_step(**store, 3).ok());
    total = objects.requests() - before;
    CHECK((*store)->steps().size() == 2);
    CHECK(objects.objects().count(retire_key(1, retired_txns(**store).at(0))) == 1);
  }
  for (std::uint64_t kill = 0; kill <= total; ++kill) {
    MemoryObjects objects;
    {
      auto store = Store::open(object_log(objects), Access::read_write, options);
      REQUIRE(store.ok());
      REQUIRE(save_step(**store, 1).ok());
      REQUIRE(save_step(**store, 2).ok());
      const std::uint64_t start = objects.requests();
      objects.set_hook([&](const MemoryObjects::Request& r) { return r.number == start + kill ? Fault::crash : Fault::none; });
      (void)save_step(**store, 3);
    }
    INFO("killed at request " << kill << " of " << total);
    MemoryObjects restarted = objects.view();
    auto store = Store::open(object_log(restarted), Access::read_only);
    REQUIRE(store.ok());
    CHECK((*store)->recovery_report().log_damage.empty());
    for (const auto& s : (*store)->steps()) check_step(**store, s.step);  // every listed step is whole
    CHECK((*store)->latest()->step >= 2);
  }
}

TEST_CASE("garbage collection deletes only transactions proven dead", "[object_store]") {
  MemoryObjects objects;
  auto store = store_with_steps(objects, {1});
  // An abandoned save (abort object), and an in-progress one (objects, no commit or abort).
  {
    auto tx = (*store)->begin(2);
    REQUIRE(tx.ok());
    const auto w = tensor_bytes(2);
    REQUIRE((*tx)->add_tensor("w", DType::U8, Shape{w.size()}, w.data(), w.size()).ok());
    REQUIRE((*tx)->abort().ok());
  }
  objects.set_object(step_dir_name(7, 99) + "/shard-00000-of-00001.ckpt", "in flight");
  auto dry = (*store)->collect_garbage(true);
  REQUIRE(dry.ok());
  CHECK(dry->removed.empty());  // the abort already removed its own objects
  REQUIRE(dry->kept.size() == 1);
  CHECK(dry->kept[0].find(step_dir_name(7, 99)) != std::string::npos);
  CHECK(objects.objects().count(step_dir_name(7, 99) + "/shard-00000-of-00001.ckpt") == 1);
  check_step(**store, 1);
}

TEST_CASE("ranks save one step into an object store together", "[object_store][ranks]") {
  MemoryObjects objects;
  const auto full = ckpt_test::random_bytes(4 * 50000, 11);
  auto statuses = run_object_ranks(objects, 4, [&](std::uint32_t rank, MemoryObjects& mine, Store* store) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(1));
    CKPT_TRY(tx->begin_piece("w", DType::U8, Shape{full.size()}, Shape{rank * 50000ULL}, Shape{50000}));
    CKPT_TRY(tx->write(full.data() + rank * 50000, 50000));
    CKPT_TRY(tx->end_piece());
    CKPT_ASSIGN_OR_RETURN(auto done, tx->commit());
    if (done.step.world_size != 4) return make_error(Code::corrupt, "world");
    return Status();
  });
  ckpt_test::require_all_ok(statuses);
  MemoryObjects reader_client = objects.view();
  auto store = Store::open(object_log(reader_client), Access::read_only);
  REQUIRE(store.ok());
  ckpt_test::check_w_reads_back(**store, 1, full);
}

TEST_CASE("a rank that cannot upload fails the whole save on every rank", "[object_store][ranks]") {
  MemoryObjects objects;
  const auto full = ckpt_test::random_bytes(2 * 100000, 12);
  auto statuses = run_object_ranks(objects, 2, [&](std::uint32_t rank, MemoryObjects& mine, Store* store) -> Status {
    if (rank == 1) mine.set_hook([](const MemoryObjects::Request& r) { return r.op == Op::upload_part ? Fault::fail : Fault::none; });
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(1));
    CKPT_TRY(tx->begin_piece("w", DType::U8, Shape{full.size()}, Shape{rank * 100000ULL}, Shape{100000}));
    Status w = tx->write(full.data() + rank * 100000, 100000);
    if (w.ok()) w = tx->end_piece();
    (void)w;  // kept for commit, which abandons the step on every rank
    return tx->commit().status();
  });
  for (const auto& s : statuses) {
    INFO(s.message());
    CHECK(s.code() == Code::io);
  }
  MemoryObjects reader_client = objects.view();
  auto store = Store::open(object_log(reader_client), Access::read_only);
  REQUIRE(store.ok());
  CHECK_FALSE((*store)->latest());
  CHECK(objects.open_uploads() == 0);
}

TEST_CASE("a transaction dropped by rank 0 is proven dead by its abort object", "[object_store]") {
  MemoryObjects objects;
  auto store = Store::open(object_log(objects), Access::read_write, small_parts());
  REQUIRE(store.ok());
  std::uint64_t txn = 0;
  {
    auto tx = (*store)->begin(4);
    REQUIRE(tx.ok());
    txn = (*tx)->txn();
    const auto w = tensor_bytes(4);
    REQUIRE((*tx)->add_tensor("w", DType::U8, Shape{w.size()}, w.data(), w.size()).ok());
  }  // dropped: no commit was or will be sent
  CHECK(objects.objects().count(abort_key(4, txn)) == 1);
  CHECK(objects.open_uploads() == 0);
  for (const auto& [key, bytes] : objects.objects()) CHECK(key.rfind(step_dir_name(4, txn), 0) != 0);
  REQUIRE((*store)->refresh().ok());
  REQUIRE(aborted_txns(**store).size() == 1);
}

TEST_CASE("a save whose ranks the caller coordinates commits once every report is in, and not without one",
          "[object_store][ranks]") {
  MemoryObjects objects;
  const auto full = ckpt_test::random_bytes(3 * 40000, 13);
  // The messages of spec/OBJECT.md 4.8 carried by the test, as DCP's plans carry them: ranks open in any order.
  const auto save = [&](std::uint64_t step, bool every_report) -> Result<CommitResult> {
    std::vector<std::unique_ptr<Store>> stores;
    for (int r : {2, 0, 1}) {
      auto s = Store::open_rank(object_log(objects), r, 3, small_parts());
      if (!s.ok()) return s.status();
      stores.push_back(std::move(*s));
    }
    std::swap(stores[0], stores[1]);  // rank order: 0, 2, 1 -> 0, 1, 2
    std::swap(stores[1], stores[2]);
    std::vector<std::string> requests;
    for (auto& s : stores) requests.push_back(s->begin_request(step));
    const std::string decision = stores[0]->decide_begin(step, requests);
    std::vector<std::string> reports;
    std::vector<std::unique_ptr<Transaction>> txs;
    for (std::uint32_t r = 0; r < 3; ++r) {
      CKPT_ASSIGN_OR_RETURN(auto tx, stores[r]->join(decision));
      CKPT_TRY(tx->begin_piece("w", DType::U8, Shape{full.size()}, Shape{r * 40000ULL}, Shape{40000}));
      CKPT_TRY(tx->write(full.data() + r * 40000, 40000));
      CKPT_TRY(tx->end_piece());
      CKPT_ASSIGN_OR_RETURN(std::string report, tx->report());
      reports.push_back(every_report || r != 2 ? report : std::string());
      txs.push_back(std::move(tx));
    }
    if (txs[1]->commit().status().ok()) return make_error(Code::corrupt, "commit() was not refused");
    txs[0]->state().values["lr"] = Value(0.25);
    return txs[0]->commit_reports(reports);
  };
  auto done = save(5, true);
  INFO(done.status().message());
  REQUIRE(done.ok());
  CHECK(done->step.world_size == 3);
  auto failed = save(6, false);  // rank 2's report never arrived: abandoned, abort object first
  CHECK(failed.status().code() == Code::corrupt);
  auto stale = save(5, true);  // a step is committed once
  CHECK(stale.status().code() == Code::conflict);
  MemoryObjects reader_client = objects.view();
  auto store = Store::open(object_log(reader_client), Access::read_only);
  REQUIRE(store.ok());
  REQUIRE((*store)->latest());
  CHECK((*store)->latest()->step == 5);
  CHECK(aborted_txns(**store).size() == 1);
  auto step = (*store)->open_step(5);
  REQUIRE(step.ok());
  std::vector<unsigned char> got(full.size());
  REQUIRE(step->read_tensor("w", got.data(), got.size()).ok());
  CHECK(got == full);
  CHECK(step->state().values.at("lr").as_float() == 0.25);
  CHECK(objects.open_uploads() == 0);
}

TEST_CASE("async saves into an object store commit behind the caller, and a failed upload commits nothing", "[object_store][async]") {
  MemoryObjects objects;
  auto store = Store::open(object_log(objects), Access::read_write, small_parts());
  REQUIRE(store.ok());
  AsyncSaveOptions o;
  o.staging_bytes = 1 << 20;
  o.slab_bytes = 128 << 10;  // the 200 KB tensor streams through two slabs
  auto saver = AsyncSaver::create(**store, o);
  REQUIRE(saver.ok());
  std::vector<std::vector<unsigned char>> kept;
  for (std::uint64_t step : {1, 2}) {
    kept.push_back(tensor_bytes(step));
    SaveRequest r(step);
    r.add_tensor("w", DType::U8, Shape{kept.back().size()}, kept.back().data(), kept.back().size());
    r.state().values["lr"] = Value(0.5);
    REQUIRE((*saver)->save(std::move(r)).ok());
  }
  REQUIRE((*saver)->wait().ok());
  CHECK((*saver)->saves_committed() == 2);
  check_step(**store, 1);
  check_step(**store, 2);
  // The commit objects carry the saves' timing: an estimate is known, as a directory store's journal gives.
  MemoryObjects reopened_client = objects.view();
  auto reopened = Store::open(object_log(reopened_client), Access::read_only);
  REQUIRE(reopened.ok());
  CHECK((*reopened)->estimate_save().known());
  CHECK((*reopened)->save_records().size() == 2);
  CHECK((*reopened)->save_records().back().async);
  // A part upload that fails: the save is abandoned (abort object), its failure comes back at wait().
  objects.set_hook([](const MemoryObjects::Request& r) { return r.op == Op::upload_part ? Fault::fail : Fault::none; });
  const auto third = tensor_bytes(3);
  SaveRequest r(3);
  r.add_tensor("w", DType::U8, Shape{third.size()}, third.data(), third.size());
  REQUIRE((*saver)->save(std::move(r)).ok());
  const Status failed = (*saver)->wait();
  CHECK(failed.code() == Code::io);
  objects.set_hook(nullptr);
  REQUIRE((*store)->refresh().ok());
  CHECK((*store)->latest()->step == 2);
  CHECK(aborted_txns(**store).size() == 1);
  CHECK(objects.open_uploads() == 0);
}
