// ckpt: definitions of report/text.hpp (spec/LAYOUT.md 4): the text the tools printed themselves before
// issue 31 part 3, word for word.
#pragma once

#include "../text.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace ckpt::report {
namespace detail {

// --- Memory roots (spec/TIERS.md 2, 5) -----------------------------------------------------------------

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

[[nodiscard]] inline std::string root_header_text(const tiers::MemoryRoot& root) {
  std::size_t stores = 0, records = 0;
  for (const auto& d : root.rank_dirs) stores += d.stores.size(), records += d.records.size();
  std::string s = printable(root.path) + ": " + path_kind_name(root.kind);
  if (root.kind == PathKind::rank_dir) s += " of memory root " + printable(root.root);
  return s + format(", %zu rank director%s, %zu stores, %zu copies, %zu tier log records\n", root.rank_dirs.size(),
                    root.rank_dirs.size() == 1 ? "y" : "ies", stores, root.copies.size(), records);
}

[[nodiscard]] inline std::string notes_text(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += "  note: " + printable(n) + "\n";
  return s;
}

[[nodiscard]] inline std::string root_problems_text(const std::vector<tiers::RootProblem>& problems) {
  std::string s;
  for (const auto& p : problems) s += std::string("  ") + code_name(p.code) + ": " + printable(p.message) + "\n";
  return s;
}

// --- Verify ----------------------------------------------------------------------------------------

// One file: a status line, then one line per problem (a file not read is said on stderr instead).
[[nodiscard]] inline std::string outcome_text(const FileOutcome& o, bool quiet) {
  if (!o.has_report) return "";
  const auto& r = o.report;
  const std::string path = printable(o.path);
  if (r.ok())
    return quiet ? "" : format("%s: ok (%llu chunks, %s checked)\n", path.c_str(), static_cast<unsigned long long>(r.chunks_checked),
                               human_bytes(static_cast<double>(r.bytes_checked)).c_str());
  std::string s = format("%s: DAMAGED (%zu problem%s)\n", path.c_str(), r.problems.size(), r.problems.size() == 1 ? "" : "s");
  for (const auto& p : r.problems) s += "  " + problem_line(o.path, p) + "\n";
  return s;
}

[[nodiscard]] inline std::string step_outcome_text(const StepOutcome& step, const std::vector<FileOutcome>& outcomes, bool quiet) {
  if (step.retired)
    return quiet ? ""
                 : format("%s: retired while being verified (%s in the journal re-read after its files went missing; not damage)\n",
                          printable(step.label).c_str(), step.retired_state.c_str());
  if (step.ok)
    return quiet ? ""
                 : format("%s: ok (%zu file%s, %llu chunks, %s checked)%s\n", printable(step.label).c_str(), step.files.size(),
                          step.files.size() == 1 ? "" : "s", static_cast<unsigned long long>(step.chunks),
                          human_bytes(static_cast<double>(step.bytes)).c_str(),
                          step.state.empty() || step.state == "committed" ? "" : (" (note: " + step.state + " in its store, not a step)").c_str());
  std::string s = printable(step.label) + ": DAMAGED\n";
  // Each problem once: a shard the verifier could not read is one of the step's problems.
  for (const auto& p : step.problems) s += std::string("  ") + code_name(p.code) + ": " + printable(p.message) + "\n";
  for (const auto k : step.files)
    for (const auto& p : outcomes[k].report.problems) s += "  " + problem_line(outcomes[k].path, p) + "\n";
  return s;
}

[[nodiscard]] inline std::string memory_root_verification_text(const tiers::MemoryRootVerification& v, bool quiet) {
  const tiers::MemoryRoot& root = v.root;
  std::string s;
  if (!quiet || !v.ok()) s += root_header_text(root);
  s += root_problems_text(v.problems);
  if (quiet) return s;
  for (const auto& st : root.steps) {
    std::string counts;
    for (const auto& sh : st.shards)
      if (!sh.copies.empty()) counts += (counts.empty() ? "" : " ") + std::to_string(sh.shard) + ":" + std::to_string(sh.verified);
    s += "  " + step_label(st) + ": verified copies per shard held here " + (counts.empty() ? "(none)" : counts) +
         (st.persistent == tiers::PersistentState::not_checked ? "" : "; persistent store: " + std::string(tiers::persistent_state_name(st.persistent))) +
         "\n";
  }
  s += notes_text(v.notes);
  s += printable(root.path) + ": " +
       (v.ok() ? std::string("ok") : "DAMAGED, " + std::to_string(v.problems.size()) + " problem" + (v.problems.size() == 1 ? "" : "s")) +
       format(" (%llu copies, %llu chunks, %s checked)\n", static_cast<unsigned long long>(v.copies_checked),
              static_cast<unsigned long long>(v.chunks_checked), human_bytes(static_cast<double>(v.bytes_checked)).c_str());
  return s;
}

[[nodiscard]] inline std::string foreign_text(const ForeignVerifyReport& r, bool quiet) {
  const std::string path = printable(r.path);
  const std::string format_name = r.format ? foreign_format_name(*r.format) : "unknown format";
  if (r.ok()) {
    if (quiet) return "";
    if (r.data_checked)
      return format("%s: ok, %s, every byte matches its sidecar (%llu chunks, %s checked), root %s\n", path.c_str(), format_name.c_str(),
                    static_cast<unsigned long long>(r.chunks_checked), human_bytes(static_cast<double>(r.bytes_checked)).c_str(),
                    r.root->hex().c_str());
    return format("%s: %s, structure ok; the data carries no digests (not checked): ckpt-verify --write-sidecar %s records them\n",
                  path.c_str(), format_name.c_str(), path.c_str());
  }
  std::string s = format("%s: DAMAGED, %s (%zu problem%s)%s\n", path.c_str(), format_name.c_str(), r.problems.size(),
                         r.problems.size() == 1 ? "" : "s", r.data_checked ? "" : "; without a sidecar only the structure was checked");
  for (const auto& p : r.problems) s += "  " + problem_line(p.file.empty() ? r.path : p.file, p) + "\n";
  return s;
}

[[nodiscard]] inline std::string store_outcome_text(const StoreOutcome& so, bool quiet) {
  // A torn tail a crash left is the end of the log; a tail that is not a clean tear is a problem.
  const char* journal = !so.problems.empty() ? "journal CORRUPT" : so.journal && so.journal->torn_tail ? "journal intact up to a torn tail" : "journal intact";
  std::string s = format("%s: store, %s, %zu step%s selected\n", printable(so.path).c_str(), journal, so.steps.size(), so.steps.size() == 1 ? "" : "s");
  for (const auto& p : so.problems) s += "  journal: " + printable(p.message) + "\n";
  if (!quiet)
    for (const auto& n : so.notes) s += "  note: " + printable(n) + "\n";
  return s;
}

[[nodiscard]] inline std::string pins_text(const std::vector<PinOutcome>& pins, bool quiet) {
  std::string s;
  for (const auto& p : pins) {
    const std::string path = printable(p.path);
    if (!p.error.ok()) {
      s += path + ": " + printable(p.error.message()) + "\n";
    } else if (p.check.ok) {
      if (!quiet) s += path + ": matches its pin (" + p.source + "), root " + p.check.found + "\n";
    } else {
      s += path + ": NOT THE PINNED CHECKPOINT (" + p.source + ")\n";
      for (const auto& line : pin_check_lines(p.check)) s += "  " + line + "\n";
    }
  }
  return s;
}

// --- Inspect ---------------------------------------------------------------------------------------

[[nodiscard]] inline std::string shape_text(const json& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<std::uint64_t>());
  return s + "]";
}

