// Shard-writing steps the tests share, each one REQUIREd: the writer settings of small files, one
// piece of a tensor, a table of metadata entries.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>

namespace ckpt_test {

// 4 KiB chunks, so a few KiB of tensor spans several, and the given alignment.
[[nodiscard]] inline ckpt::WriterOptions small_writer_options(std::uint32_t alignment_log2 = ckpt::format::kDefaultAlignmentLog2) {
  ckpt::WriterOptions o;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = alignment_log2;
  return o;
}

// One piece of a tensor: begin_piece, one write of its bytes, end_piece.
inline void write_piece(ckpt::ShardWriter& w, const std::string& name, ckpt::DType dtype, const ckpt::Shape& global_shape,
                        const ckpt::Shape& offsets, const ckpt::Shape& shape, const void* data, std::size_t size) {
  REQUIRE(w.begin_piece(name, dtype, global_shape, offsets, shape).ok());
  REQUIRE(w.write(data, size).ok());
  REQUIRE(w.end_piece().ok());
}

// Finishes the writer and opens the file it wrote at path.
[[nodiscard]] inline ckpt::ShardReader finish_and_open(ckpt::FsRef fs, ckpt::ShardWriter& w, const std::string& path) {
  REQUIRE(w.finish().ok());
  auto r = ckpt::ShardReader::open(fs, path);
  REQUIRE(r.ok());
  return std::move(r).value();
}

using MetadataTable = std::vector<std::pair<std::string, ckpt::Value>>;

inline void set_metadata(ckpt::ShardWriter& w, const MetadataTable& entries) {
  for (const auto& [key, value] : entries) REQUIRE(w.set_metadata(key, value).ok());
}

}  // namespace ckpt_test
