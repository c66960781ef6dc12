// Tests for include/ckpt/store/path_kind.hpp: what a path names, and where a step directory stands in its store.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/store/path_kind.hpp>

#include "test_util.hpp"
#include "store_test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

Status save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const std::vector<float> w(64, static_cast<float>(step));
  CKPT_TRY(tx->add_tensor("w", DType::F32, {64}, w.data(), w.size() * 4));
  return tx->commit().status();
}

// A store in dir holding committed step 3 (txn 1); returns its path.
std::string store_with_step_3(PosixFs& fs, ckpt_test::TempDir& dir) {
  const std::string path = dir.file("store");
  auto store = Store::open(fs, path, Access::read_write, ckpt_test::small_store_options());
  REQUIRE(store.ok());
  REQUIRE(save(**store, 3).ok());
  return path;
}

}  // namespace

TEST_CASE("a path is classified as file, store, step directory, store without journal or other directory", "[path_kind]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store_path = store_with_step_3(fs, dir);
  const std::string lost = dir.file("lost");
  fsys::create_directories(lost);
  fsys::copy(store_path + "/step-3-1", lost + "/step-3-1", fsys::copy_options::recursive);
  fsys::create_directories(dir.file("empty"));
  ckpt_test::write_file(dir.file("notes.txt"), "hello");

  struct Case {
    std::string path;
    PathKind kind;
    const char* name;
  };
  const std::vector<Case> cases = {
      {store_path, PathKind::store, "store"},
      {store_path + "/step-3-1", PathKind::step_dir, "step directory"},
      {store_path + "/step-3-1/" + shard_file_name(0, 1), PathKind::file, "file"},
      {dir.file("notes.txt"), PathKind::file, "file"},
      {lost, PathKind::broken_store, "store without a journal"},
      {dir.file("empty"), PathKind::other_dir, "directory"},
  };
  for (const auto& c : cases) {
    INFO(c.path);
    auto kind = classify_path(fs, c.path);
    REQUIRE(kind.ok());
    CHECK(*kind == c.kind);
    CHECK(std::string(path_kind_name(*kind)) == c.name);
  }
  CHECK(classify_path(fs, dir.file("nothing")).status().code() == Code::not_found);
  CHECK(not_a_store_error(lost, PathKind::broken_store).code() == Code::corrupt);
  CHECK(not_a_store_error(dir.file("empty"), PathKind::other_dir).code() == Code::invalid_argument);
}

TEST_CASE("a step directory inside a store is located by the store's journal", "[path_kind]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store_path = store_with_step_3(fs, dir);
  const StepInStore committed = locate_step_directory(fs, store_path + "/step-3-1/");
  CHECK(committed.store == store_path);
  REQUIRE(committed.info.has_value());
  CHECK(committed.info->step == 3);
  CHECK(committed.state == "committed");

  const StepInStore unknown = locate_step_directory(fs, store_path + "/step-9-9");
  CHECK(unknown.store == store_path);
  CHECK_FALSE(unknown.info.has_value());
  CHECK(unknown.state == "not in the journal");

  const StepInStore outside = locate_step_directory(fs, dir.file("elsewhere"));
  CHECK(outside.store.empty());
  CHECK_FALSE(outside.info.has_value());
}

TEST_CASE("a memory root and its rank directories are classified by their layout", "[path_kind]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string root = dir.file("mem");
  fsys::create_directories(root + "/rank-0");
  ckpt_test::write_file(root + "/rank-0/TIERS", "");  // a tier log: its content is not read to classify
  fsys::create_directories(root + "/rank-1");
  REQUIRE(Store::open(fs, root + "/rank-1/held-0", Access::read_write, ckpt_test::small_store_options()).ok());
  fsys::create_directories(dir.file("rank-7"));          // the name alone is not enough
  fsys::create_directories(dir.file("rank-x"));
  ckpt_test::write_file(dir.file("rank-x/TIERS"), "");  // nor the log under another name
  fsys::create_directories(dir.file("ranks/rank-9/own"));  // an own/ that is not a store
  struct Case {
    std::string path;
    PathKind kind;
  };
  for (const auto& c : std::vector<Case>{{root, PathKind::memory_root},
                                         {root + "/", PathKind::memory_root},
                                         {root + "/rank-0", PathKind::rank_dir},
                                         {root + "/rank-1/", PathKind::rank_dir},
                                         {root + "/rank-1/held-0", PathKind::store},
                                         {dir.file("rank-7"), PathKind::other_dir},
                                         {dir.file("rank-x"), PathKind::other_dir},
                                         {dir.file("ranks"), PathKind::other_dir}}) {
    INFO(c.path);
    auto kind = classify_path(fs, c.path);
    REQUIRE(kind.ok());
    CHECK(*kind == c.kind);
  }
  CHECK(std::string(path_kind_name(PathKind::memory_root)) == "memory root");
  CHECK(std::string(path_kind_name(PathKind::rank_dir)) == "rank directory");
  CHECK(not_a_store_error(root, PathKind::memory_root).code() == Code::invalid_argument);
  std::uint32_t n = 0;
  CHECK((parse_numbered_name("rank-12", "rank-", n) && n == 12));
  CHECK((parse_numbered_name("rank-0", "rank-", n) && n == 0));
  for (const char* bad : {"rank-", "rank-1a", "rank-+1", "rank- 1", "rank-01", "rank-1234567890", "Rank-1", "held-1"}) {
    INFO(bad);
    CHECK_FALSE(parse_numbered_name(bad, "rank-", n));
  }
}

TEST_CASE("a directory named rank-01 is no rank directory, whatever it holds", "[path_kind]") {
  // spec/TIERS.md 2.1: decimal, no leading zero; path recognition reads a root as resume does.
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string root = dir.file("mem");
  for (const char* name : {"rank-01", "rank-", "rank-4294967296"}) {
    fsys::create_directories(root + "/" + name);
    ckpt_test::write_file(root + "/" + name + "/TIERS", "");
    REQUIRE(Store::open(fs, root + "/" + name + "/own", Access::read_write, ckpt_test::small_store_options()).ok());
  }
  for (const char* name : {"rank-01", "rank-", "rank-4294967296"}) {
    INFO(name);
    CHECK_FALSE(is_rank_directory(fs, root + "/" + name));
    CHECK(classify_path(fs, root + "/" + name).value() == PathKind::other_dir);
    CHECK(classify_path(fs, root + "/" + name + "/own").value() == PathKind::store);
  }
  CHECK(classify_path(fs, root).value() == PathKind::other_dir);  // no rank directory in it
  fsys::create_directories(root + "/rank-1");
  ckpt_test::write_file(root + "/rank-1/TIERS", "");
  CHECK(is_rank_directory(fs, root + "/rank-1"));
  CHECK(classify_path(fs, root).value() == PathKind::memory_root);
}
