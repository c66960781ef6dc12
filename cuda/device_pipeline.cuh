// ckpt cuda: device-side hashing, verified loads and hashed saves, written once over a Backend
// (spec/GPU.md 5). Plain C++: CudaBackend (cuda_backend.cuh) runs it on a GPU; HostBackend
// (host_backend.cuh) runs it on the host with lazily executed streams, so the tests can prove the
// staging logic without a GPU.
//
// A Backend has:
//   using Stream, Event;                      (cheap handles)
//   Status new_stream(Stream&), delete_stream(Stream), new_event(Event&), delete_event(Event);
//   Status device_alloc(void*&, size_t), device_free(void*), pinned_alloc(void*&, size_t), pinned_free(void*);
//   Status copy_to_device(void* dst, const void* src, size_t, Stream), copy_to_host(...same...);
//   Status record(Event, Stream), sync_event(Event), sync_stream(Stream);
//   Status launch_hash(const HashLaunch&, Stream);
//   unsigned multiprocessors() const;
// Every operation on a stream is asynchronous: host memory handed to a copy must stay untouched until an
// event recorded after it has been synchronized.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ckpt/core/error.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "hash_launch.cuh"

namespace ckpt::gpu {

struct DeviceIoOptions {
  std::size_t staging_bytes = std::size_t{64} << 20;  // each pinned staging buffer
  unsigned staging_buffers = 3;                       // 2 to 8: copies of one overlap I/O on the next
  unsigned io_threads = 4;                            // parallel preads into one staging buffer
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

// A chunk whose digest differs: its index in the caller's table.
struct ChunkMismatch {
  std::size_t index = 0;
  std::uint64_t expected = 0, found = 0;
};

// Owns device memory, pinned memory, streams and events; at destruction it first drains its streams
// so that no queued copy or kernel still uses what is freed.
template <class B>
class Arena {
 public:
  explicit Arena(B& backend) : backend_(backend) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (auto s : streams_) backend_.sync_stream(s).ignore_error();  // errors were reported where they happened
    for (auto s : borrowed_) backend_.sync_stream(s).ignore_error();
    for (auto e : events_) backend_.delete_event(e).ignore_error();
    for (auto s : streams_) backend_.delete_stream(s).ignore_error();
    for (auto* p : device_) backend_.device_free(p).ignore_error();
    for (auto* p : pinned_) backend_.pinned_free(p).ignore_error();
  }
  [[nodiscard]] B& backend() noexcept { return backend_; }
  // A caller's stream that work on this arena's memory is queued on: drained before anything is freed.
  void borrow(typename B::Stream s) { borrowed_.push_back(s); }
  [[nodiscard]] Result<unsigned char*> device(std::size_t bytes) {
    void* p = nullptr;
    CKPT_TRY(backend_.device_alloc(p, bytes));
    device_.push_back(p);
    return static_cast<unsigned char*>(p);
  }
  [[nodiscard]] Result<unsigned char*> pinned(std::size_t bytes) {
    void* p = nullptr;
    CKPT_TRY(backend_.pinned_alloc(p, bytes));
    pinned_.push_back(p);
    return static_cast<unsigned char*>(p);
  }
  [[nodiscard]] Result<typename B::Stream> stream() {
    typename B::Stream s{};
    CKPT_TRY(backend_.new_stream(s));
    streams_.push_back(s);
    return s;
  }
  [[nodiscard]] Result<typename B::Event> event() {
    typename B::Event e{};
    CKPT_TRY(backend_.new_event(e));
    events_.push_back(e);
    return e;
  }

