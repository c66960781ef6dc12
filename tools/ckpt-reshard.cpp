// ckpt-reshard: rewrites a checkpoint (a standalone .ckpt, a step directory, or a store meaning its
// latest step) as a new committed step of M shard files in a store (spec/SHARDING.md 6.1).
// Exit status: 0 written, 1 the source is damaged or incomplete, 2 anything else.
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

constexpr const char* kTool = "ckpt-reshard";


[[nodiscard]] int usage_error(const std::string& message) { return ckpt::cli::usage_error(kTool, message); }

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Rewrites a checkpoint as a new committed step of M shard files in a store, with the same step
number. SRC is a standalone .ckpt file, a step directory (STORE/step-<step>-<txn>), or a store
(its latest step). DST is a store directory, created when missing. Either may be a store on
objects, s3://bucket/prefix (spec/OBJECT.md 7): there the step commits by its commit object.
Each tensor is split evenly along dimension 0 (uneven sizes when M does not divide it; scalars
whole on rank 0) unless a --split rule matches its name first. M threads write the M shards through the store's
multi-rank transaction, so the step commits whole or not at all; memory stays bounded (block
reads). Every chunk read is verified. The training state and metadata are carried over; a source
without training state writes a step without one (numbered 0, or --step N, which gives it a state of
step N), so exporting it adds no ckpt.step.

Exit status: 0 written, 1 the source is damaged or incomplete, 2 bad arguments or an I/O error.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string source_path, output;
    std::uint32_t world = 0;
    std::vector<std::string> split_texts;
    std::uint64_t step = 0;
    ckpt::cli::LayoutFlags layout;
    unsigned parallel = 0;
    std::string on_conflict = "error";
    bool as_json = false;
    app.add_option("SRC", source_path, "a .ckpt file, a step directory, or a store (its latest step)")->required();
    app.add_option("-o,--output", output, "destination store directory or s3://bucket/prefix (created when missing)")->required();
    app.add_option("--world-size", world, "number of shard files (ranks) of the new step, 1 to 1048576")->required();
    app.add_option("--split", split_texts,
                   "PATTERN=DIM or PATTERN=replicate: tensors whose name matches the glob PATTERN ('*', '?') are split "
                   "along DIM, or written whole by rank 0; the first matching rule wins (repeatable)");
    auto* step_option = app.add_option("--step", step, "step number of the new step and of its training state (default: the source's; a source without training state: 0, and no state)");
    app.add_option("--on-conflict", on_conflict, "shard metadata keys with different values in the source: error, first or last (default error)");
    app.add_option("--parallel", parallel, "ranks writing at once (default: min(M, CPU threads)); memory ~ parallel x (block + 1 MiB)");
    ckpt::cli::add_layout_options(app, layout, "new shards: ");
    app.add_flag("--json", as_json, "print a JSON summary (step, txn, shards, tensors, bytes, seconds) and no progress");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::ReshardOptions options;
    if (world == 0 || world > ckpt::journal::kMaxWorldSize) return usage_error("--world-size " + std::to_string(world) + ": expected 1 to 1048576");
    options.world_size = world;
    for (const auto& text : split_texts) {
      auto rule = ckpt::parse_split_rule(text);
      if (!rule.ok()) return usage_error("--split " + rule.status().message());
      options.rules.push_back(*rule);
    }
    auto policy = ckpt::parse_conflict_policy(on_conflict);
    if (!policy.ok()) return usage_error("--on-conflict: " + policy.status().message());
    options.on_conflict = *policy;
    if (*step_option) options.step = step;
    options.parallelism = parallel;
    if (auto bad = ckpt::cli::apply_layout(layout, options.store.chunk_size_log2, options.store.alignment_log2, options.block_size);
        !bad.empty())
      return usage_error(bad);
    // Each writing rank keeps one write buffer: smaller ones for wide worlds keep memory bounded.
    options.store.buffer_size = world > 16 ? std::size_t{256} << 10 : std::size_t{1} << 20;

    ckpt::PosixFs fs;
    auto source = ckpt::object::open_checkpoint(fs, source_path, {}, ckpt::cli::object_opener());
    if (!source.ok()) return ckpt::cli::report(kTool, source.status());
    auto [result, seconds] = ckpt::cli::timed_with_progress(source_path, as_json, options.progress,
                                                            [&] { return ckpt::object::reshard_to_path(fs, *source, output, options, ckpt::cli::object_opener()); });
    if (!result.ok()) return ckpt::cli::report(kTool, result.status());
    if (as_json) {
      nlohmann::json j;
      j["source"] = source_path;
      j["source_kind"] = source->kind() == ckpt::Checkpoint::Kind::file ? "file" : "step";
      j["source_description"] = source->description();
      j["source_world_size"] = source->world_size();
      j["output"] = output;
      j["step"] = result->step.step;
      j["txn"] = result->step.txn;
      j["directory"] = result->step.dir;
      j["world_size"] = result->world_size;
      j["shards"] = nlohmann::json::array();
      for (const auto& f : result->step.files) j["shards"].push_back(f.name);
      j["tensors"] = result->tensors;
      j["bytes"] = result->bytes;
      j["seconds"] = seconds;
      ckpt::cli::print_json(j);
    } else if (::isatty(1) == 1) {
      std::printf("%s: step %llu (txn %llu): %u shards, %llu tensors, %s in %.2f s\n", output.c_str(),
                  static_cast<unsigned long long>(result->step.step), static_cast<unsigned long long>(result->step.txn),
                  result->world_size, static_cast<unsigned long long>(result->tensors),
                  ckpt::cli::human_bytes(static_cast<double>(result->bytes)).c_str(), seconds);
    }
    return static_cast<int>(ckpt::cli::kOk);
  });
}
