// report/verify.hpp on object storage: the verdict on a store on objects, judged by the same exit_code and JSON
// as a directory's (spec/REPORTS.md 3, spec/OBJECT.md 4).
#include <catch2/catch.hpp>

#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/testing/memory_objects.hpp>

#include "test_util.hpp"

using namespace ckpt;
using ckpt::testing::MemoryObjects;

namespace {

// A store of steps 1 and 2, one tensor each, in memory.
MemoryObjects two_steps() {
  MemoryObjects objects;
  StoreOptions o;
  o.create_if_missing = true;
  o.chunk_size_log2 = 14;
  auto store = Store::open(object_log(objects), Access::read_write, o);
  REQUIRE(store.ok());
  for (std::uint64_t step : {1, 2}) {
    const auto bytes = ckpt_test::random_bytes(100000, step);
    auto tx = (*store)->begin(step);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()).ok());
    REQUIRE((*tx)->commit().ok());
  }
  return objects;
}

report::VerifyPathsReport verify(MemoryObjects& objects, report::StepSelection selection = {}) {
  auto store = Store::open(object_log(objects), Access::read_only);
  REQUIRE(store.ok());
  report::VerifyPathsOptions options;
  options.selection = selection;
  report::VerifyPathsReport r;
  REQUIRE(report::verify_open_store(**store, options, r).ok());
  return r;
}

}  // namespace

TEST_CASE("an intact object store verifies every step with exit 0", "[verify_objects]") {
  MemoryObjects objects = two_steps();
  auto r = verify(objects);
  CHECK(report::exit_code(r) == report::kOk);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.files.size() == 2);
  const auto doc = report::verify_json(r);
  CHECK(doc["exit_code"] == 0);
  report::StepSelection latest;
  latest.latest = true;
  auto only = verify(objects, latest);
  REQUIRE(only.steps.size() == 1);
  CHECK(only.steps[0].info->step == 2);
}

TEST_CASE("object store damage is named and exits 1", "[verify_objects]") {
  struct Case {
    const char* what;
    std::function<void(MemoryObjects&)> damage;
    const char* expect;  // in the JSON document
  };
  const std::vector<Case> cases = {
      {"a flipped data byte",
       [](MemoryObjects& o) {
         for (const auto& [key, bytes] : o.objects())
           if (key.find("step-2-") == 0 && key.find(".ckpt") != std::string::npos) {
             std::string b = bytes;
             b[4096 + 77] ^= 4;
             o.set_object(key, b);
           }
       },
       "chunk"},
      {"a flipped MANIFEST byte",
       [](MemoryObjects& o) {
         for (const auto& [key, bytes] : o.objects())
           if (key.find("step-2-") == 0 && key.find("MANIFEST") != std::string::npos) {
             std::string b = bytes;
             b[70] ^= 1;
             o.set_object(key, b);
           }
       },
       "MANIFEST"},
      {"a missing shard",
       [](MemoryObjects& o) {
         for (const auto& [key, bytes] : o.objects())
           if (key.find("step-1-") == 0 && key.find(".ckpt") != std::string::npos) o.erase_object(key);
       },
       "shard"},
      {"a damaged retire object",
       [](MemoryObjects& o) { o.set_object(object::retire_key(1, 5), std::string(8192, 'x')); },
       "log/"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    MemoryObjects objects = two_steps();
    c.damage(objects);
    auto r = verify(objects);
    CHECK(report::exit_code(r) == report::kIntegrity);
    CHECK(report::verify_json(r).dump().find(c.expect) != std::string::npos);
  }
}

TEST_CASE("verify_path takes an s3:// URL through the front end's opener", "[verify_objects]") {
  MemoryObjects objects = two_steps();
  PosixFs posix;
  report::VerifyPathsOptions options;
  auto without = report::verify_paths(posix, {"s3://bucket/run"}, options);
  REQUIRE(without.errors.size() == 1);
  CHECK(without.errors[0].status.code() == Code::unsupported);
  CHECK(report::exit_code(without) == report::kUsage);
  std::string opened;
  options.open_objects = [&](const std::string& url) -> Result<std::unique_ptr<object::ObjectClient>> {
    opened = url;
    return std::unique_ptr<object::ObjectClient>(std::make_unique<MemoryObjects>(objects.view()));
  };
  auto with = report::verify_paths(posix, {"s3://bucket/run"}, options);
  CHECK(opened == "s3://bucket/run");
  CHECK(with.errors.empty());
  REQUIRE(with.stores.size() == 1);
  CHECK(with.steps.size() == 2);
  CHECK(report::exit_code(with) == report::kOk);
}
