// Tests for include/ckpt/io/paced_fs.hpp: a storage link serves every sharer's transfers one after
// another (also across processes), a read cache makes a node read each block across it once, PacedFs
// charges exactly the bytes read and written under its root, and a bad link is a clear error.
// Reservations are checked by their times, never by wall time.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/io/paced_fs.hpp>
#include <ckpt/io/posix_fs.hpp>

#include "test_util.hpp"

using namespace ckpt;

namespace {

constexpr double kRate = 1e9;  // 1 GB/s: a byte is a nanosecond

std::unique_ptr<StorageLink> open_link(const std::string& path, double rate = kRate) {
  auto link = StorageLink::open(path, rate);
  REQUIRE(link.ok());
  return std::move(*link);
}

}  // namespace

TEST_CASE("a storage link serves its sharers' reservations one after another, each as long as its bytes take") {
  ckpt_test::TempDir dir;
  const std::string state = dir.file("link");
  auto a = open_link(state), b = open_link(state);  // two opens: two sharers, as two processes of a node
  const auto first = a->reserve(1000000);
  REQUIRE(first.ok());
  CHECK(first->end_ns - first->start_ns == 1000000);
  const auto second = b->reserve(500000);
  REQUIRE(second.ok());
  CHECK(second->start_ns >= first->end_ns);
  CHECK(second->end_ns - second->start_ns == 500000);

  // A process of its own queues behind both, and what it reserved is seen by the next reservation here.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto c = StorageLink::open(state, kRate);
    const bool ok = c.ok() && (*c)->reserve(2000000).ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto third = a->reserve(1);
  REQUIRE(third.ok());
  CHECK(third->start_ns >= second->end_ns + 2000000);
}

TEST_CASE("a transfer waits out its reservation and is counted; a free link starts now") {
  ckpt_test::TempDir dir;
  auto link = open_link(dir.file("link"), 1e12);
  const std::int64_t before = StorageLink::now_ns();
  const auto slot = link->reserve(1000);
  REQUIRE(slot.ok());
  CHECK(slot->start_ns >= before);
  REQUIRE(link->transfer(4096).ok());
  CHECK(StorageLink::now_ns() >= slot->end_ns);  // an order of events, not a duration
  CHECK(link->bytes() == 4096);
  REQUIRE(link->transfer(0).ok());
  CHECK(link->bytes() == 4096);
}

TEST_CASE("a read cache makes the sharers read each block of a file across the link once, whole") {
  ckpt_test::TempDir dir;
  const std::string state = dir.file("link"), cache = dir.file("cache");  // the cache folder is made when first used
  auto a = open_link(state, 1e12);
  auto b = StorageLink::open(state, 1e12, cache);
  REQUIRE(b.ok());
  auto c = StorageLink::open(state, 1e12, cache);  // a second process of the node, as far as the cache knows
  REQUIRE(c.ok());
  constexpr std::uint64_t B = StorageLink::kCacheBlock;
  const std::uint64_t size = 3 * B + 100;  // the shard: 4 blocks, the last one short
  REQUIRE((*b)->read("/store/shard", 10, 4, size).ok());  // a header read brings in its whole block
  CHECK((*b)->bytes() == B);
  REQUIRE((*c)->read("/store/shard", 0, 2 * B, size).ok());  // blocks 0-1: block 1 is new
  CHECK((*c)->bytes() == B);
  REQUIRE((*c)->read("/store/shard", 2 * B, B + 100, size).ok());  // block 2, and the short last one
  CHECK((*c)->bytes() == 2 * B + 100);
  REQUIRE((*c)->read("/store/other", 5, 10, 20).ok());  // another file: its own blocks, at most its size
  CHECK((*c)->bytes() == 2 * B + 120);
  REQUIRE((*b)->read("/store/shard", 100, size - 100, size).ok());  // all cached
  CHECK((*b)->bytes() == B);
  REQUIRE((*b)->transfer(7).ok());  // a write always crosses
  CHECK((*b)->bytes() == B + 7);
  // Without a cache every read crosses, exactly the bytes asked for, also a repeated one.
  REQUIRE(a->read("/store/shard", 0, 100, size).ok());
  REQUIRE(a->read("/store/shard", 0, 100, size).ok());
  CHECK(a->bytes() == 200);
  // Emptying the cache (a new launch: cold caches) makes the blocks cross again.
  std::filesystem::remove_all(cache);
  REQUIRE((*c)->read("/store/shard", 0, 10, size).ok());
  CHECK((*c)->bytes() == 3 * B + 120);
}

