// ckpt: definitions for shard_reader.hpp (spec/FORMAT.md 5.7 validation, 7.2 reads).
#pragma once

#include "../shard_reader.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstring>

namespace ckpt {

namespace detail {
// Bytes per read in read-then-hash loops, so a slice is hashed while it is still in cache and memory
// stays bounded whatever the chunk size. Measured on a freshly written file: 1 MiB 11.4 GiB/s, 4 MiB
// 11.0, 256 KiB 8.5, 64 KiB 7.9 (the cost per pread outweighs the smaller cache footprint).
inline constexpr std::size_t kReadSlice = std::size_t{1} << 20;

// Reads n bytes at off slice by slice, hashing each slice right after it lands, and returns their
// XXH3-64. Slices land one after another in dst (n bytes), or all at dst (kReadSlice bytes) with reuse.
template <class Fs>
[[nodiscard]] Result<std::uint64_t> read_hashed(Fs& fs, FileHandle f, const std::string& path, unsigned char* dst,
                                                std::size_t n, std::uint64_t off, bool reuse = false) {
  if (n <= kReadSlice) {
    CKPT_TRY(read_exact(fs, f, path, dst, n, off));
    return xxh3_64(dst, n);
  }
  StreamHasher hasher;  // streaming XXH3 gives the one-shot digest (spec 2.2)
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(kReadSlice, n - done);
    unsigned char* at = reuse ? dst : dst + done;
    CKPT_TRY(read_exact(fs, f, path, at, len, off + done));
    hasher.update(at, len);
    done += len;
  }
  return hasher.digest();
}
}  // namespace detail

template <class Fs>
Result<std::unique_ptr<ShardReader<Fs>>> ShardReader<Fs>::open(Fs& fs, std::string path) {
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) return file.status();
  std::unique_ptr<ShardReader> r(new ShardReader(fs, std::move(path), *file));
  CKPT_TRY(r->load());
  return Result<std::unique_ptr<ShardReader>>(std::move(r));  // explicit: nvcc (EDG) has no C++20 implicit move
}

template <class Fs>
ShardReader<Fs>::~ShardReader() {
  if (file_.valid()) fs_.close(file_).ignore_error();  // read-only handle: nothing to lose
}

template <class Fs>
Status ShardReader<Fs>::load() {
  auto size = fs_.file_size(file_);
  if (!size.ok()) return size.status().with_context(path_);
  file_size_ = *size;
  constexpr std::uint64_t kSmallest = format::kSuperblockSize + format::kFooterSize;
  if (file_size_ < kSmallest)
    return make_error(Code::incomplete, path_ + ": file is " + std::to_string(file_size_) +
                                            " bytes, smaller than a superblock and a footer (192)");
  unsigned char sb_bytes[format::kSuperblockSize];
  CKPT_TRY(read_exact(fs_, file_, path_, sb_bytes, sizeof sb_bytes, 0));
  auto sb = decode_superblock(sb_bytes, path_);
  if (!sb.ok()) return sb.status();
  superblock_ = *sb;
  unsigned char ft_bytes[format::kFooterSize];
  CKPT_TRY(read_exact(fs_, file_, path_, ft_bytes, sizeof ft_bytes, file_size_ - format::kFooterSize));
  auto ft = decode_footer(ft_bytes, file_size_, path_);
  if (!ft.ok()) return ft.status();
  footer_ = *ft;
  if (footer_.uuid != superblock_.uuid)
    return make_error(Code::corrupt, path_ + ": offset " + std::to_string(file_size_ - format::kFooterSize + format::ft::kUuid) +
                                         ": footer uuid " + uuid_string(footer_.uuid) + " does not match superblock uuid " +
                                         uuid_string(superblock_.uuid));
  if (footer_.index_offset < superblock_.data_offset)
    return make_error(Code::corrupt, path_ + ": index offset " + std::to_string(footer_.index_offset) + " is inside the superblock area");
  std::vector<unsigned char> index_bytes(static_cast<std::size_t>(footer_.index_length));
  CKPT_TRY(read_exact(fs_, file_, path_, index_bytes.data(), index_bytes.size(), footer_.index_offset));
  const std::uint64_t digest = xxh3_64(index_bytes.data(), index_bytes.size());
  if (digest != footer_.index_digest)
    return make_error(Code::corrupt, path_ + ": index [" + std::to_string(footer_.index_offset) + ", +" +
                                         std::to_string(footer_.index_length) + "): digest expected " +
                                         hex64(footer_.index_digest) + ", found " + hex64(digest));
  auto index = decode_index(index_bytes.data(), index_bytes.size(), superblock_, footer_.index_offset, path_);
  if (!index.ok()) return index.status();
  index_ = std::move(index).value();
  return Status();
}

