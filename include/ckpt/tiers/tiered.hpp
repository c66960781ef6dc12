// ckpt: recovery in seconds (spec/TIERS.md). One object a training loop calls each step; it keeps the
// latest steps in node-local memory (a store on tmpfs that outlives the process), sends each rank's
// shard to peers in other failure domains over the job's own communicator, promotes a step now and
// then to the persistent store, and at start agrees with every rank on the newest step whose every
// shard is reachable and verifies, falling back together when one does not.
//
//   ckpt::tiers::TierOptions o;
//   o.memory_root = "/dev/shm/ckpt-job42";  o.persistent = "/lustre/job42/ckpt";  // or s3://, with o.open_objects
//   o.memory_every = 10;  o.persist_every = 500;  o.replicas = 1;
//   auto tiers = ckpt::tiers::TieredCheckpointer::create(fs, comm, control, o);  // collective; control: skips agree on it
//   auto resumed = (*tiers)->resume([&](ckpt::tiers::TierView& v) { ... read tensors ... });  // collective
//   for (step = resumed->next_step(); ...; ++step) {
//     train(step);
//     CKPT_TRY((*tiers)->step(step, [&](ckpt::SaveRequest& r) { r.add_tensor(...); }).status());
//   }
//
// Threads: step() only copies the state into the memory tier's next file (spec/TIERS.md 2.1); the
// saver's worker thread commits the memory step and then runs replication and promotion, which are
// collective on the communicator given to create(): the training loop must not use that communicator
// itself, and MPI needs MPI_THREAD_MULTIPLE.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "../store/async_save.hpp"
#include "../store/memory_layout.hpp"
#include "../dist/comm.hpp"
#include "../dist/wire.hpp"
#include "../core/config.hpp"
#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../identity/identity.hpp"
#include "../io/posix_fs.hpp"
#include "../io/object/client.hpp"
#include "../store/store.hpp"
#include "parity.hpp"
#include "persistent_tier.hpp"
#include "tier_log.hpp"
#include "topology.hpp"