[[nodiscard]] inline std::string num(const json& j) { return std::to_string(j.get<std::uint64_t>()); }

[[nodiscard]] inline std::string metadata_text(const json& m) {
  const std::string type = m["type"].get<std::string>();
  const json& v = m["value"];
  if (type == "bytes") {
    const std::string hex = v.get<std::string>();
    const std::string len = num(m["length"]) + " bytes";
    // Short values are shown whole; long ones by length and their first 32 bytes.
    return hex.size() <= 64 ? (hex.empty() ? len : hex + " (" + len + ")") : hex.substr(0, 64) + "... (" + len + ")";
  }
  if (type == "string") {
    std::string quoted;
    for (const char c : v.get<std::string>()) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return "\"" + printable(quoted) + "\"";
  }
  if (type == "float64" && v.is_number()) {
    // The shortest of %.15g..%.17g that reads back as the same double.
    const double d = v.get<double>();
    char buf[40];
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

[[nodiscard]] inline std::string shard_text(const json& doc) {
  auto bytes = [](const json& j) {
    const auto v = j.get<std::uint64_t>();
    return std::to_string(v) + (v >= 1024 ? " (" + human_bytes(static_cast<double>(v)) + ")" : "");
  };
  std::string s = table_text({{"file", printable(doc["path"].get<std::string>())},
                              {"format version", num(doc["format_version"])},
                              {"uuid", doc["uuid"].get<std::string>()},
                              {"alignment", bytes(doc["alignment"])},
                              {"chunk size", bytes(doc["chunk_size"])},
                              {"hash", doc["hash"].get<std::string>()},
                              {"file size", bytes(doc["file_size"])},
                              {"data bytes", bytes(doc["data_bytes"])},
                              {"index bytes", bytes(doc["index_bytes"])},
                              {"tensors", num(doc["tensor_count"])},
                              {"pieces", num(doc["piece_count"])},
                              {"chunks", num(doc["chunk_count"])},
                              {"metadata", num(doc["metadata_count"])},
                              {"root digest", doc.contains("identity") ? doc["identity"]["root"].get<std::string>() : "-"}},
                             {false, false});
  if (!doc["tensors"].empty()) {
    s += "\ntensors:\n";
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "PIECES", "BYTES"}};
    for (const auto& t : doc["tensors"])
      rows.push_back({printable(t["name"].get<std::string>()), t["dtype"].get<std::string>(), shape_text(t["shape"]), num(t["piece_count"]),
                      num(t["bytes"])});
    s += table_text(rows, {false, false, false, true, true}, "  ");
    s += "\npieces:\n";
    rows = {{"TENSOR", "PIECE", "OFFSETS", "SHAPE", "DATA OFFSET", "BYTES", "CHUNKS"}};
    for (const auto& t : doc["tensors"])
      for (const auto& p : t["pieces"])
        rows.push_back({printable(t["name"].get<std::string>()), num(p["piece"]), shape_text(p["offsets"]), shape_text(p["shape"]),
                        num(p["data_offset"]), num(p["bytes"]), num(p["chunk_count"])});
    s += table_text(rows, {false, true, false, false, true, true, true}, "  ");
  }
  if (!doc["metadata"].empty()) {
    s += "\nmetadata:\n";
    std::vector<std::vector<std::string>> rows = {{"KEY", "TYPE", "VALUE"}};
    for (const auto& m : doc["metadata"]) rows.push_back({printable(m["key"].get<std::string>()), m["type"].get<std::string>(), metadata_text(m)});
    s += table_text(rows, {false, false, false}, "  ");
  }
  if (doc.contains("chunks")) {
    s += "\nchunks:\n";
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "PIECE", "CHUNK", "OFFSET", "LENGTH", "DIGEST"}};
    for (const auto& c : doc["chunks"])
      rows.push_back({printable(c["tensor"].get<std::string>()), num(c["piece"]), num(c["chunk"]), num(c["offset"]), num(c["length"]),
                      c["digest"].get<std::string>()});
    s += table_text(rows, {false, true, true, true, true, false}, "  ");
  }
  return s;
}

