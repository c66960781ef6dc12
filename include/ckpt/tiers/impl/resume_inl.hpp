// ckpt: resume by collective agreement on content (spec/TIERS.md 7), part of tiers/tiered.hpp.
#pragma once

#include "../tiered.hpp"

namespace ckpt::tiers {

// --- TierView -----------------------------------------------------------------------------------------

CKPT_INLINE std::vector<std::string> TierView::tensor_names() const {
  std::set<std::string> names;
  for (const ShardReader* s : shards_)
    for (const auto& t : s->index().tensors)
      if (t.name.rfind(layout::kStateTensorPrefix, 0) != 0) names.insert(t.name);
  return std::vector<std::string>(names.begin(), names.end());
}

CKPT_INLINE const TensorRecord* TierView::find_tensor(std::string_view name) const {
  for (const ShardReader* s : shards_)
    if (const TensorRecord* t = s->index().find_tensor(name)) return t;
  return nullptr;
}

CKPT_INLINE Status TierView::read_tensor(std::string_view name, void* dst, std::size_t dst_size) {
  const TensorRecord* t = find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, "step " + std::to_string(step_) + ": no tensor '" + std::string(name) + "'");
  return read_slice(name, Shape(t->shape.size(), 0), t->shape, dst, dst_size);
}

CKPT_INLINE Status TierView::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst, std::size_t dst_size) {
  const TensorRecord* first = find_tensor(name);
  if (first == nullptr) return make_error(Code::not_found, "step " + std::to_string(step_) + ": no tensor '" + std::string(name) + "'");
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t elements, check_slice(*first, offsets, shape, dst_size));
  std::uint64_t copied = 0;
  for (ShardReader* s : shards_) {
    const TensorRecord* t = s->index().find_tensor(name);
    if (t == nullptr) continue;
    if (t->dtype != first->dtype || t->shape != first->shape)
      return make_error(Code::corrupt, s->path() + ": tensor '" + t->name + "' differs in dtype or shape from another shard of step " +
                                           std::to_string(step_));
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t n, s->read_slice_partial(*t, offsets, shape, dst, ReadCheck::none));
    copied += n;
  }
  if (copied != elements)
    return make_error(Code::incomplete, "step " + std::to_string(step_) + ": tensor '" + first->name + "': the loaded shards hold " +
                                            std::to_string(copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

namespace detail {

enum class CopyKind : std::uint8_t { own = 0, held = 1, persistent = 2 };
[[nodiscard]] CKPT_INLINE const char* copy_kind_name(CopyKind k) noexcept {
  return k == CopyKind::own ? "own memory" : k == CopyKind::held ? "replica in memory" : "persistent store";
}

// A copy of one shard this rank can read without help, its content digest from its index.
struct LocalCopy {
  std::uint64_t step = 0;
  std::uint32_t shard = 0;
  Digest128 digest;
  CopyKind kind = CopyKind::own;
  std::string store_path;  // the store's directory or URL: messages and SET_ASIDE records
  std::optional<FsRef> fs;  // what the copy is read through: the job's Fs, or an object store's ObjectFs
  std::string root;         // the store's path inside fs ("" for an object store)
  StepInfo info;
  Uuid uuid{};
  std::uint32_t shard_in_step = 0;  // the shard's position in its step (0 in memory stores; the rank in persistent ones)
};

// The copy's step, through the Fs it lives on (its manifest and pins checked).
[[nodiscard]] CKPT_INLINE Result<StepReader> open_copy(const LocalCopy& c) {
  if (!c.fs) return make_error(Code::invalid_argument, c.store_path + ": a copy without the file system it is read through");
  auto reader = StepReader::open(*c.fs, c.root, c.info, c.uuid);
  if (!reader.ok() && c.root != c.store_path) return reader.status().with_context(c.store_path);  // keys name no store
  return reader;
}

// A copy from the persistent tier: shard `shard` of its step `info`.
[[nodiscard]] CKPT_INLINE LocalCopy persistent_copy(PersistentTier& tier, const StepInfo& info, std::uint32_t shard, const Digest128& digest) {
  LocalCopy c;
  c.step = info.step, c.shard = shard, c.digest = digest, c.kind = CopyKind::persistent;
  c.store_path = tier.path(), c.fs = tier.fs(), c.root = tier.root(), c.info = info, c.uuid = tier.uuid(), c.shard_in_step = shard;
  return c;
}

struct Claim {
  std::uint64_t step = 0;
  Digest128 digest;
  std::vector<Digest128> shards;
};

using StepKey = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;  // step, digest high, digest low
[[nodiscard]] CKPT_INLINE StepKey step_key(std::uint64_t step, const Digest128& d) { return StepKey{step, d.high, d.low}; }

struct MemoryScan {
  std::vector<LocalCopy> copies;
  std::vector<Claim> claims;
  std::set<StepKey> failed;
  std::vector<std::string> notes;
};

// Every committed step of a store of one rank's shards (own or held-<s>), skipping copies set aside.
CKPT_INLINE void scan_store(FsRef fs, Store& store, CopyKind kind, std::uint32_t shard, const std::set<std::pair<std::string, std::uint64_t>>& aside,
                            MemoryScan& out) {
  for (const StepInfo& info : store.steps()) {
    if (aside.count({store.path(), info.txn})) continue;
    auto reader = StepReader::open(fs, store.path(), info, store.uuid());
    if (!reader.ok()) {
      out.notes.push_back(reader.status().message());
      continue;
    }
    LocalCopy c;
    c.step = info.step, c.shard = shard, c.digest = shard_digest(reader->shard(0)), c.kind = kind;
    c.store_path = store.path(), c.fs = fs, c.root = store.path(), c.info = info, c.uuid = store.uuid();
    out.copies.push_back(std::move(c));
  }
}

CKPT_INLINE void scan_log(const std::vector<TierRecord>& records, const std::string& where, MemoryScan& out,
                          std::set<std::pair<std::string, std::uint64_t>>& aside) {
  for (const auto& r : records) {
    if (r.event == TierEvent::captured) {
      auto shards = decode_shard_digests(r, where);
      if (shards.ok()) out.claims.push_back(Claim{r.step, r.step_digest, std::move(*shards)});
      else out.notes.push_back(shards.status().message());
    } else if (r.event == TierEvent::load_failed) {
      out.failed.insert(step_key(r.step, r.step_digest));
    } else if (r.event == TierEvent::set_aside) {
      aside.insert({r.detail, r.txn});
    }
  }
}

CKPT_INLINE void put_claim(Encoder& e, const Claim& c) {
  e.u64(c.step), wire::put_digest(e, c.digest), e.u32(static_cast<std::uint32_t>(c.shards.size()));
  for (const auto& d : c.shards) wire::put_digest(e, d);
}
[[nodiscard]] CKPT_INLINE bool get_claim(Decoder& d, Claim& c) {
  std::uint32_t n = 0;
  if (!d.u64(c.step) || !wire::get_digest(d, c.digest) || !d.u32(n) || n == 0 || n > journal::kMaxWorldSize || !d.has(std::size_t{16} * n)) return false;
  c.shards.assign(n, Digest128{});
  for (auto& s : c.shards)
    if (!wire::get_digest(d, s)) return false;
  return step_digest(c.step, c.shards) == c.digest;  // a claim must add up
}

// What a rank reports at resume: claims, the copies it reaches (by index into its table), failed steps.
struct RankReport {
  std::vector<Claim> claims;
  struct Copy {
    std::uint64_t step = 0;
    std::uint32_t shard = 0;
    Digest128 digest;
    CopyKind kind = CopyKind::own;
  };
  std::vector<Copy> copies;
  std::vector<StepKey> failed;
};

[[nodiscard]] CKPT_INLINE std::string encode_report(const MemoryScan& scan) {
  Encoder e;
  e.u32(static_cast<std::uint32_t>(scan.claims.size()));
  for (const auto& c : scan.claims) put_claim(e, c);
  e.u32(static_cast<std::uint32_t>(scan.copies.size()));
  for (const auto& c : scan.copies) e.u64(c.step), e.u32(c.shard), wire::put_digest(e, c.digest), e.u8(static_cast<std::uint8_t>(c.kind));
  e.u32(static_cast<std::uint32_t>(scan.failed.size()));
  for (const auto& f : scan.failed) e.u64(std::get<0>(f)), e.u64(std::get<1>(f)), e.u64(std::get<2>(f));
  return std::move(e.str());
}

[[nodiscard]] CKPT_INLINE Result<RankReport> decode_report(const std::string& bytes, int rank) {
  const auto bad = [&] { return make_error(Code::corrupt, "resume report of rank " + std::to_string(rank) + " is undecodable"); };
  Decoder d = wire::decoder(bytes);
  RankReport r;
  std::uint32_t n = 0;
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    Claim c;
    if (!get_claim(d, c)) return bad();
    r.claims.push_back(std::move(c));
  }
  if (!d.u32(n) || !d.has(std::size_t{29} * n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    RankReport::Copy c;
    std::uint8_t kind = 0;
    if (!d.u64(c.step) || !d.u32(c.shard) || !wire::get_digest(d, c.digest) || !d.u8(kind) || kind > 2) return bad();
    c.kind = static_cast<CopyKind>(kind);
    r.copies.push_back(c);
  }
  if (!d.u32(n) || !d.has(std::size_t{24} * n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t s = 0, h = 0, l = 0;
    if (!d.u64(s) || !d.u64(h) || !d.u64(l)) return bad();
    r.failed.push_back(StepKey{s, h, l});
  }
  return r;
}

// One shard a rank loads, and from where (spec/TIERS.md 7.2).
enum class How : std::uint8_t { local = 0, peer = 1, persistent = 2 };
struct PlanEntry {
  std::uint32_t rank = 0, shard = 0;
  How how = How::local;
  std::uint32_t holder = 0;  // the rank whose copy table `copy` indexes (persistent: rank 0)
  std::uint32_t copy = 0;
};
// The root's message each round: what to do.
enum class Verdict : std::uint8_t { load = 0, done = 1, fresh = 2, fail = 3 };
struct Decision {
  Verdict verdict = Verdict::fresh;
  std::uint64_t step = 0;
  Digest128 digest;
  std::vector<Digest128> shards;
  std::vector<PlanEntry> plan;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> set_aside;  // (holder, copy) found bad so far
  std::vector<StepKey> failed;                                      // candidates that failed so far
  std::string reason;                                               // fail: why nothing can be resumed
};

[[nodiscard]] CKPT_INLINE std::string encode_decision(const Decision& x) {
  Encoder e;
  e.u8(static_cast<std::uint8_t>(x.verdict)), e.u64(x.step), wire::put_digest(e, x.digest);
  e.u32(static_cast<std::uint32_t>(x.shards.size()));
  for (const auto& s : x.shards) wire::put_digest(e, s);
  e.u32(static_cast<std::uint32_t>(x.plan.size()));
  for (const auto& p : x.plan) e.u32(p.rank), e.u32(p.shard), e.u8(static_cast<std::uint8_t>(p.how)), e.u32(p.holder), e.u32(p.copy);
  e.u32(static_cast<std::uint32_t>(x.set_aside.size()));
  for (const auto& s : x.set_aside) e.u32(s.first), e.u32(s.second);
  e.u32(static_cast<std::uint32_t>(x.failed.size()));
  for (const auto& f : x.failed) e.u64(std::get<0>(f)), e.u64(std::get<1>(f)), e.u64(std::get<2>(f));
  wire::put_text(e, x.reason);
  return std::move(e.str());
}

[[nodiscard]] CKPT_INLINE Result<Decision> decode_decision(const std::string& bytes) {
  const auto bad = [] { return make_error(Code::corrupt, "resume decision is undecodable"); };
  Decoder d = wire::decoder(bytes);
  Decision x;
  std::uint8_t v = 0;
  std::uint32_t n = 0;
  if (!d.u8(v) || v > 3 || !d.u64(x.step) || !wire::get_digest(d, x.digest) || !d.u32(n) || !d.has(std::size_t{16} * n)) return bad();
  x.verdict = static_cast<Verdict>(v);
  x.shards.resize(n);
  for (auto& s : x.shards)
    if (!wire::get_digest(d, s)) return bad();
  if (!d.u32(n) || !d.has(std::size_t{17} * n)) return bad();
  x.plan.resize(n);
  for (auto& p : x.plan) {
    std::uint8_t how = 0;
    if (!d.u32(p.rank) || !d.u32(p.shard) || !d.u8(how) || how > 2 || !d.u32(p.holder) || !d.u32(p.copy)) return bad();
    p.how = static_cast<How>(how);
  }
  if (!d.u32(n) || !d.has(std::size_t{8} * n)) return bad();
  x.set_aside.resize(n);
  for (auto& s : x.set_aside)
    if (!d.u32(s.first) || !d.u32(s.second)) return bad();
  if (!d.u32(n) || !d.has(std::size_t{24} * n)) return bad();
  x.failed.resize(n);
  for (auto& f : x.failed) {
    std::uint64_t s = 0, h = 0, l = 0;
    if (!d.u64(s) || !d.u64(h) || !d.u64(l)) return bad();
    f = StepKey{s, h, l};
  }
  if (!wire::get_text(d, x.reason, journal::kMaxPayload)) return bad();
  return x;
}

// Sends one copy this rank reaches to `dest` as shard of the agreed step. A copy that cannot be opened or
// does not verify is told to the receiver, which reports it; only a transport failure is returned.
[[nodiscard]] CKPT_INLINE Status send_copy(CommRef comm, const LocalCopy& c, const Decision& agreed, int dest, int tag, std::size_t block) {
  auto reader = open_copy(c);
  ShardSource src{c.store_path + " step " + std::to_string(c.step) + (reader.ok() ? "" : ": " + reader.status().message()),
                  reader.ok() ? &reader->shard(c.shard_in_step) : nullptr, reader.ok() ? reader->state() : TrainingState()};
  Status copy_failure;
  return send_shard(comm, src, agreed.step, c.shard, static_cast<std::uint32_t>(agreed.shards.size()), agreed.digest, c.digest, dest, tag,
                    block, &copy_failure);
}

// The root's choice (spec/TIERS.md 7.1): the newest (step, digest) not failed for which every shard each
// rank needs has a source not set aside, each from the nearest: its own copy, a peer's, the persistent store.
[[nodiscard]] CKPT_INLINE Decision plan_resume(const std::vector<RankReport>& reports, const std::set<StepKey>& failed,
                                               const std::set<std::pair<std::uint32_t, std::uint32_t>>& aside, std::uint32_t world,
                                               bool load_all) {
  std::map<StepKey, Claim> candidates;
  for (const auto& r : reports)
    for (const auto& c : r.claims) candidates.emplace(step_key(c.step, c.digest), c);
  Decision x;
  std::vector<std::uint32_t> sends(world, 0);
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    if (failed.count(it->first)) continue;
    const Claim& c = it->second;
    const auto W = static_cast<std::uint32_t>(c.shards.size());
    std::vector<PlanEntry> plan;
    bool complete = true;
    for (std::uint32_t q = 0; q < world && complete; ++q) {
      std::vector<std::uint32_t> needs;
      if (W == world && !load_all) needs.push_back(q);
      else for (std::uint32_t s = 0; s < W; ++s) needs.push_back(s);
      for (std::uint32_t s : needs) {
        const auto matches = [&](std::uint32_t h, std::uint32_t i, bool persistent) {
          const auto& cp = reports[h].copies[i];
          return cp.step == c.step && cp.shard == s && cp.digest == c.shards[s] && (cp.kind == CopyKind::persistent) == persistent &&
                 !aside.count({h, i});
        };
        std::optional<PlanEntry> pick;
        for (std::uint32_t i = 0; i < reports[q].copies.size() && !pick; ++i)
          if (matches(q, i, false)) pick = PlanEntry{q, s, How::local, q, i};
        // A peer's memory copy, from the holder with the fewest sends so far.
        std::optional<PlanEntry> peer;
        for (std::uint32_t h = 0; h < reports.size() && !pick; ++h) {
          if (h == q) continue;
          for (std::uint32_t i = 0; i < reports[h].copies.size(); ++i)
            if (matches(h, i, false) && (!peer || sends[h] < sends[peer->holder])) {
              peer = PlanEntry{q, s, How::peer, h, i};
              break;
            }
        }
        if (!pick && peer) pick = peer, ++sends[peer->holder];
        for (std::uint32_t h = 0; h < reports.size() && !pick; ++h)
          for (std::uint32_t i = 0; i < reports[h].copies.size() && !pick; ++i)
            if (matches(h, i, true)) pick = PlanEntry{q, s, How::persistent, h, i};
        if (!pick) {
          complete = false;
          break;
        }
        plan.push_back(*pick);
      }
    }
    if (!complete) continue;
    x.verdict = Verdict::load, x.step = c.step, x.digest = c.digest, x.shards = c.shards, x.plan = std::move(plan);
    return x;
  }
  if (!candidates.empty()) {
    x.verdict = Verdict::fail;
    x.reason = std::to_string(candidates.size()) + " step(s) are recorded but none has every shard reachable and verified (" +
               std::to_string(failed.size()) + " failed to load): refusing to start over while committed work exists";
  }
  return x;
}

}  // namespace detail

// --- resume -------------------------------------------------------------------------------------------

CKPT_INLINE Result<Resumed> TieredCheckpointer::resume(const std::function<Status(TierView&)>& load) {
  using namespace detail;
  if (saver_) return make_error(Code::invalid_argument, "resume() must come before the first step()");
  const auto me = static_cast<std::uint32_t>(rank());
  const auto world = static_cast<std::uint32_t>(this->world());
  // 1. What this rank reaches: every rank directory of its node's memory root, and (rank 0) the persistent store.
  MemoryScan scan;
  std::vector<std::unique_ptr<Store>> readers;  // other ranks' directories, read-only
  {
    auto entries = fs_.list_dir(options_.memory_root);
    std::vector<std::uint32_t> dirs;
    if (entries.ok())
      for (const auto& e : *entries) {
        const std::string_view prefix = layout::kRankDirPrefix;
        if (e.rfind(prefix, 0) != 0 || e.size() == prefix.size() || e.size() > prefix.size() + 9 ||
            e.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
          continue;
        dirs.push_back(static_cast<std::uint32_t>(std::stoul(e.substr(prefix.size()))));
      }
    std::sort(dirs.begin(), dirs.end());
    // Every log of the node first: a rank may have set aside a copy in another rank's directory.
    std::set<std::pair<std::string, std::uint64_t>> aside;
    for (std::uint32_t d : dirs) {
      const std::string dir = layout::rank_dir(options_.memory_root, d);
      auto records = d == me ? Result<std::vector<TierRecord>>(this->records()) : read_tier_log(fs_, dir);
      if (records.ok()) scan_log(*records, dir, scan, aside);
      else scan.notes.push_back(records.status().message());
    }
    for (std::uint32_t d : dirs) {
      const std::string dir = layout::rank_dir(options_.memory_root, d);
      auto names = fs_.list_dir(dir);
      if (!names.ok()) continue;
      for (const auto& name : *names) {
        CopyKind kind;
        std::uint32_t shard = d;
        const std::string_view held_prefix = layout::kHeldPrefix;
        if (name == layout::kOwnStore) kind = CopyKind::own;
        else if (name.rfind(held_prefix, 0) == 0 && name.size() > held_prefix.size() && name.size() <= held_prefix.size() + 9 &&
                 name.find_first_not_of("0123456789", held_prefix.size()) == std::string::npos) {
          kind = CopyKind::held;
          shard = static_cast<std::uint32_t>(std::stoul(name.substr(held_prefix.size())));
        } else continue;
        Store* store = nullptr;
        if (d == me) {
          if (kind == CopyKind::own) store = own_.get();
          else {
            auto h = held(shard);
            if (h.ok()) store = *h;
            else scan.notes.push_back(h.status().message());
          }
        } else {
          auto opened = Store::open(fs_, join_path(dir, name), Access::read_only);
          if (opened.ok()) store = opened->get(), readers.push_back(std::move(*opened));
          else scan.notes.push_back(opened.status().message());
        }
        if (store != nullptr) scan_store(fs_, *store, kind, shard, aside, scan);
      }
    }
  }
  // The persistent store is read only when memory cannot serve the newest recorded step: a restarted job
  // whose memory tier holds it never touches storage (spec/TIERS.md 7.1). Rank 0 scans it for everyone.
  Resumed out;
  out.setbacks = notes();
  // What the scan could not read is a setback too: a copy this rank should reach and does not (spec/TIERS.md 7.1).
  out.setbacks.insert(out.setbacks.end(), scan.notes.begin(), scan.notes.end());
  bool persistent_scanned = options_.persistent.empty();
  // The persistent tier read-only, opened by this rank alone when first needed; it outlives every copy
  // read through it (the loaded steps, the refill).
  std::unique_ptr<PersistentTier> persistent;
  const auto open_persistent = [&]() -> Status {
    if (persistent) return Status();
    CKPT_ASSIGN_OR_RETURN(persistent, PersistentTier::open_read(fs_, options_.persistent, options_.open_objects));
    return Status();
  };
  const auto scan_persistent = [&](RankReport& into) {
    persistent_scanned = true;
    out.read_persistent = true;
    Status opened = open_persistent();
    if (!opened.ok()) {
      if (opened.code() != Code::not_found) scan.notes.push_back(opened.message());
      return;
    }
    std::set<std::pair<std::string, std::uint64_t>> aside_here;
    for (const auto& r : this->records())
      if (r.event == TierEvent::set_aside) aside_here.insert({r.detail, r.txn});
    for (const StepInfo& info : persistent->steps()) {
      auto reader = persistent->open_step(info);
      if (!reader.ok()) {
        scan.notes.push_back(reader.status().with_context(persistent->path()).message());
        continue;
      }
      Claim claim;
      claim.step = info.step;
      for (std::size_t s = 0; s < reader->shard_count(); ++s) claim.shards.push_back(shard_digest(reader->shard(s)));
      claim.digest = step_digest(info.step, claim.shards);
      for (std::uint32_t s = 0; s < claim.shards.size(); ++s) {
        if (aside_here.count({persistent->path() + "#" + std::to_string(s), info.txn})) continue;
        LocalCopy c = persistent_copy(*persistent, info, s, claim.shards[s]);
        // Rank 0's table and its report grow together: a copy's index is the same in both.
        into.copies.push_back(RankReport::Copy{c.step, c.shard, c.digest, c.kind});
        scan.copies.push_back(std::move(c));
      }
      into.claims.push_back(claim);
      scan.claims.push_back(std::move(claim));
    }
  };
  // 2. Rounds: the root plans, every rank fetches and verifies its shards and loads them, the root hears
  // every verdict; a bad copy is set aside and the round repeats, a step that cannot load is failed.
  std::vector<RankReport> reports;
  std::set<StepKey> failed;
  std::set<std::pair<std::uint32_t, std::uint32_t>> aside;
  CKPT_ASSIGN_OR_RETURN(auto gathered, comm_.gather(encode_report(scan), 0));
  if (me == 0) {
    for (std::uint32_t r = 0; r < world; ++r) {
      CKPT_ASSIGN_OR_RETURN(RankReport rep, decode_report(gathered[r], static_cast<int>(r)));
      for (const auto& f : rep.failed) failed.insert(f);
      reports.push_back(std::move(rep));
    }
  }
  std::vector<std::unique_ptr<StepReader>> open_steps;
  std::vector<std::pair<std::uint32_t, ShardReader*>> loaded;  // (shard, reader) this rank loaded
  std::map<std::uint32_t, LocalCopy> loaded_copies;
  Decision decision;
  std::set<StepKey> newly_failed;
  for (int round = 0;; ++round) {
    std::string bytes;
    if (me == 0) {
      decision = plan_resume(reports, failed, aside, world, options_.load_all_shards);
      if (!persistent_scanned) {
        std::uint64_t newest_claim = 0;
        bool any_claim = false;
        for (const auto& rep : reports)
          for (const auto& c : rep.claims) newest_claim = std::max(newest_claim, c.step), any_claim = true;
        if (decision.verdict != Verdict::load || !any_claim || newest_claim > decision.step) {
          scan_persistent(reports[0]);
          decision = plan_resume(reports, failed, aside, world, options_.load_all_shards);
        }
      }
      decision.set_aside.assign(aside.begin(), aside.end());
      decision.failed.assign(newly_failed.begin(), newly_failed.end());
      bytes = encode_decision(decision);
    }
    CKPT_TRY(comm_.broadcast(bytes, 0));
    CKPT_ASSIGN_OR_RETURN(decision, decode_decision(bytes));
    if (decision.verdict != Verdict::load) break;
    out.step = decision.step, out.digest = decision.digest;
    phase("resuming", decision.step);
    // Fetch: send the copies peers need from this rank while receiving the ones it needs.
    open_steps.clear(), loaded.clear(), loaded_copies.clear();
    std::vector<std::pair<std::uint32_t, std::uint32_t>> bad;  // (holder, copy)
    std::map<std::uint32_t, LocalCopy> mine;                   // shard -> where this rank reads it
    std::vector<std::pair<const PlanEntry*, Store*>> incoming;
    Status local;
    for (const auto& p : decision.plan) {
      if (p.rank != me) continue;
      if (p.how == How::local) mine[p.shard] = scan.copies.at(p.copy);
      else if (p.how == How::peer) {
        auto store = held(p.shard);
        incoming.emplace_back(&p, store.ok() ? *store : nullptr);  // without a store the stream is still drained
        if (!store.ok()) local = store.status();
      }
    }
    // Persistent copies are rank 0's entries; every rank opens the store itself.
    std::vector<std::pair<const PlanEntry*, std::uint32_t>> from_persistent;
    for (const auto& p : decision.plan)
      if (p.rank == me && p.how == How::persistent) from_persistent.emplace_back(&p, p.shard);
    if (!from_persistent.empty()) {
      Status opened = open_persistent();
      if (!opened.ok()) local = opened;
      else {
        for (const auto& [p, s] : from_persistent) {
          auto info = persistent->find(decision.step);
          if (!info.ok()) {
            bad.emplace_back(p->holder, p->copy);
            continue;
          }
          mine[s] = persistent_copy(*persistent, *info, s, decision.shards[s]);
        }
      }
    }
    Status exchanged = exchange(
        [&]() -> Status {
          for (const auto& p : decision.plan) {
            if (p.how != How::peer || p.holder != me) continue;
            CKPT_TRY(send_copy(comm_, scan.copies.at(p.copy), decision, static_cast<int>(p.rank), kFetchTag, options_.transfer_block));
          }
          return Status();
        },
        [&]() -> Status {
          for (const auto& [p, store] : incoming) {
            std::optional<Received> got;
            Status copy_failure;
            CKPT_TRY(receive_shard(fs_, comm_, store ? Result<Store*>(store) : Result<Store*>(local), static_cast<int>(p->holder), kFetchTag, decision.step, p->shard,
                                   decision.shards[p->shard], got, copy_failure));
            if (!got) {
              out.setbacks.push_back(copy_failure.message());
              bad.emplace_back(p->holder, p->copy);
              continue;
            }
            LocalCopy c;
            c.step = decision.step, c.shard = p->shard, c.digest = decision.shards[p->shard], c.kind = CopyKind::held;
            c.store_path = store->path(), c.fs = fs_, c.root = store->path(), c.info = got->info, c.uuid = store->uuid();
            mine[p->shard] = c;
            (void)log({TierRecord{TierEvent::held, decision.step, static_cast<std::uint32_t>(decision.shards.size()), p->shard,
                                  decision.digest, decision.shards[p->shard], got->info.txn, 0, std::string(), 0}});
          }
          return Status();
        });
    if (!exchanged.ok()) return exchanged;  // the communicator failed: no agreement is possible
    // Verify every byte of every shard this rank will load (spec/TIERS.md 7.3), then load.
    Status loaded_status = local;
    if (loaded_status.ok()) {
      for (auto& [s, c] : mine) {
        auto reader = open_copy(c);
        Status ok = reader.ok() ? Status() : reader.status();
        VerifyOptions whole;
        whole.use_mmap = c.fs && c.fs->can_map();  // hash the pages in place: one pass over the bytes, no copy
        if (ok.ok()) ok = verify_status(verify_file(*c.fs, reader->shard(c.shard_in_step).path(), whole));
        if (ok.ok() && shard_digest(reader->shard(c.shard_in_step)) != decision.shards[s])
          ok = make_error(Code::corrupt, reader->shard(c.shard_in_step).path() + ": content digest differs from step " +
                                             std::to_string(decision.step) + "'s shard " + std::to_string(s));
        if (!ok.ok() && reader.ok() && c.root != c.store_path) ok = ok.with_context(c.store_path);  // an object key names no store
        if (!ok.ok()) {
          out.setbacks.push_back(ok.message());
          for (const auto& p : decision.plan)
            if (p.rank == me && p.shard == s) bad.emplace_back(p.holder, p.copy);
          continue;
        }
        open_steps.push_back(std::make_unique<StepReader>(std::move(*reader)));
        loaded.emplace_back(s, &open_steps.back()->shard(c.shard_in_step));
        loaded_copies[s] = c;
      }
    }
    bool needs_met = bad.empty() && loaded_status.ok();
    Status load_status;
    if (needs_met) {
      TierView view;
      view.step_ = decision.step;
      view.world_ = static_cast<std::uint32_t>(decision.shards.size());
      for (auto& [s, r] : loaded) view.shards_.push_back(r);
      // This rank's state: its own rank's in the step, or rank 0's when the world changed.
      const std::uint32_t whose = decision.shards.size() == world ? me : 0;  // a rank of the step that still exists
      std::string state_bytes;
      const TensorRecord* st = view.find_tensor(layout::state_tensor(whose));
      if (st == nullptr) load_status = make_error(Code::corrupt, "step " + std::to_string(decision.step) + " has no training state of rank " + std::to_string(whose));
      else {
        std::uint64_t n = 0;
        if (!shape_bytes(st->shape, st->dtype, n) || n > journal::kMaxPayload) load_status = make_error(Code::corrupt, "training state tensor too large");
        else {
          state_bytes.resize(static_cast<std::size_t>(n));
          load_status = view.read_tensor(layout::state_tensor(whose), state_bytes.empty() ? nullptr : &state_bytes[0], state_bytes.size());
          Decoder d = wire::decoder(state_bytes);
          if (load_status.ok()) load_status = decode_training_state(d, view.state_, "step " + std::to_string(decision.step) + " state");
          view.state_.step = decision.step;
        }
      }
      if (load_status.ok()) load_status = load(view);
      if (load_status.ok()) out.state = view.state_;
    }
    // 3. Verdicts to the root.
    Encoder verdict;
    wire::put_status(verdict, needs_met ? load_status : Status());
    verdict.u32(static_cast<std::uint32_t>(bad.size()));
    for (const auto& b : bad) verdict.u32(b.first), verdict.u32(b.second);
    if (!loaded_status.ok()) wire::put_status(verdict, loaded_status);
    CKPT_ASSIGN_OR_RETURN(auto verdicts, comm_.gather(std::move(verdict.str()), 0));
    Encoder next;
    if (me == 0) {
      bool all_ok = true, any_bad = false;
      std::string why;
      for (std::uint32_t r = 0; r < world; ++r) {
        Decoder d = wire::decoder(verdicts[r]);
        Status s;
        std::uint32_t n = 0;
        if (!wire::get_status(d, s) || !d.u32(n)) s = make_error(Code::corrupt, "undecodable verdict");
        for (std::uint32_t i = 0; i < n; ++i) {
          std::uint32_t h = 0, c = 0;
          if (d.u32(h) && d.u32(c)) aside.insert({h, c}), any_bad = true;
        }
        Status other;
        if (d.remaining() > 0 && wire::get_status(d, other) && !other.ok()) s = other;
        if (!s.ok() || n > 0) all_ok = false;
        if (!s.ok() && why.empty()) why = "rank " + std::to_string(r) + ": " + s.message();
      }
      // A load that failed with no copy to blame fails the step for everyone (spec/TIERS.md 7.4).
      if (!all_ok && !any_bad) {
        failed.insert(step_key(decision.step, decision.digest));
        newly_failed.insert(step_key(decision.step, decision.digest));
      }
      next.u8(all_ok ? 1 : 0);
      wire::put_text(next, why);
    }
    std::string next_bytes = std::move(next.str());
    CKPT_TRY(comm_.broadcast(next_bytes, 0));
    Decoder nd = wire::decoder(next_bytes);
    std::uint8_t all_ok = 0;
    std::string why;
    if (!nd.u8(all_ok) || !wire::get_text(nd, why, journal::kMaxPayload)) return make_error(Code::corrupt, "undecodable round verdict");
    if (all_ok) {
      if (me == 0) {
        decision.verdict = Verdict::done;
        decision.set_aside.assign(aside.begin(), aside.end());
        decision.failed.assign(newly_failed.begin(), newly_failed.end());
        bytes = encode_decision(decision);
      }
      CKPT_TRY(comm_.broadcast(bytes, 0));
      CKPT_ASSIGN_OR_RETURN(decision, decode_decision(bytes));
      break;
    }
    if (!why.empty()) out.setbacks.push_back("step " + std::to_string(decision.step) + " did not load: " + why);
    if (round > 4096) return make_error(Code::corrupt, "resume did not converge");
  }
  // 4. Record what was learned, on every rank: copies set aside (never deleted), failed steps, the resume.
  std::vector<TierRecord> learned;
  for (const auto& [h, c] : decision.set_aside) {
    if (h != me || c >= scan.copies.size()) continue;
    const LocalCopy& copy = scan.copies[c];
    TierRecord r;
    r.event = TierEvent::set_aside, r.step = copy.step, r.world = std::max<std::uint32_t>(copy.shard + 1, 1), r.shard = copy.shard;
    r.shard_digest = copy.digest, r.txn = copy.info.txn;
    r.detail = copy.kind == CopyKind::persistent ? copy.store_path + "#" + std::to_string(copy.shard) : copy.store_path;
    learned.push_back(r);
    out.setbacks.push_back("set aside " + std::string(copy_kind_name(copy.kind)) + " copy of shard " + std::to_string(copy.shard) +
                           " of step " + std::to_string(copy.step) + " (" + copy.store_path + ")");
  }
  for (const auto& f : decision.failed) {
    TierRecord r;
    r.event = TierEvent::load_failed, r.step = std::get<0>(f), r.world = 1, r.shard = 0;
    r.step_digest = Digest128{std::get<1>(f), std::get<2>(f)}, r.detail = "the job could not load it";
    learned.push_back(r);
  }
  if (decision.verdict == Verdict::fail) {
    CKPT_TRY(log(learned));
    return make_error(Code::corrupt, decision.reason);
  }
  resumed_ = true;
  if (decision.verdict != Verdict::done) {
    CKPT_TRY(log(learned));
    return out;  // fresh: nothing recorded anywhere
  }
  out.fresh = false;
  out.world = static_cast<std::uint32_t>(decision.shards.size());
  TierRecord r;
  r.event = TierEvent::resumed, r.step = decision.step, r.world = out.world, r.shard = std::min(me, out.world - 1), r.step_digest = decision.digest;
  learned.push_back(r);
  for (const auto& [s, c] : loaded_copies)
    out.sources.push_back("shard " + std::to_string(s) + " from " + copy_kind_name(c.kind) + " (" + c.store_path + ")");
  // Steps newer than the one resumed belong to a timeline the job abandoned: retire them from this rank's memory.
  std::vector<std::pair<Store*, std::uint32_t>> mine_stores{{own_.get(), me}};
  for (auto& [s, store] : held_) mine_stores.emplace_back(store.get(), s);
  for (auto& [store, shard] : mine_stores)
    for (const StepInfo& info : store->steps())
      if (info.step > decision.step) {
        CKPT_TRY(store->retire(info.step));
        TierRecord e;
        e.event = TierEvent::evicted, e.step = info.step, e.world = std::max(world, shard + 1), e.shard = shard, e.txn = info.txn;
        e.detail = "newer than the resumed step " + std::to_string(decision.step);
        learned.push_back(e);
      }
  CKPT_TRY(log(learned));
  // 5. Refill (same world): every holder the placement names gets a verified copy again (a replacement node).
  if (out.world == world && placement_.achievable > 0) {
    std::string refill;
    if (me == 0) {
      Encoder e;
      std::vector<std::pair<std::uint32_t, std::uint32_t>> list;  // (shard, holder)
      for (std::uint32_t s = 0; s < world; ++s)
        for (int h : placement_.holders[s]) {
          bool has = false;
          const auto& copies = reports[static_cast<std::size_t>(h)].copies;
          for (std::uint32_t i = 0; i < copies.size() && !has; ++i)
            has = copies[i].step == decision.step && copies[i].shard == s && copies[i].digest == decision.shards[s] &&
                  copies[i].kind != CopyKind::persistent && !aside.count({static_cast<std::uint32_t>(h), i});
          for (const auto& p : decision.plan)
            has = has || (p.rank == static_cast<std::uint32_t>(h) && p.shard == s && p.how == How::peer);
          if (!has) list.emplace_back(s, static_cast<std::uint32_t>(h));
        }
      e.u32(static_cast<std::uint32_t>(list.size()));
      for (const auto& [s, h] : list) e.u32(s), e.u32(h);
      refill = std::move(e.str());
    }
    CKPT_TRY(comm_.broadcast(refill, 0));
    Decoder d = wire::decoder(refill);
    std::uint32_t n = 0;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> list;
    if (!d.u32(n) || !d.has(std::size_t{8} * n)) return make_error(Code::corrupt, "undecodable refill list");
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint32_t s = 0, h = 0;
      if (!d.u32(s) || !d.u32(h)) return make_error(Code::corrupt, "undecodable refill list");
      list.emplace_back(s, h);
    }
    std::vector<TierRecord> held_records;
    Status refilled = exchange(
        [&]() -> Status {
          for (const auto& [s, h] : list) {
            if (s != me) continue;
            CKPT_TRY(send_copy(comm_, loaded_copies.at(s), decision, static_cast<int>(h), kRefillTag, options_.transfer_block));
          }
          return Status();
        },
        [&]() -> Status {
          for (const auto& [s, h] : list) {
            if (h != me) continue;
            auto store = held(s);
            std::optional<Received> got;
            Status copy_failure;
            CKPT_TRY(receive_shard(fs_, comm_, store, static_cast<int>(s), kRefillTag, decision.step, s, decision.shards[s], got,
                                   copy_failure));
            if (!got) {
              out.setbacks.push_back("refill: " + copy_failure.message());
              continue;
            }
            held_records.push_back(TierRecord{TierEvent::held, decision.step, world, s, decision.digest, decision.shards[s], got->info.txn,
                                              0, std::string(), 0});
            out.sources.push_back("refilled a replica of shard " + std::to_string(s));
          }
          return Status();
        });
    CKPT_TRY(refilled);
    CKPT_TRY(log(held_records));
  }
  return out;
}

}  // namespace ckpt::tiers
