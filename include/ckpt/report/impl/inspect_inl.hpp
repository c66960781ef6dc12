// ckpt: definitions of report/inspect.hpp (spec/REPORTS.md 4).
#pragma once

#include <utility>

#include "../../store/open_store.hpp"
#include "../../store/store.hpp"
#include "../../identity/sidecar.hpp"
#include "../inspect.hpp"

namespace ckpt::report {

namespace detail {

// Opens one shard and describes it; the unit a store- or step-level caller repeats per shard.
[[nodiscard]] inline Result<json> inspect_shard(FsRef fs, const std::string& path, bool with_chunks) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();  // the message already names the path
  if (info->is_dir) return make_error(Code::invalid_argument, path + ": is a directory, expected a shard file");
  auto reader = ShardReader::open(fs, path);
  if (!reader.ok()) return reader.status();
  return shard_json(*reader, with_chunks);
}

// The training state and shard list of one step, then each shard as a plain file would be shown.
[[nodiscard]] inline json step_doc(const json& step, const Manifest& manifest, const json& shards, const Content& content) {
  return {{"step", step},
          {"root_digest", content.root.hex()},
          {"identity", identity_json(content)},
          {"world_size", manifest.world_size},
          {"store_uuid", uuid_string(manifest.store_uuid)},
          {"training_state", training_state_json(manifest.state)},
          {"manifest_shards", manifest_shards_json(manifest)},
          {"shards", shards}};
}

// A committed step of a store: opened through its COMMIT record, so the manifest and every shard's
// size, UUID and index digest are checked on the way (spec/JOURNAL.md 7.5).
[[nodiscard]] inline Result<json> inspect_committed_step(Store& store, const StepInfo& info, bool with_chunks) {
  CKPT_ASSIGN_OR_RETURN(auto reader, store.open_step(info));
  json shards = json::array();
  for (std::size_t i = 0; i < reader.shard_count(); ++i) shards.push_back(shard_json(reader.shard(i), with_chunks));
  json step = step_info_json(info);
  step["store"] = store.path();
  step["committed"] = true;
  CKPT_ASSIGN_OR_RETURN(const Content content, content_of_step(reader, "step " + std::to_string(info.step)));
  return step_doc(step, reader.manifest(), shards, content);
}

// A step directory given directly: through its store when that commits it, else from its MANIFEST alone.
[[nodiscard]] inline Result<json> inspect_step_directory(FsRef fs, const std::string& dir, bool with_chunks) {
  const StepInStore where = locate_step_directory(fs, dir);
  if (where.info) {
    CKPT_ASSIGN_OR_RETURN(auto store, open_store_for_reading(fs, where.store));
    return inspect_committed_step(*store, *where.info, with_chunks);
  }
  CKPT_ASSIGN_OR_RETURN(StepDirectory content, read_step_directory(fs, dir));
  if (!content.shard_problems.empty()) return problem_error(content.shard_problems.front());
  json shards = json::array();
  for (const auto& path : content.shard_paths) {
    CKPT_ASSIGN_OR_RETURN(json shard, inspect_shard(fs, path, with_chunks));
    shards.push_back(std::move(shard));
  }
  json step = {{"step", content.manifest.step},
               {"txn", content.manifest.txn},
               {"dir", dir},
               {"manifest_size", content.manifest_size},
               {"manifest_digest", hex64(content.manifest_digest)},
               {"store", where.store.empty() ? json(nullptr) : json(where.store)},
               {"committed", false},
               {"state_in_store", where.store.empty() ? json(nullptr) : json(where.state)}};
  CKPT_ASSIGN_OR_RETURN(const Content identity, content_of_path(fs, dir));
  return step_doc(step, content.manifest, shards, identity);
}

// Whether a step whose files could not be found (not_found) was retired since the store's snapshot of
// the journal: a live writer removes a step's files only after its RETIRE record (spec/JOURNAL.md 10).
// Sets state to what the re-read journal says ("retired", "not in the journal") when so.
[[nodiscard]] inline bool retired_meanwhile(Store& store, const StepInfo& info, const Status& failure,
                                     std::string& state) {
  if (failure.code() != Code::not_found) return false;
  auto recheck = recheck_step(store, info.step, info.txn);
  if (!recheck.ok() || *recheck == StepRecheck::committed) return false;  // still a step: the missing file is damage
  state = step_recheck_name(*recheck);
  return true;
}

// Every committed step of a store, one row each; a step that cannot be opened is shown with its error,
// or as retired when the writer retired it while it was being read.
[[nodiscard]] inline json store_steps(Store& store, bool& damaged) {
  json steps = json::array();
  const std::vector<StepInfo> listed = store.steps();  // a copy: a recheck refreshes the store
  for (const auto& info : listed) {
    json row = step_info_json(info);
    auto reader = store.open_step(info);
    std::string retired_state;
    if (!reader.ok() && retired_meanwhile(store, info, reader.status(), retired_state)) {
      row["status"] = "retired";
      row["retired_state"] = retired_state;
      row["message"] = reader.status().message();
    } else if (!reader.ok()) {
      row["status"] = "damaged";
      row["error"] = {{"code", code_name(reader.status().code())}, {"message", reader.status().message()}};
      damaged = true;
    } else {
      row["status"] = "ok";
      const Manifest& m = reader->manifest();
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
      auto content = content_of_step(*reader, "step " + std::to_string(info.step));
      row["root_digest"] = content.ok() ? json(content->root.hex()) : json(nullptr);
    }
    steps.push_back(std::move(row));
  }
  return steps;
}

// A store: its log, transactions and what recovery found, then its steps. A store on objects has no
// journal ("journal" null): its transactions come from the commit, retire and abort objects of log/
// (spec/OBJECT.md 4.2), and log objects that do not decode are its problems (damage).
[[nodiscard]] inline json store_doc(Store& store, bool& damaged) {
  const RecoveryReport& report = store.recovery_report();
  const bool on_objects = object::is_object_url(store.path());
  std::vector<std::string> problems;  // their messages: the document's problems are one line each (spec/REPORTS.md)
  for (const auto& p : report.problems) problems.push_back(p.message);
  for (const auto& p : report.log_damage) problems.push_back(p.message);
  json doc = {{"store", store.path()},
              {"uuid", uuid_string(store.uuid())},
              {"journal", on_objects ? json(nullptr) : journal_json(report.journal)},
              {"transactions", transactions_json(report.transactions)},
              {"unknown_entries", report.unknown_entries},
              {"problems", problems}};
  if (on_objects) doc["object_store"] = true;
  json states = {{"committed", 0}, {"retired", 0}, {"aborted", 0}, {"open", 0}};
  for (const auto& t : report.transactions) {
    json& n = states[txn_state_name(t.state)];
    n = (n.is_number() ? n.get<std::uint64_t>() : 0) + 1;
  }
  doc["transaction_states"] = std::move(states);
  damaged = report.corrupt() || report.tail_damaged() || !report.log_damage.empty();
  return doc;
}

// Every committed step of a store, one row each; a step that cannot be opened is shown with its error,
// or as retired when the writer retired it while it was being read.
[[nodiscard]] inline json inspect_store(Store& store, bool& damaged) {
  json doc = store_doc(store, damaged);
  bool steps_damaged = false;
  doc["steps"] = store_steps(store, steps_damaged);
  damaged = damaged || steps_damaged;
  return doc;
}

// A store's listing, or the step options.selection picks (kind "store" or "step").
[[nodiscard]] inline Status inspect_store_or_step(Store& store, const InspectOptions& options, Inspection& out) {
  if (options.selection.all()) {
    bool damaged = false;
    out.doc = inspect_store(store, damaged);
    out.kind = "store";
    out.exit_code = damaged ? kIntegrity : kOk;
    return Status();
  }
  CKPT_ASSIGN_OR_RETURN(auto selected, select_steps(store, options.selection));
  auto doc = inspect_committed_step(store, selected.front(), options.chunks);
  // Retired while being read: the latest follows the writer to its new latest step (a few times at most).
  std::string retired_state;
  for (int attempt = 0; attempt < 8 && !doc.ok() && retired_meanwhile(store, selected.front(), doc.status(), retired_state);
       ++attempt) {
    if (!options.selection.latest)
      return make_error(Code::not_found, "step " + std::to_string(selected.front().step) + " (txn " +
                                             std::to_string(selected.front().txn) + ") was retired while being read (" +
                                             retired_state + " in the journal): no longer a step, not damage");
    CKPT_ASSIGN_OR_RETURN(selected, select_steps(store, options.selection));
    doc = inspect_committed_step(store, selected.front(), options.chunks);
  }
  CKPT_ASSIGN_OR_RETURN(out.doc, std::move(doc));
  out.kind = "step";
  return Status();
}

// A safetensors file or set, a DCP directory or a GGUF file: its tensors from its own header, and
// its root digest when a sidecar records one (spec/IDENTITY.md 4).
[[nodiscard]] inline Result<json> inspect_foreign(FsRef fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(const ForeignCheckpoint checkpoint, open_foreign(fs, path));
  const std::string side = sidecar_path(checkpoint);
  auto sidecar = read_sidecar(fs, side);
  std::optional<Digest128> root;
  std::string sidecar_note;
  if (sidecar.ok()) root = sidecar->content.root;
  else if (sidecar.status().code() != Code::not_found) sidecar_note = sidecar.status().message();
  json doc = foreign_json(checkpoint, root, sidecar.ok() || !sidecar_note.empty() ? side : std::string());
  if (sidecar.ok()) doc["identity"] = identity_json(sidecar->content);
  if (!sidecar_note.empty()) doc["sidecar_error"] = sidecar_note;
  return doc;
}

// What inspect_path describes, before its document is stamped with its kind and exit status.
[[nodiscard]] CKPT_INLINE Result<Inspection> describe_path(FsRef fs, const std::string& path, const InspectOptions& options) {
  Inspection out;
  const bool selecting = !options.selection.all();
  auto misuse = [&](const std::string& what) { return make_error(Code::invalid_argument, path + ": " + what); };
  // A store on objects (spec/OBJECT.md 4) is described as a directory store is, read-only.
  if (object::is_object_url(path)) {
    if (!options.persistent.empty()) return misuse("--persistent applies to a memory root or rank directory");
    StoreOptions o;
    o.open_objects = options.open_objects;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open_store(path, Access::read_only, o));
    CKPT_TRY(detail::inspect_store_or_step(*store, options, out));
    return out;
  }
  // Formats ckpt did not write are told apart first; ckpt's own files and directories never match.
  CKPT_ASSIGN_OR_RETURN(auto foreign, detect_foreign(fs, path));
  if (foreign) {
    if (!options.persistent.empty()) return misuse("--persistent applies to a memory root or rank directory");
    if (selecting) return misuse("--step and --latest apply to store directories");
    CKPT_ASSIGN_OR_RETURN(out.doc, detail::inspect_foreign(fs, path));
    out.kind = "foreign";
    out.exit_code = out.doc["problems"].empty() ? kOk : kIntegrity;
    return out;
  }
  // A directory is a store (its steps, or one of them), a step directory or a memory tier's; any
  // other path is described as a shard file.
  auto info = fs.stat(path);
  CKPT_ASSIGN_OR_RETURN(const PathKind kind, info.ok() && info->is_dir ? classify_path(fs, path) : Result<PathKind>(PathKind::file));
  const bool memory = kind == PathKind::memory_root || kind == PathKind::rank_dir;
  if (!options.persistent.empty() && !memory) return misuse("--persistent applies to a memory root or rank directory");
  if (memory) {
    if (selecting || options.chunks) return misuse(std::string("a ") + path_kind_name(kind) + " takes --json and --persistent only");
    tiers::MemoryRootOptions root_options;
    root_options.persistent = options.persistent;
    root_options.open_objects = options.open_objects;  // an s3:// persistent store (spec/TIERS.md 4.5)
    CKPT_ASSIGN_OR_RETURN(auto root, tiers::describe_memory_root(fs, path, root_options));
    out.kind = "memory_root";
    out.doc = memory_root_json(root);
    out.exit_code = root.ok() ? kOk : kIntegrity;
    out.memory_root = std::move(root);
    return out;
  }
  if (kind == PathKind::step_dir) {
    if (selecting) return make_error(Code::invalid_argument, "--step and --latest apply to store directories");
    CKPT_ASSIGN_OR_RETURN(out.doc, detail::inspect_step_directory(fs, path, options.chunks));
    out.kind = "step";
    return out;
  }
  if (kind == PathKind::store) {
    CKPT_ASSIGN_OR_RETURN(auto store, open_store_for_reading(fs, path));
    CKPT_TRY(detail::inspect_store_or_step(*store, options, out));
    return out;
  }
  if (kind != PathKind::file && kind != PathKind::other_dir) return not_a_store_error(path, kind);
  if (selecting) return misuse("--step and --latest apply to store directories");
  CKPT_ASSIGN_OR_RETURN(out.doc, detail::inspect_shard(fs, path, options.chunks));
  CKPT_ASSIGN_OR_RETURN(const Content content, content_of_path(fs, path));
  out.doc["root_digest"] = content.root.hex();
  out.doc["identity"] = identity_json(content);
  out.kind = "shard";
  return out;
}

}  // namespace detail

