// Tests for include/ckpt/store/planner.hpp: Young's and Daly's intervals against numbers worked by hand, the
// MTBF helpers and the llama3-405b preset, the waste model (its optimum, async against sync), the save
// costs read from recorded saves, and the Monte Carlo agreeing with the model (spec/PLAN.md); the
// tiered model, its optimum and its Monte Carlo (spec/PLAN.md 10).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ckpt/store/planner.hpp>

using namespace ckpt::plan;

namespace {

constexpr double kHour = 3600.0;
// The llama3-405b job MTBF: 54 days * 24 h / 419 interruptions = 1296/419 h = 3.09307876 h.
constexpr double kLlamaMtbf = 1296.0 / 419.0 * kHour;  // 11135.0835 s

FailureModel failures(double mtbf, double restart) { return FailureModel{mtbf, restart}; }

// A seeded Monte Carlo of `histories` histories (intervals 0: enough for ~50 failures each).
SimulationOptions histories_of(std::uint64_t histories, std::uint64_t seed, std::uint64_t intervals = 0) {
  return SimulationOptions{histories, intervals, seed};
}

// A tiered job's failures: shares of crash, node loss and power loss, restarts from memory and from persistent storage.
TierFailures tier_failures(double mtbf, double crash, double node, double power, double memory_restart, double persistent_restart,
                           bool replicated = true) {
  return TierFailures{mtbf, crash, node, power, memory_restart, persistent_restart, replicated};
}

TierSimulationOptions tier_histories(std::uint64_t histories, std::uint64_t seed, std::uint64_t captures = 0) {
  return TierSimulationOptions{histories, captures, seed};
}

// a and b simulated from one seed, c from another: the same seed gives the same figures, another differs.
template <class Simulated>
void check_seeded(const Simulated& a, const Simulated& b, const Simulated& c) {
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(a->mean_waste == b->mean_waste);
  CHECK(a->standard_error == b->standard_error);
  CHECK(a->mean_waste != c->mean_waste);
}

}  // namespace

TEST_CASE("Young's interval is sqrt(2 d M)", "[planner]") {
  // d = 60 s, M = 3 h = 10800 s: 2 d M = 1,296,000 = 36^2 * 1000, so tau = 36 sqrt(1000) = 1138.41996 s.
  CHECK(young_interval(60, 3 * kHour) == Approx(1138.4199576606165).epsilon(1e-12));
  // d = 2.44 s on the llama3-405b MTBF: sqrt(2 * 2.44 * 11135.0835) = sqrt(54339.21) = 233.1077 s.
  CHECK(young_interval(2.44, kLlamaMtbf) == Approx(233.10771681184536).epsilon(1e-12));
}

TEST_CASE("Daly's interval adds the higher-order terms and subtracts the stall", "[planner]") {
  // d = 60 s, M = 10800 s: x = d / 2M = 1/360, sqrt(x) = 0.05270463; the bracket is
  // 1 + 0.05270463/3 + (1/360)/9 = 1.01787685, so tau = 1138.41996 * 1.01787685 - 60 = 1098.77132 s.
  CHECK(daly_interval(60, 3 * kHour) == Approx(1098.7713218450797).epsilon(1e-12));
  // Daly is below Young when the stall is small: the -d term wins over the bracket.
  CHECK(daly_interval(60, 3 * kHour) < young_interval(60, 3 * kHour));
  CHECK(daly_interval(2.44, kLlamaMtbf) == Approx(231.48388793673774).epsilon(1e-12));
}

TEST_CASE("Daly's interval is the MTBF once the stall reaches twice the MTBF", "[planner]") {
  CHECK(daly_interval(7200, 3600) == 3600);
  CHECK(daly_interval(1e6, 3600) == 3600);
  // Just below 2M the formula still applies: sqrt(4 M^2) (1 + 1/3 + 1/9) - 2M = 8M/9.
  CHECK(daly_interval(7200 * (1 - 1e-12), 3600) == Approx(3200).epsilon(1e-6));
  // The model's exact optimum tends to M from below as the stall grows (e^{(tau+d)/M}(1 - tau/M) = 1).
  CHECK(model_optimum_interval({1e6, 0}, failures(3600, 0)) == Approx(3600).epsilon(1e-9));
  CHECK(model_optimum_interval({1e6, 0}, failures(3600, 0)) <= 3600);
  CHECK(model_optimum_interval({3 * 3600.0, 0}, failures(3600, 0)) < 3600);
}

TEST_CASE("the llama3-405b preset is 419 interruptions in 54 days on 16,384 GPUs", "[planner]") {
  const Preset* p = find_preset("llama3-405b");
  REQUIRE(p != nullptr);
  CHECK(p->interruptions == 419);
  CHECK(p->days == 54);
  CHECK(p->gpus == 16384);
  CHECK(p->job_mtbf_hours() == Approx(3.0930787589498805).epsilon(1e-12));
  // 419 / (1296 h * 16384 GPUs) = 1.97328e-5 failures per GPU-hour.
  CHECK(p->failures_per_gpu_hour() == Approx(1.9732816719714506e-05).epsilon(1e-12));
  auto own = preset_mtbf_seconds(*p, std::nullopt);
  REQUIRE(own.ok());
  CHECK(*own == Approx(11135.083532219569).epsilon(1e-12));
  // The same per-GPU rate on half the GPUs fails half as often.
  auto half = preset_mtbf_seconds(*p, 8192.0);
  REQUIRE(half.ok());
  CHECK(*half == Approx(2 * 11135.083532219569).epsilon(1e-12));
  CHECK(find_preset("llama3-70b") == nullptr);
  CHECK(find_preset("") == nullptr);
}