template <class Fs>
Status ShardReader<Fs>::chunk_mismatch(std::size_t piece, std::uint64_t chunk, std::uint64_t found) const {
  const auto& p = index_.pieces[piece];
  const auto& t = index_.tensors[p.tensor];
  const auto& c = index_.chunks[p.chunk_first + chunk];
  return make_error(Code::corrupt, path_ + ": tensor '" + t.name + "' piece " + std::to_string(piece - t.piece_first) +
                                       " chunk " + std::to_string(chunk) + " bytes [" + std::to_string(c.offset) + ", " +
                                       std::to_string(c.offset + c.length) + "): digest expected " + hex64(c.digest) +
                                       ", found " + hex64(found));
}

template <class Fs>
Status ShardReader<Fs>::check_chunk(std::size_t piece, std::uint64_t chunk, const unsigned char* bytes) const {
  const auto& c = index_.chunks[index_.pieces[piece].chunk_first + chunk];
  const std::uint64_t found = xxh3_64(bytes, static_cast<std::size_t>(c.length));
  return found == c.digest ? Status() : chunk_mismatch(piece, chunk, found);
}

template <class Fs>
Status ShardReader<Fs>::verify_piece_chunks(std::size_t piece, std::uint64_t first, std::uint64_t count) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  if (!range_within(first, count, p.chunk_count))
    return make_error(Code::invalid_argument, path_ + ": chunks [" + std::to_string(first) + ", +" + std::to_string(count) + ") outside the piece");
  std::vector<unsigned char> scratch(static_cast<std::size_t>(std::min<std::uint64_t>({superblock_.chunk_size(), p.data_length, detail::kReadSlice})));
  for (std::uint64_t c = first; c < first + count; ++c) {
    const auto& rec = index_.chunks[p.chunk_first + c];
    auto found = detail::read_hashed(fs_, file_, path_, scratch.data(), static_cast<std::size_t>(rec.length), rec.offset, true);
    if (!found.ok()) return found.status();
    if (*found != rec.digest) return chunk_mismatch(piece, c, *found);
  }
  return Status();
}

template <class Fs>
Status ShardReader<Fs>::read_piece(std::size_t piece, void* dst, std::size_t dst_size, Verify verify) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  if (dst_size != p.data_length)
    return make_error(Code::invalid_argument, path_ + ": piece is " + std::to_string(p.data_length) + " bytes, buffer is " + std::to_string(dst_size));
  auto* out = static_cast<unsigned char*>(dst);
  if (verify == Verify::none) return read_exact(fs_, file_, path_, out, dst_size, p.data_offset);
  // Read straight into the caller's buffer, a slice at a time, and hash each slice while it is in cache.
  for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
    const auto& rec = index_.chunks[p.chunk_first + c];
    auto found = detail::read_hashed(fs_, file_, path_, out + (rec.offset - p.data_offset), static_cast<std::size_t>(rec.length), rec.offset);
    if (!found.ok()) return found.status();
    if (*found != rec.digest) return chunk_mismatch(piece, c, *found);
  }
  return Status();
}

template <class Fs>
Result<Mapping> ShardReader<Fs>::map_piece(std::size_t piece, Verify verify) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  auto mapping = fs_.map(file_, p.data_offset, static_cast<std::size_t>(p.data_length));
  if (!mapping.ok()) return mapping.status().with_context(path_);
  if (verify == Verify::touched)
    for (std::uint64_t c = 0; c < p.chunk_count; ++c)
      CKPT_TRY(check_chunk(piece, c, mapping->data() + c * superblock_.chunk_size()));
  return mapping;
}

template <class Fs>
Status ShardReader<Fs>::read_tensor(std::string_view name, void* dst, std::size_t dst_size, Verify verify) {
  const TensorRecord* t = index_.find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, path_ + ": no tensor '" + std::string(name) + "'");
  return read_slice(name, Shape(t->shape.size(), 0), t->shape, dst, dst_size, verify);
}

