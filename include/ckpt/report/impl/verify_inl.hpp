// ckpt: definitions of report/verify.hpp (spec/REPORTS.md 3).
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

#include "../../store/open_store.hpp"
#include "../../store/store.hpp"
#include "../verify.hpp"

namespace ckpt::report {

CKPT_INLINE FileOutcome check_shard(FsRef fs, const std::string& path, const FileVerifier& verify_one, const char* engine) {
  FileOutcome out;
  out.path = path;
  out.engine = engine;
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&]() -> FileOutcome {
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(out);
  };
  auto info = fs.stat(path);
  if (!info.ok()) {
    out.error = info.status();  // the message already names the path
    return finish();
  }
  if (info->is_dir) {
    out.error = make_error(Code::invalid_argument, path + ": is a directory, expected a shard file");
    return finish();
  }
  auto report = verify_one(path);
  if (!report.ok()) {
    out.error = report.status();
    if (out.error.message().find(path) == std::string::npos) out.error = out.error.with_context(path);
    return finish();
  }
  out.has_report = true;
  out.report = std::move(report).value();
  return finish();
}

namespace detail {

// The per-file verifier step verification calls: options.check_shard (or the CPU), each outcome kept.
[[nodiscard]] inline FileVerifier recording_verifier(FsRef fs, const VerifyPathsOptions& options, std::vector<FileOutcome>& files) {
  return [fs, &options, &files](const std::string& path) -> Result<VerifyReport> {
    files.push_back(options.check_shard ? options.check_shard(path) : check_shard(fs, path, cpu_file_verifier(fs, options.verify)));
    const FileOutcome& o = files.back();
    if (!o.has_report) return o.error;
    return o.report;
  };
}

// Takes the library's step report into the outcome; its files are files [first, files.size()).
inline void take_step_report(StepOutcome& step, StepVerifyReport&& report, std::size_t first, const std::vector<FileOutcome>& files) {
  step.problems = std::move(report.problems);
  step.chunks = report.chunks_checked;
  step.bytes = report.bytes_checked;
  for (std::size_t k = first; k < files.size(); ++k) step.files.push_back(k);
}

inline void finish_step(StepOutcome& step, const std::vector<FileOutcome>& files) {
  step.ok = step.problems.empty() || step.retired;
  // A shard retired while being read is not damage (spec/JOURNAL.md 10): it has no report to judge.
  for (const auto k : step.files)
    if (!files[k].retired && (!files[k].has_report || !files[k].report.ok())) step.ok = false;
}

// A committed step of an open store; files gone are rechecked against the journal (spec/JOURNAL.md 6.5).
[[nodiscard]] inline StepOutcome verify_committed_step(FsRef fs, Store& store, const StepInfo& info, const VerifyPathsOptions& options,
                                                      std::vector<FileOutcome>& files) {
  StepOutcome step;
  step.info = info;
  step.dir = join_path(store.path(), info.dir);
  step.label = "step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ", " + step.dir + ")";
  const std::size_t first = files.size();
  StepVerifyReport report = verify_step(fs, store.step_root(), info, store.uuid(), recording_verifier(fs, options, files));
  const bool missing = report.files_missing();  // before the problems are moved out of the report
  take_step_report(step, std::move(report), first, files);
  if (missing) {
    auto recheck = recheck_step(store, info.step, info.txn);
    if (!recheck.ok()) {
      Problem p;
      p.code = recheck.status().code();
      p.region = "journal";
      p.file = store.path();
      p.message = recheck.status().with_context("cannot re-read the journal to tell a retired step from a damaged one").message();
      step.problems.push_back(std::move(p));
    } else if (*recheck != StepRecheck::committed) {
      step.retired = true;
      step.retired_state = step_recheck_name(*recheck);
      step.problems.clear();
      for (const auto k : step.files)
        if (!files[k].has_report && files[k].error.code() == Code::not_found) files[k].retired = true;
    }
  }
  finish_step(step, files);
  return step;
}

