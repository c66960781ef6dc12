// Tests for include/ckpt/tiers/memory_root.hpp: a memory root made by the tiered checkpointer
// (tests/memory_root_fixture.hpp) is described (where each shard is held, its copies, what the logs
// recorded, the persistent store compared), verified copy by copy with damage named down to rank
// directory, store, step and shard, and repaired without deleting anything recovery does not own.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/journal.hpp>
#include <ckpt/store/path_kind.hpp>
#include <ckpt/tiers/memory_root.hpp>

#include "memory_root_fixture.hpp"
#include "test_util.hpp"

using namespace ckpt;
using namespace ckpt::tiers;
namespace fsys = std::filesystem;
namespace fixture = memory_root_fixture;

namespace {

const MemoryStep* find_step(const MemoryRoot& root, std::uint64_t step) {
  for (const auto& s : root.steps)
    if (s.step == step && s.digest_known()) return &s;
  return nullptr;
}

std::size_t count_events(const MemoryStep& s, TierEvent e) {
  std::size_t n = 0;
  for (const auto& r : s.events) n += r.record.event == e ? 1 : 0;
  return n;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Leaves a transaction open in a store, as a rank killed mid-save would: a durable BEGIN, its directory
// with a partial shard, no COMMIT.
void leave_open_transaction(PosixFs& fs, const std::string& store, std::uint64_t step) {
  auto check = check_store(fs, store);
  REQUIRE(check.ok());
  const std::string journal_path = store + "/JOURNAL";
  auto writer = JournalWriter::open(fs, journal_path, check->journal.end);
  REQUIRE(writer.ok());
  BeginRecord b;
  b.txn = check->next_txn;
  b.step = step;
  b.files = {TxnFile{0, shard_file_name(0, 1)}};
  REQUIRE(writer->append_group({begin_record(b).value()}).ok());
  const std::string dir = store + "/" + step_dir_name(step, b.txn);
  REQUIRE(fs.mkdir(dir).ok());
  ckpt_test::write_file(dir + "/" + shard_file_name(0, 1), "partial shard");
}

// Options naming the fixture's persistent store in dir, so that it is compared with the memory tier.
MemoryRootOptions with_persistent(const fsys::path& dir) {
  MemoryRootOptions o;
  o.persistent = (dir / "persistent").string();
  return o;
}

// What examine (describe_memory_root or verify_memory_root) makes of the pristine fixture's root with
// its persistent store: REQUIREd to succeed and CHECKed to find nothing wrong.
template <class Report>
Report examine_pristine(Result<Report> (*examine)(FsRef, const std::string&, const MemoryRootOptions&)) {
  const auto dir = fixture::pristine();
  PosixFs fs;
  auto r = examine(fs, (dir / "mem").string(), with_persistent(dir));
  REQUIRE(r.ok());
  INFO((r->problems.empty() ? std::string() : r->problems.front().message));
  CHECK(r->ok());
  return std::move(r).value();
}

std::vector<TierRecord> log_of(const fsys::path& rank_dir) {
  PosixFs fs;
  auto records = read_tier_log(fs, rank_dir.string());
  REQUIRE(records.ok());
  return *records;
}

}  // namespace

TEST_CASE("a memory root and a rank directory are told apart from stores and other directories", "[memory_root][path_kind]") {
  const auto dir = fixture::pristine();
  PosixFs fs;
  CHECK(classify_path(fs, (dir / "mem").string()).value() == PathKind::memory_root);
  CHECK(classify_path(fs, (dir / "mem" / "rank-2").string()).value() == PathKind::rank_dir);
  CHECK(classify_path(fs, (dir / "mem" / "rank-2" / "own").string()).value() == PathKind::store);
  CHECK(classify_path(fs, (dir / "mem" / "rank-2" / "held-1").string()).value() == PathKind::store);
  CHECK(classify_path(fs, (dir / "persistent").string()).value() == PathKind::store);
  CHECK(describe_memory_root(fs, (dir / "persistent").string()).status().code() == Code::invalid_argument);
  CHECK(describe_memory_root(fs, (dir / "nothing").string()).status().code() == Code::not_found);
}

TEST_CASE("a directory named rank-01 is no rank directory of the root: described, verified and repaired by no one", "[memory_root]") {
  // spec/TIERS.md 2.1: decimal, no leading zero; the reports read a root as resume does.
  const auto dir = fixture::fresh_copy("misnamed-rank-dir");
  fsys::copy(dir / "mem" / "rank-1", dir / "mem" / "rank-01", fsys::copy_options::recursive);
  fixture::flip_shard_data(dir / "mem" / "rank-01" / "own", 6);  // damage no report may see
  PosixFs fs;
  auto described = describe_memory_root(fs, (dir / "mem").string());
  REQUIRE(described.ok());
  REQUIRE(described->rank_dirs.size() == 4);
  for (const auto& d : described->rank_dirs) CHECK(d.path.find("rank-01") == std::string::npos);
  for (const auto& c : described->copies) CHECK(c.store.find("rank-01") == std::string::npos);
  auto verified = verify_memory_root(fs, (dir / "mem").string());
  REQUIRE(verified.ok());
  CHECK(verified->ok());
  auto repaired = repair_memory_root(fs, (dir / "mem").string(), /*dry_run=*/true);
  REQUIRE(repaired.ok());
  for (const auto& st : repaired->stores) CHECK(st.store.find("rank-01") == std::string::npos);
  CHECK(describe_memory_root(fs, (dir / "mem" / "rank-01").string()).status().code() == Code::invalid_argument);
}

TEST_CASE("each step is described: where every shard is held, its copies, replicated and persisted", "[memory_root]") {
  const MemoryRoot root = examine_pristine(&describe_memory_root);
  CHECK(root.kind == PathKind::memory_root);
  REQUIRE(root.rank_dirs.size() == 4);
  for (const auto& d : root.rank_dirs) {
    CHECK(d.stores.size() == 2);  // own and one held-<s>
    CHECK(d.log_present);
    CHECK(d.log_error.ok());
  }
  CHECK(root.copies.size() == 16);  // 4 ranks x (own + held) x steps 4 and 6
  // Step 2 was evicted everywhere: it is recorded, but no copy of it is left.
  REQUIRE(root.steps.size() == 3);
  for (const std::uint64_t n : {4, 6}) {
    INFO("step " << n);
    const MemoryStep* s = find_step(root, n);
    REQUIRE(s != nullptr);
    CHECK(s->world == 4);
    REQUIRE(s->shards.size() == 4);
    for (const auto& sh : s->shards) {
      CHECK(sh.matching == 2);  // its rank's own copy and one replica
      REQUIRE(sh.copies.size() == 2);
      const ShardCopy& own = root.copies[sh.copies[0]].own ? root.copies[sh.copies[0]] : root.copies[sh.copies[1]];
      const ShardCopy& held = root.copies[sh.copies[0]].own ? root.copies[sh.copies[1]] : root.copies[sh.copies[0]];
      CHECK(own.where == "rank-" + std::to_string(sh.shard) + "/own");
      CHECK(held.where == "rank-" + std::to_string((sh.shard + 1) % 4) + "/held-" + std::to_string(sh.shard));
      CHECK(own.recorded);
      CHECK(held.recorded);
      CHECK(own.digest == sh.digest);
      CHECK(held.digest == sh.digest);
    }
    CHECK(s->shards_here() == 4);
    CHECK(s->fewest_copies() == 2);
    CHECK(s->captured);
    CHECK(s->replicated);
    CHECK(s->replicated_copies == 1);
    CHECK(count_events(*s, TierEvent::captured) == 4);
    CHECK(count_events(*s, TierEvent::held) == 4);
    CHECK_FALSE(s->load_failed);
    CHECK(s->set_aside == 0);
  }
  CHECK(find_step(root, 4)->persisted);
  CHECK(find_step(root, 4)->persistent == PersistentState::same);
  CHECK_FALSE(find_step(root, 6)->persisted);
  CHECK(find_step(root, 6)->persistent == PersistentState::absent);
  const MemoryStep* evicted = find_step(root, 2);
  REQUIRE(evicted != nullptr);
  CHECK(evicted->fewest_copies() == 0);
  CHECK(count_events(*evicted, TierEvent::evicted) == 8);  // own and held copies, one record each
}

TEST_CASE("one rank directory is described on its own: the shards it holds", "[memory_root]") {
  const auto dir = fixture::pristine();
  PosixFs fs;
  auto root = describe_memory_root(fs, (dir / "mem" / "rank-1").string());
  REQUIRE(root.ok());
  CHECK(root->ok());
  CHECK(root->kind == PathKind::rank_dir);
  CHECK(root->root == (dir / "mem").string());
  REQUIRE(root->rank_dirs.size() == 1);
  CHECK(root->copies.size() == 4);
  const MemoryStep* s = find_step(*root, 6);
  REQUIRE(s != nullptr);
  REQUIRE(s->shards.size() == 4);
  CHECK(s->shards[0].matching == 1);  // held-0
  CHECK(s->shards[1].matching == 1);  // own
  CHECK(s->shards[2].matching == 0);
  CHECK(s->shards_here() == 2);
  CHECK(s->fewest_copies() == 0);
}

TEST_CASE("every copy verifies in an intact root, the persistent store's step too", "[memory_root]") {
  const MemoryRootVerification v = examine_pristine(&verify_memory_root);
  CHECK(v.copies_checked == 16);
  CHECK(v.chunks_checked > 16);
  for (const auto& c : v.root.copies) CHECK(c.verified == std::optional<bool>(true));
  for (const std::uint64_t n : {4, 6})
    for (const auto& sh : find_step(v.root, n)->shards) CHECK(sh.verified == 2);
}

TEST_CASE("damage in a copy, a shard file or a tier log is named down to rank directory, store, step and shard", "[memory_root]") {
  struct Case {
    const char* name;
    std::function<void(const fsys::path& mem)> damage;
    bool ok;                // verify_memory_root's verdict
    std::string rank_dir;   // of the first problem
    std::string store;      // how its store path ends
    std::optional<std::uint64_t> step;
    std::optional<std::uint32_t> shard;
    std::size_t verified_of_shard = 2;  // verified copies of that shard at that step afterwards
  };
  const std::vector<Case> cases = {
      {"flip a byte in an own copy", [](const fsys::path& m) { fixture::flip_shard_data(m / "rank-1" / "own", 6); }, false, "rank-1",
       "rank-1/own", 6, 1, 1},
      {"flip a byte in a held copy", [](const fsys::path& m) { fixture::flip_shard_data(m / "rank-2" / "held-1", 6); }, false, "rank-2",
       "rank-2/held-1", 6, 1, 1},
      {"delete a shard file", [](const fsys::path& m) { fsys::remove(fixture::shard_file(m / "rank-3" / "own", 4)); }, false, "rank-3",
       "rank-3/own", 4, 3, 1},
      {"truncate a tier log mid-record (a torn tail: end of log)",
       [](const fsys::path& m) {
         const auto records = log_of(m / "rank-0");
         fsys::resize_file(m / "rank-0" / "TIERS", records.back().offset + 20);
       },
       true, "", "", std::nullopt, std::nullopt},
      {"damage a tier log record in the middle",
       [](const fsys::path& m) {
         const auto records = log_of(m / "rank-0");
         fixture::flip_byte(m / "rank-0" / "TIERS", records.at(1).offset + journal::kFrameHeaderSize + 4);
       },
       false, "rank-0", "rank-0/TIERS", std::nullopt, std::nullopt},
  };
  int n = 0;
  for (const auto& c : cases) {
    INFO(c.name);
    const auto dir = fixture::fresh_copy("damage-" + std::to_string(n++));
    c.damage(dir / "mem");
    PosixFs fs;
    auto v = verify_memory_root(fs, (dir / "mem").string());
    REQUIRE(v.ok());
    CHECK(v->ok() == c.ok);
    if (c.ok) {
      bool noted = false;
      for (const auto& note : v->notes) noted = noted || note.find("torn tail") != std::string::npos;
      CHECK(noted);
      continue;
    }
    REQUIRE_FALSE(v->problems.empty());
    const RootProblem& p = v->problems.front();
    INFO(p.message);
    CHECK(p.code != Code::io);
    CHECK(p.rank_dir == c.rank_dir);
    CHECK(ends_with(p.store, c.store));
    CHECK(p.step == c.step);
    CHECK(p.shard == c.shard);
    for (const auto& other : v->problems) CHECK(other.rank_dir == c.rank_dir);  // nothing else is blamed
    if (c.step) {
      const MemoryStep* s = find_step(v->root, *c.step);
      REQUIRE(s != nullptr);
      CHECK(s->shards.at(*c.shard).verified == c.verified_of_shard);
      CHECK_THAT(p.message, Catch::Contains("step " + std::to_string(*c.step)) && Catch::Contains("shard " + std::to_string(*c.shard)) &&
                                Catch::Contains(c.store));
    }
  }
}

namespace {
// Step 4 of the fixture's persistent store retired and saved again, every element `value` (a step
// number is live once, spec/JOURNAL.md 10).
void resave_persistent_step_4(PosixFs& fs, const std::filesystem::path& dir, float value) {
  auto store = Store::open(fs, (dir / "persistent").string(), Access::read_write);
  REQUIRE(store.ok());
  REQUIRE((*store)->retire(4).ok());
  auto tx = (*store)->begin(4);
  REQUIRE(tx.ok());
  const std::vector<float> other(64, value);
  REQUIRE((*tx)->add_tensor("w", DType::F32, {64}, other.data(), other.size() * 4).ok());
  REQUIRE((*tx)->commit().ok());
}
}  // namespace

TEST_CASE("a persistent step that is not the content recorded as persisted is named", "[memory_root]") {
  const auto dir = fixture::fresh_copy("persistent-differs");
  PosixFs fs;
  // Step 4 retired and saved again into the persistent store by someone else: not the promoted content.
  resave_persistent_step_4(fs, dir, 1.5f);
  MemoryRootOptions o = with_persistent(dir);
  auto root = describe_memory_root(fs, (dir / "mem").string(), o);
  REQUIRE(root.ok());
  CHECK(find_step(*root, 4)->persistent == PersistentState::different);
  REQUIRE(root->problems.size() == 1);
  CHECK(root->problems[0].rank_dir.empty());
  CHECK(root->problems[0].step == std::optional<std::uint64_t>(4));
  CHECK_THAT(root->problems[0].message, Catch::Contains("PERSISTED"));
  // Without the persistent store named, the memory tier alone is intact.
  auto alone = describe_memory_root(fs, (dir / "mem").string());
  REQUIRE(alone.ok());
  CHECK(alone->ok());
  o.persistent = (dir / "no-such-store").string();
  CHECK_FALSE(describe_memory_root(fs, (dir / "mem").string(), o).ok());
}

TEST_CASE("a root problem is the Problem found, its message naming where in the root it is", "[memory_root]") {
  STATIC_REQUIRE(std::is_base_of_v<Problem, RootProblem>);
  const auto dir = fixture::fresh_copy("root-problem-is-a-problem");
  PosixFs fs;
  resave_persistent_step_4(fs, dir, 2.5f);
  auto root = describe_memory_root(fs, (dir / "mem").string(), with_persistent(dir));
  REQUIRE(root.ok());
  REQUIRE(root->problems.size() == 1);
  const RootProblem& where = root->problems[0];
  const Problem& found = where;  // what problem_json, problem_error and the reports take
  CHECK(found.code == Code::corrupt);
  CHECK(found.region == "content");
  CHECK(ends_with(found.file, "/persistent/" + step_dir_name(4, where.txn)));
  CHECK_THAT(found.message, Catch::StartsWith("persistent store ") && Catch::Contains("step 4"));
  const Status error = problem_error(found);
  CHECK(error.code() == Code::corrupt);
  CHECK(error.message() == where.message);
  REQUIRE(error.problem() != nullptr);
  CHECK(error.problem()->region == "content");
}

TEST_CASE("a copy set aside at resume is counted apart and still never deleted", "[memory_root]") {
  const auto dir = fixture::fresh_copy("set-aside");
  fixture::flip_shard_data(dir / "mem" / "rank-1" / "own", 6);
  // The next job resumes: rank 1's own copy fails, its replica serves, the bad copy is set aside.
  for (const auto& e : fixture::train(dir, 0)) REQUIRE(e.ok());
  PosixFs fs;
  auto root = describe_memory_root(fs, (dir / "mem").string());
  REQUIRE(root.ok());
  const MemoryStep* s = find_step(*root, 6);
  REQUIRE(s != nullptr);
  CHECK(s->resumed);
  CHECK(s->set_aside == 1);
  CHECK(s->shards[1].matching == 1);
  CHECK(count_events(*s, TierEvent::set_aside) == 1);
  CHECK(fsys::exists(fixture::shard_file(dir / "mem" / "rank-1" / "own", 6)));
}

TEST_CASE("repair rolls back a transaction left open in a store, and a dry run changes nothing", "[memory_root]") {
  const auto dir = fixture::fresh_copy("repair-open");
  PosixFs fs;
  const std::string held = (dir / "mem" / "rank-2" / "held-1").string();
  leave_open_transaction(fs, held, 8);
  const auto before = ckpt_test::directory_tree((dir / "mem").string());

  auto dry = repair_memory_root(fs, (dir / "mem").string(), true);
  REQUIRE(dry.ok());
  CHECK_FALSE(dry->consistent());
  CHECK(dry->after.ok());  // the open transaction is no damage: every committed copy verifies
  bool pending = false;
  for (const auto& s : dry->stores) {
    CHECK(s.error.ok());
    if (s.store == held) pending = s.pending();
    else CHECK_FALSE(s.pending());
  }
  CHECK(pending);
  CHECK(ckpt_test::directory_tree((dir / "mem").string()) == before);

  auto real = repair_memory_root(fs, (dir / "mem").string(), false);
  REQUIRE(real.ok());
  CHECK(real->consistent());
  CHECK(real->after.ok());
  CHECK(real->stores.size() == 8);
  auto after = check_store(fs, held);
  REQUIRE(after.ok());
  CHECK(after->clean());
  CHECK(after->transactions.back().state == TxnState::aborted);
  CHECK_FALSE(fsys::exists(held + "/" + step_dir_name(8, after->transactions.back().txn)));
  // Every committed copy is still there.
  auto root = describe_memory_root(fs, (dir / "mem").string());
  REQUIRE(root.ok());
  CHECK(root->copies.size() == 16);
  // Nothing is left to do.
  auto again = repair_memory_root(fs, (dir / "mem").string(), true);
  REQUIRE(again.ok());
  CHECK(again->consistent());
}

TEST_CASE("repair cuts a torn tier log tail and leaves damage in the middle of a log as it is", "[memory_root]") {
  const auto dir = fixture::fresh_copy("repair-logs");
  PosixFs fs;
  const auto torn = dir / "mem" / "rank-0" / "TIERS";
  const auto records = log_of(dir / "mem" / "rank-0");
  fsys::resize_file(torn, records.back().offset + 20);
  const auto damaged = dir / "mem" / "rank-3" / "TIERS";
  fixture::flip_byte(damaged, log_of(dir / "mem" / "rank-3").at(1).offset + journal::kFrameHeaderSize + 4);
  const std::string damaged_bytes = ckpt_test::read_file(damaged.string());

  auto real = repair_memory_root(fs, (dir / "mem").string(), false);
  REQUIRE(real.ok());
  CHECK_FALSE(real->consistent());
  for (const auto& l : real->logs) {
    INFO(l.path);
    if (l.rank_dir == "rank-0") {
      CHECK(l.torn_tail);
      CHECK(l.truncated);
      CHECK(l.error.ok());
    } else if (l.rank_dir == "rank-3") {
      CHECK(l.error.code() == Code::corrupt);
      CHECK_FALSE(l.truncated);
    } else {
      CHECK(l.error.ok());
      CHECK_FALSE(l.torn_tail);
    }
  }
  CHECK(ckpt_test::read_file(damaged.string()) == damaged_bytes);  // never "fixed" by cutting valid records
  auto cut = scan_journal(fs, torn.string());
  REQUIRE(cut.ok());
  CHECK_FALSE(cut->torn_tail);
  CHECK(cut->end == cut->file_size);
  CHECK(log_of(dir / "mem" / "rank-0").size() < records.size());
}

TEST_CASE("repair leaves a store a live rank holds to that rank", "[memory_root]") {
  const auto dir = fixture::fresh_copy("repair-live");
  PosixFs fs;
  const auto own = dir / "mem" / "rank-1" / "own";
  auto lock = fs.lock((own / "LOCK").string());
  REQUIRE(lock.ok());
  ScopedFile held(fs, *lock);
  const auto records = log_of(dir / "mem" / "rank-1");
  fsys::resize_file(dir / "mem" / "rank-1" / "TIERS", records.back().offset + 20);
  auto real = repair_memory_root(fs, (dir / "mem").string(), false);
  REQUIRE(real.ok());
  CHECK_FALSE(real->consistent());
  for (const auto& s : real->stores)
    if (s.store == own.string()) CHECK(s.error.code() == Code::conflict);
  for (const auto& l : real->logs)
    if (l.rank_dir == "rank-1") {
      CHECK(l.error.code() == Code::conflict);
      CHECK_FALSE(l.truncated);
    }
}
