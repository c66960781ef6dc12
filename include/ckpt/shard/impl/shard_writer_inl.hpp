// ckpt: definitions for shard_writer.hpp (spec/FORMAT.md 2-6, 7 for the write protocol).
#pragma once

#include "../shard_writer.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <sys/mman.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>

namespace ckpt {

namespace detail {
// Bytes hashed before they are handed on, so they are still in cache when written (spec 7.1).
inline constexpr std::size_t kHashWindow = std::size_t{256} << 10;

CKPT_INLINE WriteBuffer allocate_write_buffer(std::size_t size) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  void* p = nullptr;
  if (size < kHugePage) {
    p = std::malloc(size);
    if (p == nullptr) throw std::bad_alloc();
    return WriteBuffer(static_cast<unsigned char*>(p));
  }
  if (::posix_memalign(&p, kHugePage, size) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, size / kHugePage * kHugePage, MADV_HUGEPAGE);  // best effort: refused is fine
#endif
  return WriteBuffer(static_cast<unsigned char*>(p));
}

CKPT_INLINE bool WriteBehind::start() {
  try {
    thread_ = std::thread([this] { run(); });
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

CKPT_INLINE Result<std::uint64_t> WriteBehind::submit(const unsigned char* data, std::size_t size, std::uint64_t offset) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, [&] { return !error_.ok() || submitted_ - completed_ < kDepth; });
  if (!error_.ok()) {
    lock.unlock();
    return wait(submitted());  // the error, or the exception the Fs threw
  }
  queue_.push_back(Job{data, size, offset});
  const std::uint64_t ticket = ++submitted_;
  lock.unlock();
  has_work_.notify_one();
  return ticket;
}

CKPT_INLINE Status WriteBehind::wait(std::uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, [&] { return completed_ >= ticket; });
  if (thrown_) {
    std::exception_ptr thrown = thrown_;
    thrown_ = nullptr;  // rethrown once; later calls see error_
    lock.unlock();
    std::rethrow_exception(thrown);
  }
  return error_;
}

CKPT_INLINE std::uint64_t WriteBehind::submitted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

CKPT_INLINE void WriteBehind::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  has_work_.notify_all();
  try {
    if (thread_.joinable()) thread_.join();
  } catch (const std::system_error&) {  // cannot happen for a joinable thread other than this one
  }
}

CKPT_INLINE void WriteBehind::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      has_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued write was made
      job = queue_.front();
    }
    Status s;
    std::exception_ptr thrown;
    try {
      s = fs_.pwrite(file_, job.data, job.size, job.offset);
    } catch (...) {
      thrown = std::current_exception();
      s = make_error(Code::io, "pwrite of " + std::to_string(job.size) + " bytes at offset " + std::to_string(job.offset) +
                                   " threw an exception on the writer's I/O thread");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      ++completed_;
      if (!s.ok()) {
        // The synchronous writer stops at its first failed write: drop the rest, unmade.
        error_ = std::move(s);
        thrown_ = thrown;
        completed_ += queue_.size();
        queue_.clear();
        failed_.store(true, std::memory_order_release);
      }
    }
    job_done_.notify_all();
  }
}

// Checks a tensor or metadata name: non-empty, bounded, valid UTF-8 (spec 5.2).
[[nodiscard]] CKPT_INLINE Status check_name(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > format::kMaxNameLength)
    return make_error(Code::invalid_argument, std::string(what) + " name must be 1 to 65535 bytes, got " + std::to_string(name.size()));
  if (!valid_utf8(name)) return make_error(Code::invalid_argument, std::string(what) + " name is not valid UTF-8");
  return Status();
}
}  // namespace detail

CKPT_INLINE Result<DataLayout> plan_data_layout(const std::vector<std::uint64_t>& sizes, std::uint32_t alignment_log2) {
  if (alignment_log2 < format::kMinAlignmentLog2 || alignment_log2 > format::kMaxAlignmentLog2)
    return make_error(Code::invalid_argument, "alignment_log2 must be in [6, 21]");
  const std::uint64_t alignment = std::uint64_t{1} << alignment_log2;
  DataLayout layout;
  layout.offsets.reserve(sizes.size());
  // As the writer places them: the data begins after the superblock, each piece at the next aligned offset.
  std::uint64_t position = align_up(format::kSuperblockSize, alignment);
  for (const std::uint64_t size : sizes) {
    const std::uint64_t start = align_up(position, alignment);
    if (start < position || size > UINT64_MAX - start) return make_error(Code::invalid_argument, "piece sizes overflow 64 bits");
    layout.offsets.push_back(start);
    position = start + size;
  }
  layout.end = position;
  return layout;
}

