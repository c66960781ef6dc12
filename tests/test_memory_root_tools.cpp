// Tool-level tests of ckpt-inspect, ckpt-verify and ckpt-repair on a memory tier's root and on one of
// its rank directories, run as built: exit codes, one-line errors, the --json fields, and the other
// paths' behaviour left as it was. The root is made by the tiered checkpointer (memory_root_fixture.hpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/store/store.hpp>

#include "memory_root_fixture.hpp"
#include "test_util.hpp"
#include "tool_run.hpp"

using namespace ckpt;
using nlohmann::json;
namespace fsys = std::filesystem;
namespace fixture = memory_root_fixture;

namespace {

const std::string kBin = CKPT_BINARY_DIR;
const std::string kInspect = kBin + "/ckpt-inspect";
const std::string kVerify = kBin + "/ckpt-verify";
const std::string kRepair = kBin + "/ckpt-repair";

using Run = ckpt_test::ToolRun;

Run run(const std::string& tool, const std::vector<std::string>& args) {
  REQUIRE(::access(tool.c_str(), X_OK) == 0);
  return ckpt_test::run_tool(tool, args);
}

const json* step_of(const json& doc, std::uint64_t step) {
  for (const auto& s : doc["steps"])
    if (s["step"] == step && s["digest"].is_string()) return &s;
  return nullptr;
}

void check_one_line_error(const Run& r, const std::string& tool) {
  INFO("stderr: " << r.err);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind(tool + ": ", 0) == 0);
}

}  // namespace

TEST_CASE("the tools' --help names memory roots and their options", "[tools][memory_root]") {
  for (const auto& tool : {kInspect, kVerify}) {
    const Run help = run(tool, {"--help"});
    CHECK(help.code == 0);
    CHECK(help.says("memory root"));
    CHECK(help.says("--persistent"));
  }
  const Run help = run(kRepair, {"--help"});
  CHECK(help.code == 0);
  CHECK(help.says("memory root"));
}

TEST_CASE("ckpt-inspect shows each step of a memory root: where it is held, its copies, what was recorded", "[tools][memory_root]") {
  const auto dir = fixture::pristine();
  const std::string mem = (dir / "mem").string(), persistent = (dir / "persistent").string();
  const Run human = run(kInspect, {mem, "--persistent", persistent});
  INFO(human.out << human.err);
  REQUIRE(human.code == 0);
  CHECK(human.err.empty());
  for (const char* want : {"memory root", "4 rank directories", "step 6", "step 4", "HELD IN", "rank-2/held-1", "rank-1/own",
                           "REPLICATED 4 (1 copy of every shard)", "PERSISTED 4", "persistent: same"})
    CHECK(human.says(want));

  const Run j = run(kInspect, {"--json", mem, "--persistent", persistent});
  REQUIRE(j.code == 0);
  const json doc = j.out_json();
  CHECK(doc["kind"] == "memory root");
  CHECK(doc["ok"] == true);
  CHECK(doc["rank_dirs"].size() == 4);
  CHECK(doc["copies"].size() == 16);
  const json* s6 = step_of(doc, 6);
  REQUIRE(s6 != nullptr);
  CHECK((*s6)["world"] == 4);
  CHECK((*s6)["replicated"] == true);
  CHECK((*s6)["replicated_copies"] == 1);
  CHECK((*s6)["persisted"] == false);
  CHECK((*s6)["fewest_copies"] == 2);
  CHECK((*s6)["persistent"]["state"] == "absent");
  REQUIRE((*s6)["shards"].size() == 4);
  CHECK((*s6)["shards"][1]["copies"] == 2);
  CHECK((*s6)["shards"][1]["held"].size() == 2);
  CHECK((*s6)["shards"][1]["held"][0]["matches"] == true);
  const json* s4 = step_of(doc, 4);
  REQUIRE(s4 != nullptr);
  CHECK((*s4)["persisted"] == true);
  CHECK((*s4)["persistent"]["state"] == "same");

  const Run rank = run(kInspect, {"--json", (dir / "mem" / "rank-3").string()});
  REQUIRE(rank.code == 0);
  const json r = rank.out_json();
  CHECK(r["kind"] == "rank directory");
  CHECK(r["memory_root"] == mem);
  CHECK(r["copies"].size() == 4);
  CHECK((*step_of(r, 6))["shards_here"] == 2);
}

