// ckpt: pins (spec/IDENTITY.md 5): a checkpoint's expected root digest, and its tensors' when known,
// read from a pin file ("DIGEST  PATH" lines or ckpt-inspect --json) and checked against a content.
#pragma once

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../identity/identity.hpp"
#include "json.hpp"

namespace ckpt::report {

struct Pin {
  std::string path;  // empty: applies to every checkpoint checked
  Digest128 root;
  std::optional<Digest128> metadata;
  std::map<std::string, Digest128> tensors;  // empty when only the root is pinned
  std::string source;                        // where it was read, for messages
};

// A pin given as a digest (ckpt-verify --expect, ckpt.verify(expect=)): it applies to every path checked.
[[nodiscard]] inline Result<Pin> pin_from_digest(const std::string& text) {
  auto root = parse_digest(text);
  if (!root) return make_error(Code::invalid_argument, "--expect: '" + printable(text) + "' is not a 32-digit root digest");
  Pin p;
  p.root = *root;
  p.source = "--expect";
  return p;
}

namespace detail {
// A pin from a JSON document: ckpt-inspect --json (top-level "identity"), ckpt-verify --json ("pins"
// or "foreign" entries with "identity"), or {"root": ..., "tensors": [...]} itself.
inline void pins_from_json(const json& j, const std::string& source, std::vector<Pin>& out) {
  if (j.is_array()) {
    for (const auto& e : j) pins_from_json(e, source, out);
    return;
  }
  if (!j.is_object()) return;
  const json* identity = j.contains("identity") && j["identity"].is_object() ? &j["identity"] : (j.contains("root") ? &j : nullptr);
  if (identity != nullptr && (*identity)["root"].is_string()) {
    auto root = parse_digest((*identity)["root"].get<std::string>());
    if (root) {
      Pin p;
      p.root = *root;
      p.source = source;
      if (j.contains("path") && j["path"].is_string()) p.path = j["path"].get<std::string>();
      if (identity->contains("metadata_digest") && (*identity)["metadata_digest"].is_string())
        p.metadata = parse_digest((*identity)["metadata_digest"].get<std::string>());
      if (identity->contains("tensors") && (*identity)["tensors"].is_array())
        for (const auto& t : (*identity)["tensors"])
          if (t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("digest") && t["digest"].is_string())
            if (auto d = parse_digest(t["digest"].get<std::string>())) p.tensors.emplace(t["name"].get<std::string>(), *d);
      out.push_back(std::move(p));
      return;
    }
  }
  for (const char* key : {"pins", "foreign", "checkpoints"})
    if (j.contains(key)) pins_from_json(j[key], source, out);
}
}  // namespace detail

// A pin file: JSON (above), or text lines "DIGEST" or "DIGEST  PATH" (sha256sum's layout; '#' starts a
// comment). Usage errors name the file and line.
[[nodiscard]] inline Result<std::vector<Pin>> read_pins(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) return make_error(Code::io, file + ": cannot open the pin file");
  std::string text;
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
    text.append(buf, n);
    if (text.size() > (std::size_t{64} << 20)) {
      std::fclose(f);
      return make_error(Code::invalid_argument, file + ": a pin file of more than 64 MiB");
    }
  }
  std::fclose(f);
  std::vector<Pin> pins;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return make_error(Code::invalid_argument, file + ": not valid JSON");
    detail::pins_from_json(j, file, pins);
    if (pins.empty()) return make_error(Code::invalid_argument, file + ": JSON without a root digest (expected ckpt-inspect --json output)");
    return pins;
  }
  std::size_t line_no = 0, start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    line.erase(0, b);
    const auto space = line.find_first_of(" \t");
    Pin p;
    p.source = file + ":" + std::to_string(line_no);
    auto root = parse_digest(line.substr(0, space));
    if (!root) return make_error(Code::invalid_argument, p.source + ": '" + printable(line.substr(0, space)) + "' is not a 32-digit root digest");
    p.root = *root;
    if (space != std::string::npos) {
      const auto path_start = line.find_first_not_of(" \t*", space);  // "*" is sha256sum's binary-mode mark
      if (path_start != std::string::npos) p.path = line.substr(path_start);
    }
    pins.push_back(std::move(p));
  }
  if (pins.empty()) return make_error(Code::invalid_argument, file + ": no pins in it");
  return pins;
}

[[nodiscard]] inline std::string trimmed_path(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  while (p.size() > 2 && p.compare(0, 2, "./") == 0) p.erase(0, 2);
  return p;
}

// The pin for a checkpoint path: the one naming it exactly (after trimming "./" and trailing '/'), else
// the one naming its base name, else a pin without a path; nullptr when none applies.
[[nodiscard]] inline const Pin* find_pin(const std::vector<Pin>& pins, const std::string& path) {
  const std::string want = trimmed_path(path);
  for (const auto& p : pins)
    if (!p.path.empty() && trimmed_path(p.path) == want) return &p;
  for (const auto& p : pins)
    if (!p.path.empty() && base_name(trimmed_path(p.path)) == base_name(want)) return &p;
  for (const auto& p : pins)
    if (p.path.empty()) return &p;
  // One pin is the checkpoint's, wherever it lies now (ckpt-inspect --json of a copy elsewhere).
  return pins.size() == 1 ? &pins.front() : nullptr;
}

struct PinCheck {
  bool ok = false;
  std::string expected, found;
  bool tensors_known = false;  // the pin recorded tensor digests, so the differing ones are named
  std::vector<std::string> changed, missing, added;
  bool metadata_changed = false;
};

[[nodiscard]] inline PinCheck check_pin(const Content& c, const Pin& pin) {
  PinCheck r;
  r.expected = pin.root.hex();
  r.found = c.root.hex();
  r.ok = pin.root == c.root;
  if (r.ok || pin.tensors.empty()) return r;
  r.tensors_known = true;
  for (const auto& t : c.tensors) {
    auto it = pin.tensors.find(t.name);
    if (it == pin.tensors.end()) r.added.push_back(t.name);
    else if (it->second != t.digest) r.changed.push_back(t.name);
  }
  for (const auto& [name, digest] : pin.tensors)
    if (c.find(name) == nullptr) r.missing.push_back(name);
  r.metadata_changed = pin.metadata && *pin.metadata != c.metadata_digest;
  return r;
}

// One line per finding, for a terminal.
[[nodiscard]] inline std::vector<std::string> pin_check_lines(const PinCheck& r) {
  std::vector<std::string> lines;
  if (r.ok) return lines;
  lines.push_back("root digest " + r.found + ", pinned " + r.expected);
  if (!r.tensors_known) {
    lines.push_back("the pin records only a root digest, so the differing tensors cannot be named (pin with ckpt-inspect --json to name them)");
    return lines;
  }
  for (const auto& n : r.changed) lines.push_back("tensor '" + printable(n) + "' differs from the pinned one");
  for (const auto& n : r.missing) lines.push_back("tensor '" + printable(n) + "' is pinned but missing");
  for (const auto& n : r.added) lines.push_back("tensor '" + printable(n) + "' is not in the pin");
  if (r.metadata_changed) lines.push_back("metadata differ from the pinned ones");
  if (r.changed.empty() && r.missing.empty() && r.added.empty() && !r.metadata_changed)
    lines.push_back("every pinned tensor matches: the difference is in the metadata");
  return lines;
}

}  // namespace ckpt::report