template <class Fs>
Status ShardReader<Fs>::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                   std::size_t dst_size, Verify verify) {
  const TensorRecord* t = index_.find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, path_ + ": no tensor '" + std::string(name) + "'");
  if (offsets.size() != t->shape.size() || shape.size() != t->shape.size())
    return make_error(Code::invalid_argument, "tensor '" + t->name + "': slice rank " + std::to_string(shape.size()) + ", tensor rank " + std::to_string(t->shape.size()));
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (offsets[d] > t->shape[d] || shape[d] > t->shape[d] - offsets[d])
      return make_error(Code::invalid_argument, "tensor '" + t->name + "': slice at " + shape_string(offsets) + " of shape " + shape_string(shape) + " exceeds " + shape_string(t->shape));
  std::uint64_t bytes = 0, elements = 0;
  (void)shape_bytes(shape, t->dtype, bytes);
  (void)shape_elements(shape, elements);
  if (bytes != dst_size)
    return make_error(Code::invalid_argument, "tensor '" + t->name + "': slice is " + std::to_string(bytes) + " bytes, buffer is " + std::to_string(dst_size));
  auto copied = read_slice_partial(*t, offsets, shape, dst, verify);
  if (!copied.ok()) return copied.status();
  if (*copied != elements)
    return make_error(Code::not_found, path_ + ": tensor '" + t->name + "': pieces in this file hold " + std::to_string(*copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

template <class Fs>
Result<std::uint64_t> ShardReader<Fs>::read_slice_partial(const TensorRecord& t, const Shape& offsets, const Shape& shape,
                                                          void* dst, Verify verify) {
  const std::size_t rank = t.shape.size();
  // Public entry point for multi-file readers: bounds are checked here too, never assumed.
  if (offsets.size() != rank || shape.size() != rank)
    return make_error(Code::invalid_argument, path_ + ": tensor '" + t.name + "': slice rank does not match tensor rank " + std::to_string(rank));
  for (std::size_t d = 0; d < rank; ++d)
    if (offsets[d] > t.shape[d] || shape[d] > t.shape[d] - offsets[d])
      return make_error(Code::invalid_argument, path_ + ": tensor '" + t.name + "': slice at " + shape_string(offsets) + " of shape " + shape_string(shape) + " exceeds " + shape_string(t.shape));
  const std::uint64_t esize = format::dtype_info(t.dtype)->size;
  const std::uint64_t chunk_size = superblock_.chunk_size();
  auto* out = static_cast<unsigned char*>(dst);
  std::uint64_t copied = 0;
  std::vector<unsigned char> scratch;
  for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) {
    const auto& p = index_.pieces[k];
    Shape lo(rank), len(rank);
    bool empty = false;
    for (std::size_t d = 0; d < rank; ++d) {
      lo[d] = std::max(offsets[d], p.offsets[d]);
      const std::uint64_t hi = std::min(offsets[d] + shape[d], p.offsets[d] + p.shape[d]);
      if (hi <= lo[d]) { empty = true; break; }
      len[d] = hi - lo[d];
    }
    if (empty) continue;
    // Merge trailing dimensions that the intersection spans fully in both piece and region: one run each.
    std::size_t outer = rank;
    std::uint64_t run_elems = 1;
    while (outer > 0) {
      const std::size_t d = outer - 1;
      run_elems *= len[d];
      --outer;
      if (len[d] != p.shape[d] || len[d] != shape[d]) break;
    }
    // Row-major strides in elements for the piece and the region.
    Shape piece_stride(rank, 1), region_stride(rank, 1);
    for (std::size_t d = rank; d-- > 1;) {
      piece_stride[d - 1] = piece_stride[d] * p.shape[d];
      region_stride[d - 1] = region_stride[d] * shape[d];
    }
    std::uint64_t runs = 1;
    for (std::size_t d = 0; d < outer; ++d) runs *= len[d];
    Shape counter(outer, 0);
    std::uint64_t loaded_chunk = ~std::uint64_t{0};
    for (std::uint64_t r = 0; r < runs; ++r) {
      std::uint64_t src = 0, dst_at = 0;
      for (std::size_t d = 0; d < rank; ++d) {
        const std::uint64_t x = lo[d] + (d < outer ? counter[d] : 0);
        src += (x - p.offsets[d]) * piece_stride[d];
        dst_at += (x - offsets[d]) * region_stride[d];
      }
      std::uint64_t src_b = src * esize, dst_b = dst_at * esize, n = run_elems * esize;
      while (n > 0) {
        const std::uint64_t c = src_b / chunk_size;
        const std::uint64_t chunk_start = c * chunk_size;
        const auto& rec = index_.chunks[p.chunk_first + c];
        const std::uint64_t in_chunk = std::min(n, chunk_start + rec.length - src_b);
        if (verify == Verify::none) {
          CKPT_TRY(read_exact(fs_, file_, path_, out + dst_b, static_cast<std::size_t>(n), p.data_offset + src_b));
          break;
        }
        if (src_b == chunk_start && in_chunk == rec.length) {
          // The run covers the whole chunk: read it in place, hashing each slice while it is in cache.
          auto found = detail::read_hashed(fs_, file_, path_, out + dst_b, static_cast<std::size_t>(rec.length), rec.offset);
          if (!found.ok()) return found.status();
          if (*found != rec.digest) return chunk_mismatch(k, c, *found);
        } else {
          if (loaded_chunk != c) {
            scratch.resize(static_cast<std::size_t>(rec.length));  // not chunk_size: that may be 1 GiB for a tiny piece
            CKPT_TRY(read_exact(fs_, file_, path_, scratch.data(), static_cast<std::size_t>(rec.length), rec.offset));
            CKPT_TRY(check_chunk(k, c, scratch.data()));
            loaded_chunk = c;
          }
          std::memcpy(out + dst_b, scratch.data() + (src_b - chunk_start), static_cast<std::size_t>(in_chunk));
        }
        src_b += in_chunk;
        dst_b += in_chunk;
        n -= in_chunk;
      }
      for (std::size_t d = outer; d-- > 0;) {
        if (++counter[d] < len[d]) break;
        counter[d] = 0;
      }
      copied += run_elems;
    }
  }
  return copied;
}

}  // namespace ckpt
