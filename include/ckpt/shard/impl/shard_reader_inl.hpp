// ckpt: definitions for shard_reader.hpp (spec/FORMAT.md 5.7 validation, 7.2 reads).
#pragma once

#include "../shard_reader.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <functional>
#include <cstring>

#include "../../core/bulk_copy.hpp"
#include "../../io/prefault.hpp"
#include "../../io/sigbus_guard.hpp"

namespace ckpt {

namespace detail {
// Bytes per read in read-then-hash loops, so a slice is hashed while it is still in cache and memory
// stays bounded whatever the chunk size. Measured on a freshly written file: 1 MiB 11.4 GiB/s, 4 MiB
// 11.0, 256 KiB 8.5, 64 KiB 7.9 (the cost per pread outweighs the smaller cache footprint).
inline constexpr std::size_t kReadWindow = std::size_t{1} << 20;

// Reads n bytes at off slice by slice, hashing each slice right after it lands, and returns their
// XXH3-64. Slices land one after another in dst (n bytes), or all at dst (kReadWindow bytes) with reuse.
[[nodiscard]] CKPT_INLINE Result<std::uint64_t> read_hashed(FsRef fs, FileHandle f, const std::string& path, unsigned char* dst,
                                                std::size_t n, std::uint64_t off, bool reuse = false) {
  if (n <= kReadWindow) {
    CKPT_TRY(read_exact(fs, f, path, dst, n, off));
    return xxh3_64(dst, n);
  }
  StreamHasher hasher;  // streaming XXH3 gives the one-shot digest (spec 2.2)
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(kReadWindow, n - done);
    unsigned char* at = reuse ? dst : dst + done;
    CKPT_TRY(read_exact(fs, f, path, at, len, off + done));
    hasher.update(at, len);
    done += len;
  }
  return hasher.digest();
}

[[nodiscard]] CKPT_INLINE Problem make_problem(Code code, std::string region, std::uint64_t offset, std::uint64_t length,
                                          std::string message) {
  Problem p;
  p.code = code;
  p.region = std::move(region);
  p.offset = offset;
  p.length = length;
  p.message = std::move(message);
  return p;
}

// Reads the fields of a superblock whose digest failed, when they are still in range, so the rest
// of the file can be checked (the damage is reported either way).
[[nodiscard]] CKPT_INLINE bool salvage_superblock(const unsigned char* b, Superblock& sb) {
  namespace f = format::sb;
  if (std::memcmp(b, format::kSuperblockMagic, 8) != 0) return false;
  sb.alignment_log2 = get_u32(b + f::kAlignmentLog2);
  sb.chunk_size_log2 = get_u32(b + f::kChunkSizeLog2);
  if (sb.alignment_log2 < format::kMinAlignmentLog2 || sb.alignment_log2 > format::kMaxAlignmentLog2) return false;
  if (sb.chunk_size_log2 < format::kMinChunkSizeLog2 || sb.chunk_size_log2 > format::kMaxChunkSizeLog2) return false;
  std::memcpy(sb.uuid.data(), b + f::kUuid, 16);
  sb.data_offset = align_up(format::kSuperblockSize, sb.alignment());
  return true;
}


// What a shard's head holds once validated.
struct ShardHead {
  std::uint64_t file_size = 0;  // up to the end of the footer (trailing bytes after it, when salvaged, left out)
  Superblock superblock;
  Footer footer;
  Index index;
};

// The one function that reads and validates a shard's head (spec/FORMAT.md 7.2): size, superblock,
// footer, footer against superblock, index digest, index. Each problem goes to `problems` naming
// region, byte range, expected and found. Without salvage (a reader) the first problem ends it. With
// salvage (the verifier) a superblock whose digest fails is still read for its fields where they are
// in range, and a footer followed by extra bytes is found and the extra bytes reported, so the rest of
// the file can be checked. The Result fails when the head cannot be used; problems then says why.
// `read_at(buf, n, off)` reads n bytes at off of the file: from a file system, or from memory (a shard rebuilt from
// parity, spec/TIERS.md 12.4).
using ReadAt = std::function<Status(void* buf, std::size_t n, std::uint64_t off)>;
[[nodiscard]] CKPT_INLINE Result<ShardHead> read_shard_head(const ReadAt& read_at, const std::string& path, std::uint64_t file_size,
                                                bool salvage, std::vector<Problem>& problems) {
  auto problem = [&](Problem p) {
    if (p.message.rfind(path, 0) != 0) p.message = path + ": " + p.message;
    problems.push_back(std::move(p));
  };
  auto read_status = [&](const Status& s, const char* region, std::uint64_t off, std::uint64_t len) {
    problem(make_problem(s.code() == Code::incomplete ? Code::incomplete : Code::io, region, off, len, s.message()));
  };
  auto unusable = [&]() -> Result<ShardHead> {
    return make_error(problems.back().code, problems.back().message);  // every exit below records its problem first
  };
  if (file_size < format::kSuperblockSize + format::kFooterSize) {
    problem(make_problem(Code::incomplete, "file", 0, file_size,
                         "file is " + std::to_string(file_size) + " bytes, smaller than a superblock and a footer (192): incomplete"));
    return unusable();
  }
  // Superblock (spec 3).
  unsigned char sb_bytes[format::kSuperblockSize];
  if (Status s = read_at(sb_bytes, sizeof sb_bytes, 0); !s.ok()) {
    read_status(s, "superblock", 0, format::kSuperblockSize);
    return unusable();
  }
  Superblock sb;
  if (auto decoded = decode_superblock(sb_bytes, path); decoded.ok()) {
    sb = *decoded;
  } else {
    Problem p = make_problem(decoded.status().code(), "superblock", 0, format::kSuperblockSize, decoded.status().message());
    const std::uint64_t stored = get_u64(sb_bytes + format::sb::kDigest), computed = xxh3_64(sb_bytes, format::sb::kDigest);
    if (std::memcmp(sb_bytes, format::kSuperblockMagic, 8) == 0 && stored != computed) {  // digests only for a digest mismatch
      p.expected = hex64(stored);
      p.found = hex64(computed);
    }
    problem(std::move(p));
    if (!salvage || !salvage_superblock(sb_bytes, sb)) return unusable();
  }

  // Footer (spec 6); bytes after a valid footer are named as trailing data.
  unsigned char ft_bytes[format::kFooterSize];
  if (Status s = read_at(ft_bytes, sizeof ft_bytes, file_size - format::kFooterSize); !s.ok()) {
    read_status(s, "footer", file_size - format::kFooterSize, format::kFooterSize);
    return unusable();
  }
  auto footer = decode_footer(ft_bytes, file_size, path);
  if (!footer.ok()) {
    problem(make_problem(footer.status().code(), "footer", file_size - format::kFooterSize, format::kFooterSize,
                         footer.status().message()));
    if (!salvage) return unusable();
    // Look back for a footer followed by extra bytes (a file appended to, or a copy padded).
    const std::uint64_t window = std::min<std::uint64_t>(file_size, std::uint64_t{1} << 20);
    std::vector<unsigned char> tail(static_cast<std::size_t>(window));
    if (!read_at(tail.data(), tail.size(), file_size - window).ok()) return unusable();
    for (std::size_t q = tail.size() - 8; q >= format::ft::kMagic && q > 0; --q) {
      if (std::memcmp(tail.data() + q, format::kFooterMagic, 8) != 0) continue;
      const std::uint64_t end = file_size - window + q + 8;
      auto candidate = decode_footer(tail.data() + q - format::ft::kMagic, end, path);
      if (!candidate.ok()) continue;
      problems.pop_back();  // the footer is intact: the only damage is what follows it
      problem(make_problem(Code::corrupt, "file", end, file_size - end,
                           std::to_string(file_size - end) + " bytes of trailing data after the footer that ends at offset " + std::to_string(end)));
      footer = candidate;
      file_size = end;
      break;
    }
    if (!footer.ok()) return unusable();
  }
  if (footer->uuid != sb.uuid) {
    Problem p = make_problem(Code::corrupt, "footer", file_size - format::kFooterSize + format::ft::kUuid, 16,
                             "footer uuid does not match the superblock: the footer belongs to another file");
    p.expected = uuid_string(sb.uuid);
    p.found = uuid_string(footer->uuid);
    problem(std::move(p));
    if (!salvage) return unusable();
  }
  if (footer->index_offset < sb.data_offset) {
    problem(make_problem(Code::corrupt, "footer", file_size - format::kFooterSize, format::kFooterSize,
                         "index offset " + std::to_string(footer->index_offset) + " lies inside the superblock area"));
    return unusable();
  }

  // Index (spec 5).
  std::vector<unsigned char> index_bytes(static_cast<std::size_t>(footer->index_length));
  if (Status s = read_at(index_bytes.data(), index_bytes.size(), footer->index_offset); !s.ok()) {
    read_status(s, "index", footer->index_offset, footer->index_length);
    return unusable();
  }
  const std::uint64_t index_digest = xxh3_64(index_bytes.data(), index_bytes.size());
  if (index_digest != footer->index_digest) {
    Problem p = make_problem(Code::corrupt, "index", footer->index_offset, footer->index_length,
                             "index [" + std::to_string(footer->index_offset) + ", " + std::to_string(footer->index_offset + footer->index_length) +
                                 "): digest expected " + hex64(footer->index_digest) + ", found " + hex64(index_digest));
    p.expected = hex64(footer->index_digest);
    p.found = hex64(index_digest);
    problem(std::move(p));
    return unusable();
  }
  auto decoded_index = decode_index(index_bytes.data(), index_bytes.size(), sb, footer->index_offset, path);
  if (!decoded_index.ok()) {
    problem(make_problem(decoded_index.status().code(), "index", footer->index_offset, footer->index_length,
                         decoded_index.status().message()));
    return unusable();
  }
  ShardHead head;
  head.file_size = file_size;
  head.superblock = sb;
  head.footer = *footer;
  head.index = std::move(decoded_index).value();
  return head;
}
[[nodiscard]] CKPT_INLINE Result<ShardHead> read_shard_head(FsRef fs, FileHandle file, const std::string& path, std::uint64_t file_size,
                                                bool salvage, std::vector<Problem>& problems) {
  return read_shard_head([&](void* buf, std::size_t n, std::uint64_t off) { return read_exact(fs, file, path, buf, n, off); }, path,
                         file_size, salvage, problems);
}
}  // namespace detail

