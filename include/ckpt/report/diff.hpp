// ckpt: which tensors two checkpoints add, remove or change, and which chunks of a changed one, from
// their digests (spec/IDENTITY.md 3, spec/REPORTS.md 5). ckpt-diff and the Python package both call
// diff_paths and present its document.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../identity/identity.hpp"
#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "json.hpp"

namespace ckpt::report {

struct DiffOptions {
  std::optional<std::uint64_t> step_a, step_b;  // a store's step (default: its latest)
  std::vector<std::string> tensors;             // globs: compare only the tensors they match, and no metadata
  object::ObjectOpener open_objects;            // an s3:// side: a store on objects (empty: Code::unsupported)
};

struct DiffReport {
  Content a, b;
  ContentDiff diff;                // points into a and b
  bool data_read = false;          // a foreign checkpoint without a sidecar was read and hashed
  std::vector<std::string> notes;  // what was read and hashed, for a terminal
  json doc;                        // what ckpt-diff --json prints ("report": "diff", "subject", "exit_code")
  std::string kind = "checkpoints";  // what was compared (the document's "subject")
  [[nodiscard]] int exit_code() const noexcept { return diff.identical() ? kOk : kIntegrity; }
  DiffReport() = default;
  DiffReport(const DiffReport&) = delete;  // diff points into a and b
  DiffReport& operator=(const DiffReport&) = delete;
  DiffReport(DiffReport&&) = default;      // a vector's move keeps its elements where they are
  DiffReport& operator=(DiffReport&&) = default;
};

// Fails when either side cannot be read (exit 2); a difference is the report's, not an error.
[[nodiscard]] Result<DiffReport> diff_paths(FsRef fs, const std::string& a, const std::string& b, const DiffOptions& options = {});

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/diff_inl.hpp"
#endif