TEST_CASE("MTBF from a per-GPU rate is 1 / (N r), from hours is 3600 h", "[planner]") {
  auto m = mtbf_from_gpu_rate(1000, 1e-4);  // the job fails 0.1 times an hour: every 10 h
  REQUIRE(m.ok());
  CHECK(*m == Approx(36000).epsilon(1e-12));
  auto h = mtbf_from_hours(3);
  REQUIRE(h.ok());
  CHECK(*h == 10800);
}

TEST_CASE("inputs that are not positive finite numbers are refused", "[planner]") {
  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    INFO(bad);
    CHECK(mtbf_from_hours(bad).status().code() == ckpt::Code::invalid_argument);
    CHECK(mtbf_from_gpu_rate(8, bad).status().code() == ckpt::Code::invalid_argument);
    CHECK(check_inputs({bad, 0}, failures(3600, 0)).code() == ckpt::Code::invalid_argument);
    CHECK(check_inputs({1, 0}, failures(bad, 0)).code() == ckpt::Code::invalid_argument);
    CHECK(check_interval(bad).code() == ckpt::Code::invalid_argument);
  }
  CHECK(mtbf_from_gpu_rate(0, 1e-4).status().code() == ckpt::Code::invalid_argument);
  CHECK(check_inputs({1, -1}, failures(3600, 0)).code() == ckpt::Code::invalid_argument);
  CHECK(check_inputs({1, 0}, failures(3600, -1)).code() == ckpt::Code::invalid_argument);
  CHECK(check_inputs({1, 0}, failures(3600, 0)).ok());  // a background of 0 and no restart cost are fine
  CHECK(plan_policy({1, 0}, failures(3600, 0), 0).status().code() == ckpt::Code::invalid_argument);
}

TEST_CASE("waste of a sync save is Daly's exact formula", "[planner]") {
  // d = 60, M = 10800, R = 300 at tau = 1098.7713: T_w/T_s = M e^{R/M} (e^{(tau+d)/M} - 1) / tau
  // = 10800 * 1.0281672 * (e^{0.10729364} - 1) / 1098.7713 = 1.1446191, waste = 1 - 1/1.1446191 = 12.63469%.
  const SaveCost sync{60, 0};
  const FailureModel f = failures(3 * kHour, 300);
  CHECK(overhead_ratio(sync, f, 1098.7713218450797) == Approx(1.1446190553139084).epsilon(1e-12));
  CHECK(waste_fraction(sync, f, 1098.7713218450797) == Approx(0.12634688776367353).epsilon(1e-12));
  // Restarts alone: waste tends to 1 - e^{-R/M} as the save cost and interval go to 0.
  CHECK(restart_waste_floor(f) == Approx(1 - std::exp(-300.0 / 10800)).epsilon(1e-12));
  CHECK(waste_fraction({1e-9, 0}, f, 1e-3) == Approx(restart_waste_floor(f)).epsilon(1e-4));
}

TEST_CASE("waste at Daly's interval is no more than at nearby intervals", "[planner]") {
  struct Row {
    SaveCost cost;
    FailureModel f;
  };
  // d well below M, where Daly's estimate holds; with and without restart cost and background write.
  const std::vector<Row> rows = {{{60, 0}, failures(10800, 300)},    {{2.44, 0}, failures(kLlamaMtbf, 600)},
                                 {{600, 0}, failures(3600, 300)},    {{1800, 0}, failures(3600, 0)},
                                 {{0.1, 2.5}, failures(kLlamaMtbf, 600)}, {{5, 20}, failures(2000, 100)}};
  for (const auto& row : rows) {
    INFO("stall " << row.cost.stall_seconds << " background " << row.cost.background_seconds << " M " << row.f.mtbf_seconds);
    const double tau = daly_interval(row.cost.stall_seconds, row.f.mtbf_seconds);
    const double at_daly = waste_fraction(row.cost, row.f, tau);
    for (const double factor : {0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 2.0}) {
      INFO("factor " << factor);
      CHECK(at_daly <= waste_fraction(row.cost, row.f, tau * factor));
    }
    // The model's own minimum is at least as good, and Daly's estimate is within 0.05 points of it.
    const double best = model_optimum_interval(row.cost, row.f);
    CHECK(waste_fraction(row.cost, row.f, best) - at_daly <= 1e-15);  // rounding, where the curve is flat
    CHECK(at_daly - waste_fraction(row.cost, row.f, best) < 5e-4);
    // And Young's interval is never better than Daly's here.
    CHECK(at_daly <= waste_fraction(row.cost, row.f, young_interval(row.cost.stall_seconds, row.f.mtbf_seconds)));
  }
}

TEST_CASE("an async save wastes less than a sync save that stalls for longer", "[planner]") {
  const FailureModel f = failures(kLlamaMtbf, 600);
  const SaveCost sync{2.44, 0}, async{0.1, 2.5};
  auto s = plan_policy(sync, f, 16384);
  auto a = plan_policy(async, f, 16384);
  REQUIRE(s.ok());
  REQUIRE(a.ok());
  CHECK(a->waste_at_daly < s->waste_at_daly);
  CHECK(a->lost_gpu_hours_per_day < s->lost_gpu_hours_per_day);
  CHECK(a->daly_seconds < s->daly_seconds);  // a cheaper stall is worth taking more often
  // At any interval, an async save beats the sync save of the same write (stall + background).
  for (const double tau : {10.0, 47.0, 231.0, 1000.0, 5000.0})
    CHECK(waste_fraction(async, f, tau) < waste_fraction(sync_equivalent(async), f, tau));
}