 private:
  B& backend_;
  std::vector<void*> device_, pinned_;
  std::vector<typename B::Stream> streams_, borrowed_;
  std::vector<typename B::Event> events_;
};

// Hashes one chunk table per enqueue: the table goes up in one copy, one launch hashes (and compares),
// the digests and mismatch list come back in one copy. One batch in flight per BatchHasher.
template <class B>
class BatchHasher {
 public:
  [[nodiscard]] static Result<BatchHasher> create(Arena<B>& arena, std::size_t capacity) {
    if (capacity == 0 || capacity > kMaxLaunchChunks)
      return make_error(Code::invalid_argument, "chunk batch capacity " + std::to_string(capacity) + " outside [1, 2^30]");
    BatchHasher h(arena, capacity);
    const std::size_t bytes = layout_for(capacity).total;
    CKPT_ASSIGN_OR_RETURN(h.host_, arena.pinned(bytes));
    CKPT_ASSIGN_OR_RETURN(h.device_, arena.device(bytes));
    CKPT_ASSIGN_OR_RETURN(h.done_, arena.event());
    return h;
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  // Hashes chunks[0, n) on the stream; with expected, also lists the chunks whose digest differs.
  [[nodiscard]] Status enqueue(const DeviceChunk* chunks, std::size_t n, const std::uint64_t* expected,
                               typename B::Stream stream) {
    CKPT_TRY(wait());  // the pinned table and results are reused
    if (n > capacity_)
      return make_error(Code::invalid_argument, std::to_string(n) + " chunks exceed the batch capacity " + std::to_string(capacity_));
    count_ = n;
    compared_ = expected != nullptr;
    layout_ = layout_for(n);  // packed for this batch: only its own bytes cross the bus
    if (n == 0) return Status();
    B& backend = arena_->backend();
    const HashPlan plan = plan_hash(chunks, n, backend.multiprocessors());
    std::memcpy(host_ + layout_.chunks, chunks, n * sizeof(DeviceChunk));
    if (expected != nullptr) std::memcpy(host_ + layout_.expected, expected, n * sizeof(std::uint64_t));
    std::memcpy(host_ + layout_.order, plan.order.data(), n * sizeof(std::uint32_t));
    std::memset(host_ + layout_.count, 0, 8);
    CKPT_TRY(backend.copy_to_device(device_, host_, layout_.count + 8, stream));
    HashLaunch launch;
    launch.chunks = reinterpret_cast<const DeviceChunk*>(device_ + layout_.chunks);
    launch.order = reinterpret_cast<const std::uint32_t*>(device_ + layout_.order);
    launch.long_count = plan.long_count;
    launch.count = static_cast<std::uint32_t>(n);
    launch.digests = reinterpret_cast<std::uint64_t*>(device_ + layout_.digests);
    launch.expected = expected != nullptr ? reinterpret_cast<const std::uint64_t*>(device_ + layout_.expected) : nullptr;
    launch.mismatch_count = reinterpret_cast<std::uint32_t*>(device_ + layout_.count);
    launch.mismatches = reinterpret_cast<std::uint32_t*>(device_ + layout_.mismatches);
    launch.threads = plan.threads;
    launch.blocks = plan.blocks;
    launch.shared_bytes = launch_shared_bytes(plan.threads);
    CKPT_TRY(backend.launch_hash(launch, stream));
    const std::size_t back = (compared_ ? layout_.total : layout_.mismatches) - layout_.count;
    CKPT_TRY(backend.copy_to_host(host_ + layout_.count, device_ + layout_.count, back, stream));
    CKPT_TRY(backend.record(done_, stream));
    pending_ = true;
    return Status();
  }
  // Blocks until the last enqueued batch has finished; its results are readable afterwards.
  [[nodiscard]] Status wait() {
    if (!pending_) return Status();
    pending_ = false;
    return arena_->backend().sync_event(done_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t digest(std::size_t i) const noexcept {
    std::uint64_t d;
    std::memcpy(&d, host_ + layout_.digests + i * 8, 8);
    return d;
  }
  // Indices of chunks whose digest differs from expected, ascending. Checks the device's list against
  // the digests it returned, so a lost or invented mismatch cannot pass unnoticed.
  [[nodiscard]] Result<std::vector<ChunkMismatch>> mismatches(const std::uint64_t* expected) const {
    std::vector<ChunkMismatch> out;
    if (!compared_ || count_ == 0) return out;
    std::uint32_t listed;
    std::memcpy(&listed, host_ + layout_.count, 4);
    if (listed > count_) return make_error(Code::io, "device reported " + std::to_string(listed) + " mismatches among " + std::to_string(count_) + " chunks");
    std::vector<std::uint32_t> indices(listed);
    if (listed > 0) std::memcpy(indices.data(), host_ + layout_.mismatches, listed * sizeof(std::uint32_t));
    std::sort(indices.begin(), indices.end());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < count_; ++i) differing += digest(i) != expected[i] ? 1 : 0;
    if (differing != listed || std::adjacent_find(indices.begin(), indices.end()) != indices.end())
      return make_error(Code::io, "device mismatch list (" + std::to_string(listed) + " entries) disagrees with its digests (" + std::to_string(differing) + " differ)");
    for (const auto i : indices) {
      if (i >= count_ || digest(i) == expected[i])
        return make_error(Code::io, "device listed chunk " + std::to_string(i) + " as a mismatch, but its digest matches");
      out.push_back(ChunkMismatch{i, expected[i], digest(i)});
    }
    return out;
  }

 private:
  struct Layout {
    std::size_t chunks, expected, order, count, digests, mismatches, total;
  };
  static Layout layout_for(std::size_t n) {
    Layout l;
    l.chunks = 0;
    l.expected = n * sizeof(DeviceChunk);
    l.order = l.expected + n * 8;
    l.count = (l.order + n * 4 + 7) & ~std::size_t{7};
    l.digests = l.count + 8;
    l.mismatches = l.digests + n * 8;
    l.total = l.mismatches + n * 4;
    return l;
  }
  BatchHasher(Arena<B>& arena, std::size_t capacity) : arena_(&arena), capacity_(capacity), layout_(layout_for(0)) {}

  Arena<B>* arena_;
  std::size_t capacity_;
  Layout layout_;                    // of the current batch; the buffers hold layout_for(capacity_)
  unsigned char* host_ = nullptr;    // pinned: upload [0, count + 8), download [count, total)
  unsigned char* device_ = nullptr;  // same layout
  typename B::Event done_{};
  std::size_t count_ = 0;
  bool compared_ = false, pending_ = false;
};
static_assert(sizeof(DeviceChunk) == 16, "the device reads the chunk table as the host wrote it");

inline constexpr std::size_t kChunksPerBatch = std::size_t{1} << 22;

// Hashes a chunk table in device memory batch by batch (synchronous), against expected digests when
// they are given; after each batch, done(first, count, hasher) takes that batch's results.
template <class B, class Done>
[[nodiscard]] Status hash_in_batches(B& backend, const DeviceChunk* chunks, const std::uint64_t* expected, std::size_t n,
                                     typename B::Stream stream, Done&& done) {
  if (n == 0) return Status();
  Arena<B> arena(backend);
  arena.borrow(stream);
  CKPT_ASSIGN_OR_RETURN(auto hasher, BatchHasher<B>::create(arena, std::min(n, kChunksPerBatch)));
  for (std::size_t first = 0; first < n; first += hasher.capacity()) {
    const std::size_t count = std::min(hasher.capacity(), n - first);
    CKPT_TRY(hasher.enqueue(chunks + first, count, expected == nullptr ? nullptr : expected + first, stream));
    CKPT_TRY(hasher.wait());
    CKPT_TRY(done(first, count, hasher));
  }
  return Status();
}

// Digests of a chunk table in device memory (synchronous).
template <class B>
[[nodiscard]] Result<std::vector<std::uint64_t>> hash_chunks(B& backend, const DeviceChunk* chunks, std::size_t n,
                                                             typename B::Stream stream) {
  std::vector<std::uint64_t> digests(n);
  CKPT_TRY(hash_in_batches(backend, chunks, nullptr, n, stream, [&](std::size_t first, std::size_t count, const auto& hasher) {
    for (std::size_t i = 0; i < count; ++i) digests[first + i] = hasher.digest(i);
    return Status();
  }));
  return digests;
}

// Chunks whose device digest differs from expected, in table order (synchronous).
template <class B>
[[nodiscard]] Result<std::vector<ChunkMismatch>> verify_chunks(B& backend, const DeviceChunk* chunks,
                                                               const std::uint64_t* expected, std::size_t n,
                                                               typename B::Stream stream) {
  std::vector<ChunkMismatch> out;
  CKPT_TRY(hash_in_batches(backend, chunks, expected, n, stream, [&](std::size_t first, std::size_t, auto& hasher) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto found, hasher.mismatches(expected + first));
    for (auto& m : found) {
      m.index += first;
      out.push_back(m);
    }
    return Status();
  }));
  return out;
}

namespace detail {

// Reads [off, off + n) with up to `threads` preads in flight (page cache copies are CPU-bound).
[[nodiscard]] inline Status read_parallel(FsRef fs, FileHandle file, const std::string& path, unsigned char* dst, std::size_t n,
                                   std::uint64_t off, unsigned threads) {
  constexpr std::size_t kPart = std::size_t{8} << 20;
  const std::size_t parts = (n + kPart - 1) / kPart;
  const unsigned workers = static_cast<unsigned>(std::min<std::size_t>(std::max(threads, 1u), parts));
  if (workers <= 1) return read_exact(fs, file, path, dst, n, off);
  std::vector<Status> failed(parts);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < parts; i = next++)
      failed[i] = read_exact(fs, file, path, dst + i * kPart, std::min(kPart, n - i * kPart), off + i * kPart);
  };
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (auto& s : failed)
    if (!s.ok()) return s;  // the first failing part, in file order
  return Status();
}