TEST_CASE("ckpt-inspect refuses options that do not apply to a memory root", "[tools][memory_root]") {
  const auto dir = fixture::pristine();
  const std::string mem = (dir / "mem").string();
  for (const auto& args : std::vector<std::vector<std::string>>{{mem, "--step", "4"}, {mem, "--latest"}, {mem, "--pin"}, {mem, "--chunks"},
                                                                {mem, "--persistent", (dir / "none").string()},
                                                                {(dir / "persistent").string(), "--persistent", (dir / "persistent").string()}}) {
    const Run r = run(kInspect, args);
    CHECK(r.code == 2);
    check_one_line_error(r, "ckpt-inspect");
  }
  // A store of the root is still a store.
  const Run store = run(kInspect, {"--json", (dir / "mem" / "rank-0" / "own").string()});
  REQUIRE(store.code == 0);
  CHECK(store.out_json()["steps"].size() == 2);
}

TEST_CASE("ckpt-verify checks every copy of a memory root: exit 0 intact, 1 damage, 2 usage", "[tools][memory_root]") {
  const auto dir = fixture::fresh_copy("tools-verify");
  const std::string mem = (dir / "mem").string(), persistent = (dir / "persistent").string();
  const Run ok = run(kVerify, {"--json", mem, "--persistent", persistent});
  INFO(ok.out << ok.err);
  REQUIRE(ok.code == 0);
  const json doc = ok.out_json();
  CHECK(doc["ok"] == true);
  REQUIRE(doc["memory_roots"].size() == 1);
  const json& root = doc["memory_roots"][0];
  CHECK(root["ok"] == true);
  CHECK(root["copies_checked"] == 16);
  CHECK(root["problems"].empty());
  CHECK((*step_of(root, 6))["shards"][2]["verified"] == 2);
  CHECK(doc["files"].size() == 16 + 4);  // every memory copy's shard file, and the persistent step 4's four shards
  const Run human = run(kVerify, {mem});
  CHECK(human.code == 0);
  CHECK(human.says("verified copies per shard held here 0:2 1:2 2:2 3:2"));

  fixture::flip_shard_data(dir / "mem" / "rank-2" / "held-1", 6);
  const Run bad = run(kVerify, {"--json", mem});
  REQUIRE(bad.code == 1);
  const json b = bad.out_json();
  CHECK(b["ok"] == false);
  const json& problems = b["memory_roots"][0]["problems"];
  REQUIRE_FALSE(problems.empty());
  CHECK(problems[0]["rank_dir"] == "rank-2");
  CHECK(problems[0]["step"] == 6);
  CHECK(problems[0]["shard"] == 1);
  CHECK(problems[0]["region"] == "data");
  CHECK((*step_of(b["memory_roots"][0], 6))["shards"][1]["verified"] == 1);
  // JUnit: the damaged shard file is one failing case, not also a second one for the memory root.
  const std::string junit = (dir / "verify.xml").string();
  CHECK(run(kVerify, {"--junit", junit, "-q", mem}).code == 1);
  const std::string xml = ckpt_test::read_file(junit);
  std::size_t failures = 0;
  for (auto at = xml.find("<failure"); at != std::string::npos; at = xml.find("<failure", at + 1)) ++failures;
  CHECK(failures == 1);
  CHECK(xml.find("<error") == std::string::npos);
  const Run text = run(kVerify, {mem});
  CHECK(text.code == 1);
  CHECK(text.says("rank-2/held-1 step 6 shard 1"));
  CHECK(text.says("DAMAGED"));

  CHECK(run(kVerify, {mem, "--step", "6"}).code == 2);
  CHECK(run(kVerify, {mem, "--persistent", (dir / "none").string()}).code == 2);
  const Run no_root = run(kVerify, {persistent, "--persistent", persistent});
  CHECK(no_root.code == 2);
  CHECK(no_root.err.find("--persistent") != std::string::npos);
}

