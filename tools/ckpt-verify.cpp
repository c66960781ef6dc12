// ckpt-verify: checks every byte of one or more shard files (chunk digests, superblock, index and
// footer digests, zero padding, nothing after the footer) and reports each problem precisely.
// Store directories (all steps, --step N or --latest) and step directories are checked through store_cli.hpp.
// Exit status: 0 all intact, 1 damage or an incomplete file found, 2 usage error or unreadable path.
// A store's step that the writer retires while it is being verified is reported as retired, not damaged.
// A memory tier's root (or one rank directory) has every copy of every shard checked, every tier log
// and store journal read, and with --persistent the persistent store's steps of the same numbers too
// (ckpt/tiers/memory_root.hpp).
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/verify.hpp>

#include "cli.hpp"
#include "gpu_verify.hpp"
#include "identity_cli.hpp"
#include "memory_root_cli.hpp"
#include "report_json.hpp"
#include "store_cli.hpp"

namespace {

using ckpt::tools::FileOutcome;
constexpr const char* kTool = "ckpt-verify";

struct Settings {
  unsigned threads = 1;
  bool use_mmap = false;
  bool use_gpu = false;        // resolved: a usable device was found
  bool gpu_fallback = false;   // on a GPU failure at run time, verify that file on the CPU
  bool progress = false;       // terminal progress bar allowed (cli::Progress also checks isatty)
};

// Verifies one shard file; the unit that a store- or step-level caller repeats per shard.
[[nodiscard]] FileOutcome verify_shard(ckpt::PosixFs& fs, const std::string& path, const Settings& settings) {
  FileOutcome out;
  out.path = path;
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](FileOutcome& o) -> FileOutcome& {
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return o;
  };
  auto info = fs.stat(path);
  if (!info.ok()) {
    out.error = info.status();  // the message already names the path
    return finish(out);
  }
  if (info->is_dir) {
    out.error = ckpt::make_error(ckpt::Code::invalid_argument, path + ": is a directory, expected a shard file");
    return finish(out);
  }
  // The bar is made on the first callback, when the total is known, and erased when the file is done.
  std::unique_ptr<ckpt::cli::Progress> bar;
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
    bar->update(done);
  };
  ckpt::Result<ckpt::VerifyReport> report = ckpt::make_error(ckpt::Code::unsupported, "not run");
  out.engine = "cpu";
  if (settings.use_gpu) {
    ckpt::tools::GpuVerifyOptions gpu;
    if (settings.progress) gpu.progress = progress;
    report = ckpt::tools::gpu_verify_file(path, gpu);
    out.engine = "gpu";
    if (!report.ok() && report.status().code() == ckpt::Code::unsupported && settings.gpu_fallback) {
      std::fprintf(stderr, "%s: note: %s; verifying %s on the CPU\n", kTool, report.status().message().c_str(),
                   path.c_str());
      out.engine = "cpu";
    }
  }
  if (out.engine == "cpu") {
    ckpt::VerifyOptions options;
    options.threads = settings.threads;
    options.use_mmap = settings.use_mmap;
    if (settings.progress) options.progress = progress;
    report = ckpt::verify_file(fs, path, options);
  }
  bar.reset();
  if (!report.ok()) {
    out.error = report.status();
    if (out.error.message().find(path) == std::string::npos) out.error = out.error.with_context(path);
    return finish(out);
  }
  out.has_report = true;
  out.report = std::move(report).value();
  return finish(out);
}

// Human output for one file: a status line, then one line per problem; errors go to stderr.
void print_outcome(const FileOutcome& o, bool quiet) {
  if (!o.has_report) {
    std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(o.error.message()).c_str());
    return;
  }
  const auto& r = o.report;
  const std::string path = ckpt::tools::printable(o.path);
  if (r.ok()) {
    if (!quiet)
      std::printf("%s: ok (%llu chunks, %s checked)\n", path.c_str(), static_cast<unsigned long long>(r.chunks_checked),
                  ckpt::cli::human_bytes(static_cast<double>(r.bytes_checked)).c_str());
    return;
  }
  std::printf("%s: DAMAGED (%zu problem%s)\n", path.c_str(), r.problems.size(), r.problems.size() == 1 ? "" : "s");
  for (const auto& p : r.problems) std::printf("  %s\n", ckpt::tools::problem_line(o.path, p).c_str());
  std::fflush(stdout);
}

// --- Stores and step directories (spec/JOURNAL.md 7.5) ----------------------------------------

using ckpt::tools::json;

// One step, verified by the library (ckpt::verify_step: COMMIT -> MANIFEST -> shard size, UUID, index
// digest, coverage, each problem once), every shard hashed through verify_shard, so --threads, --mmap
// and --gpu apply to stores too.
struct StepOutcome {
  std::string label;  // "step 300 (txn 3, STORE/step-300-3)" or the directory
  std::string dir;    // full path
  std::optional<ckpt::StepInfo> info;
  std::string state;  // for a bare step directory: its state in the enclosing store, if any
  std::vector<ckpt::Problem> problems;  // step-level: manifest, pins, missing files, unreadable shards
  std::vector<std::size_t> files;       // indexes into the outcomes vector
  std::uint64_t chunks = 0, bytes = 0;
  bool files_missing = false;  // some file was not_found: retired meanwhile, or damage (recheck_step decides)
  bool retired = false;        // retired (or dropped from the journal) while being verified: not damage
  std::string retired_state;   // what the re-read journal says: "retired" or "not in the journal"
  bool ok = true;
};