CKPT_INLINE Result<ShardWriter> ShardWriter::create(FsRef fs, std::string path, WriterOptions options) {
  if (options.alignment_log2 < format::kMinAlignmentLog2 || options.alignment_log2 > format::kMaxAlignmentLog2)
    return make_error(Code::invalid_argument, "alignment_log2 must be in [6, 21]");
  if (options.chunk_size_log2 < format::kMinChunkSizeLog2 || options.chunk_size_log2 > format::kMaxChunkSizeLog2)
    return make_error(Code::invalid_argument, "chunk_size_log2 must be in [12, 30]");
  if (options.buffer_size < 4096) options.buffer_size = 4096;
  const Uuid uuid = options.uuid ? *options.uuid : random_uuid();
  std::string write_path = options.atomic_rename ? path + ".tmp-" + uuid_string(uuid) : path;
  Result<FileHandle> file = make_error(Code::not_found, "no file to reuse");
  const bool reused = !options.reuse.empty() && fs.rename(options.reuse, write_path).ok();
  if (!reused) options.in_place = nullptr, options.in_place_size = 0;  // another file: its bytes are written
  if (reused) file = fs.open(write_path, OpenMode::read_write);
  else file = fs.open(write_path, OpenMode::create_new);
  if (!file.ok()) return file.status().with_context(reused ? "cannot open the reused shard file" : "cannot create shard file");
  ShardWriter w(fs, std::move(path), std::move(write_path), *file, options);
  w.reused_ = reused;
  w.superblock_.uuid = uuid;
  w.superblock_.alignment_log2 = options.alignment_log2;
  w.superblock_.chunk_size_log2 = options.chunk_size_log2;
  w.superblock_.data_offset = align_up(format::kSuperblockSize, w.superblock_.alignment());
  const auto sb = encode_superblock(w.superblock_);
  CKPT_TRY(w.append(sb.data(), sb.size()));
  CKPT_TRY(w.pad_to(w.superblock_.data_offset));
  CKPT_TRY(w.release_caller_memory());  // sb is a local
  return Result<ShardWriter>(std::move(w));  // explicit: nvcc (EDG) has no C++20 implicit move
}

CKPT_INLINE ShardWriter::ShardWriter(FsRef fs, std::string path, std::string write_path, FileHandle file, WriterOptions options)
    : fs_(fs), path_(std::move(path)), write_path_(std::move(write_path)), file_(file), options_(options),
      write_behind_(options.pipeline) {
  buffers_.push_back(detail::allocate_write_buffer(options_.buffer_size));  // the second at the first flush
  buffer_ticket_.assign(1, 0);
}

CKPT_INLINE ShardWriter::~ShardWriter() {
  if (!owner_.owns) return;  // moved from: the file and the I/O thread went with the move
  if (io_) io_->stop();  // makes the queued writes: no other Fs call while one may be in flight
  if (finished_) return;
  if (file_.valid()) fs_.close(file_).ignore_error();       // abandoning: the file is removed next
  fs_.unlink(write_path_).ignore_error();                    // best effort; a store's recovery also removes it
}

CKPT_INLINE Status ShardWriter::fail(Status s) {
  if (failure_.ok()) failure_ = s.with_context(write_path_);
  return failure_;
}

CKPT_INLINE Status ShardWriter::usable() {
  if (!failure_.ok()) return failure_;
  if (io_ && io_->failed()) return fail(io_->drain());  // a background write failed since the last call
  return Status();
}

// Writes one block now, or queues it for the I/O thread (ticket returned; 0 when written now). The
// caller's memory (borrowed) is released by release_caller_memory() before the public call returns.
CKPT_INLINE Result<std::uint64_t> ShardWriter::write_block(const unsigned char* data, std::size_t size, std::uint64_t offset,
                                                   bool borrowed) {
  if (write_behind_ && !io_) {
    io_.reset(new detail::WriteBehind(fs_, file_));
    if (!io_->start()) {  // no thread to be had: write in the call, as with pipeline = false
      io_.reset();
      write_behind_ = false;
    }
  }
  if (!io_) {
    Status s = fs_.pwrite(file_, data, size, offset);
    if (!s.ok()) return fail(s);
    return std::uint64_t{0};
  }
  auto ticket = io_->submit(data, size, offset);
  if (!ticket.ok()) return fail(ticket.status());
  if (borrowed) borrowed_ticket_ = *ticket;
  return ticket;
}

