// ckpt tools: what ckpt-inspect, ckpt-verify and ckpt-repair print about a memory tier's root or one of
// its rank directories (spec/TIERS.md 2, 5). The library describes, verifies and repairs
// (ckpt/tiers/memory_root.hpp); this turns its reports into JSON and lines, nothing more.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/tiers/memory_root.hpp>

#include "report_json.hpp"
#include "store_cli.hpp"

namespace ckpt::tools {

using nlohmann::json;

[[nodiscard]] inline json digest_json(const Digest128& d) { return d == Digest128{} ? json(nullptr) : json(d.hex()); }

[[nodiscard]] inline json root_problem_json(const tiers::RootProblem& p) {
  json j = problem_json(p.detail);
  j["rank_dir"] = p.rank_dir.empty() ? json(nullptr) : json(p.rank_dir);
  j["store"] = p.store;
  j["step"] = p.step ? json(*p.step) : json(nullptr);
  j["shard"] = p.shard ? json(*p.shard) : json(nullptr);
  j["txn"] = p.txn;
  j["message"] = p.message;
  return j;
}

[[nodiscard]] inline json root_problems_json(const std::vector<tiers::RootProblem>& problems) {
  json out = json::array();
  for (const auto& p : problems) out.push_back(root_problem_json(p));
  return out;
}

[[nodiscard]] inline json copy_json(const tiers::ShardCopy& c) {
  json j = {{"rank_dir", "rank-" + std::to_string(c.rank_dir)},
            {"store", c.store},
            {"where", c.where},
            {"own", c.own},
            {"step", c.step},
            {"shard", c.shard},
            {"txn", c.info.txn},
            {"dir", c.info.dir},
            {"digest", digest_json(c.digest)},
            {"expected", digest_json(c.expected)},
            {"recorded", c.recorded},
            {"matches", c.matches()},
            {"set_aside", c.set_aside},
            {"error", c.error.empty() ? json(nullptr) : json(c.error)}};
  j["verified"] = c.verified ? json(*c.verified) : json(nullptr);
  return j;
}

[[nodiscard]] inline json step_json(const tiers::MemoryRoot& root, const tiers::MemoryStep& s, bool verified) {
  json shards = json::array();
  for (const auto& sh : s.shards) {
    json held = json::array();
    for (const auto i : sh.copies) held.push_back(copy_json(root.copies[i]));
    json j = {{"shard", sh.shard}, {"digest", digest_json(sh.digest)}, {"copies", sh.matching}, {"held", std::move(held)}};
    if (verified) j["verified"] = sh.verified;
    shards.push_back(std::move(j));
  }
  json events = json::array();
  for (const auto& e : s.events)
    events.push_back({{"rank_dir", "rank-" + std::to_string(e.rank_dir)},
                      {"event", tiers::tier_event_name(e.record.event)},
                      {"shard", e.record.shard},
                      {"txn", e.record.txn},
                      {"copies", e.record.copies},
                      {"detail", e.record.event == tiers::TierEvent::captured ? json(nullptr) : json(e.record.detail)},
                      {"text", e.record.describe()}});
  return {{"step", s.step},
          {"digest", digest_json(s.digest)},
          {"world", s.world == 0 ? json(nullptr) : json(s.world)},
          {"captured", s.captured},
          {"replicated", s.replicated},
          {"replicated_copies", s.replicated_copies},
          {"persisted", s.persisted},
          {"load_failed", s.load_failed},
          {"resumed", s.resumed},
          {"set_aside", s.set_aside},
          {"shards_here", s.shards_here()},
          {"fewest_copies", s.fewest_copies()},
          {"persistent",
           {{"state", tiers::persistent_state_name(s.persistent)},
            {"txn", s.persistent_txn == 0 ? json(nullptr) : json(s.persistent_txn)},
            {"detail", s.persistent_detail.empty() ? json(nullptr) : json(s.persistent_detail)}}},
          {"shards", std::move(shards)},
          {"events", std::move(events)}};
}

// The whole description: rank directories and their logs, steps, copies, problems and notes.
[[nodiscard]] inline json memory_root_json(const tiers::MemoryRoot& root, bool verified = false) {
  json dirs = json::array();
  for (const auto& d : root.rank_dirs)
    dirs.push_back({{"rank", d.rank},
                    {"path", d.path},
                    {"stores", d.stores},
                    {"tier_log",
                     {{"present", d.log_present},
                      {"records", d.records.size()},
                      {"torn_tail", d.torn_tail ? damage_json(*d.torn_tail) : json(nullptr)},
                      {"error", d.log_error.ok() ? json(nullptr)
                                                 : json({{"code", code_name(d.log_error.code())}, {"message", d.log_error.message()}})}}}});
  json steps = json::array();
  for (const auto& s : root.steps) steps.push_back(step_json(root, s, verified));
  json copies = json::array();
  for (const auto& c : root.copies) copies.push_back(copy_json(c));
  return {{"path", root.path},
          {"memory_root", root.root},
          {"kind", path_kind_name(root.kind)},
          {"persistent", root.persistent.empty() ? json(nullptr) : json(root.persistent)},
          {"ok", root.ok()},
          {"rank_dirs", std::move(dirs)},
          {"steps", std::move(steps)},
          {"copies", std::move(copies)},
          {"problems", root_problems_json(root.problems)},
          {"notes", root.notes}};
}

// "step 6 (digest 0123456789ab, world 4)"
[[nodiscard]] inline std::string step_label(const tiers::MemoryStep& s) {
  return "step " + std::to_string(s.step) + " (" + (s.digest_known() ? "digest " + s.digest.hex().substr(0, 12) : std::string("digest unknown")) +
         (s.world ? ", world " + std::to_string(s.world) : std::string()) + ")";
}

// What the logs recorded about a step, counted by event: "CAPTURED 4, HELD 4, REPLICATED 4 (1 copy), PERSISTED 4".
[[nodiscard]] inline std::string events_line(const tiers::MemoryStep& s) {
  std::map<std::uint16_t, std::size_t> counts;
  for (const auto& e : s.events) ++counts[static_cast<std::uint16_t>(e.record.event)];
  std::string line;
  for (const auto& [event, n] : counts) {
    line += (line.empty() ? "" : ", ") + std::string(tiers::tier_event_name(static_cast<tiers::TierEvent>(event))) + " " + std::to_string(n);
    if (static_cast<tiers::TierEvent>(event) == tiers::TierEvent::replicated)
      line += " (" + std::to_string(s.replicated_copies) + " cop" + (s.replicated_copies == 1 ? "y" : "ies") + " of every shard)";
  }
  return line.empty() ? "none" : line;
}

// One copy for a "held in" list: "rank-1/held-0 (txn 3)", with what is wrong with it.
[[nodiscard]] inline std::string copy_text(const tiers::ShardCopy& c) {
  std::string s = c.where + " (txn " + std::to_string(c.info.txn) + ")";
  if (!c.error.empty()) s += " DOES NOT OPEN";
  else if (c.expected != Digest128{} && c.digest != c.expected) s += " OTHER CONTENT";
  if (c.set_aside) s += " set aside";
  if (c.verified && !*c.verified) s += " DAMAGED";
  if (!c.recorded) s += " unrecorded";
  return s;
}

inline void print_root_header(const tiers::MemoryRoot& root) {
  std::size_t stores = 0, records = 0;
  for (const auto& d : root.rank_dirs) stores += d.stores.size(), records += d.records.size();
  std::printf("%s: %s", printable(root.path).c_str(), path_kind_name(root.kind));
  if (root.kind == PathKind::rank_dir) std::printf(" of memory root %s", printable(root.root).c_str());
  std::printf(", %zu rank director%s, %zu stores, %zu copies, %zu tier log records\n", root.rank_dirs.size(),
              root.rank_dirs.size() == 1 ? "y" : "ies", stores, root.copies.size(), records);
}

inline void print_notes(const std::vector<std::string>& notes) {
  for (const auto& n : notes) std::printf("  note: %s\n", printable(n).c_str());
}

inline void print_root_problems(const std::vector<tiers::RootProblem>& problems) {
  for (const auto& p : problems) std::printf("  %s: %s\n", code_name(p.code), printable(p.message).c_str());
}

}  // namespace ckpt::tools
