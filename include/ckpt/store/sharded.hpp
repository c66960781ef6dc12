// ckpt: a step at any world size (spec/SHARDING.md 5-7). How a tensor is split among ranks, how a
// slice is streamed block by block under a memory budget, a source that reads any slice of any
// tensor of a standalone file or of a step written by any number of ranks, and the two rewrites built
// on them: reshard (a source as a new step of M shard files, written by M threads through the store's
// multi-rank protocol) and merge (one or more sources as one standalone file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../core/error.hpp"
#include "../shard/index.hpp"
#include "../io/posix_fs.hpp"
#include "path_kind.hpp"
#include "../shard/shard_reader.hpp"
#include "../shard/shard_writer.hpp"
#include "store.hpp"
#include "../dist/thread_comm.hpp"
#include "training_state.hpp"

namespace ckpt {

// --- Splitting a tensor among ranks (spec/SHARDING.md 5.1) ---------------------------------------

struct Slice {
  Shape offsets, shape;
  bool operator==(const Slice& o) const { return offsets == o.offsets && shape == o.shape; }
};

// Part `index` of `extent` split into `parts` as evenly as possible: the first extent % parts parts get
// one more element. Returns {offset, length}; parts beyond the extent get length 0.
[[nodiscard]] std::pair<std::uint64_t, std::uint64_t> split_range(std::uint64_t extent, std::uint32_t parts,
                                                                  std::uint32_t index) noexcept;

// "PATTERN=DIM" or "PATTERN=replicate"; the pattern is a glob over tensor names.
struct SplitRule {
  std::string pattern;
  bool replicate = false;
  std::size_t dim = 0;
};
[[nodiscard]] Result<SplitRule> parse_split_rule(std::string_view text);
// Glob: '*' matches any run of characters ('/' and '.' included), '?' any one; everything else itself.
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view name) noexcept;

struct SplitChoice {
  bool replicate = false;  // held whole by every rank, written by rank 0
  std::size_t dim = 0;
};
// The first rule whose pattern matches, else an even split along dimension 0. Scalars and tensors
// without elements are always written whole by rank 0. A rule naming a dimension the tensor does not
// have is an error naming both.
[[nodiscard]] Result<SplitChoice> choose_split(std::string_view name, const Shape& shape, const std::vector<SplitRule>& rules);
// The slice rank `rank` of `world` holds under `choice`: a shape with a 0 where a split leaves it
// nothing; the whole tensor for every rank when replicated (a writer lets rank 0 write it).
[[nodiscard]] Slice split_slice(const Shape& shape, const SplitChoice& choice, std::uint32_t world, std::uint32_t rank);

// --- Streaming a slice (spec/SHARDING.md 5.2) ----------------------------------------------------

// Calls block(offsets, shape) for consecutive blocks of a slice of `shape` (offsets relative to the slice)
// whose bytes, in call order, are the slice in row-major order, each at most max(budget, one row of the
// innermost dimension) bytes. Stops at the first error block returns.
[[nodiscard]] Status for_each_block(const Shape& shape, std::uint64_t element_size, std::uint64_t budget,
                                    const std::function<Status(const Shape& offsets, const Shape& shape)>& block);

// --- Training state inside a standalone file (spec/SHARDING.md 6.3) ------------------------------

// Metadata key of the training state a merge or a single-file save carries: bytes = u64 step, then
// the training state encoding of spec/JOURNAL.md 7.3.
inline constexpr std::string_view kTrainingStateKey = "ckpt.training_state";
[[nodiscard]] std::string encode_state_metadata(const TrainingState& state);
[[nodiscard]] Result<TrainingState> decode_state_metadata(const std::string& bytes, const std::string& where);

// A store step always has a number and a manifest state, so a step written from a source without
// training state (reshard without --step) holds this value, true, and nothing else in its state; it
// reads back as no state, and so stays stateless through merge and export (spec/SHARDING.md 6.1).
inline constexpr std::string_view kNoTrainingStateKey = "ckpt.no_training_state";
// The manifest state of such a step.
[[nodiscard]] TrainingState no_training_state(std::uint64_t step);
// A step's training state from its manifest's: none for the state no_training_state writes.
[[nodiscard]] std::optional<TrainingState> step_training_state(const TrainingState& manifest_state);

enum class ConflictPolicy : std::uint8_t { error, first, last };
[[nodiscard]] Result<ConflictPolicy> parse_conflict_policy(std::string_view text);

// --- One reader: a standalone .ckpt, a step directory, or a store (its latest step or a given one) ---

struct TensorInfo {
  std::string name;
  DType dtype = DType::U8;
  Shape shape;
  std::uint64_t bytes = 0;
};