// Waits for the queued writes from the caller's memory: a caller may reuse it once a call returns.
CKPT_INLINE Status ShardWriter::release_caller_memory() {
  if (borrowed_ticket_ == 0) return Status();
  const std::uint64_t ticket = borrowed_ticket_;
  borrowed_ticket_ = 0;
  Status s = io_->wait(ticket);
  return s.ok() ? s : fail(s);
}

// Waits for every queued write and ends the I/O thread: what follows (sync, close, rename) is ordered
// after them, and only this thread calls the Fs from here on.
CKPT_INLINE Status ShardWriter::drain_writes() {
  write_behind_ = false;
  if (!io_) return Status();
  borrowed_ticket_ = 0;
  std::fill(buffer_ticket_.begin(), buffer_ticket_.end(), 0);
  Status s = io_->drain();
  io_->stop();
  io_.reset();
  return s.ok() ? s : fail(s);
}

CKPT_INLINE Status ShardWriter::flush() {
  if (filled_ == 0) return Status();
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t ticket, write_block(buffers_[current_].get(), filled_, buffer_start_, false));
  buffer_ticket_[current_] = ticket;
  buffer_start_ += filled_;
  filled_ = 0;
  if (io_ && buffers_.size() < 2) {  // the first buffer is on its way: fill a second meanwhile
    buffers_.push_back(detail::allocate_write_buffer(options_.buffer_size));
    buffer_ticket_.push_back(0);
  }
  current_ = (current_ + 1) % buffers_.size();
  // The next buffer is free once its own earlier write is done.
  if (buffer_ticket_[current_] != 0) {
    const std::uint64_t pending = buffer_ticket_[current_];
    buffer_ticket_[current_] = 0;
    Status s = io_->wait(pending);
    if (!s.ok()) return fail(s);
  }
  return Status();
}

CKPT_INLINE Status ShardWriter::append(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  // Large appends with an empty buffer go straight from the caller's memory to the kernel.
  if (filled_ == 0 && size >= options_.buffer_size / 2) {
    CKPT_TRY(write_block(p, size, position_, true).status());
    position_ += size;
    buffer_start_ = position_;
    return Status();
  }
  while (size > 0) {
    const std::size_t n = std::min(options_.buffer_size - filled_, size);
    std::memcpy(buffers_[current_].get() + filled_, p, n);
    filled_ += n;
    p += n;
    size -= n;
    position_ += n;
    if (filled_ == options_.buffer_size) CKPT_TRY(flush());
  }
  return Status();
}

CKPT_INLINE Status ShardWriter::pad_to(std::uint64_t offset) {
  static const unsigned char zeros[4096] = {};
  while (position_ < offset) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(offset - position_, sizeof zeros));
    CKPT_TRY(append(zeros, n));
  }
  return Status();
}

CKPT_INLINE Status ShardWriter::add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                   std::size_t size) {
  CKPT_TRY(begin_piece(name, dtype, shape, Shape(shape.size(), 0), shape));
  CKPT_TRY(write(data, size));
  return end_piece();
}

