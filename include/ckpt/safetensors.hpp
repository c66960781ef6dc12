// ckpt: safetensors interop. Validates a safetensors file as hostile input, converts it to a shard
// file, and exports any checkpoint (a standalone file, a step directory, a store's step) to one, each
// in one streaming pass with bounded memory.
//
//   safetensors:  u64 header length (LE) | JSON header | data buffer (tensors tile it exactly)
//
// The header is parsed with nlohmann::json; every field, type, offset and size is checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "error.hpp"
#include "index.hpp"
#include "io/posix_fs.hpp"

namespace ckpt {

namespace safetensors {
inline constexpr std::size_t kLengthFieldSize = 8;
// The reference loader refuses larger headers; so do we, before allocating anything.
inline constexpr std::uint64_t kMaxHeaderLength = std::uint64_t{100} << 20;
inline constexpr std::string_view kMetadataKey = "__metadata__";
// __metadata__ key under which a step's number is exported, as decimal text.
inline constexpr std::string_view kStepKey = "ckpt.step";
}  // namespace safetensors

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::U8;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the data buffer
};

struct SafetensorsHeader {
  std::uint64_t header_length = 0;  // JSON bytes after the length field, padding included
  std::uint64_t data_offset = 0;    // file offset of the data buffer: 8 + header_length
  std::uint64_t data_size = 0;      // data buffer bytes, up to the end of the file
  std::vector<SafetensorsTensor> tensors;  // sorted by data offset (ties: empty tensors first, then name)
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__, sorted by key
};

// Validates the header text of a file whose data buffer is data_size bytes (path names it in errors).
[[nodiscard]] Result<SafetensorsHeader> parse_safetensors_json(std::string_view json, std::uint64_t data_size,
                                                               const std::string& path);
// Reads and validates the length field and header of an open safetensors file of file_size bytes.
[[nodiscard]] Result<SafetensorsHeader> parse_safetensors_header(FsRef fs, FileHandle file, std::uint64_t file_size,
                                                                 const std::string& path);
[[nodiscard]] Result<SafetensorsHeader> parse_safetensors_header(FsRef fs, const std::string& path);

struct ConvertOptions {
  // Shard layout for safetensors -> ckpt.
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  // Bytes moved per read; memory use is a small multiple of this, whatever the input size.
  std::size_t block_size = std::size_t{8} << 20;
  // safetensors -> ckpt: read the input through a read-only mapping when Fs has map(), saving the copy
  // into a buffer. Truncating the input while it is mapped kills the process (SIGBUS): opt in.
  bool use_mmap = false;
  // Replace an existing output file (otherwise Code::conflict).
  bool overwrite = false;
  // ckpt -> safetensors: write int64/float64/bool/bytes metadata as text instead of refusing.
  bool stringify_metadata = false;
  // ckpt -> safetensors: the step of a store to export (default: its latest committed step). For a
  // file or a step directory it must be the step that holds (else invalid_argument).
  std::optional<std::uint64_t> step;
  // Called after each block with data bytes done and total.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct ConvertSummary {
  std::string output;
  std::uint64_t tensors = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t metadata = 0;
  std::uint64_t output_size = 0;
  std::vector<std::string> warnings;  // one line each, e.g. metadata converted to text
};

// Streams every tensor, in data-offset order, into a new shard file; __metadata__ becomes string metadata.
[[nodiscard]] Result<ConvertSummary> safetensors_to_ckpt(FsRef fs, const std::string& in, const std::string& out,
                                                         const ConvertOptions& options = {});
// Writes a safetensors file from whatever Checkpoint::open reads (sharded.hpp): a standalone shard file
// (every tensor whole in it), a step directory, or a store (its latest committed step, or
// options.step). Each tensor is gathered whole from every shard of the step, in blocks of
// options.block_size, verifying every chunk it reads; output order is Checkpoint::tensors(). Shard
// metadata goes to __metadata__ (the same key with different values in two shards is Code::conflict);
// string values as they are, other types refused unless stringified. Training state: a file's
// kTrainingStateKey entry is metadata like any other (bytes: refused unless stringified, then hex); a
// step's number goes under safetensors::kStepKey as text, and its whole state (RNG, data position,
// values) under kTrainingStateKey in hex only when stringified. Written under a temporary name,
// fsynced and renamed: complete or absent.
[[nodiscard]] Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, const std::string& in, const std::string& out,
                                                         const ConvertOptions& options = {});

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/safetensors_inl.hpp"
#endif