CKPT_INLINE Result<Index> decode_shard_index(const unsigned char* bytes, std::uint64_t size, const std::string& path) {
  std::vector<Problem> problems;
  auto head = detail::read_shard_head(
      [&](void* buf, std::size_t n, std::uint64_t off) -> Status {
        if (off > size || n > size - off)
          return make_error(Code::incomplete, path + ": [" + std::to_string(off) + ", +" + std::to_string(n) + ") is past its " +
                                                  std::to_string(size) + " bytes");
        std::memcpy(buf, bytes + off, n);
        return Status();
      },
      path, size, false, problems);
  if (!head.ok()) return head.status();
  return std::move(head->index);
}

CKPT_INLINE Result<ShardReader> ShardReader::open(FsRef fs, std::string path) {
  auto file = fs.open(path, OpenMode::read);
  if (!file.ok()) return file.status();
  ShardReader r(fs, std::move(path), *file);
  CKPT_TRY(r.load());
  return Result<ShardReader>(std::move(r));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE ShardReader::ShardReader(ShardReader&& o) noexcept
    : fs_(o.fs_),
      path_(std::move(o.path_)),
      file_(std::exchange(o.file_, FileHandle{})),
      file_size_(o.file_size_),
      superblock_(o.superblock_),
      footer_(o.footer_),
      index_(std::move(o.index_)),
      mapping_(std::move(o.mapping_)),
      verified_(std::move(o.verified_)) {}

CKPT_INLINE ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    if (file_.valid()) fs_.close(file_).ignore_error();  // read-only handle: nothing to lose
    fs_ = o.fs_;
    path_ = std::move(o.path_);
    file_ = std::exchange(o.file_, FileHandle{});
    file_size_ = o.file_size_;
    superblock_ = o.superblock_;
    footer_ = o.footer_;
    index_ = std::move(o.index_);
    mapping_ = std::move(o.mapping_);
    verified_ = std::move(o.verified_);
  }
  return *this;
}