TEST_CASE("the background write scales the waste but does not move the optimum", "[planner]") {
  const FailureModel f = failures(10800, 300);
  const SaveCost with_write{10, 100}, without{10, 0};
  const double tau = daly_interval(10, 10800);  // 456 s, above the 100 s write
  // A(tau) gains exactly the factor e^{w/M} while tau >= w (spec/PLAN.md 3.2).
  CHECK(overhead_ratio(with_write, f, tau) == Approx(overhead_ratio(without, f, tau) * std::exp(100.0 / 10800)).epsilon(1e-12));
  CHECK(model_optimum_interval(with_write, f) == Approx(model_optimum_interval(without, f)).epsilon(1e-6));
}

TEST_CASE("a background write longer than the interval makes each save wait for the previous one", "[planner]") {
  const FailureModel f = failures(2000, 100);
  const SaveCost cost{1, 300};  // Young's 63 s is far below the 300 s write
  auto p = plan_policy(cost, f, 1);
  REQUIRE(p.ok());
  CHECK(p->save_waits_for_write);
  // Below w the durable points are w + d apart whatever the interval, so the best interval is w itself.
  CHECK(p->optimum_seconds == Approx(300).epsilon(1e-6));
  CHECK(p->waste_at_optimum < p->waste_at_daly);
}

TEST_CASE("lost GPU-hours per day are the wasted share of every GPU's day", "[planner]") {
  CHECK(lost_gpu_hours_per_day(0.05, 16384) == Approx(0.05 * 24 * 16384));
  CHECK(lost_gpu_hours_per_day(0.05, 1) == Approx(1.2));
  auto p = plan_policy({60, 0}, failures(10800, 300), 1000, 600.0);
  REQUIRE(p.ok());
  CHECK(p->interval_seconds == 600);
  CHECK(p->lost_gpu_hours_per_day == Approx(waste_fraction({60, 0}, failures(10800, 300), 600) * 24000));
}

TEST_CASE("the waste curve is log-spaced and lowest near Daly's interval", "[planner]") {
  const SaveCost cost{60, 0};
  const FailureModel f = failures(10800, 300);
  const auto curve = waste_curve(cost, f, 10, 100000, 401);
  REQUIRE(curve.size() == 401);
  CHECK(curve.front().interval_seconds == Approx(10));
  CHECK(curve.back().interval_seconds == Approx(100000));
  CHECK(curve[200].interval_seconds == Approx(1000));  // the middle of 10..1e5 on a log scale
  std::size_t best = 0;
  for (std::size_t i = 0; i < curve.size(); ++i)
    if (curve[i].waste_fraction < curve[best].waste_fraction) best = i;
  // Adjacent samples are 10^(4/400) = 2.3% apart: the lowest one is within a step of the optimum.
  CHECK(curve[best].interval_seconds == Approx(model_optimum_interval(cost, f)).epsilon(0.03));
  CHECK(waste_curve(cost, f, 0, 10, 5).empty());
}

TEST_CASE("save costs from recorded saves are medians of the recent ones", "[planner]") {
  SECTION("sync records give the sync cost and leave the async stall unknown") {
    const std::vector<SaveSample> samples = {{2.0, 2.1, false}, {9.0, 9.5, false}, {2.2, 2.3, false}};
    auto e = estimate_save_costs(samples);
    REQUIRE(e.ok());
    REQUIRE(e->sync);
    CHECK(e->sync->stall_seconds == Approx(2.3));  // median persist: one slow save does not move it
    CHECK(e->sync->background_seconds == 0);
    CHECK_FALSE(e->async);
    CHECK(e->samples == 3);
    // A stall the caller knows fills the async row in: background = median persist - stall.
    auto known = estimate_save_costs(samples, 0.3);
    REQUIRE(known.ok());
    REQUIRE(known->async);
    CHECK(known->async->stall_seconds == Approx(0.3));
    CHECK(known->async->background_seconds == Approx(2.0));
  }
  SECTION("async records give the async stall and background, and a sync estimate of the whole persist") {
    const std::vector<SaveSample> samples = {{0.1, 2.6, true}, {0.2, 3.0, true}, {0.1, 2.5, true}, {0.15, 2.7, true}};
    auto e = estimate_save_costs(samples);
    REQUIRE(e.ok());
    REQUIRE(e->async);
    CHECK(e->async->stall_seconds == Approx(0.125));
    CHECK(e->async->background_seconds == Approx(2.525));  // median of 2.4, 2.5, 2.55, 2.8
    CHECK(e->sync->stall_seconds == Approx(2.65));
    CHECK(e->async_samples == 4);
  }
  SECTION("only the last `recent` records count") {
    std::vector<SaveSample> samples(40, SaveSample{100, 100, false});
    for (int i = 0; i < 10; ++i) samples.push_back({1, 1, false});
    auto e = estimate_save_costs(samples, std::nullopt, 10);
    REQUIRE(e.ok());
    CHECK(e->sync->stall_seconds == 1);
    CHECK(e->samples == 10);
  }
  SECTION("no records, or a stall that is not positive, is an error") {
    CHECK(estimate_save_costs({}).status().code() == ckpt::Code::not_found);
    CHECK(estimate_save_costs({{1, 1, false}}, -1.0).status().code() == ckpt::Code::invalid_argument);
  }
}