CKPT_INLINE Status ShardWriter::begin_piece(std::string_view name, DType dtype, const Shape& global_shape,
                                    const Shape& offsets, const Shape& local_shape) {
  CKPT_TRY(usable());
  if (finished_) return make_error(Code::invalid_argument, path_ + ": writer already finished");
  if (open_) return make_error(Code::invalid_argument, "tensor '" + tensors_[open_->tensor].name + "': piece still open at begin_piece()");
  CKPT_TRY(detail::check_name("tensor", name));
  if (format::dtype_info(dtype) == nullptr)
    return make_error(Code::invalid_argument, "tensor '" + std::string(name) + "': unknown dtype code " + std::to_string(static_cast<int>(dtype)));
  if (global_shape.size() > format::kMaxRank || offsets.size() != global_shape.size() || local_shape.size() != global_shape.size())
    return make_error(Code::invalid_argument, "tensor '" + std::string(name) + "': rank over 64 or offsets/shape of the wrong rank");
  std::uint64_t total = 0, piece_bytes = 0;
  if (!shape_bytes(global_shape, dtype, total))
    return make_error(Code::invalid_argument, "tensor '" + std::string(name) + "': shape " + shape_string(global_shape) + " overflows 64 bits");
  for (std::size_t d = 0; d < global_shape.size(); ++d)
    if (offsets[d] > global_shape[d] || local_shape[d] > global_shape[d] - offsets[d])
      return make_error(Code::invalid_argument, "tensor '" + std::string(name) + "': piece at " + shape_string(offsets) + " of shape " + shape_string(local_shape) + " exceeds " + shape_string(global_shape));
  (void)shape_bytes(local_shape, dtype, piece_bytes);  // cannot overflow: bounded by the global size

  std::size_t tensor_index;
  const auto it = tensor_by_name_.find(std::string(name));
  if (it == tensor_by_name_.end()) {
    tensor_index = tensors_.size();
    TensorRecord t;
    t.name = std::string(name);
    t.dtype = dtype;
    t.shape = global_shape;
    tensors_.push_back(std::move(t));
    pieces_of_tensor_.emplace_back();
    tensor_by_name_.emplace(std::string(name), tensor_index);
  } else {
    tensor_index = it->second;
    const auto& t = tensors_[tensor_index];
    if (t.dtype != dtype || t.shape != global_shape)
      return make_error(Code::conflict, "tensor '" + t.name + "': piece dtype or global shape differs from an earlier piece");
    std::uint64_t elements = 0;
    (void)shape_elements(local_shape, elements);
    const auto& earlier = pieces_of_tensor_[tensor_index];
    const std::uint64_t piece_count = earlier.size();
    for (const auto k : earlier) {
      const auto& p = pieces_[k];
      std::uint64_t other = 0;
      (void)shape_elements(p.record.shape, other);
      bool overlap = elements > 0 && other > 0;
      for (std::size_t d = 0; d < global_shape.size() && overlap; ++d)
        overlap = offsets[d] < p.record.offsets[d] + p.record.shape[d] && p.record.offsets[d] < offsets[d] + local_shape[d];
      if (overlap)
        return make_error(Code::conflict, "tensor '" + t.name + "': piece at " + shape_string(offsets) + " overlaps an earlier piece at " + shape_string(p.record.offsets));
    }
    if (piece_count >= format::kMaxPiecesPerTensor)
      return make_error(Code::invalid_argument, "tensor '" + t.name + "': more than 4096 pieces in one file");
  }
  // Each piece starts aligned so a reader can map it and hand it to a device without copying (spec 4.2).
  CKPT_TRY(pad_to(align_up(position_, superblock_.alignment())));
  OpenPiece piece;
  piece.tensor = tensor_index;
  piece.record.offsets = offsets;
  piece.record.shape = local_shape;
  piece.record.data_offset = position_;
  piece.record.data_length = piece_bytes;
  open_ = std::move(piece);
  hasher_.reset();
  return Status();
}

CKPT_INLINE void ShardWriter::close_chunk() {
  auto& p = *open_;
  const std::uint64_t chunk_index = p.chunks.size();
  p.chunks.push_back(ChunkRecord{p.record.data_offset + chunk_index * superblock_.chunk_size(), p.chunk_filled, hasher_.digest()});
  p.chunk_filled = 0;
  hasher_.reset();
}

CKPT_INLINE Status ShardWriter::write(const void* data, std::size_t size) {
  CKPT_TRY(usable());
  if (!open_) return make_error(Code::invalid_argument, path_ + ": write() without begin_piece()");
  auto& p = *open_;
  if (size > p.record.data_length - p.written)
    return make_error(Code::invalid_argument, "tensor '" + tensors_[p.tensor].name + "': write of " + std::to_string(size) + " bytes exceeds the piece's remaining " + std::to_string(p.record.data_length - p.written));
  const auto* bytes = static_cast<const unsigned char*>(data);
  const auto at = reinterpret_cast<std::uintptr_t>(bytes), base = reinterpret_cast<std::uintptr_t>(options_.in_place);
  if (options_.in_place != nullptr && at >= base && at - base < options_.in_place_size) return write_in_place(bytes, size);
  const Status written = write_bytes(bytes, size);
  // Whatever happened, the caller's memory is not referenced once write() returns.
  const Status released = release_caller_memory();
  return written.ok() ? released : written;
}

