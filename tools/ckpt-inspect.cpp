// ckpt-inspect: prints what a shard file holds (format, tensors, pieces, metadata, optionally every
// chunk) from its superblock, footer and index. Data bytes are not read; ckpt-verify checks them.
// A store directory lists its steps (or shows one: --step N, --latest); a step directory shows that step.
// A memory tier's root (or one rank directory) shows each step: where its shards are held, how many
// copies match the recorded content, and what the tier logs recorded (ckpt/tiers/memory_root.hpp).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ckpt/shard_reader.hpp>

#include "cli.hpp"
#include "identity_cli.hpp"
#include "memory_root_cli.hpp"
#include "report_json.hpp"
#include "store_cli.hpp"

namespace {

using ckpt::tools::json;
constexpr const char* kTool = "ckpt-inspect";

// Opens one shard and describes it; the unit a store- or step-level caller repeats per shard.
[[nodiscard]] ckpt::Result<json> inspect_shard(ckpt::PosixFs& fs, const std::string& path, bool with_chunks) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();  // the message already names the path
  if (info->is_dir) return ckpt::make_error(ckpt::Code::invalid_argument, path + ": is a directory, expected a shard file");
  auto reader = ckpt::ShardReader::open(fs, path);
  if (!reader.ok()) return reader.status();
  return ckpt::tools::shard_json(*reader, with_chunks);
}

// Prints rows as columns separated by two spaces; columns listed in right_aligned hold numbers.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned,
                 const char* indent = "") {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.resize(i + 1, 0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line = indent;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - r[i].size(), ' ');
      const bool right = i < right_aligned.size() && right_aligned[i];
      const bool last = i + 1 == r.size();
      line += right ? pad + r[i] : (last ? r[i] : r[i] + pad);
      if (!last) line += "  ";
    }
    std::printf("%s\n", line.c_str());
  }
}

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

// The training state and shard list of one step, then each shard as a plain file would be shown.
[[nodiscard]] json step_doc(const json& step, const ckpt::Manifest& manifest, const json& shards, const ckpt::Content& content) {
  return {{"step", step},
          {"root_digest", content.root.hex()},
          {"identity", ckpt::tools::identity_json(content)},
          {"world_size", manifest.world_size},
          {"store_uuid", ckpt::uuid_string(manifest.store_uuid)},
          {"training_state", ckpt::tools::training_state_json(manifest.state)},
          {"manifest_shards", ckpt::tools::manifest_shards_json(manifest)},
          {"shards", shards}};
}

// A committed step of a store: opened through its COMMIT record, so the manifest and every shard's
// size, UUID and index digest are checked on the way (spec/JOURNAL.md 7.5).
[[nodiscard]] ckpt::Result<json> inspect_committed_step(ckpt::Store& store, const ckpt::StepInfo& info,
                                                        bool with_chunks) {
  CKPT_ASSIGN_OR_RETURN(auto reader, store.open_step(info));
  json shards = json::array();
  for (std::size_t i = 0; i < reader.shard_count(); ++i) shards.push_back(ckpt::tools::shard_json(reader.shard(i), with_chunks));
  json step = ckpt::tools::step_info_json(info);
  step["store"] = store.path();
  step["committed"] = true;
  CKPT_ASSIGN_OR_RETURN(const ckpt::Content content, ckpt::content_of_step(reader, "step " + std::to_string(info.step)));
  return step_doc(step, reader.manifest(), shards, content);
}

