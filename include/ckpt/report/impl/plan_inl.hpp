// ckpt: definitions of report/plan.hpp (spec/LAYOUT.md 4): what ckpt-plan printed itself before issue
// 31, word for word.
#pragma once

#include "../plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <utility>

#include "../../io/posix_fs.hpp"
#include "../../store/store.hpp"
#include "../columns.hpp"

namespace ckpt::report {
namespace detail::planning {

// Seconds for people: enough digits for a sub-second stall, minutes or hours beside long ones.
[[nodiscard]] inline std::string seconds_text(double s) {
  if (s == 0) return "0 s";
  std::string t = s < 1 ? format("%.3f s", s) : s < 100 ? format("%.2f s", s) : format("%.1f s", s);
  if (s >= 7200) t += format(" (%.2f h)", s / 3600);
  else if (s >= 120) t += format(" (%.1f min)", s / 60);
  return t;
}

// Four decimals: Young's and Daly's intervals differ by hundredths of a percentage point.
[[nodiscard]] inline std::string percent_text(double fraction) { return format("%.4f%%", 100 * fraction); }

[[nodiscard]] inline std::string gpu_hours_text(double h) { return h >= 100 ? format("%.0f", h) : format("%.3g", h); }

// --- JSON ------------------------------------------------------------------------------------------

[[nodiscard]] inline json simulation_json(const plan::SimulationResult& s) {
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

[[nodiscard]] inline json policy_json(const PlanPolicy& p) {
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

[[nodiscard]] inline json policies_json(const PlanReport& s) {
  const std::vector<PlanPolicy>& policies = s.policies;
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

[[nodiscard]] inline std::string policies_text(const PlanReport& s) {
  std::string out;
  const std::vector<PlanPolicy>& policies = s.policies;
  out += format("MTBF %s: %s\n", seconds_text(s.failures.mtbf_seconds).c_str(), s.mtbf_source.c_str());
  out += format("restart %s; restarts alone waste %s at any interval\n", seconds_text(s.failures.restart_seconds).c_str(),
              percent_text(plan::restart_waste_floor(s.failures)).c_str());
  if (s.gpus_source.empty()) out += format("GPU count unknown: lost GPU-hours are per GPU (give --gpus N)\n");
  else out += format("lost GPU-hours for %.0f GPUs (%s)\n", s.gpus, s.gpus_source.c_str());
  out += format("\n");
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
  out += table_text(rows, {false, true, true, true, true, true, true, true, true, true});
  out += format("\n");
  for (const auto& p : policies) {
    if (!p.cost) out += format("%s: %s\n", p.name.c_str(), p.unavailable.c_str());
    else out += format("%s: %s\n", p.name.c_str(), p.source.c_str());
    if (!p.cost) continue;
    const plan::PolicyPlan& q = p.planned;
    if (q.save_waits_for_write || q.daly_seconds < q.cost.background_seconds)
      out += format("%s: the background write (%s) outlasts %s: each save waits for the previous one, so the model's own "
                  "optimum is %s (waste %s)\n",
                  p.name.c_str(), seconds_text(q.cost.background_seconds).c_str(),
                  q.save_waits_for_write ? "the interval" : "Daly's interval", seconds_text(q.optimum_seconds).c_str(),
                  percent_text(q.waste_at_optimum).c_str());
  }
  const PlanPolicy* sync = nullptr;
  const PlanPolicy* async = nullptr;
  for (const auto& p : policies) (p.name == "sync" ? sync : async) = p.cost ? &p : nullptr;
  if (sync != nullptr && async != nullptr)
    out += format("async instead of sync: %s lost GPU-hours/day%s fewer (%s of wall time)\n",
                gpu_hours_text(sync->planned.lost_gpu_hours_per_day - async->planned.lost_gpu_hours_per_day).c_str(),
                s.gpus_source.empty() ? " per GPU" : "",
                percent_text(sync->planned.waste - async->planned.waste).c_str());
  bool header = false;
  for (const auto& p : policies) {
    if (!p.simulation) continue;
    const plan::SimulationResult& r = *p.simulation;
    if (!header) {
      out += format("\nsimulated at %s: %llu histories, seed %llu; agrees when within %.0f standard errors of the model\n",
                  s.interval ? "--interval" : "each policy's Daly interval", static_cast<unsigned long long>(r.histories),
                  static_cast<unsigned long long>(r.seed), plan::kAgreementSigmas);
      header = true;
    }
    out += format("  %-5s waste %s +- %s, model %s, |difference| %s: %s (%llu intervals, %.1f failures per history)\n",
                p.name.c_str(), percent_text(r.mean_waste).c_str(), percent_text(r.standard_error).c_str(),
                percent_text(r.model_waste).c_str(), percent_text(std::abs(r.mean_waste - r.model_waste)).c_str(),
                r.agrees ? "agrees" : "DISAGREES", static_cast<unsigned long long>(r.intervals), r.mean_failures);
  }
  return out;
}

// --- SVG -----------------------------------------------------------------------------------------

[[nodiscard]] inline std::string xml_text(const std::string& s) {
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

[[nodiscard]] inline std::string num(double v) { return format("%.2f", v); }

// A round tick step (1, 2 or 5 times a power of ten) giving about five ticks up to max.
[[nodiscard]] inline double nice_step(double max) {
  const double raw = max / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

[[nodiscard]] inline std::string tick_seconds(double s) {
  if (s >= 1) return format("%.0f s", s);
  return format("%g s", s);
}

// Waste (y, linear, %) against interval (x, log): one curve per policy, Young and Daly marked on each.
[[nodiscard]] inline std::string plot_svg(const PlanReport& s) {
  const std::vector<PlanPolicy>& policies = s.policies;
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
           format(y_step < 1 ? "%.1f%%" : "%.0f%%", y) + "</text>\n";
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
             xml_text(p.name + " " + m.name + " " + format(m.tau < 10 ? "%.2f s" : "%.0f s", m.tau) + " (" +
                      format("%.2f%%", 100 * m.waste) + ")") +
             "</text>\n";
    }
    // Where Daly's estimate misses the model's minimum (a background write longer than it), mark both.
    if (q.waste_at_daly - q.waste_at_optimum > 0.01 * q.waste_at_optimum) {
      const double x = x_of(q.optimum_seconds), y = y_of(100 * q.waste_at_optimum);
      svg += "<path d=\"M " + num(x) + " " + num(y - 6) + " L " + num(x + 6) + " " + num(y + 5) + " L " + num(x - 6) + " " + num(y + 5) +
             " Z\" fill=\"" + color + "\" stroke=\"#fff\"/>\n";
      svg += "<text x=\"" + num(x + 9) + "\" y=\"" + num(y + 18) + "\" fill=\"" + color + "\">" +
             xml_text(p.name + " model optimum " + format(q.optimum_seconds < 10 ? "%.2f s" : "%.0f s", q.optimum_seconds) + " (" +
                      format("%.2f%%", 100 * q.waste_at_optimum) + ")") +
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

[[nodiscard]] inline json tier_json(const PlanReport& s, const PlanTiers& t) {
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
    // The closed form models neither the ring nor skips: agreement is only defined without them (10.5.1).
    doc["agrees"] = t.follows_rules() ? json(nullptr) : json(r.agrees);
    doc["simulation"] = {{"histories", r.histories},
                         {"memory_slots", t.memory_slots},
                         {"skip_when_busy", t.skip_when_busy},
                         {"mean_skipped_per_history", r.mean_skipped},
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

[[nodiscard]] inline std::string tiers_text(const PlanReport& s, const PlanTiers& t) {
  std::string out;
  const plan::TierPlan& q = t.planned;
  const plan::TierFailures& f = t.failures;
  out += format("MTBF %s: %s\n", seconds_text(f.mtbf_seconds).c_str(), s.mtbf_source.c_str());
  auto share = [](double v) { return format("%.4g%%", 100 * v); };
  out += format("failures: crash %s, node loss %s (%s), power loss %s: %s need persistent storage\n", share(f.crash_share).c_str(),
              share(f.node_loss_share).c_str(), f.replicated ? "served by a peer's memory" : "no replicas: served by persistent storage",
              share(f.power_loss_share).c_str(), share(q.persistent_share).c_str());
  out += format("capture: stall %s, held on its peers %s later; promotion: stall %s more, persistent %s later\n",
              seconds_text(t.cost.capture_stall_seconds).c_str(), seconds_text(t.cost.replicate_seconds).c_str(),
              seconds_text(t.cost.persist_stall_seconds).c_str(), seconds_text(t.cost.persist_seconds).c_str());
  out += format("restart: %s from memory, %s from persistent storage\n", seconds_text(f.memory_restart_seconds).c_str(),
              seconds_text(f.persistent_restart_seconds).c_str());
  if (s.gpus_source.empty()) out += format("GPU count unknown: lost GPU-hours are per GPU (give --gpus N)\n");
  else out += format("lost GPU-hours for %.0f GPUs (%s)\n", s.gpus, s.gpus_source.c_str());
  out += format("\n");
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
  out += table_text(rows, {false, true, true, true, true, true});
  out += format("\nfirst-order closed form (spec/PLAN.md 10.3): close to the simulation while costs and promotions are well below the MTBF\n");
  if (t.simulation) {
    const plan::TierSimulationResult& r = *t.simulation;
    out += format("simulated at the %s policy: %llu histories of %llu captures, seed %llu: waste %s +- %s, closed form %s, "
                "|difference| %s: %s (tolerance %s: %.0f standard errors + %.0f%% of the closed form; %.1f failures, "
                "%.1f restarts from persistent storage per history)\n",
                t.interval_given || t.persist_every_given ? "given" : "optimum", static_cast<unsigned long long>(r.histories),
                static_cast<unsigned long long>(r.captures), static_cast<unsigned long long>(r.seed), percent_text(r.mean_waste).c_str(),
                percent_text(r.standard_error).c_str(), percent_text(r.model_waste).c_str(),
                percent_text(std::abs(r.mean_waste - r.model_waste)).c_str(),
                t.follows_rules() ? "not checked" : r.agrees ? "agrees" : "DISAGREES", percent_text(r.tolerance).c_str(),
                plan::kAgreementSigmas, 100 * plan::kTierModelTolerance, r.mean_failures, r.mean_persistent_restarts);
    if (t.follows_rules())
      out += format("the simulation follows the checkpointer's rules, which the closed form leaves out (spec/PLAN.md 10.5.1): "
                    "a ring of %s, %s when busy; %.1f captures skipped per history\n",
                    t.memory_slots == 0 ? "unbounded slots" : (std::to_string(t.memory_slots) + " slots").c_str(),
                    t.skip_when_busy ? "skip" : "wait", r.mean_skipped);
  }
  return out;
}

// --- Inputs --------------------------------------------------------------------------------------

// The save costs a store recorded, turned into seconds for the planner.
[[nodiscard]] inline ckpt::Result<plan::SaveCostEstimate> store_save_costs(const std::string& dir, std::optional<double> async_stall,
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

// --- Deciding ------------------------------------------------------------------------------------

[[nodiscard]] inline Status usage(const std::string& message) { return make_error(Code::invalid_argument, message); }

// The MTBF from exactly one source, and the GPU count the lost GPU-hours are for.
[[nodiscard]] inline Status resolve_failures(const PlanRequest& q, PlanReport& s) {
  const int mtbf_sources = (q.mtbf_hours ? 1 : 0) + (q.mtbf_seconds ? 1 : 0) + (q.gpu_failures_per_hour ? 1 : 0) + (q.preset ? 1 : 0);
  if (mtbf_sources == 0)
    return usage("missing MTBF: give --mtbf-hours, --mtbf-seconds, --gpu-failures-per-hour with --gpus, or --preset");
  if (mtbf_sources > 1) return usage("give only one of --mtbf-hours, --mtbf-seconds, --gpu-failures-per-hour, --preset");
  if (q.gpus && !(std::isfinite(*q.gpus) && *q.gpus >= 1 && std::floor(*q.gpus) == *q.gpus))
    return usage("--gpus must be a whole number of at least 1, got " + q.gpus_text);
  const std::optional<double>& gpu_count = q.gpus;
  Result<double> mtbf = 0.0;
  if (q.mtbf_hours) {
    mtbf = plan::mtbf_from_hours(*q.mtbf_hours);
    s.mtbf_source = "--mtbf-hours " + q.mtbf_hours_text;
  } else if (q.mtbf_seconds) {
    mtbf = plan::mtbf_from_seconds(*q.mtbf_seconds);
    s.mtbf_source = "--mtbf-seconds " + q.mtbf_seconds_text;
  } else if (q.gpu_failures_per_hour) {
    if (!gpu_count) return usage("--gpu-failures-per-hour needs --gpus");
    mtbf = plan::mtbf_from_gpu_rate(*gpu_count, *q.gpu_failures_per_hour);
    s.mtbf_source = q.gpu_failures_per_hour_text + " failures per GPU-hour on " + format("%.0f", *gpu_count) + " GPUs";
  } else {
    s.preset = plan::find_preset(*q.preset);
    if (s.preset == nullptr) {
      std::string known;
      for (const auto& p : plan::kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
      return usage("unknown preset '" + *q.preset + "' (known: " + known + ")");
    }
    mtbf = plan::preset_mtbf_seconds(*s.preset, gpu_count);
    s.mtbf_source = std::string(s.preset->name) + " preset, " + format("%.0f", s.preset->interruptions) +
                    " unexpected interruptions in " + format("%.0f", s.preset->days) + " days on " +
                    format("%.0f", s.preset->gpus) + " GPUs" +
                    (gpu_count ? ", rate scaled to " + format("%.0f", *gpu_count) + " GPUs" : "");
  }
  if (!mtbf.ok()) return usage(mtbf.status().message());
  s.failures.mtbf_seconds = *mtbf;
  s.failures.restart_seconds = q.restart_seconds;
  if (gpu_count) {
    s.gpus = *gpu_count;
    s.gpus_source = "--gpus";
  } else if (s.preset != nullptr) {
    s.gpus = s.preset->gpus;
    s.gpus_source = "the preset's GPU count";
  }
  return Status();
}

// The tiered model (spec/PLAN.md 10): defaults filled in, planned, and simulated when asked.
[[nodiscard]] inline Result<PlanTiers> tiered_plan(const PlanRequest& q, double mtbf_seconds) {
  PlanTiers t;
  t.cost.capture_stall_seconds = *q.capture_stall_seconds;
  t.cost.replicate_seconds = q.replicate_seconds.value_or(t.cost.replicate_seconds);
  t.cost.persist_stall_seconds = q.persist_stall_seconds.value_or(t.cost.persist_stall_seconds);
  t.cost.persist_seconds = q.persist_seconds.value_or(t.cost.persist_seconds);
  t.failures.mtbf_seconds = mtbf_seconds;
  t.failures.replicated = !q.no_replicas;
  t.failures.memory_restart_seconds = q.memory_restart_seconds.value_or(q.restart_seconds);
  t.failures.persistent_restart_seconds = q.persistent_restart_seconds.value_or(q.restart_seconds);
  t.failures.node_loss_share = q.node_loss_share.value_or(0);
  t.failures.power_loss_share = q.power_loss_share.value_or(0);
  t.failures.crash_share = q.crash_share ? *q.crash_share : std::max(0.0, 1.0 - t.failures.node_loss_share - t.failures.power_loss_share);
  t.interval_given = q.memory_interval_seconds.has_value();
  t.persist_every_given = q.persist_every.has_value();
  auto planned = plan::plan_tiers(t.cost, t.failures, q.memory_interval_seconds, q.persist_every);
  if (!planned.ok()) return usage("tiered: " + planned.status().message());
  t.planned = *planned;
  if (q.simulate) {
    plan::TierSimulationOptions o;
    o.histories = *q.simulate;
    o.seed = q.seed;
    o.memory_slots = t.memory_slots = q.memory_slots;
    o.skip_when_busy = t.skip_when_busy = q.skip_when_busy;
    auto sim = plan::simulate_tiers(t.cost, t.failures, t.planned.policy, o);
    if (!sim.ok()) return usage("--simulate: " + sim.status().message());
    t.simulation = *sim;
  }
  return t;
}

// Each policy's save cost: from the flags, or from the saves the store recorded.
[[nodiscard]] inline Status policy_costs(const PlanRequest& q, PlanReport& s) {
  if (q.async_write_seconds && !q.async_stall_seconds) return usage("--async-write-seconds needs --async-stall-seconds");
  if (q.async_stall_seconds && !q.async_write_seconds && q.store_dir.empty())
    return usage("--async-stall-seconds needs --async-write-seconds (or --store)");
  if (!q.save_seconds && !q.async_stall_seconds && q.store_dir.empty())
    return usage("missing save cost: give --save-seconds, --async-stall-seconds with "
                 "--async-write-seconds, --store, or --capture-stall-seconds (tiered)");
  PlanPolicy sync{"sync", std::nullopt, "", "", {}, std::nullopt};
  PlanPolicy async{"async", std::nullopt, "", "", {}, std::nullopt};
  if (!q.store_dir.empty()) {
    auto e = store_save_costs(q.store_dir, q.async_stall_seconds, s.store);
    if (!e.ok()) return e.status();  // invalid_argument: a usage error; anything else: the store could not be read
    sync.cost = e->sync;
    sync.source = "store: median persist time of " + std::to_string(e->samples) + " recorded saves (a sync save blocks for all of it)";
    async.cost = e->async;
    if (!e->async) async.unavailable = "n/a: the store recorded only sync saves, so the async stall is unknown (give --async-stall-seconds)";
    else if (q.async_stall_seconds) async.source = "--async-stall-seconds, background = the store's median persist time minus that stall";
    else async.source = "store: medians of " + std::to_string(e->async_samples) + " recorded async saves (stall, persist - stall)";
  } else {
    if (q.save_seconds) {
      sync.cost = plan::SaveCost{*q.save_seconds, 0.0};
      sync.source = "--save-seconds";
    }
    if (q.async_stall_seconds) {
      async.cost = plan::SaveCost{*q.async_stall_seconds, *q.async_write_seconds};
      async.source = "--async-stall-seconds, --async-write-seconds";
      if (!sync.cost) {
        sync.cost = plan::sync_equivalent(*async.cost);
        sync.source = "estimated: a sync save blocks for the async stall plus the background write";
      }
    } else {
      async.unavailable = "n/a: no async save cost given (--async-stall-seconds and --async-write-seconds)";
    }
  }
  s.policies = {std::move(sync), std::move(async)};
  return Status();
}

}  // namespace detail::planning

CKPT_INLINE int PlanReport::exit_code() const noexcept {
  bool disagrees = tiers && tiers->simulation && !tiers->follows_rules() && !tiers->simulation->agrees;
  for (const auto& p : policies) disagrees = disagrees || (p.simulation && !p.simulation->agrees);
  return disagrees ? kIntegrity : kOk;
}

CKPT_INLINE Result<PlanReport> plan_report(const PlanRequest& q) {
  using namespace detail::planning;
  PlanReport s;
  CKPT_TRY(resolve_failures(q, s));
  if (q.capture_stall_seconds) {
    CKPT_ASSIGN_OR_RETURN(PlanTiers t, tiered_plan(q, s.failures.mtbf_seconds));
    s.tiers = std::move(t);
    return s;
  }
  if (q.interval_seconds) {
    if (const auto st = plan::check_interval(*q.interval_seconds); !st.ok()) return usage("--interval: " + st.message());
    s.interval = q.interval_seconds;
  }
  CKPT_TRY(policy_costs(q, s));
  for (auto& p : s.policies) {
    if (!p.cost) continue;
    auto planned = plan::plan_policy(*p.cost, s.failures, s.gpus, s.interval);
    if (!planned.ok()) return usage(p.name + ": " + planned.status().message());
    p.planned = *planned;
    if (q.simulate) {
      plan::SimulationOptions o;
      o.histories = *q.simulate;
      o.seed = q.seed;
      auto sim = plan::simulate(*p.cost, s.failures, p.planned.interval_seconds, o);
      if (!sim.ok()) return usage("--simulate: " + sim.status().message());
      p.simulation = *sim;
    }
  }
  return s;
}

CKPT_INLINE json plan_json(const PlanReport& report) {
  return report.tiers ? detail::planning::tier_json(report, *report.tiers) : detail::planning::policies_json(report);
}

CKPT_INLINE std::string plan_text(const PlanReport& report) {
  return report.tiers ? detail::planning::tiers_text(report, *report.tiers) : detail::planning::policies_text(report);
}

CKPT_INLINE std::string plan_svg(const PlanReport& report) { return detail::planning::plot_svg(report); }

}  // namespace ckpt::report