// Hashes n bytes of the open piece into its chunks, a cache-sized window at a time.
CKPT_INLINE void ShardWriter::hash_span(const unsigned char* bytes, std::size_t n) {
  auto& p = *open_;
  const std::uint64_t chunk_size = superblock_.chunk_size();
  for (std::size_t hashed = 0; hashed < n;) {
    const std::size_t part = static_cast<std::size_t>(std::min<std::uint64_t>({n - hashed, detail::kHashWindow, chunk_size - p.chunk_filled}));
    hasher_.update(bytes + hashed, part);
    hashed += part;
    p.chunk_filled += part;
    if (p.chunk_filled == chunk_size) close_chunk();
  }
}

// Bytes the caller already put in the file through its mapping (WriterOptions::in_place): the buffered bytes
// before them (superblock, padding) go out first, then the position moves past them; they are hashed where
// they lie, the one pass over them (spec/JOURNAL.md 10.1).
CKPT_INLINE Status ShardWriter::write_in_place(const unsigned char* bytes, std::size_t size) {
  auto& p = *open_;
  const std::uint64_t at = reinterpret_cast<std::uintptr_t>(bytes) - reinterpret_cast<std::uintptr_t>(options_.in_place);
  if (at != position_ || size > options_.in_place_size - at)
    return fail(make_error(Code::invalid_argument, path_ + ": tensor '" + tensors_[p.tensor].name + "': " + std::to_string(size) +
                                                       " bytes lying at offset " + std::to_string(at) + " of the mapped file written at offset " +
                                                       std::to_string(position_) + " (" + std::to_string(options_.in_place_size) + " bytes mapped)"));
  CKPT_TRY(flush());
  hash_span(bytes, size);
  position_ += size;
  buffer_start_ = position_;
  p.written += size;
  data_bytes_ += size;
  return Status();
}

CKPT_INLINE Status ShardWriter::write_bytes(const unsigned char* bytes, std::size_t size) {
  auto& p = *open_;
  const std::uint64_t chunk_size = superblock_.chunk_size();
  // Hash a cache-sized slice, then hand the same slice on while it is still in cache: one pass over
  // DRAM (spec 7.1). A whole buffer-sized block at a buffer-aligned offset goes to the kernel straight
  // from the caller's memory, skipping the copy into the buffer, so the Fs sees exactly the writes the
  // buffer would have made. Unaligned or smaller direct writes were measured and refused: the page
  // cache sizes its folios by the writes, and later reads of the file got 10-40% slower (ckpt-bench).
  // Pipelined, the caller's thread hashes block k+1 while the I/O thread writes block k. The last
  // whole block of a call is copied instead of passed on: write() would otherwise wait for it to be
  // written, and the I/O thread would then idle while the next call hashes its first block.
  const std::size_t block = options_.buffer_size;
  const bool may_bypass = block > 2 * detail::kHashWindow;  // smaller buffers: append() already passes slices straight on
  while (size > 0) {
    const bool direct = may_bypass && filled_ == 0 && size >= block && position_ % block == 0 &&
                        (!write_behind_ || size - block >= block);
    const std::size_t n =
        direct ? block : static_cast<std::size_t>(std::min<std::uint64_t>({size, detail::kHashWindow, chunk_size - p.chunk_filled}));
    hash_span(bytes, n);
    if (direct) {
      CKPT_TRY(write_block(bytes, n, position_, true).status());
      position_ += n;
      buffer_start_ = position_;
    } else {
      CKPT_TRY(append(bytes, n));
    }
    bytes += n;
    size -= n;
    p.written += n;
    data_bytes_ += n;
  }
  return Status();
}

CKPT_INLINE Status ShardWriter::end_piece() {
  CKPT_TRY(usable());
  if (!open_) return make_error(Code::invalid_argument, path_ + ": end_piece() without begin_piece()");
  auto& p = *open_;
  if (p.written != p.record.data_length)
    return make_error(Code::invalid_argument, "tensor '" + tensors_[p.tensor].name + "': piece ended after " + std::to_string(p.written) + " of " + std::to_string(p.record.data_length) + " bytes");
  if (p.chunk_filled > 0) close_chunk();
  pieces_of_tensor_[p.tensor].push_back(pieces_.size());
  pieces_.push_back(std::move(p));
  open_.reset();
  return Status();
}

CKPT_INLINE Status ShardWriter::set_metadata(std::string key, Value value) {
  CKPT_TRY(usable());
  CKPT_TRY(detail::check_name("metadata", key));
  if (value.is_string() && !valid_utf8(value.as_string()))
    return make_error(Code::invalid_argument, "metadata '" + key + "': string value is not valid UTF-8 (store it as bytes)");
  if (meta_by_key_.count(key) != 0) return make_error(Code::conflict, "metadata key '" + key + "' set twice");
  meta_by_key_.emplace(key, metadata_.size());
  metadata_.push_back(MetaEntry{std::move(key), std::move(value)});
  return Status();
}