namespace ckpt::tiers {

// Names inside a memory root: store/memory_layout.hpp holds them (spec/TIERS.md 2.1); the path
// builders are named here too, where a training program looks for them.
namespace layout {
using memory_layout::held_store;
using memory_layout::own_store;
using memory_layout::rank_dir;
// Every rank's training state rides in its own shard as this U8 tensor, so every tier and every
// digest covers it (spec/TIERS.md 6).
inline constexpr std::string_view kStateTensorPrefix = "__ckpt_tiers__/state/rank-";
[[nodiscard]] std::string state_tensor(std::uint32_t rank);
}  // namespace layout

// The content digest of one shard of a step: the identity root (spec/IDENTITY.md 2) of the shard's
// index, so the same bytes have the same digest in every tier, whatever the file's UUID or offsets.
[[nodiscard]] Digest128 shard_digest(const ShardReader& shard);
// The step's digest: over its number, world size and every shard's digest in rank order (spec/TIERS.md 5.3).
[[nodiscard]] Digest128 step_digest(std::uint64_t step, const std::vector<Digest128>& shards);

struct TierOptions {
  std::string memory_root = "/dev/shm/ckpt-tiers";  // node-local tmpfs (or any directory: it is a plain store)
  // A store every rank reaches: a directory, or a store on object storage "s3://bucket/prefix"
  // (spec/OBJECT.md; opened through open_objects). Empty: no persistent tier.
  std::string persistent;
  // How an "s3://" persistent tier's client is made (object::open_s3_url in a build with ckpt::s3, a
  // MemoryObjects view in tests). Empty with an "s3://" persistent: create() fails, Code::unsupported.
  object::ObjectOpener open_objects;
  std::uint64_t memory_every = 1;                   // capture steps that are multiples of this
  std::uint64_t persist_every = 0;                  // promote steps that are multiples of this, at least this far apart (4.6); 0: never
  int replicas = 1;                                 // copies of each shard in other failure domains
  // Parity groups instead of replicas (spec/TIERS.md 12): groups of parity_group nodes keep Reed-Solomon parity of
  // each other's shards, so any parity_losses nodes of a group may be lost, for parity_losses/(parity_group -
  // parity_losses) of a shard per rank. 0: none. Needs replicas = 0 and a build with ISA-L.
  int parity_group = 0;
  int parity_losses = 1;
  std::size_t memory_keep = 2;                      // memory steps each rank keeps (its own and each held shard's)
  std::size_t persistent_keep = 0;                  // persistent steps kept; 0: all
  std::optional<Topology> topology;                 // default: each rank's hostname is its node
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;  // every tier alike, so digests compare
  std::size_t staging_bytes = 0;                    // with device snapshots (else none, 2.1): 0 is the first capture's size
  std::size_t transfer_block = std::size_t{16} << 20;  // bytes per point-to-point message
  bool check_free_space = true;                     // statvfs the memory root before the first capture
  // The nice value of the background (the saver's worker with its replication, the promoter, the refill): with
  // every core busy, training threads win the cores (spec/ASYNC.md 1, "Background priority"); 0: as the caller.
  int background_nice = 10;
  // A capture due while the previous one is still in the background (committing, replicating, promoting):
  // skip it (recorded, SKIPPED; the training loop never waits for background work) or wait for a slot.
  // skip across ranks needs the control communicator of create(fs, comm, control, options), so every
  // rank skips the same captures (spec/TIERS.md 4.6).
  WhenBusy when_busy = WhenBusy::skip;
  // Every rank loads every shard of the agreed step (data parallel: each rank needs the whole model); a shard
  // its memory lacks it receives from the rank that verified it (spec/TIERS.md 7.2); false: a rank loads its
  // own shard only, unless the world changed. Every rank must pass the same.
  bool load_all_shards = false;
  // Device snapshots (spec/ASYNC.md 6): tensors marked on_device are copied by `device` straight into
  // staging allocated by `staging_memory` (pinned host memory for a GPU's copies).
  SnapshotCopier* device = nullptr;
  StagingMemory staging_memory;
  // Test and fault-injection hook: called on the rank at named points of its work (spec/TIERS.md 9).
  // Phases: "captured", "encoding" (parity, 12.3), "replicating", "replicated" (its REPLICATED record durable), "promoting",
  // "persisted" (its PERSISTED record durable), "resuming", "refilling" (the resume's background refill).
  std::function<void(const char* phase, std::uint64_t step)> on_phase;
  // The SDC canary (spec/TIERS.md 11): called on every rank's background thread for each finding, after its
  // SDC record is durable; the step is then no step of any tier, and the next step() or wait() returns
  // Code::corrupt ("silent data corruption ...").
  std::function<void(const SdcFinding&)> on_sdc;
};

// The policy's decision for one step.
enum class TierAction : std::uint8_t { none, capture, capture_and_persist };
[[nodiscard]] constexpr EnumBounds<TierAction> enum_bounds(TierAction) noexcept {
  return {TierAction::none, TierAction::capture_and_persist};
}
[[nodiscard]] const char* tier_action_name(TierAction a) noexcept;

struct StepOutcome {
  // What was done: capture_and_persist for the captures promoted, which need not be action()'s (spec/TIERS.md 4.6).
  TierAction action = TierAction::none;
  std::chrono::nanoseconds stall{0};  // how long step() blocked the caller (the staging copy)
  bool skipped = false;               // the policy captures this step, but when_busy skip did not take it
};

// What the job resumed from, as every rank agreed.
struct Resumed {
  bool fresh = true;                  // nothing to resume: start from scratch
  std::uint64_t step = 0;
  Digest128 digest;
  std::uint32_t world = 0;            // ranks that wrote the step
  TrainingState state;                // this rank's state (its own rank's, or rank 0's when the world changed)
  std::vector<std::string> sources;   // for each shard this rank loaded: where from
  std::vector<std::string> setbacks;  // copies set aside and steps that failed, in the order met
  bool read_persistent = false;       // rank 0: the persistent store had to be read (memory could not serve)
  // Bytes of shard copies this rank read back and hashed to verify them (the copies it loads from where they
  // lie, and the ones it sent). In a data-parallel resume a rank verifies only the copies its memory holds and
  // receives the rest from the rank that verified them, hashed on receipt (spec/TIERS.md 7.2).
  std::uint64_t verified_bytes = 0;
  // Holders that lost their copies are being refilled in the background (spec/TIERS.md 7.4): the first
  // capture and wait() wait for it; what it did goes to notes() and the tier log (HELD).
  bool refilling = false;
  [[nodiscard]] std::uint64_t next_step() const noexcept { return fresh ? 0 : step + 1; }
};

// The agreed step as the load callback sees it: its verified shards, read as one checkpoint.
class TierView {
 public:
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  [[nodiscard]] std::uint32_t world() const noexcept { return world_; }
  [[nodiscard]] const TrainingState& state() const noexcept { return state_; }
  [[nodiscard]] std::vector<std::string> tensor_names() const;  // without the tier's own state tensors
  [[nodiscard]] const TensorRecord* find_tensor(std::string_view name) const;
  [[nodiscard]] Status read_tensor(std::string_view name, void* dst, std::size_t dst_size);
  // Any hyper-rectangle, gathered from the pieces of every loaded shard that overlap it.
  [[nodiscard]] Status read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst, std::size_t dst_size);

