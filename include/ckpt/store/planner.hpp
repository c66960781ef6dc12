// ckpt: how often to checkpoint (spec/PLAN.md). Pure math, no I/O: from what a save costs, how often
// the job fails and what a restart costs, the interval of Young and of Daly, the expected fraction of
// wall time wasted at any interval, and a seeded Monte Carlo of the same model to check it.
//
// The model (spec/PLAN.md 3), all times in seconds:
//   tau  compute time between checkpoints (the interval)
//   d    stall: training is blocked this long per checkpoint (a sync save's whole duration)
//   w    background write after the stall until the checkpoint is durable (async; 0 for sync)
//   M    mean time between failures of the job; failures are a Poisson process of rate 1/M
//   R    restart: from a failure until training runs again; a failure during it starts it over
// A failure rolls the job back to the last *durable* checkpoint. A checkpoint is durable w after its
// stall ends, so a failure during the background write loses that checkpoint too. The next save waits
// for the previous one to be durable, so durable points are L2 = max(tau, w) + d apart, and after a
// restart the first one needs L1 = tau + d + w of failure-free time. Each durable point is tau of
// useful work. In steady state the expected wall time per interval is
//   A(tau) = M * exp((R + min(tau, w)) / M) * (exp((max(tau, w) + d) / M) - 1)
// which for w = 0 is Daly's exact formula T_w = M e^{R/M} (e^{(tau+d)/M} - 1) T_s / tau per unit of
// work T_s (J. T. Daly, FGCS 22(3), 2006). waste(tau) = 1 - tau / A(tau).
//
// Tiers (spec/PLAN.md 10): a job captures into memory every tau of compute and promotes every k-th
// capture to persistent storage; failures are crashes, node losses and power losses in given shares.
// A first-order closed form of its waste, the (tau, k) that minimises it, and a seeded Monte Carlo
// of the two-level timeline, which is the ground truth the closed form is checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"

