// Test helper: shard files whose index references share blob and dims bytes (issue 9), the input
// that once made ckpt-verify allocate 8.4 GB for a 2 MB file. Every structural rule of spec 5.7
// holds except the decoder limit on referenced bytes, so only that limit can refuse the file.
#pragma once

#include <cstdint>
#include <string>

#include <ckpt/core/coding.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/shard/index.hpp>

namespace ckpt_test {

struct HostileShape {
  std::uint64_t tensors = 0;     // tensors of shape [0], each one empty piece at the data offset
  std::uint64_t metadata = 0;    // bytes-valued metadata records
  std::uint64_t blob = 1 << 20;  // blob bytes: distinct ASCII, so every substring at a new offset differs
  std::uint32_t name_length = 65535;   // every name and key [i, +name_length) of the blob: all distinct
  std::uint64_t value_length = 1 << 20;  // every value [0, +value_length): the same bytes again and again
};

// The index bytes alone (for decode_index) and the whole file (for the reader and ckpt-verify).
struct HostileShard {
  ckpt::Superblock sb;
  std::uint64_t index_offset = 0;
  std::string index;
  std::string file;
};

[[nodiscard]] inline HostileShard hostile_shared_blob_shard(const HostileShape& shape) {
  using namespace ckpt;
  HostileShard out;
  out.sb.alignment_log2 = 6;
  out.sb.chunk_size_log2 = 12;
  out.sb.data_offset = format::kSuperblockSize;
  out.index_offset = out.sb.data_offset;  // empty pieces only: the data region is empty (spec 4.2)
  const std::uint64_t n_dims = shape.tensors > 0 ? 2 : 0;  // [0, 0]: every shape, offset and piece shape
  Encoder ix;
  ix.raw(format::kIndexMagic, 8);
  ix.u64(shape.tensors);
  ix.u64(shape.tensors);
  ix.u64(0);
  ix.u64(n_dims);
  ix.u64(shape.metadata);
  ix.u64(shape.blob);
  ix.u64(0);
  for (std::uint64_t i = 0; i < shape.tensors; ++i) {
    ix.u64(i);  // name [i, +name_length)
    ix.u32(shape.name_length);
    ix.u16(static_cast<std::uint16_t>(format::DType::U8));
    ix.u16(1);
    ix.u64(0);  // shape [0]
    ix.u64(i);  // piece_first
    ix.u64(1);
  }
  for (std::uint64_t i = 0; i < shape.tensors; ++i) {
    ix.u64(i);
    ix.u64(out.sb.data_offset);
    ix.u64(0);
    ix.u64(0);
    ix.u64(0);
    ix.u64(0);  // offsets [0], shape [0]
  }
  for (std::uint64_t d = 0; d < n_dims; ++d) ix.u64(0);
  for (std::uint64_t i = 0; i < shape.metadata; ++i) {
    ix.u64(i);  // key [i, +name_length): distinct from every other key
    ix.u32(shape.name_length);
    ix.u16(static_cast<std::uint16_t>(format::ValueType::bytes));
    ix.u16(0);
    ix.u64(0);
    ix.u64(shape.value_length);
  }
  // Letters from a 64-bit LCG: a repeat of a 64 KiB substring at another offset is out of reach.
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  std::string blob(static_cast<std::size_t>(shape.blob), 'a');
  for (auto& c : blob) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>('a' + (state >> 60));  // 'a' to 'p'
  }
  ix.bytes(blob);
  out.index = ix.str();

  const auto sb = encode_superblock(out.sb);
  out.file.assign(reinterpret_cast<const char*>(sb.data()), sb.size());
  out.file += out.index;
  Footer ft;
  ft.index_offset = out.index_offset;
  ft.index_length = out.index.size();
  ft.index_digest = xxh3_64(out.index.data(), out.index.size());
  ft.uuid = out.sb.uuid;
  const auto fb = encode_footer(ft);
  out.file.append(reinterpret_cast<const char*>(fb.data()), fb.size());
  return out;
}

// The issue 9 file: 2 MiB, 16384 keys of 64 KiB and 16384 values of 1 MiB from a 1 MiB blob; decoded
// by copying it needs 16 GiB for the values alone.
[[nodiscard]] inline HostileShape issue9_shape() {
  HostileShape s;
  s.blob = std::uint64_t{1} << 20;
  s.metadata = (std::uint64_t{1} << 20) / 64;
  s.tensors = (std::uint64_t{1} << 20) / 176;  // the other half of the records: tensors and their pieces
  return s;
}

}  // namespace ckpt_test
