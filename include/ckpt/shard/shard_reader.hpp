// ckpt: opens a shard file, validates superblock, footer and index, and reads tensors or any
// hyper-rectangular slice of them, verifying the chunks each read touches.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "index.hpp"
#include "../io/posix_fs.hpp"
#include "../core/problem.hpp"

namespace ckpt {

// Whether a read checks the digests of the chunks it touches (full-file checks: verify.hpp).
enum class ReadCheck : std::uint8_t { none, touched };

class StepReader;

class ShardReader {
 public:
  // Reads and validates superblock, footer and index (detail::read_shard_head); data is not read.
  [[nodiscard]] static Result<ShardReader> open(FsRef fs, std::string path);
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;
  // A value: moving hands over the open file; the moved-from reader holds none and reads nothing.
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&& o) noexcept;
  ~ShardReader();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const Superblock& superblock() const noexcept { return superblock_; }
  [[nodiscard]] const Footer& footer() const noexcept { return footer_; }
  [[nodiscard]] const Index& index() const noexcept { return index_; }
  [[nodiscard]] std::uint64_t file_size() const noexcept { return file_size_; }
  [[nodiscard]] FsRef fs() noexcept { return fs_; }
  [[nodiscard]] FileHandle file() const noexcept { return file_; }

  // Reads a whole tensor; its pieces in this file must cover it. dst_size must equal its byte size.
  [[nodiscard]] Status read_tensor(std::string_view name, void* dst, std::size_t dst_size,
                                   ReadCheck check = ReadCheck::touched);
  // Reads the slice [offsets, offsets + shape) of a tensor, row-major, into dst.
  [[nodiscard]] Status read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                  std::size_t dst_size, ReadCheck check = ReadCheck::touched);
  // Copies the part of the slice that this file's pieces hold; returns the element count copied.
  // Multi-file readers (a sharded step) add the counts to prove full coverage.
  [[nodiscard]] Result<std::uint64_t> read_slice_partial(const TensorRecord& tensor, const Shape& offsets,
                                                         const Shape& shape, void* dst, ReadCheck check);
  // Reads one piece's bytes (piece is an index into index().pieces).
  [[nodiscard]] Status read_piece(std::size_t piece, void* dst, std::size_t dst_size, ReadCheck check = ReadCheck::touched);
  // Checks the digests of chunks [first, first + count) of a piece.
  [[nodiscard]] Status verify_piece_chunks(std::size_t piece, std::uint64_t first, std::uint64_t count);
  // Zero-copy view of a piece's bytes, verified first unless check is none (PosixFs only).
  [[nodiscard]] Result<Mapping> map_piece(std::size_t piece, ReadCheck check = ReadCheck::touched,
                                         MapMode mode = MapMode::read_only);
  // Maps the whole file once (an Fs that maps): reads unchecked (ReadCheck::none) then copy from that mapping
  // instead of calling pread, and mapped() hands it to a verification, so a shard verified and then loaded is
  // faulted in once (spec/TIERS.md 7.2). Fails when the Fs cannot map.
  [[nodiscard]] Status map_file();
  [[nodiscard]] std::string_view mapped() const noexcept {
    return std::string_view(reinterpret_cast<const char*>(mapping_.data()), mapping_.size());
  }
  // From now on remembers each chunk a checked read found good, so a verification after a load that verified
  // as it copied hashes only the rest (VerifyOptions::already_verified, spec/TIERS.md 7.2). Reads may run on
  // several threads.
  void remember_verified_chunks();
  // Whether a checked read since remember_verified_chunks() found chunk k (an index into index().chunks) good.
  [[nodiscard]] bool chunk_verified(std::uint64_t k) const noexcept;

 private:
  ShardReader(FsRef fs, std::string path, FileHandle file) : fs_(fs), path_(std::move(path)), file_(file) {}
  friend class StepReader;  // reads a slice it has already checked (check_slice) from every shard
  [[nodiscard]] Status load();
  // read_slice_partial without the slice check: callers ran check_slice against this tensor's record.
  [[nodiscard]] Result<std::uint64_t> copy_overlap(const TensorRecord& tensor, const Shape& offsets, const Shape& shape, void* dst,
                                                   ReadCheck check);
  [[nodiscard]] Status chunk_mismatch(std::size_t piece, std::uint64_t chunk, std::uint64_t found) const;
  [[nodiscard]] Status check_chunk(std::size_t piece, std::uint64_t chunk, const unsigned char* bytes) const;
  // The digest found for a chunk: good is remembered (remember_verified_chunks), bad is the error naming it.
  [[nodiscard]] Status found_digest(std::size_t piece, std::uint64_t chunk, std::uint64_t found) const;
  // Runs a copy out of mapping_ (bytes [at, at + n)); a file cut while mapped faults instead of reading:
  // reported, never a crash (io/sigbus_guard.hpp).
  template <class Copy>
  [[nodiscard]] Status from_mapping(std::uint64_t at, std::uint64_t n, Copy&& copy) const;

  FsRef fs_;
  std::string path_;
  FileHandle file_;
  std::uint64_t file_size_ = 0;
  Superblock superblock_;
  Footer footer_;
  Index index_;
  Mapping mapping_;  // map_file(): the file from offset 0, or nothing
  std::unique_ptr<std::atomic<bool>[]> verified_;  // remember_verified_chunks(): one per index_.chunks
};

// The index of a whole shard file held in memory (a shard rebuilt from parity, spec/TIERS.md 12.4), its
// superblock, footer and index validated as open() validates them; `path` names it in errors.
[[nodiscard]] Result<Index> decode_shard_index(const unsigned char* bytes, std::uint64_t size, const std::string& path);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/shard_reader_inl.hpp"
#endif