[[nodiscard]] inline std::string store_text(const json& doc) {
  // The library counted the transactions by state (inspect_inl.hpp store_doc).
  const json& states = doc["transaction_states"];
  const std::uint64_t committed = states["committed"].get<std::uint64_t>(), open = states["open"].get<std::uint64_t>(),
                      aborted = states["aborted"].get<std::uint64_t>(), retired = states["retired"].get<std::uint64_t>();
  const json& j = doc["journal"];
  std::string journal;
  if (j.is_null()) {  // a store on objects: log/ holds one object per commit, retire and abort (spec/OBJECT.md 4.2)
    journal = "none (a store on objects: " + std::to_string(committed + retired) + " commit, " + std::to_string(retired) + " retire and " +
              std::to_string(aborted) + " abort objects in log/)";
  } else {
    journal = num(j["file_size"]) + " bytes, " + num(j["groups"]) + " groups, " + num(j["records"]) + " records";
    // A clean tear is the end of the log (a crash during an append); any other damaged tail is damage (spec/JOURNAL.md 6.3).
    if (!j["torn_tail"].is_null())
      journal += (j["torn_tail"]["clean_tear"].get<bool>() ? ", torn tail at " : ", DAMAGED tail at ") + num(j["torn_tail"]["offset"]);
    if (!j["corruption"].empty()) journal += ", " + std::to_string(j["corruption"].size()) + " CORRUPT regions (run ckpt-repair)";
  }
  std::string s = table_text({{"store", printable(doc["store"].get<std::string>())},
                              {"uuid", doc["uuid"].get<std::string>()},
                              {"journal", journal},
                              {"transactions", std::to_string(doc["transactions"].size()) + " (" + std::to_string(committed) + " committed, " +
                                                   std::to_string(retired) + " retired, " + std::to_string(aborted) + " aborted, " +
                                                   std::to_string(open) + " open)"},
                              {"steps", std::to_string(doc["steps"].size())}},
                             {false, false});
  if (!doc["steps"].empty()) {
    s += "\nsteps:\n";
    std::vector<std::vector<std::string>> rows = {{"STEP", "TXN", "DIR", "SHARDS", "TENSORS", "DATA BYTES", "DATA POSITION", "ROOT DIGEST", "STATUS"}};
    for (const auto& st : doc["steps"]) {
      const std::string status = st["status"].get<std::string>();
      const bool ok = status == "ok";
      rows.push_back({num(st["step"]), num(st["txn"]), st["dir"].get<std::string>(), ok ? num(st["shard_count"]) : "-",
                      ok ? num(st["tensor_count"]) : "-", ok ? num(st["data_bytes"]) : "-",
                      ok ? "epoch " + num(st["data"]["epoch"]) + " offset " + num(st["data"]["offset"]) : "-",
                      ok && st["root_digest"].is_string() ? st["root_digest"].get<std::string>() : "-",
                      ok                    ? "ok"
                      : status == "retired" ? "retired while being read (not damage)"
                                            : "DAMAGED: " + printable(st["error"]["message"].get<std::string>())});
    }
    s += table_text(rows, {true, true, false, true, true, true, false, false, false}, "  ");
  }
  for (const auto& p : doc["problems"]) s += "problem: " + printable(p.get<std::string>()) + "\n";
  for (const auto& u : doc["unknown_entries"]) s += "not part of the store: " + printable(u.get<std::string>()) + "\n";
  return s;
}

