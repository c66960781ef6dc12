// ckpt tools: shared CLI plumbing. Exit codes, one-line errors, terminal progress, JSON output.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ckpt/core/error.hpp>
#include <ckpt/core/format.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/report/columns.hpp>
#include <ckpt/report/exit.hpp>
#if CKPT_HAVE_S3
#include <ckpt/io/object/s3_client.hpp>
#else
#include <ckpt/io/object/client.hpp>
#endif

namespace ckpt::cli {

// Stable exit codes every tool shares (README "Exit codes"): the library's (ckpt/report/exit.hpp).
using report::Exit;
using report::exit_for;
using report::kIntegrity;
using report::kOk;
using report::kUsage;

// Prints "tool: message" on one line to stderr and returns the exit code for the status.
inline int report(const char* tool, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", tool, status.message().c_str());
  return exit_for(status.code());
}

using report::human_bytes;

// Progress on stderr for long work: bytes done, rate, time left. Silent unless stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, std::uint64_t total, bool enabled)
      : label_(std::move(label)), total_(total), enabled_(enabled && ::isatty(2) == 1), start_(Clock::now()) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { finish(); }

  void update(std::uint64_t done) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0.0;
    const double left = rate > 0 && total_ > done ? static_cast<double>(total_ - done) / rate : 0.0;
    std::fprintf(stderr, "\r%s: %s / %s  %s/s  %d:%02d left   ", label_.c_str(), human_bytes(static_cast<double>(done)).c_str(),
                 human_bytes(static_cast<double>(total_)).c_str(), human_bytes(rate).c_str(), static_cast<int>(left) / 60,
                 static_cast<int>(left) % 60);
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  std::uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_, last_{};
};

// Parses arguments; --help exits 0, any usage error exits 2 with CLI11's one-line message.
// Returns -1 when the tool should go on.
[[nodiscard]] inline int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\nRun with --help for usage.\n", app.get_name().c_str(), e.what());
    return kUsage;
  }
  return -1;
}

// The main of a tool this build leaves out (an MPI benchmark where CMake found no MPI): --help works,
// anything else says "tool: this build has no <feature>" and exits 2.
[[nodiscard]] inline int main_without(const char* feature, CLI::App& app, int argc, char** argv) {
  if (const int rc = parse(app, argc, argv); rc >= 0) return rc;
  std::fprintf(stderr, "%s: this build has no %s\n", app.get_name().c_str(), feature);
  return kUsage;
}

// Runs a tool body; nothing escapes as a crash: out-of-memory and stray exceptions exit 2.
inline int guarded(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", tool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
  }
  return kUsage;
}

// The main of every tool: its CLI::App (name and --help text), then `body` declares the options,
// parses (ckpt::cli::parse) and does the work, guarded: nothing escapes as a crash.
template <class Body>
int run_tool(const char* tool, const char* about, Body&& body) {
  return guarded(tool, [&]() -> int {
    CLI::App app{about, tool};
    return body(app);
  });
}

// log2 of v when v is a power of two in [2^lo, 2^hi], else -1 (--chunk-size and --alignment).
[[nodiscard]] inline int power_of_two_log2(std::uint64_t v, std::uint32_t lo, std::uint32_t hi) {
  for (std::uint32_t k = lo; k <= hi; ++k)
    if (v == (std::uint64_t{1} << k)) return static_cast<int>(k);
  return -1;
}

// --chunk-size, --alignment and --block-size of the tools that write shard files (convert, merge,
// reshard). 0 means not given: the library's default stays.
struct LayoutFlags {
  std::uint64_t chunk_size = 0, alignment = 0, block_size = 0;
};

// Declares the three layout options; `scope` prefixes the help of the first two ("ckpt output: ").
inline void add_layout_options(CLI::App& app, LayoutFlags& flags, const std::string& scope = "") {
  app.add_option("--chunk-size", flags.chunk_size, scope + "bytes per checksummed chunk, a power of two in [4 KiB, 1 GiB] (default 1 MiB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--alignment", flags.alignment, scope + "alignment of each piece's data, a power of two in [64, 2 MiB] (default 4096)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--block-size", flags.block_size, "bytes read per call, 4 KiB to 1 GiB (default 8 MiB); memory use is a small multiple of it")
      ->transform(CLI::AsSizeValue(false));
}

