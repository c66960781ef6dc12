// ckpt: checkpoints in formats ckpt reads but did not write (spec/FOREIGN.md): a safetensors file, a
// Hugging Face sharded set, a PyTorch DCP directory, a GGUF file. Each is described the same way:
// its files, and for every tensor where its bytes lie. Headers are hostile input: every count, offset
// and length is checked before use, memory is bounded by the file sizes. What the format lets us
// check (header consistency, offsets in bounds, no holes or overlaps, every file present and complete)
// is checked; the data bytes carry no digests, so they can only be checked against a sidecar (sidecar.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../shard/index.hpp"
#include "../io/fs.hpp"
#include "../core/problem.hpp"

namespace ckpt {

enum class ForeignFormat : std::uint8_t {
  safetensors = 1,        // one *.safetensors file
  safetensors_index = 2,  // PREFIX.safetensors.index.json and the files it names
  dcp = 3,                // a torch.distributed.checkpoint directory: .metadata and *.distcp
  gguf = 4,               // one GGUF file (llama.cpp)
};
[[nodiscard]] constexpr EnumBounds<ForeignFormat> enum_bounds(ForeignFormat) noexcept {
  return {ForeignFormat::safetensors, ForeignFormat::gguf};
}
// "safetensors", "safetensors-index", "dcp", "gguf": the spelling of --json's "format".
[[nodiscard]] const char* foreign_format_name(ForeignFormat f) noexcept;

struct ForeignFile {
  std::string name;        // relative to ForeignCheckpoint::dir, never absolute, never containing ".."
  std::uint64_t size = 0;  // as found on disk (0 when missing)
  bool present = true;
};

// One contiguous byte range of a tensor in one file.
struct ForeignPiece {
  std::size_t file = 0;                  // index into ForeignCheckpoint::files
  std::uint64_t offset = 0, length = 0;  // absolute byte range in that file
  Shape offsets;                         // global offsets of the piece's first element (zeros: whole)
  Shape shape;                           // local shape
};

struct ForeignTensor {
  std::string name;
  // The safetensors spelling of 4.1 when ckpt has the type (F32, BF16, I64, ...); otherwise the
  // format's own name (GGUF "Q4_K"), or "bytes" for an opaque object (a DCP BytesIO entry).
  std::string dtype;
  Shape shape;                       // global shape, row-major (outermost dimension first)
  std::vector<ForeignPiece> pieces;  // one for a whole tensor; one per saved chunk for DCP
};

struct ForeignCheckpoint {
  ForeignFormat format = ForeignFormat::safetensors;
  std::string path;     // as named by the caller
  std::string dir;      // the directory that file names are relative to
  std::string primary;  // the file that describes the checkpoint; its sidecar is primary + ".ckptsum"
  std::vector<ForeignFile> files;      // every file the checkpoint consists of, primary included
  std::vector<ForeignTensor> tensors;  // sorted by name
  // The format's metadata as text, sorted by key (safetensors __metadata__, GGUF key/values, DCP's
  // storage_meta). Long values are summarised (spec/FOREIGN.md 1.3).
  std::vector<std::pair<std::string, std::string>> metadata;
  // Damage found in the structure (a missing or short file, overlapping or out-of-bounds ranges, a
  // hole, tensor chunks that do not cover the tensor). A header that cannot be decoded at all is an
  // error of open_foreign instead.
  std::vector<Problem> problems;
  [[nodiscard]] std::uint64_t data_bytes() const noexcept;
};

// Which foreign format a path is, by content (magic, JSON header) and name: nullopt when none, which
// includes a .ckpt file, a store and a step directory. Only I/O errors fail.
[[nodiscard]] Result<std::optional<ForeignFormat>> detect_foreign(FsRef fs, const std::string& path);
// Describes a foreign checkpoint. A directory holding one *.safetensors.index.json is that set, a
// directory holding .metadata a DCP checkpoint.
[[nodiscard]] Result<ForeignCheckpoint> open_foreign(FsRef fs, const std::string& path);

// The per-format readers open_foreign dispatches to (gguf.hpp, dcp.hpp; safetensors in foreign_inl.hpp).
[[nodiscard]] Result<ForeignCheckpoint> open_safetensors_foreign(FsRef fs, const std::string& path);
[[nodiscard]] Result<ForeignCheckpoint> open_safetensors_index_foreign(FsRef fs, const std::string& index_path);
[[nodiscard]] Result<ForeignCheckpoint> open_gguf(FsRef fs, const std::string& path);
[[nodiscard]] Result<ForeignCheckpoint> open_dcp(FsRef fs, const std::string& dir);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/foreign_inl.hpp"
#endif
