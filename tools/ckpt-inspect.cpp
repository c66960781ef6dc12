// ckpt-inspect: prints what a shard file holds (format, tensors, pieces, metadata, optionally every
// chunk) from its superblock, footer and index. Data bytes are not read; ckpt-verify checks them.
// A store directory or s3:// store lists its steps (or shows one: --step N, --latest); a step directory shows that step.
// A memory tier's root (or one rank directory) shows each step: where its shards are held, how many
// copies match the recorded content, and what the tier logs recorded (ckpt/tiers/memory_root.hpp).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ckpt/report/inspect.hpp>

#include "cli.hpp"
#include "memory_root_cli.hpp"

namespace {

using ckpt::cli::print_table;
using ckpt::tools::json;
constexpr const char* kTool = "ckpt-inspect";

[[nodiscard]] std::string shape_text(const json& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<std::uint64_t>());
  return s + "]";
}

[[nodiscard]] std::string num(const json& j) { return std::to_string(j.get<std::uint64_t>()); }

[[nodiscard]] std::string metadata_text(const json& m) {
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
    return "\"" + ckpt::tools::printable(quoted) + "\"";
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

void print_human(const json& doc) {
  using ckpt::cli::human_bytes;
  auto bytes = [](const json& j) {
    const auto v = j.get<std::uint64_t>();
    return std::to_string(v) + (v >= 1024 ? " (" + human_bytes(static_cast<double>(v)) + ")" : "");
  };
  print_table({{"file", ckpt::tools::printable(doc["path"].get<std::string>())},
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
    std::printf("\ntensors:\n");
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "PIECES", "BYTES"}};
    for (const auto& t : doc["tensors"])
      rows.push_back({ckpt::tools::printable(t["name"].get<std::string>()), t["dtype"].get<std::string>(),
                      shape_text(t["shape"]), num(t["piece_count"]), num(t["bytes"])});
    print_table(rows, {false, false, false, true, true}, "  ");

    std::printf("\npieces:\n");
    rows = {{"TENSOR", "PIECE", "OFFSETS", "SHAPE", "DATA OFFSET", "BYTES", "CHUNKS"}};
    for (const auto& t : doc["tensors"])
      for (const auto& p : t["pieces"])
        rows.push_back({ckpt::tools::printable(t["name"].get<std::string>()), num(p["piece"]), shape_text(p["offsets"]),
                        shape_text(p["shape"]), num(p["data_offset"]), num(p["bytes"]), num(p["chunk_count"])});
    print_table(rows, {false, true, false, false, true, true, true}, "  ");
  }

  if (!doc["metadata"].empty()) {
    std::printf("\nmetadata:\n");
    std::vector<std::vector<std::string>> rows = {{"KEY", "TYPE", "VALUE"}};
    for (const auto& m : doc["metadata"])
      rows.push_back({ckpt::tools::printable(m["key"].get<std::string>()), m["type"].get<std::string>(), metadata_text(m)});
    print_table(rows, {false, false, false}, "  ");
  }

  if (doc.contains("chunks")) {
    std::printf("\nchunks:\n");
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "PIECE", "CHUNK", "OFFSET", "LENGTH", "DIGEST"}};
    for (const auto& c : doc["chunks"])
      rows.push_back({ckpt::tools::printable(c["tensor"].get<std::string>()), num(c["piece"]), num(c["chunk"]),
                      num(c["offset"]), num(c["length"]), c["digest"].get<std::string>()});
    print_table(rows, {false, true, true, true, true, false}, "  ");
  }
}

// --- Stores and step directories (spec/JOURNAL.md) ------------------------------------------------

