// Tests for include/ckpt/store/step_reader.hpp: opening a step (StepReader), reading a bare step directory,
// and verifying a step whole: each problem reported once, as a structured record, through a
// pluggable per-file verifier.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ckpt/store/step_reader.hpp>
#include <ckpt/store/store.hpp>

#include "test_util.hpp"
#include "store_test_util.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

constexpr std::size_t kElems = 300;  // 1200 bytes of F32: one 4 KiB chunk per tensor

std::vector<float> values(std::uint64_t step) {
  std::vector<float> w(kElems);
  for (std::size_t i = 0; i < kElems; ++i) w[i] = static_cast<float>(step) + static_cast<float>(i) / 1000.0f;
  return w;
}

Status save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const auto w = values(step);
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kElems}, w.data(), w.size() * 4));
  return tx->commit().status();
}

// Every problem a report holds: the step's own and each shard's.
std::vector<Problem> all_problems(const StepVerifyReport& r) {
  std::vector<Problem> out = r.problems;
  for (const auto& s : r.shards) out.insert(out.end(), s.problems.begin(), s.problems.end());
  return out;
}

// A store with steps 1 and 2, one shard each.
struct TwoSteps {
  ckpt_test::TempDir dir;
  PosixFs fs;
  std::string path = dir.file("store");
  std::unique_ptr<Store> store;
  std::string shard1, manifest1, shard2, manifest2;
  TwoSteps() {
    auto s = Store::open(fs, path, Access::read_write, ckpt_test::small_store_options());
    REQUIRE(s.ok());
    store = std::move(s).value();
    REQUIRE(save(*store, 1).ok());
    REQUIRE(save(*store, 2).ok());
    shard1 = path + "/step-1-1/" + shard_file_name(0, 1);
    manifest1 = path + "/step-1-1/MANIFEST";
    shard2 = path + "/step-2-2/" + shard_file_name(0, 1);
    manifest2 = path + "/step-2-2/MANIFEST";
  }
  StepVerifyReport verify() { return verify_step(fs, path, *store->find(1), store->uuid(), cpu_file_verifier(fs)); }
};

}  // namespace

TEST_CASE("an intact step verifies with no problem and every chunk checked", "[step_reader]") {
  TwoSteps t;
  const StepVerifyReport r = t.verify();
  CHECK(r.ok());
  CHECK(r.problems.empty());
  REQUIRE(r.shards.size() == 1);
  CHECK(r.shards[0].path == t.shard1);
  CHECK(r.chunks_checked == r.shards[0].chunks_total);
  CHECK(r.chunks_checked > 0);
  CHECK(r.step.step == 1);
  CHECK(r.dir == t.path + "/step-1-1");
  CHECK_FALSE(r.files_missing());
}

TEST_CASE("each kind of step damage is reported once, with its region, file and code", "[step_reader]") {
  struct Case {
    const char* name;
    std::function<void(TwoSteps&)> damage;
    const char* region;  // of the one problem
    bool in_shard;       // the shard's VerifyReport holds it (else the step's problems)
    bool file_is_shard;  // Problem::file names the shard (else the MANIFEST)
    bool reader_opens;   // StepReader::open still succeeds (the damage is only in data)
  };
  const std::vector<Case> cases = {
      {"a flipped data bit", [](TwoSteps& t) {
         std::string b = ckpt_test::read_file(t.shard1);
         b[128 + 10] = static_cast<char>(b[128 + 10] ^ 1);
         ckpt_test::write_file(t.shard1, b);
       }, "data", true, true, true},
      {"a truncated shard", [](TwoSteps& t) {
         std::string b = ckpt_test::read_file(t.shard1);
         ckpt_test::write_file(t.shard1, b.substr(0, b.size() - 100));
       }, "footer", true, true, false},
      {"a zeroed footer", [](TwoSteps& t) {
         std::string b = ckpt_test::read_file(t.shard1);
         for (std::size_t i = b.size() - 64; i < b.size(); ++i) b[i] = 0;
         ckpt_test::write_file(t.shard1, b);
       }, "footer", true, true, false},
      {"a flipped index byte", [](TwoSteps& t) {
         std::string b = ckpt_test::read_file(t.shard1);
         const std::size_t at = b.size() - 64 - 20;  // inside the index, just before the footer
         b[at] = static_cast<char>(b[at] ^ 0x40);
         ckpt_test::write_file(t.shard1, b);
       }, "index", true, true, false},
      {"a missing shard", [](TwoSteps& t) { fsys::remove(t.shard1); }, step_region::kMissing, false, true, false},
      {"another step's shard in its place", [](TwoSteps& t) { ckpt_test::write_file(t.shard1, ckpt_test::read_file(t.shard2)); },
       step_region::kPin, false, true, false},
      {"another step's manifest in its place",
       [](TwoSteps& t) { ckpt_test::write_file(t.manifest1, ckpt_test::read_file(t.manifest2)); }, step_region::kManifest, false,
       false, false},
      {"a flipped manifest byte", [](TwoSteps& t) {
         std::string b = ckpt_test::read_file(t.manifest1);
         b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 1);
         ckpt_test::write_file(t.manifest1, b);
       }, step_region::kManifest, false, false, false},
      {"a missing manifest", [](TwoSteps& t) { fsys::remove(t.manifest1); }, step_region::kMissing, false, false, false},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      TwoSteps t;
      c.damage(t);
      const StepVerifyReport r = t.verify();
      CHECK_FALSE(r.ok());
      const auto problems = all_problems(r);
      std::string listed;
      for (const auto& p : problems) listed += p.region + ": " + p.message + "\n";
      INFO(listed);
      REQUIRE(problems.size() == 1);
      const Problem& p = problems[0];
      CHECK(p.region == c.region);
      CHECK(p.file == (c.file_is_shard ? t.shard1 : t.manifest1));
      CHECK((p.code == Code::corrupt || p.code == Code::incomplete));
      CHECK(p.message.find(c.file_is_shard ? t.shard1 : t.manifest1) != std::string::npos);
      CHECK((c.in_shard ? r.problems.empty() : !r.problems.empty()));
      CHECK(r.files_missing() == (std::string(c.region) == step_region::kMissing));
      // The reader stops at the same damage the verifier names (data damage surfaces on read).
      CHECK(t.store->open_step(1).ok() == c.reader_opens);
      // Store::verify_step is the same verification.
      auto via_store = t.store->verify_step(1);
      REQUIRE(via_store.ok());
      CHECK(all_problems(*via_store).size() == 1);
    }
  }
}

