// ckpt: definitions for foreign.hpp: detection, dispatch, and the safetensors readers.
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include "../safetensors.hpp"
#include "dcp_inl.hpp"
#include "gguf_inl.hpp"

namespace ckpt {

CKPT_INLINE const char* foreign_format_name(ForeignFormat f) noexcept {
  switch (f) {
    case ForeignFormat::safetensors: return "safetensors";
    case ForeignFormat::safetensors_index: return "safetensors-index";
    case ForeignFormat::dcp: return "dcp";
    case ForeignFormat::gguf: return "gguf";
  }
  return "unknown";
}

CKPT_INLINE std::uint64_t ForeignCheckpoint::data_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& t : tensors)
    for (const auto& p : t.pieces) n += p.length;
  return n;
}

[[nodiscard]] CKPT_INLINE Result<std::optional<ForeignFormat>> detect_foreign(FsRef, const std::string&) {
  return std::optional<ForeignFormat>{};
}

[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_foreign(FsRef fs, const std::string& path) {
  auto format = detect_foreign(fs, path);
  if (!format.ok()) return format.status();
  if (!*format) return make_error(Code::invalid_argument, path + ": not a checkpoint format ckpt recognises");
  switch (**format) {
    case ForeignFormat::safetensors: return open_safetensors_foreign(fs, path);
    case ForeignFormat::safetensors_index: return open_safetensors_index_foreign(fs, path);
    case ForeignFormat::dcp: return open_dcp(fs, path);
    case ForeignFormat::gguf: return open_gguf(fs, path);
  }
  return make_error(Code::invalid_argument, path + ": unknown format");
}

[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_safetensors_foreign(FsRef, const std::string& path) {
  return make_error(Code::unsupported, path + ": not read yet");
}
[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_safetensors_index_foreign(FsRef, const std::string& path) {
  return make_error(Code::unsupported, path + ": not read yet");
}

}  // namespace ckpt
