// Tests for include/ckpt/store/store.hpp: transactions, recovery, retention, locking, read-only access,
// failure handling. Most run over PosixFs in a scratch directory; the failure sweeps run over SimFs
// (wrapped in FaultFs) so they need no real fsync and stay fast.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include "store_test_util.hpp"
#include "test_util.hpp"
#include "thread_ranks.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

constexpr std::size_t kElems = 300;  // 1200 bytes of F32: one 4 KiB chunk per tensor
constexpr FsOpSet kWrites = fs_op_bit(FsOp::pwrite) | fs_op_bit(FsOp::truncate) | fs_op_bit(FsOp::rename) |
                            fs_op_bit(FsOp::unlink) | fs_op_bit(FsOp::mkdir) | fs_op_bit(FsOp::rmdir) |
                            fs_op_bit(FsOp::sync) | fs_op_bit(FsOp::sync_data) | fs_op_bit(FsOp::sync_dir) |
                            fs_op_bit(FsOp::lock);

StoreOptions writable_options(bool create = true) { return ckpt_test::small_store_options(create); }

// The store at path, writable, created unless create is false; REQUIREd to open.
std::unique_ptr<Store> open_store(PosixFs& fs, const std::string& path, bool create = true) {
  auto store = Store::open(fs, path, Access::read_write, writable_options(create));
  REQUIRE(store.ok());
  return std::move(store).value();
}

// Most tests' setting: a scratch directory, the file system it is on, and the store's path in it.
struct StoreDir {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("store");

  std::unique_ptr<Store> open_writable(bool create = true) { return open_store(fs, path, create); }
  // A writable store that keeps the last `keep` steps and writes over retired steps' files (spec/JOURNAL.md 10.1).
  Result<std::unique_ptr<Store>> open_reusing(std::size_t keep) {
    StoreOptions o = writable_options();
    o.retention = RetentionPolicy{keep, 0};
    o.reuse_files = true;
    auto store = Store::open(fs, path, Access::read_write, o);
    REQUIRE(store.ok());
    return store;
  }
  // This rank's shard file of a live step.
  fsys::path shard_path(Store& store, std::uint64_t step) {
    const auto info = store.find(step);
    REQUIRE(info.ok());
    return fsys::path(path) / info->dir / shard_file_name(0, 1);
  }
  static ino_t inode(const fsys::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_ino;
  }
};

std::vector<float> weights(std::uint64_t step) {
  std::vector<float> w(kElems);
  for (std::size_t i = 0; i < kElems; ++i) w[i] = static_cast<float>(step) + static_cast<float>(i) / 1000.0f;
  return w;
}

// Saves one step: a weight tensor, an optimizer tensor and a training state derived from the step.
Result<CommitResult> save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const auto w = weights(step);
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4));
  const auto m = weights(step + 1);
  CKPT_TRY(tx->add_optimizer_tensor("adam.m/w", DType::F32, {kElems}, m.data(), m.size() * 4));
  tx->state().rng = "rng-" + std::to_string(step);
  tx->state().data = DataPosition{step / 10, step * 32, "loader"};
  tx->state().values["lr"] = 1.0 / static_cast<double>(step + 1);
  tx->state().values["tag"] = "step " + std::to_string(step);
  return tx->commit();
}

// Creates the store at path with each step saved, and closes it.
void create_with_steps(PosixFs& fs, const std::string& path, std::initializer_list<std::uint64_t> steps) {
  auto store = open_store(fs, path);
  for (const std::uint64_t step : steps) REQUIRE(save(*store, step).ok());
}

// Opens a committed step and checks every byte and field save() wrote.
void check_step(Store& store, std::uint64_t step) {
  auto reader = store.open_step(step);
  INFO(reader.status().to_string());
  REQUIRE(reader.ok());
  std::vector<float> w(kElems), m(kElems);
  REQUIRE(reader->read_tensor("w", w.data(), w.size() * 4).ok());
  REQUIRE(reader->read_tensor("adam.m/w", m.data(), m.size() * 4).ok());
  CHECK(w == weights(step));
  CHECK(m == weights(step + 1));
  const TrainingState& st = reader->state();
  CHECK(st.step == step);
  CHECK(st.rng == "rng-" + std::to_string(step));
  CHECK(st.data == DataPosition{step / 10, step * 32, "loader"});
  CHECK(st.optimizer_tensors == std::vector<std::string>{"adam.m/w"});
  CHECK(st.values.at("tag").as_string() == "step " + std::to_string(step));
}

std::vector<std::uint64_t> step_numbers(const Store& store) {
  std::vector<std::uint64_t> out;
  for (const auto& s : store.steps()) out.push_back(s.step);
  return out;
}

template <class Fs>
std::vector<std::string> entries(Fs& fs, const std::string& dir) {
  auto list = fs.list_dir(dir);
  REQUIRE(list.ok());
  std::vector<std::string> names = *list;
  std::sort(names.begin(), names.end());
  return names;
}

// Leaves an unfinished transaction behind the last commit, as a crashed writer would: a durable BEGIN,
// its directory with a partial shard and MANIFEST, optionally a file nobody named, and a torn tail.
void crash_mid_save(PosixFs& fs, const std::string& store, std::uint64_t txn, std::uint64_t step, bool foreign_file) {
  const std::string journal_path = store + "/JOURNAL";
  auto scan = scan_journal(fs, journal_path);
  REQUIRE(scan.ok());
  auto writer = JournalWriter::open(fs, journal_path, scan->end);
  REQUIRE(writer.ok());
  BeginRecord b;
  b.txn = txn;
  b.step = step;
  b.files = {TxnFile{0, shard_file_name(0, 1)}};
  REQUIRE(writer->append_group({begin_record(b).value()}).ok());
  const std::string dir = store + "/" + step_dir_name(step, txn);
  REQUIRE(fs.mkdir(dir).ok());
  ckpt_test::write_file(dir + "/" + shard_file_name(0, 1), "partial shard");
  ckpt_test::write_file(dir + "/MANIFEST", "partial manifest");
  if (foreign_file) ckpt_test::write_file(dir + "/notes.txt", "not ours");
  // A torn group: the first 100 bytes of the next append, which the crash cut inside its first record.
  BeginRecord next;
  next.txn = txn + 1;
  next.step = step + 1;
  next.files = {TxnFile{0, std::string(90, 'n') + ".ckpt"}};
  const std::string journal = ckpt_test::read_file(journal_path);
  const std::string group = encode_group({begin_record(next).value()}, journal.size());
  ckpt_test::write_file(journal_path, journal + group.substr(0, 100));
}

}  // namespace

TEST_CASE_METHOD(StoreDir, "commit makes a step that steps, latest, find and open_step see", "[store]") {
  auto store = open_writable();
  CHECK_FALSE(store->latest());
  CHECK(store->recovery_report().clean());
  for (const std::uint64_t step : {100, 200, 300}) {
    auto r = save(*store, step);
    REQUIRE(r.ok());
    CHECK(r->step.step == step);
    CHECK(r->step.dir == step_dir_name(step, r->step.txn));
    CHECK(r->retired.empty());
  }
  CHECK(step_numbers(*store) == std::vector<std::uint64_t>{100, 200, 300});
  REQUIRE(store->latest());
  CHECK(store->latest()->step == 300);
  CHECK(store->find(200)->txn == 2);
  CHECK(store->find(250).status().code() == Code::not_found);
  for (const std::uint64_t step : {100, 200, 300}) check_step(*store, step);
  auto latest = store->open_latest();
  REQUIRE(latest.ok());
  CHECK(latest->tensor_names() == std::vector<std::string>{"adam.m/w", "w"});
  CHECK(latest->manifest().world_size == 1);
  auto verified = store->verify_step(300);
  REQUIRE(verified.ok());
  CHECK(verified->ok());
  CHECK(verified->shards.size() == 1);
  // The layout of spec/JOURNAL.md 2: JOURNAL, LOCK, one directory per transaction.
  CHECK(entries(fs, path) == std::vector<std::string>{"JOURNAL", "LOCK", "step-100-1", "step-200-2", "step-300-3"});
  CHECK(entries(fs, path + "/step-100-1") == std::vector<std::string>{"MANIFEST", "shard-00000-of-00001.ckpt"});
  store.reset();
  // Reopened, read-only and writable, the same steps.
  auto ro = Store::open(fs, path, Access::read_only);
  REQUIRE(ro.ok());
  CHECK(step_numbers(**ro) == std::vector<std::uint64_t>{100, 200, 300});
  check_step(**ro, 200);
  auto rw = open_writable(false);
  CHECK(rw->recovery_report().clean());
  CHECK(rw->next_txn() == 4);
}