struct StoreOutcome {
  std::string path;
  std::optional<ckpt::JournalScan> journal;
  std::vector<ckpt::Status> problems;  // journal corruption, protocol problems
  std::vector<std::string> notes;      // torn tail, open transactions: normal after a crash, not damage
  std::vector<std::size_t> steps;      // indexes into the steps vector
  bool ok = true;
};

// Exit status of a problem's code: damage is 1, an I/O error or misuse is 2.
[[nodiscard]] int problem_exit(ckpt::Code c) {
  return c == ckpt::Code::io || c == ckpt::Code::invalid_argument || c == ckpt::Code::unsupported ? ckpt::cli::kUsage
                                                                                                 : ckpt::cli::kIntegrity;
}

// The per-file verifier the library's step verification calls: verify_shard, its outcome kept for output.
[[nodiscard]] ckpt::FileVerifier shard_verifier(ckpt::PosixFs& fs, const Settings& settings, std::vector<FileOutcome>& outcomes) {
  return [&fs, &settings, &outcomes](const std::string& path) -> ckpt::Result<ckpt::VerifyReport> {
    outcomes.push_back(verify_shard(fs, path, settings));
    const FileOutcome& o = outcomes.back();
    if (!o.has_report) return o.error;
    return o.report;
  };
}

// Takes the library's report into the step's outcome; files are outcomes [first, outcomes.size()).
void take_report(StepOutcome& step, ckpt::StepVerifyReport&& report, std::size_t first, const std::vector<FileOutcome>& outcomes) {
  step.files_missing = report.files_missing();  // before the problems are moved out of the report
  step.problems = std::move(report.problems);
  step.chunks = report.chunks_checked;
  step.bytes = report.bytes_checked;
  for (std::size_t k = first; k < outcomes.size(); ++k) step.files.push_back(k);
}

void finish_step(StepOutcome& step, const std::vector<FileOutcome>& outcomes) {
  step.ok = step.problems.empty() || step.retired;
  // A shard retired while being read is not damage (spec/JOURNAL.md 10): it has no report to judge.
  for (const auto k : step.files)
    if (!outcomes[k].retired && (!outcomes[k].has_report || !outcomes[k].report.ok())) step.ok = false;
}

// A committed step of an open store.
StepOutcome verify_committed_step(ckpt::PosixFs& fs, ckpt::Store& store, const ckpt::StepInfo& info,
                                  const Settings& settings, std::vector<FileOutcome>& outcomes) {
  StepOutcome step;
  step.info = info;
  step.dir = ckpt::join_path(store.path(), info.dir);
  step.label = "step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ", " + step.dir + ")";
  const std::size_t first = outcomes.size();
  take_report(step, ckpt::verify_step(fs, store.path(), info, store.uuid(), shard_verifier(fs, settings, outcomes)), first,
              outcomes);
  // Files gone: a live writer may have retired the step since our snapshot of the journal (spec 6.5).
  if (step.files_missing) {
    auto recheck = ckpt::recheck_step(store, info.step, info.txn);
    if (!recheck.ok()) {
      ckpt::Problem p;
      p.code = recheck.status().code();
      p.region = "journal";
      p.file = store.path();
      p.message = recheck.status().with_context("cannot re-read the journal to tell a retired step from a damaged one").message();
      step.problems.push_back(std::move(p));
    } else if (*recheck != ckpt::StepRecheck::committed) {
      step.retired = true;
      step.retired_state = ckpt::step_recheck_name(*recheck);
      step.problems.clear();
      for (const auto k : step.files)
        if (!outcomes[k].has_report && outcomes[k].error.code() == ckpt::Code::not_found) outcomes[k].retired = true;
    }
  }
  finish_step(step, outcomes);
  return step;
}

// A step directory given directly: pinned by its store's COMMIT when it has one, else by its MANIFEST alone.
StepOutcome verify_step_directory(ckpt::PosixFs& fs, const std::string& dir, const Settings& settings,
                                  std::vector<FileOutcome>& outcomes) {
  const ckpt::StepInStore where = ckpt::locate_step_directory(fs, dir);
  if (where.info) {
    auto store = ckpt::tools::open_store_for_reading(fs, where.store);
    if (store.ok()) return verify_committed_step(fs, **store, *where.info, settings, outcomes);
  }
  StepOutcome step;
  step.dir = dir;
  step.label = dir;
  step.state = where.store.empty() ? "" : where.state;
  const std::size_t first = outcomes.size();
  take_report(step, ckpt::verify_step_directory(fs, dir, shard_verifier(fs, settings, outcomes)), first, outcomes);
  finish_step(step, outcomes);
  return step;
}