TEST_CASE("paced files charge exactly the bytes read and written under the root, nothing else") {
  ckpt_test::TempDir dir;
  const std::string root = dir.file("storage"), beside = dir.file("storage-not"), memory = dir.file("memory");
  for (const auto& d : {root, beside, memory}) REQUIRE(::mkdir(d.c_str(), 0755) == 0);
  PosixFs posix;
  PacedFs fs(posix);
  std::vector<unsigned char> bytes(3000, 7);

  // Before pace(): nothing crosses a link.
  auto early = fs.open(root + "/early", OpenMode::create_new);
  REQUIRE(early.ok());
  REQUIRE(fs.pwrite(*early, bytes.data(), 100, 0).ok());
  REQUIRE(fs.close(*early).ok());

  fs.pace(root + "/", std::shared_ptr<StorageLink>(open_link(dir.file("link"), 1e12)));
  auto paced = fs.open(root + "/shard", OpenMode::create_new);
  auto other = fs.open(beside + "/shard", OpenMode::create_new);  // a name that only starts like the root
  auto mem = fs.open(memory + "/slot", OpenMode::create_new);
  REQUIRE((paced.ok() && other.ok() && mem.ok()));
  REQUIRE(fs.pwrite(*paced, bytes.data(), 1000, 0).ok());
  REQUIRE(fs.pwrite(*other, bytes.data(), 3000, 0).ok());
  REQUIRE(fs.pwrite(*mem, bytes.data(), 3000, 0).ok());
  REQUIRE(fs.sync(*paced).ok());
  std::vector<unsigned char> back(1000);
  const auto got = fs.pread(*paced, back.data(), back.size(), 200);  // 800 bytes left in the file
  REQUIRE(got.ok());
  CHECK(*got == 800);
  const auto map = fs.map(*paced, 0, 1000, MapMode::read_only);
  REQUIRE(map.ok());
  CHECK(std::memcmp(map->data(), bytes.data(), 1000) == 0);
  CHECK(fs.link()->bytes() == 1000 + 800 + 1000);
  for (auto h : {*paced, *other, *mem}) REQUIRE(fs.close(h).ok());

  // A closed handle's number, reused by a file outside the root, is not charged.
  auto reused = fs.open(memory + "/second", OpenMode::create_new);
  REQUIRE(reused.ok());
  REQUIRE(fs.pwrite(*reused, bytes.data(), 3000, 0).ok());
  REQUIRE(fs.close(*reused).ok());
  CHECK(fs.link()->bytes() == 2800);

  // pace("", nullptr) stops pacing.
  fs.pace("", nullptr);
  auto after = fs.open(root + "/after", OpenMode::create_new);
  REQUIRE(after.ok());
  REQUIRE(fs.pwrite(*after, bytes.data(), 3000, 0).ok());
  REQUIRE(fs.close(*after).ok());
  CHECK(fs.link() == nullptr);
}

TEST_CASE("a storage link with a bad rate or an unreachable state file is a clear error") {
  ckpt_test::TempDir dir;
  struct Case {
    const char* what;
    std::string path;
    double rate;
    Code code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"zero rate", dir.file("link"), 0.0, Code::invalid_argument, "positive"},
      {"negative rate", dir.file("link"), -1.0, Code::invalid_argument, "positive"},
      {"not a number", dir.file("link"), std::nan(""), Code::invalid_argument, "positive"},
      {"missing folder", dir.file("none/link"), kRate, Code::io, "none/link"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto link = StorageLink::open(c.path, c.rate);
    REQUIRE_FALSE(link.ok());
    CHECK(link.status().code() == c.code);
    CHECK_THAT(link.status().message(), Catch::Contains(c.says));
  }
  // A read cache that cannot be made (its parent is missing) fails the read, naming the entry.
  auto link = StorageLink::open(dir.file("link"), kRate, dir.file("none/cache"));
  REQUIRE(link.ok());
  const Status read = (*link)->read("/store/shard", 0, 10, 10);
  CHECK(read.code() == Code::io);
  CHECK_THAT(read.message(), Catch::Contains("none/cache/"));
}