TEST_CASE("a store is created only when asked and never over other files", "[store]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  CHECK(Store::open(fs, dir.file("none"), Access::read_write, writable_options(false)).status().code() == Code::not_found);
  CHECK(Store::open(fs, dir.file("none"), Access::read_only).status().code() == Code::not_found);
  CHECK_FALSE(fsys::exists(dir.file("none")));
  REQUIRE(fs.mkdir(dir.file("busy")).ok());
  ckpt_test::write_file(dir.file("busy/data.bin"), "x");
  auto busy = Store::open(fs, dir.file("busy"), Access::read_write, writable_options());
  CHECK(busy.status().code() == Code::conflict);
  CHECK_FALSE(fsys::exists(dir.file("busy/JOURNAL")));
  // An empty existing directory is fine.
  REQUIRE(fs.mkdir(dir.file("empty")).ok());
  CHECK(Store::open(fs, dir.file("empty"), Access::read_write, writable_options()).ok());
}

TEST_CASE_METHOD(StoreDir, "a second writer gets a conflict and readers are never blocked", "[store]") {
  auto first = open_writable();
  REQUIRE(save(*first, 1).ok());
  auto second = Store::open(fs, path, Access::read_write, writable_options());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == Code::conflict);
  CHECK(second.status().message().find("read-only") != std::string::npos);
  CHECK(recover_store(fs, path, true).status().code() == Code::conflict);
  auto reader = Store::open(fs, path, Access::read_only);
  REQUIRE(reader.ok());
  CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1});
  first.reset();  // the lock goes with the store
  CHECK(Store::open(fs, path, Access::read_write, writable_options()).ok());
}

TEST_CASE_METHOD(StoreDir, "a read-only store refuses to write", "[store]") {
  REQUIRE(Store::open(fs, path, Access::read_write, writable_options()).ok());
  auto ro = Store::open(fs, path, Access::read_only);
  REQUIRE(ro.ok());
  CHECK((*ro)->begin(1).status().code() == Code::invalid_argument);
  CHECK((*ro)->retire(1).code() == Code::invalid_argument);
  CHECK((*ro)->apply_retention(RetentionPolicy{1, 0}).status().code() == Code::invalid_argument);
}

TEST_CASE_METHOD(StoreDir, "abort removes the transaction's files and its id and names are never reused", "[store]") {
  auto store = open_writable();
  REQUIRE(save(*store, 10).ok());
  {
    auto tx = store->begin(20);
    REQUIRE(tx.ok());
    CHECK((*tx)->txn() == 2);
    CHECK(fsys::exists((*tx)->directory()));
    const auto w = weights(20);
    REQUIRE((*tx)->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4).ok());
    CHECK(store->begin(21).status().code() == Code::conflict);  // one transaction at a time
    REQUIRE((*tx)->abort().ok());
    CHECK_FALSE(fsys::exists((*tx)->directory()));
    CHECK((*tx)->commit().status().code() == Code::invalid_argument);
  }
  {
    auto tx = store->begin(20);  // destroyed without commit: aborted
    REQUIRE(tx.ok());
    CHECK((*tx)->txn() == 3);
  }
  auto r = save(*store, 20);
  REQUIRE(r.ok());
  CHECK(r->step.txn == 4);
  CHECK(r->step.dir == "step-20-4");
  CHECK(entries(fs, path) == std::vector<std::string>{"JOURNAL", "LOCK", "step-10-1", "step-20-4"});
  std::vector<std::string> states;
  for (const auto& t : store->transactions())
    states.push_back(std::to_string(t.txn) + ":" + txn_state_name(t.state));
  CHECK(states == std::vector<std::string>{"1:committed", "2:aborted", "3:aborted", "4:committed"});
  CHECK(store->transactions()[1].abort_reason == AbortReason::user);
  store.reset();
  auto again = open_writable(false);
  CHECK(again->recovery_report().clean());
  CHECK(again->next_txn() == 5);
}

TEST_CASE_METHOD(StoreDir, "a reader sees only committed steps while a transaction is open", "[store]") {
  auto writer = open_writable();
  REQUIRE(save(*writer, 1).ok());
  auto tx = writer->begin(2);
  REQUIRE(tx.ok());
  const auto w = weights(2);
  REQUIRE((*tx)->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4).ok());
  auto reader = Store::open(fs, path, Access::read_only);
  REQUIRE(reader.ok());
  CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1});
  CHECK((*reader)->latest()->step == 1);
  CHECK((*reader)->open_step(2).status().code() == Code::not_found);
  REQUIRE((*tx)->commit().ok());
  CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1});  // a snapshot until refreshed
  REQUIRE((*reader)->refresh().ok());
  CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1, 2});
  auto step2 = (*reader)->open_step(2);
  REQUIRE(step2.ok());
  std::vector<float> back(kElems);
  REQUIRE(step2->read_tensor("w", back.data(), back.size() * 4).ok());
  CHECK(back == w);
}

TEST_CASE_METHOD(StoreDir, "a read-only open never writes, even with a torn tail and an open transaction", "[store]") {
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  crash_mid_save(fs, path, 2, 2, false);
  const auto before = ckpt_test::directory_tree(path);
  FaultFs<PosixFs> guarded(fs, FaultPlan::from(1, Fault::io_error, kWrites));  // any write would fail
  auto ro = Store::open(guarded, path, Access::read_only);
  REQUIRE(ro.ok());
  CHECK(step_numbers(**ro) == std::vector<std::uint64_t>{1});
  CHECK((*ro)->recovery_report().journal.torn_tail);
  CHECK_FALSE((*ro)->recovery_report().applied);
  check_step(**ro, 1);
  auto v = (*ro)->verify_step(1);
  REQUIRE(v.ok());
  CHECK(v->ok());
  REQUIRE((*ro)->refresh().ok());
  CHECK(check_store(guarded, path).ok());
  CHECK(guarded.count() == 0);  // not one write-kind operation was even tried
  ro->reset();
  CHECK(ckpt_test::directory_tree(path) == before);
}

TEST_CASE_METHOD(StoreDir, "a writable open truncates a torn tail and aborts an open transaction, removing only the files its BEGIN named",
          "[store]") {
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  for (const bool foreign : {true, false}) {
    INFO("foreign file " << foreign);
    const std::uint64_t txn = foreign ? 2 : 3;
    crash_mid_save(fs, path, txn, 7, foreign);
    const std::string step_dir = path + "/" + step_dir_name(7, txn);
    const std::uint64_t journal_end = fsys::file_size(path + "/JOURNAL") - 100;
    auto store = open_writable(false);
    const RecoveryReport& report = store->recovery_report();
    CHECK(report.applied);
    CHECK_FALSE(report.corrupt());
    std::vector<std::string> actions;
    for (const auto& a : report.actions) {
      CHECK(a.done);
      actions.push_back(recovery_action_name(a.kind));
    }
    std::vector<std::string> expected{"truncate_journal", "append_abort", "rewrite_journal", "remove_file", "remove_file"};
    if (!foreign) expected.push_back("remove_dir");
    expected.push_back("sync_dir");
    CHECK(actions == expected);
    CHECK(report.actions[0].offset == journal_end);
    CHECK(report.actions[0].length == 100);
    CHECK(report.journal.torn_tail->clean_tear);
    CHECK_FALSE(report.tail_damaged());
    // The journal was written anew: no torn bytes, the ABORT durable in it.
    auto rescan = scan_journal(fs, path + "/JOURNAL");
    REQUIRE(rescan.ok());
    CHECK_FALSE(rescan->torn_tail);
    CHECK_FALSE(rescan->corrupt());
    CHECK(rescan->end == rescan->file_size);
    const TxnInfo& t = store->transactions().back();
    CHECK(t.txn == txn);
    CHECK(t.state == TxnState::aborted);
    CHECK(t.abort_reason == AbortReason::recovery);
    if (foreign) {
      CHECK(entries(fs, step_dir) == std::vector<std::string>{"notes.txt"});  // never ours to delete
      REQUIRE(report.notes.size() == 1);
      CHECK(report.notes[0].find("notes.txt") != std::string::npos);
    } else {
      CHECK_FALSE(fsys::exists(step_dir));
    }
    CHECK(step_numbers(*store) == std::vector<std::uint64_t>{1});
    CHECK(store->next_txn() == txn + 1);
    check_step(*store, 1);
  }
  // Recovery is idempotent: a clean store needs nothing more.
  auto again = open_writable(false);
  CHECK(again->recovery_report().clean());
  CHECK(again->recovery_report().unknown_entries.empty());
}