// The byte offset of a piece inside its tensor's row-major layout, or false when the piece is not one
// contiguous run there (it then needs a strided copy, which read_slice does on the host).
[[nodiscard]] inline bool piece_run(const TensorRecord& t, const PieceRecord& p, std::uint64_t& byte_offset) {
  const std::size_t rank = t.shape.size();
  std::size_t d = 0;
  while (d < rank && p.shape[d] == 1) ++d;
  for (std::size_t k = d + 1; k < rank; ++k)
    if (p.shape[k] != t.shape[k]) return false;
  std::uint64_t element = 0, stride = 1;
  for (std::size_t k = rank; k-- > 0;) {
    element += p.offsets[k] * stride;  // bounded by the tensor size, checked when the index was decoded
    stride *= t.shape[k];
  }
  byte_offset = element * format::dtype_info(t.dtype)->size;
  return true;
}

}  // namespace detail

// ckpt::verify_file with every chunk digest computed on the device: pieces are read in large blocks
// into pinned buffers, copied up and hashed while the next block is read (spec/GPU.md 6). A file whose
// superblock, footer or index is damaged goes to the CPU verifier, which names that damage.
template <class B>
[[nodiscard]] Result<VerifyReport> verify_file_on_device(B& backend, FsRef fs, const std::string& path,
                                                         const DeviceIoOptions& options = {}) {
  auto opened = ShardReader::open(fs, path);
  if (!opened.ok()) {
    VerifyOptions cpu;
    cpu.threads = std::max(1u, std::thread::hardware_concurrency());
    cpu.progress = options.progress;
    return verify_file(fs, path, cpu);
  }
  ShardReader& reader = *opened;
  const Index& index = reader.index();
  VerifyReport report;
  report.path = path;
  report.file_size = reader.file_size();
  report.chunks_total = index.chunks.size();
  auto problem = [&](Problem p) {
    if (p.message.rfind(path, 0) != 0) p.message = path + ": " + p.message;
    p.file = path;
    report.problems.push_back(std::move(p));
  };
  ckpt::detail::add_padding_problems(fs, reader.file(), path, index, reader.footer().index_offset, problem);

  // Chunks in file order, each with its piece; blocks of whole chunks, each at most slot_bytes long.
  std::vector<std::uint32_t> piece_of(index.chunks.size());
  for (std::size_t k = 0; k < index.pieces.size(); ++k)
    for (std::uint64_t c = 0; c < index.pieces[k].chunk_count; ++c)
      piece_of[index.pieces[k].chunk_first + c] = static_cast<std::uint32_t>(k);
  std::vector<std::size_t> by_offset(index.chunks.size());
  std::iota(by_offset.begin(), by_offset.end(), std::size_t{0});
  std::sort(by_offset.begin(), by_offset.end(),
            [&](std::size_t a, std::size_t b) { return index.chunks[a].offset < index.chunks[b].offset; });
  std::uint64_t largest = 0, total_bytes = 0;
  for (const auto& c : index.chunks) {
    largest = std::max(largest, c.length);
    total_bytes += c.length;
  }
  const std::size_t slot_bytes = static_cast<std::size_t>(std::max<std::uint64_t>({options.staging_bytes, largest, 1}));
  constexpr std::size_t kBlockChunks = std::size_t{1} << 16;
  struct Block {
    std::uint64_t start = 0, length = 0;
    std::size_t first = 0, count = 0;  // range of by_offset
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < by_offset.size(); ++i) {
    const auto& c = index.chunks[by_offset[i]];
    if (!blocks.empty()) {
      Block& b = blocks.back();
      if (c.offset >= b.start && b.count < kBlockChunks && c.offset - b.start <= slot_bytes &&
          c.length <= slot_bytes - (c.offset - b.start)) {
        b.length = std::max(b.length, c.offset + c.length - b.start);
        ++b.count;
        continue;
      }
    }
    blocks.push_back(Block{c.offset, c.length, i, 1});
  }

  std::uint64_t buffer_bytes = 1;  // the largest block, so a small file pins little memory
  for (const auto& b : blocks) buffer_bytes = std::max(buffer_bytes, b.length);
  Arena<B> arena(backend);
  const unsigned slot_count = std::clamp(options.staging_buffers, 2u, 8u);
  struct Slot {
    unsigned char* host = nullptr;
    unsigned char* device = nullptr;
    std::optional<BatchHasher<B>> hasher;
    typename B::Stream stream{};
    std::vector<DeviceChunk> table;
    std::vector<std::uint64_t> expected;
    std::vector<std::size_t> ids;  // index chunk ids, parallel to table
    bool busy = false;
  };
  std::vector<Slot> slots(std::min<std::size_t>(slot_count, std::max<std::size_t>(blocks.size(), 1)));
  for (auto& s : slots) {
    CKPT_ASSIGN_OR_RETURN(s.host, arena.pinned(static_cast<std::size_t>(buffer_bytes)));
    CKPT_ASSIGN_OR_RETURN(s.device, arena.device(static_cast<std::size_t>(buffer_bytes)));
    CKPT_ASSIGN_OR_RETURN(s.stream, arena.stream());
    CKPT_ASSIGN_OR_RETURN(auto hasher, BatchHasher<B>::create(arena, std::min(kBlockChunks, std::max<std::size_t>(index.chunks.size(), 1))));
    s.hasher.emplace(std::move(hasher));
  }
  std::uint64_t bytes_done = 0;
  auto finish = [&](Slot& s) -> Status {
    if (!s.busy) return Status();
    s.busy = false;
    CKPT_TRY(s.hasher->wait());
    CKPT_ASSIGN_OR_RETURN(auto found, s.hasher->mismatches(s.expected.data()));
    for (const auto& m : found) {
      const std::size_t id = s.ids[m.index];
      const auto& rec = index.chunks[id];
      const auto& piece = index.pieces[piece_of[id]];
      const auto& t = index.tensors[piece.tensor];
      const std::uint64_t piece_number = piece_of[id] - t.piece_first, chunk_number = id - piece.chunk_first;
      Problem p;
      p.region = "data";
      p.tensor = t.name;
      p.piece = static_cast<std::int64_t>(piece_number);
      p.chunk = static_cast<std::int64_t>(chunk_number);
      p.offset = rec.offset;
      p.length = rec.length;
      p.expected = hex64(rec.digest);
      p.found = hex64(m.found);
      p.message = "tensor '" + t.name + "' piece " + std::to_string(piece_number) + " chunk " + std::to_string(chunk_number) +
                  " bytes [" + std::to_string(rec.offset) + ", " + std::to_string(rec.offset + rec.length) +
                  "): digest expected " + p.expected + ", found " + p.found;
      problem(std::move(p));
    }
    for (const auto& c : s.table) bytes_done += c.length;
    report.chunks_checked += s.table.size();
    if (options.progress) options.progress(bytes_done, total_bytes);
    return Status();
  };
  auto read_failed = [&](const Block& b, const Status& s) {
    // One problem per run of the block's chunks that belong to one piece, as the CPU verifier reports.
    for (std::size_t i = b.first; i < b.first + b.count;) {
      const std::size_t k = piece_of[by_offset[i]];
      std::size_t j = i;
      std::uint64_t end = 0;
      while (j < b.first + b.count && piece_of[by_offset[j]] == k) {
        end = std::max(end, index.chunks[by_offset[j]].offset + index.chunks[by_offset[j]].length);
        ++j;
      }
      const auto& piece = index.pieces[k];
      const auto& t = index.tensors[piece.tensor];
      Problem p;
      p.code = s.code() == Code::incomplete ? Code::incomplete : Code::io;
      p.region = "data";
      p.tensor = t.name;
      p.piece = static_cast<std::int64_t>(k - t.piece_first);
      p.chunk = static_cast<std::int64_t>(by_offset[i] - piece.chunk_first);
      p.offset = index.chunks[by_offset[i]].offset;
      p.length = end - p.offset;
      p.message = "tensor '" + t.name + "' piece " + std::to_string(k - t.piece_first) + ": " + s.message();
      problem(std::move(p));
      i = j;
    }
  };
  for (std::size_t n = 0; n < blocks.size(); ++n) {
    const Block& b = blocks[n];
    Slot& s = slots[n % slots.size()];
    CKPT_TRY(finish(s));  // its buffers are free once its batch is done
    if (Status rs = detail::read_parallel(fs, reader.file(), path, s.host, static_cast<std::size_t>(b.length), b.start,
                                          options.io_threads);
        !rs.ok()) {
      read_failed(b, rs);
      continue;
    }
    CKPT_TRY(backend.copy_to_device(s.device, s.host, static_cast<std::size_t>(b.length), s.stream));
    s.table.clear();
    s.expected.clear();
    s.ids.clear();
    for (std::size_t i = b.first; i < b.first + b.count; ++i) {
      const auto& rec = index.chunks[by_offset[i]];
      s.table.push_back(DeviceChunk{s.device + (rec.offset - b.start), rec.length});
      s.expected.push_back(rec.digest);
      s.ids.push_back(by_offset[i]);
    }
    CKPT_TRY(s.hasher->enqueue(s.table.data(), s.table.size(), s.expected.data(), s.stream));
    s.busy = true;
  }
  for (std::size_t n = 0; n < slots.size(); ++n) CKPT_TRY(finish(slots[(blocks.size() + n) % slots.size()]));
  report.bytes_checked = bytes_done;
  std::sort(report.problems.begin(), report.problems.end(),
            [](const Problem& a, const Problem& b) { return a.offset < b.offset; });
  return report;
}