TEST_CASE("the Monte Carlo agrees with the model within 4 standard errors", "[planner][simulate]") {
  struct Row {
    const char* what;
    SaveCost cost;
    FailureModel f;
    double interval;  // 0: Daly's
    std::uint64_t histories;
  };
  const std::vector<Row> rows = {
      {"sync, 60 s stall, 3 h MTBF", {60, 0}, failures(10800, 300), 0, 2000},
      {"async on the llama3-405b MTBF", {0.1, 2.5}, failures(kLlamaMtbf, 600), 0, 2000},
      {"sync, stall a sixth of the MTBF", {600, 0}, failures(3600, 300), 0, 2000},
      {"async, each save waits for the previous write", {5, 400}, failures(2000, 100), 150, 2000},
      {"async, background write a fifth of the MTBF", {2, 300}, failures(1500, 60), 600, 2000},
      {"sync, stall above twice the MTBF", {8000, 0}, failures(3600, 0), 0, 300},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    const double tau = row.interval > 0 ? row.interval : daly_interval(row.cost.stall_seconds, row.f.mtbf_seconds);
    auto r = simulate(row.cost, row.f, tau, histories_of(row.histories, 20240917));
    REQUIRE(r.ok());
    INFO("simulated " << r->mean_waste << " +- " << r->standard_error << ", model " << r->model_waste << ", "
                      << r->mean_failures << " failures per history of " << r->intervals << " intervals");
    CHECK(r->mean_failures > 10);  // enough failures that the check means something
    CHECK(r->standard_error > 0);
    CHECK(std::abs(r->mean_waste - r->model_waste) <= kAgreementSigmas * r->standard_error);
    CHECK(r->agrees);
    // The finite job differs from the steady state only by the first interval's background write.
    CHECK(r->model_waste == Approx(waste_fraction(row.cost, row.f, tau)).margin(1e-3));
  }
}

TEST_CASE("the Monte Carlo tells the async model from one that forgets the in-flight write", "[planner][simulate]") {
  // A failure during the 300 s background write loses that checkpoint too. A model that ignores this
  // (the same stall, no background) or charges the write as stall must both be rejected by the check.
  const SaveCost async{2, 300};
  const FailureModel f = failures(1500, 60);
  auto r = simulate(async, f, 600, histories_of(2000, 7));
  REQUIRE(r.ok());
  CHECK(r->agrees);
  const double forgets = waste_fraction({2, 0}, f, 600);
  const double as_stall = waste_fraction(sync_equivalent(async), f, 600);
  CHECK(std::abs(r->mean_waste - forgets) > 10 * r->tolerance);
  CHECK(std::abs(r->mean_waste - as_stall) > 10 * r->tolerance);
}

TEST_CASE("a seeded simulation is reproducible and the seed matters", "[planner][simulate]") {
  const SaveCost cost{60, 0};
  const FailureModel f = failures(10800, 300);
  SimulationOptions o = histories_of(50, 42, 500);
  auto a = simulate(cost, f, 1000, o);
  auto b = simulate(cost, f, 1000, o);
  o.seed = 43;
  auto c = simulate(cost, f, 1000, o);
  check_seeded(a, b, c);
  CHECK(a->intervals == 500);
}

TEST_CASE("a simulation needs two histories, valid inputs and a bounded amount of work", "[planner][simulate]") {
  SimulationOptions o;
  o.histories = 1;
  CHECK(simulate({60, 0}, failures(10800, 300), 1000, o).status().code() == ckpt::Code::invalid_argument);
  o.histories = 10;
  CHECK(simulate({-1, 0}, failures(10800, 300), 1000, o).status().code() == ckpt::Code::invalid_argument);
  CHECK(simulate({60, 0}, failures(10800, 300), 0, o).status().code() == ckpt::Code::invalid_argument);
  // Each interval of 100 MTBFs would need about e^100 attempts.
  CHECK(simulate({360000, 0}, failures(3600, 0), 3600, o).status().code() == ckpt::Code::unsupported);
}

// --- Tiers (spec/PLAN.md 10) -----------------------------------------------------------------------

TEST_CASE("tier inputs outside their ranges are refused", "[planner][tiers]") {
  const TierCost cost{2, 10, 20, 120};
  const TierFailures f = tier_failures(10800, 0.6, 0.3, 0.1, 60, 600);
  REQUIRE(check_tier_inputs(cost, f).ok());
  REQUIRE(plan_tiers(cost, f).ok());
  auto refused = [](const TierCost& c, const TierFailures& g) {
    CHECK(check_tier_inputs(c, g).code() == ckpt::Code::invalid_argument);
    CHECK(plan_tiers(c, g).status().code() == ckpt::Code::invalid_argument);
    CHECK(simulate_tiers(c, g, {100, 1}, tier_histories(10, 1)).status().code() == ckpt::Code::invalid_argument);
  };
  for (const double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    INFO(bad);
    for (double TierCost::*field : {&TierCost::capture_stall_seconds, &TierCost::replicate_seconds, &TierCost::persist_stall_seconds,
                                    &TierCost::persist_seconds}) {
      TierCost c = cost;
      c.*field = bad;
      refused(c, f);
    }
    for (double TierFailures::*field : {&TierFailures::mtbf_seconds, &TierFailures::memory_restart_seconds,
                                        &TierFailures::persistent_restart_seconds, &TierFailures::crash_share,
                                        &TierFailures::node_loss_share, &TierFailures::power_loss_share}) {
      TierFailures g = f;
      g.*field = bad;
      refused(cost, g);
    }
  }
  refused({0, 10, 20, 120}, f);                                   // a capture stall of 0: the optimum interval would be 0
  refused(cost, tier_failures(0, 0.6, 0.3, 0.1, 60, 600));         // no MTBF
  refused(cost, tier_failures(10800, 0.6, 0.3, 0.2, 60, 600));     // shares summing to 1.1
  refused(cost, tier_failures(10800, 0.5, 0.3, 0.1, 60, 600));     // shares summing to 0.9
  refused(cost, tier_failures(10800, 1.5, -0.5, 0.0, 60, 600));    // a share outside [0, 1] that still sums to 1
  CHECK(check_tier_inputs(cost, tier_failures(10800, 0.6, 0.3, 0.1 + 5e-10, 60, 600)).ok());  // within 1e-9
  // The policy: a positive finite interval and k >= 1.
  CHECK(check_tier_policy({0, 1}).code() == ckpt::Code::invalid_argument);
  CHECK(check_tier_policy({std::nan(""), 1}).code() == ckpt::Code::invalid_argument);
  CHECK(check_tier_policy({100, 0}).code() == ckpt::Code::invalid_argument);
  CHECK(plan_tiers(cost, f, -5.0).status().code() == ckpt::Code::invalid_argument);
  CHECK(plan_tiers(cost, f, std::nullopt, std::uint64_t{0}).status().code() == ckpt::Code::invalid_argument);
  CHECK(simulate_tiers(cost, f, {100, 0}, tier_histories(10, 1)).status().code() == ckpt::Code::invalid_argument);
}