// Which step of a store Checkpoint::open reads.
struct StepSelector {
  std::optional<std::uint64_t> step;  // this step; default: the latest committed step
};

class Checkpoint {
 public:
  enum class Kind : std::uint8_t { file, step };
  // A regular file is a shard file holding every tensor whole (else invalid_argument naming the tensor
  // and the missing slice); a directory holding JOURNAL is a store (its latest step); a directory
  // step-<s>-<t> inside a store is that transaction, which must be committed and not retired. A step is
  // opened as Store::open_step does: manifest against COMMIT, shards against manifest, coverage.
  // The path is told apart by classify_path (path_kind.hpp). selector.step picks a store's step; for a
  // file or a step directory it must be that file's or directory's step (else invalid_argument).
  [[nodiscard]] static Result<Checkpoint> open(FsRef fs, const std::string& path,
                                                                const StepSelector& selector = {});
  // A committed step already opened by its store (`reader`), named `store_name` in messages; `owner` keeps
  // that store, and whatever it reads through, alive as long as the Checkpoint: how a step of a store on
  // objects is read (object/object_checkpoint.hpp).
  [[nodiscard]] static Checkpoint from_step(StepReader reader, const StepInfo& info, const std::string& store_name,
                                            std::shared_ptr<void> owner);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  Checkpoint(Checkpoint&&) = default;  // a value: the open file, step or store moves with it
  Checkpoint& operator=(Checkpoint&&) = default;

  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const std::string& description() const noexcept { return description_; }
  [[nodiscard]] std::optional<std::uint64_t> step() const noexcept { return step_; }
  [[nodiscard]] std::uint32_t world_size() const noexcept { return world_; }
  // Every tensor once, in order of first appearance (rank order for a step).
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] const TensorInfo* find(std::string_view name) const;
  [[nodiscard]] std::uint64_t data_bytes() const noexcept { return data_bytes_; }
  // A step's manifest state (none when it says so: step_training_state), or a file's kTrainingStateKey metadata.
  [[nodiscard]] const std::optional<TrainingState>& state() const noexcept { return state_; }
  // Metadata of every shard file, kTrainingStateKey left out. The same key with different values in two
  // shards of a step is a conflict that `policy` resolves (error: Code::conflict naming the key).
  [[nodiscard]] Result<std::vector<MetaEntry>> metadata(ConflictPolicy policy) const;
  // Reads any slice of a tensor, touching only the pieces that overlap it and verifying their chunks.
  // Safe from several threads at once when Fs is (PosixFs is).
  [[nodiscard]] Status read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                  std::size_t dst_size);
  // A zero-copy view of a whole tensor, every chunk verified first, where its bytes lie whole and
  // contiguous in one file: one piece covering it (else Code::unsupported; read_slice then copies).
  // Truncating the file while the view is alive kills the process (SIGBUS), as any mapping.
  [[nodiscard]] Result<Mapping> map_tensor(std::string_view name, MapMode mode = MapMode::read_only);

 private:
  Checkpoint() = default;
  void add_tensors(const Index& index);

  Kind kind_ = Kind::file;
  std::string path_, description_;
  std::optional<std::uint64_t> step_;
  std::uint32_t world_ = 1;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> by_name_;  // positions in tensors_
  std::uint64_t data_bytes_ = 0;
  std::optional<TrainingState> state_;
  std::optional<ShardReader> file_;    // Kind::file
  std::unique_ptr<Store> store_;       // Kind::step: the store stays open (and locked for nobody: read-only)
  std::shared_ptr<void> owner_;        // Kind::step from_step: what the reader's store needs (outlives the reader)
  std::optional<StepReader> step_reader_;
};

// --- Reshard (spec/SHARDING.md 6.1) ---------------------------------------------------------------

struct ReshardOptions {
  std::uint32_t world_size = 1;
  std::vector<SplitRule> rules;         // first match wins; default: even split along dimension 0
  // The new step's number, also its training state's step: given, a source without training state gets
  // a state of this step. Default: the source's step; for a source without training state, 0 and no state.
  std::optional<std::uint64_t> step;
  ConflictPolicy on_conflict = ConflictPolicy::error;  // shard metadata keys with different values
  unsigned parallelism = 0;             // ranks writing at once; 0: min(world size, hardware threads)
  std::size_t block_size = std::size_t{8} << 20;       // bytes per read; memory ~ parallelism x (block + buffer)
  StoreOptions store;                   // of the destination; create_if_missing is set
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;  // bytes written; called under a lock
};