void print_store(const json& doc) {
  std::size_t committed = 0, open = 0, aborted = 0, retired = 0;
  for (const auto& t : doc["transactions"]) {
    const std::string state = t["state"].get<std::string>();
    committed += state == "committed";
    open += state == "open";
    aborted += state == "aborted";
    retired += state == "retired";
  }
  const json& j = doc["journal"];
  std::string journal;
  if (j.is_null()) {  // a store on objects: log/ holds one object per commit, retire and abort (spec/OBJECT.md 4.2)
    journal = "none (a store on objects: " + std::to_string(committed + retired) + " commit, " + std::to_string(retired) +
              " retire and " + std::to_string(aborted) + " abort objects in log/)";
  } else {
    journal = num(j["file_size"]) + " bytes, " + num(j["groups"]) + " groups, " + num(j["records"]) + " records";
    if (!j["torn_tail"].is_null()) journal += ", torn tail at " + num(j["torn_tail"]["offset"]);
    if (!j["corruption"].empty()) journal += ", " + std::to_string(j["corruption"].size()) + " CORRUPT regions (run ckpt-repair)";
  }
  print_table({{"store", ckpt::tools::printable(doc["store"].get<std::string>())},
               {"uuid", doc["uuid"].get<std::string>()},
               {"journal", journal},
               {"transactions", std::to_string(doc["transactions"].size()) + " (" + std::to_string(committed) + " committed, " +
                                    std::to_string(retired) + " retired, " + std::to_string(aborted) + " aborted, " +
                                    std::to_string(open) + " open)"},
               {"steps", std::to_string(doc["steps"].size())}},
              {false, false});
  if (!doc["steps"].empty()) {
    std::printf("\nsteps:\n");
    std::vector<std::vector<std::string>> rows = {
        {"STEP", "TXN", "DIR", "SHARDS", "TENSORS", "DATA BYTES", "DATA POSITION", "ROOT DIGEST", "STATUS"}};
    for (const auto& s : doc["steps"]) {
      const std::string status = s["status"].get<std::string>();
      const bool ok = status == "ok";
      rows.push_back({num(s["step"]), num(s["txn"]), s["dir"].get<std::string>(), ok ? num(s["shard_count"]) : "-",
                      ok ? num(s["tensor_count"]) : "-", ok ? num(s["data_bytes"]) : "-",
                      ok ? "epoch " + num(s["data"]["epoch"]) + " offset " + num(s["data"]["offset"]) : "-",
                      ok && s["root_digest"].is_string() ? s["root_digest"].get<std::string>() : "-",
                      ok                    ? "ok"
                      : status == "retired" ? "retired while being read (not damage)"
                                            : "DAMAGED: " + ckpt::tools::printable(s["error"]["message"].get<std::string>())});
    }
    print_table(rows, {true, true, false, true, true, true, false, false, false}, "  ");
  }
  for (const auto& p : doc["problems"]) std::printf("problem: %s\n", ckpt::tools::printable(p.get<std::string>()).c_str());
  for (const auto& u : doc["unknown_entries"])
    std::printf("not part of the store: %s\n", ckpt::tools::printable(u.get<std::string>()).c_str());
}

