// A store's LOCK held for a span of work, the durable delete of a tree, and quarantine/ purged
// (ckpt/store/maintenance.hpp, spec/JOURNAL.md 6.8): what ckpt-repair's library does with a store.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/maintenance.hpp>

#include "test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

TEST_CASE("a store's lock is exclusive while held and free once released", "[maintenance]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  fsys::create_directory(store);
  {
    auto held = lock_store(fs, store);
    REQUIRE(held.ok());
    CHECK(held->held());
    auto second = lock_store(fs, store);
    REQUIRE_FALSE(second.ok());
    CHECK(second.status().code() == Code::conflict);
    CHECK(second.status().message() == store + ": another writer has the store open (LOCK is held)");
    StoreLock moved = std::move(held).value();
    CHECK(moved.held());
    moved.release();
    CHECK_FALSE(moved.held());
    CHECK(lock_store(fs, store).ok());
  }
  CHECK(lock_store(fs, store).ok());  // the destructor released it
  CHECK_FALSE(lock_store(fs, dir.file("missing")).ok());
}

TEST_CASE("remove_tree deletes children first and never follows a symlink", "[maintenance]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string tree = dir.file("t");
  fsys::create_directories(tree + "/a/b");
  ckpt_test::write_file(tree + "/a/b/f", "f");
  fsys::create_directory(dir.file("target"));
  ckpt_test::write_file(dir.file("target") + "/kept", "kept");
  fsys::create_directory_symlink(dir.file("target"), tree + "/link");
  std::vector<std::string> removed;
  REQUIRE(remove_tree(fs, tree, removed).ok());
  CHECK_FALSE(fsys::exists(tree));
  CHECK(ckpt_test::read_file(dir.file("target") + "/kept") == "kept");
  REQUIRE(removed.size() == 5);
  CHECK(removed.back() == tree);
  CHECK(std::find(removed.begin(), removed.end(), tree + "/a/b/f") < std::find(removed.begin(), removed.end(), tree + "/a/b"));
  removed.clear();
  CHECK(remove_tree(fs, tree, removed).ok());  // gone already: nothing to do
  CHECK(removed.empty());
}

TEST_CASE("purge_quarantine empties and removes quarantine/, and finds nothing where there is none", "[maintenance]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  fsys::create_directory(store);
  QuarantinePurge none;
  REQUIRE(purge_quarantine(fs, store, none).ok());
  CHECK_FALSE(none.present);
  CHECK(quarantine_entries(fs, store).empty());
  fsys::create_directories(store + "/quarantine/step-1-1");
  ckpt_test::write_file(store + "/quarantine/step-1-1/MANIFEST", "m");
  ckpt_test::write_file(store + "/quarantine/loose", "l");
  CHECK(quarantine_entries(fs, store).size() == 2);
  QuarantinePurge purged;
  REQUIRE(purge_quarantine(fs, store, purged).ok());
  CHECK(purged.present);
  CHECK(purged.entries.size() == 2);
  CHECK(purged.removed.size() == 3);
  CHECK_FALSE(fsys::exists(store + "/quarantine"));
  CHECK(fsys::exists(store));
}
