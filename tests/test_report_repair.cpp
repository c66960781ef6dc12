// Repairing what a path names (ckpt/report/repair.hpp, spec/REPORTS.md 6): what ckpt-repair and
// ckpt.repair both present. The tool's own behaviour is tests/test_repair_tool.cpp; these are the
// library's verdicts, one damage table over a store, and the misuse that repairs nothing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ckpt/report/repair.hpp>
#include <ckpt/report/text.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/store/maintenance.hpp>

#include "memory_root_fixture.hpp"
#include "store_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

constexpr std::size_t kElems = ckpt_test::kReportElems;
using ckpt_test::make_two_step_store;
using ckpt_test::step_dir_of;

[[nodiscard]] std::string shard_of(const std::string& dir) {
  for (const auto& e : fsys::directory_iterator(dir))
    if (e.path().extension() == ".ckpt") return e.path().string();
  FAIL("no shard in " << dir);
  return "";
}

[[nodiscard]] report::RepairReport repair(PosixFs& fs, const std::string& path, bool dry_run, bool purge = false) {
  report::RepairOptions options;
  options.dry_run = dry_run;
  options.purge = purge;
  auto r = report::repair_path(fs, path, options);
  REQUIRE(r.ok());
  return std::move(r).value();
}

}  // namespace

TEST_CASE("every repair names its kind and exit status in the report and its document", "[report][repair]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  const report::RepairReport r = repair(fs, store, false);
  CHECK(r.kind == "store");
  CHECK(r.exit_code == report::kOk);
  CHECK(r.error.ok());
  CHECK(r.doc["report"] == "repair");
  CHECK(r.doc["subject"] == "store");
  CHECK(r.doc["exit_code"] == 0);
  CHECK(r.doc["exit"] == 0);  // the key ckpt-repair --json always had
  CHECK(r.doc["consistent"] == true);
  CHECK(r.doc["steps"].size() == 2);
  CHECK(r.text.find("result: consistent") != std::string::npos);
  CHECK(report::repair_text(r) == r.text);
}