// A store: its journal, then the selected committed steps.
ckpt::Result<StoreOutcome> verify_store(ckpt::PosixFs& fs, const std::string& path, const ckpt::tools::StepSelection& selection,
                                        const Settings& settings, std::vector<StepOutcome>& steps,
                                        std::vector<FileOutcome>& outcomes) {
  StoreOutcome out;
  out.path = path;
  CKPT_ASSIGN_OR_RETURN(auto store, ckpt::tools::open_store_for_reading(fs, path));
  const ckpt::RecoveryReport& report = store->recovery_report();
  out.journal = report.journal;
  if (report.corrupt()) out.problems.push_back(report.corruption_status());
  if (report.tail_damaged())  // every byte there and not checking out: damage to durable data (spec/JOURNAL.md 6.3)
    out.problems.push_back(ckpt::make_error(ckpt::Code::corrupt, "damaged journal tail at offset " +
                                                                     std::to_string(report.journal.torn_tail->offset) + " (" +
                                                                     std::to_string(report.journal.torn_tail->length) +
                                                                     " bytes, not a torn append: " + report.journal.torn_tail->reason +
                                                                     "); run ckpt-repair, which applies what still checks out"));
  else if (report.journal.torn_tail)
    out.notes.push_back("torn journal tail at offset " + std::to_string(report.journal.torn_tail->offset) + " (" +
                        std::to_string(report.journal.torn_tail->length) + " bytes, left by a crash; the next writer or ckpt-repair truncates it)");
  for (const auto& u : report.unknown_entries)
    out.notes.push_back("unknown entry '" + u + "' in the store: no journal record accounts for it (a symlink, device or FIFO is never followed)");
  for (const auto& t : report.transactions)
    if (t.state == ckpt::TxnState::open)
      out.notes.push_back("transaction " + std::to_string(t.txn) + " (step " + std::to_string(t.step) +
                          ") is open: a save in progress, or left by a crash (not a step)");
  CKPT_ASSIGN_OR_RETURN(auto selected, ckpt::tools::select_steps(*store, selection));
  for (const auto& info : selected) {
    steps.push_back(verify_committed_step(fs, *store, info, settings, outcomes));
    out.steps.push_back(steps.size() - 1);
  }
  out.ok = out.problems.empty();
  for (const auto k : out.steps) out.ok = out.ok && steps[k].ok;
  return out;
}

[[nodiscard]] int step_exit(const StepOutcome& step, const std::vector<FileOutcome>& outcomes) {
  int code = ckpt::cli::kOk;
  if (step.retired) return code;
  for (const auto& p : step.problems) code = std::max(code, problem_exit(p.code));
  for (const auto k : step.files) code = std::max(code, ckpt::tools::outcome_exit(outcomes[k]));
  return code;
}

void print_step(const StepOutcome& step, const std::vector<FileOutcome>& outcomes, bool quiet) {
  if (step.retired) {
    if (!quiet)
      std::printf("%s: retired while being verified (%s in the journal re-read after its files went missing; not damage)\n",
                  ckpt::tools::printable(step.label).c_str(), step.retired_state.c_str());
    return;
  }
  if (step.ok) {
    if (!quiet)
      std::printf("%s: ok (%zu file%s, %llu chunks, %s checked)%s\n", ckpt::tools::printable(step.label).c_str(), step.files.size(),
                  step.files.size() == 1 ? "" : "s", static_cast<unsigned long long>(step.chunks),
                  ckpt::cli::human_bytes(static_cast<double>(step.bytes)).c_str(),
                  step.state.empty() || step.state == "committed" ? "" : (" (note: " + step.state + " in its store, not a step)").c_str());
    return;
  }
  std::printf("%s: DAMAGED\n", ckpt::tools::printable(step.label).c_str());
  // Each problem once: a shard the verifier could not read is one of the step's problems.
  for (const auto& p : step.problems) std::printf("  %s: %s\n", ckpt::code_name(p.code), ckpt::tools::printable(p.message).c_str());
  for (const auto k : step.files)
    for (const auto& p : outcomes[k].report.problems) std::printf("  %s\n", ckpt::tools::problem_line(outcomes[k].path, p).c_str());
  std::fflush(stdout);
}

[[nodiscard]] json step_json(const StepOutcome& step, const std::vector<FileOutcome>& outcomes) {
  json j = step.info ? ckpt::tools::step_info_json(*step.info) : json::object();
  j["path"] = step.dir;
  j["ok"] = step.ok;
  j["status"] = step.retired ? "retired" : step.ok ? "intact" : "damaged";
  if (step.retired) j["retired_state"] = step.retired_state;
  if (!step.state.empty()) j["state_in_store"] = step.state;
  json problems = json::array();
  for (const auto& p : step.problems) problems.push_back(ckpt::tools::problem_json(p));
  j["problems"] = std::move(problems);
  json files = json::array();
  for (const auto k : step.files) files.push_back(outcomes[k].path);
  j["shard_files"] = std::move(files);
  j["chunks_checked"] = step.chunks;
  j["bytes_checked"] = step.bytes;
  return j;
}

// --- Memory roots (spec/TIERS.md 2, 5) -----------------------------------------------------------

void print_memory_root(const ckpt::tiers::MemoryRootVerification& v, bool quiet) {
  namespace tools = ckpt::tools;
  const ckpt::tiers::MemoryRoot& root = v.root;
  if (!quiet || !v.ok()) tools::print_root_header(root);
  tools::print_root_problems(v.problems);
  if (!quiet) {
    for (const auto& s : root.steps) {
      std::string counts;
      for (const auto& sh : s.shards)
        if (!sh.copies.empty()) counts += (counts.empty() ? "" : " ") + std::to_string(sh.shard) + ":" + std::to_string(sh.verified);
      std::printf("  %s: verified copies per shard held here %s%s\n", tools::step_label(s).c_str(), counts.empty() ? "(none)" : counts.c_str(),
                  s.persistent == ckpt::tiers::PersistentState::not_checked
                      ? ""
                      : ("; persistent store: " + std::string(ckpt::tiers::persistent_state_name(s.persistent))).c_str());
    }
    tools::print_notes(v.notes);
    std::printf("%s: %s (%llu copies, %llu chunks, %s checked)\n", tools::printable(root.path).c_str(),
                v.ok() ? "ok" : ("DAMAGED, " + std::to_string(v.problems.size()) + " problem" + (v.problems.size() == 1 ? "" : "s")).c_str(),
                static_cast<unsigned long long>(v.copies_checked), static_cast<unsigned long long>(v.chunks_checked),
                ckpt::cli::human_bytes(static_cast<double>(v.bytes_checked)).c_str());
  }
  std::fflush(stdout);
}