// A step directory given directly: pinned by its store's COMMIT when it has one, else by its MANIFEST alone.
[[nodiscard]] inline StepOutcome verify_step_dir(FsRef fs, const std::string& dir, const VerifyPathsOptions& options,
                                                 std::vector<FileOutcome>& files) {
  const StepInStore where = locate_step_directory(fs, dir);
  if (where.info) {
    auto store = open_store_for_reading(fs, where.store);
    if (store.ok()) return verify_committed_step(fs, **store, *where.info, options, files);
  }
  StepOutcome step;
  step.dir = dir;
  step.label = dir;
  step.state = where.store.empty() ? "" : where.state;
  const std::size_t first = files.size();
  take_step_report(step, verify_step_directory(fs, dir, recording_verifier(fs, options, files)), first, files);
  finish_step(step, files);
  return step;
}

// A store: its log (damage, or what a crash normally leaves), then the selected committed steps.
[[nodiscard]] inline Status verify_store(FsRef fs, const std::string& path, const VerifyPathsOptions& options, VerifyPathsReport& into) {
  CKPT_ASSIGN_OR_RETURN(auto store, open_store_for_reading(fs, path));
  return verify_open_store(*store, options, into);
}

[[nodiscard]] inline Status selection_misuse(const std::string& path) {
  return make_error(Code::invalid_argument, path + ": --step and --latest apply to store directories only");
}

}  // namespace detail

CKPT_INLINE Status verify_open_store(Store& store, const VerifyPathsOptions& options, VerifyPathsReport& into) {
  StoreOutcome out;
  out.path = store.path();
  const RecoveryReport& report = store.recovery_report();
  out.journal = report.journal;
  if (report.corrupt()) {
    Problem p = ::ckpt::detail::step_problem(report.corruption_status(), "journal", report.journal.path);
    if (!report.journal.corruption.empty()) {  // the first damaged group; a protocol problem names its record
      p.offset = report.journal.corruption.front().offset;
      p.length = report.journal.corruption.front().length;
    } else if (!report.problems.empty()) {
      p.offset = report.problems.front().offset;
      p.length = report.problems.front().length;
    }
    out.problems.push_back(std::move(p));
  }
  if (report.tail_damaged()) {  // every byte there and not checking out: damage to durable data (spec/JOURNAL.md 6.3)
    Problem p;
    p.region = "journal";
    p.file = report.journal.path;
    p.offset = report.journal.torn_tail->offset;
    p.length = report.journal.torn_tail->length;
    p.message = "damaged journal tail at offset " + std::to_string(report.journal.torn_tail->offset) + " (" +
                std::to_string(report.journal.torn_tail->length) + " bytes, not a torn append: " + report.journal.torn_tail->reason +
                "); run ckpt-repair, which applies what still checks out";
    out.problems.push_back(std::move(p));
  }
  else if (report.journal.torn_tail)
    out.notes.push_back("torn journal tail at offset " + std::to_string(report.journal.torn_tail->offset) + " (" +
                        std::to_string(report.journal.torn_tail->length) +
                        " bytes, left by a crash; the next writer or ckpt-repair truncates it)");
  // A log object that does not decode is damage to durable data (spec/OBJECT.md 4.2).
  for (const auto& p : report.log_damage) out.problems.push_back(p);
  for (const auto& u : report.unknown_entries)
    out.notes.push_back("unknown entry '" + u + "' in the store: no journal record accounts for it (a symlink, device or FIFO is never followed)");
  for (const auto& t : report.transactions)
    if (t.state == TxnState::open)
      out.notes.push_back("transaction " + std::to_string(t.txn) + " (step " + std::to_string(t.step) +
                          ") is open: a save in progress, or left by a crash (not a step)");
  CKPT_ASSIGN_OR_RETURN(auto selected, select_steps(store, options.selection));
  // The caller's checker (a GPU, say) reads files; shards on object storage are read through the store's Fs.
  VerifyPathsOptions through_store = options;
  if (is_object_url(store.path())) through_store.check_shard = nullptr;
  for (const auto& info : selected) {
    into.steps.push_back(detail::verify_committed_step(store.fs(), store, info, through_store, into.files));
    out.steps.push_back(into.steps.size() - 1);
  }
  out.ok = out.problems.empty();
  for (const auto k : out.steps) out.ok = out.ok && into.steps[k].ok;
  into.stores.push_back(std::move(out));
  return Status();
}

