// ckpt: a memory tier's root read from the outside (spec/TIERS.md 2, 5): which steps it holds, where
// each shard's copies lie and how many match the content the tier logs record, what the logs say
// happened to each step, every copy verified, and each store's recovery run. The tools present these
// (ckpt-inspect, ckpt-verify, ckpt-repair on MEMROOT or MEMROOT/rank-<r>); the library decides.
//
//   MEMROOT/rank-<r>/own        a store of rank r's shards (each step holds one shard: kPartialStepKey)
//   MEMROOT/rank-<r>/held-<s>   a store of replicas of rank s's shards that rank r keeps
//   MEMROOT/rank-<r>/parity     a store of the parity segments rank r keeps for its parity group
//   MEMROOT/rank-<r>/TIERS      rank r's tier log
//
// A step is (step number, step digest): the same number captured twice with other content is another
// step. Nothing here deletes a file, and nothing outside the root is touched (symlinks are not
// followed); the persistent store, when named, is only read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../identity/identity.hpp"
#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "../store/path_kind.hpp"
#include "../core/problem.hpp"
#include "../store/step_reader.hpp"
#include "../store/store.hpp"
#include "tier_log.hpp"
#include "tiered.hpp"

namespace ckpt::tiers {

// One committed step of a memory store: one copy of one shard.
struct ShardCopy {
  std::uint32_t rank_dir = 0;  // the rank-<r> directory that holds it
  std::string store;           // the store's path (ROOT/rank-<r>/own or ROOT/rank-<r>/held-<s>)
  std::string where;           // "rank-<r>/own" or "rank-<r>/held-<s>", for messages
  bool own = false;            // in rank-<r>/own (else in held-<shard>, or parity)
  bool parity = false;         // in rank-<r>/parity: parity segments of the step (spec/TIERS.md 12), verified, no shard copy
  std::uint64_t step = 0;
  std::uint32_t shard = 0;     // whose shard: r in own, s in held-<s>
  StepInfo info;               // its COMMIT: txn, directory, files
  Digest128 digest;            // its content digest (shard_digest of its index); zero when it did not open
  std::string error;           // why StepReader::open refused it (manifest, size, UUID, index); empty when it opened
  bool recorded = false;       // its rank directory's log records this copy (CAPTURED or HELD with its txn)
  Digest128 expected;          // the shard digest the logs record for it; zero when none does
  bool set_aside = false;      // a SET_ASIDE record names it: resume never uses it again (and never deletes it)
  std::optional<bool> verified;  // verify_memory_root: every byte checked
  // Opened, not set aside, and its content is the one recorded (or nothing records one to compare).
  [[nodiscard]] bool matches() const noexcept {
    return error.empty() && !set_aside && (expected == Digest128{} || digest == expected);
  }
};

// The copies of one shard of a step inside the root.
struct ShardCopies {
  std::uint32_t shard = 0;
  Digest128 digest;                 // recorded shard digest; zero when no record names it
  std::vector<std::size_t> copies;  // indexes into MemoryRoot::copies
  std::size_t matching = 0;         // copies that open and hold the recorded content (ShardCopy::matches)
  std::size_t verified = 0;         // verify_memory_root: of those, every byte verified
};

// What the persistent store holds for a step's number, compared by shard digests.
enum class PersistentState : std::uint8_t {
  not_checked,  // no persistent store named, or the step's shard digests are unknown
  absent,       // no committed step of that number
  same,         // the same content: every shard digest equal
  different,    // another content under the same number
  unreadable,   // the step is committed but does not open (manifest, shard size, UUID, index)
};
[[nodiscard]] constexpr EnumBounds<PersistentState> enum_bounds(PersistentState) noexcept {
  return {PersistentState::not_checked, PersistentState::unreadable};
}
[[nodiscard]] const char* persistent_state_name(PersistentState s) noexcept;

// A tier log record and the rank directory whose log holds it.
struct RecordedEvent {
  std::uint32_t rank_dir = 0;
  TierRecord record;
};

// One step the root knows of, from its tier logs and its stores.
struct MemoryStep {
  std::uint64_t step = 0;
  Digest128 digest;            // the step digest; zero when no record names it (copies nobody recorded)
  std::uint32_t world = 0;     // ranks that wrote it; 0 when unknown
  std::vector<ShardCopies> shards;     // world entries when known, else the shards seen, by shard
  std::vector<RecordedEvent> events;   // every record about it, by rank directory, in log order
  bool captured = false, replicated = false, persisted = false, load_failed = false, resumed = false;
  bool sdc = false;  // the canary found its replicated tensors' holders disagreeing (spec/TIERS.md 11)
  // Each PERSISTED record's shard digest, by shard: the persistent shard's content, which leaves out the
  // replicated tensors another rank owns (spec/TIERS.md 11.1), so it may differ from the memory shard's.
  std::map<std::uint32_t, Digest128> persisted_digests;
  std::uint32_t replicated_copies = 0;  // the fewest copies a REPLICATED record gives every shard
  std::size_t set_aside = 0;            // copies set aside
  PersistentState persistent = PersistentState::not_checked;
  std::string persistent_detail;        // which shards differ, or why it did not open
  std::uint64_t persistent_txn = 0;
  [[nodiscard]] bool digest_known() const noexcept { return digest != Digest128{}; }
  [[nodiscard]] std::size_t shards_here() const noexcept;   // shards with at least one matching copy
  [[nodiscard]] std::size_t fewest_copies() const noexcept;  // matching copies of the worst shard (of the world when known)
};

// One rank-<r> directory.
struct RankDirectory {
  std::uint32_t rank = 0;
  std::string path;
  std::vector<std::string> stores;        // paths of own and held-<s>, in name order
  std::vector<TierRecord> records;        // the log's records (up to damage)
  bool log_present = false;
  std::optional<JournalDamage> torn_tail; // a torn tail is end of log (spec/JOURNAL.md 6.3)
  Status log_error;                       // corrupt in the middle, or unreadable
};

// Something wrong in the root: the Problem found (code, region, file, tensor, chunk, byte range, expected,
// found), named down to rank directory, store, step and shard; its message names all of them in one line.
struct RootProblem : Problem {
  std::string rank_dir;                 // "rank-<r>"; empty for the persistent store
  std::string store;                    // the store or tier log it is in
  std::optional<std::uint64_t> step;
  std::optional<std::uint32_t> shard;
  std::uint64_t txn = 0;
};

struct MemoryRoot {
  std::string path;                     // as given: the root or one rank directory
  std::string root;                     // the memory root
  PathKind kind = PathKind::memory_root;  // memory_root or rank_dir
  std::string persistent;               // the persistent store compared with; empty: none
  std::vector<RankDirectory> rank_dirs; // by rank
  std::vector<ShardCopy> copies;        // every committed step of every store, by rank dir, store, step
  std::vector<MemoryStep> steps;        // by step number, then digest
  std::vector<RootProblem> problems;    // what reading indexes and logs already shows is wrong
  std::vector<std::string> notes;       // not damage: torn tails, open transactions, copies no log records
  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};

struct MemoryRootOptions {
  // A persistent store to compare with (and, when verifying, to verify), read only: a directory, or
  // "s3://bucket/prefix" opened through open_objects (empty there: Code::unsupported).
  std::string persistent;
  object::ObjectOpener open_objects;
  FileVerifier verify_one;   // how each shard file is checked; empty: verify_file with `verify`
  VerifyOptions verify;
};

// Describes a memory root or one rank directory from its tier logs and the indexes of its copies;
// reads no tensor data. Fails only when the path is neither, or cannot be listed, or the persistent
// store named cannot be opened.
[[nodiscard]] Result<MemoryRoot> describe_memory_root(FsRef fs, const std::string& path, const MemoryRootOptions& options = {});

// Every copy the root holds, checked byte by byte (verify_step on every committed step of every store),
// every tier log and store journal read, and with a persistent store every step of the same number
// verified and compared. Damage is in problems; the Result fails as describe_memory_root's does.
struct MemoryRootVerification {
  MemoryRoot root;                    // the description, every copy's `verified` and each shard's count set
  std::vector<RootProblem> problems;  // every problem found, each once
  std::vector<std::string> notes;
  std::uint64_t copies_checked = 0, chunks_checked = 0, bytes_checked = 0;
  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};
[[nodiscard]] Result<MemoryRootVerification> verify_memory_root(FsRef fs, const std::string& path, const MemoryRootOptions& options = {});

// What repair did to one store of the root: the store recovery a writable open runs (spec/JOURNAL.md
// 6.4, recover_store), under the store's lock.
struct StoreRepair {
  std::string rank_dir;                  // "rank-<r>"
  std::string store;
  std::optional<RecoveryReport> report;  // what recovery found and did (dry run: would do)
  std::vector<std::string> quarantine;   // what STORE/quarantine/ holds afterwards: kept for a person (ckpt-repair --purge)
  Status error;  // not run: locked by a live writer (conflict), unreadable, a corrupt or missing journal (corrupt)
  [[nodiscard]] bool pending() const noexcept;  // a dry run found work to do
  [[nodiscard]] bool failed() const noexcept;   // an action was tried and failed
  [[nodiscard]] bool consistent() const noexcept { return error.ok() && !pending() && !failed() && quarantine.empty(); }
};

// What repair did to one tier log: a torn tail cut (TierLog::open, under the rank's own store lock so no
// live rank appends meanwhile); damage in the middle reported and left as it is.
struct TierLogRepair {
  std::string rank_dir;
  std::string path;
  bool present = false;
  std::size_t records = 0;
  std::optional<JournalDamage> torn_tail;
  bool truncated = false;  // the torn tail was cut
  Status error;            // corrupt (left as it is), a damaged tail that is not a clean tear, or not reachable
};

struct MemoryRootRepair {
  std::string root;
  bool dry_run = true;
  std::vector<StoreRepair> stores;
  std::vector<TierLogRepair> logs;
  MemoryRootVerification after;  // every copy verified once the repair is done (or, dry run, as it is)
  [[nodiscard]] bool consistent() const noexcept;  // nothing failed, nothing pending, nothing damaged
};

// Runs every store's recovery and checks every tier log; dry_run changes nothing and takes no lock.
// A store whose journal is corrupt or missing is reported (ckpt-repair STORE rebuilds it), never changed.
[[nodiscard]] Result<MemoryRootRepair> repair_memory_root(FsRef fs, const std::string& path, bool dry_run,
                                                          const MemoryRootOptions& options = {});

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/memory_root_inl.hpp"
#endif