CKPT_INLINE Result<ShardSummary> ShardWriter::finish() {
  CKPT_TRY(usable());
  if (finished_) return make_error(Code::invalid_argument, path_ + ": finish() called twice");
  if (open_) return make_error(Code::invalid_argument, "tensor '" + tensors_[open_->tensor].name + "': piece still open at finish()");

  // Regroup pieces by tensor, in first-appearance order (the canonical index layout, spec 5.3).
  Index index;
  index.tensors = tensors_;
  std::vector<std::vector<std::size_t>> by_tensor(tensors_.size());
  for (std::size_t k = 0; k < pieces_.size(); ++k) by_tensor[pieces_[k].tensor].push_back(k);
  std::uint64_t data_end = superblock_.data_offset;
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    index.tensors[t].piece_first = index.pieces.size();
    index.tensors[t].piece_count = by_tensor[t].size();
    for (const auto k : by_tensor[t]) {
      PieceRecord rec = pieces_[k].record;
      rec.tensor = t;
      rec.chunk_first = index.chunks.size();
      rec.chunk_count = pieces_[k].chunks.size();
      for (const auto& chunk : pieces_[k].chunks) index.chunks.push_back(chunk);
      data_end = std::max(data_end, rec.data_offset + rec.data_length);
      index.pieces.push_back(std::move(rec));
    }
  }
  // The metadata is lent to the index for its encoding and taken back, even if encoding throws: a copy
  // would be the only use of MetaEntry's copy operations in a header-only store.hpp (parse time,
  // spec/LAYOUT.md 5).
  index.metadata = std::move(metadata_);
  std::string index_bytes;
  try {
    index_bytes = encode_index(index);
  } catch (...) {
    metadata_ = std::move(index.metadata);
    throw;
  }
  metadata_ = std::move(index.metadata);
  if (index_bytes.size() > format::kMaxIndexLength)
    return fail(make_error(Code::invalid_argument, "index of " + std::to_string(index_bytes.size()) + " bytes exceeds the 4 GiB decoder limit"));

  // The index starts at the first multiple of 8 after the furthest piece (spec 5.1).
  CKPT_TRY(pad_to(align_up(data_end, 8)));
  Footer footer;
  footer.index_offset = position_;
  footer.index_length = index_bytes.size();
  footer.index_digest = xxh3_64(index_bytes.data(), index_bytes.size());
  footer.uuid = superblock_.uuid;
  CKPT_TRY(append(index_bytes.data(), index_bytes.size()));
  const auto footer_bytes = encode_footer(footer);
  CKPT_TRY(append(footer_bytes.data(), footer_bytes.size()));
  // Every queued write is made and its error collected before the last one and the sync (spec 7.1).
  CKPT_TRY(drain_writes());
  CKPT_TRY(flush());
  // A file written over keeps its old length past the new end: cut, before the sync (no byte of it survives).
  if (reused_) {
    Status s = fs_.truncate(file_, position_);
    if (!s.ok()) return fail(s);
  }
  // fsync before rename: a rename may reach disk before the data it names (spec 7.1).
  if (options_.durable) {
    Status s = fs_.sync(file_);
    if (!s.ok()) return fail(s);
  }
  {
    Status s = fs_.close(file_);
    file_ = FileHandle{};
    if (!s.ok()) return fail(s);
  }
  if (options_.atomic_rename) {
    Status s = fs_.rename(write_path_, path_);
    if (!s.ok()) return fail(s);
  }
  // fsync the directory: a create or rename is durable only once its directory is (spec 7.1).
  if (options_.durable) {
    Status s = fs_.sync_dir(parent_path(path_));
    if (!s.ok()) return fail(s);
  }
  finished_ = true;
  ShardSummary summary;
  summary.path = path_;
  summary.uuid = superblock_.uuid;
  summary.file_size = position_;
  summary.data_bytes = data_bytes_;
  summary.index_digest = footer.index_digest;
  summary.tensor_count = index.tensors.size();
  summary.piece_count = index.pieces.size();
  summary.chunk_count = index.chunks.size();
  // The index is kept for the commit (written_index()); its chunk lists are not needed twice.
  written_index_ = std::move(index);
  pieces_.clear();
  pieces_of_tensor_.clear();
  return summary;
}

}  // namespace ckpt