// A step directory given directly: through its store when that commits it, else from its MANIFEST alone.
[[nodiscard]] ckpt::Result<json> inspect_step_directory(ckpt::PosixFs& fs, const std::string& dir, bool with_chunks) {
  const ckpt::tools::StepInStore where = ckpt::tools::locate_step_directory(fs, dir);
  if (where.info) {
    CKPT_ASSIGN_OR_RETURN(auto store, ckpt::tools::open_store_for_reading(fs, where.store));
    return inspect_committed_step(*store, *where.info, with_chunks);
  }
  CKPT_ASSIGN_OR_RETURN(ckpt::tools::StepDirectory content, ckpt::tools::read_step_directory(fs, dir));
  if (!content.shard_problems.empty()) return content.shard_problems.front();
  json shards = json::array();
  for (const auto& path : content.shard_paths) {
    CKPT_ASSIGN_OR_RETURN(json shard, inspect_shard(fs, path, with_chunks));
    shards.push_back(std::move(shard));
  }
  json step = {{"step", content.manifest.step},
               {"txn", content.manifest.txn},
               {"dir", dir},
               {"manifest_size", content.manifest_size},
               {"manifest_digest", ckpt::hex64(content.manifest_digest)},
               {"store", where.store.empty() ? json(nullptr) : json(where.store)},
               {"committed", false},
               {"state_in_store", where.store.empty() ? json(nullptr) : json(where.state)}};
  CKPT_ASSIGN_OR_RETURN(const ckpt::Content identity, ckpt::content_of_path(fs, dir));
  return step_doc(step, content.manifest, shards, identity);
}

// Whether a step whose files could not be found (not_found) was retired since the store's snapshot of
// the journal: a live writer removes a step's files only after its RETIRE record (spec/JOURNAL.md 10).
// Sets state to what the re-read journal says ("retired", "not in the journal") when so.
[[nodiscard]] bool retired_meanwhile(ckpt::Store& store, const ckpt::StepInfo& info, const ckpt::Status& failure,
                                     std::string& state) {
  if (failure.code() != ckpt::Code::not_found) return false;
  auto recheck = ckpt::recheck_step(store, info.step, info.txn);
  if (!recheck.ok() || *recheck == ckpt::StepRecheck::committed) return false;  // still a step: the missing file is damage
  state = ckpt::step_recheck_name(*recheck);
  return true;
}

// Every committed step of a store, one row each; a step that cannot be opened is shown with its error,
// or as retired when the writer retired it while it was being read.
[[nodiscard]] ckpt::Result<json> inspect_store(ckpt::Store& store, bool& damaged) {
  const ckpt::RecoveryReport& report = store.recovery_report();
  json doc = {{"store", store.path()},
              {"uuid", ckpt::uuid_string(store.uuid())},
              {"journal", ckpt::tools::journal_json(report.journal)},
              {"transactions", ckpt::tools::transactions_json(report.transactions)},
              {"unknown_entries", report.unknown_entries},
              {"problems", report.problems}};
  damaged = report.corrupt() || report.tail_damaged();
  json steps = json::array();
  const std::vector<ckpt::StepInfo> listed = store.steps();  // a copy: a recheck refreshes the store
  for (const auto& info : listed) {
    json row = ckpt::tools::step_info_json(info);
    auto reader = store.open_step(info);
    std::string retired_state;
    if (!reader.ok() && retired_meanwhile(store, info, reader.status(), retired_state)) {
      row["status"] = "retired";
      row["retired_state"] = retired_state;
      row["message"] = reader.status().message();
    } else if (!reader.ok()) {
      row["status"] = "damaged";
      row["error"] = {{"code", ckpt::code_name(reader.status().code())}, {"message", reader.status().message()}};
      damaged = true;
    } else {
      row["status"] = "ok";
      const ckpt::Manifest& m = reader->manifest();
      std::uint64_t data_bytes = 0, tensors = 0, file_bytes = 0;
      for (const auto& s : m.shards) {
        data_bytes += s.data_bytes;
        tensors += s.tensor_count;
        file_bytes += s.file_size;
      }
      row["shard_count"] = m.shards.size();
      row["tensor_count"] = tensors;
      row["data_bytes"] = data_bytes;
      row["file_bytes"] = file_bytes;
      row["data"] = {{"epoch", m.state.data.epoch}, {"offset", m.state.data.offset}};
      auto content = ckpt::content_of_step(*reader, "step " + std::to_string(info.step));
      row["root_digest"] = content.ok() ? json(content->root.hex()) : json(nullptr);
    }
    steps.push_back(std::move(row));
  }
  doc["steps"] = std::move(steps);
  return doc;
}

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
  std::string journal = num(j["file_size"]) + " bytes, " + num(j["groups"]) + " groups, " + num(j["records"]) + " records";
  if (!j["torn_tail"].is_null()) journal += ", torn tail at " + num(j["torn_tail"]["offset"]);
  if (!j["corruption"].empty()) journal += ", " + std::to_string(j["corruption"].size()) + " CORRUPT regions (run ckpt-repair)";
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