namespace ckpt::plan {

// What one checkpoint costs the job.
struct SaveCost {
  double stall_seconds = 0;       // d: training blocked per checkpoint (for a sync save, all of it)
  double background_seconds = 0;  // w: persisting after the stall until COMMIT is durable; 0 for sync
};

// How the job fails and comes back.
struct FailureModel {
  double mtbf_seconds = 0;     // M: mean time between interruptions of the whole job
  double restart_seconds = 0;  // R: failure to training again (reschedule, load the checkpoint)
};

[[nodiscard]] inline bool finite_at_least(double v, double lo) noexcept { return std::isfinite(v) && v >= lo; }

// Inputs the formulas are defined for: a stall of 0 would make the optimum interval 0 (spec/PLAN.md 2).
[[nodiscard]] inline Status check_inputs(const SaveCost& cost, const FailureModel& failures) {
  if (!finite_at_least(cost.stall_seconds, 0) || cost.stall_seconds == 0)
    return make_error(Code::invalid_argument, "save stall must be a positive number of seconds, got " + std::to_string(cost.stall_seconds));
  if (!finite_at_least(cost.background_seconds, 0))
    return make_error(Code::invalid_argument, "background write must be 0 or more seconds, got " + std::to_string(cost.background_seconds));
  if (!finite_at_least(failures.mtbf_seconds, 0) || failures.mtbf_seconds == 0)
    return make_error(Code::invalid_argument, "MTBF must be a positive number of seconds, got " + std::to_string(failures.mtbf_seconds));
  if (!finite_at_least(failures.restart_seconds, 0))
    return make_error(Code::invalid_argument, "restart cost must be 0 or more seconds, got " + std::to_string(failures.restart_seconds));
  return Status();
}

[[nodiscard]] inline Status check_interval(double interval_seconds) {
  if (!finite_at_least(interval_seconds, 0) || interval_seconds == 0)
    return make_error(Code::invalid_argument, "interval must be a positive number of seconds, got " + std::to_string(interval_seconds));
  return Status();
}

// --- MTBF ------------------------------------------------------------------------------------------

[[nodiscard]] inline Result<double> mtbf_from_seconds(double seconds) {
  if (!finite_at_least(seconds, 0) || seconds == 0)
    return make_error(Code::invalid_argument, "MTBF must be a positive number of seconds, got " + std::to_string(seconds));
  return seconds;
}

[[nodiscard]] inline Result<double> mtbf_from_hours(double hours) {
  if (!finite_at_least(hours, 0) || hours == 0)
    return make_error(Code::invalid_argument, "MTBF must be a positive number of hours, got " + std::to_string(hours));
  return hours * 3600.0;
}

// Independent GPUs failing at r per hour each: the job fails at N r per hour, so M = 1 / (N r).
[[nodiscard]] inline Result<double> mtbf_from_gpu_rate(double gpus, double failures_per_gpu_hour) {
  if (!finite_at_least(gpus, 1))
    return make_error(Code::invalid_argument, "GPU count must be at least 1, got " + std::to_string(gpus));
  if (!finite_at_least(failures_per_gpu_hour, 0) || failures_per_gpu_hour == 0)
    return make_error(Code::invalid_argument,
                      "GPU failure rate must be a positive number per hour, got " + std::to_string(failures_per_gpu_hour));
  return 3600.0 / (gpus * failures_per_gpu_hour);
}

// A published failure record: so many unexpected interruptions in so many days on so many GPUs.
struct Preset {
  std::string_view name;
  double interruptions = 0, days = 0, gpus = 0;
  std::string_view source;
  [[nodiscard]] constexpr double job_mtbf_hours() const noexcept { return days * 24.0 / interruptions; }
  [[nodiscard]] constexpr double failures_per_gpu_hour() const noexcept { return interruptions / (days * 24.0 * gpus); }
};

// Llama 3 405B pre-training: 419 unexpected interruptions in a 54-day snapshot on 16,384 H100s
// (Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.4).
inline constexpr Preset kPresets[] = {
    {"llama3-405b", 419, 54, 16384,
     "Llama 3 405B pre-training: 419 unexpected interruptions in 54 days on 16,384 GPUs (The Llama 3 Herd of Models, 2024, 3.3.4)"},
};

[[nodiscard]] inline const Preset* find_preset(std::string_view name) noexcept {
  for (const auto& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

// The preset's per-GPU rate on `gpus` GPUs; its own GPU count when gpus is not given.
[[nodiscard]] inline Result<double> preset_mtbf_seconds(const Preset& preset, std::optional<double> gpus) {
  return mtbf_from_gpu_rate(gpus.value_or(preset.gpus), preset.failures_per_gpu_hour());
}

// --- Optimum intervals -------------------------------------------------------------------------------

// Young (1974): first-order optimum of compute time between checkpoints.
[[nodiscard]] inline double young_interval(double stall_seconds, double mtbf_seconds) {
  return std::sqrt(2.0 * stall_seconds * mtbf_seconds);
}

// Daly (2006) eq. 37: higher-order optimum; for d >= 2M checkpoint once per MTBF.
[[nodiscard]] inline double daly_interval(double stall_seconds, double mtbf_seconds) {
  if (stall_seconds >= 2.0 * mtbf_seconds) return mtbf_seconds;
  const double x = stall_seconds / (2.0 * mtbf_seconds);
  return std::sqrt(2.0 * stall_seconds * mtbf_seconds) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - stall_seconds;
}

// --- Expected waste ----------------------------------------------------------------------------------

// Expected wall seconds per interval of useful work in steady state, A(tau) in the header comment.
[[nodiscard]] inline double expected_seconds_per_interval(const SaveCost& cost, const FailureModel& failures, double interval) {
  const double m = failures.mtbf_seconds;
  const double between_durable = std::max(interval, cost.background_seconds) + cost.stall_seconds;  // L2
  const double extra_after_restart = std::min(interval, cost.background_seconds);                 // L1 - L2
  // expm1: at tau + d << M the difference e^x - 1 would lose most of its digits.
  return m * std::exp((failures.restart_seconds + extra_after_restart) / m) * std::expm1(between_durable / m);
}

// Wall time over useful time; 1 / (1 - waste).
[[nodiscard]] inline double overhead_ratio(const SaveCost& cost, const FailureModel& failures, double interval) {
  return expected_seconds_per_interval(cost, failures, interval) / interval;
}

// Fraction of wall time not spent on work that is kept: stalls, rework, restarts.
[[nodiscard]] inline double waste_fraction(const SaveCost& cost, const FailureModel& failures, double interval) {
  return 1.0 - 1.0 / overhead_ratio(cost, failures, interval);
}

// What restarts alone cost at any interval: the limit of waste as d, w and tau go to 0.
[[nodiscard]] inline double restart_waste_floor(const FailureModel& failures) {
  return -std::expm1(-failures.restart_seconds / failures.mtbf_seconds);
}

// Expected wall seconds of a whole job of `intervals` intervals that starts with nothing in flight and
// ends when its last checkpoint is durable: the first durable point needs L1 without a restart before
// it, every later one is A(tau) (spec/PLAN.md 3.3). This is what simulate() estimates.
[[nodiscard]] inline double expected_job_seconds(const SaveCost& cost, const FailureModel& failures, double interval,
                                                 std::uint64_t intervals) {
  const double m = failures.mtbf_seconds;
  const double first_extra = m * std::exp(failures.restart_seconds / m) *
                             std::expm1(std::min(interval, cost.background_seconds) / m);
  return static_cast<double>(intervals) * expected_seconds_per_interval(cost, failures, interval) + first_extra;
}

// The interval that minimises the model's waste, exactly (spec/PLAN.md 3.4). Where tau >= w the ratio
// is e^{(R+w)/M} (e^{(tau+d)/M} - 1) / tau, whose derivative vanishes where
// e^{(tau+d)/M} (1 - tau/M) = 1. Divided by e^{(tau+d)/M} (no overflow for a huge d) that is
// h(tau) = 1 - e^{-(tau+d)/M} - tau/M = 0; h(0) > 0 > h(M) and h' < 0, so bisection finds the one root.
// Where tau < w the ratio is a constant times e^{tau/M} / tau, which falls until tau = M: the optimum is
// then w (or M, when w > M).
[[nodiscard]] inline double model_optimum_interval(const SaveCost& cost, const FailureModel& failures) {
  const double m = failures.mtbf_seconds, d = cost.stall_seconds;
  auto h = [&](double tau) { return -std::expm1(-(tau + d) / m) - tau / m; };
  double lo = 0, hi = m;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * m; ++i) {
    const double mid = (lo + hi) / 2;
    (h(mid) > 0 ? lo : hi) = mid;
  }
  const double root = (lo + hi) / 2;
  return root >= cost.background_seconds ? root : std::min(cost.background_seconds, m);
}

struct CurvePoint {
  double interval_seconds = 0;
  double waste_fraction = 0;
};

// waste(tau) at `points` intervals spaced evenly on a log scale from lo to hi (for a plot).
[[nodiscard]] inline std::vector<CurvePoint> waste_curve(const SaveCost& cost, const FailureModel& failures, double lo_seconds,
                                                         double hi_seconds, std::size_t points) {
  std::vector<CurvePoint> curve;
  if (points == 0 || !(lo_seconds > 0) || !(hi_seconds >= lo_seconds)) return curve;
  curve.reserve(points);
  const double step = points > 1 ? std::log(hi_seconds / lo_seconds) / static_cast<double>(points - 1) : 0.0;
  for (std::size_t i = 0; i < points; ++i) {
    const double tau = lo_seconds * std::exp(step * static_cast<double>(i));
    curve.push_back({tau, waste_fraction(cost, failures, tau)});
  }
  return curve;
}

// Lost GPU-hours per day: the wasted fraction of every GPU's day.
[[nodiscard]] inline double lost_gpu_hours_per_day(double waste, double gpus) { return waste * 24.0 * gpus; }

// --- One policy, planned ------------------------------------------------------------------------------

struct PolicyPlan {
  SaveCost cost;
  double young_seconds = 0, daly_seconds = 0;  // the formulas, with d = the stall
  double optimum_seconds = 0;                  // the model's own minimum (numerical)
  double interval_seconds = 0;                 // where it is evaluated: Daly's unless asked
  double waste_at_young = 0, waste_at_daly = 0, waste_at_optimum = 0, waste = 0;  // fractions
  double lost_gpu_hours_per_day = 0;           // at interval_seconds
  bool save_waits_for_write = false;           // interval < w: each save waits for the previous write
};

// The background write multiplies A(tau) by e^{w/M} while tau >= w, so it does not move the optimum:
// Young and Daly take the stall alone (spec/PLAN.md 3.2).
[[nodiscard]] inline Result<PolicyPlan> plan_policy(const SaveCost& cost, const FailureModel& failures, double gpus,
                                                    std::optional<double> interval = std::nullopt) {
  CKPT_TRY(check_inputs(cost, failures));
  if (interval) CKPT_TRY(check_interval(*interval));
  if (!finite_at_least(gpus, 1)) return make_error(Code::invalid_argument, "GPU count must be at least 1, got " + std::to_string(gpus));
  PolicyPlan p;
  p.cost = cost;
  p.young_seconds = young_interval(cost.stall_seconds, failures.mtbf_seconds);
  p.daly_seconds = daly_interval(cost.stall_seconds, failures.mtbf_seconds);
  p.optimum_seconds = model_optimum_interval(cost, failures);
  p.interval_seconds = interval.value_or(p.daly_seconds);
  p.waste_at_young = waste_fraction(cost, failures, p.young_seconds);
  p.waste_at_daly = waste_fraction(cost, failures, p.daly_seconds);
  p.waste_at_optimum = waste_fraction(cost, failures, p.optimum_seconds);
  p.waste = waste_fraction(cost, failures, p.interval_seconds);
  p.lost_gpu_hours_per_day = lost_gpu_hours_per_day(p.waste, gpus);
  p.save_waits_for_write = p.interval_seconds < cost.background_seconds;
  return p;
}

// A sync save of what an async one writes: the caller is blocked for the whole persist.
[[nodiscard]] inline SaveCost sync_equivalent(const SaveCost& async_cost) {
  return {async_cost.stall_seconds + async_cost.background_seconds, 0.0};
}

// --- Save costs measured by a store ---------------------------------------------------------------

// One recorded save, in seconds (ckpt::SaveRecord's stall_ns and persist_ns).
struct SaveSample {
  double stall_seconds = 0;    // the caller was blocked this long
  double persist_seconds = 0;  // from the start of the save to COMMIT durable
  bool async = false;
};

struct SaveCostEstimate {
  std::optional<SaveCost> sync;   // median persist time: a sync save blocks for all of it
  std::optional<SaveCost> async;  // from async saves, or from a known stall; unset when unknown
  std::size_t samples = 0, async_samples = 0;  // how many of the recent records were used
};

[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// Medians of the last `recent` records: a median, so one save behind a slow disk flush does not move the
// plan. An async stall is only known from async records, or when the caller says what it would be.
[[nodiscard]] inline Result<SaveCostEstimate> estimate_save_costs(const std::vector<SaveSample>& samples,
                                                              std::optional<double> known_async_stall = std::nullopt,
                                                              std::size_t recent = 32) {
  if (samples.empty()) return make_error(Code::not_found, "no recorded saves");
  if (known_async_stall && !(finite_at_least(*known_async_stall, 0) && *known_async_stall > 0))
    return make_error(Code::invalid_argument, "async stall must be a positive number of seconds");
  const std::size_t first = samples.size() > recent && recent > 0 ? samples.size() - recent : 0;
  std::vector<double> persist, async_stall, async_background, async_persist;
  for (std::size_t i = first; i < samples.size(); ++i) {
    const SaveSample& s = samples[i];
    persist.push_back(s.persist_seconds);
    if (s.async) {
      async_stall.push_back(s.stall_seconds);
      async_background.push_back(std::max(0.0, s.persist_seconds - s.stall_seconds));
      async_persist.push_back(s.persist_seconds);
    }
  }
  SaveCostEstimate e;
  e.samples = persist.size();
  e.async_samples = async_stall.size();
  e.sync = SaveCost{median(persist), 0.0};
  if (known_async_stall) {
    const double p = median(async_persist.empty() ? persist : async_persist);
    e.async = SaveCost{*known_async_stall, std::max(0.0, p - *known_async_stall)};
  } else if (!async_stall.empty()) {
    e.async = SaveCost{median(async_stall), median(async_background)};
  }
  return e;
}

// --- Monte Carlo -------------------------------------------------------------------------------------

struct SimulationOptions {
  std::uint64_t histories = 1000;  // independent failure/restart histories, at least 2
  std::uint64_t intervals = 0;     // intervals of useful work per history; 0: enough for ~50 failures
  std::uint64_t seed = 1;
};

struct SimulationResult {
  std::uint64_t histories = 0, intervals = 0, seed = 0;
  double mean_waste = 0;        // 1 - work / mean wall time
  double standard_error = 0;    // of mean_waste (delta method on the mean wall time)
  double model_waste = 0;       // the same quantity from expected_job_seconds()
  double mean_failures = 0;     // per history, restarts that failed included
  double tolerance = 0;         // kAgreementSigmas standard errors
  bool agrees = false;          // |mean_waste - model_waste| <= tolerance
};

// The simulation and the model agree when they differ by at most this many standard errors
// (a two-sided 4-sigma band: a correct model fails it about once in 16,000 seeds).
inline constexpr double kAgreementSigmas = 4.0;

// Intervals per history when not given: ~50 failures each, at least 1000 intervals, and at most
// 2e8 simulated intervals in all so a tiny interval cannot run for hours.
[[nodiscard]] inline std::uint64_t auto_intervals(const SaveCost& cost, const FailureModel& failures, double interval,
                                                  std::uint64_t histories) {
  const double per_failure = failures.mtbf_seconds / (std::max(interval, cost.background_seconds) + cost.stall_seconds);
  double n = std::ceil(50.0 * per_failure);
  n = std::min(n, 2e8 / static_cast<double>(std::max<std::uint64_t>(histories, 1)));
  return static_cast<std::uint64_t>(std::max(1000.0, std::min(n, 1e6)));
}

// Exponential with the given mean by inversion: the same draws from a seed with any standard library
// (std::exponential_distribution's algorithm is not specified).
[[nodiscard]] inline double exponential_draw(std::mt19937_64& rng, double mean) {
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  return -mean * std::log1p(-u);
}

// Wall seconds of one history: the timeline itself (compute, stall, background write, durable point,
// failure back to the last durable checkpoint, restart), not the closed form it is checked against.
[[nodiscard]] inline double simulate_history(const SaveCost& cost, const FailureModel& failures, double interval,
                                             std::uint64_t intervals, std::mt19937_64& rng, std::uint64_t& failure_count) {
  const double d = cost.stall_seconds, w = cost.background_seconds, m = failures.mtbf_seconds, r = failures.restart_seconds;
  double now = 0;
  std::uint64_t durable = 0;  // checkpoints durable; the job's state at start counts as durable
  bool restarting = false;
  while (durable < intervals) {
    if (restarting) {
      for (;;) {  // a failure during the restart starts the restart over
        const double next = exponential_draw(rng, m);
        if (next >= r) break;
        now += next;
        ++failure_count;
      }
      now += r;
    }
    // Training resumes from checkpoint `durable` with nothing in flight.
    const double failure_at = now + exponential_draw(rng, m);
    double resume = now;         // end of the last stall: compute of the next interval starts here
    double previous_durable = now;
    bool failed = false;
    for (std::uint64_t k = durable + 1; k <= intervals; ++k) {
      const double stall_start = std::max(resume + interval, previous_durable);  // wait for the previous write
      const double stall_end = stall_start + d;
      const double durable_at = stall_end + w;
      if (durable_at > failure_at) {  // checkpoint k (in flight or not yet taken) is lost
        failed = true;
        break;
      }
      durable = k;
      resume = stall_end;
      previous_durable = durable_at;
      if (k == intervals) now = durable_at;
    }
    if (failed) {
      now = failure_at;
      ++failure_count;
      restarting = true;
    }
  }
  return now;
}

// Seeded Monte Carlo of `histories` jobs of `intervals` intervals each, at one interval.
[[nodiscard]] inline Result<SimulationResult> simulate(const SaveCost& cost, const FailureModel& failures, double interval,
                                                       const SimulationOptions& options) {
  CKPT_TRY(check_inputs(cost, failures));
  CKPT_TRY(check_interval(interval));
  if (options.histories < 2)
    return make_error(Code::invalid_argument, "a simulation needs at least 2 histories for a standard error");
  SimulationResult out;
  out.histories = options.histories;
  out.seed = options.seed;
  out.intervals = options.intervals != 0 ? options.intervals : auto_intervals(cost, failures, interval, options.histories);
  // Each interval takes about e^{(R + L1)/M} attempts: refuse a simulation that would run for hours.
  const double l1 = interval + cost.stall_seconds + cost.background_seconds;
  const double attempts = static_cast<double>(out.histories) * static_cast<double>(out.intervals) *
                          std::exp(std::min(700.0, (failures.restart_seconds + l1) / failures.mtbf_seconds));
  if (attempts > 2e9)
    return make_error(Code::unsupported, "simulation would take about " + std::to_string(attempts) +
                                             " segment attempts (over 2e9): fewer histories, or an interval and save cost "
                                             "well below the MTBF");
  std::mt19937_64 rng(options.seed);
  const double work = static_cast<double>(out.intervals) * interval;
  // Welford's running mean and variance of wall/work per history: the ratio of means is unbiased for
  // E[wall]/work, which is what the model gives; a mean of per-history waste would carry Jensen bias.
  double mean = 0, m2 = 0;
  std::uint64_t total_failures = 0;
  for (std::uint64_t h = 0; h < out.histories; ++h) {
    const double ratio = simulate_history(cost, failures, interval, out.intervals, rng, total_failures) / work;
    const double delta = ratio - mean;
    mean += delta / static_cast<double>(h + 1);
    m2 += delta * (ratio - mean);
  }
  const double n = static_cast<double>(out.histories);
  const double ratio_error = std::sqrt(m2 / (n - 1.0) / n);
  out.mean_waste = 1.0 - 1.0 / mean;
  out.standard_error = ratio_error / (mean * mean);
  out.model_waste = 1.0 - work / expected_job_seconds(cost, failures, interval, out.intervals);
  out.mean_failures = static_cast<double>(total_failures) / n;
  out.tolerance = kAgreementSigmas * out.standard_error;
  out.agrees = std::abs(out.mean_waste - out.model_waste) <= out.tolerance;
  return out;
}


// --- Tiers: memory captures, every k-th promoted to persistent storage (spec/PLAN.md 10) ---------

// What a capture and a promotion cost the job (spec/PLAN.md 10.1).
struct TierCost {
  double capture_stall_seconds = 0;  // d_m: training blocked per capture
  double replicate_seconds = 0;      // w_m: after the stall until the capture is held on its peers (memory-durable)
  double persist_stall_seconds = 0;  // d_p: extra blocking at a promoted capture
  double persist_seconds = 0;        // w_p: after a promoted capture's stall until its persistent copy is durable
};

// How the job fails, and which tier serves each kind of failure (spec/PLAN.md 10.1).
struct TierFailures {
  double mtbf_seconds = 0;                // M: all kinds together
  double crash_share = 1;                 // c: the processes die, host memory survives
  double node_loss_share = 0;             // n: one node and its memory are gone
  double power_loss_share = 0;            // p: every node's memory is gone
  double memory_restart_seconds = 0;      // R_m: restart and load when memory serves
  double persistent_restart_seconds = 0;  // R_p: restart and load when only persistent storage serves
  bool replicated = true;                 // a node loss is served from a peer's memory
};

struct TierPolicy {
  double memory_interval_seconds = 0;  // tau: compute between captures
  std::uint64_t persist_every = 1;     // k: every k-th capture (by index since the job's start) is promoted
};

// The shares must sum to 1 within this (spec/PLAN.md 10.1).
inline constexpr double kShareSumTolerance = 1e-9;
// The optimum's search over k stops here, or earlier where k captures outlast the MTBF (spec/PLAN.md 10.4).
inline constexpr std::uint64_t kMaxPersistEvery = 10000;

[[nodiscard]] inline Status check_tier_inputs(const TierCost& cost, const TierFailures& failures) {
  struct Seconds {
    const char* what;
    double value;
    bool positive;
  };
  for (const Seconds& s : {Seconds{"capture stall", cost.capture_stall_seconds, true},
                           Seconds{"replicate time", cost.replicate_seconds, false},
                           Seconds{"persist stall", cost.persist_stall_seconds, false},
                           Seconds{"persist time", cost.persist_seconds, false},
                           Seconds{"MTBF", failures.mtbf_seconds, true},
                           Seconds{"memory restart", failures.memory_restart_seconds, false},
                           Seconds{"persistent restart", failures.persistent_restart_seconds, false}})
    if (!finite_at_least(s.value, 0) || (s.positive && s.value == 0))
      return make_error(Code::invalid_argument, std::string(s.what) + (s.positive ? " must be a positive number of seconds, got "
                                                                                  : " must be 0 or more seconds, got ") +
                                                    std::to_string(s.value));
  struct Share {
    const char* what;
    double value;
  };
  for (const Share& s : {Share{"crash", failures.crash_share}, Share{"node loss", failures.node_loss_share},
                         Share{"power loss", failures.power_loss_share}})
    if (!finite_at_least(s.value, 0) || s.value > 1)
      return make_error(Code::invalid_argument, std::string(s.what) + " share must be in [0, 1], got " + std::to_string(s.value));
  const double sum = failures.crash_share + failures.node_loss_share + failures.power_loss_share;
  if (std::abs(sum - 1.0) > kShareSumTolerance)
    return make_error(Code::invalid_argument, "crash, node loss and power loss shares must sum to 1, got " + std::to_string(sum));
  return Status();
}

[[nodiscard]] inline Status check_tier_policy(const TierPolicy& policy) {
  if (!finite_at_least(policy.memory_interval_seconds, 0) || policy.memory_interval_seconds == 0)
    return make_error(Code::invalid_argument,
                      "memory interval must be a positive number of seconds, got " + std::to_string(policy.memory_interval_seconds));
  if (policy.persist_every == 0) return make_error(Code::invalid_argument, "persist_every must be at least 1, got 0");
  return Status();
}

// f_p: the share of failures that only the persistent tier serves (spec/PLAN.md 10.3).
[[nodiscard]] inline double persistent_share(const TierFailures& failures) noexcept {
  return failures.power_loss_share + (failures.replicated ? 0.0 : failures.node_loss_share);
}

// True for a failure kind (a uniform draw against the shares) that needs the persistent tier (10.2).
[[nodiscard]] inline bool needs_persistent(const TierFailures& failures, double u) noexcept {
  if (u < failures.crash_share) return false;
  if (u < failures.crash_share + failures.node_loss_share) return !failures.replicated;
  return true;
}

// x: mean wall seconds per capture without failures, a k-th of the promotion stall in each; a capture
// waits for the previous one's replication (tau < w_m) and a promotion for the previous one (k x < w_p) (10.3).
[[nodiscard]] inline double tier_seconds_per_capture(const TierCost& cost, const TierPolicy& policy) noexcept {
  const double k = static_cast<double>(policy.persist_every);
  const double x = std::max(policy.memory_interval_seconds, cost.replicate_seconds) + cost.capture_stall_seconds +
                   cost.persist_stall_seconds / k;
  return std::max(x, cost.persist_seconds / k);
}

// E[cost]: restart plus lost work of one failure, averaged over the kinds (spec/PLAN.md 10.3).
[[nodiscard]] inline double tier_failure_cost(const TierCost& cost, const TierFailures& failures, const TierPolicy& policy) noexcept {
  const double fp = persistent_share(failures), x = tier_seconds_per_capture(cost, policy);
  const double k = static_cast<double>(policy.persist_every);
  return (1 - fp) * (failures.memory_restart_seconds + x / 2 + cost.replicate_seconds) +
         fp * (failures.persistent_restart_seconds + k * x / 2 + cost.persist_seconds);
}

// First-order waste, 1 - (tau/x)(1 - E[cost]/M): valid while costs, x and k x are well below M (10.3).
[[nodiscard]] inline double tier_waste(const TierCost& cost, const TierFailures& failures, const TierPolicy& policy) noexcept {
  const double x = tier_seconds_per_capture(cost, policy);
  return 1.0 - policy.memory_interval_seconds / x * (1.0 - tier_failure_cost(cost, failures, policy) / failures.mtbf_seconds);
}

// The tau that minimises tier_waste at one k, in closed form (10.4): with x = tau + D the waste is
// 1 - (1 - D/x)(A - B x), least at x = sqrt(A D / B), clamped to M. Empty where A <= B D: no
// interval gives a waste below 1 at this k.
[[nodiscard]] inline std::optional<double> tier_optimum_interval(const TierCost& cost, const TierFailures& failures,
                                                                 std::uint64_t persist_every) {
  const double m = failures.mtbf_seconds, fp = persistent_share(failures), k = static_cast<double>(persist_every);
  const double a = 1.0 - ((1 - fp) * (failures.memory_restart_seconds + cost.replicate_seconds) +
                          fp * (failures.persistent_restart_seconds + cost.persist_seconds)) / m;
  const double b = ((1 - fp) + fp * k) / (2 * m);
  const double d = cost.capture_stall_seconds + cost.persist_stall_seconds / k;
  if (!(a > b * d)) return std::nullopt;
  // Below w_m, or below w_p/k - D, a shorter tau only waits longer for the same x: no better (10.4).
  const double floor = std::max(cost.replicate_seconds, cost.persist_seconds / k - d);
  return std::min(std::max(std::sqrt(a * d / b) - d, floor), m);
}

// The k with the least tier_waste at a given tau: k = 1, 2, ... while k x <= M, at most kMaxPersistEvery (10.4).
[[nodiscard]] inline std::uint64_t tier_best_persist_every(const TierCost& cost, const TierFailures& failures, double memory_interval) {
  TierPolicy policy{memory_interval, 1};
  std::uint64_t best = 1;
  double best_waste = tier_waste(cost, failures, policy);
  for (policy.persist_every = 2; policy.persist_every <= kMaxPersistEvery; ++policy.persist_every) {
    if (static_cast<double>(policy.persist_every) * tier_seconds_per_capture(cost, policy) > failures.mtbf_seconds) break;
    const double waste = tier_waste(cost, failures, policy);
    if (waste < best_waste) {
      best_waste = waste;
      best = policy.persist_every;
    }
  }
  return best;
}

struct TierOptimum {
  double memory_interval_seconds = 0;
  std::uint64_t persist_every = 1;
  double waste = 0;  // tier_waste at them
};

// The (tau, k) with the least tier_waste: the closed-form tau of each k = 1, 2, ... while k x <= M, at
// most kMaxPersistEvery; the smallest k on a tie (10.4). Code::unsupported where no (tau, k) wastes less than all.
[[nodiscard]] inline Result<TierOptimum> tier_optimum(const TierCost& cost, const TierFailures& failures) {
  CKPT_TRY(check_tier_inputs(cost, failures));
  std::optional<TierOptimum> best;
  for (std::uint64_t k = 1; k <= kMaxPersistEvery; ++k) {
    const std::optional<double> tau = tier_optimum_interval(cost, failures, k);
    const TierPolicy policy{tau.value_or(0.0), k};
    if (k > 1 && static_cast<double>(k) * tier_seconds_per_capture(cost, policy) > failures.mtbf_seconds) break;
    if (!tau) continue;
    const double waste = tier_waste(cost, failures, policy);
    if (!best || waste < best->waste) best = TierOptimum{*tau, k, waste};
  }
  if (!best)
    return make_error(Code::unsupported, "restart, stall and write times are too large against the MTBF of " +
                                             std::to_string(failures.mtbf_seconds) +
                                             " s: the first-order tier model has no policy wasting less than all of the time");
  return *best;
}

struct TierPlan {
  TierPolicy policy;     // as given, or the optimum of what was not given
  double waste = 0;      // tier_waste at policy
  TierOptimum optimum;   // over both tau and k
  double persistent_share = 0;
};

// Plans at the given tau and k; one not given is the optimum given the other, neither: the optimum (10.4).
[[nodiscard]] inline Result<TierPlan> plan_tiers(const TierCost& cost, const TierFailures& failures,
                                                 std::optional<double> memory_interval = std::nullopt,
                                                 std::optional<std::uint64_t> persist_every = std::nullopt) {
  CKPT_TRY(check_tier_inputs(cost, failures));
  if (memory_interval || persist_every)
    CKPT_TRY(check_tier_policy({memory_interval.value_or(1.0), persist_every.value_or(1)}));
  TierPlan plan;
  CKPT_ASSIGN_OR_RETURN(plan.optimum, tier_optimum(cost, failures));
  plan.persistent_share = persistent_share(failures);
  if (memory_interval && persist_every) {
    plan.policy = {*memory_interval, *persist_every};
  } else if (memory_interval) {
    plan.policy = {*memory_interval, tier_best_persist_every(cost, failures, *memory_interval)};
  } else if (persist_every) {
    const std::optional<double> tau = tier_optimum_interval(cost, failures, *persist_every);
    if (!tau)
      return make_error(Code::unsupported, "persist_every " + std::to_string(*persist_every) +
                                               ": the first-order tier model has no memory interval wasting less than all of the time");
    plan.policy = {*tau, *persist_every};
  } else {
    plan.policy = {plan.optimum.memory_interval_seconds, plan.optimum.persist_every};
  }
  plan.waste = tier_waste(cost, failures, plan.policy);
  return plan;
}

struct TierSimulationOptions {
  std::uint64_t histories = 1000;  // independent histories, at least 2
  std::uint64_t captures = 0;      // captures per history, a multiple of persist_every; 0: enough for ~50 failures
  std::uint64_t seed = 1;
  // The checkpointer's own rules, which the closed form leaves out (spec/PLAN.md 10.5.1): its ring of memory
  // slots (spec/TIERS.md 2.1; 0: unbounded, else at least 2) and what a capture due while busy does (4.6).
  std::uint64_t memory_slots = 0;
  bool skip_when_busy = false;
};

struct TierSimulationResult {
  std::uint64_t histories = 0, captures = 0, seed = 0;
  double mean_waste = 0;              // 1 - work / mean wall time (ratio of means, spec/PLAN.md 6.3)
  double standard_error = 0;          // of mean_waste
  double model_waste = 0;             // tier_waste at the same policy
  double mean_failures = 0;           // per history, failures during restarts included
  double mean_persistent_restarts = 0;  // per history, restarts that loaded from persistent storage
  double mean_skipped = 0;            // per history, captures due while busy and not taken (10.5.1)
  double mean_promotions = 0;         // per history, promotions begun (with the rules, some passed on: 10.5.1)
  double tolerance = 0;               // kAgreementSigmas standard errors + kTierModelTolerance * model_waste
  bool agrees = false;                // |mean_waste - model_waste| <= tolerance
};

// The closed form is first order: it agrees with the simulation within this share of its waste, on
// top of the 4 standard errors, while every cost is at most 1% of M (measured: spec/PLAN.md 10.6).
inline constexpr double kTierModelTolerance = 0.1;
// The failure kinds are drawn from a second generator, seeded with seed ^ this (spec/PLAN.md 10.5).
inline constexpr std::uint64_t kTierKindSeedMix = 0x9E3779B97F4A7C15ull;

// Captures per history when not given: ~50 failures each, at least 1000, at most 10^6 and 2e8 in all,
// rounded up to a multiple of persist_every (spec/PLAN.md 10.5).
[[nodiscard]] inline std::uint64_t auto_captures(const TierCost& cost, const TierFailures& failures, const TierPolicy& policy,
                                                 std::uint64_t histories) {
  const double span = std::max(policy.memory_interval_seconds, cost.replicate_seconds) + cost.capture_stall_seconds +
                      cost.persist_stall_seconds / static_cast<double>(policy.persist_every);
  double n = std::ceil(50.0 * failures.mtbf_seconds / span);
  n = std::min(n, 2e8 / static_cast<double>(std::max<std::uint64_t>(histories, 1)));
  const auto captures = static_cast<std::uint64_t>(std::max(1000.0, std::min(n, 1e6)));
  const std::uint64_t k = policy.persist_every;
  return (captures + k - 1) / k * k;
}

// Wall seconds of one history of `captures` captures: the two-level timeline of spec/PLAN.md 10.2
// walked event by event, ending when the last capture's persistent copy is durable. Failure gaps
// come from `gaps` in the order simulate_history() draws them; kinds from `kinds`. With a ring or
// skips (10.5.1) a capture due while busy waits for what it waits on, or is not taken, and a promotion
// skipped or cut short passes to the next capture taken k or more after the last one begun.
[[nodiscard]] inline double simulate_tier_history(const TierCost& cost, const TierFailures& failures, const TierPolicy& policy,
                                                  const TierSimulationOptions& rules, std::uint64_t captures,
                                                  std::mt19937_64& gaps, std::mt19937_64& kinds, std::uint64_t& failure_count,
                                                  std::uint64_t& persistent_restart_count, std::uint64_t& skip_count,
                                                  std::uint64_t& promotion_count) {
  const double tau = policy.memory_interval_seconds, m = failures.mtbf_seconds;
  const double dm = cost.capture_stall_seconds, wm = cost.replicate_seconds, dp = cost.persist_stall_seconds, wp = cost.persist_seconds;
  const std::uint64_t k = policy.persist_every;
  auto kind_needs_persistent = [&] { return needs_persistent(failures, static_cast<double>(kinds() >> 11) * 0x1.0p-53); };
  struct Promotion {
    std::uint64_t capture;
    double persistent_at;
  };
  std::deque<Promotion> promotions;  // not yet durable at the last capture's due time, oldest first
  std::deque<std::uint64_t> recent;  // the newest memory_slots - 1 captures taken: the next one overwrites none of them
  double now = 0;
  std::uint64_t base = 0;             // the capture the job runs from; the start (0) is durable at both levels
  std::uint64_t last_persistent = 0;  // the newest capture whose persistent copy is durable
  bool restarting = false, from_persistent = false;
  for (;;) {
    if (restarting) {
      for (;;) {  // a failure during the restart starts it over, from persistent storage if it needs that
        const double next = exponential_draw(gaps, m);
        if (next >= (from_persistent ? failures.persistent_restart_seconds : failures.memory_restart_seconds)) break;
        now += next;
        ++failure_count;
        if (kind_needs_persistent()) {
          from_persistent = true;
          base = last_persistent;
        }
      }
      now += from_persistent ? failures.persistent_restart_seconds : failures.memory_restart_seconds;
      if (from_persistent) ++persistent_restart_count;
    }
    // Training resumes from capture `base` with nothing in flight; base counts as held in memory.
    const double failure_at = now + exponential_draw(gaps, m);
    std::uint64_t newest_memory = base, newest_persistent = last_persistent;
    promotions.clear();
    recent.assign(1, base);
    if (base == captures) {
      // The last capture came back from memory only: the job promotes it again to finish (10.2).
      const double persistent_at = now + dp + wp;
      if (persistent_at <= failure_at) return persistent_at;
    } else {
      double resume = now, previous_memory = now, previous_persistent = now;
      // The checkpointer's rules (10.5.1): a skipped capture's promotion, or one the failure cut short, passes to the
      // next capture taken at least k after the last promotion begun.
      const bool follows = rules.memory_slots != 0 || rules.skip_when_busy;
      bool owed = follows && base / k * k > last_persistent;
      std::uint64_t last_promoted = last_persistent;
      for (std::uint64_t j = base + 1; j <= captures; ++j) {
        const bool candidate = j % k == 0 || owed;
        const bool promoted = follows ? j == captures || (candidate && j >= last_promoted + k) : j % k == 0;
        const double due = resume + tau;
        if (due > failure_at) break;
        // What a capture due now waits on: the previous capture's replication; in a ring, each promotion still
        // reading a slot this capture would overwrite (10.5.1); a promotion, the previous promotion (10.2).
        while (!promotions.empty() && promotions.front().persistent_at <= due) promotions.pop_front();
        double free_at = previous_memory;
        if (rules.memory_slots != 0)
          for (const Promotion& p : promotions)
            if (recent.size() + 1 >= rules.memory_slots && p.capture < recent.front()) free_at = std::max(free_at, p.persistent_at);
        if (rules.skip_when_busy && free_at > due && j != captures) {  // the last capture waits: the job ends with it
          ++skip_count;
          owed = candidate;
          resume = due;
          continue;
        }
        owed = candidate && !promoted;
        if (promoted) last_promoted = j;
        double stall_start = std::max(due, free_at);
        if (promoted && !rules.skip_when_busy) stall_start = std::max(stall_start, previous_persistent);
        const double stall_end = stall_start + dm + (promoted ? dp : 0.0);
        if (stall_end > failure_at) break;  // no later capture can be durable before the failure
        const double memory_at = stall_end + wm;
        if (memory_at <= failure_at) newest_memory = j;
        if (promoted) {
          ++promotion_count;
          // Skipping, a promotion queues behind the one before it instead of stalling the capture (4.6);
          // waiting, the stall began after it, so this is stall_end + w_p.
          const double persistent_at = std::max(stall_end, previous_persistent) + wp;
          if (persistent_at <= failure_at) {
            newest_persistent = j;
            if (j == captures) return persistent_at;
          }
          previous_persistent = persistent_at;
          promotions.push_back({j, persistent_at});
        }
        if (rules.memory_slots > 1) {
          recent.push_back(j);
          while (recent.size() > rules.memory_slots - 1) recent.pop_front();
        }
        resume = stall_end;
        previous_memory = memory_at;
      }
    }
    // The failure: back to the newest durable capture its kind can reach, then a restart (10.2).
    now = failure_at;
    ++failure_count;
    last_persistent = newest_persistent;
    if (kind_needs_persistent()) {
      base = last_persistent;
      from_persistent = true;
    } else {
      from_persistent = newest_persistent > newest_memory;  // only the persistent copy is that new
      base = std::max(newest_memory, newest_persistent);
    }
    restarting = true;
  }
}

// Seeded Monte Carlo of `histories` jobs of `captures` captures each, at one policy (spec/PLAN.md 10.5).
[[nodiscard]] inline Result<TierSimulationResult> simulate_tiers(const TierCost& cost, const TierFailures& failures,
                                                                 const TierPolicy& policy, const TierSimulationOptions& options) {
  CKPT_TRY(check_tier_inputs(cost, failures));
  CKPT_TRY(check_tier_policy(policy));
  if (options.histories < 2)
    return make_error(Code::invalid_argument, "a simulation needs at least 2 histories for a standard error");
  if (options.memory_slots == 1)
    return make_error(Code::invalid_argument, "a ring of memory slots needs at least 2 (a capture and the step before it), got 1");
  if (options.captures % policy.persist_every != 0)
    return make_error(Code::invalid_argument, "captures per history (" + std::to_string(options.captures) +
                                                  ") must be a multiple of persist_every (" + std::to_string(policy.persist_every) + ")");
  TierSimulationResult out;
  out.histories = options.histories;
  out.seed = options.seed;
  out.captures = options.captures != 0 ? options.captures : auto_captures(cost, failures, policy, options.histories);
  // Progress at a level needs its restart and a durable capture without failure: refuse a run of hours.
  const double fp = persistent_share(failures), k = static_cast<double>(policy.persist_every);
  const double span = std::max(policy.memory_interval_seconds, cost.replicate_seconds) + cost.capture_stall_seconds +
                      cost.persist_stall_seconds / k;
  const double memory_window = failures.memory_restart_seconds + span + cost.replicate_seconds;
  const double persistent_window = failures.persistent_restart_seconds + k * span + cost.persist_seconds;
  const double window = std::max(fp < 1 ? memory_window : 0.0, fp > 0 ? persistent_window : 0.0);
  const double attempts = static_cast<double>(out.histories) * static_cast<double>(out.captures) *
                          std::exp(std::min(700.0, window / failures.mtbf_seconds));
  if (attempts > 2e9)
    return make_error(Code::unsupported, "simulation would take about " + std::to_string(attempts) +
                                             " capture attempts (over 2e9): fewer histories, or costs and k captures "
                                             "well below the MTBF");
  std::mt19937_64 gaps(options.seed), kinds(options.seed ^ kTierKindSeedMix);
  const double work = static_cast<double>(out.captures) * policy.memory_interval_seconds;
  // Welford over wall/work per history; the ratio of means, as simulate() (spec/PLAN.md 6.3).
  double mean = 0, m2 = 0;
  std::uint64_t total_failures = 0, total_persistent = 0, total_skipped = 0, total_promotions = 0;
  for (std::uint64_t h = 0; h < out.histories; ++h) {
    const double ratio = simulate_tier_history(cost, failures, policy, options, out.captures, gaps, kinds, total_failures,
                                               total_persistent, total_skipped, total_promotions) /
                         work;
    const double delta = ratio - mean;
    mean += delta / static_cast<double>(h + 1);
    m2 += delta * (ratio - mean);
  }
  const double n = static_cast<double>(out.histories);
  out.mean_waste = 1.0 - 1.0 / mean;
  out.standard_error = std::sqrt(m2 / (n - 1.0) / n) / (mean * mean);
  out.model_waste = tier_waste(cost, failures, policy);
  out.mean_failures = static_cast<double>(total_failures) / n;
  out.mean_persistent_restarts = static_cast<double>(total_persistent) / n;
  out.mean_skipped = static_cast<double>(total_skipped) / n;
  out.mean_promotions = static_cast<double>(total_promotions) / n;
  out.tolerance = kAgreementSigmas * out.standard_error + kTierModelTolerance * std::abs(out.model_waste);
  out.agrees = std::abs(out.mean_waste - out.model_waste) <= out.tolerance;
  return out;
}

}  // namespace ckpt::plan