// Each damage, repaired twice: a dry run (changes nothing, exit 1 when work is pending) and the repair.
TEST_CASE("store damage table: what a dry run and a repair conclude", "[report][repair]") {
  struct Case {
    const char* name;
    std::function<void(const std::string& store)> damage;
    int dry_exit, repair_exit;
    bool rebuilt;      // the journal was rebuilt from the step directories
    int verify_after;  // ckpt-verify's verdict on the store afterwards
    const char* says;  // in the repair's text
  };
  const std::vector<Case> cases = {
      {"intact", [](const std::string&) {}, 0, 0, false, 0, "nothing wrong with the journal"},
      {"journal cut by one byte (a torn append)",
       [](const std::string& s) { fsys::resize_file(s + "/JOURNAL", fsys::file_size(s + "/JOURNAL") - 1); }, 1, 0, false, 0,
       "torn journal tail at offset"},
      {"journal deleted", [](const std::string& s) { fsys::remove(s + "/JOURNAL"); }, 1, 0, true, 0, "the JOURNAL is missing"},
      {"journal header zeroed",
       [](const std::string& s) {
         std::string j = ckpt_test::read_file(s + "/JOURNAL");
         for (std::size_t i = 0; i < 64 && i < j.size(); ++i) j[i] = 0;
         ckpt_test::write_file(s + "/JOURNAL", j);
       },
       1, 0, true, 0, "rebuilding the journal"},
      {"a data byte of step 1 flipped", [](const std::string& s) { ckpt_test::xor_byte(shard_of(step_dir_of(s, 1)), 4096, 0x5A); }, 1, 1, false, 1,
       "DAMAGE REMAINS: 1 step directory damaged"},
      {"quarantine/ holds files",
       [](const std::string& s) {
         fsys::create_directories(s + "/quarantine/step-9-9");
         ckpt_test::write_file(s + "/quarantine/step-9-9/MANIFEST", "half");
       },
       1, 1, false, 0, "in quarantine (kept for a person to decide"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    ckpt_test::TempDir dir;
    PosixFs fs;
    const std::string store = dir.file("s");
    make_two_step_store(fs, store);
    c.damage(store);
    const auto before = ckpt_test::directory_tree(store);
    const report::RepairReport dry = repair(fs, store, true);
    INFO(dry.text);
    CHECK(dry.exit_code == c.dry_exit);
    CHECK(dry.doc["exit_code"] == c.dry_exit);
    CHECK(dry.doc["dry_run"] == true);
    CHECK(dry.doc["actions"].empty());
    CHECK(ckpt_test::directory_tree(store) == before);  // a dry run changes nothing
    const report::RepairReport r = repair(fs, store, false);
    INFO(r.text);
    CHECK(r.exit_code == c.repair_exit);
    CHECK(r.doc["consistent"] == (c.repair_exit == 0));
    CHECK(r.doc.contains("rebuild") == c.rebuilt);
    CHECK(r.text.find(c.says) != std::string::npos);
    CHECK(report::verify_paths(fs, {store}).exit_code == c.verify_after);
  }
}

TEST_CASE("purge deletes quarantine/ durably, and only when asked", "[report][repair]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  fsys::create_directories(store + "/quarantine/step-9-9/deep");
  ckpt_test::write_file(store + "/quarantine/step-9-9/deep/x", "x");
  ckpt_test::write_file(dir.file("outside"), "kept");
  fsys::create_symlink(dir.file("outside"), store + "/quarantine/link");
  const report::RepairReport kept = repair(fs, store, false);
  CHECK(kept.exit_code == report::kIntegrity);
  CHECK(kept.doc["quarantine"].size() == 2);
  const report::RepairReport purged = repair(fs, store, false, true);
  INFO(purged.text);
  CHECK(purged.exit_code == report::kOk);
  CHECK_FALSE(fsys::exists(store + "/quarantine"));
  CHECK(ckpt_test::read_file(dir.file("outside")) == "kept");  // a symlink is removed, never followed
  CHECK(purged.doc["purged"].size() == 4);                    // x, deep, step-9-9, link
  CHECK(purged.text.find("purging quarantine:") != std::string::npos);
}

TEST_CASE("a store whose LOCK another writer holds is not repaired: an error in the report", "[report][repair]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  SECTION("recovery: the writable open is refused") {
    auto writer = Store::open(fs, store, Access::read_write, ckpt_test::small_store_options(false));
    REQUIRE(writer.ok());
    const report::RepairReport r = repair(fs, store, false);
    CHECK(r.exit_code == report::kUsage);
    CHECK(r.error.code() == Code::conflict);
    CHECK(r.doc["error"]["code"] == "conflict");
    CHECK(r.text.find("result: error: ") != std::string::npos);
  }
  SECTION("a rebuild: the lock is taken before the plan") {
    fsys::remove(store + "/JOURNAL");
    auto lock = lock_store(fs, store);
    REQUIRE(lock.ok());
    const report::RepairReport r = repair(fs, store, false);
    CHECK(r.exit_code == report::kUsage);
    CHECK(r.error.message() == store + ": another writer has the store open (LOCK is held)");
    CHECK_FALSE(fsys::exists(store + "/JOURNAL"));  // nothing written
    const report::RepairReport dry = repair(fs, store, true);  // a dry run takes no lock
    CHECK(dry.exit_code == report::kIntegrity);
  }
}

TEST_CASE("misuse and paths that are no store repair nothing and fail", "[report][repair]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  fsys::create_directory(dir.file("empty"));
  report::RepairOptions purge_dry;
  purge_dry.purge = purge_dry.dry_run = true;
  struct Case {
    const char* name;
    std::string path;
    report::RepairOptions options;
    Code code;
  };
  const std::vector<Case> cases = {
      {"a shard file", shard_of(step_dir_of(store, 1)), {}, Code::invalid_argument},
      {"a step directory", step_dir_of(store, 1), {}, Code::invalid_argument},
      {"a missing path", dir.file("missing"), {}, Code::not_found},
      {"--purge with --dry-run", store, purge_dry, Code::invalid_argument},
      {"an s3:// store without an object client", "s3://bucket/prefix", {}, Code::unsupported},
  };
  const auto before = ckpt_test::directory_tree(store);
  for (const auto& c : cases) {
    INFO(c.name);
    auto r = report::repair_path(fs, c.path, c.options);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    CHECK(report::exit_for(r.status().code()) == report::kUsage);
  }
  auto empty = report::repair_path(fs, dir.file("empty"), {});
  CHECK_FALSE(empty.ok());
  CHECK(ckpt_test::directory_tree(store) == before);
}

