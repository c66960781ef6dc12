// ckpt-convert: converts a safetensors file or a Hugging Face sharded set to a ckpt shard file, and
// exports any checkpoint (a .ckpt file, a step directory, a store's step) to safetensors, one file or a
// sharded set, streaming with bounded memory. The direction follows the names: IN.safetensors or
// IN.safetensors.index.json (or a directory holding one) -> OUT.ckpt, or IN (a .ckpt or a directory)
// -> OUT.safetensors or OUT.safetensors.index.json.
// Exit status: 0 converted, 1 a ckpt input is damaged or incomplete, 2 anything else (bad arguments,
// malformed safetensors input, I/O error).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <ckpt/store/object_checkpoint.hpp>
#include <ckpt/interop/safetensors.hpp>

#include "cli.hpp"

namespace {

constexpr const char* kTool = "ckpt-convert";

enum class Direction { to_ckpt, to_safetensors, unknown };

[[nodiscard]] bool has_suffix(const std::string& path, const std::string& suffix) {
  if (path.size() <= suffix.size()) return false;
  std::string tail = path.substr(path.size() - suffix.size());
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return tail == suffix;
}

[[nodiscard]] bool is_dir(ckpt::FsRef fs, const std::string& path) {
  auto info = fs.stat(path);
  return info.ok() && info->is_dir;
}

// A directory input becomes a .ckpt when it holds a sharded set's index; otherwise (a step directory
// or a store) it can only be exported: Checkpoint::open tells which.
[[nodiscard]] Direction direction_of(ckpt::FsRef fs, const std::string& in, const std::string& out) {
  if (has_suffix(out, ".ckpt")) {
    if (has_suffix(in, ".safetensors") || ckpt::is_safetensors_index(in)) return Direction::to_ckpt;
    return is_dir(fs, in) && ckpt::find_safetensors_index(fs, in).ok() ? Direction::to_ckpt : Direction::unknown;
  }
  if (!has_suffix(out, ".safetensors") && !ckpt::is_safetensors_index(out)) return Direction::unknown;
  return has_suffix(in, ".ckpt") || is_dir(fs, in) || ckpt::object::is_object_url(in) ? Direction::to_safetensors : Direction::unknown;
}


[[nodiscard]] int usage_error(const std::string& message) { return ckpt::cli::usage_error(kTool, message); }

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Converts safetensors to a ckpt shard file, or a checkpoint to safetensors, in one streaming pass
with bounded memory. The direction follows the names:
  IN.safetensors OUT.ckpt                 one safetensors file
  IN.safetensors.index.json OUT.ckpt      a Hugging Face sharded set (or a directory holding its
                                          index): every file the weight_map names, checked against it
  IN OUT.safetensors                      IN: a standalone .ckpt file (every tensor whole in it), a
                                          step directory (STORE/step-<step>-<txn>) or a store (its
                                          latest committed step, or --step N), also a store
                                          on objects: s3://bucket/prefix (spec/OBJECT.md 7)
  IN OUTDIR/PREFIX.safetensors.index.json the same IN as a sharded set: PREFIX-00001-of-0000N.safetensors
                                          of at most --max-shard-size tensor bytes each, then the index
Each tensor is gathered whole from every shard of the step; every chunk digest is verified as it is
read. Names, dtypes, shapes, bytes and __metadata__ survive a round trip exactly. Each output file
is written under a temporary name, fsynced and renamed, so it is complete or absent; a set's index
is written last, so no index names a missing file. A set's files are read only from the index's
directory: a weight_map file name with '/' (absolute, or "../x") is refused.
safetensors metadata is string to string: other metadata types are refused unless
--stringify-metadata converts them to text (with a warning each). A training state (a step's, or a
merged file's) exports its step number as __metadata__ key ckpt.step; the rest of it (RNG, data
position, optimizer list, values), if any, goes to ckpt.training_state in hex only with
--stringify-metadata, and is otherwise left out with a warning.

Exit status: 0 converted, 1 the ckpt input (the file, or a shard of the step) is damaged or
incomplete (a digest mismatch, a torn file), 2 bad arguments, malformed safetensors input, a step
the store does not hold, an unreadable input or an I/O error.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string in, out;
    ckpt::cli::LayoutFlags layout;
    bool stringify = false, as_json = false, force = false, use_mmap = false;
    std::uint64_t step = 0;
    std::string max_shard_size;
    app.add_option("IN", in, "input: a .safetensors file, a .safetensors.index.json (or its directory), or a .ckpt file, step directory or store")->required();
    app.add_option("OUT", out, "output: a .ckpt, a .safetensors file, or OUTDIR/PREFIX.safetensors.index.json (a sharded set)")->required();
    ckpt::cli::add_layout_options(app, layout, "ckpt output: ");
    app.add_flag("--stringify-metadata", stringify, "safetensors output: write int64/float64/bool/bytes metadata as text");
    app.add_flag("--mmap", use_mmap, "safetensors input: read through a memory mapping (faster; the input must not be truncated meanwhile)");
    auto* step_option = app.add_option("--step", step, "safetensors output from a store: export step N (default: the latest committed step)");
    auto* shard_option = app.add_option("--max-shard-size", max_shard_size,
                                        "sharded set output: most tensor bytes per file, e.g. 500MB, 5GB, 2GiB (default 5GB, as save_pretrained)");
    app.add_flag("--json", as_json, "print a JSON summary (tensors, bytes, output, seconds) and no progress");
    app.add_flag("--force", force, "replace OUT if it exists");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    // Outputs are files, written under a temporary name and renamed: a store on objects has no rename.
    if (ckpt::object::is_object_url(out))
      return usage_error("OUT " + out + ": ckpt-convert writes files; an s3:// store is an input here (to write a step into one, "
                         "ckpt-reshard SRC -o s3://bucket/prefix)");
    ckpt::PosixFs fs;
    const Direction direction = direction_of(fs, in, out);
    if (direction == Direction::unknown)
      return usage_error("cannot tell the direction from '" + in + "' and '" + out +
                         "': expected IN.safetensors (or IN.safetensors.index.json, or a directory holding one) OUT.ckpt, or "
                         "IN.ckpt (or a step directory or store) OUT.safetensors (or OUTDIR/PREFIX.safetensors.index.json)");
    ckpt::ConvertOptions options;
    options.overwrite = force;
    options.stringify_metadata = stringify;
    options.use_mmap = use_mmap;
    if (direction == Direction::to_safetensors && (layout.chunk_size != 0 || layout.alignment != 0))
      return usage_error("--chunk-size and --alignment apply only when writing a .ckpt file");
    if (auto bad = ckpt::cli::apply_layout(layout, options.chunk_size_log2, options.alignment_log2, options.block_size); !bad.empty())
      return usage_error(bad);
    if (direction == Direction::to_safetensors && use_mmap)
      return usage_error("--mmap applies only when reading a .safetensors file");
    if (direction == Direction::to_ckpt && stringify)
      return usage_error("--stringify-metadata applies only when writing a .safetensors file");
    if (*shard_option) {
      if (direction != Direction::to_safetensors || !ckpt::is_safetensors_index(out))
        return usage_error("--max-shard-size applies only when writing a sharded set (OUT ending in .safetensors.index.json)");
      auto size = ckpt::parse_shard_size(max_shard_size);
      if (!size.ok()) return usage_error("--max-shard-size: " + size.status().message());
      options.max_shard_size = *size;
    }
    if (*step_option) {
      if (direction != Direction::to_safetensors) return usage_error("--step applies only when writing a .safetensors file");
      options.step = step;
    }