TEST_CASE("the tier closed form at k = 1 with only persistent failures is the first-order single-level waste", "[planner][tiers]") {
  // k = 1, d_p = 0, f_p = 1: x = tau + d, E[cost] = R + x/2 + w, the expansion of 3.2 to first order in 1/M.
  const double d = 10, w = 100, r = 300, m = 1e6;
  for (const double tau : {500.0, 4000.0, 20000.0}) {
    INFO(tau);
    const TierCost cost{d, 7, 0, w};  // the memory tier's replication never matters here
    const TierFailures f = tier_failures(m, 0, 0, 1, 5, r);
    const double x = tau + d;
    const double first_order = 1 - tau / x * (1 - (r + x / 2 + w) / m);
    CHECK(tier_waste(cost, f, {tau, 1}) == Approx(first_order).epsilon(1e-14));
    // Against the exact waste of 3.2: they differ by second-order terms, (x + R + w)^2 / M^2 here.
    const double exact = waste_fraction({d, w}, {m, r}, tau);
    CHECK(std::abs(tier_waste(cost, f, {tau, 1}) - exact) < std::pow((x + r + w) / m, 2));
    // A node loss without replicas is a power loss for the closed form.
    CHECK(tier_waste(cost, tier_failures(m, 0, 1, 0, 5, r, false), {tau, 1}) == tier_waste(cost, f, {tau, 1}));
  }
}

TEST_CASE("the tier simulation reduces to the single-level simulation", "[planner][tiers][simulate]") {
  // k = 1, d_p = 0, power loss only, w_p = w, R_p = R, w_m <= w: the memory tier never serves, and the
  // failure gaps are drawn in simulate_history()'s order, so the histories are the same draw for draw.
  struct Row {
    const char* what;
    SaveCost cost;
    FailureModel f;
    double interval;
  };
  const std::vector<Row> rows = {{"sync, 60 s stall, 3 h MTBF", {60, 0}, failures(10800, 300), 1000},
                                 {"async, each capture waits for the previous write", {5, 400}, failures(2000, 100), 150},
                                 {"async, background a fifth of the MTBF", {2, 300}, failures(1500, 60), 600}};
  for (const auto& row : rows) {
    INFO(row.what);
    auto single = simulate(row.cost, row.f, row.interval, histories_of(300, 11, 2000));
    const TierCost cost{row.cost.stall_seconds, row.cost.background_seconds / 2, 0, row.cost.background_seconds};
    const TierFailures f = tier_failures(row.f.mtbf_seconds, 0, 0, 1, 17, row.f.restart_seconds);
    auto tiered = simulate_tiers(cost, f, {row.interval, 1}, tier_histories(300, 11, 2000));
    REQUIRE(single.ok());
    REQUIRE(tiered.ok());
    CHECK(std::abs(tiered->mean_waste - single->mean_waste) <= kAgreementSigmas * single->standard_error);
    CHECK(tiered->mean_waste == single->mean_waste);
    CHECK(tiered->standard_error == single->standard_error);
    CHECK(tiered->mean_failures == single->mean_failures);
    CHECK(tiered->mean_persistent_restarts <= tiered->mean_failures);  // every restart reads persistent storage:
    CHECK(tiered->mean_persistent_restarts >= 0.9 * tiered->mean_failures);  // all but failures during restarts
    // A different seed: agreement within 4 standard errors, not identity.
    auto other = simulate_tiers(cost, f, {row.interval, 1}, tier_histories(300, 12, 2000));
    REQUIRE(other.ok());
    CHECK(other->mean_waste != single->mean_waste);
    CHECK(std::abs(other->mean_waste - single->mean_waste) <=
          kAgreementSigmas * std::hypot(other->standard_error, single->standard_error));
  }
}

TEST_CASE("the tier simulation agrees with the first-order closed form while costs are at most 1% of M", "[planner][tiers][simulate]") {
  // kTierModelTolerance (10% of the closed form, on top of 4 standard errors); the worst seen over 300
  // random inputs with every cost <= 1% of M, at the optimum and at half and twice its tau and k, was 5.3%
  // in one draw and 9.3% in another (spec/PLAN.md 10.6).
  struct Row {
    const char* what;
    TierCost cost;
    TierFailures f;
  };
  const double m = 10000;
  const std::vector<Row> rows = {
      {"crashes and replicated node losses, a few power losses", {10, 5, 50, 100}, tier_failures(m, 0.6, 0.3, 0.1, 60, 100)},
      {"every cost at 1% of M", {100, 100, 100, 100}, tier_failures(m, 0.6, 0.3, 0.1, 100, 100)},
      {"power losses only", {20, 0, 50, 100}, tier_failures(m, 0, 0, 1, 10, 100)},
      {"node losses without replicas", {20, 30, 30, 60}, tier_failures(m, 0.5, 0.5, 0, 20, 100, false)},
      {"a cheap capture, an expensive promotion, rare power losses", {1, 1, 100, 100}, tier_failures(m, 0.9, 0.05, 0.05, 10, 100)},
      {"crashes only", {10, 10, 10, 10}, tier_failures(m, 1, 0, 0, 10, 10)},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    auto planned = plan_tiers(row.cost, row.f);
    REQUIRE(planned.ok());
    const TierPolicy optimum = planned->policy;
    for (const TierPolicy& policy : {optimum, TierPolicy{2 * optimum.memory_interval_seconds, optimum.persist_every},
                                     TierPolicy{optimum.memory_interval_seconds, 2 * optimum.persist_every}}) {
      INFO("tau " << policy.memory_interval_seconds << " k " << policy.persist_every);
      auto r = simulate_tiers(row.cost, row.f, policy, tier_histories(300, 20240917));
      REQUIRE(r.ok());
      INFO("simulated " << r->mean_waste << " +- " << r->standard_error << ", closed form " << r->model_waste << ", "
                        << r->mean_failures << " failures per history of " << r->captures << " captures");
      CHECK(r->mean_failures > 10);
      CHECK(r->captures % policy.persist_every == 0);
      CHECK(r->model_waste == tier_waste(row.cost, row.f, policy));
      CHECK(std::abs(r->mean_waste - r->model_waste) <= kAgreementSigmas * r->standard_error + kTierModelTolerance * r->model_waste);
      CHECK(r->agrees);
    }
  }
}

