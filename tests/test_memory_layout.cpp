// Tests for include/ckpt/store/memory_layout.hpp: the names inside a memory root (spec/TIERS.md 2.1) and
// the one scanner that resume, the memory-root reports and path recognition read a root through.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/memory_layout.hpp>

#include "test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

struct NameCase {
  const char* name;
  bool ok;
  std::uint32_t number;  // when ok
};

// A rank directory, store or log made of names alone: the scanner only lists and stats.
void make_dir(const std::string& path) { fsys::create_directories(path); }
void make_store(const std::string& path) {
  make_dir(path);
  ckpt_test::write_file(path + "/" + std::string(journal::kJournalName), "");
}
void make_log(const std::string& dir) {
  make_dir(dir);
  ckpt_test::write_file(dir + "/" + std::string(memory_layout::kTierLog), "");
}

}  // namespace

TEST_CASE("a rank directory is rank-<r>: decimal, one to nine digits, no leading zero", "[memory_layout]") {
  const std::vector<NameCase> cases = {
      {"rank-0", true, 0},
      {"rank-7", true, 7},
      {"rank-12", true, 12},
      {"rank-999999999", true, 999999999},
      {"rank-01", false, 0},           // a leading zero (spec/TIERS.md 2.1)
      {"rank-00", false, 0},
      {"rank-007", false, 0},
      {"rank-", false, 0},             // no number
      {"rank-4294967296", false, 0},   // 2^32: ten digits
      {"rank-1234567890", false, 0},   // ten digits
      {"rank-4294967295", false, 0},   // fits a u32, still ten digits
      {"rank--1", false, 0},
      {"rank-+1", false, 0},
      {"rank- 1", false, 0},
      {"rank-1 ", false, 0},
      {"rank-1a", false, 0},
      {"rank-0x1", false, 0},
      {"Rank-1", false, 0},
      {"rank_1", false, 0},
      {"rank1", false, 0},
      {"held-1", false, 0},
      {"", false, 0},
  };
  for (const auto& c : cases) {
    INFO("'" << c.name << "'");
    std::uint32_t rank = 12345;
    CHECK(memory_layout::parse_rank_dir_name(c.name, rank) == c.ok);
    if (c.ok) CHECK(rank == c.number);
    else CHECK(rank == 12345);  // left as it was
  }
}

TEST_CASE("a held store is held-<s> under the same rule", "[memory_layout]") {
  const std::vector<NameCase> cases = {
      {"held-0", true, 0},   {"held-3", true, 3},    {"held-12", true, 12}, {"held-03", false, 0},
      {"held-", false, 0},   {"held-1x", false, 0},  {"own", false, 0},     {"held-4294967296", false, 0},
      {"rank-1", false, 0},  {"Held-1", false, 0},
  };
  for (const auto& c : cases) {
    INFO("'" << c.name << "'");
    std::uint32_t shard = 0;
    CHECK(memory_layout::parse_held_store_name(c.name, shard) == c.ok);
    if (c.ok) CHECK(shard == c.number);
  }
}

TEST_CASE("the layout's paths are built from the same names the scanner parses", "[memory_layout]") {
  CHECK(memory_layout::rank_dir_name(0) == "rank-0");
  CHECK(memory_layout::held_store_name(17) == "held-17");
  CHECK(memory_layout::set_aside_log_name(0) == "TIERS.corrupt-0");
  CHECK(memory_layout::rank_dir("/dev/shm/job", 3) == "/dev/shm/job/rank-3");
  CHECK(memory_layout::own_store("/dev/shm/job", 3) == "/dev/shm/job/rank-3/own");
  CHECK(memory_layout::held_store("/dev/shm/job", 3, 2) == "/dev/shm/job/rank-3/held-2");
  for (const std::uint32_t n : {0u, 1u, 9u, 10u, 1048576u, 999999999u}) {
    std::uint32_t back = 0;
    CHECK((memory_layout::parse_rank_dir_name(memory_layout::rank_dir_name(n), back) && back == n));
    CHECK((memory_layout::parse_held_store_name(memory_layout::held_store_name(n), back) && back == n));
  }
}

