// ckpt: the identity of a checkpoint (spec/IDENTITY.md). What a checkpoint holds, as the digests that
// already describe it (tensors, their pieces and chunk digests, metadata), gives one root digest that
// pins it, per-tensor digests that name what differs, and a diff that needs no data read. The same
// description is built from a .ckpt file's index, a step's manifest and shards, or a sidecar of a
// foreign checkpoint (sidecar.hpp), so a pin or a diff works across all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "../shard/index.hpp"
#include "../io/fs.hpp"
#include "../core/value.hpp"

namespace ckpt {

namespace identity {
// Domain tags that start each digested encoding (spec/IDENTITY.md 2).
inline constexpr unsigned char kTensorTag[8] = {'C', 'K', 'P', 'T', 'T', 'N', 'S', 'R'};
inline constexpr unsigned char kMetadataTag[8] = {'C', 'K', 'P', 'T', 'M', 'E', 'T', 'A'};
inline constexpr unsigned char kRootTag[8] = {'C', 'K', 'P', 'T', 'R', 'O', 'O', 'T'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kHexLength = kDigest128HexLength;
}  // namespace identity


struct ContentPiece {
  Shape offsets, shape;  // where in the tensor (global offsets, local shape)
  std::uint64_t length = 0;      // bytes
  std::uint64_t chunk_size = 0;  // every chunk but the last is this long
  std::vector<std::uint64_t> chunk_digests;  // XXH3-64 of each chunk, in order
  std::string file;              // where the bytes are (for messages; not part of the identity)
  std::uint64_t file_offset = 0;
};

struct ContentTensor {
  std::string name;
  std::string dtype;  // safetensors spelling, or a foreign format's own (spec/FOREIGN.md 1.2)
  Shape shape;
  std::vector<ContentPiece> pieces;  // sorted by (offsets, shape) once sealed
  Digest128 digest;                  // set by seal_content
  [[nodiscard]] std::uint64_t bytes() const noexcept;
};

// Everything identity is computed over. Build tensors and metadata, then seal_content.
struct Content {
  std::string description;              // what it is, for messages: "file X", "step 300 of STORE"
  std::vector<ContentTensor> tensors;   // sorted by name once sealed; names unique
  std::vector<MetaEntry> metadata;      // sorted by key, then value, once sealed
  Digest128 metadata_digest, root;      // set by seal_content
  [[nodiscard]] const ContentTensor* find(std::string_view name) const;
};

// Sorts tensors, pieces and metadata into the canonical order and computes every digest. Two tensors
// with one name is invalid_argument (a step's shards each holding pieces of one tensor are merged
// into one tensor by the builders below, never passed twice).
[[nodiscard]] Status seal_content(Content& content);

// A shard file's tensors and metadata from its decoded index (no data read). file names the pieces.
void add_index_content(Content& content, const Index& index, std::uint64_t chunk_size, const std::string& file);

// A step opened by StepReader::open (its manifest and shards pinned): the manifest's training state, as
// the metadata entry a standalone file carries it in (kTrainingStateKey), and every shard's index.
class StepReader;
[[nodiscard]] Result<Content> content_of_step(const StepReader& step, std::string description);

// What `path` holds, from digests already recorded: a .ckpt file (its index), a step directory (its
// manifest's training state and every shard's index), a store (options.step, else its latest
// committed step), or a foreign checkpoint with a sidecar. A foreign checkpoint without one has no
// recorded digests: its data is read and hashed when options.read_foreign_data, else unsupported.
struct ContentOptions {
  std::optional<std::uint64_t> step;
  bool read_foreign_data = false;
  std::uint32_t chunk_size_log2 = 20;  // for a foreign checkpoint read without a sidecar (spec/IDENTITY.md 4.2)
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};
[[nodiscard]] Result<Content> content_of_path(FsRef fs, const std::string& path, const ContentOptions& options = {});
// The foreign case of content_of_path: from the sidecar, or by hashing the data (defined in sidecar.hpp).
[[nodiscard]] Result<Content> foreign_content(FsRef fs, const std::string& path, const ContentOptions& options);

// --- Diff (spec/IDENTITY.md 3) ------------------------------------------------------------------

struct ChunkChange {
  std::size_t piece = 0;  // position in the sealed piece list of the tensor (both sides alike)
  std::uint64_t chunk = 0;
  std::uint64_t offset = 0, length = 0;  // byte range within the piece
};

// What became of a tensor or a metadata key from one side to the other.
enum class ChangeKind : std::uint8_t { added, removed, changed };

struct TensorChange {
  using Kind = ChangeKind;
  Kind kind = Kind::changed;
  std::string name;
  const ContentTensor* a = nullptr;  // nullptr when added
  const ContentTensor* b = nullptr;  // nullptr when removed
  bool dtype_changed = false, shape_changed = false, bytes_changed = false;
  // Both sides split into the same pieces with the same chunk size: the chunks whose digests differ.
  // Otherwise the chunk lists cannot be lined up and only "the content differs" is known.
  bool chunks_comparable = false;
  std::vector<ChunkChange> chunks;
};

struct MetadataChange {
  using Kind = ChangeKind;
  Kind kind = Kind::changed;
  std::string key;
  std::optional<Value> a, b;
};

struct ContentDiff {
  std::vector<TensorChange> tensors;  // by name
  std::vector<MetadataChange> metadata;
  std::size_t tensors_unchanged = 0;
  [[nodiscard]] bool identical() const noexcept { return tensors.empty() && metadata.empty(); }
};

// Compares two sealed contents by their digests alone. The result points into a and b.
[[nodiscard]] ContentDiff diff_content(const Content& a, const Content& b);
[[nodiscard]] const char* change_kind_name(ChangeKind k) noexcept;

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/identity_inl.hpp"
#endif
