// ckpt-inspect: prints what a shard file holds (format, tensors, pieces, metadata, optionally every
// chunk) from its superblock, footer and index. Data bytes are not read; ckpt-verify checks them.
// A store directory or s3:// store lists its steps (or shows one: --step N, --latest); a step directory shows that step.
// A memory tier's root (or one rank directory) shows each step: where its shards are held, how many
// copies match the recorded content, and what the tier logs recorded (ckpt/tiers/memory_root.hpp).
// The library describes (ckpt/report/inspect.hpp) and writes the tables (ckpt/report/text.hpp); this
// tool parses arguments and prints.
#include <cstdio>
#include <string>

#include <ckpt/report/inspect.hpp>
#include <ckpt/report/text.hpp>

#include "cli.hpp"

namespace {
constexpr const char* kTool = "ckpt-inspect";
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
    if (pin) {
      // The one line sha256sum would print, with the root digest.
      if (inspection->kind == "memory_root")
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": a memory root or rank directory takes --json and --persistent only"));
      auto root = ckpt::report::root_digest(*inspection);
      if (!root.ok()) return ckpt::cli::report(kTool, root.status());
      std::fputs(ckpt::report::pin_text(*root, path).c_str(), stdout);
      return inspection->exit_code;
    }
    if (as_json) ckpt::cli::print_json(inspection->doc);
    else std::fputs(ckpt::report::inspect_text(*inspection).c_str(), stdout);
    return inspection->exit_code;
  });
}
