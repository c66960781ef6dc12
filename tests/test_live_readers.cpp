// Readers of a live store (issue 9): a writer saves every step and keeps one, so each commit is
// followed at once by a RETIRE of the previous step and the removal of its files. A reader that
// finds a step's files gone re-reads the journal (recheck_step in verify.hpp); a step retired
// meanwhile is reported as retired, never as damage. The tool tests run ckpt-verify and ckpt-inspect
// as built (cmake/tests-live.cmake builds them first).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/store/store.hpp>

#include "store_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

const std::string kBin = CKPT_BINARY_DIR;
constexpr std::size_t kElems = 256;  // 1 KiB of F32: one small chunk

StoreOptions writable_options(std::uint64_t keep_last) {
  StoreOptions o = ckpt_test::small_store_options();
  o.retention.keep_last = keep_last;
  return o;
}

[[nodiscard]] Result<CommitResult> save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  std::vector<float> w(kElems);
  for (std::size_t i = 0; i < kElems; ++i) w[i] = static_cast<float>(step) + static_cast<float>(i);
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4));
  return tx->commit();
}

// The writer of a new store at path keeping `keep_last` steps (0: all), with step `first` saved.
[[nodiscard]] std::unique_ptr<Store> open_writer(PosixFs& fs, const std::string& path, std::uint64_t keep_last,
                                                          std::uint64_t first) {
  auto store = Store::open(fs, path, Access::read_write, writable_options(keep_last));
  INFO(store.status().to_string());
  REQUIRE(store.ok());
  auto committed = save(**store, first);
  INFO(committed.status().to_string());
  REQUIRE(committed.ok());
  return std::move(store).value();
}

[[nodiscard]] std::unique_ptr<Store> open_reader(PosixFs& fs, const std::string& path) {
  auto store = Store::open(fs, path, Access::read_only);
  INFO(store.status().to_string());
  REQUIRE(store.ok());
  return std::move(store).value();
}

// Tool runs in the loop test: 200 by default, far fewer when the tools carry sanitizers
// (CKPT_LIVE_READER_RUNS overrides either).
[[nodiscard]] int reader_runs() {
  if (const char* env = std::getenv("CKPT_LIVE_READER_RUNS")) return std::max(1, std::atoi(env));
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return 24;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return 24;
#endif
#endif
  return 200;
}

[[nodiscard]] bool tools_built() {
  return std::filesystem::exists(kBin + "/ckpt-verify") && std::filesystem::exists(kBin + "/ckpt-inspect");
}

}  // namespace

TEST_CASE("a step retired after a reader's snapshot is rechecked as retired, not damaged", "[live]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  auto writer = open_writer(fs, path, 0, 1);
  REQUIRE(save(*writer, 2).ok());

  auto reader = open_reader(fs, path);
  const std::vector<StepInfo> snapshot = reader->steps();
  REQUIRE(snapshot.size() == 2);
  const StepInfo step1 = snapshot.front();

  // The writer retires step 1 (RETIRE durable, then its files removed): the reader's snapshot is stale.
  REQUIRE(writer->retire(1).ok());
  auto opened = reader->open_step(step1);
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == Code::not_found);

  auto recheck = recheck_step(*reader, step1.step, step1.txn);
  REQUIRE(recheck.ok());
  CHECK(*recheck == StepRecheck::retired);
  CHECK(std::string(step_recheck_name(*recheck)) == "retired");
  // The re-read view is the writer's: only step 2, which still verifies.
  REQUIRE(reader->steps().size() == 1);
  CHECK(reader->steps().front().step == 2);
  CHECK(reader->open_step(2).ok());
  CHECK(*recheck_step(*reader, 2, reader->steps().front().txn) == StepRecheck::committed);
  // A transaction the journal never named is not listed (a journal rewritten meanwhile reads the same).
  CHECK(*recheck_step(*reader, 7, 99) == StepRecheck::not_listed);
}

