// ckpt-merge: consolidates the shards of a step into one standalone .ckpt, and combines several
// checkpoints into one (e.g. the weights of one and the optimizer state of another) (spec/SHARDING.md 6.2).
// Exit status: 0 written, 1 a source is damaged or incomplete, 2 anything else (conflicts included).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ckpt/store/object_checkpoint.hpp>
#include <ckpt/store/sharded.hpp>

#include "cli.hpp"

namespace {

constexpr const char* kTool = "ckpt-merge";


[[nodiscard]] int usage_error(const std::string& message) { return ckpt::cli::usage_error(kTool, message); }

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Writes the tensors of one or more checkpoints into one standalone .ckpt file, each tensor whole.
Each SRC is a .ckpt file, a step directory (STORE/step-<step>-<txn>), or a store (its latest
step; also s3://bucket/prefix): merging one step consolidates all of its shards. With several sources, a tensor name or
metadata key found in more than one is a conflict: --on-conflict error (the default) refuses,
first or last picks. --take N=PATTERN limits source N (1-based) to matching tensors; the
patterns @optimizer and @model select the tensors its training state lists as optimizer state,
and the others. The training state (key ckpt.training_state) comes along, its optimizer list
holding what was taken. Reads stream in blocks and verify every chunk; the output is written
under a temporary name, fsynced and renamed, so it is complete or absent.

Example: ckpt-merge run-a/ run-b/ -o out.ckpt --take 1=@model --take 2=@optimizer

Exit status: 0 written, 1 a source is damaged or incomplete, 2 bad arguments, a conflict, or an I/O error.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::vector<std::string> inputs, takes;
    std::string output, on_conflict = "error";
    ckpt::cli::LayoutFlags layout;
    bool as_json = false, force = false;
    app.add_option("SRC", inputs, "checkpoints to merge, in order")->required();
    app.add_option("-o,--output", output, "the .ckpt file to write")->required();
    app.add_option("--on-conflict", on_conflict, "a tensor name, metadata key or training state in several sources: error, first or last");
    app.add_option("--take", takes, "N=PATTERN: source N contributes only tensors matching the glob PATTERN, @optimizer or @model (repeatable)");
    ckpt::cli::add_layout_options(app, layout);
    app.add_flag("--force", force, "replace OUT if it exists");
    app.add_flag("--json", as_json, "print a JSON summary (tensors, bytes, resolved conflicts, seconds) and no progress");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::MergeOptions options;
    auto policy = ckpt::parse_conflict_policy(on_conflict);
    if (!policy.ok()) return usage_error("--on-conflict: " + policy.status().message());
    options.on_conflict = *policy;
    options.overwrite = force;
    if (auto bad = ckpt::cli::apply_layout(layout, options.chunk_size_log2, options.alignment_log2, options.block_size); !bad.empty())
      return usage_error(bad);
    std::vector<ckpt::SourceSelection> selections(inputs.size());
    for (const auto& take : takes) {
      const auto eq = take.find('=');
      std::size_t n = 0;
      bool number = eq != std::string::npos && eq > 0 && eq < 8;
      for (std::size_t i = 0; number && i < eq; ++i) {
        number = take[i] >= '0' && take[i] <= '9';
        n = n * 10 + static_cast<std::size_t>(take[i] - '0');
      }
      if (!number || eq + 1 == take.size() || n == 0 || n > inputs.size())
        return usage_error("--take '" + take + "': expected N=PATTERN with N from 1 to " + std::to_string(inputs.size()));
      selections[n - 1].patterns.push_back(take.substr(eq + 1));
    }

    // The output is one file, written under a temporary name and renamed: a store on objects has no rename.
    if (ckpt::object::is_object_url(output))
      return usage_error("--output " + output + ": ckpt-merge writes one .ckpt file; an s3:// store is a source here (to write a "
                         "step into one, ckpt-reshard SRC -o s3://bucket/prefix)");
    ckpt::PosixFs fs;
    std::vector<ckpt::Checkpoint> sources;
    for (const auto& in : inputs) {
      auto source = ckpt::object::open_checkpoint(fs, in, {}, ckpt::cli::object_opener());
      if (!source.ok()) return ckpt::cli::report(kTool, source.status());
      sources.push_back(std::move(source).value());
    }
    std::vector<ckpt::Checkpoint*> pointers;
    for (auto& s : sources) pointers.push_back(&s);
    auto [result, seconds] = ckpt::cli::timed_with_progress(output, as_json, options.progress,
                                                            [&] { return ckpt::merge_to_file(fs, pointers, selections, output, options); });
    if (!result.ok()) return ckpt::cli::report(kTool, result.status());
    for (const auto& line : result->resolved)
      if (!as_json) std::fprintf(stderr, "%s: resolved: %s\n", kTool, line.c_str());
    if (as_json) {
      nlohmann::json j;
      j["output"] = result->output;
      j["sources"] = nlohmann::json::array();
      for (const auto& s : sources) j["sources"].push_back({{"path", s.path()}, {"description", s.description()}});
      j["tensors"] = result->tensors;
      j["bytes"] = result->bytes;
      j["output_size"] = result->file_size;
      j["resolved"] = result->resolved;
      j["seconds"] = seconds;
      ckpt::cli::print_json(j);
    } else if (::isatty(1) == 1) {
      std::printf("%s: %llu tensors, %s in %.2f s\n", output.c_str(), static_cast<unsigned long long>(result->tensors),
                  ckpt::cli::human_bytes(static_cast<double>(result->bytes)).c_str(), seconds);
    }
    return static_cast<int>(ckpt::cli::kOk);
  });
}