[[nodiscard]] json memory_root_verification_json(const ckpt::tiers::MemoryRootVerification& v) {
  json j = ckpt::tools::memory_root_json(v.root, true);
  j["ok"] = v.ok();
  j["copies_checked"] = v.copies_checked;
  j["chunks_checked"] = v.chunks_checked;
  j["bytes_checked"] = v.bytes_checked;
  return j;
}

[[nodiscard]] ckpt::Status write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ckpt::make_error(ckpt::Code::io, path + ": cannot create the JUnit file");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) return ckpt::make_error(ckpt::Code::io, path + ": cannot write the JUnit file");
  return ckpt::Status();
}

// --- Foreign formats and sidecars (spec/FOREIGN.md, spec/IDENTITY.md 4) ----------------------------

[[nodiscard]] json foreign_report_json(const ckpt::ForeignVerifyReport& r) {
  json problems = json::array();
  for (const auto& p : r.problems) problems.push_back(ckpt::tools::problem_json(p));
  return {{"path", r.path},
          {"format", r.format ? json(ckpt::foreign_format_name(*r.format)) : json(nullptr)},
          {"ok", r.ok()},
          {"data_checked", r.data_checked},
          {"sidecar", r.sidecar.empty() ? json(nullptr) : json(r.sidecar)},
          {"root_digest", r.root ? json(r.root->hex()) : json(nullptr)},
          {"tensor_count", r.checkpoint ? json(r.checkpoint->tensors.size()) : json(nullptr)},
          {"chunks_checked", r.chunks_checked},
          {"bytes_checked", r.bytes_checked},
          {"problems", std::move(problems)}};
}

void print_foreign_report(const ckpt::ForeignVerifyReport& r, bool quiet) {
  const std::string path = ckpt::tools::printable(r.path);
  const std::string format = r.format ? ckpt::foreign_format_name(*r.format) : "unknown format";
  if (r.ok()) {
    if (quiet) return;
    if (r.data_checked)
      std::printf("%s: ok, %s, every byte matches its sidecar (%llu chunks, %s checked), root %s\n", path.c_str(), format.c_str(),
                  static_cast<unsigned long long>(r.chunks_checked), ckpt::cli::human_bytes(static_cast<double>(r.bytes_checked)).c_str(),
                  r.root->hex().c_str());
    else
      std::printf("%s: %s, structure ok; the data carries no digests (not checked): ckpt-verify --write-sidecar %s records them\n",
                  path.c_str(), format.c_str(), path.c_str());
    return;
  }
  std::printf("%s: DAMAGED, %s (%zu problem%s)%s\n", path.c_str(), format.c_str(), r.problems.size(), r.problems.size() == 1 ? "" : "s",
              r.data_checked ? "" : "; without a sidecar only the structure was checked");
  for (const auto& p : r.problems) std::printf("  %s\n", ckpt::tools::problem_line(p.file.empty() ? r.path : p.file, p).c_str());
  std::fflush(stdout);
}

// --write-sidecar: records the digests of each foreign checkpoint beside it; the checkpoint is only read.
[[nodiscard]] int write_sidecars(ckpt::PosixFs& fs, const std::vector<std::string>& paths, std::uint32_t chunk_log2, bool as_json,
                                 bool quiet) {
  int exit_code = ckpt::cli::kOk;
  json written = json::array();
  for (const auto& path : paths) {
    auto fail = [&](const ckpt::Status& s) {
      std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(s.message()).c_str());
      exit_code = std::max(exit_code, ckpt::cli::exit_for(s.code()));
    };
    auto format = ckpt::detect_foreign(fs, path);
    if (!format.ok()) {
      fail(format.status());
      continue;
    }
    if (!*format) {
      fail(ckpt::make_error(ckpt::Code::invalid_argument, path + ": --write-sidecar is for safetensors, Hugging Face, DCP and GGUF "
                                                                 "checkpoints; a ckpt checkpoint records its digests itself"));
      continue;
    }
    auto checkpoint = ckpt::open_foreign(fs, path);
    if (!checkpoint.ok()) {
      fail(checkpoint.status());
      continue;
    }
    std::unique_ptr<ckpt::cli::Progress> bar;
    auto progress = [&](std::uint64_t done, std::uint64_t total) {
      if (quiet || as_json) return;
      if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
      bar->update(done);
    };
    auto sidecar = ckpt::build_sidecar(fs, *checkpoint, chunk_log2, progress);
    bar.reset();
    if (!sidecar.ok()) {
      fail(sidecar.status());
      continue;
    }
    const std::string side = ckpt::sidecar_path(*checkpoint);
    if (ckpt::Status s = ckpt::write_sidecar(fs, *sidecar, side); !s.ok()) {
      fail(s);
      continue;
    }
    std::uint64_t chunks = 0, bytes = 0;
    for (const auto& f : sidecar->files) bytes += f.size;
    for (const auto& f : sidecar->files)
      for (const auto& r : f.regions) chunks += r.chunk_digests.size();
    for (const auto& t : sidecar->content.tensors)
      for (const auto& p : t.pieces) chunks += p.chunk_digests.size();
    written.push_back({{"path", path},
                       {"format", ckpt::foreign_format_name(sidecar->format)},
                       {"sidecar", side},
                       {"root_digest", sidecar->content.root.hex()},
                       {"files", sidecar->files.size()},
                       {"tensors", sidecar->content.tensors.size()},
                       {"chunks", chunks},
                       {"bytes", bytes}});
    if (!as_json)
      std::printf("%s: wrote %s (%zu file%s, %zu tensors, %llu chunks over %s), root %s\n", ckpt::tools::printable(path).c_str(),
                  ckpt::tools::printable(side).c_str(), sidecar->files.size(), sidecar->files.size() == 1 ? "" : "s",
                  sidecar->content.tensors.size(), static_cast<unsigned long long>(chunks),
                  ckpt::cli::human_bytes(static_cast<double>(bytes)).c_str(), sidecar->content.root.hex().c_str());
  }
  if (as_json) ckpt::cli::print_json({{"ok", exit_code == ckpt::cli::kOk}, {"sidecars", std::move(written)}});
  return exit_code;
}

}  // namespace

