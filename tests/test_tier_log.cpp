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