TEST_CASE("ckpt-inspect and ckpt-verify show the SDC canary's finding: the rank, tensor and chunk; verify exits 1",
          "[tools][memory_root][sdc]") {
  const fsys::path dir = fixture::program_dir() / "sdc";
  fsys::remove_all(dir);
  fsys::create_directories(dir);
  for (const auto& e : fixture::train(dir, 6, 6)) CHECK(e.code() == ckpt::Code::corrupt);
  const std::string mem = (dir / "mem").string();
  const Run inspect = run(kInspect, {"--json", mem});
  INFO(inspect.out << inspect.err);
  REQUIRE(inspect.code == 1);  // an integrity problem: the job's state was damaged
  const json doc = inspect.out_json();
  const json* step6 = step_of(doc, 6);
  REQUIRE(step6 != nullptr);
  CHECK((*step6)["sdc"] == true);
  CHECK((*step6)["captured"] == false);
  std::size_t records = 0;
  for (const auto& e : (*step6)["events"]) {
    if (e["event"] != "SDC") continue;
    ++records;
    CHECK(e["detail"]["tensor"] == "norm");
    CHECK(e["detail"]["chunk"] == 1);
    CHECK(e["detail"]["odd_rank"] == 2);
    CHECK(e["detail"]["holders"].size() == 4);
  }
  CHECK(records == 4);  // every rank recorded it
  const Run human = run(kInspect, {mem});
  CHECK(human.says("SDC step 6"));
  CHECK(human.says("tensor 'norm' chunk 1: rank 2 differs from every other holder"));
  const Run verify = run(kVerify, {"--json", mem});
  REQUIRE(verify.code == 1);
  const json verified = verify.out_json();
  const json& problems = verified["memory_roots"][0]["problems"];
  REQUIRE(problems.size() == 1);  // one finding, recorded by four ranks
  CHECK_THAT(problems[0]["message"].get<std::string>(), Catch::Contains("silent data corruption") && Catch::Contains("rank 2"));
}

TEST_CASE("parity in a memory root: ckpt-inspect lists it, ckpt-verify checks it, exit 1 on a flipped byte", "[tools][memory_root][parity]") {
  const fsys::path dir = fixture::program_dir() / "parity";
  fsys::remove_all(dir);
  fsys::create_directories(dir);
  for (const auto& e : fixture::train(dir, 7, 0, 4)) REQUIRE(e.ok());
  const std::string mem = (dir / "mem").string();
  const Run inspect = run(kInspect, {mem});
  INFO(inspect.out << inspect.err);
  REQUIRE(inspect.code == 0);
  CHECK(inspect.says("parity held in: rank-0/parity"));
  const Run ok = run(kVerify, {"--json", mem});
  REQUIRE(ok.code == 0);
  CHECK(ok.out_json()["memory_roots"][0]["copies_checked"] == 16);  // 8 own shards and 8 parity steps, every byte
  std::size_t parity = 0;
  const json listed = run(kInspect, {"--json", mem}).out_json();
  for (const auto& c : listed["copies"]) parity += c["parity"] == true ? 1 : 0;
  CHECK(parity == 8);
  // A byte of rank 1's parity of stripe 1, step 6 (spec/TIERS.md 12.2), flipped.
  ckpt::PosixFs fs;
  const std::string store = ckpt::memory_layout::parity_store(mem, 1);
  auto opened = ckpt::Store::open(fs, store, ckpt::Access::read_only);
  REQUIRE(opened.ok());
  auto info = (*opened)->find(6);
  REQUIRE(info.ok());
  auto reader = ckpt::StepReader::open(fs, store, *info, (*opened)->uuid());
  REQUIRE(reader.ok());
  const ckpt::Index& index = reader->shard(0).index();
  const ckpt::TensorRecord* t = index.find_tensor(ckpt::tiers::parity_tensor(1));
  REQUIRE(t != nullptr);
  const ckpt::PieceRecord& p = index.pieces[static_cast<std::size_t>(t->piece_first)];
  fixture::flip_byte(reader->shard(0).path(), p.data_offset + p.data_length / 2);
  const Run bad = run(kVerify, {"--json", mem});
  REQUIRE(bad.code == 1);
  const json found = bad.out_json();
  const json& problems = found["memory_roots"][0]["problems"];
  REQUIRE(problems.size() == 1);
  CHECK(problems[0]["rank_dir"] == "rank-1");
  CHECK(problems[0]["step"] == 6);
  CHECK(problems[0]["region"] == "data");
  CHECK_THAT(problems[0]["store"].get<std::string>(), Catch::Contains("rank-1/parity"));
}

