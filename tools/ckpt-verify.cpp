// ckpt-verify: checks every byte of one or more shard files (chunk digests, superblock, index and
// footer digests, zero padding, nothing after the footer) and reports each problem precisely.
// Store directories (all steps, --step N or --latest) and step directories are checked by the library
// (ckpt/report/verify.hpp), which also writes the text, the JSON and the JUnit XML; this tool parses
// arguments, picks the shard back end (CPU or GPU, with a progress bar), and prints.
// Exit status: 0 all intact, 1 damage or an incomplete file found, 2 usage error or unreadable path.
// A store's step that the writer retires while it is being verified is reported as retired, not damaged.
// A memory tier's root (or one rank directory) has every copy of every shard checked, every tier log
// and store journal read, and with --persistent the persistent store's steps of the same numbers too
// (ckpt/tiers/memory_root.hpp).
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/report/text.hpp>
#include <ckpt/report/verify.hpp>

#include "cli.hpp"
#include "gpu_verify.hpp"

namespace {

using ckpt::tools::FileOutcome;
constexpr const char* kTool = "ckpt-verify";

struct Settings {
  unsigned threads = 1;
  bool use_mmap = false;
  bool use_gpu = false;        // resolved: a usable device was found
  bool gpu_fallback = false;   // on a GPU failure at run time, verify that file on the CPU
  bool progress = false;       // terminal progress bar allowed (cli::Progress also checks isatty)
};

// One shard file: on the GPU when asked (falling back to the CPU on request), with a progress bar;
// the library's check_shard makes the outcome.
[[nodiscard]] FileOutcome verify_shard(ckpt::PosixFs& fs, const std::string& path, const Settings& settings) {
  // The bar is made on the first callback, when the total is known, and erased when the file is done.
  std::unique_ptr<ckpt::cli::Progress> bar;
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
    bar->update(done);
  };
  if (settings.use_gpu) {
    ckpt::tools::GpuVerifyOptions gpu;
    if (settings.progress) gpu.progress = progress;
    FileOutcome o = ckpt::report::check_shard(fs, path, [&](const std::string& p) { return ckpt::tools::gpu_verify_file(p, gpu); }, "gpu");
    bar.reset();
    if (o.has_report || o.error.code() != ckpt::Code::unsupported || !settings.gpu_fallback) return o;
    std::fprintf(stderr, "%s: note: %s; verifying %s on the CPU\n", kTool, o.error.message().c_str(), path.c_str());
  }
  ckpt::VerifyOptions options;
  options.threads = settings.threads;
  options.use_mmap = settings.use_mmap;
  if (settings.progress) options.progress = progress;
  return ckpt::report::check_shard(fs, path, ckpt::cpu_file_verifier(fs, options));
}

[[nodiscard]] ckpt::Status write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ckpt::make_error(ckpt::Code::io, path + ": cannot create the JUnit file");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) return ckpt::make_error(ckpt::Code::io, path + ": cannot write the JUnit file");
  return ckpt::Status();
}

void print_errors(const std::vector<std::string>& messages) {
  for (const auto& m : messages) std::fprintf(stderr, "%s: %s\n", kTool, m.c_str());
}

// --write-sidecar: records the digests of each foreign checkpoint beside it; the checkpoint is only read.
[[nodiscard]] int write_sidecars(ckpt::PosixFs& fs, const std::vector<std::string>& paths, std::uint32_t chunk_log2, bool as_json,
                                 bool quiet) {
  int exit_code = ckpt::cli::kOk;
  ckpt::tools::json written = ckpt::tools::json::array();
  for (const auto& path : paths) {
    std::unique_ptr<ckpt::cli::Progress> bar;
    auto progress = [&](std::uint64_t done, std::uint64_t total) {
      if (quiet || as_json) return;
      if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
      bar->update(done);
    };
    auto doc = ckpt::report::write_sidecar_for(fs, path, chunk_log2, progress);
    bar.reset();
    if (!doc.ok()) {
      std::fprintf(stderr, "%s: %s\n", kTool, ckpt::report::printable(doc.status().message()).c_str());
      exit_code = std::max(exit_code, ckpt::cli::exit_for(doc.status().code()));
      continue;
    }
    if (!as_json) std::fputs(ckpt::report::sidecar_text(path, *doc).c_str(), stdout);
    written.push_back(std::move(doc).value());
  }
  if (as_json) ckpt::cli::print_json({{"ok", exit_code == ckpt::cli::kOk}, {"sidecars", std::move(written)}});
  return exit_code;
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Checks every byte of ckpt shard files: chunk digests, superblock, index and footer digests,
zero padding, and that nothing follows the footer. Each problem is printed with file, region,
tensor, piece, chunk, byte range, expected and found digest.

A store directory is checked as a whole: its journal, then every committed step (or --step N,
or --latest), each pinned by its COMMIT record and manifest. A step directory is checked by its
manifest and every shard it names.

A memory tier's root (MEMROOT, holding rank-<r>/ directories: own/, held-<s>/ and the tier log
TIERS; spec/TIERS.md 2) or one rank directory: every copy of every shard it holds is checked
like a store's step, every store journal and tier log is read (a torn log tail is the end of the
log, not damage), each copy's content digest is compared with the one its log records, and the
verified copies of each shard are counted. --persistent STORE also verifies the persistent
store's step of each number the root holds and compares its content. --json: "memory_roots".

