// ckpt-repair: explains what is wrong with a checkpoint store and fixes what can be fixed without
// losing a committed step (spec/JOURNAL.md 6.4, 11): a store directory, a memory tier's root or rank
// directory, or a store on objects. The library decides and does the repair (ckpt/report/repair.hpp:
// locking, recovery, the journal rebuild, the quarantine purge, verifying every committed step); this
// tool parses arguments, calls repair_path and prints its report (text as it goes, or --json).
// Exit status: 0 the store is consistent afterwards, 1 damage remains that it could not repair,
// 2 usage or I/O error.
#include <cstdio>
#include <string>

#include <ckpt/report/repair.hpp>
#include <ckpt/report/text.hpp>

#include "cli.hpp"

namespace {
constexpr const char* kTool = "ckpt-repair";
}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Repairs a ckpt checkpoint store. Prints what it found and what it will do, then does it:
truncates a torn journal tail, rolls back transactions a crash left uncommitted (removing
only the files they named), rebuilds a missing or corrupt journal from the step directories
whose manifest and shards verify (the old journal is kept renamed), verifies every committed
step and names damage down to tensor and chunk. It never deletes a committed step, and lists
but never deletes files it cannot account for. Files whose fate recovery cannot prove are moved
to STORE/quarantine/ and kept until --purge.

A memory tier's root (MEMROOT, holding rank-<r>/ directories: own/, held-<s>/ and the tier log
TIERS; spec/TIERS.md 2) or one rank directory: each store in it is recovered as above, under its
lock (a store a live rank holds is reported, not touched), a tier log's torn tail is cut (under
the rank's own/LOCK), and every copy is verified afterwards. A store whose journal is corrupt or
missing, and damage inside a tier log, are reported and left as they are: run ckpt-repair on
that store to rebuild its journal. --purge applies to a single store.

Exit status: 0 the store is consistent afterwards (with --dry-run: already consistent),
1 damage remains that it could not repair, or quarantine/ is not empty (with --dry-run: repairs
are needed),
2 usage or I/O error.

A store on objects, s3://bucket/prefix (spec/OBJECT.md 4.5): the objects and unfinished multipart
uploads of transactions proven dead (an abort or retire object names them, or their step committed
another transaction) are deleted (--dry-run: listed); a transaction with neither commit nor abort
is listed as kept (in progress, or in doubt) and never deleted; then every committed step is
verified. Exit 1 with --dry-run when something would be removed, or when damage remains.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string path;
    bool dry_run = false, as_json = false, purge = false;
    app.add_option("STORE", path, "store directory (holds JOURNAL and step-<step>-<txn>/ directories), s3://bucket/prefix, or a "
                                  "memory root or rank directory")->required();
    app.add_flag("--dry-run", dry_run, "report what would be done and change nothing (takes no lock)");
    app.add_flag("--json", as_json, "print one JSON document instead of text");
    app.add_flag("--purge", purge, "after repairing, delete everything in STORE/quarantine/ (files recovery could not prove "
                                   "committed or uncommitted); without it they are kept and the exit status is 1");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;
    if (purge && ckpt::object::is_object_url(path))
      return ckpt::cli::usage_error(kTool, "--purge applies to a store directory's quarantine/; a store on objects has none");

    ckpt::report::RepairOptions options;
    options.dry_run = dry_run;
    options.purge = purge;
    options.open_objects = ckpt::cli::object_opener();
    if (!as_json)  // the text as the repair decides it: the plan is on the terminal before it is carried out
      options.on_text = [](const std::string& text) {
        std::fputs(text.c_str(), stdout);
        std::fflush(stdout);
      };
    ckpt::PosixFs fs;
    auto repaired = ckpt::report::repair_path(fs, path, options);
    if (!repaired.ok()) return ckpt::cli::report(kTool, repaired.status());
    if (!repaired->error.ok()) std::fprintf(stderr, "%s: %s\n", kTool, ckpt::report::printable(repaired->error.message()).c_str());
    if (as_json) ckpt::cli::print_json(repaired->doc);
    return repaired->exit_code;
  });
}