TEST_CASE("the tier simulation tells the closed form from one that forgets the persistent tier", "[planner][tiers][simulate]") {
  // Power losses roll back k captures on average half way: a model that charged them like crashes
  // (k = 1's lost work) would be rejected well beyond the tolerance.
  const TierCost cost{5, 5, 0, 50};
  const TierFailures f = tier_failures(10000, 0.5, 0, 0.5, 30, 30);
  const TierPolicy policy{300, 8};
  auto r = simulate_tiers(cost, f, policy, tier_histories(300, 5));
  REQUIRE(r.ok());
  CHECK(r->agrees);
  const double like_crashes = tier_waste(cost, tier_failures(10000, 1, 0, 0, 30, 30), policy);
  CHECK(std::abs(r->mean_waste - like_crashes) > 2 * r->tolerance);
}

TEST_CASE("a larger share of power losses wastes more", "[planner][tiers][simulate]") {
  const TierCost cost{5, 10, 20, 100};
  const TierPolicy policy{400, 8};
  double previous_closed = -1;
  std::optional<TierSimulationResult> previous;
  for (const double power : {0.0, 0.2, 0.5, 1.0}) {
    INFO("power loss share " << power);
    const TierFailures f = tier_failures(10000, 1 - power, 0, power, 30, 120);
    const double closed = tier_waste(cost, f, policy);
    CHECK(closed > previous_closed);
    auto r = simulate_tiers(cost, f, policy, tier_histories(200, 3));
    REQUIRE(r.ok());
    CHECK(r->agrees);
    if (previous) CHECK(r->mean_waste - previous->mean_waste > kAgreementSigmas * std::hypot(r->standard_error, previous->standard_error));
    previous_closed = closed;
    previous = *r;
  }
}

TEST_CASE("a node loss costs like a crash with replicas and like a power loss without", "[planner][tiers][simulate]") {
  const TierCost cost{5, 10, 20, 100};
  const TierPolicy policy{400, 6};
  // Kinds come from their own generator: the same seed gives the same failures, so the histories match exactly.
  const auto o = tier_histories(200, 9);
  auto crashes = simulate_tiers(cost, tier_failures(10000, 0.7, 0, 0.3, 30, 120), policy, o);
  auto replicated = simulate_tiers(cost, tier_failures(10000, 0.3, 0.4, 0.3, 30, 120, true), policy, o);
  auto powered = simulate_tiers(cost, tier_failures(10000, 0.3, 0, 0.7, 30, 120), policy, o);
  auto unreplicated = simulate_tiers(cost, tier_failures(10000, 0.3, 0.4, 0.3, 30, 120, false), policy, o);
  REQUIRE(crashes.ok());
  REQUIRE(replicated.ok());
  REQUIRE(powered.ok());
  REQUIRE(unreplicated.ok());
  CHECK(replicated->mean_waste == crashes->mean_waste);
  CHECK(unreplicated->mean_waste == powered->mean_waste);
  CHECK(unreplicated->mean_waste - replicated->mean_waste >
        kAgreementSigmas * std::hypot(unreplicated->standard_error, replicated->standard_error));
  CHECK(tier_waste(cost, tier_failures(10000, 0.3, 0.4, 0.3, 30, 120, true), policy) ==
        Approx(tier_waste(cost, tier_failures(10000, 0.7, 0, 0.3, 30, 120), policy)).epsilon(1e-15));
  CHECK(tier_waste(cost, tier_failures(10000, 0.3, 0.4, 0.3, 30, 120, false), policy) ==
        Approx(tier_waste(cost, tier_failures(10000, 0.3, 0, 0.7, 30, 120), policy)).epsilon(1e-15));
  // Crashes alone never restart from persistent storage while a capture is in memory no later than on disk.
  auto crash_only = simulate_tiers(cost, tier_failures(10000, 1, 0, 0, 30, 120), policy, o);
  REQUIRE(crash_only.ok());
  CHECK(crash_only->mean_failures > 10);
  CHECK(crash_only->mean_persistent_restarts == 0);
}

TEST_CASE("the tier optimum promotes less often as the promotion stall grows", "[planner][tiers]") {
  const TierFailures f = tier_failures(10000, 0.8, 0.1, 0.1, 30, 120);
  std::uint64_t previous = 0;
  std::vector<std::uint64_t> ks;
  for (const double persist_stall : {0.0, 1.0, 10.0, 30.0, 100.0}) {  // up to 1% of M: below the bound k x <= M
    INFO("persist stall " << persist_stall);
    const TierCost cost{1, 5, persist_stall, 60};
    auto o = tier_optimum(cost, f);
    REQUIRE(o.ok());
    CHECK(o->persist_every >= previous);
    previous = o->persist_every;
    ks.push_back(o->persist_every);
    // Continuous optimum of (1 - f_p + f_p k)(d_m + d_p / k): k = sqrt((1 - f_p) d_p / (f_p d_m)) (spec/PLAN.md 10.4).
    const double k_star = std::sqrt(0.9 * persist_stall / (0.1 * 1));
    CHECK(std::abs(static_cast<double>(o->persist_every) - std::max(1.0, k_star)) < 1.0);
  }
  CHECK(ks.front() == 1);  // a free promotion is taken at every capture
  CHECK(ks.back() > 10);
}

