// Tests for include/ckpt/report/plan.hpp: where each input of a plan comes from (the MTBF's source, the
// GPU count, each policy's save cost), what is refused as a usage error, the tiered mode's defaults, and
// the exit code of a simulation (spec/PLAN.md). ckpt-plan's own output is test_plan_tool's.
#include <catch2/catch.hpp>

#include <string>

#include <ckpt/report/plan.hpp>

using namespace ckpt;
using report::PlanRequest;

namespace {

PlanRequest sync_request(double mtbf_hours, double save_seconds) {
  PlanRequest q;
  q.mtbf_hours = mtbf_hours;
  q.mtbf_hours_text = std::to_string(static_cast<int>(mtbf_hours));
  q.save_seconds = save_seconds;
  return q;
}

// The MTBF as `--mtbf-seconds SECONDS` gives it.
PlanRequest mtbf_seconds_request(int seconds) {
  PlanRequest q;
  q.mtbf_seconds = seconds;
  q.mtbf_seconds_text = std::to_string(seconds);
  return q;
}

}  // namespace

TEST_CASE("a plan names where its MTBF and each policy's save cost came from", "[plan_report]") {
  PlanRequest q = sync_request(3, 60);
  auto r = report::plan_report(q);
  REQUIRE(r.ok());
  CHECK(r->mtbf_source == "--mtbf-hours 3");
  CHECK(r->failures.mtbf_seconds == 3 * 3600.0);
  CHECK(r->failures.restart_seconds == 300);
  CHECK(r->gpus_source.empty());
  REQUIRE(r->policies.size() == 2);
  CHECK(r->policies[0].name == "sync");
  REQUIRE(r->policies[0].cost);
  CHECK(r->policies[0].source == "--save-seconds");
  CHECK_FALSE(r->policies[1].cost);
  CHECK(r->policies[1].unavailable.find("no async save cost") != std::string::npos);
  CHECK_FALSE(r->tiers);
  CHECK(r->exit_code() == report::kOk);
  CHECK(report::plan_json(*r)["policies"]["sync"]["available"] == true);
  CHECK(report::plan_text(*r).rfind("MTBF 10800.0 s (3.00 h): --mtbf-hours 3\n", 0) == 0);
  CHECK(report::plan_svg(*r).rfind("<svg", 0) == 0);
}

TEST_CASE("an async cost alone gives the sync policy its equivalent", "[plan_report]") {
  PlanRequest q = mtbf_seconds_request(10800);
  q.async_stall_seconds = 1;
  q.async_write_seconds = 30;
  auto r = report::plan_report(q);
  REQUIRE(r.ok());
  REQUIRE(r->policies[0].cost);
  CHECK(r->policies[0].cost->stall_seconds == 31);
  CHECK(r->policies[0].source.rfind("estimated:", 0) == 0);
  CHECK(r->policies[1].source == "--async-stall-seconds, --async-write-seconds");
}

TEST_CASE("a request that is not a plan is refused as invalid_argument, naming the option", "[plan_report]") {
  PlanRequest none;
  none.save_seconds = 60;
  auto r = report::plan_report(none);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::invalid_argument);
  CHECK(r.status().message().find("missing MTBF") != std::string::npos);

  PlanRequest two = sync_request(3, 60);
  two.mtbf_seconds = 5;
  CHECK(report::plan_report(two).status().message().find("only one of") != std::string::npos);

  PlanRequest rate = sync_request(3, 60);
  rate.mtbf_hours.reset();
  rate.gpu_failures_per_hour = 1e-4;
  CHECK(report::plan_report(rate).status().message() == "--gpu-failures-per-hour needs --gpus");

  PlanRequest gpus = sync_request(3, 60);
  gpus.gpus = 2.5;
  gpus.gpus_text = "2.5";
  CHECK(report::plan_report(gpus).status().message() == "--gpus must be a whole number of at least 1, got 2.5");

  PlanRequest preset = sync_request(3, 60);
  preset.mtbf_hours.reset();
  preset.preset = "nosuch";
  CHECK(report::plan_report(preset).status().message() == "unknown preset 'nosuch' (known: llama3-405b)");

  PlanRequest cost;
  cost.mtbf_hours = 3;
  auto missing = report::plan_report(cost);
  CHECK(missing.status().code() == Code::invalid_argument);
  CHECK(missing.status().message().rfind("missing save cost", 0) == 0);

  PlanRequest interval = sync_request(3, 60);
  interval.interval_seconds = 0;
  CHECK(report::plan_report(interval).status().message().rfind("--interval: ", 0) == 0);
}

TEST_CASE("a store that cannot be read is the store's error, not a usage error", "[plan_report]") {
  PlanRequest q;
  q.mtbf_hours = 3;
  q.mtbf_hours_text = "3";
  q.store_dir = "/nonexistent/ckpt-plan-report-store";
  auto r = report::plan_report(q);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() != Code::invalid_argument);
}

TEST_CASE("the tiered mode fills its defaults and the preset's GPU count", "[plan_report]") {
  PlanRequest q;
  q.preset = "llama3-405b";
  q.capture_stall_seconds = 1;
  q.node_loss_share = 0.3;
  q.restart_seconds = 120;
  auto r = report::plan_report(q);
  REQUIRE(r.ok());
  REQUIRE(r->tiers);
  CHECK(r->policies.empty());
  CHECK(r->gpus == 16384);
  CHECK(r->gpus_source == "the preset's GPU count");
  CHECK(r->tiers->failures.crash_share == Approx(0.7));
  CHECK(r->tiers->failures.power_loss_share == 0);
  CHECK(r->tiers->failures.memory_restart_seconds == 120);
  CHECK(r->tiers->failures.persistent_restart_seconds == 120);
  CHECK(r->tiers->failures.replicated);
  CHECK_FALSE(r->tiers->interval_given);
  CHECK(report::plan_json(*r)["mode"] == "tiered");
  CHECK(r->exit_code() == report::kOk);
}

TEST_CASE("a simulation that disagrees with the model exits 1", "[plan_report]") {
  // A 20 s stall and power losses only on a 1000 s MTBF: the first-order closed form overstates the waste.
  PlanRequest q = mtbf_seconds_request(1000);
  q.capture_stall_seconds = 20;
  q.persist_seconds = 100;
  q.power_loss_share = 1;
  q.restart_seconds = 100;
  q.memory_interval_seconds = 400;
  q.persist_every = 1;
  q.simulate = 200;
  auto r = report::plan_report(q);
  REQUIRE(r.ok());
  REQUIRE(r->tiers->simulation);
  CHECK_FALSE(r->tiers->simulation->agrees);
  CHECK(r->exit_code() == report::kIntegrity);
}