TEST_CASE_METHOD(StoreDir, "check_store and a dry-run recovery plan without changing anything", "[store]") {
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  crash_mid_save(fs, path, 2, 2, false);
  const auto before = ckpt_test::directory_tree(path);
  auto check = check_store(fs, path);
  REQUIRE(check.ok());
  CHECK(check->dry_run);
  CHECK_FALSE(check->applied);
  CHECK(check->actions.size() == 7);  // truncate, abort, rewrite, 2 files, dir, sync
  CHECK(check->next_txn == 3);
  REQUIRE(check->transactions.size() == 2);
  CHECK(check->transactions[1].state == TxnState::open);
  auto dry = recover_store(fs, path, true);
  REQUIRE(dry.ok());
  CHECK(dry->actions.size() == check->actions.size());
  for (std::size_t i = 0; i < dry->actions.size(); ++i) CHECK(dry->actions[i].describe() == check->actions[i].describe());
  fsys::remove(path + "/LOCK");  // the dry run's lock file is the only thing it may leave
  CHECK(ckpt_test::directory_tree(path) == [&] {
    auto t = before;
    t.erase("LOCK");
    return t;
  }());
  auto real = recover_store(fs, path, false);
  REQUIRE(real.ok());
  CHECK(real->applied);
  CHECK_FALSE(fsys::exists(path + "/step-2-2"));
  auto after = check_store(fs, path);
  REQUIRE(after.ok());
  CHECK(after->clean());
}

TEST_CASE_METHOD(StoreDir, "mid-log corruption refuses a writable open and is reported read-only", "[store]") {
  {
    auto store = open_writable();
    for (const std::uint64_t step : {1, 2, 3}) REQUIRE(save(*store, step).ok());
  }
  // Pages: 0 header, 1 BEGIN 1, 2 COMMIT 1, 3 BEGIN 2, 4 COMMIT 2, 5 BEGIN 3, 6 COMMIT 3.
  const std::string journal_path = path + "/JOURNAL";
  std::string bytes = ckpt_test::read_file(journal_path);
  REQUIRE(bytes.size() == 7 * journal::kPageSize);
  bytes[3 * journal::kPageSize + 30] = static_cast<char>(bytes[3 * journal::kPageSize + 30] ^ 0x04);
  ckpt_test::write_file(journal_path, bytes);
  const auto before = ckpt_test::directory_tree(path);

  auto rw = Store::open(fs, path, Access::read_write, writable_options(false));
  REQUIRE_FALSE(rw.ok());
  CHECK(rw.status().code() == Code::corrupt);
  CHECK(rw.status().message().find("ckpt-repair") != std::string::npos);
  CHECK(rw.status().message().find("[12288, 16384)") != std::string::npos);
  auto ro = Store::open(fs, path, Access::read_only);
  REQUIRE_FALSE(ro.ok());
  CHECK(ro.status().code() == Code::corrupt);

  StoreOptions tolerant;
  tolerant.allow_corrupt_journal = true;
  auto inspect = Store::open(fs, path, Access::read_only, tolerant);
  REQUIRE(inspect.ok());
  const RecoveryReport& report = (*inspect)->recovery_report();
  CHECK(report.corrupt());
  REQUIRE(report.journal.corruption.size() == 1);
  CHECK(report.journal.corruption[0].offset == 3 * journal::kPageSize);
  CHECK(report.journal.corruption[0].length == journal::kPageSize);
  REQUIRE(report.problems.size() == 1);
  CHECK(report.problems[0].message.find("no BEGIN for txn 2") != std::string::npos);
  CHECK(report.problems[0].region == "journal");  // the record that breaks the protocol, where it is
  CHECK(report.problems[0].file == report.journal.path);
  CHECK(report.problems[0].offset > 0);
  CHECK(report.problems[0].length > 0);
  CHECK(step_numbers(**inspect) == std::vector<std::uint64_t>{1, 3});  // what is provable, nothing more
  check_step(**inspect, 3);

  auto recovered = recover_store(fs, path, false);
  REQUIRE(recovered.ok());
  CHECK(recovered->corrupt());
  CHECK_FALSE(recovered->applied);
  CHECK(recovered->actions.empty());
  fsys::remove(path + "/LOCK");
  auto expected = before;
  expected.erase("LOCK");
  CHECK(ckpt_test::directory_tree(path) == expected);  // nothing was changed by any of it
}

TEST_CASE_METHOD(StoreDir, "retention keeps the last N and every K-th step, writing RETIRE before deleting", "[store]") {
  StoreOptions o = writable_options();
  o.retention = RetentionPolicy{2, 10};
  auto store = Store::open(fs, path, Access::read_write, o);
  REQUIRE(store.ok());
  std::map<std::uint64_t, std::vector<std::uint64_t>> retired_by;
  for (const std::uint64_t step : {5, 10, 15, 20, 25, 30}) {
    auto r = save(**store, step);
    REQUIRE(r.ok());
    REQUIRE(r->retention.ok());
    for (const auto& s : r->retired) retired_by[step].push_back(s.step);
  }
  CHECK(retired_by == std::map<std::uint64_t, std::vector<std::uint64_t>>{{15, {5}}, {25, {15}}});
  CHECK(step_numbers(**store) == std::vector<std::uint64_t>{10, 20, 25, 30});
  CHECK(entries(fs, path) == std::vector<std::string>{"JOURNAL", "LOCK", "step-10-2", "step-20-4", "step-25-5", "step-30-6"});
  // The journal holds a RETIRE for each, after its COMMIT.
  auto scan = scan_journal(fs, path + "/JOURNAL");
  REQUIRE(scan.ok());
  std::vector<std::uint64_t> retire_txns;
  for (const auto& rec : scan->records)
    if (const auto* r = std::get_if<RetireRecord>(&rec.body)) retire_txns.push_back(r->txn);
  CHECK(retire_txns == std::vector<std::uint64_t>{1, 3});
  // Explicit retirement, and the latest survives any policy.
  REQUIRE((*store)->retire(20).ok());
  CHECK((*store)->retire(20).code() == Code::not_found);
  auto kept = (*store)->apply_retention(RetentionPolicy{1, 0});
  REQUIRE(kept.ok());
  CHECK(kept->size() == 2);
  CHECK(step_numbers(**store) == std::vector<std::uint64_t>{30});
  CHECK((*store)->apply_retention(RetentionPolicy{0, 0})->empty());  // keep_last 0: retention off
  store->reset();
  auto again = Store::open(fs, path, Access::read_only);
  REQUIRE(again.ok());
  CHECK(step_numbers(**again) == std::vector<std::uint64_t>{30});
  CHECK((*again)->recovery_report().clean());
}