TEST_CASE("ckpt-repair recovers each store of a memory root; --dry-run changes nothing", "[tools][memory_root]") {
  const auto dir = fixture::fresh_copy("tools-repair");
  const std::string mem = (dir / "mem").string();
  const Run clean = run(kRepair, {"--json", "--dry-run", mem});
  INFO(clean.out << clean.err);
  REQUIRE(clean.code == 0);
  CHECK(clean.out_json()["consistent"] == true);

  // A rank killed mid-save: its own store has an open transaction (BEGIN, a directory, no COMMIT).
  PosixFs fs;
  const std::string own = (dir / "mem" / "rank-0" / "own").string();
  auto check = check_store(fs, own);
  REQUIRE(check.ok());
  auto writer = JournalWriter::open(fs, own + "/JOURNAL", check->journal.end);
  REQUIRE(writer.ok());
  BeginRecord b;
  b.txn = check->next_txn;
  b.step = 8;
  b.files = {TxnFile{0, shard_file_name(0, 1)}};
  REQUIRE(writer->append_group({begin_record(b).value()}).ok());
  const std::string partial = own + "/" + step_dir_name(8, b.txn);
  REQUIRE(fs.mkdir(partial).ok());
  ckpt_test::write_file(partial + "/" + shard_file_name(0, 1), "partial");
  const auto before = ckpt_test::directory_tree(mem);

  const Run dry = run(kRepair, {"--json", "--dry-run", mem});
  REQUIRE(dry.code == 1);
  const json d = dry.out_json();
  CHECK(d["dry_run"] == true);
  CHECK(d["consistent"] == false);
  bool pending = false;
  for (const auto& s : d["stores"]) pending = pending || (s["store"] == own && s["pending"] == true);
  CHECK(pending);
  CHECK(ckpt_test::directory_tree(mem) == before);

  const Run human = run(kRepair, {mem});
  INFO(human.out << human.err);
  REQUIRE(human.code == 0);
  CHECK(human.says("rank-0/own: recovered"));
  CHECK(human.says("result: consistent"));
  CHECK_FALSE(fsys::exists(partial));

  const Run again = run(kRepair, {"--json", mem});
  REQUIRE(again.code == 0);
  const json a = again.out_json();
  CHECK(a["consistent"] == true);
  CHECK(a["after"]["ok"] == true);
  CHECK(a["after"]["copies_checked"] == 16);
  CHECK(a["tier_logs"].size() == 4);

  const Run purge = run(kRepair, {"--purge", mem});
  CHECK(purge.code == 2);
  check_one_line_error(purge, "ckpt-repair");

  // Damage in the middle of a tier log is reported (exit 1) and left as it is.
  const auto log = dir / "mem" / "rank-1" / "TIERS";
  fixture::flip_byte(log, 4096 + 30);
  const std::string bytes = ckpt_test::read_file(log.string());
  const Run damaged = run(kRepair, {"--json", mem});
  CHECK(damaged.code == 1);
  CHECK(damaged.out_json()["consistent"] == false);
  CHECK(ckpt_test::read_file(log.string()) == bytes);
}
