// ckpt: definitions for index.hpp (spec/FORMAT.md sections 3, 5, 6).
#pragma once

#include "../index.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstring>
#include <set>

#include "../../core/hash.hpp"

namespace ckpt {

CKPT_INLINE const TensorRecord* Index::find_tensor(std::string_view name) const {
  if (tensor_by_name_.size() != tensors.size()) const_cast<Index*>(this)->rebuild_lookup();
  const auto it = tensor_by_name_.find(std::string(name));
  return it == tensor_by_name_.end() ? nullptr : &tensors[it->second];
}

CKPT_INLINE const MetaEntry* Index::find_metadata(std::string_view key) const {
  if (meta_by_key_.size() != metadata.size()) const_cast<Index*>(this)->rebuild_lookup();
  const auto it = meta_by_key_.find(std::string(key));
  return it == meta_by_key_.end() ? nullptr : &metadata[it->second];
}

CKPT_INLINE void Index::rebuild_lookup() {
  tensor_by_name_.clear();
  meta_by_key_.clear();
  for (std::size_t i = 0; i < tensors.size(); ++i) tensor_by_name_.emplace(tensors[i].name, i);
  for (std::size_t i = 0; i < metadata.size(); ++i) meta_by_key_.emplace(metadata[i].key, i);
}

CKPT_INLINE bool shape_elements(const Shape& shape, std::uint64_t& out) noexcept {
  std::uint64_t n = 1;
  for (const auto d : shape)
    if (!checked_mul(n, d, n)) return false;
  out = n;
  return true;
}

CKPT_INLINE bool shape_bytes(const Shape& shape, DType dtype, std::uint64_t& out) noexcept {
  const auto* info = format::dtype_info(dtype);
  std::uint64_t n = 0;
  return info != nullptr && shape_elements(shape, n) && checked_mul(n, info->size, out);
}

CKPT_INLINE std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

CKPT_INLINE Result<std::uint64_t> check_slice(const TensorRecord& t, const Shape& offsets, const Shape& shape, std::size_t dst_size) {
  if (offsets.size() != t.shape.size() || shape.size() != t.shape.size())
    return make_error(Code::invalid_argument, "tensor '" + t.name + "': slice rank " + std::to_string(shape.size()) +
                                                  ", tensor rank " + std::to_string(t.shape.size()));
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (offsets[d] > t.shape[d] || shape[d] > t.shape[d] - offsets[d])
      return make_error(Code::invalid_argument, "tensor '" + t.name + "': slice at " + shape_string(offsets) + " of shape " +
                                                    shape_string(shape) + " exceeds " + shape_string(t.shape));
  std::uint64_t bytes = 0, elements = 0;
  (void)shape_bytes(shape, t.dtype, bytes);  // a slice within a valid tensor cannot overflow
  (void)shape_elements(shape, elements);
  if (dst_size != kAnySize && bytes != dst_size)
    return make_error(Code::invalid_argument, "tensor '" + t.name + "': slice is " + std::to_string(bytes) + " bytes, buffer is " +
                                                  std::to_string(dst_size));
  return elements;
}

CKPT_INLINE bool valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned c = p[i];
    std::size_t n;
    std::uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    if (n > s.size() - i - 1) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Reject overlong forms, surrogates and code points past U+10FFFF.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

namespace detail {

[[nodiscard]] CKPT_INLINE Status corrupt_at(const std::string& path, std::uint64_t offset, const std::string& what) {
  return make_error(Code::corrupt, path + ": offset " + std::to_string(offset) + ": " + what);
}

[[nodiscard]] CKPT_INLINE bool all_zero(const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace detail

CKPT_INLINE std::optional<std::pair<std::size_t, std::size_t>> find_overlapping_slices(const std::vector<SliceRef>& slices,
                                                                                  std::size_t rank) {
  std::vector<std::size_t> live;  // slices holding at least one element
  for (std::size_t i = 0; i < slices.size(); ++i) {
    std::uint64_t n = 0;
    if (shape_elements(*slices[i].shape, n) && n > 0) live.push_back(i);
  }
  if (live.size() < 2) return std::nullopt;
  if (rank == 0) return std::make_pair(live[0], live[1]);  // two scalars are the same element
  auto overlaps = [&](std::size_t a, std::size_t b) {
    const SliceRef& x = slices[a];
    const SliceRef& y = slices[b];
    for (std::size_t d = 0; d < rank; ++d)
      if (!((*x.offsets)[d] < (*y.offsets)[d] + (*y.shape)[d] && (*y.offsets)[d] < (*x.offsets)[d] + (*x.shape)[d])) return false;
    return true;
  };
  // Sweep along the dimension with the most distinct starts: sharding splits make this near-linear.
  std::size_t sweep = 0, best = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::uint64_t> starts;
    for (const auto i : live) starts.push_back((*slices[i].offsets)[d]);
    std::sort(starts.begin(), starts.end());
    const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > best) best = distinct, sweep = d;
  }
  std::sort(live.begin(), live.end(), [&](std::size_t a, std::size_t b) {
    return (*slices[a].offsets)[sweep] < (*slices[b].offsets)[sweep];
  });
  std::vector<std::size_t> active;
  for (const auto i : live) {
    const std::uint64_t start = (*slices[i].offsets)[sweep];
    active.erase(std::remove_if(active.begin(), active.end(), [&](std::size_t j) {
                   return (*slices[j].offsets)[sweep] + (*slices[j].shape)[sweep] <= start;
                 }), active.end());
    for (const auto j : active)
      if (overlaps(i, j)) return std::make_pair(std::min(i, j), std::max(i, j));
    active.push_back(i);
  }
  return std::nullopt;
}

CKPT_INLINE std::array<unsigned char, format::kSuperblockSize> encode_superblock(const Superblock& sb) {
  namespace f = format::sb;
  std::array<unsigned char, format::kSuperblockSize> b{};
  std::memcpy(b.data() + f::kMagic, format::kSuperblockMagic, 8);
  put_u32(b.data() + f::kVersion, sb.version);
  put_u32(b.data() + f::kSize, static_cast<std::uint32_t>(format::kSuperblockSize));
  put_u64(b.data() + f::kCompat, sb.compat);
  put_u64(b.data() + f::kRoCompat, sb.ro_compat);
  put_u64(b.data() + f::kIncompat, sb.incompat);
  std::memcpy(b.data() + f::kUuid, sb.uuid.data(), 16);
  put_u32(b.data() + f::kAlignmentLog2, sb.alignment_log2);
  put_u32(b.data() + f::kChunkSizeLog2, sb.chunk_size_log2);
  put_u32(b.data() + f::kHashId, sb.hash_id);
  put_u64(b.data() + f::kDataOffset, sb.data_offset);
  put_u64(b.data() + f::kDigest, xxh3_64(b.data(), f::kDigest));
  return b;
}

CKPT_INLINE Result<Superblock> decode_superblock(const unsigned char* b, const std::string& path) {
  namespace f = format::sb;
  using detail::corrupt_at;
  if (std::memcmp(b + f::kMagic, format::kSuperblockMagic, 8) != 0)
    return corrupt_at(path, 0, "not a shard file: superblock magic is not 89 43 4b 50 54 0d 0a 1a");
  const std::uint64_t want = get_u64(b + f::kDigest), got = xxh3_64(b, f::kDigest);
  if (want != got)
    return corrupt_at(path, f::kDigest, "superblock digest mismatch: expected " + hex64(want) + ", found " + hex64(got));
  Superblock sb;
  sb.version = get_u32(b + f::kVersion);
  if (sb.version != format::kVersion)
    return make_error(Code::version, path + ": format version " + std::to_string(sb.version) +
                                         " is not supported (this reader knows version 1)");
  if (get_u32(b + f::kSize) != format::kSuperblockSize)
    return corrupt_at(path, f::kSize, "superblock size must be 128, found " + std::to_string(get_u32(b + f::kSize)));
  sb.compat = get_u64(b + f::kCompat);
  sb.ro_compat = get_u64(b + f::kRoCompat);
  sb.incompat = get_u64(b + f::kIncompat);
  if ((sb.incompat & ~format::kKnownIncompat) != 0)
    return make_error(Code::version, path + ": unknown incompatible feature flags 0x" + hex64(sb.incompat));
  std::memcpy(sb.uuid.data(), b + f::kUuid, 16);
  sb.alignment_log2 = get_u32(b + f::kAlignmentLog2);
  sb.chunk_size_log2 = get_u32(b + f::kChunkSizeLog2);
  sb.hash_id = get_u32(b + f::kHashId);
  sb.data_offset = get_u64(b + f::kDataOffset);
  if (sb.alignment_log2 < format::kMinAlignmentLog2 || sb.alignment_log2 > format::kMaxAlignmentLog2)
    return corrupt_at(path, f::kAlignmentLog2, "alignment_log2 must be in [6, 21], found " + std::to_string(sb.alignment_log2));
  if (sb.chunk_size_log2 < format::kMinChunkSizeLog2 || sb.chunk_size_log2 > format::kMaxChunkSizeLog2)
    return corrupt_at(path, f::kChunkSizeLog2, "chunk_size_log2 must be in [12, 30], found " + std::to_string(sb.chunk_size_log2));
  if (sb.hash_id != format::kHashXxh3_64)
    return make_error(Code::version, path + ": hash id " + std::to_string(sb.hash_id) + " is not supported (1 = XXH3-64)");
  if (get_u32(b + f::kReserved0) != 0 || !detail::all_zero(b + f::kReserved1, 40))
    return corrupt_at(path, f::kReserved0, "reserved superblock bytes must be zero");
  const std::uint64_t want_data = align_up(format::kSuperblockSize, sb.alignment());
  if (sb.data_offset != want_data)
    return corrupt_at(path, f::kDataOffset, "data offset must be " + std::to_string(want_data) + ", found " + std::to_string(sb.data_offset));
  return sb;
}

CKPT_INLINE std::array<unsigned char, format::kFooterSize> encode_footer(const Footer& footer) {
  namespace f = format::ft;
  std::array<unsigned char, format::kFooterSize> b{};
  put_u64(b.data() + f::kIndexOffset, footer.index_offset);
  put_u64(b.data() + f::kIndexLength, footer.index_length);
  put_u64(b.data() + f::kIndexDigest, footer.index_digest);
  std::memcpy(b.data() + f::kUuid, footer.uuid.data(), 16);
  put_u32(b.data() + f::kVersion, footer.version);
  put_u64(b.data() + f::kDigest, xxh3_64(b.data(), f::kDigest));
  std::memcpy(b.data() + f::kMagic, format::kFooterMagic, 8);
  return b;
}

CKPT_INLINE Result<Footer> decode_footer(const unsigned char* b, std::uint64_t file_size, const std::string& path) {
  namespace f = format::ft;
  const std::uint64_t at = file_size - format::kFooterSize;
  if (std::memcmp(b + f::kMagic, format::kFooterMagic, 8) != 0)
    return make_error(Code::incomplete, path + ": offset " + std::to_string(at + f::kMagic) +
                                            ": no footer magic at the end of the file (incomplete write, truncated copy, or trailing bytes)");
  const std::uint64_t want = get_u64(b + f::kDigest), got = xxh3_64(b, f::kDigest);
  if (want != got)
    return detail::corrupt_at(path, at + f::kDigest, "footer digest mismatch: expected " + hex64(want) + ", found " + hex64(got));
  Footer footer;
  footer.index_offset = get_u64(b + f::kIndexOffset);
  footer.index_length = get_u64(b + f::kIndexLength);
  footer.index_digest = get_u64(b + f::kIndexDigest);
  std::memcpy(footer.uuid.data(), b + f::kUuid, 16);
  footer.version = get_u32(b + f::kVersion);
  if (get_u32(b + f::kReserved) != 0) return detail::corrupt_at(path, at + f::kReserved, "reserved footer bytes must be zero");
  if (footer.version != format::kVersion)
    return make_error(Code::version, path + ": footer format version " + std::to_string(footer.version) + " is not supported");
  // The index ends exactly where the footer begins (spec 6): no bytes are unaccounted for.
  if (footer.index_offset > at || footer.index_length != at - footer.index_offset)
    return detail::corrupt_at(path, at, "index [" + std::to_string(footer.index_offset) + ", +" +
                                            std::to_string(footer.index_length) + ") does not end at the footer (offset " +
                                            std::to_string(at) + ")");
  if (footer.index_length > format::kMaxIndexLength || footer.index_length < format::kIndexHeaderSize)
    return detail::corrupt_at(path, at, "index length " + std::to_string(footer.index_length) + " is outside [64, 2^32]");
  return footer;
}

CKPT_INLINE std::string encode_index(const Index& index) {
  std::string blob;
  std::vector<std::uint64_t> dims;
  Encoder tensors, pieces, chunks, metas;
  for (const auto& t : index.tensors) {
    tensors.u64(blob.size());
    tensors.u32(static_cast<std::uint32_t>(t.name.size()));
    blob += t.name;
    tensors.u16(static_cast<std::uint16_t>(t.dtype));
    tensors.u16(static_cast<std::uint16_t>(t.shape.size()));
    tensors.u64(dims.size());
    dims.insert(dims.end(), t.shape.begin(), t.shape.end());
    tensors.u64(t.piece_first);
    tensors.u64(t.piece_count);
  }
  for (const auto& p : index.pieces) {
    pieces.u64(p.tensor);
    pieces.u64(p.data_offset);
    pieces.u64(p.data_length);
    pieces.u64(p.chunk_first);
    pieces.u64(p.chunk_count);
    pieces.u64(dims.size());
    dims.insert(dims.end(), p.offsets.begin(), p.offsets.end());
    dims.insert(dims.end(), p.shape.begin(), p.shape.end());
  }
  for (const auto& c : index.chunks) {
    chunks.u64(c.offset);
    chunks.u64(c.length);
    chunks.u64(c.digest);
  }
  for (const auto& m : index.metadata) {
    metas.u64(blob.size());
    metas.u32(static_cast<std::uint32_t>(m.key.size()));
    blob += m.key;
    metas.u16(static_cast<std::uint16_t>(m.value.type()));
    metas.u16(0);
    const auto& v = m.value;
    if (v.is_int()) { metas.u64(static_cast<std::uint64_t>(v.as_int())); metas.u64(0); }
    else if (v.is_float()) { metas.u64(f64_bits(v.as_float())); metas.u64(0); }
    else if (v.is_bool()) { metas.u64(v.as_bool() ? 1 : 0); metas.u64(0); }
    else {
      const std::string& s = v.is_string() ? v.as_string() : v.as_bytes();
      metas.u64(blob.size());
      metas.u64(s.size());
      blob += s;
    }
  }
  Encoder out;
  out.raw(format::kIndexMagic, 8);
  out.u64(index.tensors.size());
  out.u64(index.pieces.size());
  out.u64(index.chunks.size());
  out.u64(dims.size());
  out.u64(index.metadata.size());
  out.u64(blob.size());
  out.u64(0);
  out.bytes(tensors.str());
  out.bytes(pieces.str());
  out.bytes(chunks.str());
  for (const auto d : dims) out.u64(d);
  out.bytes(metas.str());
  out.bytes(blob);
  return std::move(out.str());
}

namespace detail {

// decode_index in its steps, over one index's bytes: the header and its tables, each tensor with its
// pieces and their chunks, the layout of the data region, the metadata. Each step returns the first
// corruption it finds (spec 5).
class IndexDecoder {
 public:
  IndexDecoder(const unsigned char* bytes, std::size_t size, const Superblock& sb, std::uint64_t index_offset,
               const std::string& path)
      : bytes_(bytes), size_(size), sb_(sb), index_offset_(index_offset), path_(path), budget_(size) {}

