// ckpt: definitions for sharded.hpp (spec/SHARDING.md 5-7).
#pragma once

#include "../sharded.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>

#include "../../dist/thread_comm.hpp"

namespace ckpt {

CKPT_INLINE std::pair<std::uint64_t, std::uint64_t> split_range(std::uint64_t extent, std::uint32_t parts,
                                                           std::uint32_t index) noexcept {
  if (parts == 0 || index >= parts) return {extent, 0};
  const std::uint64_t base = extent / parts, extra = extent % parts;
  // The first `extra` parts hold base + 1 elements, the rest base.
  const std::uint64_t offset = index * base + std::min<std::uint64_t>(index, extra);
  return {offset, base + (index < extra ? 1 : 0)};
}

CKPT_INLINE bool glob_match(std::string_view pattern, std::string_view name) noexcept {
  // Greedy matching with one backtrack point per '*': linear in practice, never exponential.
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

CKPT_INLINE Result<SplitRule> parse_split_rule(std::string_view text) {
  const auto eq = text.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    return make_error(Code::invalid_argument, "split rule '" + std::string(text) + "': expected PATTERN=DIM or PATTERN=replicate");
  SplitRule rule;
  rule.pattern = std::string(text.substr(0, eq));
  const std::string_view what = text.substr(eq + 1);
  if (what == "replicate") {
    rule.replicate = true;
    return rule;
  }
  std::uint64_t dim = 0;
  for (const char c : what) {
    if (c < '0' || c > '9' || dim >= format::kMaxRank)
      return make_error(Code::invalid_argument, "split rule '" + std::string(text) + "': '" + std::string(what) +
                                                    "' is neither a dimension below 64 nor 'replicate'");
    dim = dim * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (dim >= format::kMaxRank)
    return make_error(Code::invalid_argument, "split rule '" + std::string(text) + "': dimension " + std::to_string(dim) + " is 64 or more");
  rule.dim = static_cast<std::size_t>(dim);
  return rule;
}

CKPT_INLINE Result<SplitChoice> choose_split(std::string_view name, const Shape& shape, const std::vector<SplitRule>& rules) {
  SplitChoice choice;
  std::uint64_t elements = 0;
  // A scalar cannot be split, and a tensor without elements has nothing to split: rank 0 writes it whole.
  if (shape.empty() || !shape_elements(shape, elements) || elements == 0) {
    choice.replicate = true;
    return choice;
  }
  for (const auto& rule : rules) {
    if (!glob_match(rule.pattern, name)) continue;
    if (rule.replicate) {
      choice.replicate = true;
    } else if (rule.dim >= shape.size()) {
      return make_error(Code::invalid_argument, "tensor '" + std::string(name) + "' of shape " + shape_string(shape) +
                                                    " has no dimension " + std::to_string(rule.dim) + " (split rule '" +
                                                    rule.pattern + "=" + std::to_string(rule.dim) + "')");
    } else {
      choice.dim = rule.dim;
    }
    return choice;
  }
  return choice;
}

CKPT_INLINE Slice split_slice(const Shape& shape, const SplitChoice& choice, std::uint32_t world, std::uint32_t rank) {
  Slice slice{Shape(shape.size(), 0), shape};
  if (choice.replicate || shape.empty()) return slice;  // every rank holds it all
  const auto [offset, length] = split_range(shape[choice.dim], world, rank);
  slice.offsets[choice.dim] = offset;
  slice.shape[choice.dim] = length;
  return slice;
}

CKPT_INLINE Status for_each_block(const Shape& shape, std::uint64_t element_size, std::uint64_t budget,
                             const std::function<Status(const Shape& offsets, const Shape& shape)>& block) {
  const std::size_t rank = shape.size();
  std::uint64_t elements = 0;
  if (!shape_elements(shape, elements))
    return make_error(Code::invalid_argument, "shape " + shape_string(shape) + " overflows 64 bits");
  if (elements == 0) return Status();
  if (rank == 0) return block(Shape(), Shape());
  const std::uint64_t budget_elements = std::max<std::uint64_t>(1, element_size == 0 ? budget : budget / element_size);
  // The outermost dimension d whose inner block (dimensions after d) fits the budget; blocks take
  // `rows` slabs of it at a time, so each block is contiguous in the slice's row-major order.
  std::size_t d = rank - 1;
  std::uint64_t inner = 1, wider = 0;
  while (d > 0 && checked_mul(inner, shape[d], wider) && wider <= budget_elements) inner = wider, --d;
  const std::uint64_t rows = std::max<std::uint64_t>(1, std::min(shape[d], budget_elements / inner));
  Shape offsets(rank, 0), extent = shape;
  for (std::size_t k = 0; k < d; ++k) extent[k] = 1;
  while (true) {
    for (std::uint64_t at = 0; at < shape[d]; at += rows) {
      offsets[d] = at;
      extent[d] = std::min(rows, shape[d] - at);
      CKPT_TRY(block(offsets, extent));
    }
    offsets[d] = 0;
    // Next index of the dimensions before d, row-major.
    std::size_t k = d;
    while (k > 0) {
      --k;
      if (++offsets[k] < shape[k]) break;
      offsets[k] = 0;
      if (k == 0) return Status();
    }
    if (d == 0) return Status();
  }
}

CKPT_INLINE std::string encode_state_metadata(const TrainingState& state) {
  Encoder out;
  out.u64(state.step);
  encode_training_state(out, state);
  return std::move(out.str());
}

CKPT_INLINE Result<TrainingState> decode_state_metadata(const std::string& bytes, const std::string& where) {
  Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  TrainingState state;
  if (!in.u64(state.step))
    return make_error(Code::corrupt, where + ": metadata '" + std::string(kTrainingStateKey) + "' is shorter than its step");
  CKPT_TRY(decode_training_state(in, state, where + ": metadata '" + std::string(kTrainingStateKey) + "'"));
  if (in.remaining() != 0)
    return make_error(Code::corrupt, where + ": metadata '" + std::string(kTrainingStateKey) + "' has " +
                                         std::to_string(in.remaining()) + " trailing bytes");
  return state;
}

CKPT_INLINE TrainingState no_training_state(std::uint64_t step) {
  TrainingState state;
  state.step = step;
  state.values.emplace(std::string(kNoTrainingStateKey), Value(true));
  return state;
}

CKPT_INLINE std::optional<TrainingState> step_training_state(const TrainingState& manifest_state) {
  if (manifest_state == no_training_state(manifest_state.step)) return std::nullopt;
  return manifest_state;
}

CKPT_INLINE Result<ConflictPolicy> parse_conflict_policy(std::string_view text) {
  if (text == "error") return ConflictPolicy::error;
  if (text == "first") return ConflictPolicy::first;
  if (text == "last") return ConflictPolicy::last;
  return make_error(Code::invalid_argument, "conflict policy '" + std::string(text) + "': expected error, first or last");
}

// --- Checkpoint ------------------------------------------------------------------------------

CKPT_INLINE void Checkpoint::add_tensors(const Index& index) {
  for (const auto& t : index.tensors) {
    if (!by_name_.emplace(t.name, tensors_.size()).second) continue;  // a later shard's piece of a known tensor
    TensorInfo info{t.name, t.dtype, t.shape, 0};
    (void)shape_bytes(t.shape, t.dtype, info.bytes);  // checked when the index was decoded
    data_bytes_ += info.bytes;
    tensors_.push_back(std::move(info));
  }
}

CKPT_INLINE const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

CKPT_INLINE Result<Checkpoint> Checkpoint::open(FsRef fs, const std::string& raw_path, const StepSelector& selector) {
  std::string path = raw_path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto kind = classify_path(fs, path);
  if (!kind.ok()) return kind.status().with_context(path);
  Checkpoint source;
  source.path_ = path;
  auto wrong_step = [&](std::optional<std::uint64_t> has) {
    return make_error(Code::invalid_argument, path + ": step " + std::to_string(*selector.step) + " was asked for, this " +
                                                  (*kind == PathKind::file ? "file" : "step directory") + " holds " +
                                                  (has ? "step " + std::to_string(*has) : std::string("no step number")));
  };
  if (*kind == PathKind::file) {
    CKPT_ASSIGN_OR_RETURN(source.file_, ShardReader::open(fs, path));
    source.kind_ = Kind::file;
    source.description_ = "file " + path;
    // A file read as a checkpoint holds every tensor whole; one shard of a step does not.
    std::vector<GlobalPiece> pieces;
    append_index_pieces(source.file_->index(), 0, pieces);
    CKPT_TRY(coverage_status(check_coverage(pieces), Code::invalid_argument,
                             path + ": a standalone file must hold every tensor whole (for the shards of a step, pass "
                                    "its step directory or its store)"));
    source.add_tensors(source.file_->index());
    if (const MetaEntry* m = source.file_->index().find_metadata(kTrainingStateKey)) {
      if (!m->value.is_bytes())
        return make_error(Code::corrupt, path + ": metadata '" + std::string(kTrainingStateKey) + "' is not bytes");
      CKPT_ASSIGN_OR_RETURN(TrainingState state, decode_state_metadata(m->value.as_bytes(), path));
      source.step_ = state.step;
      source.state_ = std::move(state);
    }
    if (selector.step && source.step_ != selector.step) return wrong_step(source.step_);
    return Result<Checkpoint>(std::move(source));
  }
  std::string store_path = path;
  std::optional<std::uint64_t> txn;
  if (*kind != PathKind::store) {
    std::uint64_t s = 0, t = 0;
    const std::string parent = parent_path(path);
    if (!parse_step_dir_name(base_name(path), s, t) || !fs.stat(join_path(parent, std::string(journal::kJournalName))).ok())
      return make_error(Code::invalid_argument, path + ": a directory that is neither a store (it has no JOURNAL) nor a step "
                                                       "directory step-<step>-<txn> inside one");
    if (selector.step && *selector.step != s) return wrong_step(s);
    store_path = parent;
    txn = t;
  }
  CKPT_ASSIGN_OR_RETURN(source.store_, Store::open(fs, store_path, Access::read_only));
  std::optional<StepInfo> chosen;
  if (txn) {
    for (const auto& s : source.store_->steps())
      if (s.txn == *txn) chosen = s;
    if (!chosen) {
      std::string state = "not in the journal";
      for (const auto& t : source.store_->transactions())
        if (t.txn == *txn) state = txn_state_name(t.state);
      return make_error(Code::not_found, path + ": transaction " + std::to_string(*txn) + " is not a committed step (" + state + ")");
    }
  } else if (selector.step) {
    CKPT_ASSIGN_OR_RETURN(chosen, source.store_->find(*selector.step));
  } else {
    chosen = source.store_->latest();
    if (!chosen) return make_error(Code::not_found, store_path + ": the store has no committed step");
  }
  CKPT_ASSIGN_OR_RETURN(StepReader reader, source.store_->open_step(*chosen));
  Checkpoint step = from_step(std::move(reader), *chosen, store_path, nullptr);
  step.path_ = path;
  step.store_ = std::move(source.store_);
  return Result<Checkpoint>(std::move(step));
}

CKPT_INLINE Checkpoint Checkpoint::from_step(StepReader reader, const StepInfo& info, const std::string& store_name,
                                             std::shared_ptr<void> owner) {
  Checkpoint source;
  source.path_ = store_name;
  source.owner_ = std::move(owner);
  source.step_reader_ = std::move(reader);
  source.kind_ = Kind::step;
  source.step_ = info.step;
  source.world_ = info.world_size;
  source.description_ = "store " + store_name + " step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ", " +
                        std::to_string(info.world_size) + " shard" + (info.world_size == 1 ? "" : "s") + ")";
  for (std::size_t i = 0; i < source.step_reader_->shard_count(); ++i) source.add_tensors(source.step_reader_->shard(i).index());
  source.state_ = step_training_state(source.step_reader_->state());
  return source;
}

CKPT_INLINE Result<std::vector<MetaEntry>> Checkpoint::metadata(ConflictPolicy policy) const {
  std::vector<MetaEntry> merged;
  std::unordered_map<std::string, std::pair<std::size_t, std::string>> seen;  // key -> position, file
  auto take = [&](const Index& index, const std::string& file) -> Status {
    for (const auto& m : index.metadata) {
      if (m.key == kTrainingStateKey) continue;
      const auto it = seen.find(m.key);
      if (it == seen.end()) {
        seen.emplace(m.key, std::make_pair(merged.size(), file));
        merged.push_back(m);
        continue;
      }
      if (merged[it->second.first].value == m.value) continue;
      if (policy == ConflictPolicy::error)
        return make_error(Code::conflict, "metadata '" + m.key + "' differs between " + it->second.second + " and " + file +
                                              " (choose with --on-conflict first or last)");
      if (policy == ConflictPolicy::last) merged[it->second.first].value = m.value;
    }
    return Status();
  };
  if (file_) {
    CKPT_TRY(take(file_->index(), file_->path()));
  } else {
    for (std::size_t i = 0; i < step_reader_->shard_count(); ++i)
      CKPT_TRY(take(step_reader_->shard(i).index(), step_reader_->shard(i).path()));
  }
  return merged;
}

CKPT_INLINE Status Checkpoint::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst,
                                        std::size_t dst_size) {
  if (file_) return file_->read_slice(name, offsets, shape, dst, dst_size, ReadCheck::touched);
  return step_reader_->read_slice(name, offsets, shape, dst, dst_size, ReadCheck::touched);
}

CKPT_INLINE Result<Mapping> Checkpoint::map_tensor(std::string_view name, MapMode mode) {
  const TensorInfo* info = find(name);
  if (info == nullptr) return make_error(Code::not_found, path_ + ": no tensor '" + std::string(name) + "'");
  const std::size_t files = file_ ? 1 : step_reader_->shard_count();
  for (std::size_t i = 0; i < files; ++i) {
    ShardReader& reader = file_ ? *file_ : step_reader_->shard(i);
    const TensorRecord* t = reader.index().find_tensor(name);
    if (t == nullptr) continue;
    if (t->piece_count == 1 && reader.index().pieces[t->piece_first].shape == t->shape)
      return reader.map_piece(static_cast<std::size_t>(t->piece_first), ReadCheck::touched, mode);
    break;
  }
  return make_error(Code::unsupported, path_ + ": tensor '" + std::string(name) + "' is stored in pieces: it cannot be one view");
}

namespace detail {

// Streams one slice of a source tensor into an open piece, block by block.
template <class Sink>
[[nodiscard]] Status copy_slice(Checkpoint& source, const TensorInfo& t, const Slice& slice, std::uint64_t block_size,
                                 std::vector<unsigned char>& buffer, Sink& sink, const std::function<void(std::uint64_t)>& done) {
  const std::uint64_t element_size = format::dtype_info(t.dtype)->size;
  Shape absolute(slice.offsets.size());
  return for_each_block(slice.shape, element_size, block_size, [&](const Shape& rel, const Shape& shape) -> Status {
    for (std::size_t d = 0; d < rel.size(); ++d) absolute[d] = slice.offsets[d] + rel[d];
    std::uint64_t bytes = 0;
    (void)shape_bytes(shape, t.dtype, bytes);  // a block of a tensor whose size fits
    buffer.resize(static_cast<std::size_t>(bytes));
    CKPT_TRY(source.read_slice(t.name, absolute, shape, buffer.data(), buffer.size()));
    CKPT_TRY(sink.write(buffer.data(), buffer.size()));
    if (done) done(bytes);
    return Status();
  });
}

// Bounds how many ranks write at once (memory: block and write buffers per writing rank).
class WriteSlots {
 public:
  explicit WriteSlots(unsigned slots) : free_(slots == 0 ? 1 : slots) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    available_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++free_;
    }
    available_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable available_;
  unsigned free_;
};

}  // namespace detail

// --- Reshard ---------------------------------------------------------------------------------------

CKPT_INLINE Result<ReshardSummary> reshard_to_store(FsRef fs, Checkpoint& source, const std::string& store_path,
                                        const ReshardOptions& options) {
  StoreOptions store_options = options.store;
  store_options.create_if_missing = true;
  return reshard_with(source, options, [&](ThreadComm& comm, std::uint64_t step) -> Result<std::unique_ptr<RankSave>> {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, store_path, Access::read_write, store_options, comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
    return std::unique_ptr<RankSave>(std::make_unique<StoreRankSave>(std::move(store), std::move(tx)));
  });
}

CKPT_INLINE Result<ReshardSummary> reshard_with(Checkpoint& source, const ReshardOptions& options, const BeginRankSave& begin_rank_save) {
  const std::uint32_t world = options.world_size;
  if (world == 0 || world > journal::kMaxWorldSize)
    return make_error(Code::invalid_argument, "world size " + std::to_string(world) + " is outside [1, 2^20]");
  // Everything that can be refused is refused before any rank starts: a bad rule is a usage error, not an aborted save.
  std::vector<SplitChoice> choices;
  for (const auto& t : source.tensors()) {
    CKPT_ASSIGN_OR_RETURN(SplitChoice choice, choose_split(t.name, t.shape, options.rules));
    choices.push_back(choice);
  }
  CKPT_ASSIGN_OR_RETURN(const std::vector<MetaEntry> metadata, source.metadata(options.on_conflict));
  const std::uint64_t step = options.step ? *options.step : source.step().value_or(0);
  // A source without training state stays without one: the step it needs is not a training step (issue 22).
  TrainingState state = source.state() ? *source.state() : options.step ? TrainingState{} : no_training_state(step);
  state.step = step;
  CKPT_TRY(check_training_state(state));
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const unsigned parallel = options.parallelism != 0 ? options.parallelism : std::min<unsigned>(world, hardware);
  const std::uint64_t block_size = std::max<std::uint64_t>(options.block_size, 4096);

  ThreadGroup group(static_cast<int>(world));
  detail::WriteSlots slots(parallel);
  std::mutex progress_mutex;
  std::uint64_t written = 0;
  const std::uint64_t total = source.data_bytes();
  auto report = [&](std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(progress_mutex);
    written += bytes;
    if (options.progress) options.progress(written, total);
  };
  std::vector<Status> outcome(world), own_error(world);
  std::optional<CommitResult> committed;

  auto run_rank = [&](std::uint32_t rank) -> Status {
    ThreadComm comm(group, static_cast<int>(rank));
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<RankSave> tx, begin_rank_save(comm, step));
    Status s;
    if (rank == 0) {
      tx->state() = state;
      for (const auto& m : metadata)
        if (s.ok()) s = tx->shard_writer().set_metadata(m.key, m.value);
    }
    if (s.ok()) {
      slots.acquire();
      struct Release {
        detail::WriteSlots& slots;
        ~Release() { slots.release(); }
      } release{slots};
      std::vector<unsigned char> buffer;
      const auto& tensors = source.tensors();
      for (std::size_t i = 0; i < tensors.size() && s.ok(); ++i) {
        const TensorInfo& t = tensors[i];
        const Slice slice = split_slice(t.shape, choices[i], world, rank);
        std::uint64_t elements = 0;
        (void)shape_elements(slice.shape, elements);
        // A replicated tensor is written once, by rank 0; a split one by every rank that holds a part.
        if (choices[i].replicate ? rank != 0 : elements == 0) continue;
        s = tx->begin_piece(t.name, t.dtype, t.shape, slice.offsets, slice.shape);
        if (s.ok()) s = detail::copy_slice(source, t, slice, block_size, buffer, *tx, report);
        if (s.ok()) s = tx->end_piece();
      }
    }
    if (!s.ok()) {
      // This rank's failure (a damaged source chunk, a full disk) abandons the step on every rank.
      own_error[rank] = s;
      tx->abort(s).ignore_error();  // what went wrong is s; the cleanup's own errors reach recovery
      return s;
    }
    auto result = tx->commit();
    if (!result.ok()) return std::move(result).take_status();
    if (rank == 0) committed = std::move(result).value();
    return Status();
  };