TEST_CASE("the tier optimum is the least closed-form waste over tau and k", "[planner][tiers]") {
  const TierCost cost{2, 10, 20, 120};
  const TierFailures f = tier_failures(10800, 0.6, 0.3, 0.1, 60, 600);
  auto o = tier_optimum(cost, f);
  REQUIRE(o.ok());
  CHECK(o->waste == tier_waste(cost, f, {o->memory_interval_seconds, o->persist_every}));
  for (std::uint64_t k = 1; k <= 40; ++k)
    for (double tau = 20; tau < 3000; tau *= 1.05) {
      INFO("tau " << tau << " k " << k);
      CHECK(o->waste <= tier_waste(cost, f, {tau, k}) + 1e-15);
    }
  // The interval of one k is the root of the derivative, within a dense scan's step.
  const std::uint64_t k = o->persist_every;
  double best_tau = 1, best = 2;
  for (double tau = 1; tau < 10800; tau *= 1.001)
    if (tier_waste(cost, f, {tau, k}) < best) best = tier_waste(cost, f, {tau, k}), best_tau = tau;
  CHECK(o->memory_interval_seconds == Approx(best_tau).epsilon(2e-3));
  // Without failures that need persistent storage, promotions only cost: k goes to the bound k x <= M.
  auto never = tier_optimum({2, 10, 20, 120}, tier_failures(10800, 1, 0, 0, 60, 600));
  REQUIRE(never.ok());
  CHECK(static_cast<double>(never->persist_every) *
            tier_seconds_per_capture({2, 10, 20, 120}, {never->memory_interval_seconds, never->persist_every}) <= 10800);
  CHECK(never->persist_every > 10);
  // Costs against which no policy wastes less than all of the time are unsupported, not a number.
  CHECK(tier_optimum({1000, 0, 0, 0}, tier_failures(1000, 0, 0, 1, 2000, 2000)).status().code() == ckpt::Code::unsupported);
}

TEST_CASE("plan_tiers fills in what is not given with the optimum given the rest", "[planner][tiers]") {
  const TierCost cost{2, 10, 20, 120};
  const TierFailures f = tier_failures(10800, 0.6, 0.3, 0.1, 60, 600);
  auto best = plan_tiers(cost, f);
  REQUIRE(best.ok());
  CHECK(best->policy.memory_interval_seconds == best->optimum.memory_interval_seconds);
  CHECK(best->policy.persist_every == best->optimum.persist_every);
  CHECK(best->waste == best->optimum.waste);
  CHECK(best->persistent_share == Approx(0.1));
  auto both = plan_tiers(cost, f, 600.0, std::uint64_t{3});
  REQUIRE(both.ok());
  CHECK(both->policy.memory_interval_seconds == 600);
  CHECK(both->policy.persist_every == 3);
  CHECK(both->waste == tier_waste(cost, f, {600, 3}));
  CHECK(both->waste > best->waste);
  CHECK(both->optimum.persist_every == best->optimum.persist_every);
  auto tau_only = plan_tiers(cost, f, 600.0);
  REQUIRE(tau_only.ok());
  CHECK(tau_only->policy.persist_every == tier_best_persist_every(cost, f, 600));
  for (std::uint64_t k = 1; k < 30; ++k) CHECK(tau_only->waste <= tier_waste(cost, f, {600, k}));
  auto k_only = plan_tiers(cost, f, std::nullopt, std::uint64_t{3});
  REQUIRE(k_only.ok());
  CHECK(k_only->policy.memory_interval_seconds == *tier_optimum_interval(cost, f, 3));
  for (const double factor : {0.9, 0.99, 1.01, 1.1}) CHECK(k_only->waste <= tier_waste(cost, f, {k_only->policy.memory_interval_seconds * factor, 3}));
}

TEST_CASE("a tier simulation is reproducible and bounded", "[planner][tiers][simulate]") {
  const TierCost cost{2, 10, 20, 120};
  const TierFailures f = tier_failures(10800, 0.6, 0.3, 0.1, 60, 600);
  const TierPolicy policy{300, 4};
  auto a = simulate_tiers(cost, f, policy, tier_histories(20, 42, 400));
  auto b = simulate_tiers(cost, f, policy, tier_histories(20, 42, 400));
  auto c = simulate_tiers(cost, f, policy, tier_histories(20, 43, 400));
  check_seeded(a, b, c);
  CHECK(a->captures == 400);
  // Captures per history: a multiple of k, given or chosen.
  CHECK(simulate_tiers(cost, f, policy, tier_histories(20, 42, 401)).status().code() == ckpt::Code::invalid_argument);
  auto automatic = simulate_tiers(cost, f, {300, 7}, tier_histories(20, 42));
  REQUIRE(automatic.ok());
  CHECK(automatic->captures % 7 == 0);
  CHECK(automatic->captures >= 1000);
  CHECK(simulate_tiers(cost, f, policy, tier_histories(1, 42)).status().code() == ckpt::Code::invalid_argument);
  // Promotions 100 MTBFs apart, with power losses: about e^100 attempts per capture.
  CHECK(simulate_tiers(cost, tier_failures(3600, 0, 0, 1, 0, 0), {3600, 100}, tier_histories(10, 1)).status().code() ==
        ckpt::Code::unsupported);
}

