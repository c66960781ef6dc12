// The tools on a store on objects (spec/OBJECT.md 7): every tool that takes a store path takes
// s3://bucket/prefix. cmake/tests-object.cmake runs this program under moto through
// tools/s3-test-server.py (AWS_ENDPOINT_URL, credentials and CKPT_S3_TEST_URL exported to it and to the
// tools it starts); the tools are the built binaries, run as a user would.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>

#include "test_util.hpp"
#include "s3_test_util.hpp"
#include "tool_run.hpp"

using namespace ckpt;
using namespace ckpt::object;
using ckpt_test::run_tool;

namespace {

const std::string kBin = CKPT_BINARY_DIR;
const std::string kTrain = kBin + "/ckpt-demo-train", kInspect = kBin + "/ckpt-inspect", kVerify = kBin + "/ckpt-verify",
                  kRepair = kBin + "/ckpt-repair", kConvert = kBin + "/ckpt-convert", kDiff = kBin + "/ckpt-diff",
                  kMerge = kBin + "/ckpt-merge", kReshard = kBin + "/ckpt-reshard";

[[nodiscard]] std::string fresh_url() { return ckpt_test::fresh_s3_url("tools"); }

[[nodiscard]] std::unique_ptr<ObjectClient> client_for(const std::string& url) {
  return ckpt_test::s3_client_for(url, ckpt::object::S3Options{});
}

// A demo run of 40 steps saved every 20 into url: steps 20 and 40.
[[nodiscard]] std::string train(const std::string& url, std::uint64_t steps = 40) {
  auto run = run_tool(kTrain, {"--store", url, "--steps", std::to_string(steps), "--save-every", "20", "-q"});
  INFO(run.out << run.err);
  REQUIRE(run.code == 0);
  REQUIRE(run.says("final step " + std::to_string(steps)));
  return run.out;
}

}  // namespace

TEST_CASE("demo-train saves into s3 and resumes; inspect and verify describe it as a store", "[s3_tools]") {
  const std::string url = fresh_url();
  const std::string whole = train(url, 40);
  // Interrupted at 20 and resumed: the same final weights as the uninterrupted run.
  const std::string split = fresh_url();
  (void)train(split, 20);
  auto resumed = run_tool(kTrain, {"--store", split, "--steps", "40", "--save-every", "20"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.code == 0);
  CHECK(resumed.says("resumed from step 20"));
  CHECK(resumed.out.substr(resumed.out.find("final step")) == whole.substr(whole.find("final step")));

  auto inspect = run_tool(kInspect, {url, "--json"});
  REQUIRE(inspect.code == 0);
  auto doc = inspect.out_json();
  CHECK(doc["store"].get<std::string>().rfind(url, 0) == 0);
  CHECK(doc["object_store"] == true);
  CHECK(doc["journal"].is_null());
  CHECK(doc["uuid"].get<std::string>().size() == 36);
  REQUIRE(doc["steps"].size() == 2);
  CHECK(doc["steps"][1]["step"] == 40);
  CHECK(doc["steps"][1]["status"] == "ok");
  CHECK(doc["steps"][1]["root_digest"].is_string());
  CHECK(doc["problems"].empty());
  CHECK(doc["transactions"].size() == 2);
  auto text = run_tool(kInspect, {url});
  CHECK(text.code == 0);
  CHECK(text.says("a store on objects"));
  auto latest = run_tool(kInspect, {url, "--latest", "--json"});
  REQUIRE(latest.code == 0);
  CHECK(latest.out_json()["step"]["step"] == 40);
  auto pin = run_tool(kInspect, {url, "--pin"});
  REQUIRE(pin.code == 0);
  CHECK(pin.out == doc["steps"][1]["root_digest"].get<std::string>() + "  " + url + "\n");

  auto verify = run_tool(kVerify, {url, "--json"});
  INFO(verify.out << verify.err);
  CHECK(verify.code == 0);
  // Async saves into the store (spec/OBJECT.md 4.9): the same steps, the same final weights.
  const std::string async = fresh_url();
  auto background = run_tool(kTrain, {"--store", async, "--steps", "40", "--save-every", "20", "--async", "--flush-deadline", "30", "-q"});
  INFO(background.out << background.err);
  REQUIRE(background.code == 0);
  CHECK(background.out.substr(background.out.find("final step")) == whole.substr(whole.find("final step")));
  auto listed = run_tool(kInspect, {async, "--json"});
  REQUIRE(listed.code == 0);
  REQUIRE(listed.out_json()["steps"].size() == 2);
  CHECK(run_tool(kVerify, {async}).code == 0);
}

TEST_CASE("a damaged shard on s3 makes verify and inspect exit 1", "[s3_tools]") {
  const std::string url = fresh_url();
  (void)train(url, 20);
  auto client = client_for(url);
  ckpt_test::flip_object_byte(*client, ckpt_test::some_shard_key(*client), 4096 + 3, 0x01);  // first data bytes (alignment 4096)
  auto verify = run_tool(kVerify, {url});
  INFO(verify.out << verify.err);
  CHECK(verify.code == 1);
  auto repair = run_tool(kRepair, {url, "--json"});
  INFO(repair.out << repair.err);
  CHECK(repair.code == 1);
  CHECK(repair.out_json()["damaged"].size() == 1);
}

TEST_CASE("repair on s3: a dry run lists an aborted transaction's leftovers, a real run removes them", "[s3_tools]") {
  const std::string url = fresh_url();
  (void)train(url, 20);
  auto client = client_for(url);
  std::string leftover;
  {
    auto store = Store::open(object_log(*client), Access::read_write);
    REQUIRE(store.ok());
    const std::vector<unsigned char> w(1000, 7);
    std::string dead_dir;
    {
      auto tx = (*store)->begin(30);
      REQUIRE(tx.ok());
      dead_dir = (*tx)->directory();
      REQUIRE((*tx)->abort().ok());
    }
    // What a writer killed during its abandon leaves: an object and an upload under the dead prefix; then
    // step 30 commits another transaction, which proves this one dead whether or not its abort object exists.
    leftover = dead_dir + "/shard-0-of-1.ckpt";
    REQUIRE(client->put(leftover, "junk", 4, Condition::none).ok());
    REQUIRE(client->create_upload(dead_dir + "/MANIFEST").ok());
    auto tx = (*store)->begin(30);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->add_tensor("w", DType::U8, Shape{w.size()}, w.data(), w.size()).ok());
    REQUIRE((*tx)->commit().ok());
  }
  // A transaction with neither commit nor abort: kept, never deleted.
  REQUIRE(client->put("step-50-77/shard-0-of-1.ckpt", "zz", 2, Condition::none).ok());

  auto dry = run_tool(kRepair, {url, "--dry-run", "--json"});
  INFO(dry.out << dry.err);
  CHECK(dry.code == 1);
  auto d = dry.out_json();
  CHECK(d["dry_run"] == true);
  CHECK(d["removed"].size() == 1);
  CHECK(d["aborted_uploads"].size() == 1);
  CHECK(d["kept"].size() == 1);
  CHECK(client->head(leftover).ok());  // a dry run changes nothing

  auto real = run_tool(kRepair, {url, "--json"});
  INFO(real.out << real.err);
  CHECK(real.code == 0);
  auto r = real.out_json();
  CHECK(r["dry_run"] == false);
  CHECK(r["removed"].size() == 1);
  CHECK(r["consistent"] == true);
  CHECK(client->head(leftover).status().code() == Code::not_found);
  CHECK(client->head("step-50-77/shard-0-of-1.ckpt").ok());
  auto uploads = client->list_uploads("step-30-");
  REQUIRE(uploads.ok());
  CHECK(uploads->empty());

  auto again = run_tool(kRepair, {url, "--dry-run"});
  CHECK(again.code == 0);
  CHECK(run_tool(kRepair, {url, "--purge"}).code == 2);
}