// A safetensors file or set, a DCP directory or a GGUF file: its tensors from its own header, and
// its root digest when a sidecar records one (spec/IDENTITY.md 4).
[[nodiscard]] ckpt::Result<json> inspect_foreign(ckpt::PosixFs& fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(const ckpt::ForeignCheckpoint checkpoint, ckpt::open_foreign(fs, path));
  const std::string side = ckpt::sidecar_path(checkpoint);
  auto sidecar = ckpt::read_sidecar(fs, side);
  std::optional<ckpt::Digest128> root;
  std::string sidecar_note;
  if (sidecar.ok()) root = sidecar->content.root;
  else if (sidecar.status().code() != ckpt::Code::not_found) sidecar_note = sidecar.status().message();
  json doc = ckpt::tools::foreign_json(checkpoint, root, sidecar.ok() || !sidecar_note.empty() ? side : std::string());
  if (sidecar.ok()) doc["identity"] = ckpt::tools::identity_json(sidecar->content);
  if (!sidecar_note.empty()) doc["sidecar_error"] = sidecar_note;
  return doc;
}

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

// --help: what the tool does and its exit status (README "Exit codes").
constexpr const char* kAbout = R"(Prints the layout of a ckpt shard file: format, tensors, pieces, metadata and, with --chunks,
every chunk and its digest. Reads only the superblock, footer and index; use ckpt-verify to
check the data.

