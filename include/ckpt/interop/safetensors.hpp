// ckpt: safetensors interop. Validates a safetensors file, or a Hugging Face sharded set of them, as
// hostile input and converts it to a shard file; exports any checkpoint (a standalone file, a step
// directory, a store's step) to one safetensors file or to a sharded set; each in one streaming pass
// with bounded memory.
//
//   safetensors:  u64 header length (LE) | JSON header | data buffer (tensors tile it exactly)
//   sharded set:  PREFIX.safetensors.index.json  {"metadata": {"total_size": N}, "weight_map": {tensor: file}}
//                 and the files it names, PREFIX-00001-of-0000N.safetensors, beside it (spec/SHARDING.md 6.5)
//
// Headers and indexes are parsed with nlohmann::json; every field, type, offset and size is checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../shard/index.hpp"
#include "../io/posix_fs.hpp"

namespace ckpt {

class Checkpoint;  // sharded.hpp

namespace safetensors {
inline constexpr std::size_t kLengthFieldSize = 8;
// The reference loader refuses larger headers; so do we, before allocating anything.
inline constexpr std::uint64_t kMaxHeaderLength = std::uint64_t{100} << 20;
inline constexpr std::string_view kMetadataKey = "__metadata__";
// __metadata__ key under which a step's number is exported, as decimal text.
inline constexpr std::string_view kStepKey = "ckpt.step";
// A Hugging Face sharded set is named by its index: PREFIX.safetensors.index.json (spec/SHARDING.md 6.5).
inline constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
// Indexes are read whole; one of 100 MiB names millions of tensors.
inline constexpr std::uint64_t kMaxIndexLength = std::uint64_t{100} << 20;
// save_pretrained's default max_shard_size, "5GB".
inline constexpr std::uint64_t kDefaultMaxShardSize = 5'000'000'000;
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

// A Hugging Face index: which file of the set holds each tensor.
struct SafetensorsIndex {
  std::optional<std::uint64_t> total_size;  // metadata.total_size when it is a non-negative integer
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> file name, sorted by tensor
  std::vector<std::string> files;  // the distinct file names, sorted: the order tensors are read in
};

// True when path ends in safetensors::kIndexSuffix (the name of a sharded set).
[[nodiscard]] bool is_safetensors_index(std::string_view path) noexcept;
// Validates index text (path names it in errors): a JSON object whose "weight_map" maps each tensor,
// once, to a plain file name in the index's directory (no '/', not "." or ".."); other keys are
// ignored. Refused: anything else, a file name that would reach outside the directory included.
[[nodiscard]] Result<SafetensorsIndex> parse_safetensors_index_json(std::string_view json, const std::string& path);
[[nodiscard]] Result<SafetensorsIndex> parse_safetensors_index(FsRef fs, const std::string& path);
// The one *.safetensors.index.json a directory holds (none: not_found; several: invalid_argument).
[[nodiscard]] Result<std::string> find_safetensors_index(FsRef fs, const std::string& dir);
// A shard size as save_pretrained's max_shard_size spells it: bytes, or a number with a unit,
// KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024), case-insensitive ("5GB", "2GiB").
[[nodiscard]] Result<std::uint64_t> parse_shard_size(std::string_view text);

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
  // ckpt -> a sharded set: the most tensor data bytes per file; a tensor larger than this gets a file
  // of its own. Headers are not counted, as Hugging Face does not count them.
  std::uint64_t max_shard_size = safetensors::kDefaultMaxShardSize;
  // Called after each block with data bytes done and total.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct ConvertSummary {
  std::string output;
  std::vector<std::string> files;  // what was read (safetensors -> ckpt) or written (ckpt -> safetensors), in order
  std::uint64_t tensors = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t metadata = 0;
  std::uint64_t output_size = 0;
  std::vector<std::string> warnings;  // one line each, e.g. metadata converted to text
};

// Streams every tensor, in data-offset order, into a new shard file; __metadata__ becomes string metadata.
// `in` is one safetensors file, or a sharded set: its index (a path ending in kIndexSuffix) or a
// directory holding one. A set is checked whole before anything is written: every file it names
// opens and parses, each holds exactly the tensors the weight_map assigns it, no tensor is in two
// files, and a __metadata__ key with different values in two files is Code::conflict. Files are read
// in name order, each in data-offset order.
[[nodiscard]] Result<ConvertSummary> safetensors_to_ckpt(FsRef fs, const std::string& in, const std::string& out,
                                                         const ConvertOptions& options = {});
// Writes a safetensors file from whatever Checkpoint::open reads (sharded.hpp): a standalone shard file
// (every tensor whole in it), a step directory, or a store (its latest committed step, or
// options.step). Each tensor is gathered whole from every shard of the step, in blocks of
// options.block_size, verifying every chunk it reads; output order is Checkpoint::tensors(). Shard
// metadata goes to __metadata__ (the same key with different values in two shards is Code::conflict);
// string values as they are, other types refused unless stringified. Training state (a step's
// manifest state, or a file's kTrainingStateKey entry): its step number goes under
// safetensors::kStepKey as text; the rest (RNG, data position, optimizer list, values), when there is
// any, under kTrainingStateKey in hex only when stringified, else it is left out with a warning. A
// state that is only a step adds nothing else, so safetensors -> ckpt -> safetensors gives back the
// same __metadata__. Written under a temporary name, fsynced and renamed: complete or absent.
// `out` ending in kIndexSuffix writes a sharded set instead: tensors in order, a new file whenever the
// next would take a file past options.max_shard_size, each file atomic and durable as above, all with
// the same __metadata__, the index last (spec/SHARDING.md 6.5).
[[nodiscard]] Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, const std::string& in, const std::string& out,
                                                         const ConvertOptions& options = {});
// The same from a source already open (a step of a store on objects: object/object_checkpoint.hpp);
// options.step is the caller's to have applied. Output goes through fs.
[[nodiscard]] Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, Checkpoint& source, const std::string& out,
                                                         const ConvertOptions& options = {});

namespace detail {
// Text safe for one line of a message or a terminal: control bytes become \xNN, the rest as is, so a
// hostile name cannot break a table (the readers' messages quote it; report/json.hpp prints it).
[[nodiscard]] std::string escape_controls(std::string_view s);
}  // namespace detail

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/safetensors_inl.hpp"
#endif