 private:
  friend class TieredCheckpointer;
  std::uint64_t step_ = 0;
  std::uint32_t world_ = 0;
  TrainingState state_;
  std::vector<ShardReader*> shards_;  // each verified whole just before the load, or as it is read (below)
  // The shards of shards_ this load verifies as it copies (spec/TIERS.md 7.2): read with their chunks checked,
  // in one pass with the copy; the resume hashes what the load did not read after it.
  std::vector<const ShardReader*> verify_on_read_;
  // The other shards of a loaded persistent step, for a tensor no loaded shard holds (a replicated tensor only
  // its owner wrote there, spec/TIERS.md 11.1): read with every chunk verified.
  std::vector<ShardReader*> others_;
  [[nodiscard]] std::pair<ShardReader*, const TensorRecord*> find(std::string_view name) const;
};

class TieredCheckpointer {
 public:
  // Collective: every rank of comm calls it. Opens this rank's memory stores (running their recovery)
  // and computes the replica placement; comm must outlive the object.
  template <class Comm>
  [[nodiscard]] static Result<std::unique_ptr<TieredCheckpointer>> create(FsRef fs, Comm& comm, TierOptions options) {
    return create_with(fs, CommRef(comm), std::nullopt, std::nullopt, std::move(options));
  }
  // The same, with `control`: a second communicator of the same ranks (MpiComm::duplicate) on which step()
  // agrees whether to skip a capture, from the training thread while the background uses comm.
  template <class Comm, class Control>
  [[nodiscard]] static Result<std::unique_ptr<TieredCheckpointer>> create(FsRef fs, Comm& comm, Control& control, TierOptions options) {
    return create_with(fs, CommRef(comm), CommRef(control), std::nullopt, std::move(options));
  }
  // The same, with `promotion`: a third communicator of the same ranks on which promotions run on a thread of
  // their own, so a promotion slower than the capture interval never delays the next capture's replication
  // (spec/TIERS.md 4.4); without it the worker promotes after replicating.
  template <class Comm, class Control, class Promotion>
  [[nodiscard]] static Result<std::unique_ptr<TieredCheckpointer>> create(FsRef fs, Comm& comm, Control& control, Promotion& promotion,
                                                                         TierOptions options) {
    return create_with(fs, CommRef(comm), CommRef(control), CommRef(promotion), std::move(options));
  }
  TieredCheckpointer(const TieredCheckpointer&) = delete;
  TieredCheckpointer& operator=(const TieredCheckpointer&) = delete;
  ~TieredCheckpointer();  // finishes the work already taken (as wait())