TEST_CASE_METHOD(StoreDir, "with reuse_files a save writes over a retired step's file: the same inode, cut to size, no old byte",
                 "[store][reuse]") {
  // spec/JOURNAL.md 10.1: keep-last 1, so each save retires the step before it; the first steps are larger
  // than the later ones, so a file taken from slots/ is longer than the shard written over it.
  auto store = open_reusing(1);
  auto shard_of = [&](std::uint64_t step) { return shard_path(**store, step); };
  auto save_of = [&](std::uint64_t step, std::size_t elems) {
    auto tx = (*store)->begin(step);
    REQUIRE(tx.ok());
    std::vector<float> w(elems, static_cast<float>(step));
    REQUIRE((*tx)->add_tensor("w", DType::F32, {elems}, w.data(), w.size() * 4).ok());
    auto c = (*tx)->commit();
    REQUIRE(c.ok());
  };
  save_of(1, 20000);
  const auto first = inode(shard_of(1));
  const auto big = fsys::file_size(shard_of(1));
  save_of(2, 20000);  // retires 1: its file goes to slots/
  CHECK(entries(fs, path + "/slots").size() == 1);
  save_of(3, 500);  // takes it
  CHECK(inode(shard_of(3)) == first);
  CHECK(fsys::file_size(shard_of(3)) < big);
  CHECK(entries(fs, path + "/slots").size() == 1);  // 2's file, retired by 3
  for (std::uint64_t s = 4; s <= 20; ++s) save_of(s, 500 + s);
  CHECK(entries(fs, path + "/slots").size() <= journal::kMaxSlots);
  // Every byte of the latest step is its own: it verifies, and reads back what was saved.
  auto reader = (*store)->open_step(20);
  REQUIRE(reader.ok());
  auto verified = verify_file(fs, shard_of(20).string());
  REQUIRE(verified.ok());
  CHECK(verified->ok());
  CHECK(verified->file_size == fsys::file_size(shard_of(20)));
  std::vector<float> w(520);
  REQUIRE(reader->read_tensor("w", w.data(), w.size() * 4).ok());
  CHECK(w == std::vector<float>(520, 20.0f));
  // slots/ is the store's own: a reopen reports no unknown entry and recovers nothing.
  store->reset();
  auto again = Store::open(fs, path, Access::read_only);
  REQUIRE(again.ok());
  CHECK((*again)->recovery_report().unknown_entries.empty());
  CHECK((*again)->recovery_report().clean());
}

TEST_CASE_METHOD(StoreDir, "a reserved slot is the next save's file: bytes copied into it are committed in place, the ring stays mapped",
                 "[store][reuse][in_place]") {
  // spec/JOURNAL.md 10.1: keep-last 2; each save's bytes are copied to where reserve_slot says, then written
  // from there, so the writer only hashes them; from the third save on the slot is a retired step's file.
  auto store = open_reusing(2);
  std::set<ino_t> files;
  for (std::uint64_t step = 1; step <= 8; ++step) {
    const auto w = ckpt_test::random_bytes(30000 + step, step), m = ckpt_test::random_bytes(77, step + 100);
    auto at = (*store)->reserve_slot({w.size(), m.size()});
    REQUIRE(at.ok());
    REQUIRE(at->size() == 2);
    std::memcpy((*at)[0], w.data(), w.size());
    std::memcpy((*at)[1], m.data(), m.size());
    auto tx = (*store)->begin(step);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->add_tensor("w", DType::U8, {w.size()}, (*at)[0], w.size()).ok());
    REQUIRE((*tx)->add_tensor("m", DType::U8, {m.size()}, (*at)[1], m.size()).ok());
    REQUIRE((*tx)->commit().ok());
    files.insert(inode(shard_path(**store, step)));
    auto verified = (*store)->verify_step(step);
    REQUIRE(verified.ok());
    CHECK(verified->ok());
    auto reader = (*store)->open_step(step);
    REQUIRE(reader.ok());
    std::vector<unsigned char> back(w.size());
    REQUIRE(reader->read_tensor("w", back.data(), back.size()).ok());
    CHECK(back == w);
    // The committed shard's bytes as its store keeps them mapped: a sender reads them there (spec/TIERS.md 4.2).
    const std::string_view kept = (*store)->kept_mapping(shard_path(**store, step));
    const auto& piece = reader->shard(0).index().pieces[0];
    REQUIRE(kept.size() >= piece.data_offset + w.size());
    CHECK(std::memcmp(kept.data() + piece.data_offset, w.data(), w.size()) == 0);
  }
  CHECK((*store)->kept_mapping(path + "/JOURNAL").empty());  // not a file of the ring
  // The ring: the two steps kept and the one retired file in slots/, taken in turn; no other file was made.
  CHECK(files.size() == 3);
  CHECK(entries(fs, path + "/slots").size() == 1);
  // Between saves only; and only with reuse_files, on a file system that maps.
  auto tx = (*store)->begin(9);
  REQUIRE(tx.ok());
  CHECK((*store)->reserve_slot({1}).status().code() == Code::conflict);
  REQUIRE((*tx)->abort().ok());
  StoreOptions plain = writable_options();
  auto other = Store::open(fs, dir.file("plain"), Access::read_write, plain);
  REQUIRE(other.ok());
  CHECK((*other)->reserve_slot({1}).status().code() == Code::invalid_argument);
  SimFs sim;
  plain.reuse_files = true;
  auto simulated = Store::open(sim, "/s", Access::read_write, plain);
  REQUIRE(simulated.ok());
  CHECK((*simulated)->reserve_slot({1}).status().code() == Code::unsupported);
}

TEST_CASE_METHOD(StoreDir, "a retired step whose files could not be removed is finished by the next writable open", "[store]") {
  FaultFs<PosixFs> faulty(fs);
  StoreOptions o = writable_options();
  o.retention = RetentionPolicy{1, 0};
  {
    auto store = Store::open(faulty, path, Access::read_write, o);
    REQUIRE(store.ok());
    REQUIRE(save(**store, 1).ok());
    faulty.set_plan(FaultPlan::nth(1, Fault::io_error, fs_op_bit(FsOp::unlink)));  // MANIFEST of step 1 stays
    auto r = save(**store, 2);
    REQUIRE(r.ok());  // the commit stands
    CHECK(r->retention.code() == Code::io);
    CHECK(step_numbers(**store) == std::vector<std::uint64_t>{2});
    CHECK(entries(fs, path + "/step-1-1") == std::vector<std::string>{"MANIFEST"});
  }
  faulty.set_plan({});
  auto store = Store::open(faulty, path, Access::read_write, o);
  REQUIRE(store.ok());
  CHECK_FALSE(fsys::exists(path + "/step-1-1"));
  CHECK(step_numbers(**store) == std::vector<std::uint64_t>{2});
  check_step(**store, 2);
}

TEST_CASE_METHOD(StoreDir, "a live step number is refused; retired, it is saved again (a rollback)", "[store]") {
  auto store = open_writable();
  REQUIRE(save(*store, 10).ok());
  REQUIRE(save(*store, 20).ok());
  // A step number is live at most once, on every commit log (spec/JOURNAL.md 10): nothing is begun.
  auto again = store->begin(10);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == Code::conflict);
  CHECK_THAT(again.status().message(), Catch::Contains("retire it"));
  // A rollback retires the newer steps; their numbers can then be saved again, below or above the latest.
  REQUIRE(store->retire(20).ok());
  REQUIRE(store->retire(10).ok());
  REQUIRE(save(*store, 10).ok());
  CHECK(step_numbers(*store) == std::vector<std::uint64_t>{10});
  CHECK(store->find(10)->txn == 3);
  CHECK(store->latest()->txn == 3);
  check_step(*store, 10);
  // Steps need not increase: the latest is the live step with the highest number.
  REQUIRE(save(*store, 5).ok());
  CHECK(step_numbers(*store) == std::vector<std::uint64_t>{5, 10});
  CHECK(store->latest()->step == 10);
}