CKPT_INLINE void verify_path(FsRef fs, const std::string& path, const VerifyPathsOptions& options, VerifyPathsReport& into) {
  auto fail = [&](Status s) { into.errors.push_back({path, std::move(s)}); };
  if (is_object_url(path)) {
    StoreOptions o;
    o.open_objects = options.open_objects;
    auto opened = open_store(path, Access::read_only, o);
    if (!opened.ok()) return fail(opened.status());
    Status s = verify_open_store(**opened, options, into);
    if (!s.ok()) fail(s);
    return;
  }
  const bool selecting = !options.selection.all();
  // A format ckpt did not write: what the format allows, and every byte when a sidecar exists.
  auto foreign = detect_foreign(fs, path);
  if (foreign.ok() && *foreign) {
    if (selecting) return fail(detail::selection_misuse(path));
    std::function<void(std::uint64_t, std::uint64_t)> progress;
    if (options.foreign_progress)
      progress = [&](std::uint64_t done, std::uint64_t total) { options.foreign_progress(path, done, total); };
    auto report = verify_foreign(fs, path, progress);
    if (!report.ok()) return fail(report.status());
    into.foreign.push_back(std::move(report).value());
    return;
  }
  // A directory is a store (every committed step, or the selected ones), a step directory, or a memory
  // tier's root or rank directory; anything else is checked as a shard file.
  auto info = fs.stat(path);
  auto kind = info.ok() && info->is_dir ? classify_path(fs, path) : Result<PathKind>(PathKind::file);
  if (kind.ok() && (*kind == PathKind::memory_root || *kind == PathKind::rank_dir)) {
    if (selecting) return fail(detail::selection_misuse(path));
    tiers::MemoryRootOptions root_options;
    root_options.persistent = options.persistent;
    root_options.open_objects = options.open_objects;  // an s3:// persistent store (spec/TIERS.md 4.5)
    root_options.verify_one = detail::recording_verifier(fs, options, into.files);
    auto verified = tiers::verify_memory_root(fs, path, root_options);
    if (!verified.ok()) return fail(verified.status());
    into.memory_roots.push_back(std::move(verified).value());
    return;
  }
  if (kind.ok() && *kind != PathKind::file && *kind != PathKind::other_dir) {
    if (*kind == PathKind::store) {
      if (Status s = detail::verify_store(fs, path, options, into); !s.ok()) fail(std::move(s));
    } else if (*kind == PathKind::step_dir) {
      if (selecting) return fail(detail::selection_misuse(path));
      into.steps.push_back(detail::verify_step_dir(fs, path, options, into.files));
    } else {
      fail(not_a_store_error(path, *kind));
    }
    return;
  }
  if (selecting) return fail(detail::selection_misuse(path));
  into.shard_files.push_back(into.files.size());
  into.files.push_back(options.check_shard ? options.check_shard(path) : check_shard(fs, path, cpu_file_verifier(fs, options.verify)));
}

namespace detail {
inline void conclude_pins(FsRef fs, const std::vector<std::string>& paths, const VerifyPathsOptions& options, VerifyPathsReport& into) {
  if (!options.persistent.empty() && into.memory_roots.empty())
    into.errors.push_back({options.persistent, make_error(Code::invalid_argument, "--persistent applies to a memory root or rank "
                                                                                  "directory, and none was verified")});
  if (options.pins.empty()) return;
  into.pins_checked = true;
  for (const auto& path : paths) {
    PinOutcome out;
    out.path = path;
    const Pin* pin = find_pin(options.pins, path);
    if (pin == nullptr) {
      out.error = make_error(Code::invalid_argument, "no pin names this path in " + options.pin_file);
      into.pins.push_back(std::move(out));
      continue;
    }
    out.source = pin->source;
    ContentOptions content_options;
    content_options.step = options.selection.step;
    content_options.read_foreign_data = true;
    auto content = content_of_path(fs, path, content_options);
    if (!content.ok()) out.error = content.status().with_context("cannot compute the root digest to compare with the pin");
    else out.check = check_pin(*content, *pin);
    into.pins.push_back(std::move(out));
  }
}

}  // namespace detail

