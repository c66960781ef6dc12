// Shared helpers for the test suite: scratch directories, random bytes, whole-file I/O.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

// Every path under dir with its bytes (directories as "<dir>"): equal trees, equal maps.
[[nodiscard]] inline std::map<std::string, std::string> directory_tree(const std::string& dir) {
  namespace fsys = std::filesystem;
  std::map<std::string, std::string> out;
  for (const auto& e : fsys::recursive_directory_iterator(dir)) {
    const std::string rel = fsys::relative(e.path(), dir).string();
    out[rel] = e.is_directory() ? std::string("<dir>") : read_file(e.path().string());
  }
  return out;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// XORs the byte at `offset` of the file at path with mask: damage in place.
inline void xor_byte(const std::string& path, std::uint64_t offset, unsigned char mask) {
  std::string bytes = read_file(path);
  bytes.at(static_cast<std::size_t>(offset)) = static_cast<char>(bytes[static_cast<std::size_t>(offset)] ^ mask);
  write_file(path, bytes);
}

// A scratch directory holding one file, `name`, with the given bytes.
struct ScratchFile {
  ScratchFile(const std::string& name, const std::string& bytes) : path(dir.file(name)) { write_file(path, bytes); }
  TempDir dir;
  std::string path;
};

// A damaged copy of an encoding, and what was done to it.
struct Damaged {
  std::string bytes;
  std::string what;  // "flip at 12", "cut at 7"
  bool cut = false;
};

// Every one-byte flip of bytes (xor with mask), then every proper prefix: the damage a decoder must refuse.
[[nodiscard]] inline std::vector<Damaged> flips_and_cuts(const std::string& bytes, unsigned char mask) {
  std::vector<Damaged> out;
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ mask);
    out.push_back({std::move(flipped), "flip at " + std::to_string(at), false});
  }
  for (std::size_t n = 0; n < bytes.size(); ++n) out.push_back({bytes.substr(0, n), "cut at " + std::to_string(n), true});
  return out;
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
  [[nodiscard]] std::size_t err_lines() const { return static_cast<std::size_t>(std::count(err.begin(), err.end(), '\n')); }
  [[nodiscard]] std::string first_err_line() const { return err.substr(0, err.find('\n')); }
  [[nodiscard]] bool says(const std::string& text) const { return out.find(text) != std::string::npos; }
};

// Runs a shell command line, stdin from /dev/null, capturing stdout and stderr.
[[nodiscard]] inline ProgramRun run_shell(const std::string& command_line) {
  TempDir scratch;
  const std::string out = scratch.file("out"), err = scratch.file("err");
  ProgramRun r;
  r.code = run_command(command_line + " >" + shell_quote(out) + " 2>" + shell_quote(err) + " </dev/null");
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Runs program with args (each quoted), stdin from /dev/null, capturing stdout and stderr.
[[nodiscard]] inline ProgramRun run_program(const std::string& program, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(program);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return run_shell(cmd);
}

// Every subset of {0, ..., n-1} with min_size to max_size members, each ascending (n < 32).
inline std::vector<std::vector<int>> subsets_of(int n, int min_size, int max_size) {
  std::vector<std::vector<int>> out;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    const int size = __builtin_popcount(mask);
    if (size < min_size || size > max_size) continue;
    std::vector<int> s;
    for (int i = 0; i < n; ++i)
      if (mask & (1u << i)) s.push_back(i);
    out.push_back(s);
  }
  return out;
}

}  // namespace ckpt_test