TEST_CASE("scanning a memory root finds its rank directories in rank order and skips every other name", "[memory_layout]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string root = dir.file("mem");
  make_log(root + "/rank-10");                 // a log only
  make_store(root + "/rank-2/own");            // a store of its own shards,
  make_store(root + "/rank-2/held-3");         // one of rank 3's,
  make_dir(root + "/rank-2/held-4");           // one not a store yet (no JOURNAL),
  make_dir(root + "/rank-2/held-03");          // a misnamed one,
  ckpt_test::write_file(root + "/rank-2/held-5", "");  // a file named like a store
  ckpt_test::write_file(root + "/rank-2/notes", "");
  make_dir(root + "/rank-7");                  // named right, holding nothing
  make_log(root + "/rank-01");                 // misnamed, whatever it holds
  make_store(root + "/rank-01/own");
  make_log(root + "/rank-");
  make_log(root + "/rank-4294967296");
  make_log(root + "/rank-00");
  ckpt_test::write_file(root + "/rank-5", "");  // a file named like a rank directory
  make_log(root + "/other");

  auto scanned = memory_layout::scan_memory_root(fs, root);
  REQUIRE(scanned.ok());
  const auto& ranks = *scanned;
  REQUIRE(ranks.size() == 3);
  CHECK(ranks[0].rank == 2);
  CHECK(ranks[1].rank == 7);
  CHECK(ranks[2].rank == 10);

  const auto& two = ranks[0];
  CHECK(two.path == root + "/rank-2");
  CHECK(two.error.ok());
  CHECK_FALSE(two.has_log);
  CHECK(two.recognized());
  REQUIRE(two.stores.size() == 3);  // in name order
  CHECK(two.stores[0].name == "held-3");
  CHECK_FALSE(two.stores[0].own);
  CHECK(two.stores[0].shard == 3);
  CHECK(two.stores[0].has_journal);
  CHECK(two.stores[0].path == root + "/rank-2/held-3");
  CHECK(two.stores[1].name == "held-4");
  CHECK(two.stores[1].shard == 4);
  CHECK_FALSE(two.stores[1].has_journal);
  CHECK(two.stores[2].name == "own");
  CHECK(two.stores[2].own);
  CHECK(two.stores[2].shard == 2);  // a rank's own store holds its own shards
  CHECK(two.stores[2].has_journal);
  CHECK(two.unknown == std::vector<std::string>{"held-03", "held-5", "notes"});

  CHECK(ranks[1].stores.empty());
  CHECK_FALSE(ranks[1].recognized());  // only named rank-<r>: no log, no store
  CHECK(ranks[2].has_log);
  CHECK(ranks[2].recognized());
  CHECK(ranks[2].unknown.empty());  // TIERS is the log, not an unknown entry
}

TEST_CASE("scanning one rank directory refuses a misnamed path or a file", "[memory_layout]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string root = dir.file("mem");
  make_log(root + "/rank-01");
  make_log(root + "/rank-3");
  ckpt_test::write_file(root + "/rank-5", "");

  auto three = memory_layout::scan_rank_dir(fs, root + "/rank-3/");  // a trailing slash is the same directory
  REQUIRE(three.ok());
  CHECK(three->rank == 3);
  CHECK(three->path == root + "/rank-3");
  CHECK(three->recognized());
  CHECK(memory_layout::scan_rank_dir(fs, root + "/rank-01").status().code() == Code::invalid_argument);
  CHECK_THAT(memory_layout::scan_rank_dir(fs, root + "/rank-01").status().message(), Catch::Contains("rank-<r>"));
  CHECK(memory_layout::scan_rank_dir(fs, root + "/rank-5").status().code() == Code::invalid_argument);
  CHECK(memory_layout::scan_rank_dir(fs, root + "/rank-9").status().code() == Code::not_found);
  CHECK(memory_layout::scan_memory_root(fs, dir.file("absent")).status().code() == Code::not_found);
}
