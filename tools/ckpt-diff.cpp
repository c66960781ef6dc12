// ckpt-diff: which tensors two checkpoints add, remove or change (dtype, shape, bytes) and, for a
// changed one, which chunks, from their digests alone (spec/IDENTITY.md 3). Either side may be a .ckpt
// file, a step directory, a store's step, or a foreign checkpoint (with a sidecar, or read and hashed).
// The library compares and writes the text (ckpt/report/diff.hpp, text.hpp); this tool parses and prints.
// Exit status: 0 identical, 1 they differ, 2 usage error or unreadable path (diff(1)'s convention).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/report/diff.hpp>
#include <ckpt/report/text.hpp>

#include "cli.hpp"

namespace {
constexpr const char* kTool = "ckpt-diff";
}  // namespace

constexpr const char* kAbout = R"(Compares two checkpoints by their digests: which tensors were added, removed or changed
(dtype, shape, bytes) and, for a changed tensor split the same way on both sides, exactly which
chunks differ. Nothing but indexes and manifests is read when both sides record digests: a
.ckpt file, a step directory, a store (its latest step, or --step-a/--step-b N; also
s3://bucket/prefix), or a foreign
checkpoint (safetensors, Hugging Face set, DCP, GGUF) with a sidecar (ckpt-verify
--write-sidecar). A foreign checkpoint without one is read and hashed (said on stderr).

--tensors GLOB (repeatable) compares only the tensors whose names match, '*' any run of
characters, '?' one: "did fine-tuning touch the frozen layers?" is
  ckpt-diff base.ckpt tuned.ckpt --tensors 'model.embed*' --tensors 'model.layers.0.*'

Exit status: 0 identical, 1 they differ, 2 usage error or unreadable path.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string a_path, b_path;
    bool as_json = false;
    std::optional<std::uint64_t> step_a, step_b;
    std::vector<std::string> globs;
    app.add_option("A", a_path, "the first checkpoint")->required();
    app.add_option("B", b_path, "the second checkpoint")->required();
    app.add_flag("--json", as_json, "print one JSON document");
    app.add_option("--step-a", step_a, "A is a store: compare this step (default: its latest)");
    app.add_option("--step-b", step_b, "B is a store: compare this step (default: its latest)");
    app.add_option("--tensors", globs, "compare only tensors whose names match this glob (repeatable)");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::PosixFs fs;
    ckpt::report::DiffOptions options;
    options.step_a = step_a;
    options.step_b = step_b;
    options.tensors = globs;
    options.open_objects = ckpt::cli::object_opener();
    auto d = ckpt::report::diff_paths(fs, a_path, b_path, options);
    if (!d.ok()) return ckpt::cli::report(kTool, d.status());
    for (const auto& note : d->notes) std::fprintf(stderr, "%s: note: %s\n", kTool, ckpt::tools::printable(note).c_str());
    if (as_json) ckpt::cli::print_json(d->doc);
    else std::fputs(ckpt::report::diff_text(*d).c_str(), stdout);
    return d->exit_code();
  });
}