CKPT_INLINE ShardReader::~ShardReader() {
  if (file_.valid()) fs_.close(file_).ignore_error();  // read-only handle: nothing to lose
}

CKPT_INLINE Status ShardReader::load() {
  auto size = fs_.file_size(file_);
  if (!size.ok()) return size.status().with_context(path_);
  file_size_ = *size;
  std::vector<Problem> problems;
  auto head = detail::read_shard_head(fs_, file_, path_, file_size_, false, problems);
  if (!head.ok()) return head.status();
  superblock_ = head->superblock;
  footer_ = head->footer;
  index_ = std::move(head->index);
  return Status();
}

CKPT_INLINE Status ShardReader::chunk_mismatch(std::size_t piece, std::uint64_t chunk, std::uint64_t found) const {
  const auto& p = index_.pieces[piece];
  const auto& t = index_.tensors[p.tensor];
  const auto& c = index_.chunks[p.chunk_first + chunk];
  Problem pr;
  pr.region = "data";
  pr.file = path_;
  pr.tensor = t.name;
  pr.piece = static_cast<std::int64_t>(piece - t.piece_first);
  pr.chunk = static_cast<std::int64_t>(chunk);
  pr.offset = c.offset;
  pr.length = c.length;
  pr.expected = hex64(c.digest);
  pr.found = hex64(found);
  pr.message = path_ + ": tensor '" + t.name + "' piece " + std::to_string(pr.piece) + " chunk " + std::to_string(chunk) +
              " bytes [" + std::to_string(c.offset) + ", " + std::to_string(c.offset + c.length) + "): digest expected " +
              pr.expected + ", found " + pr.found;
  return problem_error(std::move(pr));
}