// Checks the layout options given and writes them into a tool's options. Returns the usage error
// message, or "" when all are fine.
[[nodiscard]] inline std::string apply_layout(const LayoutFlags& flags, std::uint32_t& chunk_size_log2, std::uint32_t& alignment_log2,
                                              std::size_t& block_size) {
  if (flags.chunk_size != 0) {
    const int k = power_of_two_log2(flags.chunk_size, format::kMinChunkSizeLog2, format::kMaxChunkSizeLog2);
    if (k < 0) return "--chunk-size " + std::to_string(flags.chunk_size) + ": expected a power of two from 4096 to 1073741824";
    chunk_size_log2 = static_cast<std::uint32_t>(k);
  }
  if (flags.alignment != 0) {
    const int k = power_of_two_log2(flags.alignment, format::kMinAlignmentLog2, format::kMaxAlignmentLog2);
    if (k < 0) return "--alignment " + std::to_string(flags.alignment) + ": expected a power of two from 64 to 2097152";
    alignment_log2 = static_cast<std::uint32_t>(k);
  }
  if (flags.block_size != 0) {
    if (flags.block_size < 4096 || flags.block_size > (std::uint64_t{1} << 30))
      return "--block-size " + std::to_string(flags.block_size) + ": expected 4096 to 1073741824 bytes";
    block_size = static_cast<std::size_t>(flags.block_size);
  }
  return "";
}

// Runs `work`, a library call that reports its bytes through `progress`, with a progress bar named
// `label` (none when `quiet`, e.g. --json). Returns what it returned and the seconds it took.
template <class Work>
[[nodiscard]] auto timed_with_progress(const std::string& label, bool quiet,
                                       std::function<void(std::uint64_t done, std::uint64_t total)>& progress, Work&& work) {
  std::unique_ptr<Progress> bar;
  if (!quiet)
    progress = [&](std::uint64_t done, std::uint64_t total) {
      if (!bar) bar = std::make_unique<Progress>(label, total, true);
      bar->update(done);
    };
  const auto start = std::chrono::steady_clock::now();
  auto result = work();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.reset();
  progress = nullptr;  // it refers to this frame's bar
  return std::make_pair(std::move(result), seconds);
}

// Prints "tool: message" and the --help hint on stderr; returns the usage exit code.
inline int usage_error(const char* tool, const std::string& message) {
  std::fprintf(stderr, "%s: %s\nRun with --help for usage.\n", tool, message.c_str());
  return kUsage;
}

// Writes bytes to a file the user named (--plot), creating it or replacing a regular file's contents.
// Anything else there is refused at once, never opened for writing: an open of a FIFO blocks until a
// reader comes, a device swallows the output, a symlink is not followed. Inputs need no such helper:
// every tool reads through PosixFs, whose open refuses all of these without blocking.
[[nodiscard]] inline Status write_output_file(const std::string& path, const std::string& bytes) {
  PosixFs fs;
  auto info = fs.stat(path);
  if (!info.ok() && info.status().code() != Code::not_found) return info.status();
  // An existing name goes through open(read_write), which names what is there when it is not a file.
  auto file = fs.open(path, info.ok() ? OpenMode::read_write : OpenMode::create_new);
  if (!file.ok()) return file.status();
  ScopedFile scoped(fs, *file);
  CKPT_TRY(fs.truncate(scoped.get(), 0).with_context(path));
  CKPT_TRY(fs.pwrite(scoped.get(), bytes.data(), bytes.size(), 0).with_context(path));
  return scoped.close().with_context(path);
}

// Prints rows as columns separated by two spaces, each line after indent; columns listed in
// right_aligned hold numbers.
inline void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned,
                        const char* indent = "") {
  std::fputs(report::table_text(rows, right_aligned, indent).c_str(), stdout);
}

// JSON goes to stdout, one document, pretty-printed with a trailing newline. Invalid UTF-8 (a path
// is any bytes) becomes U+FFFD instead of an exception.
inline void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// How a tool opens an s3:// path (spec/OBJECT.md 2.6); empty in a build without the S3 client, where the
// library then refuses such a path (exit 2).
[[nodiscard]] inline object::ObjectOpener object_opener() {
#if CKPT_HAVE_S3
  return [](const std::string& url) { return object::open_s3_url(url); };
#else
  return {};
#endif
}

}  // namespace ckpt::cli

namespace ckpt::tools {
// The library's report forms (ckpt/report/: JSON, printable text, pins, store reading) under the tools' names.
using namespace ckpt::report;
}  // namespace ckpt::tools
