// ckpt tools: what ckpt-inspect, ckpt-verify and ckpt-repair share about stores (spec/JOURNAL.md):
// telling a shard file, a store and a step directory apart, choosing steps (all, --step N, --latest),
// loading a step pinned by its COMMIT record or a bare step directory by its MANIFEST, and the JSON
// forms of journal scans, steps and training state.
#pragma once

#include <chrono>
#include <thread>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/journal.hpp>
#include <ckpt/manifest.hpp>
#include <ckpt/shard_reader.hpp>
#include <ckpt/path_kind.hpp>
#include <ckpt/store.hpp>

#include "report_json.hpp"

namespace ckpt::tools {

using nlohmann::json;

// Telling a shard file, a store and a step directory apart: the library's (ckpt/path_kind.hpp).
using ckpt::classify_path;
using ckpt::not_a_store_error;
using ckpt::path_kind_name;
using ckpt::PathKind;

// Which steps of a store a command acts on.
struct StepSelection {
  std::optional<std::uint64_t> step;  // --step N
  bool latest = false;                // --latest
  [[nodiscard]] bool all() const noexcept { return !step && !latest; }
};

[[nodiscard]] inline Result<std::vector<StepInfo>> select_steps(const Store& store, const StepSelection& sel) {
  std::vector<StepInfo> out;
  if (sel.step) {
    CKPT_ASSIGN_OR_RETURN(StepInfo info, store.find(*sel.step));
    out.push_back(std::move(info));
  } else if (sel.latest) {
    auto latest = store.latest();
    if (!latest) return make_error(Code::not_found, store.path() + ": no committed step");
    out.push_back(*latest);
  } else {
    out = store.steps();
  }
  return out;
}

// Opens a store for reading: never writes, takes no lock, and shows what the applied records prove
// even when the journal has mid-log damage (which the caller reports).
// A reader beside a live writer can catch a group mid-append: bytes past the old end that are there
// but not yet all copied look like a damaged tail. So a damaged tail is re-read a few times, 50 ms
// apart, and reported only once the journal stopped changing (spec/JOURNAL.md 6.9).
[[nodiscard]] inline Result<std::unique_ptr<Store>> open_store_for_reading(PosixFs& fs, const std::string& path) {
  StoreOptions o;
  o.allow_corrupt_journal = true;
  auto store = Store::open(fs, path, Access::read_only, o);
  for (int attempt = 0; attempt < 4 && store.ok() && (*store)->recovery_report().tail_damaged(); ++attempt) {
    const JournalScan& before = (*store)->recovery_report().journal;
    const std::uint64_t size = before.file_size, end = before.end;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto again = Store::open(fs, path, Access::read_only, o);
    if (!again.ok()) return again;
    const JournalScan& now = (*again)->recovery_report().journal;
    const bool changed = now.file_size != size || now.end != end;
    store = std::move(again);
    if (!changed) break;  // the same bytes twice: damage, not an append in progress
  }
  return store;
}

// A step directory on its own, read by the library (ckpt/step_reader.hpp).
using ckpt::read_step_directory;
using ckpt::StepDirectory;

using ckpt::locate_step_directory;
using ckpt::StepInStore;

// --- JSON ------------------------------------------------------------------------------------------

// A typed value as {"type", "value"}: the same spelling shard metadata gets (report_json.hpp).
[[nodiscard]] inline json value_json(const Value& v) {
  return {{"type", value_type_name(v.type())}, {"value", metadata_value_json(v)}};
}

[[nodiscard]] inline json training_state_json(const TrainingState& s) {
  json values = json::object();
  for (const auto& [key, value] : s.values) values[key] = value_json(value);
  return {{"step", s.step},
          {"rng_bytes", s.rng.size()},
          {"rng", hex_bytes(s.rng, 64)},
          {"data", {{"epoch", s.data.epoch}, {"offset", s.data.offset}, {"state_bytes", s.data.state.size()}}},
          {"optimizer_tensors", s.optimizer_tensors},
          {"values", std::move(values)}};
}

[[nodiscard]] inline json step_info_json(const StepInfo& s) {
  json files = json::array();
  for (const auto& f : s.files) files.push_back({{"rank", f.rank}, {"name", f.name}});
  return {{"step", s.step},           {"txn", s.txn},
          {"dir", s.dir},             {"world_size", s.world_size},
          {"files", std::move(files)}, {"manifest_size", s.manifest_size},
          {"manifest_digest", hex64(s.manifest_digest)}, {"commit_offset", s.commit_offset}};
}

[[nodiscard]] inline json manifest_shards_json(const Manifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"rank", s.rank},
                      {"name", s.name},
                      {"file_size", s.file_size},
                      {"uuid", uuid_string(s.uuid)},
                      {"index_digest", hex64(s.index_digest)},
                      {"data_bytes", s.data_bytes},
                      {"tensor_count", s.tensor_count},
                      {"chunk_count", s.chunk_count}});
  return shards;
}

[[nodiscard]] inline json damage_json(const JournalDamage& d) {
  json unapplied = json::array();
  for (const auto& r : d.unapplied) unapplied.push_back(r.describe());
  return {{"offset", d.offset}, {"length", d.length}, {"bad_offset", d.bad_offset}, {"reason", d.reason},
          {"clean_tear", d.clean_tear}, {"unapplied", std::move(unapplied)}};
}

[[nodiscard]] inline json journal_json(const JournalScan& j) {
  json doc = {{"path", j.path},          {"file_size", j.file_size}, {"end", j.end},
              {"has_header", j.has_header}, {"groups", j.groups},      {"records", j.records.size()}};
  doc["store_uuid"] = j.has_header ? json(uuid_string(j.header.store_uuid)) : json(nullptr);
  doc["torn_tail"] = j.torn_tail ? damage_json(*j.torn_tail) : json(nullptr);
  json corruption = json::array();
  for (const auto& d : j.corruption) corruption.push_back(damage_json(d));
  doc["corruption"] = std::move(corruption);
  return doc;
}

[[nodiscard]] inline json transactions_json(const std::vector<TxnInfo>& txns) {
  json out = json::array();
  for (const auto& t : txns)
    out.push_back({{"txn", t.txn}, {"step", t.step}, {"state", txn_state_name(t.state)}, {"dir", t.dir()}});
  return out;
}

// One line about the journal: size, groups, and what is wrong with it.
[[nodiscard]] inline std::string journal_line(const JournalScan& j) {
  std::string s = std::to_string(j.file_size) + " bytes, " + std::to_string(j.groups) + " complete groups, " +
                  std::to_string(j.records.size()) + " records";
  if (j.torn_tail && j.torn_tail->clean_tear)
    s += "; torn tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (" + std::to_string(j.torn_tail->length) + " bytes, left by a crash during an append)";
  else if (j.torn_tail)
    s += "; DAMAGED tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (not a torn append: " + j.torn_tail->reason + ")";
  if (!j.has_header) s += "; no valid HEADER at offset 0";
  for (const auto& d : j.corruption)
    s += "; CORRUPT bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + "): " + d.reason;
  return s;
}

}  // namespace ckpt::tools