TEST_CASE_METHOD(StoreDir, "opening a step checks the manifest and shards it names; verify_step checks every chunk", "[store]") {
  auto store = open_writable();
  REQUIRE(save(*store, 1).ok());
  REQUIRE(save(*store, 2).ok());
  const std::string shard1 = path + "/step-1-1/" + shard_file_name(0, 1);
  const std::string manifest1 = path + "/step-1-1/MANIFEST";
  const std::string good_shard = ckpt_test::read_file(shard1);
  const std::string good_manifest = ckpt_test::read_file(manifest1);

  // A flipped data byte: the cheap open passes, the read and the full verification find it.
  std::string damaged = good_shard;
  damaged[128 + 10] = static_cast<char>(damaged[128 + 10] ^ 1);  // inside the first piece: data starts at 128
  ckpt_test::write_file(shard1, damaged);
  auto reader = store->open_step(1);
  REQUIRE(reader.ok());
  std::vector<float> w(kElems);
  CHECK(reader->read_tensor("w", w.data(), w.size() * 4).code() == Code::corrupt);
  auto v = store->verify_step(1);
  REQUIRE(v.ok());
  CHECK_FALSE(v->ok());
  REQUIRE(v->shards.size() == 1);
  CHECK(v->shards[0].problems.size() == 1);
  ckpt_test::write_file(shard1, good_shard);

  // Another step's manifest in its place: the COMMIT digest catches it.
  ckpt_test::write_file(manifest1, ckpt_test::read_file(path + "/step-2-2/MANIFEST"));
  auto swapped = store->open_step(1);
  REQUIRE_FALSE(swapped.ok());
  CHECK((swapped.status().code() == Code::corrupt || swapped.status().code() == Code::incomplete));
  auto v2 = store->verify_step(1);
  REQUIRE(v2.ok());
  CHECK_FALSE(v2->ok());
  ckpt_test::write_file(manifest1, good_manifest);

  // Another step's shard in its place: the manifest's size, uuid and index digest catch it.
  ckpt_test::write_file(shard1, ckpt_test::read_file(path + "/step-2-2/" + shard_file_name(0, 1)));
  auto other = store->open_step(1);
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().code() == Code::corrupt);
  ckpt_test::write_file(shard1, good_shard);

  // A missing shard.
  fsys::remove(shard1);
  CHECK(store->open_step(1).status().code() == Code::not_found);
  ckpt_test::write_file(shard1, good_shard);
  check_step(*store, 1);
}

TEST_CASE_METHOD(StoreDir, "unknown entries are reported and left alone, and txn ids stay above any step directory", "[store]") {
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  REQUIRE(fs.mkdir(path + "/step-5-99").ok());
  ckpt_test::write_file(path + "/step-5-99/x.ckpt", "x");
  ckpt_test::write_file(path + "/README", "hello");
  auto store = open_writable(false);
  CHECK(store->recovery_report().unknown_entries == std::vector<std::string>{"README", "step-5-99"});
  CHECK(store->next_txn() == 100);
  auto r = save(*store, 5);
  REQUIRE(r.ok());
  CHECK(r->step.dir == "step-5-100");
  CHECK(fsys::exists(path + "/step-5-99/x.ckpt"));
  CHECK(fsys::exists(path + "/README"));
}

TEST_CASE("a store keeps the communicator it was opened with", "[store]") {
  SimFs sim;
  auto alone = Store::open(sim, "/s", Access::read_write, writable_options());
  REQUIRE(alone.ok());
  CHECK((*alone)->world_size() == 1);  // the plain open is a world of one
  CHECK((*alone)->rank() == 0);
  // A communicator that loses every rank's message: the collective open fails on the evidence of the
  // gather (a world of 2 sent nothing), so begin() can never run with a world the store was not opened with.
  struct LosingComm {
    int rank() const { return 0; }
    int size() const { return 2; }
    Status barrier() { return Status(); }
    Result<std::vector<std::string>> gather(std::string, int) { return std::vector<std::string>{}; }
    Status broadcast(std::string&, int) { return Status(); }
  } comm;
  auto two = Store::open(sim, "/t", Access::read_write, writable_options(), comm);
  CHECK(two.status().code() == Code::invalid_argument);
  CHECK(two.status().message().find("gathered 0 statuses from a world of 2") != std::string::npos);
}

namespace {


// Rank r's row of a 3 x 300 F32 tensor, so that a step needs every rank.
Status add_row(Transaction& tx, std::uint32_t rank, std::uint64_t step) {
  const auto w = weights(step + static_cast<std::uint64_t>(rank));
  CKPT_TRY(tx.begin_piece("w", DType::F32, {3, kElems}, {static_cast<std::uint64_t>(rank), 0}, {1, kElems}));
  CKPT_TRY(tx.write(w.data(), w.size() * 4));
  return tx.end_piece();
}

}  // namespace

TEST_CASE("a rank that drops its open transaction fails the others' commit, and nobody waits", "[store][ranks]") {
  PosixFs fs;
  for (const int dropping : {1, 0}) {
    INFO("rank " << dropping << " returns early");
    ckpt_test::TempDir dir;
    const std::string path = dir.file("store");
    const auto results = ckpt_test::run_ranks(3, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
      CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, writable_options(), comm));
      {
        CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(1));
        CKPT_TRY(add_row(*tx, rank, 1));
        CKPT_TRY(tx->commit().status());
      }
      CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(2));
      CKPT_TRY(add_row(*tx, rank, 2));
      if (static_cast<int>(rank) == dropping) return make_error(Code::io, "early return");  // tx and store destroyed, no collective
      return tx->commit().status();
    });
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << ": " << results[static_cast<std::size_t>(r)].to_string());
      CHECK_FALSE(results[static_cast<std::size_t>(r)].ok());
      if (r != dropping) CHECK(results[static_cast<std::size_t>(r)].message().find("rank " + std::to_string(dropping) + " dropped step 2 (txn 2)") != std::string::npos);
    }
    auto store = open_store(fs, path, false);
    REQUIRE(store->latest());
    CHECK(store->latest()->step == 1);  // the previous step is untouched
    REQUIRE(store->transactions().size() == 2);
    CHECK(store->transactions()[1].state == TxnState::aborted);
    CHECK_FALSE(fsys::exists(path + "/" + store->transactions()[1].dir()));
    CHECK(store->recovery_report().problems.empty());
  }
}

TEST_CASE("the commit takes the shard's pieces from its writer, and can verify the file it wrote", "[store]") {
  PosixFs fs;
  ckpt_test::TempDir dir;
  for (const bool verify_written : {false, true}) {
    INFO("verify_written " << verify_written);
    StoreOptions o = writable_options();
    o.verify_written = verify_written;
    auto store = Store::open(fs, dir.file(verify_written ? "checked" : "plain"), Access::read_write, o);
    REQUIRE(store.ok());
    auto tx = (*store)->begin(7);
    REQUIRE(tx.ok());
    // Pieces written straight through the shard writer count like any other (the index pins them).
    const auto w = weights(7);
    REQUIRE((*tx)->shard_writer().add_tensor("direct", DType::F32, {kElems}, w.data(), w.size() * 4).ok());
    auto committed = (*tx)->commit();
    REQUIRE(committed);
    auto reader = (*store)->open_step(7);
    REQUIRE(reader.ok());
    std::vector<float> back(kElems);
    REQUIRE(reader->read_tensor("direct", back.data(), back.size() * 4).ok());
    CHECK(back == w);
  }
}

TEST_CASE("a journal failure makes the store refuse writes until it is reopened", "[store]") {
  SimFs sim;
  FaultFs<SimFs> faulty(sim);
  {
    auto store = Store::open(faulty, "/s", Access::read_write, writable_options());
    REQUIRE(store.ok());
    REQUIRE(save(**store, 1).ok());
    faulty.set_plan(FaultPlan::nth(1, Fault::io_error, fs_op_bit(FsOp::sync_data)));  // the BEGIN's fdatasync
    CHECK(save(**store, 2).status().code() == Code::io);
    CHECK((*store)->failed());
    faulty.set_plan({});
    CHECK((*store)->begin(3).status().code() == Code::io);
    CHECK((*store)->retire(1).code() == Code::io);
    CHECK(faulty.count() == 0);  // refused without touching the journal
    check_step(**store, 1);      // reads still work
  }
  auto store = Store::open(faulty, "/s", Access::read_write, writable_options());
  REQUIRE(store.ok());
  // The BEGIN reached the file though its sync failed: recovery aborts it (the rewrite keeps recent history).
  CHECK((*store)->transactions().back().txn == 2);
  CHECK((*store)->transactions().back().state == TxnState::aborted);
  CHECK(step_numbers(**store) == std::vector<std::uint64_t>{1});
  auto r = save(**store, 2);
  REQUIRE(r.ok());
  CHECK(r->step.txn == 3);
}

