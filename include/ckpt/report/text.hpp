// ckpt: every report as text for people (spec/REPORTS.md 7): what ckpt-verify, ckpt-inspect, ckpt-diff
// and ckpt-repair print without --json, and what the Python reports' text() returns. One renderer, so a
// terminal and a notebook read the same words.
#pragma once

#include <string>
#include <vector>

#include "columns.hpp"
#include "diff.hpp"
#include "inspect.hpp"
#include "repair.hpp"
#include "verify.hpp"

namespace ckpt::report {

// --- Verify -----------------------------------------------------------------------------------------

// What was appended to a report since `since`: foreign checkpoints, memory roots, stores, steps, then
// the shard files named directly. `quiet` leaves out what is intact.
[[nodiscard]] std::string verify_text(const VerifyPathsReport& report, const VerifyMark& since, bool quiet = false);
// After every path: the pins, then one summary line (steps, or files when more than one).
[[nodiscard]] std::string verify_conclusion_text(const VerifyPathsReport& report, bool quiet = false);
// The whole report: verify_text from the start, then verify_conclusion_text.
[[nodiscard]] std::string verify_text(const VerifyPathsReport& report, bool quiet = false);
// What a tool says on stderr about the paths appended since `since` (or, with conclusions, about
// conclude_paths's): paths that could not be checked, and shard files named directly that could not be read.
[[nodiscard]] std::vector<std::string> verify_error_messages(const VerifyPathsReport& report, const VerifyMark& since);
// One line per sidecar write_sidecar_for wrote: "PATH: wrote SIDECAR (N files, ...), root R".
[[nodiscard]] std::string sidecar_text(const std::string& path, const json& written);

// --- Inspect, diff, repair --------------------------------------------------------------------------

// Tables of a shard, step, store, foreign checkpoint or memory root, by the inspection's kind.
[[nodiscard]] std::string inspect_text(const Inspection& inspection);
// What ckpt-inspect --pin prints: "ROOT  PATH".
[[nodiscard]] std::string pin_text(const std::string& root, const std::string& path);
// Added, removed and changed tensors (and chunks), metadata, and the verdict line.
[[nodiscard]] std::string diff_text(const DiffReport& report);
// What the repair found, planned, did and verified, and its result.
[[nodiscard]] std::string repair_text(const RepairReport& report);

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/text_inl.hpp"
#endif