  // The header: magic, counts, reserved bytes, and tables that add up to the index length exactly.
  [[nodiscard]] Status tables() {
    namespace x = format::ix;
    if (size_ < format::kIndexHeaderSize) return corrupt_at(path_, index_offset_, "index shorter than its 64-byte header");
    if (std::memcmp(bytes_, format::kIndexMagic, 8) != 0) return corrupt_at(path_, index_offset_, "index magic is not CKPTINDX");
    n_tensors_ = get_u64(bytes_ + x::kTensorCount);
    n_pieces_ = get_u64(bytes_ + x::kPieceCount);
    n_chunks_ = get_u64(bytes_ + x::kChunkCount);
    n_dims_ = get_u64(bytes_ + x::kDimCount);
    n_meta_ = get_u64(bytes_ + x::kMetaCount);
    blob_size_ = get_u64(bytes_ + x::kBlobSize);
    if (get_u64(bytes_ + x::kReserved) != 0) return corrupt_at(path_, index_offset_ + x::kReserved, "reserved index bytes must be zero");
    // Table sizes are computed with overflow checks, then must add up to the index length exactly.
    std::uint64_t total = format::kIndexHeaderSize, part = 0;
    const std::pair<std::uint64_t, std::size_t> tables[] = {{n_tensors_, format::kTensorRecordSize},
                                                            {n_pieces_, format::kPieceRecordSize},
                                                            {n_chunks_, format::kChunkRecordSize},
                                                            {n_dims_, format::kDimRecordSize},
                                                            {n_meta_, format::kMetaRecordSize},
                                                            {blob_size_, 1}};
    for (int i = 0; i < 6; ++i) {
      table_at_[i] = total;
      if (!checked_mul(tables[i].first, tables[i].second, part) || !checked_add(total, part, total))
        return corrupt_at(path_, index_offset_ + 8, "index table counts overflow");
    }
    if (total != size_)
      return corrupt_at(path_, index_offset_, "index tables add up to " + std::to_string(total) + " bytes, index is " + std::to_string(size_));
    dims_at_ = bytes_ + table_at_[3];
    blob_ = bytes_ + table_at_[5];
    return Status();
  }