TEST_CASE("a failed operation anywhere in a save abandons it and keeps the previous step", "[store]") {
  // Build a store with step 1, then fail each operation of the save of step 2 in turn, with each kind
  // of fault. Afterwards the store must reopen, hold step 1 intact (and step 2 only if its COMMIT
  // reached the file), leave no file of the failed transaction, and save again under a new id.
  SimFs base;
  {
    auto store = Store::open(base, "/s", Access::read_write, writable_options());
    REQUIRE(store.ok());
    REQUIRE(save(**store, 1).ok());
  }
  std::uint64_t ops = 0;
  {
    SimFs sim(base);
    FaultFs<SimFs> counting(sim);
    auto store = Store::open(counting, "/s", Access::read_write, writable_options(false));
    REQUIRE(store.ok());
    counting.set_plan({});
    REQUIRE(save(**store, 2).ok());
    ops = counting.count();
  }
  REQUIRE(ops > 10);
  std::uint64_t runs = 0, committed = 0;
  for (const Fault fault : {Fault::io_error, Fault::no_space, Fault::short_write}) {
    for (std::uint64_t n = 1; n <= ops; ++n) {
      INFO(fault_name(fault) << " at operation " << n);
      SimFs sim(base);
      FaultFs<SimFs> faulty(sim);
      std::uint64_t failed_txn = 0;
      bool ok = false;
      {
        auto store = Store::open(faulty, "/s", Access::read_write, writable_options(false));
        REQUIRE(store.ok());
        failed_txn = (*store)->next_txn();
        faulty.set_plan(FaultPlan::nth(n, fault));
        auto r = save(**store, 2);
        ok = r.ok();
        if (!r.ok()) CHECK(r.status().code() == Code::io);
        CHECK(faulty.faults() == 1);
      }
      faulty.set_plan({});
      // A crash right after the failure must also recover: the durable state alone.
      SimFs crashed = sim.durable_state();
      for (int variant = 0; variant < 2; ++variant) {
        SimFs& target = variant == 0 ? sim : crashed;
        auto store = Store::open(target, "/s", Access::read_write, writable_options(false));
        REQUIRE(store.ok());
        CHECK_FALSE((*store)->recovery_report().corrupt());
        const auto steps = step_numbers(**store);
        REQUIRE(!steps.empty());
        CHECK(steps.front() == 1);
        check_step(**store, 1);
        if (steps.size() == 2) {
          CHECK(steps.back() == 2);
          check_step(**store, 2);
          if (variant == 0) ++committed;
        } else {
          CHECK_FALSE((ok && variant == 0));  // an acknowledged commit is never lost without a crash
        }
        // Only committed steps have directories left.
        std::vector<std::string> expected{"JOURNAL", "LOCK"};
        for (const auto& s : (*store)->steps()) expected.push_back(s.dir);
        std::sort(expected.begin(), expected.end());
        CHECK(entries(target, "/s") == expected);
        // An id that reached the journal is never handed out again; one spent only in memory (its
        // BEGIN never written) names nothing on disk and may be.
        const bool reached = std::any_of((*store)->transactions().begin(), (*store)->transactions().end(),
                                         [&](const TxnInfo& t) { return t.txn == failed_txn; });
        auto again = save(**store, 3);
        REQUIRE(again.ok());
        CHECK(again->step.txn >= failed_txn);
        if (reached) CHECK(again->step.txn > failed_txn);
        check_step(**store, 3);
      }
      ++runs;
    }
  }
  CHECK(runs == 3 * ops);
  CHECK(committed > 0);  // failures after the COMMIT reached the file resolve as committed
}

TEST_CASE("the store recovers the durable state at every persistence point of a save over SimFs", "[store]") {
  SimFs sim;
  {
    auto store = Store::open(sim, "/s", Access::read_write, writable_options());
    REQUIRE(store.ok());
    REQUIRE(save(**store, 1).ok());
  }
  std::vector<SimFs> states;
  sim.set_persistence_hook([&](const SimFs& fs, const PersistencePoint&) { states.push_back(fs.durable_state()); });
  {
    auto store = Store::open(sim, "/s", Access::read_write, writable_options(false));
    REQUIRE(store.ok());
    REQUIRE(save(**store, 2).ok());
  }
  sim.set_persistence_hook(nullptr);
  REQUIRE(states.size() >= 7);  // BEGIN, step dir, shard, its dir, MANIFEST, its dir, COMMIT
  bool saw_two = false;
  for (std::size_t i = 0; i < states.size(); ++i) {
    INFO("persistence point " << i + 1);
    auto store = Store::open(states[i], "/s", Access::read_write, writable_options(false));
    REQUIRE(store.ok());
    for (const auto& a : (*store)->recovery_report().actions) INFO(a.describe());
    std::string dbg;
    for (const auto& a : (*store)->recovery_report().actions) dbg += a.describe() + "\n";
    for (const auto& a : (*store)->recovery_report().salvaged) dbg += "salvaged " + a + "\n";
    for (const auto& a : (*store)->recovery_report().notes) dbg += "note " + a + "\n";
    INFO(dbg);
    const auto steps = step_numbers(**store);
    CHECK((steps == std::vector<std::uint64_t>{1} || steps == std::vector<std::uint64_t>{1, 2}));
    for (const auto s : steps) check_step(**store, s);
    saw_two = saw_two || steps.size() == 2;
    REQUIRE(save(**store, 3).ok());
    check_step(**store, 3);
  }
  CHECK(saw_two);
}

TEST_CASE_METHOD(StoreDir, "a commit refused for bad training state leaves the transaction open to fix", "[store]") {
  auto store = open_writable();
  auto tx = store->begin(5);
  REQUIRE(tx.ok());
  const auto w = weights(5);
  REQUIRE((*tx)->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4).ok());
  CHECK((*tx)->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4).code() == Code::conflict);  // caller error
  REQUIRE((*tx)->begin_piece("open", DType::U8, {4}, {0}, {4}).ok());
  CHECK((*tx)->commit().status().code() == Code::invalid_argument);  // a piece still open: fixable
  CHECK((*tx)->active());
  REQUIRE((*tx)->write("abcd", 4).ok());
  REQUIRE((*tx)->end_piece().ok());
  (*tx)->state().values["bad"] = std::string("\xff");
  CHECK((*tx)->commit().status().code() == Code::invalid_argument);
  CHECK((*tx)->active());
  (*tx)->state().values.erase("bad");
  (*tx)->state().step = 999;  // the transaction's step wins
  auto r = (*tx)->commit();
  REQUIRE(r.ok());
  auto reader = store->open_step(5);
  REQUIRE(reader.ok());
  CHECK(reader->state().step == 5);
}

TEST_CASE_METHOD(StoreDir, "closing a store aborts the transaction still open in it", "[store]") {
  auto store = open_writable();
  auto tx = store->begin(5);
  REQUIRE(tx.ok());
  const std::string step_dir = (*tx)->directory();
  store.reset();
  CHECK_FALSE((*tx)->active());
  CHECK((*tx)->commit().status().code() == Code::invalid_argument);
  tx->reset();
  CHECK_FALSE(fsys::exists(step_dir));
  auto again = open_writable(false);
  CHECK(again->recovery_report().clean());
  CHECK(again->transactions().back().state == TxnState::aborted);
}

