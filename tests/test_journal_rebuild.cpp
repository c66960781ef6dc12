// Tests for include/ckpt/store/journal_rebuild.hpp: a lost or corrupt journal rebuilt from the step
// directories that verify (spec/JOURNAL.md 6.4, 11), over SimFs. Damage to a step is a table; each row
// must give the expected verdict and name its damage once, as a structured problem.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <ckpt/store/journal_rebuild.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/testing/sim_fs.hpp>

#include "store_test_util.hpp"

using namespace ckpt;
using Verdict = RebuildCandidate::Verdict;

namespace {

constexpr const char* kStore = "/s";

// Steps 1 and 2 committed (txn 1 and 2), one 8 KiB tensor each: two chunks.
SimFs two_steps() {
  SimFs fs;
  auto store = Store::open(fs, kStore, Access::read_write, ckpt_test::small_store_options());
  REQUIRE(store.ok());
  for (std::uint64_t step = 1; step <= 2; ++step) {
    auto tx = (*store)->begin(step);
    REQUIRE(tx.ok());
    std::vector<unsigned char> w(8192, static_cast<unsigned char>(step));
    REQUIRE((*tx)->add_tensor("w", DType::U8, {8192}, w.data(), w.size()).ok());
    REQUIRE((*tx)->commit().ok());
  }
  return fs;
}

void overwrite(SimFs& fs, const std::string& path, std::uint64_t offset, const std::string& bytes) {
  auto f = fs.open(path, OpenMode::read_write);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, bytes.data(), bytes.size(), offset).ok());
  REQUIRE(fs.close(*f).ok());
}

const RebuildCandidate& candidate(const JournalRebuild& plan, std::uint64_t txn) {
  for (const auto& c : plan.candidates)
    if (c.txn == txn) return c;
  FAIL("no candidate for txn " << txn);
  return plan.candidates.front();
}

}  // namespace

TEST_CASE("a lost journal is rebuilt from the step directories that verify", "[rebuild]") {
  SimFs fs = two_steps();
  auto old = scan_journal(fs, std::string(kStore) + "/JOURNAL");
  REQUIRE(old.ok());
  const Uuid uuid = old->header.store_uuid;
  REQUIRE(fs.unlink(std::string(kStore) + "/JOURNAL").ok());
  auto plan = plan_journal_rebuild(fs, kStore, nullptr);
  REQUIRE(plan.ok());
  REQUIRE(plan->candidates.size() == 2);
  for (const auto& c : plan->candidates) {
    INFO(c.dir << ": " << c.reason);
    CHECK(c.verdict == Verdict::include);
    CHECK(c.damage.empty());
  }
  CHECK(plan->uuid == uuid);  // the manifests agree on the store's identity
  CHECK(plan->uuid_source == "the step manifests");
  auto kept = write_rebuilt_journal(fs, kStore, *plan, false);
  REQUIRE(kept.ok());
  CHECK(kept->empty());
  auto store = Store::open(fs, kStore, Access::read_only);
  REQUIRE(store.ok());
  REQUIRE((*store)->steps().size() == 2);
  CHECK((*store)->latest()->step == 2);
  auto verified = (*store)->verify_step(2);
  REQUIRE(verified.ok());
  CHECK(verified->ok());
}

TEST_CASE("damage decides each step directory's verdict, named once as a structured problem", "[rebuild]") {
  const std::string step2 = std::string(kStore) + "/step-2-2";
  const std::string shard = step2 + "/" + shard_file_name(0, 1);
  constexpr std::uint64_t kFlipped = 4096 + 7;
  struct Row {
    const char* what;
    bool keep_old_journal;  // the old journal's records are evidence
    std::function<void(SimFs&)> damage;
    Verdict verdict;
    const char* region;  // of the first problem; "" when none is expected
  };
  const Row table[] = {
      {"a flipped data byte, no old journal", false, [&](SimFs& fs) { overwrite(fs, shard, kFlipped, "\x55"); }, Verdict::damaged,
       "data"},
      {"a flipped data byte, committed in the old journal", true, [&](SimFs& fs) { overwrite(fs, shard, kFlipped, "\x55"); },
       Verdict::include, "data"},
      {"a truncated MANIFEST", false,
       [&](SimFs& fs) {
         auto f = fs.open(step2 + "/MANIFEST", OpenMode::read_write);
         REQUIRE(f.ok());
         REQUIRE(fs.truncate(*f, 10).ok());
         REQUIRE(fs.close(*f).ok());
       },
       Verdict::damaged, "manifest"},
      {"a missing shard", false, [&](SimFs& fs) { REQUIRE(fs.unlink(shard).ok()); }, Verdict::damaged, "missing"},
  };
  for (const auto& row : table) {
    INFO(row.what);
    SimFs fs = two_steps();
    auto old = scan_journal(fs, std::string(kStore) + "/JOURNAL");
    REQUIRE(old.ok());
    row.damage(fs);
    auto plan = plan_journal_rebuild(fs, kStore, row.keep_old_journal ? &*old : nullptr);
    REQUIRE(plan.ok());
    CHECK(candidate(*plan, 1).verdict == Verdict::include);  // the other step is untouched
    const auto& c = candidate(*plan, 2);
    INFO(c.reason);
    CHECK(c.verdict == row.verdict);
    REQUIRE(c.damage.size() == 1);  // once, not once per layer that noticed it
    CHECK(c.damage[0].region == row.region);
    CHECK_FALSE(c.damage[0].file.empty());
    if (std::string(row.region) == "data") {
      CHECK(c.damage[0].tensor == "w");
      CHECK(c.damage[0].chunk >= 0);
      CHECK(c.damage[0].offset <= kFlipped);  // the chunk's byte range holds the flipped byte
      CHECK(kFlipped < c.damage[0].offset + c.damage[0].length);
    }
    // The planned journal always scans clean and names only what was included.
    auto scan = scan_journal_bytes(plan->journal_bytes);
    REQUIRE(scan.ok());
    CHECK_FALSE(scan->corrupt());
  }
}

TEST_CASE("the old journal's aborted transactions stay aborted and its highest txn id stays spent", "[rebuild]") {
  SimFs fs = two_steps();
  {
    auto store = Store::open(fs, kStore, Access::read_write, ckpt_test::small_store_options());
    REQUIRE(store.ok());
    auto tx = (*store)->begin(3);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->abort().ok());  // txn 3: ABORT, files and directory removed
  }
  auto old = scan_journal(fs, std::string(kStore) + "/JOURNAL");
  REQUIRE(old.ok());
  // A directory the old journal aborted, still there (its removal was lost).
  REQUIRE(fs.mkdir(std::string(kStore) + "/step-3-3").ok());
  auto plan = plan_journal_rebuild(fs, kStore, &*old);
  REQUIRE(plan.ok());
  CHECK(candidate(*plan, 3).verdict == Verdict::abort);
  auto scan = scan_journal_bytes(plan->journal_bytes);
  REQUIRE(scan.ok());
  std::uint64_t max_txn = 0;
  for (const auto& r : scan->records) max_txn = std::max(max_txn, r.txn());
  CHECK(max_txn == 3);
}