// --help: what the tool does and its exit status (README "Exit codes").
constexpr const char* kAbout = R"(Checks every byte of ckpt shard files: chunk digests, superblock, index and footer digests,
zero padding, and that nothing follows the footer. Each problem is printed with file, region,
tensor, piece, chunk, byte range, expected and found digest.

A store directory is checked as a whole: its journal, then every committed step (or --step N,
or --latest), each pinned by its COMMIT record and manifest. A step directory is checked by its
manifest and every shard it names.

A memory tier's root (MEMROOT, holding rank-<r>/ directories: own/, held-<s>/ and the tier log
TIERS; spec/TIERS.md 2) or one rank directory: every copy of every shard it holds is checked
like a store's step, every store journal and tier log is read (a torn log tail is the end of the
log, not damage), each copy's content digest is compared with the one its log records, and the
verified copies of each shard are counted. --persistent STORE also verifies the persistent
store's step of each number the root holds and compares its content. --json: "memory_roots".

A store may be verified while its writer saves and retires steps. A step whose files go missing
is checked again against the journal: if it was retired meanwhile (or the journal no longer
names it) it is reported as "retired while being verified" (--json: step "status": "retired",
its vanished files "status": "retired"), which is not damage; a still-committed step with
missing files is DAMAGED. Step "status" is "intact", "damaged" or "retired".

--mmap: a file truncated while it is being hashed is an error, "file changed during verification",
naming the file and offset (exit 2), never a crash.

Foreign checkpoints (spec/FOREIGN.md): a safetensors file, a Hugging Face sharded set (its
*.safetensors.index.json or its directory), a PyTorch DCP directory and a GGUF file are checked as
far as their format allows: header consistency, offsets in bounds, no holes or overlaps, every
file present and complete. Their data carries no digests, so an intact one is reported as
"structure ok; the data carries no digests, not checked" and never as damaged.
--write-sidecar PATH records chunk digests of every byte of PATH in PATH.ckptsum (for a DCP
directory DIR/.metadata.ckptsum, for a set INDEX.ckptsum), written atomically and durably; the
checkpoint itself is only read. From then on ckpt-verify PATH checks every byte against it and
names the damaged tensor, chunk and byte range, as for a .ckpt file.