void print_step(const json& doc) {
  const json& st = doc["step"];
  const json& ts = doc["training_state"];
  std::vector<std::vector<std::string>> rows = {{"step", num(st["step"])}, {"txn", num(st["txn"])}};
  rows.push_back({"directory", ckpt::tools::printable(st["dir"].get<std::string>())});
  if (!st["committed"].get<bool>())
    rows.push_back({"committed", st["state_in_store"].is_null() ? "unknown (no store around it)"
                                                                : "no (" + st["state_in_store"].get<std::string>() + " in its store)"});
  rows.push_back({"world size", num(doc["world_size"])});
  rows.push_back({"root digest", doc["root_digest"].get<std::string>()});
  rows.push_back({"manifest", num(st["manifest_size"]) + " bytes, digest " + st["manifest_digest"].get<std::string>()});
  rows.push_back({"rng state", num(ts["rng_bytes"]) + " bytes" + (ts["rng"].get<std::string>().empty() ? "" : ": " + ts["rng"].get<std::string>())});
  rows.push_back({"data position", "epoch " + num(ts["data"]["epoch"]) + " offset " + num(ts["data"]["offset"]) +
                                       (ts["data"]["state_bytes"].get<std::uint64_t>() ? " (+" + num(ts["data"]["state_bytes"]) + " bytes of loader state)" : "")});
  std::string optimizer;
  for (const auto& o : ts["optimizer_tensors"]) optimizer += (optimizer.empty() ? "" : ", ") + ckpt::tools::printable(o.get<std::string>());
  rows.push_back({"optimizer tensors", optimizer.empty() ? "none" : optimizer});
  for (const auto& [key, v] : ts["values"].items())
    rows.push_back({"value " + ckpt::tools::printable(key), v["value"].is_string() ? ckpt::tools::printable(v["value"].get<std::string>()) : v["value"].dump()});
  print_table(rows, {false, false});
  for (const auto& shard : doc["shards"]) {
    std::printf("\n");
    print_human(shard);
  }
}

// --- Foreign formats (spec/FOREIGN.md) --------------------------------------------------------------

void print_foreign(const json& doc) {
  using ckpt::cli::human_bytes;
  const auto data = doc["data_bytes"].get<std::uint64_t>();
  std::string root = "none recorded (the format has no digests; ckpt-verify --write-sidecar records them)";
  if (doc["root_digest"].is_string()) root = doc["root_digest"].get<std::string>() + " (sidecar " + ckpt::tools::printable(doc["sidecar"].get<std::string>()) + ")";
  else if (doc.contains("sidecar_error")) root = "unknown: the sidecar is unreadable (" + ckpt::tools::printable(doc["sidecar_error"].get<std::string>()) + ")";
  print_table({{"checkpoint", ckpt::tools::printable(doc["path"].get<std::string>())},
               {"format", doc["format"].get<std::string>()},
               {"files", std::to_string(doc["files"].size())},
               {"tensors", num(doc["tensor_count"])},
               {"data bytes", std::to_string(data) + (data >= 1024 ? " (" + human_bytes(static_cast<double>(data)) + ")" : "")},
               {"root digest", root}},
              {false, false});
  if (doc["files"].size() > 1) {
    std::printf("\nfiles:\n");
    std::vector<std::vector<std::string>> rows = {{"NAME", "SIZE", "PRESENT"}};
    for (const auto& f : doc["files"])
      rows.push_back({ckpt::tools::printable(f["name"].get<std::string>()), num(f["size"]), f["present"].get<bool>() ? "yes" : "MISSING"});
    print_table(rows, {false, true, false}, "  ");
  }
  if (!doc["tensors"].empty()) {
    std::printf("\ntensors:\n");
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "PIECES", "BYTES", "FILE", "OFFSET"}};
    for (const auto& t : doc["tensors"]) {
      const json& first = t["pieces"].empty() ? json::object() : t["pieces"][0];
      const bool one = t["pieces"].size() == 1;
      rows.push_back({ckpt::tools::printable(t["name"].get<std::string>()), t["dtype"].get<std::string>(), shape_text(t["shape"]),
                      std::to_string(t["pieces"].size()), num(t["bytes"]),
                      first.contains("file") ? ckpt::tools::printable(first["file"].get<std::string>()) + (one ? "" : ", ...") : "-",
                      one ? num(first["offset"]) : "-"});
    }
    print_table(rows, {false, false, false, true, true, false, true}, "  ");
  }
  if (!doc["metadata"].empty()) {
    std::printf("\nmetadata:\n");
    std::vector<std::vector<std::string>> rows = {{"KEY", "VALUE"}};
    for (const auto& [k, v] : doc["metadata"].items()) rows.push_back({ckpt::tools::printable(k), ckpt::tools::printable(v.get<std::string>())});
    print_table(rows, {false, false}, "  ");
  }
  for (const auto& p : doc["problems"]) std::printf("problem: %s\n", ckpt::tools::printable(p["message"].get<std::string>()).c_str());
}

