// Tests for the ckpt-plan program, run as built: the JSON it prints (Young, Daly, waste, GPU-hours,
// the simulation), exit 2 with a one-line error on bad usage, the SVG plot, and save costs read from a
// store's recorded saves (spec/PLAN.md); the tiered mode (spec/PLAN.md 10).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/store/store.hpp>

#include "test_util.hpp"
#include "tool_run.hpp"

using namespace ckpt;
using nlohmann::json;

namespace {

const std::string kPlan = std::string(CKPT_BINARY_DIR) + "/ckpt-plan";

using Run = ckpt_test::ToolRun;

// Runs ckpt-plan with arguments (each quoted), capturing stdout and stderr.
Run plan(const std::vector<std::string>& args) {
  REQUIRE(::access(kPlan.c_str(), X_OK) == 0);
  return ckpt_test::run_tool(kPlan, args);
}

// Runs ckpt-plan, which must exit 0, and returns its --json document.
json plan_json(const std::vector<std::string>& args) {
  const Run r = plan(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out_json();
}

// A store with `saves` committed steps; with `async_stall` set, each save is recorded as an async one
// that blocked its caller that long and started `started_ago` before its commit.
std::string make_store(const ckpt_test::TempDir& dir, const std::string& name, int saves, std::chrono::nanoseconds async_stall = {},
                       std::chrono::milliseconds started_ago = {}) {
  PosixFs fs;
  const std::string path = dir.file(name);
  StoreOptions o;
  o.create_if_missing = true;
  auto store = Store::open(fs, path, Access::read_write, o);
  REQUIRE(store.ok());
  const std::vector<float> w(256, 1.5f);
  for (int step = 1; step <= saves; ++step) {
    auto tx = (*store)->begin(static_cast<std::uint64_t>(step) * 10);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->add_tensor("w", DType::F32, {256}, w.data(), w.size() * 4).ok());
    if (async_stall.count() > 0) (*tx)->set_save_timing(std::chrono::steady_clock::now() - started_ago, async_stall, true);
    REQUIRE((*tx)->commit().ok());
  }
  return path;
}

// A bad usage and what its one-line error must say.
struct UsageRow {
  std::vector<std::string> args;
  const char* says;
};

// Each row exits 2 with nothing on stdout and one "ckpt-plan: " line naming the problem.
void check_usage_errors(const std::vector<UsageRow>& rows) {
  for (const auto& row : rows) {
    std::string joined;
    for (const auto& a : row.args) joined += a + " ";
    INFO(joined);
    const Run r = plan(row.args);
    INFO("stderr: " << r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.first_err_line().rfind("ckpt-plan: ", 0) == 0);
    CHECK(r.first_err_line().find(row.says) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("ckpt-plan --json gives Young, Daly and the waste of both policies", "[plan_tool]") {
  const json j = plan_json({"--mtbf-hours", "3", "--save-seconds", "60", "--async-stall-seconds", "1", "--async-write-seconds", "30",
                            "--restart-seconds", "300", "--gpus", "512", "--json"});
  CHECK(j["mtbf_seconds"].get<double>() == Approx(10800));
  CHECK(j["restart_seconds"].get<double>() == 300);
  CHECK(j["gpus"].get<double>() == 512);
  CHECK(j["gpus_known"].get<bool>());
  const json& sync = j["policies"]["sync"];
  REQUIRE(sync["available"].get<bool>());
  // sqrt(2 * 60 * 10800) = 36 sqrt(1000); Daly and the waste as worked in test_planner.cpp.
  CHECK(sync["young_interval_seconds"].get<double>() == Approx(1138.4199576606165).epsilon(1e-12));
  CHECK(sync["daly_interval_seconds"].get<double>() == Approx(1098.7713218450797).epsilon(1e-12));
  CHECK(sync["interval_seconds"].get<double>() == sync["daly_interval_seconds"].get<double>());
  CHECK(sync["waste_percent_at_daly"].get<double>() == Approx(12.634688776367353).epsilon(1e-10));
  CHECK(sync["lost_gpu_hours_per_day"].get<double>() == Approx(0.12634688776367353 * 24 * 512).epsilon(1e-10));
  CHECK(sync["simulation"].is_null());
  const json& async = j["policies"]["async"];
  REQUIRE(async["available"].get<bool>());
  CHECK(async["stall_seconds"].get<double>() == 1);
  CHECK(async["background_seconds"].get<double>() == 30);
  // d = 1 s: sqrt(21600) = 146.96938; Daly 146.96938 * (1 + sqrt(1/21600)/3 + 1/194400) - 1 = 146.30347.
  CHECK(async["young_interval_seconds"].get<double>() == Approx(146.9693845669907).epsilon(1e-12));
  CHECK(async["daly_interval_seconds"].get<double>() == Approx(146.30347391567676).epsilon(1e-12));
  CHECK(async["waste_percent_at_daly"].get<double>() < sync["waste_percent_at_daly"].get<double>());
}

TEST_CASE("ckpt-plan scales the llama3-405b preset to --gpus", "[plan_tool]") {
  const Run own = plan({"--preset", "llama3-405b", "--save-seconds", "2.44", "--json"});
  REQUIRE(own.code == 0);
  const json a = own.out_json();
  CHECK(a["mtbf_hours"].get<double>() == Approx(1296.0 / 419.0).epsilon(1e-12));
  CHECK(a["gpus"].get<double>() == 16384);  // the preset's own GPU count
  CHECK(a["preset"]["interruptions"].get<double>() == 419);
  const Run half = plan({"--preset", "llama3-405b", "--gpus", "8192", "--save-seconds", "2.44", "--json"});
  REQUIRE(half.code == 0);
  const json b = half.out_json();
  CHECK(b["mtbf_seconds"].get<double>() == Approx(22270.167064439138).epsilon(1e-12));
  CHECK(b["policies"]["sync"]["young_interval_seconds"].get<double>() == Approx(329.6640946091385).epsilon(1e-12));
  CHECK(b["policies"]["async"]["available"].get<bool>() == false);
}

TEST_CASE("ckpt-plan without a GPU count reports GPU-hours per GPU and says so", "[plan_tool]") {
  const json j = plan_json({"--mtbf-hours", "3", "--save-seconds", "60", "--json"});
  CHECK(j["gpus"].get<double>() == 1);
  CHECK_FALSE(j["gpus_known"].get<bool>());
  const json& sync = j["policies"]["sync"];
  CHECK(sync["lost_gpu_hours_per_day"].get<double>() == Approx(sync["waste_percent"].get<double>() / 100 * 24));
  const Run table = plan({"--mtbf-hours", "3", "--save-seconds", "60"});
  REQUIRE(table.code == 0);
  CHECK(table.out.find("per GPU") != std::string::npos);
  CHECK(table.out.find("async") != std::string::npos);  // the row is there, as n/a
  CHECK(table.out.find("n/a") != std::string::npos);
}

TEST_CASE("ckpt-plan --simulate agrees with the model and --interval moves both", "[plan_tool]") {
  const std::vector<std::string> args = {"--gpu-failures-per-hour", "0.0001", "--gpus", "1000", "--save-seconds", "60",
                                         "--async-stall-seconds", "2", "--async-write-seconds", "50", "--interval", "900",
                                         "--simulate", "400", "--seed", "5", "--json"};
  const Run r = plan(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json j = r.out_json();
  CHECK(j["mtbf_seconds"].get<double>() == Approx(36000));  // 1 / (1000 * 1e-4) hours
  CHECK(j["interval_requested_seconds"].get<double>() == 900);
  for (const char* name : {"sync", "async"}) {
    INFO(name);
    const json& p = j["policies"][name];
    CHECK(p["interval_seconds"].get<double>() == 900);
    const json& s = p["simulation"];
    REQUIRE(s.is_object());
    CHECK(s["histories"].get<int>() == 400);
    CHECK(s["seed"].get<int>() == 5);
    CHECK(s["mean_failures_per_history"].get<double>() > 10);
    CHECK(s["agrees"].get<bool>());
    CHECK(std::abs(s["mean_waste_percent"].get<double>() - s["model_waste_percent"].get<double>()) <=
          s["tolerance_percent"].get<double>());
  }
  // The same seed prints the same numbers.
  const Run again = plan(args);
  CHECK(again.out == r.out);
}

TEST_CASE("ckpt-plan exits 2 with a one-line error on bad usage", "[plan_tool]") {
  const std::vector<UsageRow> rows = {
      {{"--save-seconds", "60"}, "missing MTBF"},
      {{"--mtbf-hours", "3"}, "missing save cost"},
      {{"--mtbf-hours", "3", "--save-seconds=-5"}, "stall"},
      {{"--mtbf-hours=-3", "--save-seconds", "5"}, "MTBF"},
      {{"--mtbf-hours", "0", "--save-seconds", "5"}, "MTBF"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--restart-seconds=-1"}, "restart"},
      {{"--preset", "gpt-5", "--save-seconds", "5"}, "unknown preset 'gpt-5'"},
      {{"--preset", "llama3-405b", "--mtbf-hours", "3", "--save-seconds", "5"}, "only one of"},
      {{"--gpu-failures-per-hour", "0.001", "--save-seconds", "5"}, "needs --gpus"},
      {{"--mtbf-hours", "3", "--gpus", "0", "--save-seconds", "5"}, "--gpus"},
      {{"--mtbf-hours", "3", "--async-write-seconds", "5"}, "needs --async-stall-seconds"},
      {{"--mtbf-hours", "3", "--async-stall-seconds", "5"}, "needs --async-write-seconds"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--interval", "0"}, "interval"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--simulate", "1"}, "2 histories"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--store", "/nonexistent"}, "excludes"},
      {{"--mtbf-hours", "3", "--store", "/nonexistent/ckpt-plan-store"}, "/nonexistent/ckpt-plan-store"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--bogus"}, "--bogus"},
  };
  check_usage_errors(rows);
  const Run help = plan({"--help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("--async-write-seconds") != std::string::npos);
}

TEST_CASE("ckpt-plan --plot writes an SVG with both optima marked", "[plan_tool]") {
  ckpt_test::TempDir dir;
  const std::string svg_path = dir.file("plan.svg");
  const Run r = plan({"--preset", "llama3-405b", "--gpus", "16384", "--save-seconds", "2.44", "--async-stall-seconds", "0.1",
                      "--async-write-seconds", "2.5", "--restart-seconds", "600", "--plot", svg_path});
  REQUIRE(r.code == 0);
  const std::string svg = ckpt_test::read_file(svg_path);
  REQUIRE(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK((svg.size() > 20 && svg.substr(svg.size() - 7) == "</svg>\n"));
  for (const char* label : {"sync Young", "sync Daly", "async Young", "async Daly", "checkpoint interval", "expected waste"})
    CHECK(svg.find(label) != std::string::npos);
  // Well-formed enough to count: every text element closed, one polyline per curve, angle brackets paired.
  auto count = [&](const std::string& s) {
    std::size_t n = 0;
    for (std::size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) ++n;
    return n;
  };
  CHECK(count("<text") == count("</text>"));
  CHECK(count("<polyline") == 2);
  CHECK(std::count(svg.begin(), svg.end(), '<') == std::count(svg.begin(), svg.end(), '>'));
  // An unwritable plot path is an error, not a silent success.
  const Run bad = plan({"--mtbf-hours", "3", "--save-seconds", "60", "--plot", dir.file("no/such/dir/plan.svg")});
  CHECK(bad.code == 2);
  CHECK(bad.first_err_line().rfind("ckpt-plan: ", 0) == 0);
}

TEST_CASE("ckpt-plan --store plans from the saves the store recorded", "[plan_tool]") {
  ckpt_test::TempDir dir;
  SECTION("sync saves: the sync row from their persist time, the async stall unknown") {
    const std::string store = make_store(dir, "sync", 3);
    const json j = plan_json({"--mtbf-hours", "3", "--store", store, "--json"});
    CHECK(j["store"]["records"].get<int>() == 3);
    const json& sync = j["policies"]["sync"];
    REQUIRE(sync["available"].get<bool>());
    CHECK(sync["source"].get<std::string>().find("store") != std::string::npos);
    CHECK(sync["stall_seconds"].get<double>() > 0);
    CHECK(j["policies"]["async"]["available"].get<bool>() == false);
    CHECK(j["policies"]["async"]["reason"].get<std::string>().find("--async-stall-seconds") != std::string::npos);
    // A stall the user knows fills in the async row.
    const Run known = plan({"--mtbf-hours", "3", "--store", store, "--async-stall-seconds", "0.001", "--json"});
    REQUIRE(known.code == 0);
    CHECK(known.out_json()["policies"]["async"]["stall_seconds"].get<double>() == 0.001);
  }
  SECTION("async saves: their stall, and persist minus stall in the background") {
    const std::string store = make_store(dir, "async", 3, std::chrono::milliseconds(100), std::chrono::milliseconds(3000));
    const json j = plan_json({"--mtbf-hours", "3", "--store", store, "--json"});
    CHECK(j["store"]["async_records_used"].get<int>() == 3);
    const json& async = j["policies"]["async"];
    REQUIRE(async["available"].get<bool>());
    CHECK(async["stall_seconds"].get<double>() == Approx(0.1));
    CHECK(async["background_seconds"].get<double>() >= 2.9);  // the save started 3 s before its commit
    CHECK(j["policies"]["sync"]["stall_seconds"].get<double>() >= 3.0);
  }
  SECTION("a store without a committed save is an error") {
    PosixFs fs;
    StoreOptions o;
    o.create_if_missing = true;
    const std::string empty = dir.file("empty");
    REQUIRE(Store::open(fs, empty, Access::read_write, o).ok());
    const Run r = plan({"--mtbf-hours", "3", "--store", empty});
    CHECK(r.code == 2);
    CHECK(r.first_err_line().rfind("ckpt-plan: ", 0) == 0);
    CHECK(r.first_err_line().find("no saves") != std::string::npos);
  }
}

// --- Tiered mode (spec/PLAN.md 10) ------------------------------------------------------------------

namespace {

// A tiered job's flags: 1 s capture stall, 10 s replication, 20 s more at a promotion persisted 120 s later,
// 60 s back from memory and 600 s from persistent storage; 60% crashes, 30% node losses, 10% power losses.
std::vector<std::string> tier_args(std::vector<std::string> more) {
  std::vector<std::string> args = {"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--replicate-seconds", "10",
                                   "--persist-stall-seconds", "20", "--persist-seconds", "120", "--memory-restart-seconds", "60",
                                   "--persistent-restart-seconds", "600", "--crash-share", "0.6", "--node-loss-share", "0.3",
                                   "--power-loss-share", "0.1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// spec/PLAN.md 10.3 for tier_args' inputs, written out here (f_p = p, or p + n without replicas).
double closed_form_waste(double tau, double k, bool replicated = true) {
  const double m = 10800, fp = replicated ? 0.1 : 0.4, x = tau + 1 + 20 / k;
  const double cost = (1 - fp) * (60 + x / 2 + 10) + fp * (600 + k * x / 2 + 120);
  return 1 - tau / x * (1 - cost / m);
}

}  // namespace

TEST_CASE("ckpt-plan --capture-stall-seconds plans the tiers at their optimum", "[plan_tool][tiers]") {
  const json j = plan_json(tier_args({"--gpus", "1024", "--json"}));
  CHECK(j["mode"].get<std::string>() == "tiered");
  CHECK(j["mtbf_seconds"].get<double>() == 10800);
  const double tau = j["optimum_memory_interval_seconds"].get<double>();
  const auto k = static_cast<double>(j["optimum_persist_every"].get<std::uint64_t>());
  CHECK(j["waste_at_optimum"].get<double>() == Approx(closed_form_waste(tau, k)).epsilon(1e-12));
  // The least closed-form waste: a little more or less tau, one more or less k, all waste more.
  for (const double dk : {-1.0, 0.0, 1.0})
    for (const double factor : {0.99, 1.0, 1.01})
      if (k + dk >= 1 && (dk != 0 || factor != 1.0)) CHECK(closed_form_waste(tau * factor, k + dk) > j["waste_at_optimum"].get<double>());
  // Nothing given: the plan is the optimum.
  CHECK(j["memory_interval_seconds"].get<double>() == j["optimum_memory_interval_seconds"].get<double>());
  CHECK(j["persist_every"].get<std::uint64_t>() == j["optimum_persist_every"].get<std::uint64_t>());
  CHECK(j["waste"].get<double>() == j["waste_at_optimum"].get<double>());
  CHECK(j["persist_every"].get<std::uint64_t>() > 1);  // a 20 s promotion stall is not worth taking at every capture
  CHECK(j["persistent_share"].get<double>() == Approx(0.1));
  CHECK(j["lost_gpu_hours_per_day"].get<double>() == Approx(j["waste"].get<double>() * 24 * 1024));
  CHECK(j["simulated_waste"].is_null());
  CHECK(j["standard_error"].is_null());
  CHECK(j["agrees"].is_null());
  // Given both, they are evaluated; without replicas a node loss needs persistent storage.
  const json given = plan_json(tier_args({"--memory-interval", "300", "--persist-every", "5", "--no-replicas", "--json"}));
  CHECK(given["memory_interval_seconds"].get<double>() == 300);
  CHECK(given["persist_every"].get<std::uint64_t>() == 5);
  CHECK_FALSE(given["replicated"].get<bool>());
  CHECK(given["persistent_share"].get<double>() == Approx(0.4));
  CHECK(given["waste"].get<double>() == Approx(closed_form_waste(300, 5, false)).epsilon(1e-12));
  CHECK(given["waste"].get<double>() > j["waste"].get<double>());
  // The table names the policy and the optimum.
  const Run table = plan(tier_args({"--memory-interval", "300"}));
  REQUIRE(table.code == 0);
  CHECK(table.out.find("given interval, best k") != std::string::npos);
  CHECK(table.out.find("optimum") != std::string::npos);
  CHECK(table.out.find("persist every") != std::string::npos);
}

TEST_CASE("ckpt-plan tiered defaults: crashes take the rest of the shares, restarts take --restart-seconds", "[plan_tool][tiers]") {
  const json j = plan_json({"--mtbf-seconds", "10800", "--capture-stall-seconds", "1", "--power-loss-share", "0.25",
                            "--restart-seconds", "200", "--json"});
  CHECK(j["crash_share"].get<double>() == Approx(0.75));
  CHECK(j["node_loss_share"].get<double>() == 0);
  CHECK(j["memory_restart_seconds"].get<double>() == 200);
  CHECK(j["persistent_restart_seconds"].get<double>() == 200);
  CHECK(j["replicate_seconds"].get<double>() == 0);
  CHECK(j["optimum_persist_every"].get<std::uint64_t>() == 1);  // no promotion stall: promote every capture
  CHECK(j["mtbf_source"].get<std::string>() == "--mtbf-seconds 10800");
}

TEST_CASE("ckpt-plan --mtbf-seconds is --mtbf-hours in seconds", "[plan_tool]") {
  const json hours = plan_json({"--mtbf-hours", "3", "--save-seconds", "60", "--json"});
  const json seconds = plan_json({"--mtbf-seconds", "10800", "--save-seconds", "60", "--json"});
  CHECK(seconds["mtbf_seconds"].get<double>() == 10800);
  CHECK(seconds["policies"]["sync"]["waste_percent"].get<double>() == hours["policies"]["sync"]["waste_percent"].get<double>());
}

TEST_CASE("ckpt-plan tiered --simulate agrees where costs are small and exits 1 where the closed form is off", "[plan_tool][tiers]") {
  const std::vector<std::string> args = tier_args({"--simulate", "100", "--seed", "3", "--json"});
  const Run r = plan(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json j = r.out_json();
  CHECK(j["agrees"].get<bool>());
  CHECK(j["standard_error"].get<double>() > 0);
  CHECK(std::abs(j["simulated_waste"].get<double>() - j["waste"].get<double>()) <= j["simulation"]["tolerance"].get<double>());
  CHECK(j["simulation"]["histories"].get<int>() == 100);
  CHECK(j["simulation"]["seed"].get<int>() == 3);
  CHECK(j["simulation"]["captures_per_history"].get<std::uint64_t>() % j["persist_every"].get<std::uint64_t>() == 0);
  CHECK(j["simulation"]["mean_failures_per_history"].get<double>() > 10);
  CHECK(plan(args).out == r.out);  // the same seed prints the same numbers
  // A 20 s stall and power losses only on a 1000 s MTBF: the first-order closed form overstates the waste.
  const Run off = plan({"--mtbf-seconds", "1000", "--capture-stall-seconds", "20", "--persist-seconds", "100", "--power-loss-share", "1",
                        "--restart-seconds", "100", "--memory-interval", "400", "--persist-every", "1", "--simulate", "200", "--json"});
  CHECK(off.code == 1);
  const json o = off.out_json();
  CHECK_FALSE(o["agrees"].get<bool>());
  CHECK(o["waste"].get<double>() - o["simulated_waste"].get<double>() > o["simulation"]["tolerance"].get<double>());
}

TEST_CASE("ckpt-plan tiered --simulate with the checkpointer's ring and skips counts the skipped captures and checks no agreement",
          "[plan_tool][tiers]") {
  // spec/PLAN.md 10.5.1: a capture every second, every third promoted, each promotion durable 2.5 s after its
  // stall, a crash every minute. Off by more than the tolerance from the closed form, yet exit 0: no check.
  const std::vector<std::string> base = {"--mtbf-seconds", "60", "--capture-stall-seconds", "0.01", "--replicate-seconds", "0.1",
                                         "--persist-seconds", "2.5", "--restart-seconds", "1", "--memory-interval", "1",
                                         "--persist-every", "3", "--simulate", "200", "--seed", "9", "--json"};
  std::vector<std::string> ruled = base;
  for (const char* more : {"--memory-slots", "2", "--skip-when-busy"}) ruled.emplace_back(more);
  const Run r = plan(ruled), plain = plan(base);
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(plain.code == 0);
  const json j = r.out_json(), p = plain.out_json();
  CHECK(j["agrees"].is_null());
  CHECK(j["simulation"]["memory_slots"].get<int>() == 2);
  CHECK(j["simulation"]["skip_when_busy"].get<bool>());
  const double captures = j["simulation"]["captures_per_history"].get<double>();
  CHECK(j["simulation"]["mean_skipped_per_history"].get<double>() / captures == Approx(1.0 / 3).epsilon(0.05));
  CHECK(p["simulation"]["mean_skipped_per_history"].get<double>() == 0);
  CHECK(p["agrees"].is_boolean());
  CHECK(j["simulated_waste"].get<double>() - p["simulated_waste"].get<double>() >
        4 * std::hypot(j["standard_error"].get<double>(), p["standard_error"].get<double>()));
  ruled.erase(std::find(ruled.begin(), ruled.end(), "--json"));
  const Run t = plan(ruled);
  CHECK(t.code == 0);
  CHECK(t.out.find("not checked") != std::string::npos);
  CHECK(t.out.find("captures skipped per history") != std::string::npos);
}

TEST_CASE("ckpt-plan tiered mode exits 2 with a one-line error on bad usage", "[plan_tool][tiers]") {
  const std::vector<UsageRow> rows = {
      {{"--mtbf-hours", "3", "--persist-every", "4"}, "--persist-every requires --capture-stall-seconds"},
      {{"--mtbf-hours", "3", "--save-seconds", "5", "--no-replicas"}, "--no-replicas requires --capture-stall-seconds"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--save-seconds", "5"}, "excludes"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--interval", "100"}, "excludes"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "0"}, "capture stall"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--persist-seconds=-1"}, "persist time"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--crash-share", "0.5", "--power-loss-share", "0.2"}, "sum to 1"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--power-loss-share", "1.5"}, "power loss share"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--persist-every", "0"}, "persist_every"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--memory-interval", "0"}, "memory interval"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--simulate", "1"}, "2 histories"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--memory-slots", "2"}, "--memory-slots requires --simulate"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--skip-when-busy"}, "--skip-when-busy requires --simulate"},
      {{"--mtbf-hours", "3", "--capture-stall-seconds", "1", "--simulate", "10", "--memory-slots", "1"}, "at least 2"},
      {{"--mtbf-seconds", "0", "--capture-stall-seconds", "1"}, "MTBF"},
      {{"--mtbf-seconds", "100", "--mtbf-hours", "3", "--capture-stall-seconds", "1"}, "only one of"},
      {{"--mtbf-seconds", "100", "--capture-stall-seconds", "1000", "--power-loss-share", "1"}, "too large"},
  };
  check_usage_errors(rows);
  const Run help = plan({"--help"});
  CHECK(help.code == 0);
  for (const char* flag : {"--capture-stall-seconds", "--memory-interval", "--persist-every", "--no-replicas", "--mtbf-seconds",
                           "Tiered mode"})
    CHECK(help.out.find(flag) != std::string::npos);
}