CKPT_INLINE void conclude_paths(FsRef fs, const std::vector<std::string>& paths, const VerifyPathsOptions& options,
                                VerifyPathsReport& into) {
  detail::conclude_pins(fs, paths, options, into);
  into.kind = verify_kind(into);
  into.exit_code = exit_code(into);
}

CKPT_INLINE VerifyPathsReport verify_paths(FsRef fs, const std::vector<std::string>& paths, const VerifyPathsOptions& options) {
  VerifyPathsReport report;
  for (const auto& path : paths) {
    const VerifyMark since = verify_mark(report);
    verify_path(fs, path, options, report);
    if (options.on_path) options.on_path(report, since);
  }
  conclude_paths(fs, paths, options, report);
  return report;
}

CKPT_INLINE int exit_code(const StepOutcome& step, const std::vector<FileOutcome>& files) {
  int code = kOk;
  if (step.retired) return code;
  for (const auto& p : step.problems) code = std::max(code, problem_exit(p.code));
  for (const auto k : step.files) code = std::max(code, outcome_exit(files[k]));
  return code;
}

CKPT_INLINE int exit_code(const VerifyPathsReport& r) {
  int code = kOk;
  for (const auto& e : r.errors) code = std::max(code, exit_for(e.status.code()));
  for (const auto& f : r.foreign)
    for (const auto& p : f.problems) code = std::max(code, problem_exit(p.code));
  for (const auto& v : r.memory_roots)
    for (const auto& p : v.problems) code = std::max(code, problem_exit(p.code));
  for (const auto& s : r.stores)
    for (const auto& p : s.problems) code = std::max(code, problem_exit(p.code));
  for (const auto& s : r.steps) code = std::max(code, exit_code(s, r.files));
  // Shard files named directly (a step's are judged with the step, a memory root's by its problems).
  for (const auto k : r.shard_files) code = std::max(code, outcome_exit(r.files[k]));
  for (const auto& p : r.pins) code = std::max(code, p.error.ok() ? (p.check.ok ? kOk : kIntegrity) : exit_for(p.error.code()));
  return code;
}

namespace detail {

[[nodiscard]] inline json step_outcome_json(const StepOutcome& step, const std::vector<FileOutcome>& files) {
  json j = step.info ? step_info_json(*step.info) : json::object();
  j["path"] = step.dir;
  j["ok"] = step.ok;
  j["status"] = step.retired ? "retired" : step.ok ? "intact" : "damaged";
  if (step.retired) j["retired_state"] = step.retired_state;
  if (!step.state.empty()) j["state_in_store"] = step.state;
  json problems = json::array();
  for (const auto& p : step.problems) problems.push_back(problem_json(p));
  j["problems"] = std::move(problems);
  json names = json::array();
  for (const auto k : step.files) names.push_back(files[k].path);
  j["shard_files"] = std::move(names);
  j["chunks_checked"] = step.chunks;
  j["bytes_checked"] = step.bytes;
  return j;
}

[[nodiscard]] inline json foreign_report_json(const ForeignVerifyReport& r) {
  json problems = json::array();
  for (const auto& p : r.problems) problems.push_back(problem_json(p));
  return {{"path", r.path},
          {"format", r.format ? json(foreign_format_name(*r.format)) : json(nullptr)},
          {"ok", r.ok()},
          {"data_checked", r.data_checked},
          {"sidecar", r.sidecar.empty() ? json(nullptr) : json(r.sidecar)},
          {"root_digest", r.root ? json(r.root->hex()) : json(nullptr)},
          {"tensor_count", r.checkpoint ? json(r.checkpoint->tensors.size()) : json(nullptr)},
          {"chunks_checked", r.chunks_checked},
          {"bytes_checked", r.bytes_checked},
          {"problems", std::move(problems)}};
}

[[nodiscard]] inline json memory_root_verification_json(const tiers::MemoryRootVerification& v) {
  json j = memory_root_json(v.root, true);
  j["ok"] = v.ok();
  j["copies_checked"] = v.copies_checked;
  j["chunks_checked"] = v.chunks_checked;
  j["bytes_checked"] = v.bytes_checked;
  return j;
}

[[nodiscard]] inline json pin_outcome_json(const PinOutcome& p) {
  if (!p.error.ok())
    return {{"path", p.path}, {"ok", false}, {"error", {{"code", code_name(p.error.code())}, {"message", p.error.message()}}}};
  json j = {{"path", p.path}, {"ok", p.check.ok}, {"expected", p.check.expected}, {"found", p.check.found}, {"pin", p.source}};
  if (!p.check.ok) {
    j["tensors_known"] = p.check.tensors_known;
    j["tensors_changed"] = p.check.changed;
    j["tensors_missing"] = p.check.missing;
    j["tensors_added"] = p.check.added;
    j["metadata_changed"] = p.check.metadata_changed;
  }
  return j;
}

}  // namespace detail

