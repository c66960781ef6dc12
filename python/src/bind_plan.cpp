// ckpt._ckpt, the interval planner (spec/PLAN.md; spec/PYTHON.md 7): ckpt.plan's numbers, every one from
// planner.hpp. Python ints may be negative: such counts are refused here as the library refuses 0, not as
// a TypeError.
#include "bind_common.hpp"

#include <ckpt/store/planner.hpp>

namespace ckpt_bind {
namespace {

using namespace nb::literals;

// One policy at `interval`, or at the model's optimum (spec/PLAN.md 3.2, 3.4).
nb::dict plan_single(double stall, double background, double mtbf, double restart, std::optional<double> interval) {
  const ckpt::plan::SaveCost cost{stall, background};
  const ckpt::plan::FailureModel failures{mtbf, restart};
  const ckpt::plan::PolicyPlan p = take(ckpt::plan::plan_policy(cost, failures, 1.0, interval));
  const double tau = interval ? p.interval_seconds : p.optimum_seconds;
  nb::dict d;
  d["young_seconds"] = p.young_seconds;
  d["daly_seconds"] = p.daly_seconds;
  d["optimum_seconds"] = p.optimum_seconds;
  d["interval_seconds"] = tau;
  d["waste"] = interval ? p.waste : p.waste_at_optimum;
  d["overhead_ratio"] = ckpt::plan::overhead_ratio(cost, failures, tau);
  return d;
}

// Expected wall seconds of a job of `intervals` intervals (spec/PLAN.md 3.3).
double plan_job_seconds(double stall, double background, double mtbf, double restart, double interval, std::int64_t intervals) {
  const ckpt::plan::SaveCost cost{stall, background};
  const ckpt::plan::FailureModel failures{mtbf, restart};
  check(ckpt::plan::check_inputs(cost, failures));
  check(ckpt::plan::check_interval(interval));
  if (intervals < 1) fail("a job needs at least 1 interval, got " + std::to_string(intervals));
  return ckpt::plan::expected_job_seconds(cost, failures, interval, static_cast<std::uint64_t>(intervals));
}

// The tiered plan (spec/PLAN.md 10), and its Monte Carlo when `simulate` histories are asked for.
nb::dict plan_tiered(double capture_stall, double replicate_seconds, double persist_stall, double persist_seconds, double mtbf,
                     double memory_restart, double persistent_restart, double crash_share, double node_loss_share,
                     double power_loss_share, bool replicated, std::optional<double> memory_interval,
                     std::optional<std::int64_t> persist_every, std::int64_t simulate, std::int64_t seed,
                     std::int64_t memory_slots, const std::string& when_busy) {
  if (persist_every && *persist_every < 1) fail("persist_every must be at least 1, got " + std::to_string(*persist_every));
  if (simulate < 0) fail("simulate must be 0 or more histories, got " + std::to_string(simulate));
  if (seed < 0) fail("seed must be 0 or more, got " + std::to_string(seed));
  if (memory_slots < 0) fail("memory_slots must be 0 or more, got " + std::to_string(memory_slots));
  if (when_busy != "wait" && when_busy != "skip") fail("when_busy must be \"wait\" or \"skip\", got \"" + when_busy + "\"");
  const ckpt::plan::TierCost cost{capture_stall, replicate_seconds, persist_stall, persist_seconds};
  const ckpt::plan::TierFailures failures{mtbf, crash_share, node_loss_share, power_loss_share, memory_restart, persistent_restart, replicated};
  std::optional<std::uint64_t> k;
  if (persist_every) k = static_cast<std::uint64_t>(*persist_every);
  const ckpt::plan::TierPlan p = take(ckpt::plan::plan_tiers(cost, failures, memory_interval, k));
  std::optional<ckpt::plan::TierSimulationResult> sim;
  if (simulate > 0) {
    const ckpt::plan::TierSimulationOptions o{static_cast<std::uint64_t>(simulate), 0, static_cast<std::uint64_t>(seed),
                                              static_cast<std::uint64_t>(memory_slots), when_busy == "skip"};
    sim = take(without_gil([&] { return ckpt::plan::simulate_tiers(cost, failures, p.policy, o); }));
  }
  nb::dict d;
  d["memory_interval_seconds"] = p.policy.memory_interval_seconds;
  d["persist_every"] = p.policy.persist_every;
  d["waste"] = p.waste;
  d["optimum_memory_interval_seconds"] = p.optimum.memory_interval_seconds;
  d["optimum_persist_every"] = p.optimum.persist_every;
  d["waste_at_optimum"] = p.optimum.waste;
  d["simulated_waste"] = sim ? nb::object(nb::float_(sim->mean_waste)) : nb::none();
  d["standard_error"] = sim ? nb::object(nb::float_(sim->standard_error)) : nb::none();
  // Captures not taken per capture of the job (its n, spec/PLAN.md 10.5.1): the report's skips, predicted.
  d["simulated_skips_per_capture"] =
      sim ? nb::object(nb::float_(sim->mean_skipped / static_cast<double>(sim->captures))) : nb::none();
  return d;
}

}  // namespace

void bind_plan(nb::module_& m) {
  m.def("plan_single", &plan_single, "stall"_a, "background"_a, "mtbf"_a, "restart"_a, "interval"_a = nb::none());
  m.def("plan_job_seconds", &plan_job_seconds, "stall"_a, "background"_a, "mtbf"_a, "restart"_a, "interval"_a, "intervals"_a);
  m.def("plan_tiered", &plan_tiered, "capture_stall"_a, "replicate_seconds"_a, "persist_stall"_a, "persist_seconds"_a, "mtbf"_a,
        "memory_restart"_a, "persistent_restart"_a, "crash_share"_a, "node_loss_share"_a, "power_loss_share"_a, "replicated"_a,
        "memory_interval"_a, "persist_every"_a, "simulate"_a, "seed"_a, "memory_slots"_a, "when_busy"_a);
}

}  // namespace ckpt_bind