CKPT_INLINE Status ShardReader::check_chunk(std::size_t piece, std::uint64_t chunk, const unsigned char* bytes) const {
  const auto& c = index_.chunks[index_.pieces[piece].chunk_first + chunk];
  return found_digest(piece, chunk, xxh3_64(bytes, static_cast<std::size_t>(c.length)));
}

CKPT_INLINE Status ShardReader::found_digest(std::size_t piece, std::uint64_t chunk, std::uint64_t found) const {
  const std::uint64_t k = index_.pieces[piece].chunk_first + chunk;
  if (found != index_.chunks[k].digest) return chunk_mismatch(piece, chunk, found);
  if (verified_) verified_[k].store(true, std::memory_order_relaxed);
  return Status();
}

CKPT_INLINE void ShardReader::remember_verified_chunks() {
  if (!verified_) verified_.reset(new std::atomic<bool>[index_.chunks.size()]());
}

CKPT_INLINE bool ShardReader::chunk_verified(std::uint64_t k) const noexcept {
  return verified_ && k < index_.chunks.size() && verified_[k].load(std::memory_order_relaxed);
}

template <class Copy>
Status ShardReader::from_mapping(std::uint64_t at, std::uint64_t n, Copy&& copy) const {
  if (run_catching_sigbus(std::forward<Copy>(copy))) return Status();
  return make_error(Code::io, path_ + ": file changed while it was read (offset " + std::to_string(at) + ", " + std::to_string(n) + " bytes mapped)");
}

CKPT_INLINE Status ShardReader::verify_piece_chunks(std::size_t piece, std::uint64_t first, std::uint64_t count) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  if (!range_within(first, count, p.chunk_count))
    return make_error(Code::invalid_argument, path_ + ": chunks [" + std::to_string(first) + ", +" + std::to_string(count) + ") outside the piece");
  std::vector<unsigned char> scratch(static_cast<std::size_t>(std::min<std::uint64_t>({superblock_.chunk_size(), p.data_length, detail::kReadWindow})));
  for (std::uint64_t c = first; c < first + count; ++c) {
    const auto& rec = index_.chunks[p.chunk_first + c];
    auto found = detail::read_hashed(fs_, file_, path_, scratch.data(), static_cast<std::size_t>(rec.length), rec.offset, true);
    if (!found.ok()) return found.status();
    CKPT_TRY(found_digest(piece, c, *found));
  }
  return Status();
}

CKPT_INLINE Status ShardReader::read_piece(std::size_t piece, void* dst, std::size_t dst_size, ReadCheck check) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  if (dst_size != p.data_length)
    return make_error(Code::invalid_argument, path_ + ": piece is " + std::to_string(p.data_length) + " bytes, buffer is " + std::to_string(dst_size));
  auto* out = static_cast<unsigned char*>(dst);
  if (check == ReadCheck::none) return read_exact(fs_, file_, path_, out, dst_size, p.data_offset);
  // Read straight into the caller's buffer, a slice at a time, and hash each slice while it is in cache.
  for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
    const auto& rec = index_.chunks[p.chunk_first + c];
    auto found = detail::read_hashed(fs_, file_, path_, out + (rec.offset - p.data_offset), static_cast<std::size_t>(rec.length), rec.offset);
    if (!found.ok()) return found.status();
    CKPT_TRY(found_digest(piece, c, *found));
  }
  return Status();
}

CKPT_INLINE Result<Mapping> ShardReader::map_piece(std::size_t piece, ReadCheck check, MapMode mode) {
  if (piece >= index_.pieces.size()) return make_error(Code::invalid_argument, path_ + ": no piece " + std::to_string(piece));
  const auto& p = index_.pieces[piece];
  auto mapping = fs_.map(file_, p.data_offset, static_cast<std::size_t>(p.data_length), mode);
  if (!mapping.ok()) return mapping.status().with_context(path_);
  if (check == ReadCheck::touched)
    for (std::uint64_t c = 0; c < p.chunk_count; ++c)
      CKPT_TRY(check_chunk(piece, c, mapping->data() + c * superblock_.chunk_size()));
  return mapping;
}

