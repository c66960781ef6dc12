// ckpt: writes one shard file in a single streaming pass, hashing each chunk as its bytes go by.
//
//   superblock | piece data (aligned) | index | footer          (spec/FORMAT.md 2)
//
// Memory use is the write buffer plus 24 bytes per chunk of index, independent of the data size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "error.hpp"
#include "hash.hpp"
#include "index.hpp"
#include "io/posix_fs.hpp"
#include "uuid.hpp"

namespace ckpt {

struct WriterOptions {
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  // true: write "<path>.tmp-<uuid>" and rename it into place at finish (a standalone save is atomic).
  // false: create path itself with O_EXCL (a store's journal already names the file, spec/JOURNAL.md).
  bool atomic_rename = true;
  // fsync the file and its directory before finish() returns.
  bool durable = true;
  std::size_t buffer_size = std::size_t{4} << 20;
  std::optional<Uuid> uuid;  // random when unset
};

// What finish() made: enough for a manifest to pin the file's exact content.
struct ShardSummary {
  std::string path;
  Uuid uuid{};
  std::uint64_t file_size = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t index_digest = 0;  // covers every chunk digest, so it pins every byte
  std::uint64_t tensor_count = 0, piece_count = 0, chunk_count = 0;
};

template <class Fs = PosixFs>
class ShardWriter {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ShardWriter>> create(Fs& fs, std::string path, WriterOptions options = {});
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();  // an unfinished writer removes its file: nothing half-written is left under the final name

  // Adds a whole tensor from one buffer of exactly its byte size.
  [[nodiscard]] Status add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                  std::size_t size);
  // Streaming: open a piece (a hyper-rectangle of a global tensor), write its bytes in any number of
  // calls, in row-major order, then end it. A tensor may get several pieces that do not overlap.
  [[nodiscard]] Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape,
                                   const Shape& offsets, const Shape& local_shape);
  [[nodiscard]] Status write(const void* data, std::size_t size);
  [[nodiscard]] Status end_piece();
  [[nodiscard]] Status set_metadata(std::string key, Value value);
  // Writes index and footer, syncs, renames into place and syncs the directory.
  [[nodiscard]] Result<ShardSummary> finish();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return position_; }
  // Chunks (offset, length, digest) of the piece ended last, so a caller can compare digests computed
  // elsewhere before finish(): a GPU save checks them against device digests (spec/GPU.md 7).
  [[nodiscard]] const std::vector<ChunkRecord>& last_piece_chunks() const noexcept {
    static const std::vector<ChunkRecord> none;
    return pieces_.empty() ? none : pieces_.back().chunks;
  }

 private:
  ShardWriter(Fs& fs, std::string path, std::string write_path, FileHandle file, WriterOptions options);
  [[nodiscard]] Status fail(Status s);
  [[nodiscard]] Status append(const void* data, std::size_t size);
  [[nodiscard]] Status pad_to(std::uint64_t offset);
  [[nodiscard]] Status flush();
  void close_chunk();

  struct OpenPiece {
    std::size_t tensor = 0;
    PieceRecord record;
    std::vector<ChunkRecord> chunks;
    std::uint64_t written = 0;
    std::uint64_t chunk_filled = 0;
  };

  Fs& fs_;
  std::string path_, write_path_;
  FileHandle file_;
  WriterOptions options_;
  Superblock superblock_;
  std::vector<unsigned char> buffer_;
  std::uint64_t buffer_start_ = 0;  // file offset of buffer_[0]
  std::uint64_t position_ = 0;      // logical end of what has been appended
  std::uint64_t data_bytes_ = 0;
  StreamHasher hasher_;
  std::optional<OpenPiece> open_;
  std::vector<TensorRecord> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_by_name_;
  std::vector<OpenPiece> pieces_;  // finished pieces in write order
  std::vector<std::vector<std::size_t>> pieces_of_tensor_;  // positions in pieces_, per tensor
  std::vector<MetaEntry> metadata_;
  std::unordered_map<std::string, std::size_t> meta_by_key_;
  Status failure_;
  bool finished_ = false;
};

}  // namespace ckpt

#include "impl/shard_writer_inl.hpp"