  [[nodiscard]] TierAction action(std::uint64_t step) const noexcept;
  // Called every step. When the policy captures it, fill() adds the tensors and state to the request,
  // which is staged before this returns; the rest happens in the background. Collective when the first
  // capture checks the memory tier's free space. A background failure of an earlier step comes back here.
  [[nodiscard]] Result<StepOutcome> step(std::uint64_t step, const std::function<void(SaveRequest&)>& fill);
  // Blocks until every captured step is committed, replicated and (when due) persisted, and the refill
  // a resume started has ended.
  [[nodiscard]] Status wait();
  // Collective, before the first step(): agrees on the step to resume and loads it through load(); returns
  // once the state is loaded, refilling lost replicas in the background (Resumed::refilling). load() runs once
  // in each round of the fallback ladder that reaches it, so it may run again: each call overwrites the last.
  [[nodiscard]] Result<Resumed> resume(const std::function<Status(TierView&)>& load);

  [[nodiscard]] const Placement& placement() const noexcept { return placement_; }
  // The parity groups (spec/TIERS.md 12), when TierOptions::parity_group is set.
  [[nodiscard]] const std::optional<ParityPlacement>& parity_placement() const noexcept { return parity_; }
  [[nodiscard]] const Topology& topology() const noexcept { return topology_; }
  [[nodiscard]] const TierOptions& options() const noexcept { return options_; }
  [[nodiscard]] int rank() const { return comm_.rank(); }
  [[nodiscard]] int world() const { return comm_.size(); }
  // What this rank found and worked around: at create() (e.g. a damaged tier log set aside), and in the
  // background (e.g. a promotion skipped: the object store already committed that step number or a higher one).
  [[nodiscard]] std::vector<std::string> notes() const;
  // This rank's tier log records (what it has appended so far).
  [[nodiscard]] std::vector<TierRecord> records() const;
  // Steps every shard of which has the placement's copies (REPLICATED), and steps persisted, as recorded.
  [[nodiscard]] std::uint64_t steps_replicated() const noexcept { return replicated_.load(); }
  [[nodiscard]] std::uint64_t steps_persisted() const noexcept { return persisted_.load(); }
  // Captures taken and not yet through the worker's sequence (commit, agreement, replication; spec/TIERS.md
  // 4.1): 0 or 1. Promotions on a promoter of their own are not counted.
  [[nodiscard]] std::size_t captures_in_background() const { return saver_ ? saver_->in_flight() : 0; }
  // Captures not taken by when_busy skip (each one a SKIPPED record).
  [[nodiscard]] std::uint64_t steps_skipped() const noexcept { return skipped_.load(); }

