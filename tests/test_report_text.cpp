// Every report as text (ckpt/report/text.hpp, spec/REPORTS.md 7): what the tools print without --json
// and the Python reports' text. The tools' words are checked by tests/test_tools.cpp and
// test_repair_tool.cpp; these are the renderer's decisions, and the kind and exit status every
// document carries.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/report/text.hpp>

#include "store_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

constexpr std::size_t kElems = ckpt_test::kReportElems;
using ckpt_test::make_two_step_store;
using ckpt_test::step_dir_of;

[[nodiscard]] bool says(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("a store's table tells a torn journal tail from a damaged one", "[report][text]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  struct Case {
    const char* name;
    void (*damage)(const std::string& journal);
    const char* says;
    int exit;
  };
  const std::vector<Case> cases = {
      {"intact", [](const std::string&) {}, "records\n", 0},
      {"cut by one byte: a crash during an append",
       [](const std::string& j) { std::filesystem::resize_file(j, std::filesystem::file_size(j) - 1); }, ", torn tail at ", 0},
      {"300 bytes no writer writes: damage", [](const std::string& j) { ckpt_test::write_file(j, ckpt_test::read_file(j) + std::string(300, 'T')); },
       ", DAMAGED tail at ", 1},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string store = dir.file(std::string("s-") + std::to_string(&c - cases.data()));
    make_two_step_store(fs, store);
    c.damage(store + "/JOURNAL");
    auto inspection = report::inspect_path(fs, store);
    REQUIRE(inspection.ok());
    const std::string text = report::inspect_text(*inspection);
    INFO(text);
    CHECK(says(text, c.says));
    CHECK(inspection->exit_code == c.exit);
    CHECK(inspection->doc["exit_code"] == c.exit);
    CHECK(inspection->doc["report"] == "inspect");
    CHECK(inspection->doc["subject"] == "store");
    CHECK(says(text, "2 (2 committed, 0 retired, 0 aborted, 0 open)"));  // the library's count
    CHECK(inspection->doc["transaction_states"]["committed"] == 2);
  }
}

TEST_CASE("verify's text follows the report: per path, then pins and a summary line", "[report][text]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  const report::VerifyPathsReport r = report::verify_paths(fs, {store});
  CHECK(r.kind == "store");
  CHECK(r.exit_code == report::kOk);
  const std::string text = report::verify_text(r);
  INFO(text);
  CHECK(says(text, store + ": store, journal intact, 2 steps selected\n"));
  CHECK(says(text, "2 steps: 2 intact, 0 damaged (2 shard files checked)\n"));
  // The text's counts are the document's: counted once (verify_summary).
  const report::VerifySummary n = report::verify_summary(r);
  const report::json summary = report::verify_json(r)["summary"];
  CHECK(summary["files"] == n.files);
  CHECK(summary["intact"] == n.intact);
  CHECK(summary["damaged"] == n.damaged);
  CHECK(summary["errors"] == n.errors);
  CHECK(summary["retired"] == n.retired);
  CHECK(summary["problems"] == n.problems);
  CHECK(summary["steps_intact"] == n.steps_intact);
  CHECK(summary["steps_retired"] == n.steps_retired);
  // Quiet: a store's line stays, nothing intact below it is said.
  CHECK(report::verify_text(r, true) == store + ": store, journal intact, 2 steps selected\n");
  // What was appended since a mark, and only that.
  report::VerifyPathsReport two = r;
  const report::VerifyMark mark = report::verify_mark(two);
  report::verify_path(fs, step_dir_of(store, 1), {}, two);
  const std::string since = report::verify_text(two, mark, false);
  CHECK_FALSE(says(since, "store,"));
  CHECK(says(since, ": ok (1 file, "));
  const std::string missing = dir.file("missing.ckpt");
  const report::VerifyPathsReport gone = report::verify_paths(fs, {missing});
  CHECK(report::verify_error_messages(gone, {}).size() == 1);  // said on stderr, not in the text
  CHECK(report::verify_text(gone, report::VerifyMark{}, false).empty());
}

TEST_CASE("verify's kind is what the paths named, and every document carries it", "[report][text]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  struct Case {
    std::string path;
    const char* kind;
  };
  const std::vector<Case> cases = {{store, "store"}, {step_dir_of(store, 1), "step directory"}, {dir.file("missing"), "file"}};
  for (const auto& c : cases) {
    INFO(c.path);
    const report::VerifyPathsReport r = report::verify_paths(fs, {c.path});
    CHECK(r.kind == c.kind);
    CHECK(report::verify_kind(r) == std::string(c.kind));
    const report::json doc = report::verify_json(r);
    CHECK(doc["subject"] == c.kind);
    CHECK(doc["report"] == "verify");
    CHECK(doc["exit_code"] == r.exit_code);
  }
}

TEST_CASE("verify's JUnit has a testcase for every file and for a pin that did not match", "[report][text]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  report::VerifyPathsOptions options;
  options.pins.push_back(*report::pin_from_digest(std::string(32, '0')));
  const report::VerifyPathsReport r = report::verify_paths(fs, {store}, options);
  CHECK(r.exit_code == report::kIntegrity);
  const std::string xml = report::verify_junit(r, "ckpt-verify");
  CHECK(says(xml, "tests=\"3\" failures=\"0\" errors=\"1\""));  // two shard files and the pin
  CHECK(says(xml, "not the pinned checkpoint: "));
  const std::string text = report::verify_text(r);
  CHECK(says(text, store + ": NOT THE PINNED CHECKPOINT ("));
}

TEST_CASE("a diff's text lists what changed and ends in its verdict", "[report][text]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  make_two_step_store(fs, store);
  report::DiffOptions options;
  options.step_a = 1;
  auto d = report::diff_paths(fs, store, store, options);
  REQUIRE(d.ok());
  CHECK(d->exit_code() == report::kIntegrity);
  CHECK(d->doc["exit_code"] == 1);
  CHECK(d->doc["report"] == "diff");
  CHECK(d->doc["subject"] == d->kind);
  const std::string text = report::diff_text(*d);
  INFO(text);
  CHECK(says(text, "changed  w  4 of 4 chunks differ\n"));
  CHECK(says(text, "different: 1 tensor changed, added or removed, 0 unchanged,"));
  auto same = report::diff_paths(fs, store, store);
  REQUIRE(same.ok());
  CHECK(same->doc["exit_code"] == 0);
  CHECK(says(report::diff_text(*same), "identical: 0 tensors changed"));
}

TEST_CASE("columns and sizes for people", "[report][text]") {
  CHECK(report::human_bytes(512) == "512 B");
  CHECK(report::human_bytes(1536) == "1.5 KiB");
  CHECK(report::table_text({{"a", "1"}, {"long", "22"}}, {false, true}, "  ") == "  a      1\n  long  22\n");
}