A store directory lists its journal and committed steps; with --step N or --latest it shows
that step: training state, manifest, and each shard. A step directory is shown the same way.

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
    app.add_option("PATH", path, "shard file (*.ckpt), store or step directory, memory root or rank directory, or a safetensors / "
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
    // --pin: the one line sha256sum would print, with the root digest.
    auto emit = [&](const json& doc, void (*human)(const json&)) {
      if (pin) {
        const json* root = doc.contains("identity") ? &doc["identity"]["root"] : nullptr;
        if (root == nullptr || !root->is_string()) {
          std::fprintf(stderr, "%s: %s: no root digest recorded (a foreign checkpoint needs a sidecar: ckpt-verify --write-sidecar)\n",
                       kTool, ckpt::tools::printable(path).c_str());
          return static_cast<int>(ckpt::cli::kIntegrity);
        }
        std::printf("%s  %s\n", root->get<std::string>().c_str(), path.c_str());
      } else if (as_json) {
        ckpt::cli::print_json(doc);
      } else {
        human(doc);
      }
      return static_cast<int>(ckpt::cli::kOk);
    };
    // Formats ckpt did not write are told apart first; ckpt's own files and directories never match.
    auto foreign = ckpt::detect_foreign(fs, path);
    if (!foreign.ok()) return ckpt::cli::report(kTool, foreign.status());
    if (*foreign) {
      if (!persistent.empty())
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": --persistent applies to a memory root or rank directory"));
      if (*step_option || latest)
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": --step and --latest apply to store directories"));
      auto doc = inspect_foreign(fs, path);
      if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
      const int rc = emit(*doc, print_foreign);
      return rc != 0 ? rc : static_cast<int>((*doc)["problems"].empty() ? ckpt::cli::kOk : ckpt::cli::kIntegrity);
    }
    // A directory is a store (its steps, or one of them) or a step directory.
    // Any other directory is reported as before: a path that is not a shard file.
    auto info = fs.stat(path);
    auto kind = info.ok() && info->is_dir ? ckpt::tools::classify_path(fs, path) : ckpt::Result<ckpt::tools::PathKind>(ckpt::tools::PathKind::file);
    if (!kind.ok()) return ckpt::cli::report(kTool, kind.status());
    const bool memory = *kind == ckpt::tools::PathKind::memory_root || *kind == ckpt::tools::PathKind::rank_dir;
    if (!persistent.empty() && !memory)
      return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": --persistent applies to a memory root or rank directory"));
    if (memory) {
      if (*step_option || latest || pin || with_chunks)
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": a " + ckpt::tools::path_kind_name(*kind) +
                                                                                        " takes --json and --persistent only"));
      ckpt::tiers::MemoryRootOptions options;
      options.persistent = persistent;
      auto root = ckpt::tiers::describe_memory_root(fs, path, options);
      if (!root.ok()) return ckpt::cli::report(kTool, root.status());
      if (as_json) ckpt::cli::print_json(ckpt::tools::memory_root_json(*root));
      else print_memory_root(*root);
      return static_cast<int>(root->ok() ? ckpt::cli::kOk : ckpt::cli::kIntegrity);
    }
    if (*kind != ckpt::tools::PathKind::file && *kind != ckpt::tools::PathKind::other_dir) {
      json out;
      if (*kind == ckpt::tools::PathKind::step_dir) {
        if (*step_option || latest)
          return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, "--step and --latest apply to store directories"));
        auto doc = inspect_step_directory(fs, path, with_chunks);
        if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
        out = std::move(doc).value();
        return emit(out, print_step);
      }
      if (*kind != ckpt::tools::PathKind::store) return ckpt::cli::report(kTool, ckpt::tools::not_a_store_error(path, *kind));
      auto store = ckpt::tools::open_store_for_reading(fs, path);
      if (!store.ok()) return ckpt::cli::report(kTool, store.status());
      if (*step_option || latest) {
        ckpt::tools::StepSelection selection;
        if (*step_option) selection.step = step_number;
        selection.latest = latest;
        auto selected = ckpt::tools::select_steps(**store, selection);
        if (!selected.ok()) return ckpt::cli::report(kTool, selected.status());
        auto doc = inspect_committed_step(**store, selected->front(), with_chunks);
        // Retired while being read: --latest follows the writer to its new latest step (a few times at most).
        std::string retired_state;
        for (int attempt = 0; attempt < 8 && !doc.ok() && retired_meanwhile(**store, selected->front(), doc.status(), retired_state);
             ++attempt) {
          if (!latest)
            return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::not_found,
                                                             "step " + std::to_string(selected->front().step) + " (txn " +
                                                                 std::to_string(selected->front().txn) + ") was retired while being read (" +
                                                                 retired_state + " in the journal): no longer a step, not damage"));
          selected = ckpt::tools::select_steps(**store, selection);
          if (!selected.ok()) return ckpt::cli::report(kTool, selected.status());
          doc = inspect_committed_step(**store, selected->front(), with_chunks);
        }
        if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
        return emit(*doc, print_step);
      }
      bool damaged = false;
      auto doc = inspect_store(**store, damaged);
      if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
      if (as_json) ckpt::cli::print_json(*doc);
      else print_store(*doc);
      return static_cast<int>(damaged ? ckpt::cli::kIntegrity : ckpt::cli::kOk);
    }
    if (*step_option || latest)
      return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": --step and --latest apply to store directories"));
    auto doc = inspect_shard(fs, path, with_chunks);
    if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
    auto content = ckpt::content_of_path(fs, path);
    if (!content.ok()) return ckpt::cli::report(kTool, content.status());
    (*doc)["root_digest"] = content->root.hex();
    (*doc)["identity"] = ckpt::tools::identity_json(*content);
    return emit(*doc, print_human);
  });
}