 private:
  TieredCheckpointer(FsRef fs, CommRef comm, std::optional<CommRef> control, std::optional<CommRef> promotion, TierOptions options)
      : fs_(fs), comm_(comm), control_(control), promotion_(promotion), options_(std::move(options)) {}
  [[nodiscard]] static Result<std::unique_ptr<TieredCheckpointer>> create_with(FsRef fs, CommRef comm, std::optional<CommRef> control,
                                                                              std::optional<CommRef> promotion, TierOptions options);
  struct Resume;  // one resume(): its state and phases (impl/resume_inl.hpp)
  [[nodiscard]] Status start_saver(std::size_t bytes);
  [[nodiscard]] Status check_capacity(std::uint64_t bytes);
  // Joins the background refill a resume started, returning its failure (the training thread only).
  [[nodiscard]] Status finish_refill();
  // The first capture after a resume (collective): owes the promotion a failure cut short (spec/TIERS.md 4.6).
  [[nodiscard]] Status owe_cut_short_promotion();
  void note(std::string text);
  void after_capture(const SaveOutcome& outcome);  // the saver's worker thread
  [[nodiscard]] Status replicate_and_promote(const SaveOutcome& outcome);
  // Replicated tensors of one capture (spec/TIERS.md 11.1): each with this rank's chunk digests, read from
  // the committed memory shard's index (every holder keeps its copy there).
  struct CanaryTensor {
    std::string name;         // what holders compare by: a replicated tensor's name, or live_piece_key() of a piece
    std::uint32_t owner = 0;  // the rank whose copy goes to the persistent store
    std::vector<std::uint64_t> digests;
    bool live = false;        // digests of a live copy, hashed at the capture; else read from the shard's index
    std::string tensor;       // the tensor of the shard whose piece at `offsets` gives the digests
    Shape offsets;
  };
  [[nodiscard]] std::vector<CanaryTensor> canary_of(std::uint64_t step, const StepReader* mine);
  // Every rank's capture status, shard digest and replicated tensors' digests to rank 0; back the shard
  // digests (or the first rank's failure) and the canary's findings.
  [[nodiscard]] Result<std::vector<Digest128>> agree_on_capture(std::uint64_t step, const Status& local, const Digest128& my_digest,
                                                                const std::vector<CanaryTensor>& canary, std::vector<SdcFinding>& findings);
  // Every rank: the findings recorded (SDC), the step retired from its own memory, on_sdc told.
  [[nodiscard]] Status report_sdc(std::uint64_t step, const std::vector<Digest128>& shards, const std::vector<SdcFinding>& findings);
  [[nodiscard]] Status retire_memory(const std::vector<int>& sources, std::size_t keep);
  // Retention of one memory store (its newest `keep` steps) and a step's leaving one: a copy this rank's log
  // records as set aside leaves into quarantine/ instead of being retired, never deleted (spec/TIERS.md 5.2).
  [[nodiscard]] Result<std::vector<StepInfo>> retain_memory(Store& store, std::size_t keep);
  // A held store's retention, its EVICTED records added to `records` (a failure leaves the steps to the next).
  void evict_held(Store& store, std::uint32_t shard, std::size_t keep, std::vector<TierRecord>& records);
  // The files a memory store writes over in a ring (spec/TIERS.md 2.1): memory_keep, at least 2, so a capture
  // or replica never writes over the newest committed step; it retires the oldest first when the ring is full.
  [[nodiscard]] std::size_t ring_steps() const noexcept { return std::max<std::size_t>(options_.memory_keep, 2); }
  [[nodiscard]] Status leave_memory(Store& store, const StepInfo& info);
  [[nodiscard]] bool recorded_set_aside(const Store& store, const StepInfo& info) const;
  // owners_write: replicated tensors another rank owns, left out of this rank's persistent shard.
  [[nodiscard]] Status promote(std::uint64_t step, StepReader& mine, const Digest128& my_digest, const Digest128& digest,
                               const std::set<std::string>& owners_write);
  // The promoter thread (spec/TIERS.md 4.4): the queued promotions, in step order, on promotion_.
  void run_promotions();
  // A promotion of this own step is queued or running: its file is not retired meanwhile.
  [[nodiscard]] bool promoting(std::uint64_t step) const;
  [[nodiscard]] bool promoting_locked(std::uint64_t step) const;  // promote_mutex_ held
  // Waits until no promotion is queued or running (the training thread).
  void finish_promotions();
  // A promotion reads an own step the next capture would retire (spec/TIERS.md 4.6): the capture is busy.
  [[nodiscard]] bool promotion_pins_next_slot() const;
  // Before a capture's copy (the training thread, the worker idle): retires the oldest own steps down to one
  // fewer than the ring, waiting for a promotion that still reads one of them (spec/TIERS.md 2.1, 4.4).
  [[nodiscard]] Status make_room();
  [[nodiscard]] Result<Store*> held(std::uint32_t shard);
  // Parity groups (spec/TIERS.md 12). encode_parity: this rank's segments of its committed own step to the holders
  // of their stripes' parity, while it builds the parity it holds and commits it to its parity store (12.3); `only`
  // names the (group, stripe, parity) to build (a refill), nullptr all. Returns a transport failure; a local one
  // (a segment that did not arrive whole) goes to *failure and that stripe is not committed. `built`: stripes committed.
  using ParityWork = std::set<std::tuple<int, int, int>>;
  [[nodiscard]] Status encode_parity(std::uint64_t step, const Digest128& digest, const std::vector<Digest128>& shards,
                                     const ParityWork* only, std::vector<TierRecord>& records, std::uint32_t& built, Status& failure);
  // The resume's first phase (12.4): a shard no rank's memory holds is rebuilt from its group's survivors, verified
  // against the claim and committed to its rank's own store; the holders that lost parity of that step are refilled.
  [[nodiscard]] Status rebuild_from_parity();
  [[nodiscard]] Status commit_rebuilt(std::uint64_t step, const std::vector<unsigned char>& bytes, const Digest128& expected,
                                      const Digest128& digest, std::vector<TierRecord>& records);
  [[nodiscard]] Result<Store*> parity_store();
  // The refill a rebuild leaves for after the resume's load (spec/TIERS.md 12.4): run on refill_ like 7.4's.
  struct ParityRefill {
    std::uint64_t step = 0;
    Digest128 digest;
    std::vector<Digest128> shards;
    ParityWork work;
  };
  std::optional<ParityRefill> parity_refill_;
  [[nodiscard]] Status refill_parity();
  [[nodiscard]] Status log(std::vector<TierRecord> records);
  // Rewrites the tier log once it outgrows what the memory stores hold (spec/TIERS.md 5.4).
  [[nodiscard]] Status compact_log();
  void phase(const char* name, std::uint64_t step) const;