[[nodiscard]] inline std::string step_text(const json& doc) {
  const json& st = doc["step"];
  const json& ts = doc["training_state"];
  std::vector<std::vector<std::string>> rows = {{"step", num(st["step"])}, {"txn", num(st["txn"])}};
  rows.push_back({"directory", printable(st["dir"].get<std::string>())});
  if (!st["committed"].get<bool>())
    rows.push_back({"committed", st["state_in_store"].is_null() ? "unknown (no store around it)" : "no (" + st["state_in_store"].get<std::string>() + " in its store)"});
  rows.push_back({"world size", num(doc["world_size"])});
  rows.push_back({"root digest", doc["root_digest"].get<std::string>()});
  rows.push_back({"manifest", num(st["manifest_size"]) + " bytes, digest " + st["manifest_digest"].get<std::string>()});
  rows.push_back({"rng state", num(ts["rng_bytes"]) + " bytes" + (ts["rng"].get<std::string>().empty() ? "" : ": " + ts["rng"].get<std::string>())});
  rows.push_back({"data position", "epoch " + num(ts["data"]["epoch"]) + " offset " + num(ts["data"]["offset"]) +
                                       (ts["data"]["state_bytes"].get<std::uint64_t>() ? " (+" + num(ts["data"]["state_bytes"]) + " bytes of loader state)" : "")});
  std::string optimizer;
  for (const auto& o : ts["optimizer_tensors"]) optimizer += (optimizer.empty() ? "" : ", ") + printable(o.get<std::string>());
  rows.push_back({"optimizer tensors", optimizer.empty() ? "none" : optimizer});
  for (const auto& [key, v] : ts["values"].items())
    rows.push_back({"value " + printable(key), v["value"].is_string() ? printable(v["value"].get<std::string>()) : v["value"].dump()});
  std::string s = table_text(rows, {false, false});
  for (const auto& shard : doc["shards"]) s += "\n" + shard_text(shard);
  return s;
}

