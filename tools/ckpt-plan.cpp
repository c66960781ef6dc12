// ckpt-plan: how often to checkpoint, and what it costs (spec/PLAN.md). From a save's stall (and, for
// an async save, its background write), the job's MTBF and the restart cost: Young's and Daly's
// intervals, the expected waste at each, lost GPU-hours per day, optionally a seeded Monte Carlo of the
// same model, and an SVG of waste against interval. Save costs come from flags or from the save
// records of a store (--store). --capture-stall-seconds switches to the tiered model (spec/PLAN.md 10):
// memory captures with every k-th promoted to persistent storage. The math is include/ckpt/store/planner.hpp;
// this file parses and presents.
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/store/planner.hpp>
#include <ckpt/store/store.hpp>

#include "cli.hpp"

namespace {

using ckpt::Code;
using ckpt::cli::print_table;
using nlohmann::json;
namespace plan = ckpt::plan;
constexpr const char* kTool = "ckpt-plan";

// One row of the table: a policy with a save cost, or the reason it has none.
struct Policy {
  std::string name;                   // "sync" or "async"
  std::optional<plan::SaveCost> cost;
  std::string source;                 // where the cost came from
  std::string unavailable;            // why there is no cost, when there is none
  plan::PolicyPlan planned;
  std::optional<plan::SimulationResult> simulation;
};

// Everything the output needs besides the policies.
struct Setting {
  plan::FailureModel failures;
  std::string mtbf_source;
  const plan::Preset* preset = nullptr;
  double gpus = 1;
  std::string gpus_source;  // "--gpus", "preset", or "" when unknown (then per GPU)
  std::optional<double> interval;
  json store = nullptr;
};

[[nodiscard]] std::string printf_text(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Seconds for people: enough digits for a sub-second stall, minutes or hours beside long ones.
[[nodiscard]] std::string seconds_text(double s) {
  if (s == 0) return "0 s";
  std::string t = s < 1 ? printf_text("%.3f s", s) : s < 100 ? printf_text("%.2f s", s) : printf_text("%.1f s", s);
  if (s >= 7200) t += printf_text(" (%.2f h)", s / 3600);
  else if (s >= 120) t += printf_text(" (%.1f min)", s / 60);
  return t;
}

// Four decimals: Young's and Daly's intervals differ by hundredths of a percentage point.
[[nodiscard]] std::string percent_text(double fraction) { return printf_text("%.4f%%", 100 * fraction); }

[[nodiscard]] std::string gpu_hours_text(double h) { return h >= 100 ? printf_text("%.0f", h) : printf_text("%.3g", h); }

// --- JSON ------------------------------------------------------------------------------------------

[[nodiscard]] json simulation_json(const plan::SimulationResult& s) {
  return {{"histories", s.histories},
          {"intervals_per_history", s.intervals},
          {"seed", s.seed},
          {"mean_waste_percent", 100 * s.mean_waste},
          {"standard_error_percent", 100 * s.standard_error},
          {"model_waste_percent", 100 * s.model_waste},
          {"tolerance_percent", 100 * s.tolerance},
          {"tolerance_sigmas", plan::kAgreementSigmas},
          {"mean_failures_per_history", s.mean_failures},
          {"agrees", s.agrees}};
}

[[nodiscard]] json policy_json(const Policy& p) {
  if (!p.cost) return {{"available", false}, {"reason", p.unavailable}};
  const plan::PolicyPlan& q = p.planned;
  json j = {{"available", true},
            {"source", p.source},
            {"stall_seconds", q.cost.stall_seconds},
            {"background_seconds", q.cost.background_seconds},
            {"young_interval_seconds", q.young_seconds},
            {"daly_interval_seconds", q.daly_seconds},
            {"model_optimum_seconds", q.optimum_seconds},
            {"interval_seconds", q.interval_seconds},
            {"waste_percent_at_young", 100 * q.waste_at_young},
            {"waste_percent_at_daly", 100 * q.waste_at_daly},
            {"waste_percent_at_model_optimum", 100 * q.waste_at_optimum},
            {"waste_percent", 100 * q.waste},
            {"lost_gpu_hours_per_day", q.lost_gpu_hours_per_day},
            {"save_waits_for_write", q.save_waits_for_write}};
  j["simulation"] = p.simulation ? simulation_json(*p.simulation) : json(nullptr);
  return j;
}

[[nodiscard]] json plan_json(const Setting& s, const std::vector<Policy>& policies) {
  json preset = nullptr;
  if (s.preset != nullptr)
    preset = {{"name", std::string(s.preset->name)},
              {"interruptions", s.preset->interruptions},
              {"days", s.preset->days},
              {"gpus", s.preset->gpus},
              {"job_mtbf_hours", s.preset->job_mtbf_hours()},
              {"failures_per_gpu_hour", s.preset->failures_per_gpu_hour()},
              {"source", std::string(s.preset->source)}};
  json doc = {{"model", "Daly exponential-failure model with async background writes (spec/PLAN.md)"},
              {"mtbf_seconds", s.failures.mtbf_seconds},
              {"mtbf_hours", s.failures.mtbf_seconds / 3600},
              {"mtbf_source", s.mtbf_source},
              {"preset", std::move(preset)},
              {"restart_seconds", s.failures.restart_seconds},
              {"restart_waste_floor_percent", 100 * plan::restart_waste_floor(s.failures)},
              {"gpus", s.gpus},
              {"gpus_known", !s.gpus_source.empty()},
              {"gpus_source", s.gpus_source.empty() ? json("unknown: lost GPU-hours are per GPU") : json(s.gpus_source)},
              {"interval_requested_seconds", s.interval ? json(*s.interval) : json(nullptr)},
              {"store", s.store}};
  json by_name = json::object();
  for (const auto& p : policies) by_name[p.name] = policy_json(p);
  doc["policies"] = std::move(by_name);
  return doc;
}

// --- Terminal ------------------------------------------------------------------------------------

void print_plan(const Setting& s, const std::vector<Policy>& policies) {
  std::printf("MTBF %s: %s\n", seconds_text(s.failures.mtbf_seconds).c_str(), s.mtbf_source.c_str());
  std::printf("restart %s; restarts alone waste %s at any interval\n", seconds_text(s.failures.restart_seconds).c_str(),
              percent_text(plan::restart_waste_floor(s.failures)).c_str());
  if (s.gpus_source.empty()) std::printf("GPU count unknown: lost GPU-hours are per GPU (give --gpus N)\n");
  else std::printf("lost GPU-hours for %.0f GPUs (%s)\n", s.gpus, s.gpus_source.c_str());
  std::printf("\n");
  std::vector<std::vector<std::string>> rows = {
      {"policy", "stall", "background", "Young", "Daly", "waste@Young", "waste@Daly"}};
  if (s.interval) {
    rows[0].push_back("interval");
    rows[0].push_back("waste");
  }
  rows[0].push_back(s.gpus_source.empty() ? "lost GPU-h/day/GPU" : "lost GPU-h/day");
  for (const auto& p : policies) {
    if (!p.cost) {
      std::vector<std::string> row = {p.name, "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"};
      if (s.interval) row.insert(row.end(), {"n/a", "n/a"});
      row.push_back("n/a");
      rows.push_back(std::move(row));
      continue;
    }
    const plan::PolicyPlan& q = p.planned;
    std::vector<std::string> row = {p.name,
                                    seconds_text(q.cost.stall_seconds),
                                    seconds_text(q.cost.background_seconds),
                                    seconds_text(q.young_seconds),
                                    seconds_text(q.daly_seconds),
                                    percent_text(q.waste_at_young),
                                    percent_text(q.waste_at_daly)};
    if (s.interval) row.insert(row.end(), {seconds_text(q.interval_seconds), percent_text(q.waste)});
    row.push_back(gpu_hours_text(q.lost_gpu_hours_per_day));
    rows.push_back(std::move(row));
  }
  print_table(rows, {false, true, true, true, true, true, true, true, true, true});
  std::printf("\n");
  for (const auto& p : policies) {
    if (!p.cost) std::printf("%s: %s\n", p.name.c_str(), p.unavailable.c_str());
    else std::printf("%s: %s\n", p.name.c_str(), p.source.c_str());
    if (!p.cost) continue;
    const plan::PolicyPlan& q = p.planned;
    if (q.save_waits_for_write || q.daly_seconds < q.cost.background_seconds)
      std::printf("%s: the background write (%s) outlasts %s: each save waits for the previous one, so the model's own "
                  "optimum is %s (waste %s)\n",
                  p.name.c_str(), seconds_text(q.cost.background_seconds).c_str(),
                  q.save_waits_for_write ? "the interval" : "Daly's interval", seconds_text(q.optimum_seconds).c_str(),
                  percent_text(q.waste_at_optimum).c_str());
  }
  const Policy* sync = nullptr;
  const Policy* async = nullptr;
  for (const auto& p : policies) (p.name == "sync" ? sync : async) = p.cost ? &p : nullptr;
  if (sync != nullptr && async != nullptr)
    std::printf("async instead of sync: %s lost GPU-hours/day%s fewer (%s of wall time)\n",
                gpu_hours_text(sync->planned.lost_gpu_hours_per_day - async->planned.lost_gpu_hours_per_day).c_str(),
                s.gpus_source.empty() ? " per GPU" : "",
                percent_text(sync->planned.waste - async->planned.waste).c_str());
  bool header = false;
  for (const auto& p : policies) {
    if (!p.simulation) continue;
    const plan::SimulationResult& r = *p.simulation;
    if (!header) {
      std::printf("\nsimulated at %s: %llu histories, seed %llu; agrees when within %.0f standard errors of the model\n",
                  s.interval ? "--interval" : "each policy's Daly interval", static_cast<unsigned long long>(r.histories),
                  static_cast<unsigned long long>(r.seed), plan::kAgreementSigmas);
      header = true;
    }
    std::printf("  %-5s waste %s +- %s, model %s, |difference| %s: %s (%llu intervals, %.1f failures per history)\n",
                p.name.c_str(), percent_text(r.mean_waste).c_str(), percent_text(r.standard_error).c_str(),
                percent_text(r.model_waste).c_str(), percent_text(std::abs(r.mean_waste - r.model_waste)).c_str(),
                r.agrees ? "agrees" : "DISAGREES", static_cast<unsigned long long>(r.intervals), r.mean_failures);
  }
}

// --- SVG -----------------------------------------------------------------------------------------

[[nodiscard]] std::string xml_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

[[nodiscard]] std::string num(double v) { return printf_text("%.2f", v); }

// A round tick step (1, 2 or 5 times a power of ten) giving about five ticks up to max.
[[nodiscard]] double nice_step(double max) {
  const double raw = max / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

[[nodiscard]] std::string tick_seconds(double s) {
  if (s >= 1) return printf_text("%.0f s", s);
  return printf_text("%g s", s);
}

// Waste (y, linear, %) against interval (x, log): one curve per policy, Young and Daly marked on each.
[[nodiscard]] std::string plot_svg(const Setting& s, const std::vector<Policy>& policies) {
  const double width = 960, height = 600, left = 84, right = 28, top = 112, bottom = 72;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const char* colors[] = {"#1f5fa8", "#d1495b"};
  double lo = 0, hi = 0, worst_optimum = 0;
  for (const auto& p : policies) {
    if (!p.cost) continue;
    const auto& q = p.planned;
    const double small = std::min({q.young_seconds, q.daly_seconds, q.interval_seconds});
    const double big = std::max({q.young_seconds, q.daly_seconds, q.interval_seconds});
    lo = lo == 0 ? small : std::min(lo, small);
    hi = std::max(hi, big);
    worst_optimum = std::max({worst_optimum, q.waste_at_daly, q.waste});
  }
  lo = std::pow(10.0, std::floor(std::log10(lo / 8)));
  hi = std::pow(10.0, std::ceil(std::log10(hi * 8)));
  const double y_step = nice_step(std::min(100.0, 100 * worst_optimum * 2.5));
  const double y_max = std::min(100.0, y_step * std::ceil(std::min(100.0, 100 * worst_optimum * 2.5) / y_step));
  auto x_of = [&](double tau) { return left + plot_w * std::log(tau / lo) / std::log(hi / lo); };
  auto y_of = [&](double percent) { return top + plot_h * (1 - percent / y_max); };

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" viewBox=\"0 0 " +
         num(width) + " " + num(height) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"13\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"#ffffff\"/>\n";
  svg += "<defs><clipPath id=\"plot\"><rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) +
         "\" height=\"" + num(plot_h) + "\"/></clipPath></defs>\n";
  // Title and what the curves assume.
  svg += "<text x=\"" + num(width / 2) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">" +
         "Expected waste against checkpoint interval</text>\n";
  svg += "<text x=\"" + num(width / 2) + "\" y=\"46\" text-anchor=\"middle\" fill=\"#444\">" +
         xml_text("MTBF " + seconds_text(s.failures.mtbf_seconds) + ", restart " + seconds_text(s.failures.restart_seconds) +
                  "; Daly's exponential model (spec/PLAN.md)") +
         "</text>\n";
  // Grid, ticks and tick labels: decades (and 2x, 5x) on x, round steps on y.
  svg += "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (double y = 0; y <= y_max + 1e-9; y += y_step)
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y_of(y)) + "\" x2=\"" + num(left + plot_w) + "\" y2=\"" + num(y_of(y)) + "\"/>\n";
  for (double decade = lo; decade <= hi * 1.0001; decade *= 10)
    for (const double m : {1.0, 2.0, 5.0})
      if (decade * m <= hi * 1.0001)
        svg += "<line x1=\"" + num(x_of(decade * m)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x_of(decade * m)) + "\" y2=\"" +
               num(top + plot_h) + "\"" + (m == 1.0 ? "" : " stroke-dasharray=\"2,3\"") + "/>\n";
  svg += "</g>\n";
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) + "\" height=\"" + num(plot_h) +
         "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (double y = 0; y <= y_max + 1e-9; y += y_step) {
    svg += "<line x1=\"" + num(left - 5) + "\" y1=\"" + num(y_of(y)) + "\" x2=\"" + num(left) + "\" y2=\"" + num(y_of(y)) +
           "\" stroke=\"#333\"/>\n";
    svg += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y_of(y) + 4) + "\" text-anchor=\"end\">" +
           printf_text(y_step < 1 ? "%.1f%%" : "%.0f%%", y) + "</text>\n";
  }
  for (double decade = lo; decade <= hi * 1.0001; decade *= 10) {
    svg += "<line x1=\"" + num(x_of(decade)) + "\" y1=\"" + num(top + plot_h) + "\" x2=\"" + num(x_of(decade)) + "\" y2=\"" +
           num(top + plot_h + 5) + "\" stroke=\"#333\"/>\n";
    svg += "<text x=\"" + num(x_of(decade)) + "\" y=\"" + num(top + plot_h + 20) + "\" text-anchor=\"middle\">" +
           xml_text(tick_seconds(decade)) + "</text>\n";
  }
  svg += "<text x=\"" + num(left + plot_w / 2) + "\" y=\"" + num(height - 22) + "\" text-anchor=\"middle\">" +
         "checkpoint interval: compute seconds between checkpoints (log scale)</text>\n";
  svg += "<text transform=\"translate(22," + num(top + plot_h / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         "expected waste (% of wall time)</text>\n";
  // What restarts alone cost: no interval goes below it.
  const double floor_percent = 100 * plan::restart_waste_floor(s.failures);
  if (floor_percent > 0 && floor_percent < y_max) {
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y_of(floor_percent)) + "\" x2=\"" + num(left + plot_w) + "\" y2=\"" +
           num(y_of(floor_percent)) + "\" stroke=\"#888\" stroke-dasharray=\"6,4\"/>\n";
    const double below = y_of(floor_percent) + 15;
    const double label_at = below > top + plot_h - 4 ? y_of(floor_percent) - 5 : below;  // above the line near the axis
    svg += "<text x=\"" + num(left + plot_w - 6) + "\" y=\"" + num(label_at) + "\" text-anchor=\"end\" fill=\"#666\">" +
           xml_text("restarts alone: " + percent_text(floor_percent / 100)) + "</text>\n";
  }
  // The curves, then the optima on them, each labelled at its own height above the plot.
  std::size_t index = 0;
  double legend_y = 68;
  for (const auto& p : policies) {
    const char* color = colors[index++ % 2];
    if (!p.cost) continue;
    const auto& q = p.planned;
    const auto curve = plan::waste_curve(*p.cost, s.failures, lo, hi, 400);
    std::string points;
    for (const auto& c : curve) points += num(x_of(c.interval_seconds)) + "," + num(y_of(std::min(100 * c.waste_fraction, y_max * 1.5))) + " ";
    svg += "<polyline clip-path=\"url(#plot)\" fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2.2\" points=\"" +
           points + "\"/>\n";
    const bool young_right = q.young_seconds >= q.daly_seconds;
    const double label_y = top + 18 + 18 * static_cast<double>(index - 1);
    struct Mark {
      const char* name;
      double tau, waste;
      bool right;
      const char* dash;
    };
    for (const Mark& m : {Mark{"Young", q.young_seconds, q.waste_at_young, young_right, "2,3"},
                          Mark{"Daly", q.daly_seconds, q.waste_at_daly, !young_right, "7,4"}}) {
      const double x = x_of(m.tau), y = y_of(100 * m.waste);
      svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + plot_h) + "\" stroke=\"" +
             color + "\" stroke-width=\"1.2\" stroke-dasharray=\"" + m.dash + "\"/>\n";
      if (std::string(m.name) == "Daly")
        svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"5\" fill=\"" + color + "\" stroke=\"#fff\"/>\n";
      else
        svg += "<rect x=\"" + num(x - 4.5) + "\" y=\"" + num(y - 4.5) + "\" width=\"9\" height=\"9\" fill=\"#fff\" stroke=\"" + color +
               "\" stroke-width=\"2\" transform=\"rotate(45 " + num(x) + " " + num(y) + ")\"/>\n";
      svg += "<text x=\"" + num(m.right ? x + 5 : x - 5) + "\" y=\"" + num(label_y) + "\" text-anchor=\"" + (m.right ? "start" : "end") +
             "\" fill=\"" + color + "\">" +
             xml_text(p.name + " " + m.name + " " + printf_text(m.tau < 10 ? "%.2f s" : "%.0f s", m.tau) + " (" +
                      printf_text("%.2f%%", 100 * m.waste) + ")") +
             "</text>\n";
    }
    // Where Daly's estimate misses the model's minimum (a background write longer than it), mark both.
    if (q.waste_at_daly - q.waste_at_optimum > 0.01 * q.waste_at_optimum) {
      const double x = x_of(q.optimum_seconds), y = y_of(100 * q.waste_at_optimum);
      svg += "<path d=\"M " + num(x) + " " + num(y - 6) + " L " + num(x + 6) + " " + num(y + 5) + " L " + num(x - 6) + " " + num(y + 5) +
             " Z\" fill=\"" + color + "\" stroke=\"#fff\"/>\n";
      svg += "<text x=\"" + num(x + 9) + "\" y=\"" + num(y + 18) + "\" fill=\"" + color + "\">" +
             xml_text(p.name + " model optimum " + printf_text(q.optimum_seconds < 10 ? "%.2f s" : "%.0f s", q.optimum_seconds) + " (" +
                      printf_text("%.2f%%", 100 * q.waste_at_optimum) + ")") +
             "</text>\n";
    }
    if (s.interval) {
      const double x = x_of(q.interval_seconds), y = y_of(100 * q.waste);
      svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"#222\"/>\n";
    }
    // Legend entry: the line style and what the policy's save costs.
    std::string what = p.name + ": stall " + seconds_text(q.cost.stall_seconds);
    if (q.cost.background_seconds > 0) what += ", background write " + seconds_text(q.cost.background_seconds);
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(legend_y) + "\" x2=\"" + num(left + 28) + "\" y2=\"" + num(legend_y) +
           "\" stroke=\"" + color + "\" stroke-width=\"2.2\"/>\n";
    svg += "<text x=\"" + num(left + 36) + "\" y=\"" + num(legend_y + 4) + "\">" + xml_text(what) + "</text>\n";
    legend_y += 18;
  }
  // Marker key, right of the legend.
  const double key_x = left + plot_w - 300;
  svg += "<circle cx=\"" + num(key_x) + "\" cy=\"68\" r=\"5\" fill=\"#555\"/>\n";
  svg += "<text x=\"" + num(key_x + 12) + "\" y=\"72\">Daly's optimum (dashed line)</text>\n";
  svg += "<rect x=\"" + num(key_x - 4.5) + "\" y=\"" + num(86 - 4.5) + "\" width=\"9\" height=\"9\" fill=\"#fff\" stroke=\"#555\" "
         "stroke-width=\"2\" transform=\"rotate(45 " + num(key_x) + " 86)\"/>\n";
  svg += "<text x=\"" + num(key_x + 12) + "\" y=\"90\">Young's interval (dotted line)</text>\n";
  if (s.interval) {
    svg += "<circle cx=\"" + num(key_x + 230) + "\" cy=\"68\" r=\"4\" fill=\"#222\"/>\n";
    svg += "<text x=\"" + num(key_x + 240) + "\" y=\"72\">--interval</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

// --- Tiers (spec/PLAN.md 10) -----------------------------------------------------------------------

// The tiered model's inputs, plan and optional simulation.
struct TierRun {
  plan::TierCost cost;
  plan::TierFailures failures;
  plan::TierPlan planned;
  std::optional<plan::TierSimulationResult> simulation;
  bool interval_given = false, persist_every_given = false;
};

[[nodiscard]] json tier_json(const Setting& s, const TierRun& t) {
  const plan::TierPlan& q = t.planned;
  json doc = {{"model", "tiered: memory captures, every k-th promoted to persistent storage; first-order closed form (spec/PLAN.md 10)"},
              {"mode", "tiered"},
              {"mtbf_seconds", t.failures.mtbf_seconds},
              {"mtbf_hours", t.failures.mtbf_seconds / 3600},
              {"mtbf_source", s.mtbf_source},
              {"preset", s.preset != nullptr ? json(std::string(s.preset->name)) : json(nullptr)},
              {"capture_stall_seconds", t.cost.capture_stall_seconds},
              {"replicate_seconds", t.cost.replicate_seconds},
              {"persist_stall_seconds", t.cost.persist_stall_seconds},
              {"persist_seconds", t.cost.persist_seconds},
              {"memory_restart_seconds", t.failures.memory_restart_seconds},
              {"persistent_restart_seconds", t.failures.persistent_restart_seconds},
              {"crash_share", t.failures.crash_share},
              {"node_loss_share", t.failures.node_loss_share},
              {"power_loss_share", t.failures.power_loss_share},
              {"replicated", t.failures.replicated},
              {"persistent_share", q.persistent_share},
              {"gpus", s.gpus},
              {"gpus_known", !s.gpus_source.empty()},
              {"memory_interval_seconds", q.policy.memory_interval_seconds},
              {"memory_interval_source", t.interval_given ? "--memory-interval" : "optimum"},
              {"persist_every", q.policy.persist_every},
              {"persist_every_source", t.persist_every_given ? "--persist-every" : "optimum"},
              {"waste", q.waste},
              {"lost_gpu_hours_per_day", plan::lost_gpu_hours_per_day(q.waste, s.gpus)},
              {"optimum_memory_interval_seconds", q.optimum.memory_interval_seconds},
              {"optimum_persist_every", q.optimum.persist_every},
              {"waste_at_optimum", q.optimum.waste},
              {"simulated_waste", nullptr},
              {"standard_error", nullptr},
              {"agrees", nullptr},
              {"simulation", nullptr}};
  if (t.simulation) {
    const plan::TierSimulationResult& r = *t.simulation;
    doc["simulated_waste"] = r.mean_waste;
    doc["standard_error"] = r.standard_error;
    doc["agrees"] = r.agrees;
    doc["simulation"] = {{"histories", r.histories},
                         {"captures_per_history", r.captures},
                         {"seed", r.seed},
                         {"model_waste", r.model_waste},
                         {"tolerance", r.tolerance},
                         {"tolerance_sigmas", plan::kAgreementSigmas},
                         {"tolerance_model_share", plan::kTierModelTolerance},
                         {"mean_failures_per_history", r.mean_failures},
                         {"mean_persistent_restarts_per_history", r.mean_persistent_restarts}};
  }
  return doc;
}

void print_tiers(const Setting& s, const TierRun& t) {
  const plan::TierPlan& q = t.planned;
  const plan::TierFailures& f = t.failures;
  std::printf("MTBF %s: %s\n", seconds_text(f.mtbf_seconds).c_str(), s.mtbf_source.c_str());
  auto share = [](double v) { return printf_text("%.4g%%", 100 * v); };
  std::printf("failures: crash %s, node loss %s (%s), power loss %s: %s need persistent storage\n", share(f.crash_share).c_str(),
              share(f.node_loss_share).c_str(), f.replicated ? "served by a peer's memory" : "no replicas: served by persistent storage",
              share(f.power_loss_share).c_str(), share(q.persistent_share).c_str());
  std::printf("capture: stall %s, held on its peers %s later; promotion: stall %s more, persistent %s later\n",
              seconds_text(t.cost.capture_stall_seconds).c_str(), seconds_text(t.cost.replicate_seconds).c_str(),
              seconds_text(t.cost.persist_stall_seconds).c_str(), seconds_text(t.cost.persist_seconds).c_str());
  std::printf("restart: %s from memory, %s from persistent storage\n", seconds_text(f.memory_restart_seconds).c_str(),
              seconds_text(f.persistent_restart_seconds).c_str());
  if (s.gpus_source.empty()) std::printf("GPU count unknown: lost GPU-hours are per GPU (give --gpus N)\n");
  else std::printf("lost GPU-hours for %.0f GPUs (%s)\n", s.gpus, s.gpus_source.c_str());
  std::printf("\n");
  std::vector<std::vector<std::string>> rows = {
      {"policy", "memory interval", "persist every", "promotions apart", "waste",
       s.gpus_source.empty() ? "lost GPU-h/day/GPU" : "lost GPU-h/day"}};
  auto row = [&](const std::string& name, const plan::TierPolicy& policy, double waste) {
    const double apart = static_cast<double>(policy.persist_every) * plan::tier_seconds_per_capture(t.cost, policy);
    rows.push_back({name, seconds_text(policy.memory_interval_seconds), std::to_string(policy.persist_every), seconds_text(apart),
                    percent_text(waste), gpu_hours_text(plan::lost_gpu_hours_per_day(waste, s.gpus))});
  };
  if (t.interval_given || t.persist_every_given) {
    const std::string given = t.interval_given && t.persist_every_given ? "given"
                              : t.interval_given                        ? "given interval, best k"
                                                                        : "given k, best interval";
    row(given, q.policy, q.waste);
  }
  row("optimum", {q.optimum.memory_interval_seconds, q.optimum.persist_every}, q.optimum.waste);
  print_table(rows, {false, true, true, true, true, true});
  std::printf("\nfirst-order closed form (spec/PLAN.md 10.3): close to the simulation while costs and promotions are well below the MTBF\n");
  if (t.simulation) {
    const plan::TierSimulationResult& r = *t.simulation;
    std::printf("simulated at the %s policy: %llu histories of %llu captures, seed %llu: waste %s +- %s, closed form %s, "
                "|difference| %s: %s (tolerance %s: %.0f standard errors + %.0f%% of the closed form; %.1f failures, "
                "%.1f restarts from persistent storage per history)\n",
                t.interval_given || t.persist_every_given ? "given" : "optimum", static_cast<unsigned long long>(r.histories),
                static_cast<unsigned long long>(r.captures), static_cast<unsigned long long>(r.seed), percent_text(r.mean_waste).c_str(),
                percent_text(r.standard_error).c_str(), percent_text(r.model_waste).c_str(),
                percent_text(std::abs(r.mean_waste - r.model_waste)).c_str(), r.agrees ? "agrees" : "DISAGREES",
                percent_text(r.tolerance).c_str(), plan::kAgreementSigmas, 100 * plan::kTierModelTolerance, r.mean_failures,
                r.mean_persistent_restarts);
  }
}

// --- Inputs --------------------------------------------------------------------------------------

// The save costs a store recorded, turned into seconds for the planner.
[[nodiscard]] ckpt::Result<plan::SaveCostEstimate> store_save_costs(const std::string& dir, std::optional<double> async_stall,
                                                                    json& store_doc) {
  ckpt::PosixFs fs;
  auto store = ckpt::Store::open(fs, dir, ckpt::Access::read_only);
  if (!store.ok()) return store.status();
  const std::vector<ckpt::SaveRecord> records = (*store)->save_records();
  if (records.empty())
    return ckpt::make_error(Code::not_found, dir + ": the journal records no saves (no committed step, or written before "
                                                   "saves were timed); give --save-seconds instead");
  std::vector<plan::SaveSample> samples;
  for (const auto& r : records)
    samples.push_back({static_cast<double>(r.stall_ns) * 1e-9, static_cast<double>(r.persist_ns) * 1e-9, r.async});
  CKPT_ASSIGN_OR_RETURN(plan::SaveCostEstimate e, plan::estimate_save_costs(samples, async_stall));
  store_doc = {{"path", dir},
               {"records", records.size()},
               {"records_used", e.samples},
               {"async_records_used", e.async_samples},
               {"statistic", "median of the last 32 records"}};
  return e;
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
The sync/async flags (--save-seconds, --async-*, --store, --interval, --plot) are not used there.

Exit status: 0 ok, 1 a simulation disagreed with the model, 2 usage error or unreadable store.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    double save_seconds = 0, async_stall = 0, async_write = 0, mtbf_hours = 0, mtbf_seconds = 0, gpus = 0, gpu_rate = 0,
           restart = 300, interval = 0;
    std::string store_dir, preset_name, plot_path;
    std::uint64_t histories = 0, seed = 1;
    bool as_json = false;
    auto* save_opt = app.add_option("--save-seconds", save_seconds, "sync save: seconds training is blocked per checkpoint");
    auto* stall_opt = app.add_option("--async-stall-seconds", async_stall, "async save: seconds training is blocked (staging)");
    auto* write_opt = app.add_option("--async-write-seconds", async_write,
                                     "async save: seconds it keeps persisting in the background until durable");
    auto* store_opt = app.add_option("--store", store_dir, "read save costs from this store's journal (median of the last 32 saves)")
                          ->excludes(save_opt)
                          ->excludes(write_opt);
    auto* mtbf_opt = app.add_option("--mtbf-hours", mtbf_hours, "mean time between failures of the whole job, hours");
    auto* mtbf_seconds_opt = app.add_option("--mtbf-seconds", mtbf_seconds, "mean time between failures of the whole job, seconds");
    auto* gpus_opt = app.add_option("--gpus", gpus, "GPUs in the job: scales a per-GPU rate or preset, and the GPU-hours");
    auto* rate_opt = app.add_option("--gpu-failures-per-hour", gpu_rate, "failures per GPU per hour (needs --gpus)");
    auto* preset_opt = app.add_option("--preset", preset_name, "published failure rate: llama3-405b");
    app.add_option("--restart-seconds", restart, "seconds from a failure until training runs again (default 300)");
    auto* interval_opt = app.add_option("--interval", interval, "evaluate (and simulate) at this interval, seconds of compute "
                                                                "(default: each policy's Daly interval)");
    auto* simulate_opt = app.add_option("--simulate", histories, "Monte Carlo: this many failure/restart histories");
    app.add_option("--seed", seed, "seed of the simulation (default 1)");
    app.add_flag("--json", as_json, "print one JSON document instead of a table");
    auto* plot_opt = app.add_option("--plot", plot_path, "write waste against interval as an SVG file");
    // Tiered mode (spec/PLAN.md 10): --capture-stall-seconds selects it; the other tier flags need it.
    plan::TierCost tier_cost;
    plan::TierFailures tier_failures;
    double memory_interval = 0;
    std::uint64_t persist_every = 0;
    bool no_replicas = false;
    auto* capture_opt = app.add_option("--capture-stall-seconds", tier_cost.capture_stall_seconds,
                                       "tiered mode: seconds training is blocked per memory capture")
                            ->excludes(save_opt)
                            ->excludes(stall_opt)
                            ->excludes(write_opt)
                            ->excludes(store_opt)
                            ->excludes(interval_opt)
                            ->excludes(plot_opt);
    std::vector<CLI::Option*> tier_opts = {
        app.add_option("--replicate-seconds", tier_cost.replicate_seconds,
                       "tiered: seconds after the capture's stall until it is held on its peers (default 0)"),
        app.add_option("--persist-stall-seconds", tier_cost.persist_stall_seconds,
                       "tiered: extra seconds blocked at a capture that is promoted (default 0)"),
        app.add_option("--persist-seconds", tier_cost.persist_seconds,
                       "tiered: seconds after a promoted capture's stall until its persistent copy is durable (default 0)"),
        app.add_option("--memory-restart-seconds", tier_failures.memory_restart_seconds,
                       "tiered: restart and load when memory serves (default --restart-seconds)"),
        app.add_option("--persistent-restart-seconds", tier_failures.persistent_restart_seconds,
                       "tiered: restart and load from persistent storage (default --restart-seconds)"),
        app.add_option("--crash-share", tier_failures.crash_share, "tiered: share of failures that are crashes (default: the rest)"),
        app.add_option("--node-loss-share", tier_failures.node_loss_share, "tiered: share of failures that lose a node (default 0)"),
        app.add_option("--power-loss-share", tier_failures.power_loss_share,
                       "tiered: share of failures that lose every node's memory (default 0)"),
        app.add_flag("--no-replicas", no_replicas, "tiered: captures are not replicated, so a node loss needs persistent storage"),
        app.add_option("--memory-interval", memory_interval, "tiered: seconds of compute between captures (default: the optimum)"),
        app.add_option("--persist-every", persist_every, "tiered: promote every k-th capture (default: the optimum)")};
    for (auto* o : tier_opts) o->needs(capture_opt);
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    // Failures: exactly one source.
    Setting s;
    const int mtbf_sources = (*mtbf_opt ? 1 : 0) + (*mtbf_seconds_opt ? 1 : 0) + (*rate_opt ? 1 : 0) + (*preset_opt ? 1 : 0);
    if (mtbf_sources == 0)
      return ckpt::cli::usage_error(
          kTool, "missing MTBF: give --mtbf-hours, --mtbf-seconds, --gpu-failures-per-hour with --gpus, or --preset");
    if (mtbf_sources > 1)
      return ckpt::cli::usage_error(kTool, "give only one of --mtbf-hours, --mtbf-seconds, --gpu-failures-per-hour, --preset");
    if (*gpus_opt && !(std::isfinite(gpus) && gpus >= 1 && std::floor(gpus) == gpus))
      return ckpt::cli::usage_error(kTool, "--gpus must be a whole number of at least 1, got " + app["--gpus"]->as<std::string>());
    std::optional<double> gpu_count;
    if (*gpus_opt) gpu_count = gpus;
    ckpt::Result<double> mtbf = 0.0;
    if (*mtbf_opt) {
      mtbf = plan::mtbf_from_hours(mtbf_hours);
      s.mtbf_source = "--mtbf-hours " + app["--mtbf-hours"]->as<std::string>();
    } else if (*mtbf_seconds_opt) {
      mtbf = plan::mtbf_from_seconds(mtbf_seconds);
      s.mtbf_source = "--mtbf-seconds " + app["--mtbf-seconds"]->as<std::string>();
    } else if (*rate_opt) {
      if (!gpu_count) return ckpt::cli::usage_error(kTool, "--gpu-failures-per-hour needs --gpus");
      mtbf = plan::mtbf_from_gpu_rate(*gpu_count, gpu_rate);
      s.mtbf_source = app["--gpu-failures-per-hour"]->as<std::string>() + " failures per GPU-hour on " + printf_text("%.0f", *gpu_count) +
                      " GPUs";
    } else {
      s.preset = plan::find_preset(preset_name);
      if (s.preset == nullptr) {
        std::string known;
        for (const auto& p : plan::kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
        return ckpt::cli::usage_error(kTool, "unknown preset '" + preset_name + "' (known: " + known + ")");
      }
      mtbf = plan::preset_mtbf_seconds(*s.preset, gpu_count);
      s.mtbf_source = std::string(s.preset->name) + " preset, " + printf_text("%.0f", s.preset->interruptions) +
                      " unexpected interruptions in " + printf_text("%.0f", s.preset->days) + " days on " +
                      printf_text("%.0f", s.preset->gpus) + " GPUs" +
                      (gpu_count ? ", rate scaled to " + printf_text("%.0f", *gpu_count) + " GPUs" : "");
    }
    if (!mtbf.ok()) return ckpt::cli::usage_error(kTool, mtbf.status().message());
    s.failures.mtbf_seconds = *mtbf;
    s.failures.restart_seconds = restart;
    if (gpu_count) {
      s.gpus = *gpu_count;
      s.gpus_source = "--gpus";
    } else if (s.preset != nullptr) {
      s.gpus = s.preset->gpus;
      s.gpus_source = "the preset's GPU count";
    }
    if (*capture_opt) {
      TierRun t;
      t.cost = tier_cost;
      t.failures = tier_failures;
      t.failures.mtbf_seconds = *mtbf;
      t.failures.replicated = !no_replicas;
      if (!*app["--memory-restart-seconds"]) t.failures.memory_restart_seconds = restart;
      if (!*app["--persistent-restart-seconds"]) t.failures.persistent_restart_seconds = restart;
      if (!*app["--node-loss-share"]) t.failures.node_loss_share = 0;
      if (!*app["--power-loss-share"]) t.failures.power_loss_share = 0;
      if (!*app["--crash-share"]) t.failures.crash_share = std::max(0.0, 1.0 - t.failures.node_loss_share - t.failures.power_loss_share);
      t.interval_given = app["--memory-interval"]->count() > 0;
      t.persist_every_given = app["--persist-every"]->count() > 0;
      auto planned = plan::plan_tiers(t.cost, t.failures, t.interval_given ? std::optional<double>(memory_interval) : std::nullopt,
                                      t.persist_every_given ? std::optional<std::uint64_t>(persist_every) : std::nullopt);
      if (!planned.ok()) return ckpt::cli::usage_error(kTool, "tiered: " + planned.status().message());
      t.planned = *planned;
      if (*simulate_opt) {
        plan::TierSimulationOptions o;
        o.histories = histories;
        o.seed = seed;
        auto sim = plan::simulate_tiers(t.cost, t.failures, t.planned.policy, o);
        if (!sim.ok()) return ckpt::cli::usage_error(kTool, "--simulate: " + sim.status().message());
        t.simulation = *sim;
      }
      if (as_json) ckpt::cli::print_json(tier_json(s, t));
      else print_tiers(s, t);
      return static_cast<int>(t.simulation && !t.simulation->agrees ? ckpt::cli::kIntegrity : ckpt::cli::kOk);
    }
    if (*interval_opt) {
      if (const auto st = plan::check_interval(interval); !st.ok()) return ckpt::cli::usage_error(kTool, "--interval: " + st.message());
      s.interval = interval;
    }

    // Save costs: flags, or the store's records.
    if (*write_opt && !*stall_opt) return ckpt::cli::usage_error(kTool, "--async-write-seconds needs --async-stall-seconds");
    if (*stall_opt && !*write_opt && store_dir.empty())
      return ckpt::cli::usage_error(kTool, "--async-stall-seconds needs --async-write-seconds (or --store)");
    if (!*save_opt && !*stall_opt && store_dir.empty())
      return ckpt::cli::usage_error(kTool, "missing save cost: give --save-seconds, --async-stall-seconds with "
                                           "--async-write-seconds, --store, or --capture-stall-seconds (tiered)");
    Policy sync{"sync", std::nullopt, "", "", {}, std::nullopt};
    Policy async{"async", std::nullopt, "", "", {}, std::nullopt};
    if (!store_dir.empty()) {
      auto e = store_save_costs(store_dir, *stall_opt ? std::optional<double>(async_stall) : std::nullopt, s.store);
      if (!e.ok()) {
        if (e.status().code() == Code::invalid_argument) return ckpt::cli::usage_error(kTool, e.status().message());
        std::fprintf(stderr, "%s: %s\n", kTool, e.status().message().c_str());
        return static_cast<int>(ckpt::cli::kUsage);
      }
      sync.cost = e->sync;
      sync.source = "store: median persist time of " + std::to_string(e->samples) + " recorded saves (a sync save blocks for all of it)";
      async.cost = e->async;
      if (!e->async) async.unavailable = "n/a: the store recorded only sync saves, so the async stall is unknown (give --async-stall-seconds)";
      else if (*stall_opt) async.source = "--async-stall-seconds, background = the store's median persist time minus that stall";
      else async.source = "store: medians of " + std::to_string(e->async_samples) + " recorded async saves (stall, persist - stall)";
    } else {
      if (*save_opt) {
        sync.cost = plan::SaveCost{save_seconds, 0.0};
        sync.source = "--save-seconds";
      }
      if (*stall_opt) {
        async.cost = plan::SaveCost{async_stall, async_write};
        async.source = "--async-stall-seconds, --async-write-seconds";
        if (!sync.cost) {
          sync.cost = plan::sync_equivalent(*async.cost);
          sync.source = "estimated: a sync save blocks for the async stall plus the background write";
        }
      } else {
        async.unavailable = "n/a: no async save cost given (--async-stall-seconds and --async-write-seconds)";
      }
    }
    std::vector<Policy> policies = {std::move(sync), std::move(async)};
    bool disagrees = false;
    for (auto& p : policies) {
      if (!p.cost) continue;
      auto planned = plan::plan_policy(*p.cost, s.failures, s.gpus, s.interval);
      if (!planned.ok()) return ckpt::cli::usage_error(kTool, p.name + ": " + planned.status().message());
      p.planned = *planned;
      if (*simulate_opt) {
        plan::SimulationOptions o;
        o.histories = histories;
        o.seed = seed;
        auto sim = plan::simulate(*p.cost, s.failures, p.planned.interval_seconds, o);
        if (!sim.ok()) return ckpt::cli::usage_error(kTool, "--simulate: " + sim.status().message());
        p.simulation = *sim;
        disagrees = disagrees || !sim->agrees;
      }
    }

    if (!plot_path.empty()) {
      // Not std::ofstream: --plot naming a FIFO would block it forever (a device or symlink is refused too).
      if (const auto st = ckpt::cli::write_output_file(plot_path, plot_svg(s, policies)); !st.ok()) {
        std::fprintf(stderr, "%s: cannot write the plot: %s\n", kTool, st.message().c_str());
        return static_cast<int>(ckpt::cli::kUsage);
      }
    }
    if (as_json) ckpt::cli::print_json(plan_json(s, policies));
    else print_plan(s, policies);
    return static_cast<int>(disagrees ? ckpt::cli::kIntegrity : ckpt::cli::kOk);
  });
}
