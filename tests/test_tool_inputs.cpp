// Every tool given a path that is not what it reads (a FIFO, a directory, a dangling symlink,
// /dev/zero, a missing path) or bad arguments exits 2 at once with a message naming the path
// (spec/FORMAT.md 9). A FIFO used to hang a tool forever in open(); timeout turns a hang into a failure.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

constexpr const char* kInput = "{}";  // where a row's path goes in a tool's arguments

struct Tool {
  std::string name;
  std::vector<std::string> args;  // with kInput where the path goes
  bool directory_is_valid = false;  // the tool takes a directory here, so that row is no error
};

// Each tool reads its input at the place the path is put; OUT paths are in the scratch directory.
[[nodiscard]] std::vector<Tool> tools(const std::string& scratch) {
  return {
      {"ckpt-inspect", {kInput}},
      {"ckpt-verify", {kInput}},
      {"ckpt-repair", {kInput}},
      {"ckpt-convert", {kInput, scratch + "/out.ckpt"}},
      {"ckpt-merge", {kInput, "-o", scratch + "/merged.ckpt"}},
      {"ckpt-reshard", {kInput, "-o", scratch + "/resharded", "--world-size", "2"}},
      {"ckpt-bench", {"--dir", kInput, "--size", "4KiB", "--repeat", "1"}, true},
      {"ckpt-plan", {"--store", kInput, "--mtbf-hours", "10"}},
      {"ckpt-plan", {"--save-seconds", "1", "--mtbf-hours", "10", "--plot", kInput}},  // an output path
      {"ckpt-demo-train", {"--store", kInput, "--steps", "2", "-q"}},
  };
}

[[nodiscard]] std::string tool_path(const std::string& name) { return std::string(CKPT_BINARY_DIR) + "/" + name; }

[[nodiscard]] bool built(const std::string& name) { return ::access(tool_path(name).c_str(), X_OK) == 0; }

// Runs a tool under `timeout 10`: a tool that blocks is killed and exits 124, never 2.
[[nodiscard]] ckpt_test::ProgramRun run_tool(const Tool& tool, const std::string& input) {
  std::vector<std::string> args = {"10", tool_path(tool.name)};
  for (const auto& a : tool.args) args.push_back(a == kInput ? input : a);
  return ckpt_test::run_program("timeout", args);
}

[[nodiscard]] std::string describe(const Tool& tool) {
  std::string s = tool.name;
  for (const auto& a : tool.args) s += " " + a;
  return s;
}

}  // namespace

TEST_CASE("every tool exits 2 at once on a path that is not a readable file or directory", "[tools][inputs]") {
  ckpt_test::TempDir dir;
  const std::string fifo = dir.file("fifo.safetensors"), directory = dir.file("dir.safetensors"),
                    dangling = dir.file("dangling.safetensors"), missing = dir.file("absent/missing.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);  // no writer ever comes: a blocking open would hang
  REQUIRE(::mkdir(directory.c_str(), 0755) == 0);
  ckpt_test::write_file(directory + "/stray", "not a store");  // not a store, and no store is made over it
  REQUIRE(::symlink(dir.file("nowhere").c_str(), dangling.c_str()) == 0);
  struct Input {
    const char* what;
    std::string path;
  };
  const std::vector<Input> inputs = {
      {"a FIFO", fifo}, {"a directory", directory}, {"a dangling symlink", dangling}, {"/dev/zero", "/dev/zero"}, {"a missing path", missing},
  };
  for (const auto& tool : tools(dir.path())) {
    if (!built(tool.name)) {
      WARN(tool.name << " is not built; skipped");
      continue;
    }
    for (const auto& input : inputs) {
      if (tool.directory_is_valid && input.path == directory) continue;
      INFO(describe(tool) << " with " << input.what << " (" << input.path << ")");
      const auto r = run_tool(tool, input.path);
      INFO("stderr: " << r.err);
      CHECK(r.code == 2);
      CHECK(r.err.find(input.path.substr(input.path.find_last_of('/') + 1)) != std::string::npos);
    }
    // Nothing was written through the dangling link or into the FIFO's place.
    CHECK(::access(dir.file("nowhere").c_str(), F_OK) != 0);
    struct stat st;
    REQUIRE(::lstat(fifo.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
  }
}

TEST_CASE("every tool exits 2 on bad arguments and documents its exit codes in --help", "[tools][inputs]") {
  ckpt_test::TempDir dir;
  for (const auto& tool : tools(dir.path())) {
    if (!built(tool.name)) continue;
    INFO(tool.name);
    const auto bad = ckpt_test::run_program("timeout", {"10", tool_path(tool.name), "--no-such-option"});
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--help") != std::string::npos);
    const auto help = ckpt_test::run_program("timeout", {"10", tool_path(tool.name), "--help"});
    CHECK(help.code == 0);
    CHECK(help.out.find("Exit status: 0 ") != std::string::npos);
    CHECK((help.out.find(" 2 ") != std::string::npos || help.out.find("\n2 ") != std::string::npos));
  }
}