A store may be verified while its writer saves and retires steps. A step whose files go missing
is checked again against the journal: if it was retired meanwhile (or the journal no longer
names it) it is reported as "retired while being verified" (--json: step "status": "retired",
its vanished files "status": "retired"), which is not damage; a still-committed step with
missing files is DAMAGED. Step "status" is "intact", "damaged" or "retired".

--mmap: a file truncated while it is being hashed is an error, "file changed during verification",
naming the file and offset (exit 2), never a crash.

Foreign checkpoints (spec/FOREIGN.md): a safetensors file, a Hugging Face sharded set (its
*.safetensors.index.json or its directory), a PyTorch DCP directory and a GGUF file are checked as
far as their format allows: header consistency, offsets in bounds, no holes or overlaps, every
file present and complete. Their data carries no digests, so an intact one is reported as
"structure ok; the data carries no digests, not checked" and never as damaged.
--write-sidecar PATH records chunk digests of every byte of PATH in PATH.ckptsum (for a DCP
directory DIR/.metadata.ckptsum, for a set INDEX.ckptsum), written atomically and durably; the
checkpoint itself is only read. From then on ckpt-verify PATH checks every byte against it and
names the damaged tensor, chunk and byte range, as for a .ckpt file.

Pinning (spec/IDENTITY.md 5): --expect DIGEST fails (exit 1) when a checkpoint is intact but its
root digest (ckpt-inspect shows it) is not DIGEST. --expect-file FILE takes pins from a file:
lines "DIGEST  PATH" (sha256sum's layout, ckpt-inspect --pin writes one), or the JSON of
ckpt-inspect --json, which also records every tensor's digest so that the tensors that differ
are named. For a store the pin applies to the latest step, or to --step N. A foreign checkpoint
without a sidecar is read whole to compute its root digest.

Exit status: 0 all files intact (retired steps included) and every pin matched, 1 damage, an
incomplete file, or a checkpoint that is not the pinned one, 2 usage error, unreadable path, a
file that changed during verification, or --gpu without a usable GPU.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::vector<std::string> paths;
    bool as_json = false, use_mmap = false, gpu = false, gpu_fallback = false, quiet = false;
    std::string junit;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::uint64_t step_number = 0;
    bool latest = false;
    app.add_option("PATH", paths, "shard files (*.ckpt), store directories, step directories, or memory roots / rank directories")->required();
    std::string persistent;
    app.add_option("--persistent", persistent, "for a memory root: also verify this persistent store's steps of the same numbers and compare them");
    auto* step_option = app.add_option("--step", step_number, "for a store: verify only this step (default: every committed step)");
    app.add_flag("--latest", latest, "for a store: verify only the latest committed step")->excludes(step_option);
    app.add_flag("--json", as_json, "print one JSON document with every file's report and problems");
    app.add_option("--junit", junit, "also write a JUnit XML file (one testcase per file)");
    app.add_option("--threads", threads, "hashing threads (default: hardware concurrency)")
        ->check(CLI::Range(1u, 4096u));
    app.add_flag("--mmap", use_mmap, "hash from a read-only memory mapping instead of read()");
    app.add_flag("--gpu", gpu, "compute chunk digests on the GPU; exit 2 when there is no usable GPU");
    app.add_flag("--gpu-fallback", gpu_fallback, "like --gpu, but verify on the CPU (with a note) when no GPU is usable");
    app.add_flag("-q,--quiet", quiet, "print nothing for intact files and no progress; problems are still printed");
    std::string expect, expect_file;
    bool write_sidecar = false;
    std::uint64_t sidecar_chunk = std::uint64_t{1} << 20;
    app.add_option("--expect", expect, "fail (exit 1) unless each checkpoint's root digest is DIGEST (ckpt-inspect shows it)");
    app.add_option("--expect-file", expect_file, "pins: lines \"DIGEST  PATH\", or ckpt-inspect --json output (names differing tensors)");
    app.add_flag("--write-sidecar", write_sidecar, "record digests of each foreign checkpoint (safetensors, HF set, DCP, GGUF) beside it");
    app.add_option("--sidecar-chunk-size", sidecar_chunk, "--write-sidecar: bytes per digested chunk, a power of two (default 1 MiB)");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;
    if (write_sidecar) {
      if (!expect.empty() || !expect_file.empty() || !junit.empty() || *step_option || latest || !persistent.empty())
        return ckpt::cli::usage_error(kTool, "--write-sidecar takes only paths (and --json, --quiet, --sidecar-chunk-size)");
      const int log2 = ckpt::cli::power_of_two_log2(sidecar_chunk, ckpt::sidecar::kMinChunkSizeLog2, ckpt::sidecar::kMaxChunkSizeLog2);
      if (log2 < 0) return ckpt::cli::usage_error(kTool, "--sidecar-chunk-size: a power of two from 4 KiB to 1 GiB");
      ckpt::PosixFs sidecar_fs;
      return write_sidecars(sidecar_fs, paths, static_cast<std::uint32_t>(log2), as_json, quiet);
    }
    std::vector<ckpt::report::Pin> pins;
    if (!expect.empty()) {
      auto pin = ckpt::report::pin_from_digest(expect);
      if (!pin.ok()) return ckpt::cli::usage_error(kTool, pin.status().message());
      pins.push_back(std::move(pin).value());
    }
    if (!expect_file.empty()) {
      auto read = ckpt::report::read_pins(expect_file);
      if (!read.ok()) return ckpt::cli::report(kTool, read.status());
      for (auto& p : *read) pins.push_back(std::move(p));
    }

    Settings settings;
    settings.threads = threads;
    settings.use_mmap = use_mmap;
    settings.gpu_fallback = gpu_fallback;
    settings.progress = !as_json && !quiet;
    if (gpu || gpu_fallback) {
      std::string reason;
      if (ckpt::tools::gpu_available(0, reason)) {
        settings.use_gpu = true;
      } else if (gpu_fallback) {
        std::fprintf(stderr, "%s: note: no usable GPU (%s); verifying on the CPU\n", kTool, reason.c_str());
      } else {
        std::fprintf(stderr, "%s: --gpu: no usable GPU: %s (use --gpu-fallback to verify on the CPU)\n", kTool,
                     reason.c_str());
        return static_cast<int>(ckpt::cli::kUsage);
      }
    }

    ckpt::report::VerifyPathsOptions options;
    if (*step_option) options.selection.step = step_number;
    options.selection.latest = latest;
    options.persistent = persistent;
    options.pins = std::move(pins);
    options.pin_file = expect_file;
    options.open_objects = ckpt::cli::object_opener();  // s3://bucket/prefix (spec/OBJECT.md)
    ckpt::PosixFs fs;
    options.check_shard = [&](const std::string& path) { return verify_shard(fs, path, settings); };
    std::unique_ptr<ckpt::cli::Progress> foreign_bar;
    if (settings.progress)
      options.foreign_progress = [&](const std::string& path, std::uint64_t done, std::uint64_t total) {
        if (!foreign_bar) foreign_bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
        foreign_bar->update(done);
      };

    // The library verifies each path and writes its text; each path's verdict is printed as soon as it is known.
    ckpt::report::VerifyMark printed;
    options.on_path = [&](const ckpt::report::VerifyPathsReport& so_far, const ckpt::report::VerifyMark& since) {
      foreign_bar.reset();
      print_errors(ckpt::report::verify_error_messages(so_far, since));
      printed = ckpt::report::verify_mark(so_far);
      if (as_json) return;
      std::fputs(ckpt::report::verify_text(so_far, since, quiet).c_str(), stdout);
      std::fflush(stdout);
    };
    const ckpt::report::VerifyPathsReport report = ckpt::report::verify_paths(fs, paths, options);
    // What conclude_paths added: a --persistent that applied to nothing, a path no pin names (spec/IDENTITY.md 5).
    print_errors(ckpt::report::verify_error_messages(report, printed));
    if (as_json) ckpt::cli::print_json(ckpt::report::verify_json(report));
    else std::fputs(ckpt::report::verify_conclusion_text(report, quiet).c_str(), stdout);
    if (!junit.empty()) {
      if (ckpt::Status s = write_text_file(junit, ckpt::report::verify_junit(report, kTool)); !s.ok()) {
        std::fprintf(stderr, "%s: %s\n", kTool, s.message().c_str());
        return std::max(report.exit_code, static_cast<int>(ckpt::cli::kUsage));
      }
    }
    return report.exit_code;
  });
}