[[nodiscard]] inline std::string foreign_inspection_text(const json& doc) {
  const auto data = doc["data_bytes"].get<std::uint64_t>();
  std::string root = "none recorded (the format has no digests; ckpt-verify --write-sidecar records them)";
  if (doc["root_digest"].is_string()) root = doc["root_digest"].get<std::string>() + " (sidecar " + printable(doc["sidecar"].get<std::string>()) + ")";
  else if (doc.contains("sidecar_error")) root = "unknown: the sidecar is unreadable (" + printable(doc["sidecar_error"].get<std::string>()) + ")";
  std::string s = table_text({{"checkpoint", printable(doc["path"].get<std::string>())},
                              {"format", doc["format"].get<std::string>()},
                              {"files", std::to_string(doc["files"].size())},
                              {"tensors", num(doc["tensor_count"])},
                              {"data bytes", std::to_string(data) + (data >= 1024 ? " (" + human_bytes(static_cast<double>(data)) + ")" : "")},
                              {"root digest", root}},
                             {false, false});
  if (doc["files"].size() > 1) {
    s += "\nfiles:\n";
    std::vector<std::vector<std::string>> rows = {{"NAME", "SIZE", "PRESENT"}};
    for (const auto& f : doc["files"]) rows.push_back({printable(f["name"].get<std::string>()), num(f["size"]), f["present"].get<bool>() ? "yes" : "MISSING"});
    s += table_text(rows, {false, true, false}, "  ");
  }
  if (!doc["tensors"].empty()) {
    s += "\ntensors:\n";
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "PIECES", "BYTES", "FILE", "OFFSET"}};
    for (const auto& t : doc["tensors"]) {
      const json& first = t["pieces"].empty() ? json::object() : t["pieces"][0];
      const bool one = t["pieces"].size() == 1;
      rows.push_back({printable(t["name"].get<std::string>()), t["dtype"].get<std::string>(), shape_text(t["shape"]), std::to_string(t["pieces"].size()),
                      num(t["bytes"]), first.contains("file") ? printable(first["file"].get<std::string>()) + (one ? "" : ", ...") : "-",
                      one ? num(first["offset"]) : "-"});
    }
    s += table_text(rows, {false, false, false, true, true, false, true}, "  ");
  }
  if (!doc["metadata"].empty()) {
    s += "\nmetadata:\n";
    std::vector<std::vector<std::string>> rows = {{"KEY", "VALUE"}};
    for (const auto& [k, v] : doc["metadata"].items()) rows.push_back({printable(k), printable(v.get<std::string>())});
    s += table_text(rows, {false, false}, "  ");
  }
  for (const auto& p : doc["problems"]) s += "problem: " + printable(p["message"].get<std::string>()) + "\n";
  return s;
}

// Per step: what the logs recorded, the persistent store's verdict, and each shard held here with its copies.
[[nodiscard]] inline std::string memory_root_text(const tiers::MemoryRoot& root) {
  std::string s = root_header_text(root);
  for (const auto& d : root.rank_dirs) {
    std::string stores;
    for (const auto& st : d.stores) stores += (stores.empty() ? "" : ", ") + base_name(st);
    std::string log = !d.log_present ? "no TIERS" : "TIERS " + std::to_string(d.records.size()) + " records";
    if (d.torn_tail) log += (d.torn_tail->clean_tear ? ", torn tail at " : ", DAMAGED tail at ") + std::to_string(d.torn_tail->offset);
    if (!d.log_error.ok()) log += ", " + std::string(d.log_error.code() == Code::corrupt ? "CORRUPT" : "UNREADABLE");
    s += format("  rank-%u: %s; %s\n", d.rank, stores.empty() ? "no stores" : stores.c_str(), log.c_str());
  }
  if (!root.persistent.empty()) s += "  persistent store compared: " + printable(root.persistent) + "\n";
  if (root.steps.empty()) s += "\nno steps\n";
  for (const auto& st : root.steps) {
    s += format("\n%s: %zu of %s shards here, fewest copies %zu%s\n", step_label(st).c_str(), st.shards_here(),
                st.world ? std::to_string(st.world).c_str() : "?", st.fewest_copies(),
                st.set_aside ? (", " + std::to_string(st.set_aside) + " set aside").c_str() : "");
    s += "  recorded: " + events_line(st) + "\n";
    for (const auto& e : st.events)
      if (e.record.event == tiers::TierEvent::set_aside || e.record.event == tiers::TierEvent::load_failed ||
          e.record.event == tiers::TierEvent::sdc)
        s += format("    rank-%u: %s\n", e.rank_dir, printable(e.record.describe()).c_str());
    if (st.persistent != tiers::PersistentState::not_checked)
      s += std::string("  persistent: ") + tiers::persistent_state_name(st.persistent) +
           (st.persistent_txn ? " (txn " + std::to_string(st.persistent_txn) + ")" : "") +
           (st.persistent_detail.empty() ? "" : ": " + printable(st.persistent_detail)) + "\n";
    std::vector<std::vector<std::string>> rows = {{"SHARD", "COPIES", "HELD IN"}};
    for (const auto& sh : st.shards) {
      if (sh.copies.empty()) continue;
      std::string held;
      for (const auto i : sh.copies) held += (held.empty() ? "" : ", ") + copy_text(root.copies[i]);
      rows.push_back({std::to_string(sh.shard), std::to_string(sh.matching), held});
    }
    if (rows.size() > 1) s += table_text(rows, {true, true, false}, "  ");
    std::string parity;  // the parity segments of the step's number (spec/TIERS.md 12), no shard's copy
    for (const auto& c : root.copies)
      if (c.parity && c.step == st.step) parity += (parity.empty() ? "" : ", ") + copy_text(c);
    if (!parity.empty()) s += "  parity held in: " + parity + "\n";
  }
  if (!root.problems.empty() || !root.notes.empty()) s += "\n";
  s += root_problems_text(root.problems);
  s += notes_text(root.notes);
  return s;
}

