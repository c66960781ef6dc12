// ckpt: the text primitives every report's text (text.hpp, plan.hpp) and every tool's table use: printf
// into a string, sizes for people ("1.5 MiB") and rows as aligned columns.
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

namespace ckpt::report {

// printf into a string: the tools' formats, kept as they were.
[[nodiscard]] inline std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

[[nodiscard]] inline std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

// Rows as columns separated by two spaces, each line after indent and ending in a newline; columns
// listed in right_aligned hold numbers.
[[nodiscard]] inline std::string table_text(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned,
                                            const char* indent = "") {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.resize(i + 1, 0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - r[i].size(), ' ');
      const bool right = i < right_aligned.size() && right_aligned[i];
      const bool last = i + 1 == r.size();
      line += right ? pad + r[i] : (last ? r[i] : r[i] + pad);
      if (!last) line += "  ";
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace ckpt::report