  std::vector<std::thread> threads;
  threads.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Status s;
      try {
        s = run_rank(r);
      } catch (const std::bad_alloc&) {
        s = make_error(Code::io, "rank " + std::to_string(r) + ": out of memory");
      } catch (const std::exception& e) {
        s = make_error(Code::io, "rank " + std::to_string(r) + ": " + e.what());
      }
      // A rank that stopped early must not leave the others waiting in a collective.
      if (!s.ok()) group.leave(static_cast<int>(r), s);
      outcome[r] = s;
    });
  for (auto& t : threads) t.join();
  // Report the failure where it happened, not its echo on the other ranks.
  for (std::uint32_t r = 0; r < world; ++r)
    if (!own_error[r].ok()) return own_error[r].with_context("rank " + std::to_string(r) + " of " + std::to_string(world));
  for (std::uint32_t r = 0; r < world; ++r)
    if (!outcome[r].ok()) return outcome[r];
  if (!committed) return make_error(Code::io, "reshard: rank 0 finished without a commit");
  ReshardSummary summary;
  summary.step = committed->step;
  summary.world_size = world;
  summary.tensors = source.tensors().size();
  summary.bytes = written;
  return summary;
}

// --- Merge -----------------------------------------------------------------------------------------

namespace detail {

[[nodiscard]] CKPT_INLINE bool is_optimizer_tensor(const std::optional<TrainingState>& state, const std::string& name) {
  return state && std::find(state->optimizer_tensors.begin(), state->optimizer_tensors.end(), name) != state->optimizer_tensors.end();
}

[[nodiscard]] CKPT_INLINE bool selected(const SourceSelection& selection, const std::optional<TrainingState>& state,
                                   const std::string& name) {
  if (selection.empty()) return true;
  for (const auto& p : selection.patterns) {
    if (p == "@optimizer" ? is_optimizer_tensor(state, name) : p == "@model" ? !is_optimizer_tensor(state, name) : glob_match(p, name))
      return true;
  }
  return false;
}

// Training states compared without their optimizer lists, which merge recomputes.
[[nodiscard]] CKPT_INLINE bool same_state(TrainingState a, TrainingState b) {
  a.optimizer_tensors.clear();
  b.optimizer_tensors.clear();
  return a == b;
}

}  // namespace detail