TEST_CASE("convert, diff, merge and reshard read steps from s3; reshard writes into s3", "[s3_tools]") {
  const std::string url = fresh_url();
  (void)train(url, 40);
  ckpt_test::TempDir dir;
  const std::string out = dir.path() + "/w.safetensors";
  auto convert = run_tool(kConvert, {url, out, "--step", "20", "--json"});
  INFO(convert.out << convert.err);
  REQUIRE(convert.code == 0);
  CHECK(convert.out_json()["tensors"] == 12);  // 4 weights, 8 Adam moments
  CHECK(run_tool(kConvert, {out, url + "/x.ckpt"}).code == 2);  // outputs are files

  auto same = run_tool(kDiff, {url, url, "--json"});
  INFO(same.out << same.err);
  CHECK(same.code == 0);
  auto differ = run_tool(kDiff, {url, url, "--step-a", "20", "--json"});
  CHECK(differ.code == 1);
  CHECK(differ.out_json()["identical"] == false);

  const std::string merged = dir.path() + "/m.ckpt";
  auto merge = run_tool(kMerge, {url, "-o", merged, "--json"});
  INFO(merge.out << merge.err);
  REQUIRE(merge.code == 0);
  CHECK(run_tool(kMerge, {url, "-o", url + "/m.ckpt"}).code == 2);

  // The step rewritten as 3 shards into a directory, then into another store on objects.
  const std::string local = dir.path() + "/store";
  auto to_dir = run_tool(kReshard, {url, "-o", local, "--world-size", "3", "--json"});
  INFO(to_dir.out << to_dir.err);
  REQUIRE(to_dir.code == 0);
  const std::string dest = fresh_url();
  auto to_s3 = run_tool(kReshard, {local, "-o", dest, "--world-size", "2", "--json"});
  INFO(to_s3.out << to_s3.err);
  REQUIRE(to_s3.code == 0);
  CHECK(to_s3.out_json()["step"] == 40);
  CHECK(run_tool(kVerify, {dest}).code == 0);
  // The same content split the same way: identical digests, in a directory or on objects.
  const std::string local2 = dir.path() + "/store2";
  REQUIRE(run_tool(kReshard, {url, "-o", local2, "--world-size", "2"}).code == 0);
  auto across = run_tool(kDiff, {local2, dest});
  INFO(across.out << across.err);
  CHECK(across.code == 0);
  auto inspect = run_tool(kInspect, {dest, "--latest", "--json"});
  REQUIRE(inspect.code == 0);
  CHECK(inspect.out_json()["world_size"] == 2);
}