// A tensor (or one piece of it) in device memory, to be saved.
struct DeviceTensor {
  std::string name;
  DType dtype = DType::U8;
  Shape shape;        // global shape
  Shape offsets;      // empty: the piece starts at the origin
  Shape piece_shape;  // empty: the whole tensor
  const void* data = nullptr;  // device address of the piece, row-major
};

// Streams device tensors into a writer through pinned staging buffers: the copy of the next slice
// overlaps the write of this one. The writer hashes every byte it writes; afterwards the same chunks are
// hashed in device memory and must match, so the digests in the index cover device -> host -> file
// (spec/GPU.md 7). On a mismatch the writer must not be finished (its file is then removed).
template <class B>
[[nodiscard]] Status write_device_tensors(B& backend, ShardWriter& writer, const std::vector<DeviceTensor>& tensors,
                                          const DeviceIoOptions& options = {}) {
  struct Staged {
    std::size_t tensor = 0;
    std::uint64_t offset = 0, length = 0, total = 0;
  };
  const std::size_t staging = std::max<std::size_t>(options.staging_bytes, 4096);
  std::vector<Staged> slices;
  std::uint64_t largest = 0, total_bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (format::dtype_info(t.dtype) == nullptr)
      return make_error(Code::invalid_argument, "tensor '" + t.name + "': unknown dtype code " + std::to_string(static_cast<int>(t.dtype)));
    std::uint64_t bytes = 0;
    if (!shape_bytes(t.piece_shape.empty() ? t.shape : t.piece_shape, t.dtype, bytes))
      return make_error(Code::invalid_argument, "tensor '" + t.name + "': shape overflows 64 bits");
    if (bytes > 0 && t.data == nullptr)
      return make_error(Code::invalid_argument, "tensor '" + t.name + "': no device address for " + std::to_string(bytes) + " bytes");
    largest = std::max(largest, bytes);
    total_bytes += bytes;
    std::uint64_t off = 0;
    do {
      const std::uint64_t n = std::min<std::uint64_t>(staging, bytes - off);
      slices.push_back(Staged{i, off, n, bytes});
      off += n;
    } while (off < bytes);
  }
  Arena<B> arena(backend);
  const std::size_t buffer_bytes = static_cast<std::size_t>(std::max<std::uint64_t>(std::min<std::uint64_t>(staging, largest), 1));
  const std::size_t buffer_count = std::min<std::size_t>(std::clamp(options.staging_buffers, 2u, 8u), std::max<std::size_t>(slices.size(), 1));
  std::vector<unsigned char*> buffers(buffer_count);
  std::vector<typename B::Event> copied(buffer_count);
  for (std::size_t i = 0; i < buffer_count; ++i) {
    CKPT_ASSIGN_OR_RETURN(buffers[i], arena.pinned(buffer_bytes));
    CKPT_ASSIGN_OR_RETURN(copied[i], arena.event());
  }
  CKPT_ASSIGN_OR_RETURN(auto stream, arena.stream());
  auto issue = [&](std::size_t k) -> Status {
    const Staged& s = slices[k];
    const auto* src = static_cast<const unsigned char*>(tensors[s.tensor].data) + s.offset;
    if (s.length > 0) CKPT_TRY(backend.copy_to_host(buffers[k % buffer_count], src, static_cast<std::size_t>(s.length), stream));
    return backend.record(copied[k % buffer_count], stream);
  };
  for (std::size_t k = 0; k < std::min(buffer_count, slices.size()); ++k) CKPT_TRY(issue(k));

  std::vector<DeviceChunk> table;
  std::vector<std::uint64_t> host_digests;
  std::vector<std::pair<std::size_t, std::uint64_t>> labels;  // tensor, chunk number in its piece
  std::uint64_t done = 0;
  for (std::size_t k = 0; k < slices.size(); ++k) {
    const Staged& s = slices[k];
    const DeviceTensor& t = tensors[s.tensor];
    CKPT_TRY(backend.sync_event(copied[k % buffer_count]));
    if (s.offset == 0) {
      const Shape& local = t.piece_shape.empty() ? t.shape : t.piece_shape;
      CKPT_TRY(writer.begin_piece(t.name, t.dtype, t.shape, t.offsets.empty() ? Shape(t.shape.size(), 0) : t.offsets, local));
    }
    if (s.length > 0) CKPT_TRY(writer.write(buffers[k % buffer_count], static_cast<std::size_t>(s.length)));
    if (s.offset + s.length == s.total) {
      CKPT_TRY(writer.end_piece());
      const auto& chunks = writer.last_piece_chunks();
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        const auto* base = static_cast<const unsigned char*>(t.data);
        table.push_back(DeviceChunk{base + (chunks[c].offset - chunks.front().offset), chunks[c].length});
        host_digests.push_back(chunks[c].digest);
        labels.emplace_back(s.tensor, c);
      }
    }
    if (k + buffer_count < slices.size()) CKPT_TRY(issue(k + buffer_count));
    done += s.length;
    if (options.progress) options.progress(done, total_bytes);
  }
  CKPT_ASSIGN_OR_RETURN(auto differing, verify_chunks(backend, table.data(), host_digests.data(), table.size(), stream));
  if (!differing.empty()) {
    const auto& m = differing.front();
    const auto& chunk = table[m.index];
    const DeviceTensor& t = tensors[labels[m.index].first];
    const std::uint64_t start = static_cast<std::uint64_t>(chunk.data - static_cast<const unsigned char*>(t.data));
    return make_error(Code::corrupt, writer.path() + ": tensor '" + t.name + "' chunk " + std::to_string(labels[m.index].second) +
                                         " bytes [" + std::to_string(start) + ", " + std::to_string(start + chunk.length) +
                                         ") of the piece: device digest " + hex64(m.found) + ", written digest " + hex64(m.expected) +
                                         " (" + std::to_string(differing.size()) + " chunks differ): the bytes changed between device memory "
                                         "and the file (a copy or host memory error, or the tensor was modified during the save)");
  }
  return Status();
}