// --- Diff ------------------------------------------------------------------------------------------

[[nodiscard]] inline std::string value_text(const std::optional<Value>& v) {
  if (!v) return "-";
  const json j = metadata_value_json(*v);
  std::string text = j.is_string() ? j.get<std::string>() : j.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return printable(text);
}

}  // namespace detail

CKPT_INLINE std::string verify_text(const VerifyPathsReport& r, const VerifyMark& since, bool quiet) {
  std::string s;
  for (std::size_t k = since.foreign; k < r.foreign.size(); ++k) s += detail::foreign_text(r.foreign[k], quiet);
  for (std::size_t k = since.memory_roots; k < r.memory_roots.size(); ++k) s += detail::memory_root_verification_text(r.memory_roots[k], quiet);
  for (std::size_t k = since.stores; k < r.stores.size(); ++k) s += detail::store_outcome_text(r.stores[k], quiet);
  for (std::size_t k = since.steps; k < r.steps.size(); ++k) s += detail::step_outcome_text(r.steps[k], r.files, quiet);
  for (std::size_t k = since.shard_files; k < r.shard_files.size(); ++k) s += detail::outcome_text(r.files[r.shard_files[k]], quiet);
  return s;
}

CKPT_INLINE std::string verify_conclusion_text(const VerifyPathsReport& r, bool quiet) {
  std::string s = detail::pins_text(r.pins, quiet);
  if (quiet) return s;
  const VerifySummary n = verify_summary(r);  // the document's summary, counted once
  if (n.steps != 0) {
    const std::string retired_text = n.steps_retired == 0 ? "" : ", " + std::to_string(n.steps_retired) + " retired while being verified";
    s += format("%zu step%s: %zu intact, %zu damaged%s (%zu shard files checked)\n", n.steps, n.steps == 1 ? "" : "s", n.steps_intact,
                        n.steps - n.steps_intact - n.steps_retired, retired_text.c_str(), n.files);
  } else if (n.files > 1) {
    // A file not read, and one retired with its step, are both "unreadable" here.
    s += format("%zu files: %zu intact, %zu damaged, %zu unreadable\n", n.files, n.intact, n.damaged, n.files - n.intact - n.damaged);
  }
  return s;
}

CKPT_INLINE std::string verify_text(const VerifyPathsReport& r, bool quiet) { return verify_text(r, VerifyMark{}, quiet) + verify_conclusion_text(r, quiet); }

CKPT_INLINE std::vector<std::string> verify_error_messages(const VerifyPathsReport& r, const VerifyMark& since) {
  std::vector<std::string> out;
  for (std::size_t k = since.errors; k < r.errors.size(); ++k) out.push_back(printable(r.errors[k].status.message()));
  for (std::size_t k = since.shard_files; k < r.shard_files.size(); ++k)
    if (const FileOutcome& o = r.files[r.shard_files[k]]; !o.has_report) out.push_back(printable(o.error.message()));
  return out;
}

