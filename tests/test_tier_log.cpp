// Tests for include/ckpt/tiers/tier_log.hpp: records survive reopening, a torn tail is end of log,
// damage in the middle is reported, compaction keeps what it is told to, and record payloads are
// checked as hostile input.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/tiers/tier_log.hpp>

using namespace ckpt;
using namespace ckpt::tiers;
namespace fsys = std::filesystem;

namespace {

fsys::path fresh_dir(const std::string& name) {
  const fsys::path dir = fsys::path(CKPT_BINARY_DIR) / "test-tier-log" / name;
  fsys::remove_all(dir);
  fsys::create_directories(dir);
  return dir;
}

TierRecord captured(std::uint64_t step, std::vector<Digest128> shards) {
  TierRecord r;
  r.event = TierEvent::captured, r.step = step, r.world = static_cast<std::uint32_t>(shards.size()), r.shard = 1;
  r.step_digest = Digest128{step, ~step}, r.shard_digest = shards.at(1), r.txn = step * 10;
  r.detail = encode_shard_digests(shards);
  return r;
}

// Opens the tier log in dir, appends a CAPTURED record of two shards for each step, one group each, and closes it.
void append_captures(PosixFs& fs, const fsys::path& dir, std::initializer_list<std::uint64_t> steps) {
  auto log = TierLog::open(fs, dir.string());
  REQUIRE(log.ok());
  for (const std::uint64_t s : steps) REQUIRE(log->append({captured(s, {{1, 1}, {2, 2}})}).ok());
}

}  // namespace

TEST_CASE("tier records survive reopening, payloads and digests intact", "[tier_log]") {
  PosixFs fs;
  const auto dir = fresh_dir("reopen");
  const std::vector<Digest128> shards{{1, 2}, {3, 4}, {5, 6}};
  {
    auto log = TierLog::open(fs, dir.string());
    REQUIRE(log.ok());
    CHECK(log->records().empty());
    REQUIRE(log->append({captured(10, shards)}).ok());
    TierRecord f;
    f.event = TierEvent::load_failed, f.step = 10, f.world = 3, f.step_digest = Digest128{10, ~10ull}, f.detail = "NaN after load";
    REQUIRE(log->append({f, captured(12, shards)}).ok());
  }
  auto again = TierLog::open(fs, dir.string());
  REQUIRE(again.ok());
  REQUIRE(again->records().size() == 3);
  const TierRecord& c = again->records()[0];
  CHECK(c.event == TierEvent::captured);
  CHECK(c.step == 10);
  CHECK(c.txn == 100);
  auto decoded = decode_shard_digests(c, "log");
  REQUIRE(decoded.ok());
  CHECK(*decoded == shards);
  CHECK(again->records()[1].event == TierEvent::load_failed);
  CHECK(again->records()[1].detail == "NaN after load");
  CHECK_THAT(again->records()[1].describe(), Catch::Contains("LOAD_FAILED step 10") && Catch::Contains("NaN after load"));
  auto read = read_tier_log(fs, dir.string());
  REQUIRE(read.ok());
  CHECK(read->size() == 3);
}

TEST_CASE("a missing tier log reads as empty; a torn tail is end of log", "[tier_log]") {
  PosixFs fs;
  const auto dir = fresh_dir("torn");
  auto none = read_tier_log(fs, dir.string());
  REQUIRE(none.ok());
  CHECK(none->empty());
  append_captures(fs, dir, {2});
  const auto path = dir / "TIERS";
  const auto size = fsys::file_size(path);
  append_captures(fs, dir, {4});
  // Cut the second group in half: an interrupted append.
  fsys::resize_file(path, size + 100);
  auto read = read_tier_log(fs, dir.string());
  REQUIRE(read.ok());
  REQUIRE(read->size() == 1);
  auto log = TierLog::open(fs, dir.string());
  REQUIRE(log.ok());
  CHECK(log->records().size() == 1);
  CHECK(fsys::file_size(path) == size);
  REQUIRE(log->append({captured(6, {{1, 1}, {2, 2}})}).ok());
  auto after = read_tier_log(fs, dir.string());
  REQUIRE(after.ok());
  CHECK(after->back().step == 6);
}

TEST_CASE("damage before valid tier records is reported, never skipped", "[tier_log]") {
  PosixFs fs;
  const auto dir = fresh_dir("corrupt");
  append_captures(fs, dir, {1, 2, 3});
  const auto path = dir / "TIERS";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(4096 + 20);  // inside the first CAPTURED record's payload
  f.put('\x5a');
  f.close();
  auto read = read_tier_log(fs, dir.string());
  CHECK(read.status().code() == Code::corrupt);
  CHECK_THAT(read.status().message(), Catch::Contains("TIERS"));
  CHECK(TierLog::open(fs, dir.string()).status().code() == Code::corrupt);
}

TEST_CASE("compaction keeps only the records asked for, durably", "[tier_log]") {
  PosixFs fs;
  const auto dir = fresh_dir("compact");
  auto log = TierLog::open(fs, dir.string());
  REQUIRE(log.ok());
  for (std::uint64_t s = 1; s <= 6; ++s) REQUIRE(log->append({captured(s, {{1, 1}, {2, 2}})}).ok());
  REQUIRE(log->compact([](const TierRecord& r) { return r.step > 4; }).ok());
  CHECK(log->records().size() == 2);
  REQUIRE(log->append({captured(7, {{1, 1}, {2, 2}})}).ok());
  auto read = read_tier_log(fs, dir.string());
  REQUIRE(read.ok());
  REQUIRE(read->size() == 3);
  CHECK((*read)[0].step == 5);
  CHECK((*read)[2].step == 7);
}