TEST_CASE("a data problem carries tensor, piece, chunk, byte range, expected and found", "[step_reader]") {
  TwoSteps t;
  std::string b = ckpt_test::read_file(t.shard1);
  b[128 + 10] = static_cast<char>(b[128 + 10] ^ 1);
  ckpt_test::write_file(t.shard1, b);
  const auto problems = all_problems(t.verify());
  REQUIRE(problems.size() == 1);
  const Problem& p = problems[0];
  CHECK(p.tensor == "w");
  CHECK(p.piece == 0);
  CHECK(p.chunk == 0);
  CHECK(p.offset == 128);
  CHECK(p.length == kElems * 4);
  CHECK(p.expected.size() == 16);
  CHECK(p.found.size() == 16);
  CHECK(p.expected != p.found);
}

TEST_CASE("step verification hashes each shard through the verifier it is given", "[step_reader]") {
  TwoSteps t;
  std::vector<std::string> asked;
  FileVerifier fake = [&](const std::string& path) -> Result<VerifyReport> {
    asked.push_back(path);
    VerifyReport v;
    v.path = path;
    Problem p;
    p.region = "data";
    p.tensor = "w";
    p.message = "made up by the test";
    v.problems.push_back(p);  // file left empty: the step fills it in
    return v;
  };
  const StepVerifyReport r = verify_step(t.fs, t.path, *t.store->find(1), t.store->uuid(), fake);
  CHECK(asked == std::vector<std::string>{t.shard1});
  REQUIRE(r.shards.size() == 1);
  REQUIRE(r.shards[0].problems.size() == 1);
  CHECK(r.shards[0].problems[0].file == t.shard1);
  CHECK(r.problems.empty());

  SECTION("a verifier that cannot read the file is one step problem naming it") {
    FileVerifier failing = [&](const std::string& path) -> Result<VerifyReport> {
      return make_error(Code::io, path + ": device lost");
    };
    const StepVerifyReport f = verify_step(t.fs, t.path, *t.store->find(1), t.store->uuid(), failing);
    REQUIRE(f.problems.size() == 1);
    CHECK(f.problems[0].code == Code::io);
    CHECK(f.problems[0].region == step_region::kFile);
    CHECK(f.problems[0].file == t.shard1);
    CHECK(f.shards.empty());
  }
}

TEST_CASE("a bare step directory is read and verified by its manifest alone", "[step_reader]") {
  TwoSteps t;
  const std::string dir = t.path + "/step-1-1";
  auto content = read_step_directory(t.fs, dir);
  REQUIRE(content.ok());
  CHECK(content->manifest.step == 1);
  CHECK(content->shard_paths == std::vector<std::string>{t.shard1});
  CHECK(content->shards_match());
  CHECK(verify_step_directory(t.fs, dir, cpu_file_verifier(t.fs)).ok());

  SECTION("a shard that is not the one its manifest names is a shard problem") {
    ckpt_test::write_file(t.shard1, ckpt_test::read_file(t.shard2));
    auto again = read_step_directory(t.fs, dir);
    REQUIRE(again.ok());
    REQUIRE(again->shard_problems.size() == 1);
    CHECK(again->shard_problems[0].code == Code::corrupt);
    CHECK(again->shard_problems[0].region == step_region::kPin);
    CHECK(again->shard_problems[0].file == t.shard1);
    const StepVerifyReport r = verify_step_directory(t.fs, dir, cpu_file_verifier(t.fs));
    REQUIRE(all_problems(r).size() == 1);
    CHECK(r.problems[0].region == step_region::kPin);
  }
  SECTION("without a manifest it cannot be read") {
    fsys::remove(t.manifest1);
    CHECK(read_step_directory(t.fs, dir).status().code() == Code::not_found);
    const StepVerifyReport r = verify_step_directory(t.fs, dir, cpu_file_verifier(t.fs));
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0].region == step_region::kMissing);
    CHECK(r.problems[0].code == Code::incomplete);
  }
}

TEST_CASE("a step opened by StepReader verifies through it, each shard once", "[step_reader]") {
  TwoSteps t;
  auto reader = t.store->open_step(1);
  REQUIRE(reader.ok());
  std::vector<std::string> asked;
  const FileVerifier counting = [&](const std::string& path) {
    asked.push_back(path);
    return verify_file(t.fs, path);
  };
  StepVerifyReport r = verify_step(*reader, counting);
  CHECK(r.ok());
  CHECK(asked == std::vector<std::string>{t.shard1});
  CHECK(r.step.step == 1);
  CHECK(r.dir == t.path + "/step-1-1");

  // Data damaged after the open: found by the verifier, once.
  std::string b = ckpt_test::read_file(t.shard1);
  b[128 + 10] = static_cast<char>(b[128 + 10] ^ 1);
  ckpt_test::write_file(t.shard1, b);
  r = verify_step(*reader, cpu_file_verifier(t.fs));
  const auto problems = all_problems(r);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].region == "data");
}