    auto [result, seconds] = ckpt::cli::timed_with_progress(in, as_json, options.progress, [&] {
      if (direction == Direction::to_ckpt) return ckpt::safetensors_to_ckpt(fs, in, out, options);
      if (!ckpt::object::is_object_url(in)) return ckpt::ckpt_to_safetensors(fs, in, out, options);
      // A step of a store on objects: its latest, or --step N (spec/OBJECT.md 7).
      ckpt::StepSelector selector;
      selector.step = options.step;
      auto source = ckpt::object::open_checkpoint(fs, in, selector, ckpt::cli::object_opener());
      if (!source.ok()) return ckpt::Result<ckpt::ConvertSummary>(source.status());
      return ckpt::ckpt_to_safetensors(fs, *source, out, options);
    });
    if (!result.ok()) {
      std::string message = result.status().message();
      if (message.find(in) == std::string::npos && message.find(out) == std::string::npos) message = in + ": " + message;
      if (result.status().code() == ckpt::Code::conflict && message.find("already exists") != std::string::npos)
        message += " (pass --force to replace it)";
      std::fprintf(stderr, "%s: %s\n", kTool, message.c_str());
      // Malformed safetensors input is a usage error (exit 2); a damaged ckpt input is an integrity finding (exit 1).
      if (direction == Direction::to_safetensors) return ckpt::cli::exit_for(result.status().code());
      return static_cast<int>(ckpt::cli::kUsage);
    }
    for (const auto& w : result->warnings) std::fprintf(stderr, "%s: warning: %s\n", kTool, w.c_str());
    if (as_json) {
      nlohmann::json j;
      j["input"] = in;
      j["output"] = result->output;
      j["direction"] = direction == Direction::to_ckpt ? "safetensors-to-ckpt" : "ckpt-to-safetensors";
      j["tensors"] = result->tensors;
      j["bytes"] = result->data_bytes;
      j["metadata"] = result->metadata;
      j["output_size"] = result->output_size;
      j[direction == Direction::to_ckpt ? "inputs" : "files"] = result->files;
      j["warnings"] = result->warnings;
      j["seconds"] = seconds;
      // Paths are bytes, not always UTF-8: replace what JSON cannot carry instead of failing after the work is done.
      std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else if (::isatty(1) == 1) {
      std::printf("%s: %llu tensors, %s in %.2f s\n", out.c_str(), static_cast<unsigned long long>(result->tensors),
                  ckpt::cli::human_bytes(static_cast<double>(result->data_bytes)).c_str(), seconds);
    }
    return static_cast<int>(ckpt::cli::kOk);
  });
}