TEST_CASE("shard digest lists that do not match their world are refused", "[tier_log]") {
  TierRecord r = captured(3, {{1, 1}, {2, 2}, {3, 3}});
  r.detail.pop_back();
  CHECK(decode_shard_digests(r, "log").status().code() == Code::corrupt);
}

TEST_CASE("a record a reader would refuse is never written", "[tier_log]") {
  PosixFs fs;
  const auto dir = fresh_dir("refuse");
  auto log = TierLog::open(fs, dir.string());
  REQUIRE(log.ok());
  TierRecord bad;
  bad.event = TierEvent::evicted, bad.step = 4, bad.world = 1, bad.shard = 2;
  CHECK(log->append({bad}).code() == Code::invalid_argument);
  bad.world = 0, bad.shard = 0;
  CHECK(log->append({bad}).code() == Code::invalid_argument);
  CHECK(TierLog::open(fs, dir.string()).ok());
}

TEST_CASE("the canary compares each replicated tensor's chunk digests across its holders, naming the odd rank", "[tier_log][sdc]") {
  // spec/TIERS.md 11.1: (holders' digests) -> (first differing chunk, chunks differing, odd rank).
  using Held = std::vector<std::tuple<std::string, std::uint32_t, std::vector<std::uint64_t>>>;
  struct Row {
    const char* what;
    Held held;
    std::size_t findings;
    std::uint64_t chunk, differing;
    std::uint32_t odd;
  };
  const std::uint32_t none = SdcFinding::kNoRank;
  const std::vector<Row> rows = {
      {"all agree", {{"n", 0, {1, 2, 3}}, {"n", 1, {1, 2, 3}}, {"n", 2, {1, 2, 3}}}, 0, 0, 0, none},
      {"one holder: nothing to compare", {{"n", 0, {1, 2}}}, 0, 0, 0, none},
      {"rank 2 differs in chunk 1 of 3 holders", {{"n", 0, {1, 2, 3}}, {"n", 1, {1, 2, 3}}, {"n", 2, {1, 9, 3}}}, 1, 1, 1, 2},
      {"two holders disagree: no odd rank", {{"n", 0, {1, 2}}, {"n", 1, {1, 5}}}, 1, 1, 1, none},
      {"two chunks differ, the first named", {{"n", 0, {1, 2, 3}}, {"n", 1, {7, 2, 8}}, {"n", 2, {1, 2, 3}}}, 1, 0, 2, 1},
      {"three different digests: no odd rank", {{"n", 0, {1}}, {"n", 1, {2}}, {"n", 2, {3}}}, 1, 0, 1, none},
      {"a holder with fewer chunks differs where it ends", {{"n", 0, {1, 2}}, {"n", 1, {1}}, {"n", 2, {1, 2}}}, 1, 1, 1, 1},
      {"different tensors are never compared", {{"a", 0, {1}}, {"b", 1, {2}}}, 0, 0, 0, none},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    const auto found = compare_replicas(7, row.held);
    REQUIRE(found.size() == row.findings);
    if (found.empty()) continue;
    CHECK(found[0].step == 7);
    CHECK(found[0].chunk == row.chunk);
    CHECK(found[0].chunks_differing == row.differing);
    CHECK(found[0].odd_rank == row.odd);
    CHECK(found[0].digests.size() == row.held.size());
  }
}

TEST_CASE("an SDC record's detail round-trips and damaged details are refused", "[tier_log][sdc]") {
  SdcFinding f;
  f.step = 6, f.tensor = "norm", f.chunk = 1, f.chunks_differing = 1, f.odd_rank = 2;
  f.digests = {{0, 0xaa}, {1, 0xaa}, {2, 0xbb}, {3, 0xaa}};
  TierRecord r;
  r.event = TierEvent::sdc, r.step = 6, r.world = 4, r.detail = encode_sdc(f);
  CHECK(r.detail.size() == 4 + 4 + 8 + 8 + 4 + 4 + 4 * 12);  // spec/TIERS.md 11.2
  auto back = decode_sdc(r, "log");
  REQUIRE(back.ok());
  CHECK(back->tensor == "norm");
  CHECK(back->odd_rank == 2);
  CHECK(back->digests == f.digests);
  CHECK_THAT(r.describe(), Catch::Contains("tensor 'norm' chunk 1: rank 2 differs from every other holder"));
  const std::string good = r.detail;
  struct Damage {
    const char* what;
    std::string detail;
  };
  std::string long_name = good;
  long_name[0] = '\x7f';  // a name longer than the record
  std::string many = good;
  many[4 + 4 + 8 + 8 + 4] = '\x50';  // more holders than bytes
  const std::vector<Damage> table = {
      {"empty", ""}, {"cut in the name", good.substr(0, 6)}, {"cut in a holder", good.substr(0, good.size() - 3)},
      {"a byte too many", good + "x"}, {"name length past the end", long_name}, {"holder count past the end", many}};
  for (const auto& d : table) {
    INFO(d.what);
    r.detail = d.detail;
    CHECK(decode_sdc(r, "log").status().code() == Code::corrupt);
  }
}