TEST_CASE_METHOD(StoreDir, "a committed step whose directory vanished is noted by recovery", "[store]") {
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  fsys::remove_all(path + "/step-1-1");
  auto report = check_store(fs, path);
  REQUIRE(report.ok());
  REQUIRE(report->notes.size() == 1);
  CHECK(report->notes[0].find("step-1-1 is missing") != std::string::npos);
  auto store = Store::open(fs, path, Access::read_only);
  REQUIRE(store.ok());
  CHECK((*store)->open_step(1).status().code() == Code::not_found);
}

namespace {

// Flips one bit of the file at off (power-on bit rot after the fsync returned).
void flip_bit(const std::string& path, std::uint64_t off, unsigned bit = 0) {
  std::string bytes = ckpt_test::read_file(path);
  REQUIRE(off < bytes.size());
  bytes[static_cast<std::size_t>(off)] = static_cast<char>(bytes[static_cast<std::size_t>(off)] ^ (1u << bit));
  ckpt_test::write_file(path, bytes);
}

// The offset of the last record of this type in the journal.
std::uint64_t last_record(PosixFs& fs, const std::string& store, journal::RecordType type) {
  auto scan = scan_journal(fs, store + "/JOURNAL");
  REQUIRE(scan.ok());
  std::uint64_t at = 0;
  for (const auto& r : scan->records)
    if (r.type == static_cast<std::uint16_t>(type)) at = r.offset;
  REQUIRE(at != 0);
  return at;
}

}  // namespace

TEST_CASE("damage to the journal's last page never loses the newest committed step", "[store][evidence]") {
  using journal::RecordType;
  struct Row {
    const char* what;
    RecordType record;     // the record whose bytes are hit
    std::uint64_t offset;  // from that record's frame start
    bool salvaged;         // the COMMIT itself is still digest-valid and is applied where it sits
  };
  const std::vector<Row> rows = {
      {"the PAD after the COMMIT", RecordType::pad, 200, true},
      {"the PAD's header", RecordType::pad, 2, true},
      {"the SAVE_STATS record", RecordType::save_stats, 20, true},
      {"the COMMIT's payload", RecordType::commit, 12, false},
      {"the COMMIT's digest", RecordType::commit, 42, false},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    ckpt_test::TempDir dir;
    PosixFs fs;
    const std::string path = dir.file("store");
    create_with_steps(fs, path, {1, 2});
    const std::uint64_t commit = last_record(fs, path, RecordType::commit);
    std::uint64_t target = commit;
    if (row.record == RecordType::save_stats) target = commit + 48;
    if (row.record == RecordType::pad) target = commit + 48 + 64;
    flip_bit(path + "/JOURNAL", target + row.offset, 3);

    auto check = check_store(fs, path);
    REQUIRE(check.ok());
    CHECK_FALSE(check->corrupt());
    REQUIRE(check->journal.torn_tail);
    CHECK(check->tail_damaged());  // every byte is there: bit rot, not a torn append, and it is reported
    auto store = open_store(fs, path, false);
    const RecoveryReport& report = store->recovery_report();
    CHECK(step_numbers(*store) == std::vector<std::uint64_t>{1, 2});
    check_step(*store, 2);
    const bool rolled = std::any_of(report.actions.begin(), report.actions.end(),
                                    [](const RecoveryAction& a) { return a.kind == RecoveryActionKind::append_commit; });
    CHECK(rolled == !row.salvaged);
    CHECK(report.salvaged.empty() == !row.salvaged);
    // The new journal is clean and says the same.
    auto again = check_store(fs, path);
    REQUIRE(again.ok());
    CHECK(again->clean());
    store.reset();
    auto ro = Store::open(fs, path, Access::read_only);
    REQUIRE(ro.ok());
    CHECK(step_numbers(**ro) == std::vector<std::uint64_t>{1, 2});
  }
}

TEST_CASE_METHOD(StoreDir, "damage to the page of a RETIRE applies the RETIRE, so retired steps stay retired", "[store][evidence]") {
  StoreOptions o = writable_options();
  o.retention = RetentionPolicy{1, 0};
  {
    auto store = Store::open(fs, path, Access::read_write, o);
    REQUIRE(store.ok());
    REQUIRE(save(**store, 1).ok());
    REQUIRE(save(**store, 2).ok());  // retires step 1 in the journal's last group
  }
  const std::uint64_t retire = last_record(fs, path, journal::RecordType::retire);
  flip_bit(path + "/JOURNAL", retire + 32 + 100, 1);  // inside the PAD that follows it
  auto store = open_writable(false);
  CHECK(step_numbers(*store) == std::vector<std::uint64_t>{2});
  CHECK(store->recovery_report().salvaged.size() == 1);
  check_step(*store, 2);
}

TEST_CASE("a crash inside the MANIFEST write aborts, a damaged tail with a MANIFEST quarantines", "[store][evidence]") {
  for (const bool damaged : {false, true}) {
    INFO("damaged tail " << damaged);
    ckpt_test::TempDir dir;
    PosixFs fs;
    const std::string path = dir.file("store");
    create_with_steps(fs, path, {1});
    crash_mid_save(fs, path, 2, 7, false);  // a partial MANIFEST, a clean tear
    if (damaged) {
      std::string j = ckpt_test::read_file(path + "/JOURNAL");
      j.resize(j.size() - 100);
      ckpt_test::write_file(path + "/JOURNAL", j + std::string(100, 'T'));  // written, yet no record: not a tear
    }
    auto store = open_store(fs, path, false);
    const RecoveryReport& report = store->recovery_report();
    CHECK(report.tail_damaged() == damaged);
    CHECK(step_numbers(*store) == std::vector<std::uint64_t>{1});
    const std::string q = path + "/quarantine/" + step_dir_name(7, 2);
    CHECK(fsys::exists(q) == damaged);
    CHECK_FALSE(fsys::exists(path + "/" + step_dir_name(7, 2)));
    if (damaged) CHECK(entries(fs, q) == std::vector<std::string>{"MANIFEST", "shard-00000-of-00001.ckpt"});
    CHECK(store->recovery_report().unknown_entries.empty());
    check_step(*store, 1);
  }
}

TEST_CASE_METHOD(StoreDir, "recovery never follows a symlinked step directory out of the store", "[store][evidence]") {
  const std::string outside = dir.file("outside");
  {
    auto store = open_writable();
    REQUIRE(save(*store, 1).ok());
  }
  crash_mid_save(fs, path, 2, 7, false);
  // Swap the open transaction's directory for a symlink to a folder with the same file names.
  const std::string step_dir = path + "/" + step_dir_name(7, 2);
  fsys::create_directory(outside);
  for (const auto& name : entries(fs, step_dir)) fsys::copy_file(step_dir + "/" + name, outside + "/" + name);
  fsys::remove_all(step_dir);
  fsys::create_directory_symlink(outside, step_dir);
  const auto kept = entries(fs, outside);
  REQUIRE(kept.size() == 2);
  for (const bool dry : {true, false}) {
    auto report = recover_store(fs, path, dry);
    REQUIRE(report.ok());
    CHECK(std::find(report->unknown_entries.begin(), report->unknown_entries.end(), step_dir_name(7, 2)) !=
          report->unknown_entries.end());
    for (const auto& a : report->actions) CHECK(a.path.find(step_dir_name(7, 2)) == std::string::npos);
  }
  CHECK(entries(fs, outside) == kept);  // not one file outside the store was touched
  CHECK(fsys::is_symlink(step_dir));
  auto store = open_writable(false);
  CHECK(step_numbers(*store) == std::vector<std::uint64_t>{1});
  CHECK(entries(fs, outside) == kept);
}

TEST_CASE_METHOD(StoreDir, "a writer fails closed when the journal changes under it", "[store][evidence]") {
  auto store = open_writable();
  REQUIRE(save(*store, 1).ok());
  // A second writer that bypassed the lock appends a group behind this one's back.
  {
    auto scan = scan_journal(fs, path + "/JOURNAL");
    REQUIRE(scan.ok());
    auto other = JournalWriter::open(fs, path + "/JOURNAL", scan->end);
    REQUIRE(other.ok());
    REQUIRE(other->append_group({abort_record(AbortRecord{99, 9, AbortReason::user})}).ok());
  }
  auto r = save(*store, 2);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::conflict);
  CHECK(r.status().message().find("another writer") != std::string::npos);
  CHECK(store->failed());
}