// Saves device tensors (and metadata) as one shard file; nothing is left at path on failure.
template <class B>
[[nodiscard]] Result<ShardSummary> save_from_device(B& backend, FsRef fs, const std::string& path,
                                                    const std::vector<DeviceTensor>& tensors,
                                                    const WriterOptions& writer_options = {},
                                                    const DeviceIoOptions& options = {},
                                                    const std::vector<MetaEntry>& metadata = {}) {
  CKPT_ASSIGN_OR_RETURN(auto writer, ShardWriter::create(fs, path, writer_options));
  for (const auto& m : metadata) CKPT_TRY(writer.set_metadata(m.key, m.value));
  CKPT_TRY(write_device_tensors(backend, writer, tensors, options));
  return writer.finish();
}

// Where to load a tensor: a device buffer of exactly its byte size.
struct DeviceTarget {
  std::string name;
  void* data = nullptr;
  std::size_t size = 0;
};

// Loads whole tensors into device memory through pinned staging (the read of the next slice overlaps
// the copy of this one), then hashes every chunk in device memory; success means every byte the caller
// receives matched its digest on the device (spec/GPU.md 8). On failure the targets' contents are
// unspecified. Every piece must be one contiguous run of its tensor (a split along the first axis).
template <class B>
[[nodiscard]] Status read_device_tensors(B& backend, ShardReader& reader, const std::vector<DeviceTarget>& targets,
                                         const DeviceIoOptions& options = {}) {
  const Index& index = reader.index();
  const std::string& path = reader.path();
  struct Staged {
    std::uint64_t file_offset = 0, length = 0;
    unsigned char* dst = nullptr;
  };
  std::vector<Staged> slices;
  std::vector<DeviceChunk> table;
  std::vector<std::uint64_t> expected;
  std::vector<std::pair<std::size_t, std::uint64_t>> labels;  // piece, chunk number
  const std::size_t staging = std::max<std::size_t>(options.staging_bytes, 4096);
  std::uint64_t total_bytes = 0;
  for (const auto& target : targets) {
    const TensorRecord* t = index.find_tensor(target.name);
    if (t == nullptr) return make_error(Code::not_found, path + ": no tensor '" + target.name + "'");
    std::uint64_t bytes = 0;
    (void)shape_bytes(t->shape, t->dtype, bytes);  // validated when the index was decoded
    if (bytes != target.size)
      return make_error(Code::invalid_argument, "tensor '" + t->name + "' is " + std::to_string(bytes) + " bytes, device buffer is " + std::to_string(target.size));
    if (bytes > 0 && target.data == nullptr)
      return make_error(Code::invalid_argument, "tensor '" + t->name + "': no device address");
    std::vector<std::pair<std::uint64_t, std::uint64_t>> runs;  // byte offset in the tensor, piece
    for (std::uint64_t k = t->piece_first; k < t->piece_first + t->piece_count; ++k) {
      const auto& p = index.pieces[k];
      if (p.data_length == 0) continue;
      std::uint64_t at = 0;
      if (!detail::piece_run(*t, p, at))
        return make_error(Code::unsupported, path + ": tensor '" + t->name + "' piece " + std::to_string(k - t->piece_first) +
                                                 " at " + shape_string(p.offsets) + " is not contiguous in the tensor; read it with ShardReader::read_slice");
      runs.emplace_back(at, k);
    }
    std::sort(runs.begin(), runs.end());
    std::uint64_t covered = 0;
    for (const auto& r : runs) {
      const auto& p = index.pieces[r.second];
      if (r.first != covered)
        return make_error(r.first < covered ? Code::corrupt : Code::not_found,
                          path + ": tensor '" + t->name + "': pieces in this file " + (r.first < covered ? "overlap" : "leave a gap") +
                              " at byte " + std::to_string(std::min(r.first, covered)));
      covered += p.data_length;
      auto* dst = static_cast<unsigned char*>(target.data) + r.first;
      for (std::uint64_t off = 0; off < p.data_length; off += staging)
        slices.push_back(Staged{p.data_offset + off, std::min<std::uint64_t>(staging, p.data_length - off), dst + off});
      for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
        const auto& rec = index.chunks[p.chunk_first + c];
        table.push_back(DeviceChunk{dst + (rec.offset - p.data_offset), rec.length});
        expected.push_back(rec.digest);
        labels.emplace_back(static_cast<std::size_t>(r.second), c);
      }
    }
    if (covered != bytes)
      return make_error(Code::not_found, path + ": tensor '" + t->name + "': pieces in this file hold " + std::to_string(covered) +
                                             " of its " + std::to_string(bytes) + " bytes");
    total_bytes += bytes;
  }
  Arena<B> arena(backend);
  const std::size_t buffer_count = std::min<std::size_t>(std::clamp(options.staging_buffers, 2u, 8u), std::max<std::size_t>(slices.size(), 1));
  std::uint64_t largest = 1;
  for (const auto& s : slices) largest = std::max(largest, s.length);
  std::vector<unsigned char*> buffers(buffer_count);
  std::vector<typename B::Event> copied(buffer_count);
  for (std::size_t i = 0; i < buffer_count; ++i) {
    CKPT_ASSIGN_OR_RETURN(buffers[i], arena.pinned(static_cast<std::size_t>(largest)));
    CKPT_ASSIGN_OR_RETURN(copied[i], arena.event());
  }
  CKPT_ASSIGN_OR_RETURN(auto stream, arena.stream());
  std::uint64_t done = 0;
  for (std::size_t k = 0; k < slices.size(); ++k) {
    const Staged& s = slices[k];
    unsigned char* buffer = buffers[k % buffer_count];
    if (k >= buffer_count) CKPT_TRY(backend.sync_event(copied[k % buffer_count]));  // its last copy has left
    CKPT_TRY(detail::read_parallel(reader.fs(), reader.file(), path, buffer, static_cast<std::size_t>(s.length), s.file_offset,
                                   options.io_threads));
    CKPT_TRY(backend.copy_to_device(s.dst, buffer, static_cast<std::size_t>(s.length), stream));
    CKPT_TRY(backend.record(copied[k % buffer_count], stream));
    done += s.length;
    if (options.progress) options.progress(done, total_bytes);
  }
  // Same stream: the hash runs after the last copy, on the bytes as they landed in device memory.
  CKPT_ASSIGN_OR_RETURN(auto differing, verify_chunks(backend, table.data(), expected.data(), table.size(), stream));
  if (!differing.empty()) {
    const auto& m = differing.front();
    const auto& piece = index.pieces[labels[m.index].first];
    const auto& t = index.tensors[piece.tensor];
    const auto& rec = index.chunks[piece.chunk_first + labels[m.index].second];
    return make_error(Code::corrupt, path + ": tensor '" + t.name + "' piece " + std::to_string(labels[m.index].first - t.piece_first) +
                                         " chunk " + std::to_string(labels[m.index].second) + " bytes [" + std::to_string(rec.offset) +
                                         ", " + std::to_string(rec.offset + rec.length) + "): digest expected " + hex64(m.expected) +
                                         ", found " + hex64(m.found) + " in device memory (" + std::to_string(differing.size()) +
                                         " chunks differ)");
  }
  return backend.sync_stream(stream);
}

// Opens a shard file and loads the named tensors into device memory, verified on the device.
template <class B>
[[nodiscard]] Status load_to_device(B& backend, FsRef fs, const std::string& path, const std::vector<DeviceTarget>& targets,
                                    const DeviceIoOptions& options = {}) {
  CKPT_ASSIGN_OR_RETURN(auto reader, ShardReader::open(fs, path));
  return read_device_tensors(backend, reader, targets, options);
}

}  // namespace ckpt::gpu
