// ckpt: writes one shard file in a single streaming pass, hashing each chunk as its bytes go by.
//
//   superblock | piece data (aligned) | index | footer          (spec/FORMAT.md 2)
//
// Memory use is the write buffers (one, or two when pipelined) plus 24 bytes per chunk of index,
// independent of the data size.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "index.hpp"
#include "../io/posix_fs.hpp"
#include "../core/uuid.hpp"

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
  // true: the writes go to the Fs from one background thread per writer, so the caller's thread hashes
  // the next block while the previous one is written (two buffers of buffer_size). The file, every
  // digest and the Fs's sequence of operations are the same either way; a write error surfaces at
  // the next call instead of the one that queued the write. false: every write is made in the call.
  bool pipeline = true;
  std::optional<Uuid> uuid;  // random when unset
  // An existing file to take over instead of creating one (a store's slot, spec/JOURNAL.md 10.1): renamed to
  // the write path and written over from offset 0, every byte, its tail past the new end cut at finish. When
  // it cannot be renamed (gone), the file is created as without it.
  std::string reuse;
  // The reused file's bytes as this process maps them (MapMode::shared_write), from offset 0: a write()
  // whose bytes lie at exactly the writer's position in it is already in the file, so it is hashed and not
  // written (a memory store's capture, copied into its slot, spec/JOURNAL.md 10.1); bytes elsewhere in it
  // are refused. Ignored when no file was reused (the bytes are then written as any others).
  const unsigned char* in_place = nullptr;
  std::uint64_t in_place_size = 0;
};

// Where each piece's bytes start in a shard written with `alignment_log2`, pieces of `sizes` bytes written in
// that order (each aligned, spec/FORMAT.md 4.2), and where the data ends: what a caller needs to place the
// bytes in a file before its writer runs (WriterOptions::in_place). Fails when the sizes overflow.
struct DataLayout {
  std::vector<std::uint64_t> offsets;
  std::uint64_t end = 0;
};
[[nodiscard]] Result<DataLayout> plan_data_layout(const std::vector<std::uint64_t>& sizes, std::uint32_t alignment_log2);

// What finish() made: enough for a manifest to pin the file's exact content.
struct ShardSummary {
  std::string path;
  Uuid uuid{};
  std::uint64_t file_size = 0;
  std::uint64_t data_bytes = 0;
  std::uint64_t index_digest = 0;  // covers every chunk digest, so it pins every byte
  std::uint64_t tensor_count = 0, piece_count = 0, chunk_count = 0;
};

namespace detail {
struct FreeWriteBuffer {
  void operator()(unsigned char* p) const noexcept { std::free(p); }
};
using WriteBuffer = std::unique_ptr<unsigned char[], FreeWriteBuffer>;
// A write buffer of size bytes; from 2 MiB on, 2 MiB aligned and backed by transparent huge pages
// where the system has them: copying into a reused 4 MiB buffer of 4 KiB pages ran at 2 GiB/s on a
// 2-core VM (TLB misses), into a huge-page one at 10 GiB/s (ckpt-bench, RAM dir).
[[nodiscard]] WriteBuffer allocate_write_buffer(std::size_t size);

// A writer's I/O stage: one thread that makes the queued pwrites in order, at most kDepth at a time
// queued or in flight. While any is, only that thread calls the Fs (SimFs and FaultFs are not meant
// to be shared), so the writer drains it before its own Fs calls. After the first failed write the
// rest of the queue is dropped, so the Fs sees what the synchronous writer would have made.
class WriteBehind {
 public:
  static constexpr std::uint64_t kDepth = 2;  // one write in flight, one queued: double buffering

  WriteBehind(FsRef fs, FileHandle file) : fs_(fs), file_(file) {}
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;
  ~WriteBehind() { stop(); }

  // Starts the thread; false when the system has none to give (the writer then writes in the call).
  [[nodiscard]] bool start();
  // Queues a write of data[0, size) at offset, waiting while kDepth are pending. The memory must stay
  // unchanged until wait() of the returned ticket. After a failure nothing is queued: the error.
  [[nodiscard]] Result<std::uint64_t> submit(const unsigned char* data, std::size_t size, std::uint64_t offset);
  // Waits until the write with this ticket and all before it are done; the first write error if any
  // failed. An exception thrown inside the Fs (a test's persistence hook) is rethrown here, once.
  [[nodiscard]] Status wait(std::uint64_t ticket);
  [[nodiscard]] Status drain() { return wait(submitted()); }
  [[nodiscard]] std::uint64_t submitted() const;
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Makes the queued writes (unless one failed), then ends the thread. Never throws.
  void stop() noexcept;

 private:
  struct Job {
    const unsigned char* data;
    std::size_t size;
    std::uint64_t offset;
  };
  void run();