CKPT_INLINE std::string sidecar_text(const std::string& path, const json& d) {
  return format("%s: wrote %s (%s file%s, %s tensors, %s chunks over %s), root %s\n", printable(path).c_str(),
                        printable(d["sidecar"].get<std::string>()).c_str(), d["files"].dump().c_str(), d["files"].get<std::size_t>() == 1 ? "" : "s",
                        d["tensors"].dump().c_str(), d["chunks"].dump().c_str(), human_bytes(d["bytes"].get<double>()).c_str(),
                        d["root_digest"].get<std::string>().c_str());
}

CKPT_INLINE std::string inspect_text(const Inspection& inspection) {
  const json& doc = inspection.doc;
  if (inspection.kind == "foreign") return detail::foreign_inspection_text(doc);
  if (inspection.kind == "memory_root" && inspection.memory_root) return detail::memory_root_text(*inspection.memory_root);
  if (inspection.kind == "store") return detail::store_text(doc);
  if (inspection.kind == "step") return detail::step_text(doc);
  return detail::shard_text(doc);
}

CKPT_INLINE std::string pin_text(const std::string& root, const std::string& path) { return root + "  " + path + "\n"; }

CKPT_INLINE std::string diff_text(const DiffReport& r) {
  const Content& a = r.a;
  const Content& b = r.b;
  const ContentDiff& d = r.diff;
  std::string s = "a: " + printable(a.description) + " (root " + a.root.hex() + ")\nb: " + printable(b.description) + " (root " + b.root.hex() + ")\n";
  for (const auto& ch : d.tensors) {
    const std::string name = printable(ch.name);
    if (ch.kind == TensorChange::Kind::added) {
      s += "added    " + name + "  " + ch.b->dtype + " " + shape_string(ch.b->shape) + "\n";
      continue;
    }
    if (ch.kind == TensorChange::Kind::removed) {
      s += "removed  " + name + "  " + ch.a->dtype + " " + shape_string(ch.a->shape) + "\n";
      continue;
    }
    std::string what;
    if (ch.dtype_changed) what += " dtype " + ch.a->dtype + " -> " + ch.b->dtype + ";";
    if (ch.shape_changed) what += " shape " + shape_string(ch.a->shape) + " -> " + shape_string(ch.b->shape) + ";";
    if (ch.bytes_changed) what += " bytes " + std::to_string(ch.a->bytes()) + " -> " + std::to_string(ch.b->bytes()) + ";";
    if (ch.chunks_comparable) {
      std::uint64_t total = 0;
      for (const auto& p : ch.a->pieces) total += p.chunk_digests.size();
      what += " " + std::to_string(ch.chunks.size()) + " of " + std::to_string(total) + " chunks differ";
    } else if (!ch.dtype_changed && !ch.shape_changed && !ch.bytes_changed) {
      what += " content differs (split into different pieces or chunk sizes: chunks cannot be lined up)";
    } else if (!what.empty()) {
      what.pop_back();
    }
    s += "changed  " + name + " " + what + "\n";
    const std::size_t shown = std::min<std::size_t>(ch.chunks.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& c = ch.chunks[i];
      s += format("         piece %zu chunk %llu: bytes [%llu, %llu) of the piece\n", c.piece, static_cast<unsigned long long>(c.chunk),
                          static_cast<unsigned long long>(c.offset), static_cast<unsigned long long>(c.offset + c.length));
    }
    if (ch.chunks.size() > shown) s += format("         ... and %zu more chunks (--json lists every one)\n", ch.chunks.size() - shown);
  }
  for (const auto& m : d.metadata)
    s += format("metadata %-7s %s: %s -> %s\n", change_kind_name(m.kind), printable(m.key).c_str(), detail::value_text(m.a).c_str(),
                        detail::value_text(m.b).c_str());
  s += format("%s: %zu tensor%s changed, added or removed, %zu unchanged, %zu metadata key%s differ\n", d.identical() ? "identical" : "different",
                      d.tensors.size(), d.tensors.size() == 1 ? "" : "s", d.tensors_unchanged, d.metadata.size(), d.metadata.size() == 1 ? "" : "s");
  return s;
}

CKPT_INLINE std::string repair_text(const RepairReport& report) { return report.text; }

}  // namespace ckpt::report