  FsRef fs_;
  CommRef comm_;
  std::optional<CommRef> control_;  // step()'s skip agreement (training thread); comm_ is the background's
  std::optional<CommRef> promotion_;  // the promoter's; none: the worker promotes on comm_
  // Promotions the worker queued for the promoter: the front one is running (spec/TIERS.md 4.4).
  struct QueuedPromotion {
    std::uint64_t step = 0;
    std::shared_ptr<StepReader> mine;
    Digest128 my_digest, digest;
    std::set<std::string> owners_write;
  };
  mutable std::mutex promote_mutex_;
  std::condition_variable promote_cv_;
  std::deque<QueuedPromotion> promotions_;
  bool promoter_stop_ = false;
  std::thread promoter_;
  std::deque<std::uint64_t> recent_;  // the newest ring_steps() - 1 captures: the next capture retires none of them
  std::mutex canary_mutex_;
  std::map<std::uint64_t, std::vector<CanaryTensor>> canary_;  // step() to the worker, by step
  std::set<std::uint64_t> to_promote_;  // step() to the worker: the captures it promotes (canary_mutex_)
  // Promotions (spec/TIERS.md 4.6; training thread): one due was skipped, cut short or too close to the last
  // begun, so the next capture taken persist_every or more after that one is promoted instead.
  bool promotion_owed_ = false;
  std::optional<std::uint64_t> last_promoted_;  // the last promotion begun (after a resume: the newest persisted)
  TierOptions options_;
  Topology topology_;
  Placement placement_;
  std::string rank_dir_;
  std::unique_ptr<Store> own_;
  std::map<std::uint32_t, std::unique_ptr<Store>> held_;
  std::optional<ParityPlacement> parity_;       // parity groups (spec/TIERS.md 12), when asked for
  std::unique_ptr<Store> parity_store_;         // this rank's parity segments, opened when first needed
  std::unique_ptr<PersistentTier> persistent_;  // opened writable at the first promotion (collective)
  std::unique_ptr<TierLog> log_;
  mutable std::mutex log_mutex_;
  std::unique_ptr<AsyncSaver> saver_;
  mutable std::mutex failure_mutex_;  // background_failure_ and notes_ (the worker adds to both)
  Status background_failure_;
  std::atomic<std::uint64_t> replicated_{0}, persisted_{0}, skipped_{0};
  bool resumed_ = false;
  std::optional<std::uint64_t> resumed_step_;     // the step a resume loaded, until the first capture after it
  std::optional<std::uint64_t> scanned_persisted_;  // rank 0: the newest step a resume found in the persistent store
  bool log_replaced_ = false;  // create() set aside a damaged tier log: a fresh resume keeps unrecorded steps (7.4)
  std::vector<std::string> notes_;
  std::thread refill_;      // a resume's refill of lost replicas (spec/TIERS.md 7.4): uses comm_ until joined
  Status refill_result_;    // written by refill_, read after the join
};

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/tiered_inl.hpp"
#endif