CKPT_INLINE Result<Inspection> inspect_path(FsRef fs, const std::string& path, const InspectOptions& options) {
  CKPT_ASSIGN_OR_RETURN(Inspection out, detail::describe_path(fs, path, options));
  // "kind" is taken in a memory root's and a foreign checkpoint's document: the report's own is "subject".
  out.doc["report"] = "inspect";
  out.doc["subject"] = out.kind;
  out.doc["exit_code"] = out.exit_code;
  return out;
}

CKPT_INLINE Result<std::string> root_digest(const Inspection& inspection) {
  const json& doc = inspection.doc;
  if (doc.contains("identity") && doc["identity"].is_object() && doc["identity"]["root"].is_string())
    return doc["identity"]["root"].get<std::string>();
  const std::string path = doc.contains("path") && doc["path"].is_string()   ? doc["path"].get<std::string>()
                           : doc.contains("store") && doc["store"].is_string() ? doc["store"].get<std::string>()
                                                                               : std::string("checkpoint");
  // A store's listing: the root digest of its latest step, the one a pin of the store applies to (spec/IDENTITY.md 5).
  if (inspection.kind == "store") {
    if (doc["steps"].empty()) return make_error(Code::not_found, path + ": no committed step");
    const json& latest = doc["steps"].back();
    if (latest.contains("root_digest") && latest["root_digest"].is_string()) return latest["root_digest"].get<std::string>();
    return make_error(Code::corrupt, path + ": its latest step does not open, so it has no root digest");
  }
  return make_error(Code::incomplete, path + ": no root digest recorded (a foreign checkpoint needs a sidecar: ckpt-verify --write-sidecar)");
}

}  // namespace ckpt::report
