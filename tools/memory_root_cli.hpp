// ckpt tools: what ckpt-inspect, ckpt-verify and ckpt-repair print about a memory tier's root or one of
// its rank directories (spec/TIERS.md 2, 5). The library describes, verifies and repairs
// (ckpt/tiers/memory_root.hpp); this turns its reports into JSON and lines, nothing more.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <ckpt/report/json.hpp>
#include <ckpt/report/steps.hpp>
#include <ckpt/tiers/memory_root.hpp>

namespace ckpt::tools {

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