  FsRef fs_;
  const FileHandle file_;
  mutable std::mutex mutex_;
  std::condition_variable has_work_, job_done_;
  std::deque<Job> queue_;  // the front one is in flight
  std::uint64_t submitted_ = 0, completed_ = 0;  // tickets; dropped jobs count as completed
  Status error_;
  std::exception_ptr thrown_;
  std::atomic<bool> failed_{false};
  bool stopping_ = false;
  std::thread thread_;
};
}  // namespace detail

class ShardWriter {
 public:
  [[nodiscard]] static Result<ShardWriter> create(FsRef fs, std::string path, WriterOptions options = {});
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // A value: moving hands over the file, the buffers and the I/O thread (which holds no pointer to the
  // writer); the moved-from writer owns nothing and its destructor does nothing. No move assignment:
  // replacing a writer that still owns a file would have to abandon it silently; finish or destroy it.
  ShardWriter(ShardWriter&&) = default;
  ShardWriter& operator=(ShardWriter&&) = delete;
  ~ShardWriter();  // an unfinished writer removes its file: nothing half-written is left under the final name

  // Adds a whole tensor from one buffer of exactly its byte size.
  [[nodiscard]] Status add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                  std::size_t size);
  // Streaming: open a piece (a hyper-rectangle of a global tensor), write its bytes in any number of
  // calls, in row-major order, then end it. A tensor may get several pieces that do not overlap.
  // add_tensor() and write() return only once their bytes are in a writer buffer or written, so the
  // caller may reuse its memory at once. Pipelined, a failed write surfaces at the next call (or at
  // finish()) with the Status the synchronous writer would have returned, and the writer is failed.
  [[nodiscard]] Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape,
                                   const Shape& offsets, const Shape& local_shape);
  [[nodiscard]] Status write(const void* data, std::size_t size);
  [[nodiscard]] Status end_piece();
  [[nodiscard]] Status set_metadata(std::string key, Value value);
  // Writes index and footer, syncs, renames into place and syncs the directory.
  [[nodiscard]] Result<ShardSummary> finish();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // A piece was begun and not ended: finish() would refuse.
  [[nodiscard]] bool piece_open() const noexcept { return open_.has_value(); }
  // The index finish() wrote (empty before): a store's commit takes the pieces from it instead of
  // reading the file back (spec/JOURNAL.md 5.3).
  [[nodiscard]] const Index& written_index() const noexcept { return written_index_; }
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return position_; }
  // Chunks (offset, length, digest) of the piece ended last, so a caller can compare digests computed
  // elsewhere before finish(): a GPU save checks them against device digests (spec/GPU.md 7).
  [[nodiscard]] const std::vector<ChunkRecord>& last_piece_chunks() const noexcept {
    static const std::vector<ChunkRecord> none;
    return pieces_.empty() ? none : pieces_.back().chunks;
  }

 private:
  ShardWriter(FsRef fs, std::string path, std::string write_path, FileHandle file, WriterOptions options);
  [[nodiscard]] Status fail(Status s);
  [[nodiscard]] Status usable();
  [[nodiscard]] Result<std::uint64_t> write_block(const unsigned char* data, std::size_t size, std::uint64_t offset,
                                                  bool borrowed);
  [[nodiscard]] Status release_caller_memory();
  [[nodiscard]] Status write_bytes(const unsigned char* bytes, std::size_t size);
  [[nodiscard]] Status write_in_place(const unsigned char* bytes, std::size_t size);
  void hash_span(const unsigned char* bytes, std::size_t n);
  [[nodiscard]] Status drain_writes();
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

  // True until moved from: the destructor of a moved-from writer must not remove the file.
  struct Owner {
    bool owns = true;
    Owner() = default;
    Owner(Owner&& o) noexcept : owns(std::exchange(o.owns, false)) {}
    Owner& operator=(Owner&&) = delete;
  };
  Owner owner_;
  FsRef fs_;
  std::string path_, write_path_;
  FileHandle file_;
  WriterOptions options_;
  Superblock superblock_;
  // Write buffers: buffers_[current_] fills while the other (pipelined, allocated at the first
  // queued flush) may be on its way to the Fs.
  std::vector<detail::WriteBuffer> buffers_;
  std::vector<std::uint64_t> buffer_ticket_;  // the write of each buffer still pending; 0: none
  std::size_t current_ = 0;
  std::size_t filled_ = 0;          // bytes in buffers_[current_]
  std::uint64_t buffer_start_ = 0;  // file offset of buffers_[current_][0]
  bool write_behind_ = false;  // options_.pipeline, until finish() drains or no thread could start
  std::unique_ptr<detail::WriteBehind> io_;  // started at the first pipelined write
  std::uint64_t borrowed_ticket_ = 0;  // last pending write from the caller's memory; 0: none
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
  bool reused_ = false;  // written over a file taken from options_.reuse: its tail is cut at finish
  Index written_index_;
};

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/shard_writer_inl.hpp"
#endif
