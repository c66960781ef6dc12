// ckpt: definitions for foreign.hpp: detection, dispatch, and the safetensors readers.
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "../../core/coding.hpp"
#include "../../store/journal.hpp"
#include "../safetensors.hpp"
#include "../../core/sidecar_format.hpp"
#include "dcp_inl.hpp"
#include "gguf_inl.hpp"

namespace ckpt {

CKPT_INLINE const char* foreign_format_name(ForeignFormat f) noexcept {
  return enum_name(f, {"safetensors", "safetensors-index", "dcp", "gguf"});
}

CKPT_INLINE std::uint64_t ForeignCheckpoint::data_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& t : tensors)
    for (const auto& p : t.pieces) n += p.length;
  return n;
}

namespace detail {
inline constexpr unsigned char kGgufMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr std::string_view kDcpMetadataName = ".metadata";
// The format a sidecar's header records (spec/IDENTITY.md 4.3), when there is a sidecar at path.
[[nodiscard]] CKPT_INLINE std::optional<ForeignFormat> sidecar_format(FsRef fs, const std::string& path) {
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) return std::nullopt;
  unsigned char head[16] = {};
  auto n = fs.pread(*file, head, sizeof head, 0);
  (void)fs.close(*file);
  if (!n.ok() || *n != sizeof head || std::memcmp(head, sidecar::kMagic, sizeof sidecar::kMagic) != 0) return std::nullopt;
  const std::uint32_t code = get_u32(head + sidecar::hd::kFormat);
  if (code < 1 || code > 4) return std::nullopt;
  return static_cast<ForeignFormat>(code);
}

}  // namespace detail

CKPT_INLINE Result<std::optional<ForeignFormat>> detect_foreign(FsRef fs, const std::string& path) {
  using Found = std::optional<ForeignFormat>;
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();
  if (info->is_dir) {
    // ckpt's own directories first: a store or a step is never taken for a foreign format.
    for (const auto name : {journal::kJournalName, journal::kManifestName})
      if (fs.stat(join_path(path, std::string(name))).ok()) return Found{};
    if (fs.stat(join_path(path, std::string(detail::kDcpMetadataName))).ok()) return Found{ForeignFormat::dcp};
    if (find_safetensors_index(fs, path).ok()) return Found{ForeignFormat::safetensors_index};
    return Found{};
  }
  if (base_name(path) == detail::kDcpMetadataName) return Found{ForeignFormat::dcp};
  if (is_safetensors_index(path)) return Found{ForeignFormat::safetensors_index};
  // A sidecar beside the file says what it was, even when damage hides that in the file's own header.
  if (auto recorded = detail::sidecar_format(fs, path + std::string(sidecar::kSuffix))) return Found{*recorded};
  unsigned char head[9] = {};
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) return file.status();
  auto n = fs.pread(*file, head, sizeof head, 0);
  (void)fs.close(*file);
  if (!n.ok()) return n.status().with_context(path);
  if (*n >= 4 && std::memcmp(head, detail::kGgufMagic, 4) == 0) return Found{ForeignFormat::gguf};
  // safetensors: a u64 header length that fits the file, then the JSON object's '{' (spec/FOREIGN.md 2).
  if (*n == sizeof head && head[8] == '{') {
    const std::uint64_t length = get_u64(head);
    if (length <= info->size && info->size - length >= safetensors::kLengthFieldSize) return Found{ForeignFormat::safetensors};
  }
  return Found{};
}

CKPT_INLINE Result<ForeignCheckpoint> open_foreign(FsRef fs, const std::string& path) {
  auto format = detect_foreign(fs, path);
  if (!format.ok()) return format.status();
  if (!*format) return make_error(Code::invalid_argument, path + ": not a checkpoint format ckpt reads (spec/FOREIGN.md 1.5)");
  switch (**format) {
    case ForeignFormat::safetensors: return open_safetensors_foreign(fs, path);
    case ForeignFormat::safetensors_index: return open_safetensors_index_foreign(fs, path);
    case ForeignFormat::dcp: {
      auto info = fs.stat(path);
      if (!info.ok()) return info.status();
      return open_dcp(fs, info->is_dir ? path : parent_path(path));
    }
    case ForeignFormat::gguf: return open_gguf(fs, path);
  }
  return make_error(Code::invalid_argument, path + ": unknown format");
}

