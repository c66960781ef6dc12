// Shared helpers for the test suite: scratch directories, random bytes, whole-file I/O.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ckpt_test {

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/ckpt-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) std::abort();
    path_ = buf.data();
  }
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path_ + "'";
    (void)std::system(cmd.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

[[nodiscard]] inline std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  return v;
}

[[nodiscard]] inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs a shell command and returns its exit status (not the raw wait status).
[[nodiscard]] inline int run_command(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// s as one single-quoted shell word.
[[nodiscard]] inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A program's exit status and output, from run_program.
struct ProgramRun {
  int code = -1;
  std::string out, err;
};

// Runs program with args (each quoted), stdin from /dev/null, capturing stdout and stderr.
[[nodiscard]] inline ProgramRun run_program(const std::string& program, const std::vector<std::string>& args) {
  TempDir scratch;
  const std::string out = scratch.file("out"), err = scratch.file("err");
  std::string cmd = shell_quote(program);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  ProgramRun r;
  r.code = run_command(cmd + " >" + shell_quote(out) + " 2>" + shell_quote(err) + " </dev/null");
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace ckpt_test