namespace {

// A caller-coordinated save of step `step` by `world` ranks, each its own Store as in separate processes;
// the messages travel as the caller (e.g. PyTorch DCP) would carry them (spec/SHARDING.md 3.6).
struct CallerSave {
  std::vector<std::unique_ptr<Store>> ranks;
  std::vector<std::unique_ptr<Transaction>> txns;
  std::vector<std::string> reports;
};

// A store at path whose latest step is save()'s step 1.
void save_first_step(PosixFs& fs, const std::string& path) {
  auto first = open_store(fs, path);
  REQUIRE(save(*first, 1).ok());
}

CallerSave caller_begin(PosixFs& fs, const std::string& path, int world, std::uint64_t step) {
  CallerSave save;
  std::vector<std::unique_ptr<Store>> participants;
  for (int r = 1; r < world; ++r) {  // a participant reads nothing at open: it may open before rank 0
    auto p = Store::open_rank(fs, path, r, world, writable_options());
    REQUIRE(p.ok());
    CHECK((*p)->participant());
    CHECK((*p)->steps().empty());
    participants.push_back(std::move(p).value());
  }
  auto coordinator = Store::open_rank(fs, path, 0, world, writable_options());
  INFO(coordinator.status().to_string());
  REQUIRE(coordinator.ok());
  CHECK((*coordinator)->coordinator());
  save.ranks.push_back(std::move(coordinator).value());
  for (auto& p : participants) save.ranks.push_back(std::move(p));
  std::vector<std::string> requests;
  for (auto& s : save.ranks) requests.push_back(s->begin_request(step));
  const std::string decision = save.ranks[0]->decide_begin(step, requests);
  for (auto& s : save.ranks) {
    auto tx = s->join(decision);
    INFO(tx.status().to_string());
    REQUIRE(tx.ok());
    save.txns.push_back(std::move(tx).value());
  }
  return save;
}

}  // namespace

TEST_CASE_METHOD(StoreDir, "a caller-coordinated save commits only with every rank's report, as one step", "[store][ranks]") {
  save_first_step(fs, path);
  CallerSave s = caller_begin(fs, path, 3, 2);
  for (std::uint32_t r = 0; r < 3; ++r) REQUIRE(add_row(*s.txns[r], r, 2).ok());
  s.txns[0]->state().values["dcp.metadata"] = Bytes{std::string("\x80\x04pickle", 8)};
  for (auto& tx : s.txns) {
    auto report = tx->report();
    INFO(report.status().to_string());
    REQUIRE(report.ok());
    s.reports.push_back(std::move(report).value());
  }
  CHECK_FALSE(s.txns[1]->active());  // a participant's part ends with its report
  CHECK(s.txns[0]->active());        // rank 0 waits for the reports
  CHECK(s.txns[1]->add_tensor("late", DType::U8, {1}, "x", 1).code() == Code::invalid_argument);
  // The collective calls are refused on such a store, saying which phases to use.
  CHECK(s.txns[0]->commit().status().message().find("begin_request, decide_begin, join") != std::string::npos);
  CHECK(s.ranks[1]->begin(3).status().code() == Code::invalid_argument);
  auto done = s.txns[0]->commit_reports(s.reports);
  INFO(done.status().to_string());
  REQUIRE(done.ok());
  CHECK(done->step.step == 2);

  auto reader = Store::open(fs, path, Access::read_only);
  REQUIRE(reader.ok());
  CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1, 2});
  auto step = (*reader)->open_step(2);
  REQUIRE(step.ok());
  CHECK(step->shard_count() == 3);
  CHECK(step->state().values.at("dcp.metadata").as_bytes() == std::string("\x80\x04pickle", 8));
  std::vector<float> row(kElems);
  for (std::uint64_t r = 0; r < 3; ++r) {
    REQUIRE(step->read_slice("w", {r, 0}, {1, kElems}, row.data(), row.size() * 4).ok());
    CHECK(row == weights(2 + r));
  }
  auto verified = (*reader)->verify_step(2);
  REQUIRE(verified.ok());
  CHECK(verified->ok());
}

TEST_CASE("a caller-coordinated save that loses a rank keeps the previous step latest", "[store][ranks]") {
  PosixFs fs;
  // Each row: what goes wrong between BEGIN and the decision; the step must not exist afterwards, and
  // none of its files may remain once rank 0 has abandoned it.
  struct Case {
    const char* what;
    std::function<void(CallerSave&)> spoil;
    Code code;  // what commit_reports returns; ok: rank 0 never gets that far
  };
  const std::vector<Case> cases = {
      {"a missing report", [](CallerSave& s) { s.reports.pop_back(); }, Code::invalid_argument},
      {"reports out of rank order", [](CallerSave& s) { std::swap(s.reports[1], s.reports[2]); }, Code::corrupt},
      {"a truncated report", [](CallerSave& s) { s.reports[1].resize(s.reports[1].size() / 2); }, Code::corrupt},
      {"a rank that never wrote its row", [](CallerSave& s) { s.reports[2] = s.txns[2]->report().value(); },
       Code::invalid_argument},
      {"rank 0 closed before the reports", [](CallerSave& s) { s.txns[0].reset(); }, Code::ok},
      {"rank 0 aborts", [](CallerSave& s) { REQUIRE(s.txns[0]->abort().ok()); }, Code::ok},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    ckpt_test::TempDir dir;
    const std::string path = dir.file("store");
    save_first_step(fs, path);
    CallerSave s = caller_begin(fs, path, 3, 2);
    const std::string step_dir = s.txns[0]->directory();
    const bool rank2_writes = std::string(c.what) != "a rank that never wrote its row";
    for (std::uint32_t r = 0; r < 3; ++r)
      if (r < 2 || rank2_writes) REQUIRE(add_row(*s.txns[r], r, 2).ok());
    for (std::size_t r = 0; r < 2; ++r) s.reports.push_back(s.txns[r]->report().value());
    if (rank2_writes) s.reports.push_back(s.txns[2]->report().value());
    else s.reports.emplace_back();
    c.spoil(s);
    if (c.code != Code::ok) {
      auto done = s.txns[0]->commit_reports(s.reports);
      CHECK(done.status().code() == c.code);
      CHECK(done.status().message().find("abandoned on every rank, the previous step is untouched") != std::string::npos);
    }
    s.txns.clear();
    s.ranks.clear();
    CHECK_FALSE(fsys::exists(step_dir));
    auto reader = Store::open(fs, path, Access::read_only);
    REQUIRE(reader.ok());
    CHECK(step_numbers(**reader) == std::vector<std::uint64_t>{1});
    check_step(**reader, 1);
  }
}

TEST_CASE_METHOD(StoreDir, "a caller-coordinated begin names the rank that cannot take part and writes nothing", "[store][ranks]") {
  auto coordinator = Store::open_rank(fs, path, 0, 2, writable_options());
  REQUIRE(coordinator.ok());
  auto other = Store::open_rank(fs, path, 1, 2, writable_options());
  REQUIRE(other.ok());
  CHECK(Store::open_rank(fs, path, 2, 2).status().code() == Code::invalid_argument);
  // Rank 1 asks for another step; then a participant tries to decide.
  const std::string decision =
      (*coordinator)->decide_begin(5, {(*coordinator)->begin_request(5), (*other)->begin_request(6)});
  auto refused = (*other)->join(decision);
  CHECK(refused.status().code() == Code::invalid_argument);
  CHECK(refused.status().message().find("rank 1 begins step 6") != std::string::npos);
  CHECK((*coordinator)->transactions().empty());
  const std::string not_mine = (*other)->decide_begin(5, {"", ""});
  CHECK((*other)->join(not_mine).status().message().find("only rank 0") != std::string::npos);
  CHECK((*other)->join("garbage").status().code() == Code::invalid_argument);
}
