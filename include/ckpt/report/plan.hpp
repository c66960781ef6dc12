// ckpt: the checkpoint interval plan as a report (spec/PLAN.md): what ckpt-plan decides from its
// options (where the MTBF, the GPU count and each policy's save cost come from, the sync and async
// plans or the tiered one, the Monte Carlo checks), and its JSON, text and SVG. The math is
// store/planner.hpp; ckpt-plan parses its options into a PlanRequest, calls plan_report and prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../store/planner.hpp"
#include "exit.hpp"
#include "json.hpp"

namespace ckpt::report {

// What was asked, as ckpt-plan's options give it: nullopt where an option was not given. The *_text
// fields are the numbers as typed, quoted where the output names its source ("--mtbf-hours 3").
struct PlanRequest {
  // Failures: exactly one of mtbf_hours, mtbf_seconds, gpu_failures_per_hour (with gpus), preset.
  std::optional<double> mtbf_hours, mtbf_seconds, gpu_failures_per_hour, gpus;
  std::string mtbf_hours_text, mtbf_seconds_text, gpu_failures_per_hour_text, gpus_text;
  std::optional<std::string> preset;
  double restart_seconds = 300;
  // Save costs: save_seconds (sync), async_stall_seconds with async_write_seconds, or store_dir.
  std::optional<double> save_seconds, async_stall_seconds, async_write_seconds;
  std::string store_dir;
  std::optional<double> interval_seconds;        // evaluate (and simulate) here, not at Daly's interval
  std::optional<std::uint64_t> simulate;         // Monte Carlo histories
  std::uint64_t seed = 1;
  // Tiered mode (spec/PLAN.md 10), selected by capture_stall_seconds.
  std::optional<double> capture_stall_seconds, replicate_seconds, persist_stall_seconds, persist_seconds;
  std::optional<double> memory_restart_seconds, persistent_restart_seconds;  // default restart_seconds
  std::optional<double> crash_share, node_loss_share, power_loss_share;
  bool no_replicas = false;
  std::optional<double> memory_interval_seconds;
  std::optional<std::uint64_t> persist_every;
  // The simulation's checkpointer rules (spec/PLAN.md 10.5.1): its ring (0: unbounded) and skips.
  std::uint64_t memory_slots = 0;
  bool skip_when_busy = false;
};

// One policy of the sync/async plan: its save cost and plan, or the reason it has none.
struct PlanPolicy {
  std::string name;  // "sync" or "async"
  std::optional<plan::SaveCost> cost;
  std::string source;       // where the cost came from
  std::string unavailable;  // why there is no cost, when there is none
  plan::PolicyPlan planned;
  std::optional<plan::SimulationResult> simulation;
};

// The tiered model's inputs, plan and optional simulation.
struct PlanTiers {
  plan::TierCost cost;
  plan::TierFailures failures;
  plan::TierPlan planned;
  std::optional<plan::TierSimulationResult> simulation;
  bool interval_given = false, persist_every_given = false;
  std::uint64_t memory_slots = 0;  // the simulation's rules (spec/PLAN.md 10.5.1)
  bool skip_when_busy = false;
  // The closed form models neither rule, so with either the simulation is not an agreement check.
  [[nodiscard]] bool follows_rules() const noexcept { return memory_slots != 0 || skip_when_busy; }
};

struct PlanReport {
  plan::FailureModel failures;
  std::string mtbf_source;
  const plan::Preset* preset = nullptr;
  double gpus = 1;
  std::string gpus_source;  // "--gpus", the preset's, or "" when unknown (then per GPU)
  std::optional<double> interval;
  json store = nullptr;              // the store the save costs came from (--store)
  std::vector<PlanPolicy> policies;  // sync, then async; empty in tiered mode
  std::optional<PlanTiers> tiers;    // the tiered mode's plan
  // 1 when a simulation disagreed with the model.
  [[nodiscard]] int exit_code() const noexcept;
};

// Fails with Code::invalid_argument on a request that is not a plan (the message names the option),
// and with the store's own error when --store cannot be read; both exit 2.
[[nodiscard]] Result<PlanReport> plan_report(const PlanRequest& request);

// ckpt-plan --json: one document (spec/PLAN.md), sync/async or tiered.
[[nodiscard]] json plan_json(const PlanReport& report);
// ckpt-plan's terminal output: the table, where each cost came from, the simulations.
[[nodiscard]] std::string plan_text(const PlanReport& report);
// ckpt-plan --plot: waste against interval, one curve per policy, Young and Daly marked (not tiered).
[[nodiscard]] std::string plan_svg(const PlanReport& report);

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/plan_inl.hpp"
#endif