CKPT_INLINE json verify_json(const VerifyPathsReport& r) {
  const int code = exit_code(r);
  json doc = outcomes_json(r.files);
  if (!r.foreign.empty()) {
    json docs = json::array();
    for (const auto& f : r.foreign) docs.push_back(detail::foreign_report_json(f));
    doc["foreign"] = std::move(docs);
  }
  if (r.pins_checked) {
    json docs = json::array();
    for (const auto& p : r.pins) docs.push_back(detail::pin_outcome_json(p));
    doc["pins"] = std::move(docs);
  }
  if (!r.memory_roots.empty()) {
    json roots = json::array();
    for (const auto& v : r.memory_roots) roots.push_back(detail::memory_root_verification_json(v));
    doc["memory_roots"] = std::move(roots);
  }
  if (!r.stores.empty() || !r.steps.empty()) {
    // Stores and step directories add their own sections; every shard they checked is also in "files".
    json store_docs = json::array(), step_docs = json::array();
    for (const auto& so : r.stores) {
      json steps = json::array();
      for (const auto k : so.steps) steps.push_back(detail::step_outcome_json(r.steps[k], r.files));
      json problems = json::array();
      for (const auto& p : so.problems) problems.push_back({{"code", code_name(p.code)}, {"message", p.message}});
      store_docs.push_back({{"path", so.path},
                            {"ok", so.ok},
                            {"journal", so.journal ? journal_json(*so.journal) : json(nullptr)},
                            {"problems", std::move(problems)},
                            {"notes", so.notes},
                            {"steps", std::move(steps)}});
    }
    for (const auto& st : r.steps) step_docs.push_back(detail::step_outcome_json(st, r.files));
    const VerifySummary summary = verify_summary(r);
    doc["stores"] = std::move(store_docs);
    doc["steps"] = std::move(step_docs);
    doc["summary"]["steps"] = summary.steps;
    doc["summary"]["steps_intact"] = summary.steps_intact;
    doc["summary"]["steps_retired"] = summary.steps_retired;
  }
  json errors = json::array();
  for (const auto& e : r.errors) errors.push_back({{"path", e.path}, {"code", code_name(e.status.code())}, {"message", e.status.message()}});
  doc["errors"] = std::move(errors);
  // Damage anywhere (a foreign checkpoint, a pin that did not match, a path not checked) makes the run not ok.
  doc["ok"] = doc["ok"].get<bool>() && code == kOk;
  doc["exit_code"] = code;
  doc["report"] = "verify";
  doc["subject"] = verify_kind(r);
  return doc;
}