namespace detail {

// The files of a safetensors file or set as one description; the checks are the converter's
// (open_safetensors_input: headers, every file of the weight_map, each tensor where the map says).
[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> safetensors_foreign(FsRef fs, const std::string& path, ForeignFormat format) {
  std::vector<std::string> warnings;  // total_size disagreeing: Hugging Face reads nothing from it
  auto inputs = open_safetensors_input(fs, path, warnings);
  if (!inputs.ok()) {
    // A file of the set that is not there is damage of the set, not a usage error.
    if (format == ForeignFormat::safetensors_index && inputs.status().code() == Code::not_found)
      return make_error(Code::corrupt, inputs.status().message());
    return inputs.status();
  }
  ForeignCheckpoint c;
  c.format = format;
  c.path = path;
  if (format == ForeignFormat::safetensors) {
    c.primary = path;
  } else {
    auto info = fs.stat(path);
    if (!info.ok()) return info.status();
    if (info->is_dir) {
      CKPT_ASSIGN_OR_RETURN(c.primary, find_safetensors_index(fs, path));
    } else {
      c.primary = path;
    }
    auto index_info = fs.stat(c.primary);
    if (!index_info.ok()) return index_info.status();
    c.files.push_back(ForeignFile{base_name(c.primary), index_info->size, true});
    CKPT_ASSIGN_OR_RETURN(const SafetensorsIndex index, parse_safetensors_index(fs, c.primary));
    if (index.total_size) c.metadata.emplace_back("total_size", std::to_string(*index.total_size));
  }
  c.dir = parent_path(c.primary);
  std::map<std::string, std::string> metadata;
  for (const auto& input : *inputs) {
    const std::size_t file = c.files.size();
    c.files.push_back(ForeignFile{base_name(input.path), input.header.data_offset + input.header.data_size, true});
    for (const auto& t : input.header.tensors) {
      ForeignTensor ft;
      ft.name = t.name;
      ft.dtype = std::string(format::dtype_info(t.dtype)->name);
      ft.shape = t.shape;
      ft.pieces.push_back(ForeignPiece{file, input.header.data_offset + t.begin, t.end - t.begin, Shape(t.shape.size(), 0), t.shape});
      c.tensors.push_back(std::move(ft));
    }
    // Files of a set repeat their __metadata__; a key whose values differ keeps the first file's.
    for (const auto& [key, value] : input.header.metadata) metadata.emplace(key, value);
  }
  for (auto& kv : metadata) c.metadata.emplace_back(kv.first, std::move(kv.second));
  std::sort(c.metadata.begin(), c.metadata.end());
  std::sort(c.tensors.begin(), c.tensors.end(), [](const ForeignTensor& a, const ForeignTensor& b) { return a.name < b.name; });
  // Pieces name files by position: renumber them after sorting the files by name.
  std::vector<std::string> old_names;
  for (const auto& f : c.files) old_names.push_back(f.name);
  std::sort(c.files.begin(), c.files.end(), [](const ForeignFile& a, const ForeignFile& b) { return a.name < b.name; });
  std::unordered_map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < c.files.size(); ++i) position.emplace(c.files[i].name, i);
  for (auto& t : c.tensors)
    for (auto& p : t.pieces) p.file = position.at(old_names[p.file]);
  return c;
}

}  // namespace detail

CKPT_INLINE Result<ForeignCheckpoint> open_safetensors_foreign(FsRef fs, const std::string& path) {
  return detail::safetensors_foreign(fs, path, ForeignFormat::safetensors);
}
CKPT_INLINE Result<ForeignCheckpoint> open_safetensors_index_foreign(FsRef fs, const std::string& path) {
  return detail::safetensors_foreign(fs, path, ForeignFormat::safetensors_index);
}

}  // namespace ckpt