// The checkpointer's ring and busy rule (spec/PLAN.md 10.5.1), without failures: a capture every second of
// compute, every third promoted, each promotion durable 2.5 s after its stall. The capture two after a promoted
// one finds it still promoting: in a ring of 2 that slot is the promoted step's, in a ring of 3 it is not.
TEST_CASE("a promotion that outlasts the ring skips or delays the capture that would overwrite its slot; a skipped promotion "
          "passes to the next capture taken k or more after the last", "[planner][tiers][simulate]") {
  const TierCost cost{0.01, 0.1, 0, 2.5};
  const TierFailures none = tier_failures(1e12, 1, 0, 0, 1, 1);
  const TierPolicy policy{1, 3};
  constexpr std::uint64_t kCaptures = 999;
  struct Row {
    const char* what;
    std::uint64_t slots;
    bool skip;
    double skipped;  // per history
    double wall;     // of the one history, seconds
  };
  // Wall: 999 s of compute, a 0.01 s stall per capture taken, the last promotion's 2.5 s; waiting, the capture
  // after each of the 332 earlier promotions' next waits 0.5 s - 0.01 s for the slot (its due time is 2.01 s on).
  const std::vector<Row> rows = {
      {"unbounded, waiting: the closed form's timeline", 0, false, 0, 999 + 999 * 0.01 + 2.5},
      {"a ring of 3, skipping: the slot is free", 3, true, 0, 999 + 999 * 0.01 + 2.5},
      {"a ring of 2, skipping: one capture in three is not taken", 2, true, 332, 999 + 667 * 0.01 + 2.5},
      {"a ring of 2, waiting: that capture waits for the promotion", 2, false, 0, 999 + 999 * 0.01 + 332 * 0.49 + 2.5},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    TierSimulationOptions o = tier_histories(2, 5, kCaptures);
    o.memory_slots = row.slots, o.skip_when_busy = row.skip;
    auto r = simulate_tiers(cost, none, policy, o);
    REQUIRE(r.ok());
    CHECK(r->mean_failures == 0);
    CHECK(r->mean_skipped == row.skipped);
    CHECK(r->mean_promotions == 333);  // every multiple of 3: no skipped capture is one
    CHECK(r->mean_waste == Approx(1 - kCaptures / row.wall).epsilon(1e-9));
  }
  // Replication longer than the interval: skipping, every other capture is not taken; waiting, each waits.
  TierSimulationOptions o = tier_histories(2, 5, kCaptures);
  o.skip_when_busy = true;
  auto slow = simulate_tiers(TierCost{0.01, 1.5, 0, 0.5}, none, policy, o);
  REQUIRE(slow.ok());
  CHECK(slow->mean_skipped == 499);  // captures 2, 4, ..., 998; the last one waits
  // Only odd captures are taken, and promotions are 3 or more captures apart: 3, then each skipped or too close
  // multiple of 3 passes to the next odd capture 3 or more on (7, 11, 15, ...): every fourth, 250 in all.
  CHECK(slow->mean_promotions == 250);
  CHECK(simulate_tiers(cost, none, policy, [] {
          TierSimulationOptions one = tier_histories(2, 5, kCaptures);
          one.memory_slots = 1;
          return one;
        }()).status().code() == ckpt::Code::invalid_argument);
}

TEST_CASE("following the checkpointer's rules, a promotion a failure cut short passes to the first capture after the restart",
          "[planner][tiers][simulate]") {
  // Promotions of 2.5 s every third capture, a failure every 10 s on average, half of them crashes: many promotions
  // die with the job. A ring too large to pin anything and waiting captures leave one difference from the closed
  // form's timeline (spec/PLAN.md 10.5.1): the first capture after a restart is promoted when the last promotion
  // due before it never became durable, so more promotions begin and power losses go back less far.
  const TierCost cost{0.01, 0.1, 0, 2.5};
  const TierFailures failures = tier_failures(10, 0.5, 0, 0.5, 1, 1);
  TierSimulationOptions closed = tier_histories(1600, 11, 999), rules = tier_histories(1600, 11, 999);
  rules.memory_slots = 1000;
  auto plain = simulate_tiers(cost, failures, {1, 3}, closed);
  auto owed = simulate_tiers(cost, failures, {1, 3}, rules);
  REQUIRE(plain.ok());
  REQUIRE(owed.ok());
  CHECK(owed->mean_skipped == 0);
  CHECK(owed->mean_promotions > plain->mean_promotions);
  CHECK(plain->mean_waste - owed->mean_waste > kAgreementSigmas * std::hypot(plain->standard_error, owed->standard_error));
}

TEST_CASE("a skipped capture is work a failure loses: a ring of 2 wastes more than one of 3", "[planner][tiers][simulate]") {
  // Crashes every 60 s on average: the job goes back to the newest capture taken, a second further back
  // whenever the one before was skipped.
  const TierCost cost{0.01, 0.1, 0, 2.5};
  const TierFailures crashes = tier_failures(60, 1, 0, 0, 1, 1);
  TierSimulationOptions ring2 = tier_histories(400, 9, 999), ring3 = tier_histories(400, 9, 999);
  ring2.memory_slots = 2, ring3.memory_slots = 3;
  ring2.skip_when_busy = ring3.skip_when_busy = true;
  auto two = simulate_tiers(cost, crashes, {1, 3}, ring2);
  auto three = simulate_tiers(cost, crashes, {1, 3}, ring3);
  REQUIRE(two.ok());
  REQUIRE(three.ok());
  CHECK(two->mean_skipped > 0);
  CHECK(three->mean_skipped == 0);
  CHECK(two->mean_waste - three->mean_waste > kAgreementSigmas * std::hypot(two->standard_error, three->standard_error));
}