TEST_CASE("the text reaches on_text as it is decided, piece by piece, and adds up to the report's", "[report][repair]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  fsys::resize_file(store + "/JOURNAL", fsys::file_size(store + "/JOURNAL") - 1);
  std::vector<std::string> pieces;
  report::RepairOptions options;
  options.on_text = [&](const std::string& piece) { pieces.push_back(piece); };
  auto r = report::repair_path(fs, store + "/", options);  // a trailing slash names the same store
  REQUIRE(r.ok());
  std::string joined;
  for (const auto& p : pieces) joined += p;
  CHECK(joined == r->text);
  CHECK(pieces.front() == "ckpt-repair: store " + store + "\n");
  // The plan is said before what was done.
  CHECK(r->text.find("will do:") < r->text.find("done:"));
}

// A memory tier's root (spec/TIERS.md 2, 5): each store recovered, each tier log's torn tail cut, every
// copy verified afterwards; damage in a log or a copy stays and is reported.
TEST_CASE("memory root damage table: what a dry run and a repair conclude", "[report][repair][memory_root]") {
  namespace fixture = memory_root_fixture;
  struct Case {
    const char* name;
    std::function<void(const fsys::path& mem)> damage;
    int dry_exit, repair_exit;
    const char* says;  // in the repair's text
  };
  const std::vector<Case> cases = {
      {"intact", [](const fsys::path&) {}, 0, 0, "result: consistent"},
      {"a tier log cut by one byte (a torn append)",
       [](const fsys::path& mem) { fsys::resize_file(mem / "rank-1" / "TIERS", fsys::file_size(mem / "rank-1" / "TIERS") - 1); }, 1, 0,
       ": cut (the end of the log)"},
      {"a byte flipped in the middle of a tier log", [](const fsys::path& mem) { fixture::flip_byte(mem / "rank-1" / "TIERS", 4096 + 30); }, 1,
       1, "DAMAGED: "},
      {"a copy's data flipped", [](const fsys::path& mem) { fixture::flip_shard_data(mem / "rank-0" / "own", 6); }, 1, 1,
       "DAMAGE REMAINS (see above)"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const fsys::path dir = fixture::fresh_copy("report-repair");
    const fsys::path mem = dir / "mem";
    c.damage(mem);
    PosixFs fs;
    const auto before = ckpt_test::directory_tree(mem.string());
    const report::RepairReport dry = repair(fs, mem.string(), true);
    INFO(dry.text);
    CHECK(dry.kind == "memory root");
    CHECK(dry.exit_code == c.dry_exit);
    CHECK(dry.doc["subject"] == "memory root");
    CHECK(dry.doc["exit_code"] == c.dry_exit);
    CHECK(ckpt_test::directory_tree(mem.string()) == before);
    const report::RepairReport r = repair(fs, mem.string(), false);
    INFO(r.text);
    CHECK(r.exit_code == c.repair_exit);
    CHECK(r.doc["exit"] == c.repair_exit);
    CHECK(r.doc["consistent"] == (c.repair_exit == 0));
    CHECK(r.text.rfind("ckpt-repair: memory root ", 0) == 0);
    CHECK(r.text.find(c.says) != std::string::npos);
  }
  report::RepairOptions purge;
  purge.purge = true;
  PosixFs fs;
  auto refused = report::repair_path(fs, (fixture::fresh_copy("report-repair") / "mem").string(), purge);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::invalid_argument);
}