// --- Memory roots (spec/TIERS.md 2, 5) -----------------------------------------------------------

// Per step: what the logs recorded, the persistent store's verdict, and each shard held here with its copies.
void print_memory_root(const ckpt::tiers::MemoryRoot& root) {
  namespace tools = ckpt::tools;
  tools::print_root_header(root);
  for (const auto& d : root.rank_dirs) {
    std::string stores;
    for (const auto& s : d.stores) stores += (stores.empty() ? "" : ", ") + ckpt::base_name(s);
    std::string log = !d.log_present ? "no TIERS" : "TIERS " + std::to_string(d.records.size()) + " records";
    if (d.torn_tail) log += ", torn tail at " + std::to_string(d.torn_tail->offset);
    if (!d.log_error.ok()) log += ", " + std::string(d.log_error.code() == ckpt::Code::corrupt ? "CORRUPT" : "UNREADABLE");
    std::printf("  rank-%u: %s; %s\n", d.rank, stores.empty() ? "no stores" : stores.c_str(), log.c_str());
  }
  if (!root.persistent.empty()) std::printf("  persistent store compared: %s\n", tools::printable(root.persistent).c_str());
  if (root.steps.empty()) std::printf("\nno steps\n");
  for (const auto& s : root.steps) {
    std::printf("\n%s: %zu of %s shards here, fewest copies %zu%s\n", tools::step_label(s).c_str(), s.shards_here(),
                s.world ? std::to_string(s.world).c_str() : "?", s.fewest_copies(), s.set_aside ? (", " + std::to_string(s.set_aside) + " set aside").c_str() : "");
    std::printf("  recorded: %s\n", tools::events_line(s).c_str());
    for (const auto& e : s.events)
      if (e.record.event == ckpt::tiers::TierEvent::set_aside || e.record.event == ckpt::tiers::TierEvent::load_failed)
        std::printf("    rank-%u: %s\n", e.rank_dir, tools::printable(e.record.describe()).c_str());
    if (s.persistent != ckpt::tiers::PersistentState::not_checked)
      std::printf("  persistent: %s%s%s\n", ckpt::tiers::persistent_state_name(s.persistent),
                  s.persistent_txn ? (" (txn " + std::to_string(s.persistent_txn) + ")").c_str() : "",
                  s.persistent_detail.empty() ? "" : (": " + tools::printable(s.persistent_detail)).c_str());
    std::vector<std::vector<std::string>> rows = {{"SHARD", "COPIES", "HELD IN"}};
    for (const auto& sh : s.shards) {
      if (sh.copies.empty()) continue;
      std::string held;
      for (const auto i : sh.copies) held += (held.empty() ? "" : ", ") + tools::copy_text(root.copies[i]);
      rows.push_back({std::to_string(sh.shard), std::to_string(sh.matching), held});
    }
    if (rows.size() > 1) print_table(rows, {true, true, false}, "  ");
  }
  if (!root.problems.empty() || !root.notes.empty()) std::printf("\n");
  tools::print_root_problems(root.problems);
  tools::print_notes(root.notes);
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Prints the layout of a ckpt shard file: format, tensors, pieces, metadata and, with --chunks,
every chunk and its digest. Reads only the superblock, footer and index; use ckpt-verify to
check the data.

A store directory lists its journal and committed steps; with --step N or --latest it shows
that step: training state, manifest, and each shard. A step directory is shown the same way.
A store on objects, s3://bucket/prefix (endpoint and credentials from AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), is shown as a store directory is: its log
objects take the journal's place (spec/OBJECT.md 7).

A store may be read while its writer saves and retires steps. A listed step whose files go
missing is checked again against the journal: if it was retired meanwhile it is shown as
"retired while being read" (--json: step "status": "retired"; otherwise "ok" or "damaged"),
which is not damage. --latest then shows the new latest step; --step N reports the step as
retired (exit 2, no such step).

A safetensors file, a Hugging Face sharded set (its *.safetensors.index.json or its directory),
a PyTorch DCP checkpoint directory and a GGUF file are shown from their own headers: files,
tensors (dtype, shape, where their bytes lie) and metadata (spec/FOREIGN.md).

Every checkpoint has a root digest (spec/IDENTITY.md): a digest over its tensors' chunk digests
and its metadata, computed from the index without reading tensor data. It is shown, and --json
carries it with every tensor's digest ("identity"), which is what ckpt-verify --expect-file
accepts. A foreign checkpoint has one when a sidecar records it (ckpt-verify --write-sidecar).
--pin prints just "ROOT  PATH", one line for a pin file.

A memory tier's root (MEMROOT, holding rank-<r>/ directories: own/, held-<s>/ and the tier log
TIERS; spec/TIERS.md 2) or one rank directory is shown step by step, a step being its number and
content digest: where each shard is held, how many copies match the content the tier logs record
(from each copy's index; ckpt-verify checks every byte), and what the logs recorded (CAPTURED,
HELD, REPLICATED, PERSISTED, EVICTED, SET_ASIDE, LOAD_FAILED, RESUMED). --persistent STORE also
compares each step with the persistent store's step of that number, shard digest by shard digest.
Exit 1 when a log, a store journal or a copy's index is damaged or a copy is not the content
recorded for it.

