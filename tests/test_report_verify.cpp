// The verdict on a path (ckpt/report/verify.hpp, spec/REPORTS.md 3): what ckpt-verify and ckpt.verify
// both present. The tool and Python are compared case by case in python/tests/test_reports.py; these
// are the cases only the library can stage, a step retired between the journal snapshot and the
// reading of its files among them, and the exit status of every kind of outcome.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <ckpt/report/verify.hpp>

#include "store_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

constexpr std::size_t kElems = 256;

[[nodiscard]] Status save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  std::vector<float> w(kElems, static_cast<float>(step));
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4));
  return tx->commit().status();
}

[[nodiscard]] std::unique_ptr<Store> store_with_two_steps(PosixFs& fs, const std::string& path) {
  auto store = Store::open(fs, path, Access::read_write, ckpt_test::small_store_options());
  REQUIRE(store.ok());
  REQUIRE(save(**store, 1).ok());
  REQUIRE(save(**store, 2).ok());
  return std::move(store).value();
}

[[nodiscard]] std::string step_dir(const std::string& store, std::uint64_t step) {
  for (const auto& e : std::filesystem::directory_iterator(store))
    if (e.path().filename().string().rfind("step-" + std::to_string(step) + "-", 0) == 0) return e.path().string();
  FAIL("no directory of step " << step);
  return "";
}

}  // namespace

TEST_CASE("a step retired while its files are being verified is reported retired, not damaged", "[report]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  auto writer = store_with_two_steps(fs, path);
  // The check of the first shard is where a live writer's retention strikes: RETIRE, then the files go.
  report::VerifyPathsOptions options;
  bool retired = false;
  options.check_shard = [&](const std::string& shard) {
    if (!retired) {
      retired = true;
      REQUIRE(writer->retire(1).ok());
    }
    return report::check_shard(fs, shard, cpu_file_verifier(fs));
  };
  const report::VerifyPathsReport r = report::verify_paths(fs, {path}, options);
  REQUIRE(retired);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].retired);
  CHECK(r.steps[0].retired_state == "retired");
  CHECK(r.steps[0].ok);
  CHECK_FALSE(r.steps[1].retired);
  CHECK(report::exit_code(r) == report::kOk);
  const report::json doc = report::verify_json(r);
  CHECK(doc["ok"] == true);
  CHECK(doc["exit_code"] == 0);
  CHECK(doc["steps"][0]["status"] == "retired");
  CHECK(doc["summary"]["steps_retired"] == 1);
  CHECK(doc["files"][0]["status"] == "retired");
}

TEST_CASE("every kind of outcome has one exit status", "[report]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  const std::string gone = dir.file("gone");
  { auto writer = store_with_two_steps(fs, path); }
  { auto writer = store_with_two_steps(fs, gone); }
  for (const auto& e : std::filesystem::directory_iterator(step_dir(gone, 2)))
    if (e.path().extension() == ".ckpt") std::filesystem::remove(e.path());
  const std::string broken = dir.file("broken");
  std::filesystem::create_directory(broken);
  std::filesystem::copy(step_dir(path, 1), broken + "/" + std::filesystem::path(step_dir(path, 1)).filename().string());
  report::VerifyPathsOptions latest;
  latest.selection.latest = true;
  report::VerifyPathsOptions persistent;
  persistent.persistent = path;
  report::VerifyPathsOptions wrong_pin;
  wrong_pin.pins.push_back(*report::pin_from_digest(std::string(32, '0')));
  struct Case {
    const char* name;
    std::vector<std::string> paths;
    const report::VerifyPathsOptions* options;
    int exit;
    std::size_t errors;  // paths not checked at all; a shard file that cannot be read is a file outcome
  };
  const report::VerifyPathsOptions none;
  const std::vector<Case> cases = {
      {"an intact store", {path}, &none, report::kOk, 0},
      {"its latest step", {path}, &latest, report::kOk, 0},
      {"a committed step missing its shard", {gone}, &none, report::kIntegrity, 0},
      {"a missing path (a file that cannot be read)", {dir.file("missing")}, &none, report::kUsage, 0},
      {"--latest on a step directory", {step_dir(path, 1)}, &latest, report::kUsage, 1},
      {"a store that lost its journal", {broken}, &none, report::kIntegrity, 1},
      {"--persistent without a memory root", {path}, &persistent, report::kUsage, 1},
      {"a pin that does not match", {path}, &wrong_pin, report::kIntegrity, 0},
      {"the worst outcome decides", {path, dir.file("missing"), broken}, &none, report::kUsage, 1},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const report::VerifyPathsReport r = report::verify_paths(fs, c.paths, *c.options);
    CHECK(report::exit_code(r) == c.exit);
    CHECK(r.errors.size() == c.errors);
    const report::json doc = report::verify_json(r);
    CHECK(doc["exit_code"] == c.exit);
    CHECK(doc["ok"] == (c.exit == report::kOk));
    CHECK(doc["errors"].size() == c.errors);
  }
}

TEST_CASE("--expect digests are parsed once for every front end", "[report]") {
  CHECK(report::pin_from_digest(std::string(32, 'a')).ok());
  for (const std::string& bad : std::vector<std::string>{"", "xyz", std::string(31, 'a'), std::string(33, 'a'), std::string(32, 'g')}) {
    INFO(bad);
    auto pin = report::pin_from_digest(bad);
    REQUIRE_FALSE(pin.ok());
    CHECK(pin.status().code() == Code::invalid_argument);
    CHECK(pin.status().message().find("--expect") != std::string::npos);
  }
}