  // The tensor records, each with its pieces; the chunk records, and that every piece and chunk has a tensor.
  [[nodiscard]] Status tensors(Index& index) {
    namespace x = format::ix;
    index.tensors.resize(static_cast<std::size_t>(n_tensors_));
    index.pieces.resize(static_cast<std::size_t>(n_pieces_));
    index.chunks.resize(static_cast<std::size_t>(n_chunks_));
    for (std::uint64_t i = 0; i < n_chunks_; ++i) {
      const unsigned char* r = bytes_ + table_at_[2] + i * format::kChunkRecordSize;
      index.chunks[i] = ChunkRecord{get_u64(r), get_u64(r + 8), get_u64(r + 16)};
    }
    std::uint64_t next_piece = 0, next_chunk = 0;
    for (std::uint64_t i = 0; i < n_tensors_; ++i) {
      CKPT_TRY(tensor(index, i, next_piece));
      const auto& t = index.tensors[i];
      for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) CKPT_TRY(piece(index, i, k, next_chunk));
    }
    if (next_piece != n_pieces_) return corrupt_at(path_, index_offset_ + x::kPieceCount, std::to_string(n_pieces_ - next_piece) + " pieces belong to no tensor");
    if (next_chunk != n_chunks_) return corrupt_at(path_, index_offset_ + x::kChunkCount, std::to_string(n_chunks_ - next_chunk) + " chunks belong to no piece");
    return Status();
  }