Exit status: 0 ok, 1 the file is damaged or incomplete, 2 usage error or unreadable path.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string path;
    bool as_json = false, with_chunks = false;
    std::uint64_t step_number = 0;
    bool latest = false, pin = false;
    app.add_option("PATH", path, "shard file (*.ckpt), store or step directory, s3://bucket/prefix store, memory root or rank directory, or a safetensors / "
                                 "Hugging Face / DCP / GGUF checkpoint")
        ->required();
    app.add_flag("--pin", pin, "print only the root digest and the path (a line of a pin file for ckpt-verify --expect-file)");
    app.add_flag("--json", as_json, "print one JSON document instead of tables");
    app.add_flag("--chunks", with_chunks, "also list every chunk: tensor, piece, chunk, offset, length, digest");
    auto* step_option = app.add_option("--step", step_number, "for a store: show this step (default: list every committed step)");
    app.add_flag("--latest", latest, "for a store: show the latest committed step")->excludes(step_option);
    std::string persistent;
    app.add_option("--persistent", persistent, "for a memory root: compare each step with this persistent store's");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::PosixFs fs;
    ckpt::report::InspectOptions options;
    if (*step_option) options.selection.step = step_number;
    options.selection.latest = latest;
    options.chunks = with_chunks;
    options.persistent = persistent;
    options.open_objects = ckpt::cli::object_opener();
    auto inspection = ckpt::report::inspect_path(fs, path, options);
    if (!inspection.ok()) return ckpt::cli::report(kTool, inspection.status());
    const json& doc = inspection->doc;
    if (pin) {
      // The one line sha256sum would print, with the root digest.
      if (inspection->kind == "memory_root")
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": a memory root or rank directory takes --json and --persistent only"));
      auto root = ckpt::report::root_digest(*inspection);
      if (!root.ok()) return ckpt::cli::report(kTool, root.status());
      std::printf("%s  %s\n", root->c_str(), path.c_str());
      return inspection->exit_code;
    }
    if (as_json) ckpt::cli::print_json(doc);
    else if (inspection->kind == "foreign") print_foreign(doc);
    else if (inspection->kind == "memory_root") print_memory_root(*inspection->memory_root);
    else if (inspection->kind == "store") print_store(doc);
    else if (inspection->kind == "step") print_step(doc);
    else print_human(doc);
    return inspection->exit_code;
  });
}