CKPT_INLINE Status ShardReader::read_tensor(std::string_view name, void* dst, std::size_t dst_size, ReadCheck check) {
  const TensorRecord* t = index_.find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, path_ + ": no tensor '" + std::string(name) + "'");
  return read_slice(name, Shape(t->shape.size(), 0), t->shape, dst, dst_size, check);
}

CKPT_INLINE Status ShardReader::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                   std::size_t dst_size, ReadCheck check) {
  const TensorRecord* t = index_.find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, path_ + ": no tensor '" + std::string(name) + "'");
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t elements, check_slice(*t, offsets, shape, dst_size));
  auto copied = copy_overlap(*t, offsets, shape, dst, check);
  if (!copied.ok()) return copied.status();
  if (*copied != elements)
    return make_error(Code::not_found, path_ + ": tensor '" + t->name + "': pieces in this file hold " + std::to_string(*copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

CKPT_INLINE Status ShardReader::map_file() {
  if (mapping_.size() == file_size_ && file_size_ > 0) return Status();
  if (file_size_ > SIZE_MAX) return make_error(Code::unsupported, path_ + ": too large to map");
  CKPT_ASSIGN_OR_RETURN(Mapping m, fs_.map(file_, 0, static_cast<std::size_t>(file_size_)));
  mapping_ = std::move(m);
  return Status();
}

CKPT_INLINE Result<std::uint64_t> ShardReader::read_slice_partial(const TensorRecord& t, const Shape& offsets, const Shape& shape,
                                                          void* dst, ReadCheck check) {
  // Public entry point for multi-file readers: bounds are checked here, never assumed.
  CKPT_TRY(check_slice(t, offsets, shape).status().with_context(path_));
  return copy_overlap(t, offsets, shape, dst, check);
}

CKPT_INLINE Result<std::uint64_t> ShardReader::copy_overlap(const TensorRecord& t, const Shape& offsets, const Shape& shape, void* dst,
                                                    ReadCheck check) {
  const std::size_t rank = t.shape.size();
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
    // Merge trailing dimensions that the intersection spans fully in both piece and slice: one run each.
    std::size_t outer = rank;
    std::uint64_t run_elems = 1;
    while (outer > 0) {
      const std::size_t d = outer - 1;
      run_elems *= len[d];
      --outer;
      if (len[d] != p.shape[d] || len[d] != shape[d]) break;
    }
    // Row-major strides in elements for the piece and the slice.
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
      prefault_for_write(out + dst_b, static_cast<std::size_t>(n));  // fresh memory: one call, not a fault per page
      while (n > 0) {
        const std::uint64_t c = src_b / chunk_size;
        const std::uint64_t chunk_start = c * chunk_size;
        const auto& rec = index_.chunks[p.chunk_first + c];
        const std::uint64_t in_chunk = std::min(n, chunk_start + rec.length - src_b);
        unsigned char* to = out + dst_b;
        if (check == ReadCheck::none) {
          const std::uint64_t at = p.data_offset + src_b;
          if (at <= mapping_.size() && n <= mapping_.size() - at) {
            const unsigned char* from = mapping_.data() + at;
            const auto bytes = static_cast<std::size_t>(n);
            CKPT_TRY(from_mapping(at, n, [to, from, bytes] { bulk_copy(to, from, bytes); }));
          } else {
            CKPT_TRY(read_exact(fs_, file_, path_, to, static_cast<std::size_t>(n), at));
          }
          break;
        }
        if (src_b == chunk_start && in_chunk == rec.length) {
          // The run covers the whole chunk: copied and hashed in one pass, out of the mapping where the file is
          // mapped (spec/TIERS.md 7.2), else read in place hashing each slice while it is in cache.
          std::uint64_t found = 0;
          if (rec.offset <= mapping_.size() && rec.length <= mapping_.size() - rec.offset) {
            const unsigned char* from = mapping_.data() + rec.offset;
            const auto bytes = static_cast<std::size_t>(rec.length);
            CKPT_TRY(from_mapping(rec.offset, rec.length, [to, from, bytes, &found] { found = copy_hashed(to, from, bytes); }));
          } else {
            auto read = detail::read_hashed(fs_, file_, path_, to, static_cast<std::size_t>(rec.length), rec.offset);
            if (!read.ok()) return read.status();
            found = *read;
          }
          CKPT_TRY(found_digest(k, c, found));
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