  // Where the data lies: packed in file order without holes, the index right after it, pieces of one
  // tensor disjoint, tensor names unique.
  [[nodiscard]] Status layout(const Index& index) const {
    // Piece data never overlaps in the file, and the index starts right after the data (spec 4.2).
    std::vector<std::size_t> order(index.pieces.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& pa = index.pieces[a];
      const auto& pb = index.pieces[b];
      return pa.data_offset != pb.data_offset ? pa.data_offset < pb.data_offset : pa.data_length < pb.data_length;
    });
    // No holes (spec 4.2): in file order each piece starts at the first aligned offset after the one before.
    std::uint64_t data_end = sb_.data_offset;
    for (const auto k : order) {
      const auto& p = index.pieces[k];
      const std::uint64_t want = align_up(data_end, sb_.alignment());
      if (p.data_offset != want)
        return corrupt_at(path_, p.data_offset, "data of tensor '" + index.tensors[p.tensor].name + "' starts at " + std::to_string(p.data_offset) + ", expected " + std::to_string(want) + " (pieces are packed in file order, aligned)");
      data_end = p.data_offset + p.data_length;
    }
    if (index_offset_ != align_up(data_end, 8))
      return corrupt_at(path_, index_offset_, "index must start at " + std::to_string(align_up(data_end, 8)) + " (data ends at " + std::to_string(data_end) + ")");