CKPT_INLINE VerifySummary verify_summary(const VerifyPathsReport& r) {
  VerifySummary s;
  s.files = r.files.size();
  for (const auto& o : r.files) {
    if (o.retired) ++s.retired;
    else if (!o.has_report) ++s.errors;
    else if (o.report.ok()) ++s.intact;
    else ++s.damaged;
    if (o.has_report) s.problems += o.report.problems.size();
  }
  s.steps = r.steps.size();
  for (const auto& st : r.steps) {
    if (st.retired) ++s.steps_retired;
    else if (st.ok) ++s.steps_intact;
  }
  return s;
}

CKPT_INLINE const char* verify_kind(const VerifyPathsReport& r) noexcept {
  if (!r.stores.empty()) return "store";
  if (!r.steps.empty()) return "step directory";
  if (!r.foreign.empty()) return "foreign";
  if (!r.memory_roots.empty()) return "memory root";
  return "file";
}

// JUnit test cases: every shard file, then each path not checked, memory-root problem not already a shard
// file's, step-level problem, foreign checkpoint and pin that failed.
CKPT_INLINE std::string verify_junit(const VerifyPathsReport& r, const std::string& suite) {
  std::vector<FileOutcome> cases = r.files;
  auto failure = [&](const std::string& path, const Status& s) {
    FileOutcome f;
    f.path = path;
    f.error = s;
    cases.push_back(std::move(f));
  };
  for (const auto& e : r.errors) failure(e.path, e.status);
  for (const auto& v : r.memory_roots)
    for (const auto& p : v.problems) {
      bool in_file = false;
      for (const auto& o : r.files) in_file = in_file || (o.path == p.file && o.has_report && !o.report.ok());
      if (!in_file) failure(p.store, make_error(p.code, p.message));
    }
  for (const auto& st : r.steps)
    for (const auto& p : st.problems) failure(st.dir, make_error(p.code, p.message));
  for (const auto& f : r.foreign) {
    FileOutcome o;
    o.path = f.path;
    o.has_report = true;
    o.report.path = f.path;
    o.report.problems = f.problems;
    o.report.chunks_checked = f.chunks_checked;
    o.report.bytes_checked = f.bytes_checked;
    cases.push_back(std::move(o));
  }
  for (const auto& p : r.pins) {
    if (!p.error.ok()) {
      failure(p.path, p.error);
    } else if (!p.check.ok) {
      std::string summary;
      for (const auto& line : pin_check_lines(p.check)) summary += (summary.empty() ? "" : "; ") + line;
      failure(p.path, make_error(Code::corrupt, "not the pinned checkpoint: " + summary));
    }
  }
  return junit_xml(cases, suite);
}

CKPT_INLINE Result<json> write_sidecar_for(FsRef fs, const std::string& path, std::uint32_t chunk_size_log2,
                                           const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  CKPT_ASSIGN_OR_RETURN(auto format, detect_foreign(fs, path));
  if (!format)
    return make_error(Code::invalid_argument, path + ": --write-sidecar is for safetensors, Hugging Face, DCP and GGUF "
                                                     "checkpoints; a ckpt checkpoint records its digests itself");
  CKPT_ASSIGN_OR_RETURN(auto checkpoint, open_foreign(fs, path));
  CKPT_ASSIGN_OR_RETURN(auto sidecar, build_sidecar(fs, checkpoint, chunk_size_log2, progress));
  const std::string side = sidecar_path(checkpoint);
  CKPT_TRY(write_sidecar(fs, sidecar, side));
  std::uint64_t chunks = 0, bytes = 0;
  for (const auto& f : sidecar.files) {
    bytes += f.size;
    for (const auto& region : f.regions) chunks += region.chunk_digests.size();
  }
  for (const auto& t : sidecar.content.tensors)
    for (const auto& p : t.pieces) chunks += p.chunk_digests.size();
  return json{{"path", path},
              {"format", foreign_format_name(sidecar.format)},
              {"sidecar", side},
              {"root_digest", sidecar.content.root.hex()},
              {"files", sidecar.files.size()},
              {"tensors", sidecar.content.tensors.size()},
              {"chunks", chunks},
              {"bytes", bytes}};
}

}  // namespace ckpt::report
