// ckpt: repairing what a path names (spec/REPORTS.md 6, spec/JOURNAL.md 6.4, 11): a store directory,
// a memory tier's root or rank directory (spec/TIERS.md 2, 5), or a store on objects (spec/OBJECT.md
// 4.5). ckpt-repair parses its arguments, calls repair_path and prints the report.
//
// A store: the recovery of a writable open (under its LOCK; digest-valid records of a damaged tail
// applied when what they name checks out, a transaction whose MANIFEST and shards verify rolled
// forward, one that never reached its MANIFEST aborted and only the files its BEGIN named removed,
// ambiguous ones moved to quarantine/, deleted only with `purge`); a missing or corrupt journal is
// rebuilt under the LOCK from the step directories that verify (store/journal_rebuild.hpp), the old
// one kept renamed; then every committed step is verified chunk by chunk. Files nothing accounts for
// are listed and never deleted, and a committed step is never deleted.
#pragma once

#include <functional>
#include <string>

#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "exit.hpp"
#include "json.hpp"

namespace ckpt::report {

struct RepairOptions {
  bool dry_run = false;  // say what would be done and change nothing (takes no lock)
  bool purge = false;    // a store: after repairing, delete quarantine/ (under the store's lock)
  // Opens the client of an s3:// path (a store on objects); empty: such a path is Code::unsupported.
  object::ObjectOpener open_objects;
  // Each piece of the report's text as soon as it is decided, so a terminal follows a long repair
  // (the plan is shown before it is carried out); the whole text is also RepairReport::text.
  std::function<void(const std::string& text)> on_text;
};

struct RepairReport {
  std::string kind;   // what was repaired: "store", "memory root" or "object store"
  int exit_code = kOk;  // 0 consistent afterwards, 1 damage remains (or, dry run, repairs needed), 2 a failure
  json doc;           // what ckpt-repair --json prints ("report": "repair", "subject": kind, "exit_code")
  std::string text;   // what ckpt-repair prints (repair_text, report/text.hpp)
  Status error;       // what stopped a store's repair part way (doc "error"); the tools also say it on stderr
};

// Fails, with nothing repaired, when the path is not something to repair (a file, a step directory, a
// directory that is no store), the options are misused (purge with dry_run, or on a memory root), or
// the path cannot be opened. Damage, and a failure part way through a store's repair, are the report's.
[[nodiscard]] Result<RepairReport> repair_path(FsRef fs, const std::string& path, const RepairOptions& options = {});

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/repair_inl.hpp"
#endif
