// ckpt-plan: how often to checkpoint, and what it costs (spec/PLAN.md). From a save's stall (and, for
// an async save, its background write), the job's MTBF and the restart cost: Young's and Daly's
// intervals, the expected waste at each, lost GPU-hours per day, optionally a seeded Monte Carlo of the
// same model, and an SVG of waste against interval. Save costs come from flags or from the save
// records of a store (--store). --capture-stall-seconds switches to the tiered model (spec/PLAN.md 10):
// memory captures with every k-th promoted to persistent storage. What it decides and prints is
// include/ckpt/report/plan.hpp (the math store/planner.hpp); this file parses and presents.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/report/plan.hpp>

#include "cli.hpp"

namespace {

constexpr const char* kTool = "ckpt-plan";

// An option's value when it was given.
template <class T>
[[nodiscard]] std::optional<T> given(const CLI::Option* option, const T& value) {
  return *option ? std::optional<T>(value) : std::nullopt;
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Plans how often to checkpoint: Young's and Daly's intervals for a sync and an async save, the
expected fraction of wall time wasted (stalls, lost work, restarts) and the GPU-hours it costs a
day, under Daly's exponential-failure model (spec/PLAN.md). --simulate checks the model with a
seeded Monte Carlo of the same timeline; --plot draws waste against interval as SVG.

Failures: one of --mtbf-hours, --mtbf-seconds, --gpu-failures-per-hour with --gpus, or --preset.
Save cost: --save-seconds (sync), --async-stall-seconds with --async-write-seconds, or --store.

Tiered mode (spec/PLAN.md 10), selected by --capture-stall-seconds: the job captures into memory every
--memory-interval seconds of compute and promotes every --persist-every-th capture to persistent
storage; each defaults to the optimum (given the other when only one is given). Crashes and, with
replicas, node losses restart from memory; power losses and, with --no-replicas, node losses from
persistent storage. Shares default to crash 1 - node loss - power loss. Both restarts default to
--restart-seconds. It prints the first-order closed form's waste (in --json a fraction: waste,
waste_at_optimum); --simulate checks it against a seeded Monte Carlo of the two-level timeline, which
agrees within 4 standard errors plus 10% of the closed form while costs are small against the MTBF.
--memory-slots and --skip-when-busy make the simulation follow the checkpointer's ring and skips
(spec/PLAN.md 10.5.1); the closed form models neither, so no agreement is checked then.
The sync/async flags (--save-seconds, --async-*, --store, --interval, --plot) are not used there.

Exit status: 0 ok, 1 a simulation disagreed with the model, 2 usage error or unreadable store.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    double save_seconds = 0, async_stall = 0, async_write = 0, mtbf_hours = 0, mtbf_seconds = 0, gpus = 0, gpu_rate = 0,
           interval = 0;
    std::string preset_name, plot_path;
    std::uint64_t histories = 0;
    bool as_json = false;
    ckpt::report::PlanRequest q;
    auto* save_opt = app.add_option("--save-seconds", save_seconds, "sync save: seconds training is blocked per checkpoint");
    auto* stall_opt = app.add_option("--async-stall-seconds", async_stall, "async save: seconds training is blocked (staging)");
    auto* write_opt = app.add_option("--async-write-seconds", async_write,
                                     "async save: seconds it keeps persisting in the background until durable");
    auto* store_opt = app.add_option("--store", q.store_dir, "read save costs from this store's journal (median of the last 32 saves)")
                          ->excludes(save_opt)
                          ->excludes(write_opt);
    auto* mtbf_opt = app.add_option("--mtbf-hours", mtbf_hours, "mean time between failures of the whole job, hours");
    auto* mtbf_seconds_opt = app.add_option("--mtbf-seconds", mtbf_seconds, "mean time between failures of the whole job, seconds");
    auto* gpus_opt = app.add_option("--gpus", gpus, "GPUs in the job: scales a per-GPU rate or preset, and the GPU-hours");
    auto* rate_opt = app.add_option("--gpu-failures-per-hour", gpu_rate, "failures per GPU per hour (needs --gpus)");
    auto* preset_opt = app.add_option("--preset", preset_name, "published failure rate: llama3-405b");
    app.add_option("--restart-seconds", q.restart_seconds, "seconds from a failure until training runs again (default 300)");
    auto* interval_opt = app.add_option("--interval", interval, "evaluate (and simulate) at this interval, seconds of compute "
                                                                "(default: each policy's Daly interval)");
    auto* simulate_opt = app.add_option("--simulate", histories, "Monte Carlo: this many failure/restart histories");
    app.add_option("--seed", q.seed, "seed of the simulation (default 1)");
    app.add_flag("--json", as_json, "print one JSON document instead of a table");
    auto* plot_opt = app.add_option("--plot", plot_path, "write waste against interval as an SVG file");
    // Tiered mode (spec/PLAN.md 10): --capture-stall-seconds selects it; the other tier flags need it.
    double capture_stall = 0, replicate = 0, persist_stall = 0, persist = 0, memory_restart = 0, persistent_restart = 0,
           crash_share = 0, node_loss_share = 0, power_loss_share = 0, memory_interval = 0;
    std::uint64_t persist_every = 0;
    auto* capture_opt = app.add_option("--capture-stall-seconds", capture_stall,
                                       "tiered mode: seconds training is blocked per memory capture")
                            ->excludes(save_opt)
                            ->excludes(stall_opt)
                            ->excludes(write_opt)
                            ->excludes(store_opt)
                            ->excludes(interval_opt)
                            ->excludes(plot_opt);
    std::vector<CLI::Option*> tier_opts = {
        app.add_option("--replicate-seconds", replicate,
                       "tiered: seconds after the capture's stall until it is held on its peers (default 0)"),
        app.add_option("--persist-stall-seconds", persist_stall,
                       "tiered: extra seconds blocked at a capture that is promoted (default 0)"),
        app.add_option("--persist-seconds", persist,
                       "tiered: seconds after a promoted capture's stall until its persistent copy is durable (default 0)"),
        app.add_option("--memory-restart-seconds", memory_restart,
                       "tiered: restart and load when memory serves (default --restart-seconds)"),
        app.add_option("--persistent-restart-seconds", persistent_restart,
                       "tiered: restart and load from persistent storage (default --restart-seconds)"),
        app.add_option("--crash-share", crash_share, "tiered: share of failures that are crashes (default: the rest)"),
        app.add_option("--node-loss-share", node_loss_share, "tiered: share of failures that lose a node (default 0)"),
        app.add_option("--power-loss-share", power_loss_share,
                       "tiered: share of failures that lose every node's memory (default 0)"),
        app.add_flag("--no-replicas", q.no_replicas, "tiered: captures are not replicated, so a node loss needs persistent storage"),
        app.add_option("--memory-interval", memory_interval, "tiered: seconds of compute between captures (default: the optimum)"),
        app.add_option("--persist-every", persist_every, "tiered: promote every k-th capture (default: the optimum)"),
        app.add_option("--memory-slots", q.memory_slots,
                       "tiered --simulate: the checkpointer's ring of memory slots, max(memory_keep, 2) (default 0: unbounded)"),
        app.add_flag("--skip-when-busy", q.skip_when_busy,
                     "tiered --simulate: a capture due while the previous one replicates or its slot is promoted is not taken")};
    for (auto* o : tier_opts) o->needs(capture_opt);
    for (auto* rule : {tier_opts.end()[-2], tier_opts.end()[-1]}) rule->needs(simulate_opt);  // --memory-slots, --skip-when-busy
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    auto text = [&](const char* name) { return app[name]->as<std::string>(); };
    q.mtbf_hours = given(mtbf_opt, mtbf_hours);
    q.mtbf_seconds = given(mtbf_seconds_opt, mtbf_seconds);
    q.gpu_failures_per_hour = given(rate_opt, gpu_rate);
    q.gpus = given(gpus_opt, gpus);
    if (*mtbf_opt) q.mtbf_hours_text = text("--mtbf-hours");
    if (*mtbf_seconds_opt) q.mtbf_seconds_text = text("--mtbf-seconds");
    if (*rate_opt) q.gpu_failures_per_hour_text = text("--gpu-failures-per-hour");
    if (*gpus_opt) q.gpus_text = text("--gpus");
    q.preset = given(preset_opt, preset_name);
    q.save_seconds = given(save_opt, save_seconds);
    q.async_stall_seconds = given(stall_opt, async_stall);
    q.async_write_seconds = given(write_opt, async_write);
    q.interval_seconds = given(interval_opt, interval);
    q.simulate = given(simulate_opt, histories);
    q.capture_stall_seconds = given(capture_opt, capture_stall);
    q.replicate_seconds = given(app["--replicate-seconds"], replicate);
    q.persist_stall_seconds = given(app["--persist-stall-seconds"], persist_stall);
    q.persist_seconds = given(app["--persist-seconds"], persist);
    q.memory_restart_seconds = given(app["--memory-restart-seconds"], memory_restart);
    q.persistent_restart_seconds = given(app["--persistent-restart-seconds"], persistent_restart);
    q.crash_share = given(app["--crash-share"], crash_share);
    q.node_loss_share = given(app["--node-loss-share"], node_loss_share);
    q.power_loss_share = given(app["--power-loss-share"], power_loss_share);
    q.memory_interval_seconds = given(app["--memory-interval"], memory_interval);
    q.persist_every = given(app["--persist-every"], persist_every);

    auto report = ckpt::report::plan_report(q);
    if (!report.ok()) {
      if (report.status().code() == ckpt::Code::invalid_argument) return ckpt::cli::usage_error(kTool, report.status().message());
      std::fprintf(stderr, "%s: %s\n", kTool, report.status().message().c_str());  // the store could not be read
      return static_cast<int>(ckpt::cli::kUsage);
    }
    if (!plot_path.empty()) {
      // Not std::ofstream: --plot naming a FIFO would block it forever (a device or symlink is refused too).
      if (const auto st = ckpt::cli::write_output_file(plot_path, ckpt::report::plan_svg(*report)); !st.ok()) {
        std::fprintf(stderr, "%s: cannot write the plot: %s\n", kTool, st.message().c_str());
        return static_cast<int>(ckpt::cli::kUsage);
      }
    }
    if (as_json) ckpt::cli::print_json(ckpt::report::plan_json(*report));
    else std::fputs(ckpt::report::plan_text(*report).c_str(), stdout);
    return report->exit_code();
  });
}
