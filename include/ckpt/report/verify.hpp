// ckpt: the verdict on whatever a path names (spec/REPORTS.md 3): a shard file, a step directory, a
// store (its journal, then every committed step or the selected ones), a memory tier's root or rank
// directory, a foreign checkpoint with or without its sidecar, and pins. ckpt-verify and the Python
// package both call verify_paths and present its report; exit_code and verify_json are the one place
// a report becomes an exit status and a JSON document.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "../identity/sidecar.hpp"
#include "../store/step_reader.hpp"
#include "../tiers/memory_root.hpp"
#include "exit.hpp"
#include "json.hpp"
#include "pins.hpp"
#include "steps.hpp"


namespace ckpt::report {

// Whether a path names a store on object storage ("s3://bucket/prefix", spec/OBJECT.md).
using object::is_object_url;

// One step checked: its library report, each shard's outcome (indexes into VerifyPathsReport::files),
// and whether a live writer retired it while it was read (spec/JOURNAL.md 10: not damage).
struct StepOutcome {
  std::string label;  // "step 300 (txn 3, STORE/step-300-3)" or the directory
  std::string dir;    // full path
  std::optional<StepInfo> info;
  std::string state;  // for a bare step directory: its state in the enclosing store, if any
  std::vector<Problem> problems;  // step-level: manifest, pins, missing files, unreadable shards
  std::vector<std::size_t> files;  // indexes into VerifyPathsReport::files
  std::uint64_t chunks = 0, bytes = 0;
  bool retired = false;         // retired (or dropped from the journal) while being verified
  std::string retired_state;    // what the re-read journal says: "retired" or "not in the journal"
  bool ok = true;
};

// A store: its journal's verdict, and the steps checked (indexes into VerifyPathsReport::steps).
struct StoreOutcome {
  std::string path;
  std::optional<JournalScan> journal;
  std::vector<Problem> problems;   // journal corruption, a damaged tail (spec/JOURNAL.md 6.3), log objects that do not decode
  std::vector<std::string> notes;  // torn tail, open transactions: normal after a crash, not damage
  std::vector<std::size_t> steps;
  bool ok = true;
};

// One checkpoint compared with its pin (spec/IDENTITY.md 5).
struct PinOutcome {
  std::string path;
  std::string source;  // where the pin was read
  PinCheck check;      // set when the root digest could be computed
  Status error;        // no pin names the path, or the content could not be read
  [[nodiscard]] bool ok() const noexcept { return error.ok() && check.ok; }
};

// A path that could not be checked at all (not found, a directory that is no checkpoint, misuse).
struct PathError {
  std::string path;
  Status status;
};

struct VerifyPathsReport;

// Where a report stood before a path was verified: the sizes of its lists. verify_text (text.hpp) and
// verify_error_messages render what was appended since.
struct VerifyMark {
  std::size_t errors = 0, foreign = 0, memory_roots = 0, stores = 0, steps = 0, shard_files = 0;
};

struct VerifyPathsOptions {
  StepSelection selection;    // for stores: every committed step, one (step) or the latest
  std::string persistent;     // for a memory root: also verify this persistent store's steps
  std::vector<Pin> pins;      // --expect / --expect-file: each checkpoint's root digest must match
  std::string pin_file;       // named when no pin names a path
  VerifyOptions verify;       // threads and mmap of the default shard check
  // How one shard file is checked (a GPU back end, a progress bar); empty: check_shard on the CPU.
  std::function<FileOutcome(const std::string& path)> check_shard;
  // Progress of a foreign checkpoint's data against its sidecar.
  std::function<void(const std::string& path, std::uint64_t done, std::uint64_t total)> foreign_progress;
  // Opens the object-store client an s3:// path names (object/s3_client.hpp's open_s3_url, set by the
  // front ends built with it); empty: such a path is an error (Code::unsupported).
  object::ObjectOpener open_objects;
  // Called by verify_paths after each path, with what was appended since `since`: a terminal shows each
  // path's verdict as soon as it is known.
  std::function<void(const VerifyPathsReport& so_far, const VerifyMark& since)> on_path;
};

struct VerifyPathsReport {
  std::vector<FileOutcome> files;  // every shard file checked, standalone or as part of a step or memory root
  std::vector<std::size_t> shard_files;  // indexes into files of those named directly by a path
  std::vector<StepOutcome> steps;
  std::vector<StoreOutcome> stores;
  std::vector<ForeignVerifyReport> foreign;
  std::vector<tiers::MemoryRootVerification> memory_roots;
  std::vector<PinOutcome> pins;
  std::vector<PathError> errors;
  bool pins_checked = false;  // pins were given (the JSON then carries "pins")
  // Set by conclude_paths (verify_paths): verify_kind and exit_code below, the document's "subject" and "exit_code".
  std::string kind;
  int exit_code = kOk;
};

[[nodiscard]] inline VerifyMark verify_mark(const VerifyPathsReport& r) noexcept {
  return {r.errors.size(), r.foreign.size(), r.memory_roots.size(), r.stores.size(), r.steps.size(), r.shard_files.size()};
}

// One shard file checked by verify_one, as an outcome: its report, or the error that stopped it
// (named with the path); engine is "cpu" or "gpu".
[[nodiscard]] FileOutcome check_shard(FsRef fs, const std::string& path, const FileVerifier& verify_one, const char* engine = "cpu");

// A store, already open: its log (damage), then every selected step, each chunk
// read by ranged GETs (spec/OBJECT.md 4). Fails only when steps cannot be selected (a missing --step).
[[nodiscard]] Status verify_open_store(Store& store, const VerifyPathsOptions& options, VerifyPathsReport& into);

// Verifies what `path` names (a file, directory or s3:// URL) and appends its outcomes to `into`.
void verify_path(FsRef fs, const std::string& path, const VerifyPathsOptions& options, VerifyPathsReport& into);
// After verify_path of every path: a --persistent that applied to no memory root is an error, and each
// path's root digest is compared with its pin (options.pins), appending to into.pins.
void conclude_paths(FsRef fs, const std::vector<std::string>& paths, const VerifyPathsOptions& options, VerifyPathsReport& into);
// verify_path for every path, then conclude_paths.
[[nodiscard]] VerifyPathsReport verify_paths(FsRef fs, const std::vector<std::string>& paths, const VerifyPathsOptions& options = {});

// 0 intact (retired steps included) and every pin matched, 1 damage or a checkpoint that is not the
// pinned one, 2 a path that could not be checked or a file that changed during verification.
[[nodiscard]] int exit_code(const StepOutcome& step, const std::vector<FileOutcome>& files);
[[nodiscard]] int exit_code(const VerifyPathsReport& report);
// The counts of a report, counted once: the document's "summary" and the text's summary line.
struct VerifySummary {
  std::size_t files = 0, intact = 0, damaged = 0, errors = 0, retired = 0, problems = 0;  // shard files
  std::size_t steps = 0, steps_intact = 0, steps_retired = 0;
};
[[nodiscard]] VerifySummary verify_summary(const VerifyPathsReport& report);

// What the paths named, the way the Python package has always said it: "store" (any store), else "step
// directory", "foreign", "memory root", else "file".
[[nodiscard]] const char* verify_kind(const VerifyPathsReport& report) noexcept;
// The document ckpt-verify --json prints and ckpt.verify returns ("report": "verify", "subject", "exit_code").
[[nodiscard]] json verify_json(const VerifyPathsReport& report);
// ckpt-verify --junit: one testcase per shard file, then one per path not checked, step-level problem,
// memory-root problem not already a shard file's, foreign checkpoint, and pin that failed.
[[nodiscard]] std::string verify_junit(const VerifyPathsReport& report, const std::string& suite);

// --write-sidecar: records the digests of the foreign checkpoint at path beside it (the checkpoint is
// only read) and describes what was written: path, format, sidecar, root_digest, files, tensors,
// chunks, bytes.
[[nodiscard]] Result<json> write_sidecar_for(FsRef fs, const std::string& path, std::uint32_t chunk_size_log2,
                                             const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/verify_inl.hpp"
#endif