    // Pieces of one tensor never overlap in its global index space (spec 4.3).
    for (const auto& t : index.tensors) {
      std::vector<SliceRef> slices;
      slices.reserve(static_cast<std::size_t>(t.piece_count));
      for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k)
        slices.push_back(SliceRef{&index.pieces[k].offsets, &index.pieces[k].shape});
      if (const auto hit = find_overlapping_slices(slices, t.shape.size()))
        return corrupt_at(path_, index_offset_ + table_at_[1] + (t.piece_first + hit->second) * format::kPieceRecordSize,
                          "tensor '" + t.name + "': pieces " + std::to_string(hit->first) + " and " + std::to_string(hit->second) + " overlap");
    }

    std::set<std::string_view> names;  // the type journal and manifest check names with: header-only parse time (spec/LAYOUT.md 5)
    for (const auto& t : index.tensors)
      if (!names.insert(t.name).second) return corrupt_at(path_, index_offset_, "tensor name '" + t.name + "' appears twice");
    return Status();
  }

  // The metadata records: keys unique, values of a known type within the blob.
  [[nodiscard]] Status metadata(Index& index) {
    index.metadata.resize(static_cast<std::size_t>(n_meta_));
    std::set<std::string_view> names;
    for (std::uint64_t i = 0; i < n_meta_; ++i) {
      CKPT_TRY(meta_entry(index.metadata[i], i));
      if (!names.insert(index.metadata[i].key).second)
        return corrupt_at(path_, index_offset_ + table_at_[4] + i * format::kMetaRecordSize, "metadata key '" + index.metadata[i].key + "' appears twice");
    }
    return Status();
  }

 private:
  static constexpr const char* kText = "names, keys and string and bytes values";
  static constexpr const char* kDims = "shapes, offsets and piece shapes";

  // Decoder limit (issue 9): ranges may be shared (spec 5.5), but all of them together may reference
  // at most the index length of blob bytes and of dims bytes, charged before anything is copied, so a
  // 2 MB file of overlapping ranges cannot decode to gigabytes.
  [[nodiscard]] Status over_budget(std::uint64_t& used, std::uint64_t bytes_wanted, std::uint64_t at, const std::string& what,
                                   const char* kind) const {
    if (bytes_wanted <= budget_ - used) {
      used += bytes_wanted;
      return Status();
    }
    return corrupt_at(path_, at, what + ": " + kind + " references total more than " + std::to_string(budget_) +
                                     " bytes, the index length (decoder limit: shared ranges may not outgrow the index); expected at most " +
                                     std::to_string(budget_ - used) + " more, found " + std::to_string(bytes_wanted));
  }
  bool blob_string(std::uint64_t off, std::uint64_t len, std::string& out) const {
    if (!range_within(off, len, blob_size_)) return false;
    out.assign(reinterpret_cast<const char*>(blob_ + off), static_cast<std::size_t>(len));
    return true;
  }
  bool read_dims(std::uint64_t first, std::uint64_t count, Shape& out) const {
    if (!range_within(first, count, n_dims_)) return false;
    out.resize(static_cast<std::size_t>(count));
    for (std::uint64_t k = 0; k < count; ++k) out[k] = get_u64(dims_at_ + (first + k) * 8);
    return true;
  }

  // Tensor record i: name, dtype, shape, and its pieces' place in the piece table.
  [[nodiscard]] Status tensor(Index& index, std::uint64_t i, std::uint64_t& next_piece) {
    const std::uint64_t rec_at = index_offset_ + table_at_[0] + i * format::kTensorRecordSize;
    const unsigned char* r = bytes_ + table_at_[0] + i * format::kTensorRecordSize;
    auto& t = index.tensors[i];
    const std::uint64_t name_off = get_u64(r);
    const std::uint32_t name_len = get_u32(r + 8);
    const std::uint16_t dtype = get_u16(r + 12), ndim = get_u16(r + 14);
    const std::uint64_t shape_first = get_u64(r + 16);
    t.piece_first = get_u64(r + 24);
    t.piece_count = get_u64(r + 32);
    const std::string which = "tensor " + std::to_string(i);
    if (range_within(name_off, name_len, blob_size_)) CKPT_TRY(over_budget(text_used_, name_len, rec_at, which + " name", kText));
    if (name_len == 0 || name_len > format::kMaxNameLength || !blob_string(name_off, name_len, t.name))
      return corrupt_at(path_, rec_at, which + ": name [" + std::to_string(name_off) + ", +" + std::to_string(name_len) + ") is empty or outside the blob of " + std::to_string(blob_size_) + " bytes");
    if (!valid_utf8(t.name)) return corrupt_at(path_, rec_at, which + ": name is not valid UTF-8");
    if (format::dtype_info(dtype) == nullptr) return corrupt_at(path_, rec_at + 12, "tensor '" + t.name + "': unknown dtype code " + std::to_string(dtype));
    t.dtype = static_cast<DType>(dtype);
    if (ndim > format::kMaxRank) return corrupt_at(path_, rec_at + 14, "tensor '" + t.name + "': rank " + std::to_string(ndim) + " exceeds 64");
    if (range_within(shape_first, ndim, n_dims_)) CKPT_TRY(over_budget(dims_used_, std::uint64_t{ndim} * 8, rec_at + 16, "tensor '" + t.name + "' shape", kDims));
    if (!read_dims(shape_first, ndim, t.shape)) return corrupt_at(path_, rec_at + 16, "tensor '" + t.name + "': shape outside the dims table");
    std::uint64_t tensor_bytes = 0;
    if (!shape_bytes(t.shape, t.dtype, tensor_bytes)) return corrupt_at(path_, rec_at + 16, "tensor '" + t.name + "': shape " + shape_string(t.shape) + " overflows 64 bits");
    // Pieces are stored per tensor, in tensor order (spec 5.3): a canonical layout leaves nothing to guess.
    if (t.piece_first != next_piece || t.piece_count == 0 || t.piece_count > format::kMaxPiecesPerTensor ||
        !range_within(t.piece_first, t.piece_count, n_pieces_))
      return corrupt_at(path_, rec_at + 24, "tensor '" + t.name + "': pieces [" + std::to_string(t.piece_first) + ", +" + std::to_string(t.piece_count) + ") expected to start at " + std::to_string(next_piece) + " with 1 to 4096 pieces within " + std::to_string(n_pieces_));
    next_piece += t.piece_count;
    return Status();
  }

  // Piece record k of tensor i: its slice, its data range, and its chunks.
  [[nodiscard]] Status piece(Index& index, std::uint64_t i, std::uint64_t k, std::uint64_t& next_chunk) {
    const auto& t = index.tensors[i];
    const std::size_t ndim = t.shape.size();
    const std::uint64_t chunk_size = sb_.chunk_size();
    const std::uint64_t prec_at = index_offset_ + table_at_[1] + k * format::kPieceRecordSize;
    const unsigned char* pr = bytes_ + table_at_[1] + k * format::kPieceRecordSize;
    auto& p = index.pieces[k];
    p.tensor = get_u64(pr);
    p.data_offset = get_u64(pr + 8);
    p.data_length = get_u64(pr + 16);
    p.chunk_first = get_u64(pr + 24);
    p.chunk_count = get_u64(pr + 32);
    const std::uint64_t dims_first = get_u64(pr + 40);
    const std::string pwhich = "tensor '" + t.name + "' piece " + std::to_string(k - t.piece_first);
    if (p.tensor != i) return corrupt_at(path_, prec_at, pwhich + ": owner is " + std::to_string(p.tensor) + ", expected " + std::to_string(i));
    if (range_within(dims_first, std::uint64_t{ndim} * 2, n_dims_)) CKPT_TRY(over_budget(dims_used_, std::uint64_t{ndim} * 16, prec_at + 40, pwhich + " offsets and shape", kDims));
    if (!read_dims(dims_first, ndim, p.offsets) || (ndim > 0 && !read_dims(dims_first + ndim, ndim, p.shape)))
      return corrupt_at(path_, prec_at + 40, pwhich + ": offsets and shape outside the dims table");
    if (ndim == 0) p.shape.clear();
    for (std::size_t d = 0; d < ndim; ++d)
      if (p.offsets[d] > t.shape[d] || p.shape[d] > t.shape[d] - p.offsets[d])
        return corrupt_at(path_, prec_at + 40, pwhich + ": slice offsets " + shape_string(p.offsets) + " shape " + shape_string(p.shape) + " exceeds global shape " + shape_string(t.shape));
    std::uint64_t want_len = 0;
    if (!shape_bytes(p.shape, t.dtype, want_len) || want_len != p.data_length)
      return corrupt_at(path_, prec_at + 16, pwhich + ": data length " + std::to_string(p.data_length) + ", expected " + std::to_string(want_len) + " for shape " + shape_string(p.shape));
    if (p.data_offset % sb_.alignment() != 0 || p.data_offset < sb_.data_offset ||
        !range_within(p.data_offset, p.data_length, index_offset_))
      return corrupt_at(path_, prec_at + 8, pwhich + ": data [" + std::to_string(p.data_offset) + ", +" + std::to_string(p.data_length) + ") is unaligned or outside the data region [" + std::to_string(sb_.data_offset) + ", " + std::to_string(index_offset_) + ")");
    const std::uint64_t want_chunks = p.data_length / chunk_size + (p.data_length % chunk_size != 0);
    if (p.chunk_first != next_chunk || p.chunk_count != want_chunks || !range_within(p.chunk_first, p.chunk_count, n_chunks_))
      return corrupt_at(path_, prec_at + 24, pwhich + ": chunks [" + std::to_string(p.chunk_first) + ", +" + std::to_string(p.chunk_count) + "), expected [" + std::to_string(next_chunk) + ", +" + std::to_string(want_chunks) + ")");
    next_chunk += p.chunk_count;
    for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
      const auto& ch = index.chunks[p.chunk_first + c];
      const std::uint64_t want_off = p.data_offset + c * chunk_size;
      const std::uint64_t want_clen = std::min(chunk_size, p.data_length - c * chunk_size);
      if (ch.offset != want_off || ch.length != want_clen)
        return corrupt_at(path_, index_offset_ + table_at_[2] + (p.chunk_first + c) * format::kChunkRecordSize,
                          pwhich + " chunk " + std::to_string(c) + ": range [" + std::to_string(ch.offset) + ", +" + std::to_string(ch.length) + "), expected [" + std::to_string(want_off) + ", +" + std::to_string(want_clen) + ")");
    }
    return Status();
  }

  // Metadata record i: its key and value (the key's uniqueness is metadata()'s).
  [[nodiscard]] Status meta_entry(MetaEntry& m, std::uint64_t i) {
    const std::uint64_t rec_at = index_offset_ + table_at_[4] + i * format::kMetaRecordSize;
    const unsigned char* r = bytes_ + table_at_[4] + i * format::kMetaRecordSize;
    const std::uint64_t key_off = get_u64(r);
    const std::uint32_t key_len = get_u32(r + 8);
    const std::uint16_t type = get_u16(r + 12);
    const std::uint64_t value = get_u64(r + 16), value_len = get_u64(r + 24);
    const std::string which = "metadata " + std::to_string(i);
    if (range_within(key_off, key_len, blob_size_)) CKPT_TRY(over_budget(text_used_, key_len, rec_at, which + " key", kText));
    if ((type == 4 || type == 5) && range_within(value, value_len, blob_size_))
      CKPT_TRY(over_budget(text_used_, value_len, rec_at + 24, which + " value", kText));
    if (key_len == 0 || key_len > format::kMaxNameLength || !blob_string(key_off, key_len, m.key) || !valid_utf8(m.key))
      return corrupt_at(path_, rec_at, "metadata " + std::to_string(i) + ": key is empty, outside the blob, or not UTF-8");
    if (get_u16(r + 14) != 0) return corrupt_at(path_, rec_at + 14, "metadata '" + m.key + "': reserved bytes must be zero");
    const bool scalar = type >= 1 && type <= 3;
    if (scalar && value_len != 0) return corrupt_at(path_, rec_at + 24, "metadata '" + m.key + "': scalar with a value length");
    switch (static_cast<format::ValueType>(type)) {
      case format::ValueType::int64: m.value = Value(static_cast<std::int64_t>(value)); break;
      case format::ValueType::float64: m.value = Value(bits_f64(value)); break;
      case format::ValueType::boolean:
        if (value > 1) return corrupt_at(path_, rec_at + 16, "metadata '" + m.key + "': bool must be 0 or 1, found " + std::to_string(value));
        m.value = Value(value == 1);
        break;
      case format::ValueType::string:
      case format::ValueType::bytes: {
        std::string s;
        if (!blob_string(value, value_len, s)) return corrupt_at(path_, rec_at + 16, "metadata '" + m.key + "': value outside the blob");
        if (type == 4 && !valid_utf8(s)) return corrupt_at(path_, rec_at + 16, "metadata '" + m.key + "': string is not valid UTF-8");
        m.value = type == 4 ? Value(std::move(s)) : Value(Bytes{std::move(s)});
        break;
      }
      default: return corrupt_at(path_, rec_at + 12, "metadata '" + m.key + "': unknown value type " + std::to_string(type));
    }
    return Status();
  }

  const unsigned char* bytes_;
  std::size_t size_;
  const Superblock& sb_;
  std::uint64_t index_offset_;
  const std::string& path_;
  std::uint64_t n_tensors_ = 0, n_pieces_ = 0, n_chunks_ = 0, n_dims_ = 0, n_meta_ = 0, blob_size_ = 0;
  std::uint64_t table_at_[6] = {};
  const unsigned char* dims_at_ = nullptr;
  const unsigned char* blob_ = nullptr;
  const std::uint64_t budget_;  // the index length: what all ranges together may reference (over_budget)
  std::uint64_t text_used_ = 0, dims_used_ = 0;
};

}  // namespace detail

CKPT_INLINE Result<Index> decode_index(const unsigned char* bytes, std::size_t size, const Superblock& sb,
                                  std::uint64_t index_offset, const std::string& path) {
  detail::IndexDecoder decoder(bytes, size, sb, index_offset, path);
  CKPT_TRY(decoder.tables());
  Index index;
  CKPT_TRY(decoder.tensors(index));
  CKPT_TRY(decoder.layout(index));
  CKPT_TRY(decoder.metadata(index));
  index.rebuild_lookup();
  return index;
}

}  // namespace ckpt