struct ReshardSummary {
  StepInfo step;
  std::uint32_t world_size = 0;
  std::uint64_t tensors = 0, bytes = 0;
};

// One rank's part of a multi-rank save, as reshard writes it: a Transaction holding its open store (on a
// file system, or on object storage: store/object_checkpoint.hpp).
class RankSave {
 public:
  virtual ~RankSave() = default;
  [[nodiscard]] virtual TrainingState& state() = 0;
  [[nodiscard]] virtual ShardWriter& shard_writer() = 0;
  [[nodiscard]] virtual Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                                           const Shape& local_shape) = 0;
  [[nodiscard]] virtual Status write(const void* data, std::size_t size) = 0;
  [[nodiscard]] virtual Status end_piece() = 0;
  // Collective, as the transaction's: this rank's failure abandons the step on every rank.
  [[nodiscard]] virtual Status abort(const Status& reason) = 0;
  [[nodiscard]] virtual Result<CommitResult> commit() = 0;
};

// RankSave over a Store's Transaction; the store stays open as long as the transaction.
class StoreRankSave final : public RankSave {
 public:
  StoreRankSave(std::unique_ptr<Store> store, std::unique_ptr<Transaction> tx) : store_(std::move(store)), tx_(std::move(tx)) {}
  TrainingState& state() override { return tx_->state(); }
  ShardWriter& shard_writer() override { return tx_->shard_writer(); }
  Status begin_piece(std::string_view name, DType dtype, const Shape& global_shape, const Shape& offsets,
                     const Shape& local_shape) override {
    return tx_->begin_piece(name, dtype, global_shape, offsets, local_shape);
  }
  Status write(const void* data, std::size_t size) override { return tx_->write(data, size); }
  Status end_piece() override { return tx_->end_piece(); }
  Status abort(const Status& reason) override { return tx_->abort(reason); }
  Result<CommitResult> commit() override { return tx_->commit(); }

 private:
  std::unique_ptr<Store> store_;
  std::unique_ptr<Transaction> tx_;  // destroyed before its store
};

// Opens the destination store on one rank (collective over comm) and begins the step there.
using BeginRankSave = std::function<Result<std::unique_ptr<RankSave>>(ThreadComm& comm, std::uint64_t step)>;

// reshard_to_store's work with the destination given as begin_rank_save (options.store is the caller's).
[[nodiscard]] Result<ReshardSummary> reshard_with(Checkpoint& source, const ReshardOptions& options,
                                                  const BeginRankSave& begin_rank_save);

// Writes the source as a new committed step of `options.world_size` shard files in the store at
// store_path (created when missing): M threads, one per rank, each writing its pieces through the
// store's multi-rank transaction (ThreadComm), so the step commits whole or not at all. The training
// state is the source's (with options.step as its step when given); a source without one writes a step
// without one (no_training_state) unless options.step gives it a number. Shard metadata goes to rank
// 0's shard as it was. Fs must be safe to use from several threads (PosixFs is).
[[nodiscard]] Result<ReshardSummary> reshard_to_store(FsRef fs, Checkpoint& source, const std::string& store_path,
                                                      const ReshardOptions& options);

// --- Merge (spec/SHARDING.md 6.2) -----------------------------------------------------------------

struct MergeOptions {
  ConflictPolicy on_conflict = ConflictPolicy::error;  // tensor names, metadata keys, training states
  std::size_t block_size = std::size_t{8} << 20;
  std::uint32_t alignment_log2 = format::kDefaultAlignmentLog2;
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;
  bool overwrite = false;  // replace an existing output
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

// What a source contributes: every tensor (empty selection), or those matching one of the globs;
// "@optimizer" selects the tensors its training state lists as optimizer state, "@model" the others.
struct SourceSelection {
  std::vector<std::string> patterns;
  [[nodiscard]] bool empty() const noexcept { return patterns.empty(); }
};

struct MergeSummary {
  std::string output;
  std::uint64_t tensors = 0, bytes = 0, file_size = 0;
  std::vector<std::string> resolved;  // each conflict the policy resolved, one line each
};

// Writes the selected tensors of every source, each whole as one piece, into one standalone file
// (temporary name, fsync, rename, fsync directory: complete or absent). A tensor name or metadata key
// in several sources is a conflict the policy resolves; the training state is the first (or last)
// source's, its optimizer list restricted to the tensors taken from the sources that listed them.
[[nodiscard]] Result<MergeSummary> merge_to_file(FsRef fs, const std::vector<Checkpoint*>& sources,
                                                 const std::vector<SourceSelection>& selections, const std::string& output,
                                                 const MergeOptions& options);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/sharded_inl.hpp"
#endif
