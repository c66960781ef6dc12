// ckpt-verify: checks every byte of one or more shard files (chunk digests, superblock, index and
// footer digests, zero padding, nothing after the footer) and reports each problem precisely.
// Exit status: 0 all intact, 1 damage or an incomplete file found, 2 usage error or unreadable path.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/verify.hpp>

#include "cli.hpp"
#include "gpu_verify.hpp"
#include "report_json.hpp"

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

// Verifies one shard file; the unit that a store- or step-level caller repeats per shard.
[[nodiscard]] FileOutcome verify_shard(ckpt::PosixFs& fs, const std::string& path, const Settings& settings) {
  FileOutcome out;
  out.path = path;
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](FileOutcome& o) -> FileOutcome& {
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return o;
  };
  auto info = fs.stat(path);
  if (!info.ok()) {
    out.error = info.status();  // the message already names the path
    return finish(out);
  }
  if (info->is_dir) {
    out.error = ckpt::make_error(ckpt::Code::invalid_argument, path + ": is a directory, expected a shard file");
    return finish(out);
  }
  // The bar is made on the first callback, when the total is known, and erased when the file is done.
  std::unique_ptr<ckpt::cli::Progress> bar;
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!bar) bar = std::make_unique<ckpt::cli::Progress>(path, total, true);
    bar->update(done);
  };
  ckpt::Result<ckpt::VerifyReport> report = ckpt::make_error(ckpt::Code::unsupported, "not run");
  out.engine = "cpu";
  if (settings.use_gpu) {
    ckpt::tools::GpuVerifyOptions gpu;
    if (settings.progress) gpu.progress = progress;
    report = ckpt::tools::gpu_verify_file(path, gpu);
    out.engine = "gpu";
    if (!report.ok() && report.status().code() == ckpt::Code::unsupported && settings.gpu_fallback) {
      std::fprintf(stderr, "%s: note: %s; verifying %s on the CPU\n", kTool, report.status().message().c_str(),
                   path.c_str());
      out.engine = "cpu";
    }
  }
  if (out.engine == "cpu") {
    ckpt::VerifyOptions options;
    options.threads = settings.threads;
    options.use_mmap = settings.use_mmap;
    if (settings.progress) options.progress = progress;
    report = ckpt::verify_file(fs, path, options);
  }
  bar.reset();
  if (!report.ok()) {
    out.error = report.status();
    if (out.error.message().find(path) == std::string::npos) out.error = out.error.with_context(path);
    return finish(out);
  }
  out.has_report = true;
  out.report = std::move(report).value();
  return finish(out);
}

// Human output for one file: a status line, then one line per problem; errors go to stderr.
void print_outcome(const FileOutcome& o, bool quiet) {
  if (!o.has_report) {
    std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(o.error.message()).c_str());
    return;
  }
  const auto& r = o.report;
  const std::string path = ckpt::tools::printable(o.path);
  if (r.ok()) {
    if (!quiet)
      std::printf("%s: ok (%llu chunks, %s checked)\n", path.c_str(), static_cast<unsigned long long>(r.chunks_checked),
                  ckpt::cli::human_bytes(static_cast<double>(r.bytes_checked)).c_str());
    return;
  }
  std::printf("%s: DAMAGED (%zu problem%s)\n", path.c_str(), r.problems.size(), r.problems.size() == 1 ? "" : "s");
  for (const auto& p : r.problems) std::printf("  %s\n", ckpt::tools::problem_line(o.path, p).c_str());
  std::fflush(stdout);
}

[[nodiscard]] ckpt::Status write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ckpt::make_error(ckpt::Code::io, path + ": cannot create the JUnit file");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) return ckpt::make_error(ckpt::Code::io, path + ": cannot write the JUnit file");
  return ckpt::Status();
}

}  // namespace

int main(int argc, char** argv) {
  return ckpt::cli::guarded(kTool, [&] {
    CLI::App app{"Checks every byte of ckpt shard files: chunk digests, superblock, index and footer digests,\n"
                 "zero padding, and that nothing follows the footer. Each problem is printed with file, region,\n"
                 "tensor, piece, chunk, byte range, expected and found digest.\n\n"
                 "Exit status: 0 all files intact, 1 damage or an incomplete file found,\n"
                 "2 usage error, unreadable path, or --gpu without a usable GPU.",
                 kTool};
    std::vector<std::string> paths;
    bool as_json = false, use_mmap = false, gpu = false, gpu_fallback = false, quiet = false;
    std::string junit;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    app.add_option("PATH", paths, "shard files (*.ckpt)")->required();
    app.add_flag("--json", as_json, "print one JSON document with every file's report and problems");
    app.add_option("--junit", junit, "also write a JUnit XML file (one testcase per file)");
    app.add_option("--threads", threads, "hashing threads (default: hardware concurrency)")
        ->check(CLI::Range(1u, 4096u));
    app.add_flag("--mmap", use_mmap, "hash from a read-only memory mapping instead of read()");
    app.add_flag("--gpu", gpu, "compute chunk digests on the GPU; exit 2 when there is no usable GPU");
    app.add_flag("--gpu-fallback", gpu_fallback, "like --gpu, but verify on the CPU (with a note) when no GPU is usable");
    app.add_flag("-q,--quiet", quiet, "print nothing for intact files and no progress; problems are still printed");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

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

    ckpt::PosixFs fs;
    std::vector<FileOutcome> outcomes;
    int exit_code = ckpt::cli::kOk;
    for (const auto& path : paths) {
      outcomes.push_back(verify_shard(fs, path, settings));
      const FileOutcome& o = outcomes.back();
      exit_code = std::max(exit_code, ckpt::tools::outcome_exit(o));
      if (as_json) {
        if (!o.has_report) std::fprintf(stderr, "%s: %s\n", kTool, ckpt::tools::printable(o.error.message()).c_str());
      } else {
        print_outcome(o, quiet);
      }
    }
    if (as_json) ckpt::cli::print_json(ckpt::tools::outcomes_json(outcomes));
    else if (!quiet && outcomes.size() > 1) {
      std::size_t intact = 0, damaged = 0;
      for (const auto& o : outcomes) {
        if (o.has_report && o.report.ok()) ++intact;
        else if (o.has_report) ++damaged;
      }
      std::printf("%zu files: %zu intact, %zu damaged, %zu unreadable\n", outcomes.size(), intact, damaged,
                  outcomes.size() - intact - damaged);
    }
    if (!junit.empty()) {
      if (ckpt::Status s = write_text_file(junit, ckpt::tools::junit_xml(outcomes, kTool)); !s.ok()) {
        std::fprintf(stderr, "%s: %s\n", kTool, s.message().c_str());
        exit_code = std::max(exit_code, static_cast<int>(ckpt::cli::kUsage));
      }
    }
    return exit_code;
  });
}