CKPT_INLINE Result<MergeSummary> merge_to_file(FsRef fs, const std::vector<Checkpoint*>& sources,
                                   const std::vector<SourceSelection>& selections, const std::string& output,
                                   const MergeOptions& options) {
  if (sources.empty()) return make_error(Code::invalid_argument, "merge: no source");
  if (!selections.empty() && selections.size() != sources.size())
    return make_error(Code::invalid_argument, "merge: " + std::to_string(selections.size()) + " selections for " +
                                                  std::to_string(sources.size()) + " sources");
  MergeSummary summary;
  summary.output = output;
  auto conflict = [&](const std::string& what, const Checkpoint& kept, const Checkpoint& other) -> Status {
    if (options.on_conflict == ConflictPolicy::error)
      return make_error(Code::conflict, what + " is in both " + kept.description() + " and " + other.description() +
                                            " (choose with --on-conflict first or last)");
    const bool last = options.on_conflict == ConflictPolicy::last;
    summary.resolved.push_back(what + ": took " + (last ? other : kept).description() + ", skipped " + (last ? kept : other).description());
    return Status();
  };

  // Which source each tensor comes from; output order is the order names first appear.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::pair<std::size_t, const TensorInfo*>> picks;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const SourceSelection none;
    const SourceSelection& selection = selections.empty() ? none : selections[s];
    for (const auto& t : sources[s]->tensors()) {
      if (!detail::selected(selection, sources[s]->state(), t.name)) continue;
      const auto it = picks.find(t.name);
      if (it == picks.end()) {
        picks.emplace(t.name, std::make_pair(s, &t));
        order.push_back(t.name);
        continue;
      }
      CKPT_TRY(conflict("tensor '" + t.name + "'", *sources[it->second.first], *sources[s]));
      if (options.on_conflict == ConflictPolicy::last) it->second = std::make_pair(s, &t);
    }
  }
  if (order.empty()) return make_error(Code::invalid_argument, "merge: the selections take no tensor from the sources");

  // Metadata keys across sources (each source's own shards resolved by the same policy).
  std::vector<MetaEntry> metadata;
  std::unordered_map<std::string, std::size_t> meta_source, meta_position;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    CKPT_ASSIGN_OR_RETURN(auto entries, sources[s]->metadata(options.on_conflict));
    for (auto& m : entries) {
      const auto it = meta_position.find(m.key);
      if (it == meta_position.end()) {
        meta_position.emplace(m.key, metadata.size());
        meta_source.emplace(m.key, s);
        metadata.push_back(std::move(m));
        continue;
      }
      if (metadata[it->second].value == m.value) continue;
      CKPT_TRY(conflict("metadata '" + m.key + "'", *sources[meta_source[m.key]], *sources[s]));
      if (options.on_conflict == ConflictPolicy::last) {
        metadata[it->second].value = std::move(m.value);
        meta_source[m.key] = s;
      }
    }
  }

  // The training state: one source's, with the optimizer tensors actually taken from the sources that listed them.
  std::optional<std::size_t> state_source;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    if (!sources[s]->state()) continue;
    if (!state_source) {
      state_source = s;
      continue;
    }
    if (detail::same_state(*sources[*state_source]->state(), *sources[s]->state())) continue;
    CKPT_TRY(conflict("the training state", *sources[*state_source], *sources[s]));
    if (options.on_conflict == ConflictPolicy::last) state_source = s;
  }
  std::optional<TrainingState> state;
  if (state_source) {
    state = *sources[*state_source]->state();
    state->optimizer_tensors.clear();
    for (const auto& name : order) {
      const std::size_t s = picks[name].first;
      if (detail::is_optimizer_tensor(sources[s]->state(), name)) state->optimizer_tensors.push_back(name);
    }
    CKPT_TRY(check_training_state(*state));
  }

  if (!options.overwrite && fs.stat(output).ok())
    return make_error(Code::conflict, output + ": already exists (pass --force to replace it)");
  WriterOptions wo;
  wo.alignment_log2 = options.alignment_log2;
  wo.chunk_size_log2 = options.chunk_size_log2;
  wo.atomic_rename = true;  // complete under its name, or absent
  wo.durable = true;
  CKPT_ASSIGN_OR_RETURN(auto writer, ShardWriter::create(fs, output, wo));
  std::uint64_t total = 0, done = 0;
  for (const auto& name : order) total += picks[name].second->bytes;
  std::vector<unsigned char> buffer;
  const std::uint64_t block_size = std::max<std::uint64_t>(options.block_size, 4096);
  for (const auto& name : order) {
    const auto [s, t] = picks[name];
    const Slice whole{Shape(t->shape.size(), 0), t->shape};
    CKPT_TRY(writer.begin_piece(t->name, t->dtype, t->shape, whole.offsets, whole.shape));
    CKPT_TRY(detail::copy_slice(*sources[s], *t, whole, block_size, buffer, writer, [&](std::uint64_t bytes) {
      done += bytes;
      if (options.progress) options.progress(done, total);
    }));
    CKPT_TRY(writer.end_piece());
  }
  for (auto& m : metadata) CKPT_TRY(writer.set_metadata(m.key, m.value));
  if (state) CKPT_TRY(writer.set_metadata(std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(*state)})));
  CKPT_ASSIGN_OR_RETURN(const ShardSummary finished, writer.finish());
  summary.tensors = order.size();
  summary.bytes = finished.data_bytes;
  summary.file_size = finished.file_size;
  return summary;
}

}  // namespace ckpt