Pinning (spec/IDENTITY.md 5): --expect DIGEST fails (exit 1) when a checkpoint is intact but its
root digest (ckpt-inspect shows it) is not DIGEST. --expect-file FILE takes pins from a file:
lines "DIGEST  PATH" (sha256sum's layout, ckpt-inspect --pin writes one), or the JSON of
ckpt-inspect --json, which also records every tensor's digest so that the tensors that differ
are named. For a store the pin applies to the latest step, or to --step N. A foreign checkpoint
without a sidecar is read whole to compute its root digest.

Exit status: 0 all files intact (retired steps included) and every pin matched, 1 damage, an
incomplete file, or a checkpoint that is not the pinned one, 2 usage error, unreadable path, a
file that changed during verification, or --gpu without a usable GPU.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::vector<std::string> paths;
    bool as_json = false, use_mmap = false, gpu = false, gpu_fallback = false, quiet = false;
    std::string junit;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::uint64_t step_number = 0;
    bool latest = false;
    app.add_option("PATH", paths, "shard files (*.ckpt), store directories, step directories, or memory roots / rank directories")->required();
    std::string persistent;
    app.add_option("--persistent", persistent, "for a memory root: also verify this persistent store's steps of the same numbers and compare them");
    auto* step_option = app.add_option("--step", step_number, "for a store: verify only this step (default: every committed step)");
    app.add_flag("--latest", latest, "for a store: verify only the latest committed step")->excludes(step_option);
    app.add_flag("--json", as_json, "print one JSON document with every file's report and problems");
    app.add_option("--junit", junit, "also write a JUnit XML file (one testcase per file)");
    app.add_option("--threads", threads, "hashing threads (default: hardware concurrency)")
        ->check(CLI::Range(1u, 4096u));
    app.add_flag("--mmap", use_mmap, "hash from a read-only memory mapping instead of read()");
    app.add_flag("--gpu", gpu, "compute chunk digests on the GPU; exit 2 when there is no usable GPU");
    app.add_flag("--gpu-fallback", gpu_fallback, "like --gpu, but verify on the CPU (with a note) when no GPU is usable");
    app.add_flag("-q,--quiet", quiet, "print nothing for intact files and no progress; problems are still printed");
    std::string expect, expect_file;
    bool write_sidecar = false;
    std::uint64_t sidecar_chunk = std::uint64_t{1} << 20;
    app.add_option("--expect", expect, "fail (exit 1) unless each checkpoint's root digest is DIGEST (ckpt-inspect shows it)");
    app.add_option("--expect-file", expect_file, "pins: lines \"DIGEST  PATH\", or ckpt-inspect --json output (names differing tensors)");
    app.add_flag("--write-sidecar", write_sidecar, "record digests of each foreign checkpoint (safetensors, HF set, DCP, GGUF) beside it");
    app.add_option("--sidecar-chunk-size", sidecar_chunk, "--write-sidecar: bytes per digested chunk, a power of two (default 1 MiB)");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;
    if (write_sidecar) {
      if (!expect.empty() || !expect_file.empty() || !junit.empty() || *step_option || latest || !persistent.empty())
        return ckpt::cli::usage_error(kTool, "--write-sidecar takes only paths (and --json, --quiet, --sidecar-chunk-size)");
      const int log2 = ckpt::cli::power_of_two_log2(sidecar_chunk, ckpt::sidecar::kMinChunkSizeLog2, ckpt::sidecar::kMaxChunkSizeLog2);
      if (log2 < 0) return ckpt::cli::usage_error(kTool, "--sidecar-chunk-size: a power of two from 4 KiB to 1 GiB");
      ckpt::PosixFs sidecar_fs;
      return write_sidecars(sidecar_fs, paths, static_cast<std::uint32_t>(log2), as_json, quiet);
    }
    std::vector<ckpt::tools::Pin> pins;
    if (!expect.empty()) {
      auto root = ckpt::parse_digest(expect);
      if (!root) return ckpt::cli::usage_error(kTool, "--expect: '" + ckpt::tools::printable(expect) + "' is not a 32-digit root digest");
      ckpt::tools::Pin p;
      p.root = *root;
      p.source = "--expect";
      pins.push_back(std::move(p));
    }
    if (!expect_file.empty()) {
      auto read = ckpt::tools::read_pins(expect_file);
      if (!read.ok()) return ckpt::cli::report(kTool, read.status());
      for (auto& p : *read) pins.push_back(std::move(p));
    }

    Settings settings;
    settings.threads = threads;
    settings.use_mmap = use_mmap;
    settings.gpu_fallback = gpu_fallback;
    settings.progress = !as_json && !quiet;
    if (gpu || gpu_fallback) {
      std::string reason;
      if (ckpt::tools::gpu_available(0, reason)) {
        settings.use_gpu = true;
      } else if (gpu_fallback) {
        std::fprintf(stderr, "%s: note: no usable GPU (%s); verifying on the CPU\n", kTool, reason.c_str());
      } else {
        std::fprintf(stderr, "%s: --gpu: no usable GPU: %s (use --gpu-fallback to verify on the CPU)\n", kTool,
                     reason.c_str());
        return static_cast<int>(ckpt::cli::kUsage);
      }
    }

    ckpt::tools::StepSelection selection;
    if (*step_option) selection.step = step_number;
    selection.latest = latest;

    ckpt::PosixFs fs;
    std::vector<FileOutcome> outcomes;
    std::vector<StepOutcome> steps;
    std::vector<StoreOutcome> stores;
    std::vector<FileOutcome> step_failures;  // step-level problems, as JUnit test cases
    int exit_code = ckpt::cli::kOk;
    std::vector<ckpt::ForeignVerifyReport> foreign_reports;
    std::vector<ckpt::tiers::MemoryRootVerification> memory_roots;
    for (const auto& path : paths) {
      // A format ckpt did not write: what the format allows, and every byte when a sidecar exists.
      auto foreign = ckpt::detect_foreign(fs, path);
      if (foreign.ok() && *foreign) {
        if (selection.step || selection.latest) {
          std::fprintf(stderr, "%s: %s: --step and --latest apply to store directories only\n", kTool, ckpt::tools::printable(path).c_str());
          exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
          continue;
        }
        std::unique_ptr<ckpt::cli::Progress> bar;
        auto progress = [&](std::uint64_t done, std::uint64_t total) {
          if (!settings.progress) return;
          if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
          bar->update(done);
        };
        auto report = ckpt::verify_foreign(fs, path, progress);
        bar.reset();
        if (!report.ok()) {
          std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(report.status().message()).c_str());
          exit_code = std::max(exit_code, ckpt::cli::exit_for(report.status().code()));
          continue;
        }
        for (const auto& p : report->problems) exit_code = std::max(exit_code, problem_exit(p.code));
        if (!as_json) print_foreign_report(*report, quiet);
        foreign_reports.push_back(std::move(report).value());
        continue;
      }
      // A directory is a store (every committed step, or --step/--latest) or one step directory.
      // Any other directory is reported as before: a path that is not a shard file.
      auto info = fs.stat(path);
      auto kind = info.ok() && info->is_dir ? ckpt::tools::classify_path(fs, path) : ckpt::Result<ckpt::tools::PathKind>(ckpt::tools::PathKind::file);
      if (kind.ok() && (*kind == ckpt::tools::PathKind::memory_root || *kind == ckpt::tools::PathKind::rank_dir)) {
        if (selection.step || selection.latest) {
          std::fprintf(stderr, "%s: %s: --step and --latest apply to store directories only\n", kTool, ckpt::tools::printable(path).c_str());
          exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
          continue;
        }
        ckpt::tiers::MemoryRootOptions options;
        options.persistent = persistent;
        options.verify_one = shard_verifier(fs, settings, outcomes);  // --threads, --mmap and --gpu apply
        auto verified = ckpt::tiers::verify_memory_root(fs, path, options);
        if (!verified.ok()) {
          std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(verified.status().message()).c_str());
          exit_code = std::max(exit_code, ckpt::cli::exit_for(verified.status().code()));
          continue;
        }
        for (const auto& p : verified->problems) {
          exit_code = std::max(exit_code, problem_exit(p.code));
          // A shard file's own damage is already a JUnit case of that file; the rest (logs, journals, steps) are added.
          bool in_file = false;
          for (const auto& o : outcomes) in_file = in_file || (o.path == p.detail.file && o.has_report && !o.report.ok());
          if (in_file) continue;
          FileOutcome f;
          f.path = p.store;
          f.error = ckpt::make_error(p.code, p.message);
          step_failures.push_back(std::move(f));
        }
        if (!as_json) print_memory_root(*verified, quiet);
        memory_roots.push_back(std::move(verified).value());
        continue;
      }
      if (kind.ok() && *kind != ckpt::tools::PathKind::file && *kind != ckpt::tools::PathKind::other_dir) {
        if (*kind != ckpt::tools::PathKind::store && *kind != ckpt::tools::PathKind::step_dir) {
          const ckpt::Status s = ckpt::tools::not_a_store_error(path, *kind);
          std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(s.message()).c_str());
          exit_code = std::max(exit_code, ckpt::cli::exit_for(s.code()));
          continue;
        }
        const std::size_t first_step = steps.size();
        if (*kind == ckpt::tools::PathKind::store) {
          auto store = verify_store(fs, path, selection, settings, steps, outcomes);
          if (!store.ok()) {
            std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(store.status().message()).c_str());
            exit_code = std::max(exit_code, ckpt::cli::exit_for(store.status().code()));
            continue;
          }
          stores.push_back(std::move(store).value());
          const StoreOutcome& so = stores.back();
          for (const auto& p : so.problems) exit_code = std::max(exit_code, problem_exit(p.code()));
          if (!as_json) {
            const char* journal = !so.problems.empty() ? "journal CORRUPT"
                                  : so.journal && so.journal->torn_tail ? "journal intact up to a torn tail"
                                                                        : "journal intact";
            std::printf("%s: store, %s, %zu step%s selected\n", ckpt::tools::printable(path).c_str(), journal, so.steps.size(),
                        so.steps.size() == 1 ? "" : "s");
            for (const auto& p : so.problems) std::printf("  journal: %s\n", ckpt::tools::printable(p.message()).c_str());
            if (!quiet)
              for (const auto& n : so.notes) std::printf("  note: %s\n", ckpt::tools::printable(n).c_str());
          }
        } else {
          steps.push_back(verify_step_directory(fs, path, settings, outcomes));
        }
        for (std::size_t k = first_step; k < steps.size(); ++k) {
          exit_code = std::max(exit_code, step_exit(steps[k], outcomes));
          if (!as_json) print_step(steps[k], outcomes, quiet);
          for (const auto& p : steps[k].problems) {
            FileOutcome f;
            f.path = steps[k].dir;
            f.error = ckpt::make_error(p.code, p.message);
            step_failures.push_back(std::move(f));
          }
        }
        continue;
      }
      if (selection.step || selection.latest) {
        std::fprintf(stderr, "%s: %s: --step and --latest apply to store directories only\n", kTool,
                     ckpt::tools::printable(path).c_str());
        exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
        continue;
      }
      outcomes.push_back(verify_shard(fs, path, settings));
      const FileOutcome& o = outcomes.back();
      exit_code = std::max(exit_code, ckpt::tools::outcome_exit(o));
      if (as_json) {
        if (!o.has_report) std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(o.error.message()).c_str());
      } else {
        print_outcome(o, quiet);
      }
    }
    if (!persistent.empty() && memory_roots.empty()) {
      std::fprintf(stderr, "%s: --persistent applies to a memory root or rank directory, and none was verified\n", kTool);
      exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
    }
    // Pins: each checkpoint's root digest against the one pinned for it (spec/IDENTITY.md 5).
    json pin_docs = json::array();
    std::vector<FileOutcome> pin_failures;  // as JUnit test cases
    for (const auto& path : pins.empty() ? std::vector<std::string>{} : paths) {
      const ckpt::tools::Pin* pin = ckpt::tools::find_pin(pins, path);
      auto fail = [&](const ckpt::Status& s) {
        FileOutcome f;
        f.path = path;
        f.error = s;
        pin_failures.push_back(f);
        exit_code = std::max(exit_code, ckpt::cli::exit_for(s.code()));
        if (!as_json) std::printf("%s: %s\n", ckpt::tools::printable(path).c_str(), ckpt::tools::printable(s.message()).c_str());
        pin_docs.push_back({{"path", path}, {"ok", false}, {"error", {{"code", ckpt::code_name(s.code())}, {"message", s.message()}}}});
      };
      if (pin == nullptr) {
        fail(ckpt::make_error(ckpt::Code::invalid_argument, "no pin names this path in " + expect_file));
        continue;
      }
      ckpt::ContentOptions options;
      options.step = selection.step;
      options.read_foreign_data = true;
      auto content = ckpt::content_of_path(fs, path, options);
      if (!content.ok()) {
        fail(content.status().with_context("cannot compute the root digest to compare with the pin"));
        continue;
      }
      const ckpt::tools::PinCheck check = ckpt::tools::check_pin(*content, *pin);
      pin_docs.push_back(ckpt::tools::pin_check_json(path, check, *pin));
      if (check.ok) {
        if (!as_json && !quiet) std::printf("%s: matches its pin (%s), root %s\n", ckpt::tools::printable(path).c_str(), pin->source.c_str(), check.found.c_str());
        continue;
      }
      exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kIntegrity));
      std::string summary;
      for (const auto& line : ckpt::tools::pin_check_lines(check)) summary += (summary.empty() ? "" : "; ") + line;
      FileOutcome f;
      f.path = path;
      f.error = ckpt::make_error(ckpt::Code::corrupt, "not the pinned checkpoint: " + summary);
      pin_failures.push_back(f);
      if (!as_json) {
        std::printf("%s: NOT THE PINNED CHECKPOINT (%s)\n", ckpt::tools::printable(path).c_str(), pin->source.c_str());
        for (const auto& line : ckpt::tools::pin_check_lines(check)) std::printf("  %s\n", line.c_str());
      }
    }
    if (as_json) {
      json doc = ckpt::tools::outcomes_json(outcomes);
      if (!foreign_reports.empty()) {
        json foreign_docs = json::array();
        for (const auto& r : foreign_reports) foreign_docs.push_back(foreign_report_json(r));
        doc["foreign"] = std::move(foreign_docs);
      }
      if (!pins.empty()) doc["pins"] = pin_docs;
      if (!memory_roots.empty()) {
        json roots = json::array();
        for (const auto& v : memory_roots) roots.push_back(memory_root_verification_json(v));
        doc["memory_roots"] = std::move(roots);
      }
      if (!stores.empty() || !steps.empty()) {
        // Stores and step directories add their own sections; every shard they checked is also in "files".
        json store_docs = json::array(), step_docs = json::array();
        bool all_ok = doc["ok"].get<bool>();
        for (const auto& so : stores) {
          json st = json::array();
          for (const auto k : so.steps) st.push_back(step_json(steps[k], outcomes));
          json problems = json::array();
          for (const auto& p : so.problems) problems.push_back({{"code", ckpt::code_name(p.code())}, {"message", p.message()}});
          store_docs.push_back({{"path", so.path},
                                {"ok", so.ok},
                                {"journal", so.journal ? ckpt::tools::journal_json(*so.journal) : json(nullptr)},
                                {"problems", std::move(problems)},
                                {"notes", so.notes},
                                {"steps", std::move(st)}});
          all_ok = all_ok && so.ok;
        }
        std::size_t intact_steps = 0, retired_steps = 0;
        for (const auto& st : steps) {
          step_docs.push_back(step_json(st, outcomes));
          all_ok = all_ok && st.ok;
          if (st.retired) ++retired_steps;
          else if (st.ok) ++intact_steps;
        }
        doc["stores"] = std::move(store_docs);
        doc["steps"] = std::move(step_docs);
        doc["summary"]["steps"] = steps.size();
        doc["summary"]["steps_intact"] = intact_steps;
        doc["summary"]["steps_retired"] = retired_steps;
        doc["ok"] = all_ok && exit_code == ckpt::cli::kOk;
      }
      // Damage in a foreign checkpoint or a pin that did not match makes the whole run not ok.
      doc["ok"] = doc["ok"].get<bool>() && exit_code == ckpt::cli::kOk;
      ckpt::cli::print_json(doc);
    } else if (!quiet && !steps.empty()) {
      std::size_t intact = 0, retired = 0;
      for (const auto& st : steps) {
        retired += st.retired ? 1 : 0;
        intact += st.ok && !st.retired ? 1 : 0;
      }
      const std::string retired_text = retired == 0 ? "" : ", " + std::to_string(retired) + " retired while being verified";
      std::printf("%zu step%s: %zu intact, %zu damaged%s (%zu shard files checked)\n", steps.size(), steps.size() == 1 ? "" : "s",
                  intact, steps.size() - intact - retired, retired_text.c_str(), outcomes.size());
    } else if (!quiet && outcomes.size() > 1) {
      std::size_t intact = 0, damaged = 0;
      for (const auto& o : outcomes) {
        if (o.has_report && o.report.ok()) ++intact;
        else if (o.has_report) ++damaged;
      }
      std::printf("%zu files: %zu intact, %zu damaged, %zu unreadable\n", outcomes.size(), intact, damaged,
                  outcomes.size() - intact - damaged);
    }
    if (!junit.empty()) {
      std::vector<FileOutcome> cases = outcomes;
      cases.insert(cases.end(), step_failures.begin(), step_failures.end());
      for (const auto& r : foreign_reports) {
        FileOutcome f;
        f.path = r.path;
        f.has_report = true;
        f.report.path = r.path;
        f.report.problems = r.problems;
        f.report.chunks_checked = r.chunks_checked;
        f.report.bytes_checked = r.bytes_checked;
        cases.push_back(std::move(f));
      }
      cases.insert(cases.end(), pin_failures.begin(), pin_failures.end());
      if (ckpt::Status s = write_text_file(junit, ckpt::tools::junit_xml(cases, kTool)); !s.ok()) {
        std::fprintf(stderr, "%s: %s\n", kTool, s.message().c_str());
        exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
      }
    }
    return exit_code;
  });
}