TEST_CASE("a committed step whose files are missing is still damage after the recheck", "[live]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  StepInfo info;
  {
    auto writer = Store::open(fs, path, Access::read_write, writable_options(0));
    REQUIRE(writer.ok());
    auto committed = save(**writer, 5);
    REQUIRE(committed.ok());
    info = committed->step;
  }
  auto reader = open_reader(fs, path);
  REQUIRE(std::filesystem::remove(path + "/" + info.dir + "/" + info.files.front().name));
  CHECK(reader->open_step(info).status().code() == Code::not_found);
  auto recheck = recheck_step(*reader, info.step, info.txn);
  REQUIRE(recheck.ok());
  CHECK(*recheck == StepRecheck::committed);

  if (!tools_built()) {
    WARN("ckpt-verify or ckpt-inspect not built: tool checks skipped");
    return;
  }
  const auto verify = ckpt_test::run_program(kBin + "/ckpt-verify", {path});
  INFO(verify.out << verify.err);
  CHECK(verify.code == 1);
  CHECK(verify.out.find("DAMAGED") != std::string::npos);
  const auto as_json = ckpt_test::run_program(kBin + "/ckpt-verify", {"--json", path});
  CHECK(as_json.code == 1);
  const auto doc = nlohmann::json::parse(as_json.out);
  CHECK(doc["stores"][0]["steps"][0]["status"] == "damaged");
  CHECK(doc["summary"]["steps_retired"] == 0);
  const auto inspect = ckpt_test::run_program(kBin + "/ckpt-inspect", {path});
  CHECK(inspect.code == 1);
  CHECK(inspect.out.find("DAMAGED") != std::string::npos);
}

TEST_CASE("readers running beside a writer that saves every step and keeps one give no false verdicts", "[live][tools]") {
  if (!tools_built()) {
    WARN("ckpt-verify or ckpt-inspect not built: skipped");
    return;
  }
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  auto writer = open_writer(fs, path, 1, 1);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> saved{1};
  std::string writer_error;
  std::thread training([&] {
    for (std::uint64_t step = 2; !stop.load(); ++step) {
      auto committed = save(*writer, step);
      if (!committed.ok() || !committed->retention.ok() || committed->retired.size() != 1) {
        writer_error = committed.ok() ? committed->retention.to_string() + " (retired " + std::to_string(committed->retired.size()) + ")"
                                      : committed.status().to_string();
        return;
      }
      saved = step;
    }
  });

  const int runs = reader_runs();
  int false_verdicts = 0, retired_seen = 0;
  std::vector<std::string> failures;
  for (int i = 0; i < runs; ++i) {
    const int kind = i % 3;
    const auto run = kind == 0   ? ckpt_test::run_program(kBin + "/ckpt-verify", {path})
                     : kind == 1 ? ckpt_test::run_program(kBin + "/ckpt-verify", {"--json", path})
                                 : ckpt_test::run_program(kBin + "/ckpt-inspect", {path});
    bool bad = run.code != 0 || run.out.find("DAMAGED") != std::string::npos;
    if (kind == 1 && run.code == 0) {
      const auto doc = nlohmann::json::parse(run.out, nullptr, false);
      bad = bad || doc.is_discarded() || !doc["ok"].get<bool>();
      if (!doc.is_discarded())
        for (const auto& st : doc["stores"][0]["steps"]) {
          const std::string status = st["status"].get<std::string>();
          bad = bad || (status != "intact" && status != "retired");
          retired_seen += status == "retired";
        }
    } else {
      retired_seen += run.out.find("retired while being") != std::string::npos;
    }
    if (bad) {
      ++false_verdicts;
      if (failures.size() < 3) failures.push_back("run " + std::to_string(i) + " exit " + std::to_string(run.code) + ":\n" + run.out + run.err);
    }
  }
  stop = true;
  training.join();
  INFO(writer_error);
  REQUIRE(writer_error.empty());
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(false_verdicts == 0);
  // The race is real only if the writer kept retiring while the readers ran.
  CHECK(saved.load() > 2);
  WARN(std::to_string(runs) + " reader runs, " + std::to_string(saved.load()) + " steps saved, " +
       std::to_string(retired_seen) + " runs saw a step retired while being read, " + std::to_string(false_verdicts) +
       " false verdicts");
}
