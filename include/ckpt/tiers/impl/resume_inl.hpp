// ckpt: resume by collective agreement on content (spec/TIERS.md 7), part of tiers/tiered.hpp.
#pragma once

#include <cstring>

#include "../tiered.hpp"
#include "../../io/thread_priority.hpp"

namespace ckpt::tiers {

// --- TierView -----------------------------------------------------------------------------------------

CKPT_INLINE std::vector<std::string> TierView::tensor_names() const {
  std::set<std::string> names;
  for (const ShardReader* s : shards_)
    for (const auto& t : s->index().tensors)
      if (t.name.rfind(layout::kStateTensorPrefix, 0) != 0) names.insert(t.name);
  return std::vector<std::string>(names.begin(), names.end());
}

CKPT_INLINE std::pair<ShardReader*, const TensorRecord*> TierView::find(std::string_view name) const {
  for (ShardReader* s : shards_)
    if (const TensorRecord* t = s->index().find_tensor(name)) return {s, t};
  for (ShardReader* s : others_)
    if (const TensorRecord* t = s->index().find_tensor(name)) return {s, t};
  return {nullptr, nullptr};
}

CKPT_INLINE const TensorRecord* TierView::find_tensor(std::string_view name) const { return find(name).second; }

CKPT_INLINE Status TierView::read_tensor(std::string_view name, void* dst, std::size_t dst_size) {
  const TensorRecord* t = find_tensor(name);
  if (t == nullptr) return make_error(Code::not_found, "step " + std::to_string(step_) + ": no tensor '" + std::string(name) + "'");
  return read_slice(name, Shape(t->shape.size(), 0), t->shape, dst, dst_size);
}

CKPT_INLINE Status TierView::read_slice(std::string_view name, const Shape& offsets, const Shape& shape, void* dst, std::size_t dst_size) {
  const auto [holder, first] = find(name);
  if (first == nullptr) return make_error(Code::not_found, "step " + std::to_string(step_) + ": no tensor '" + std::string(name) + "'");
  CKPT_ASSIGN_OR_RETURN(const std::uint64_t elements, check_slice(*first, offsets, shape, dst_size));
  // Only in another shard of a persistent step (a replicated tensor its owner wrote): read from there, verified.
  if (std::find(shards_.begin(), shards_.end(), holder) == shards_.end()) {
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t n, holder->read_slice_partial(*first, offsets, shape, dst, ReadCheck::touched));
    if (n == elements) return Status();
    return make_error(Code::incomplete, holder->path() + ": tensor '" + first->name + "' holds " + std::to_string(n) + " of the " +
                                            std::to_string(elements) + " requested elements");
  }
  std::uint64_t copied = 0;
  for (ShardReader* s : shards_) {
    const TensorRecord* t = s->index().find_tensor(name);
    if (t == nullptr) continue;
    if (t->dtype != first->dtype || t->shape != first->shape)
      return make_error(Code::corrupt, s->path() + ": tensor '" + t->name + "' differs in dtype or shape from another shard of step " +
                                           std::to_string(step_));
    const bool unverified = std::find(verify_on_read_.begin(), verify_on_read_.end(), s) != verify_on_read_.end();
    CKPT_ASSIGN_OR_RETURN(const std::uint64_t n, s->read_slice_partial(*t, offsets, shape, dst, unverified ? ReadCheck::touched : ReadCheck::none));
    // A replicated tensor is whole in several shards (every holder's memory copy, spec/TIERS.md 11.1): one is read.
    if (copied == 0 && n == elements) return Status();
    copied += n;
  }
  if (copied != elements)
    return make_error(Code::incomplete, "step " + std::to_string(step_) + ": tensor '" + first->name + "': the loaded shards hold " +
                                            std::to_string(copied) + " of the " + std::to_string(elements) + " requested elements");
  return Status();
}

namespace detail {

enum class CopyKind : std::uint8_t { own = 0, held = 1, persistent = 2 };
[[nodiscard]] constexpr EnumBounds<CopyKind> enum_bounds(CopyKind) noexcept { return {CopyKind::own, CopyKind::persistent}; }
[[nodiscard]] CKPT_INLINE const char* copy_kind_name(CopyKind k) noexcept {
  return enum_name(k, {"own memory", "replica in memory", "persistent store"});
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
    } else if (r.event == TierEvent::load_failed || r.event == TierEvent::sdc) {
      out.failed.insert(step_key(r.step, r.step_digest));  // never chosen again (7.3, 11.3)
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
    // Which file it is (its store's uuid, its transaction): ranks of one node reach the same copies (2.1).
    Uuid store{};
    std::uint64_t txn = 0;
    [[nodiscard]] bool same_file(const Copy& o) const noexcept { return store == o.store && txn == o.txn; }
  };
  std::vector<Copy> copies;
  std::vector<StepKey> failed;
};

[[nodiscard]] CKPT_INLINE std::string encode_report(const MemoryScan& scan) {
  Encoder e;
  e.u32(static_cast<std::uint32_t>(scan.claims.size()));
  for (const auto& c : scan.claims) put_claim(e, c);
  e.u32(static_cast<std::uint32_t>(scan.copies.size()));
  for (const auto& c : scan.copies)
    e.u64(c.step), e.u32(c.shard), wire::put_digest(e, c.digest), e.u8(static_cast<std::uint8_t>(c.kind)), e.raw(c.uuid.data(), c.uuid.size()),
        e.u64(c.info.txn);
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
  if (!d.u32(n) || !d.has(std::size_t{53} * n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    RankReport::Copy c;
    std::uint8_t kind = 0;
    std::string uuid;
    if (!d.u64(c.step) || !d.u32(c.shard) || !wire::get_digest(d, c.digest) || !d.u8(kind) || kind > 2 || !d.str(c.store.size(), uuid) ||
        !d.u64(c.txn))
      return bad();
    c.kind = static_cast<CopyKind>(kind);
    std::memcpy(c.store.data(), uuid.data(), c.store.size());
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

// One shard a rank loads, and from where (spec/TIERS.md 7.2). shared: from rank `holder`, which verified
// its copy in this round (a data-parallel resume); `copy` is then that copy's CopyKind, for the sources' words.
// sibling: the same file as a copy rank `holder` of this node verifies in this round, read where it lies once
// the holder says it verified (`copy` indexes this rank's own table). received: the file rank `holder` of this
// node receives (its entry for the shard is `shared`), read where it lies once the holder says where (`copy`:
// the verifier's copy kind, as for shared). stored_sibling: the persistent store's file of the shard, which rank
// `holder` of this node reads and verifies this round, read once it says so (the node's page cache holds it;
// `copy`: the verifier's copy in rank 0's table).
enum class How : std::uint8_t { local = 0, peer = 1, persistent = 2, shared = 3, sibling = 4, received = 5, stored_sibling = 6 };
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
    if (!d.u32(p.rank) || !d.u32(p.shard) || !d.u8(how) || how > 6 || !d.u32(p.holder) || !d.u32(p.copy)) return bad();
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

// The bytes of a shard's pieces: what a whole read or a verification of it reads.
[[nodiscard]] CKPT_INLINE std::uint64_t data_bytes(const ShardReader& r) {
  std::uint64_t n = 0;
  for (const auto& p : r.index().pieces) n += p.data_length;
  return n;
}

// Sends one copy this rank reaches to `dest` as shard of the agreed step, verified as it is read (adds its
// bytes to *verified). A copy that cannot be opened or does not verify is told to the receiver, which
// reports it; only a transport failure is returned.
[[nodiscard]] CKPT_INLINE Status send_copy(CommRef comm, const LocalCopy& c, const Decision& agreed, int dest, int tag, std::size_t block,
                                           std::uint64_t* verified = nullptr) {
  auto reader = open_copy(c);
  ShardSource src{c.store_path + " step " + std::to_string(c.step) + (reader.ok() ? "" : ": " + reader.status().message()),
                  reader.ok() ? &reader->shard(c.shard_in_step) : nullptr, reader.ok() ? reader->state() : TrainingState(), ReadCheck::touched, {}};
  Status copy_failure;
  Status sent = send_shard(comm, src, agreed.step, c.shard, static_cast<std::uint32_t>(agreed.shards.size()), agreed.digest, c.digest, dest,
                           tag, block, &copy_failure);
  if (sent.ok() && copy_failure.ok() && reader.ok() && verified != nullptr) *verified += data_bytes(reader->shard(c.shard_in_step));
  return sent;
}

// A data-parallel resume of the same world (spec/TIERS.md 7.2): every rank loads every shard, and each copy is
// hashed once. A copy in memory is verified by one rank of the node that reaches it; the node's other ranks
// that reach the same file read it where it lies once that rank says it verified (sibling). A rank reaching
// no copy receives the shard from its verifier (its owner when that holds a memory copy, else the rank with one
// that verifies the fewest, else its owner from the persistent store), which sends it unhashed, and hashes it
// on receipt: one rank per node (the one that received the fewest so far), the node's others read what it
// received (received). The verifier's node's other ranks read a persistent store's file where the verifier
// read it (stored_sibling). No copy crosses the network to a rank that reaches one, nor twice to one node, nor to
// the node whose rank verified it. A copy
// set aside is set aside for every rank that reaches its file. `node_of`: each rank's node (empty: each its own).
[[nodiscard]] CKPT_INLINE std::optional<std::vector<PlanEntry>> plan_verify_once(const std::vector<RankReport>& reports, const Claim& c,
                                                                                const std::set<std::pair<std::uint32_t, std::uint32_t>>& aside,
                                                                                std::uint32_t world, const std::vector<std::string>& node_of) {
  const auto node = [&](std::uint32_t r) { return r < node_of.size() ? node_of[r] : "rank " + std::to_string(r); };
  std::vector<std::uint32_t> receives(world, 0);
  const auto set_aside = [&](std::uint32_t h, std::uint32_t i) {
    for (const auto& [ah, ai] : aside)
      if ((ah == h && ai == i) || (ah < reports.size() && ai < reports[ah].copies.size() && reports[ah].copies[ai].kind != CopyKind::persistent &&
                                   reports[h].copies[i].kind != CopyKind::persistent && reports[ah].copies[ai].same_file(reports[h].copies[i])))
        return true;
    return false;
  };
  std::vector<PlanEntry> plan;
  std::vector<std::uint32_t> verifies(world, 0);
  for (std::uint32_t s = 0; s < world; ++s) {
    // Rank h's copies of shard s in memory (or the persistent store), good so far.
    const auto copies_in = [&](std::uint32_t h, bool persistent) {
      std::vector<std::uint32_t> out;
      for (std::uint32_t i = 0; i < reports[h].copies.size(); ++i) {
        const auto& cp = reports[h].copies[i];
        if (cp.step == c.step && cp.shard == s && cp.digest == c.shards[s] && (cp.kind == CopyKind::persistent) == persistent && !set_aside(h, i))
          out.push_back(i);
      }
      return out;
    };
    const auto copy_in = [&](std::uint32_t h, bool persistent) -> std::optional<std::uint32_t> {
      auto all = copies_in(h, persistent);
      if (all.empty()) return std::nullopt;
      return all.front();
    };
    std::optional<PlanEntry> verifier;
    if (auto i = copy_in(s, false)) verifier = PlanEntry{s, s, How::local, s, *i};
    for (std::uint32_t h = 0; h < world && !verifier; ++h) {
      if (h == s) continue;
      auto i = copy_in(h, false);
      if (i && (!verifier || verifies[h] < verifies[verifier->holder])) verifier = PlanEntry{h, s, How::local, h, *i};
    }
    for (std::uint32_t h = 0; h < reports.size() && !verifier; ++h)
      if (auto i = copy_in(h, true)) verifier = PlanEntry{s, s, How::persistent, h, *i};
    if (!verifier) return std::nullopt;
    ++verifies[verifier->rank];
    // The memory files verified this round, each by one rank: (its verifier, the copy in the verifier's table).
    std::vector<std::pair<std::uint32_t, std::uint32_t>> verified_files;
    if (verifier->how == How::local) verified_files.emplace_back(verifier->rank, verifier->copy);
    const auto verified_by = [&](std::uint32_t h, std::uint32_t i) -> std::optional<std::uint32_t> {
      for (const auto& [v, vi] : verified_files)
        if (reports[v].copies[vi].same_file(reports[h].copies[i])) return v;
      return std::nullopt;
    };
    const auto kind = static_cast<std::uint32_t>(reports[verifier->holder].copies[verifier->copy].kind);
    // The verifier's node reads a persistent store's file as the verifier does: through the node's page cache.
    const auto stored_here = [&](std::uint32_t q) { return verifier->how == How::persistent && node(q) == node(verifier->rank); };
    // Of each node's ranks that reach no copy, the one that received the fewest so far receives the shard.
    std::map<std::string, std::uint32_t> receiver;
    for (std::uint32_t q = 0; q < world; ++q) {
      if (q == verifier->rank || !copies_in(q, false).empty() || stored_here(q)) continue;
      auto [at, fresh] = receiver.emplace(node(q), q);
      if (!fresh && receives[q] < receives[at->second]) at->second = q;
    }
    for (const auto& [n, q] : receiver) ++receives[q];
    for (std::uint32_t q = 0; q < world; ++q) {
      if (q == verifier->rank) {
        plan.push_back(*verifier);
        continue;
      }
      const auto mine = copies_in(q, false);
      std::optional<PlanEntry> sibling;
      for (std::uint32_t i : mine)
        if (auto v = verified_by(q, i); v && !sibling) sibling = PlanEntry{q, s, How::sibling, *v, i};
      if (sibling) {
        plan.push_back(*sibling);
      } else if (!mine.empty()) {
        plan.push_back(PlanEntry{q, s, How::local, q, mine.front()});
        verified_files.emplace_back(q, mine.front());
      } else if (stored_here(q)) {
        plan.push_back(PlanEntry{q, s, How::stored_sibling, verifier->rank, verifier->copy});
      } else if (const std::uint32_t r = receiver.at(node(q)); r != q) {
        plan.push_back(PlanEntry{q, s, How::received, r, kind});
      } else {
        plan.push_back(PlanEntry{q, s, How::shared, verifier->rank, kind});
      }
    }
  }
  return plan;
}

// The root's choice (spec/TIERS.md 7.1): the newest (step, digest) not failed for which every shard each
// rank needs has a source not set aside, each from the nearest: its own copy, a peer's, the persistent store.
[[nodiscard]] CKPT_INLINE Decision plan_resume(const std::vector<RankReport>& reports, const std::vector<std::string>& node_of,
                                               const std::set<StepKey>& failed,
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
    if (load_all && W == world && world > 1) {
      auto plan = plan_verify_once(reports, c, aside, world, node_of);
      if (!plan) continue;
      x.verdict = Verdict::load, x.step = c.step, x.digest = c.digest, x.shards = c.shards, x.plan = std::move(*plan);
      return x;
    }
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

// One resume() (spec/TIERS.md 7): what it has found and decided so far, and its phases.
//   scan:   what this rank reaches: every rank directory of its memory root (store/memory_layout.hpp's
//           scanner, as the tools read it), and on rank 0 the persistent store when memory cannot serve;
//   plan:   rank 0 chooses the step and each shard's source, and every rank learns the decision;
//   fetch:  the copies cross between ranks, are verified whole and loaded, and rank 0 hears every verdict;
//   finish: what was learned goes to the log, abandoned steps are retired, holders are refilled.
struct TieredCheckpointer::Resume {
  using CopyRef = std::pair<std::uint32_t, std::uint32_t>;  // (holder, index into the holder's copy table)
  // One round's sources of this rank.
  struct Fetch {
    std::vector<CopyRef> bad;                             // copies that failed this round
    std::map<std::uint32_t, detail::LocalCopy> mine;      // shard -> where this rank reads it
    std::vector<std::pair<const detail::PlanEntry*, Store*>> incoming;  // from peers, into held stores
    Status local;  // this rank cannot take part: a held store or the persistent tier did not open
  };
  // Every copy this resume hashed whole, (hashed_key, txn): received (hashed as written, digest checked) or
  // verified in a round. A later round loads it without reading it back to hash again (spec/TIERS.md 7.2).
  std::set<std::pair<std::string, std::uint64_t>> hashed_here;
  [[nodiscard]] static std::pair<std::string, std::uint64_t> hashed_key(const detail::LocalCopy& c) {
    return {c.store_path + "#" + std::to_string(c.shard_in_step), c.info.txn};
  }
  // shard -> its plan entry (shared or sibling), a copy: the plan is replaced when the root announces the verdict.
  std::map<std::uint32_t, detail::PlanEntry> shared_from;

  Resume(TieredCheckpointer& owner, const std::function<Status(TierView&)>& load_fn)
      : tiers(owner), load(load_fn), me(static_cast<std::uint32_t>(owner.rank())), world(static_cast<std::uint32_t>(owner.world())),
        persistent_scanned(owner.options_.persistent.empty()) {}

  // Scan (spec/TIERS.md 7.1).
  void scan_memory();
  [[nodiscard]] Store* open_store(const memory_layout::RankDirEntry& dir, const memory_layout::StoreEntry& store);
  [[nodiscard]] Status open_persistent();
  void scan_persistent();
  [[nodiscard]] Status gather_reports();
  // Plan.
  void plan();
  [[nodiscard]] Status share_decision();
  // Fetch, verify, load (7.2) and the verdicts (7.3); true when every rank loaded.
  [[nodiscard]] Result<bool> fetch_and_load();
  [[nodiscard]] Fetch sources();
  [[nodiscard]] Status exchange_copies(Fetch& fetch);
  void verify_fetched(Fetch& fetch);
  [[nodiscard]] bool vouches_for(std::uint32_t shard) const;
  void blame(Fetch& fetch, std::uint32_t shard, const Status& why);
  [[nodiscard]] Status share_verified(Fetch& fetch);
  [[nodiscard]] Status load_sibling(Fetch& fetch, const detail::PlanEntry& p);
  [[nodiscard]] Status load_received(Fetch& fetch, const detail::PlanEntry& p);
  bool read_where_it_lies(Fetch& fetch, const detail::PlanEntry& p, const detail::LocalCopy& c, Result<StepReader> reader, const char* what);
  [[nodiscard]] Status load_view(Fetch& fetch);
  [[nodiscard]] Result<bool> judge(const Fetch& fetch, bool needs_met, const Status& load_status);
  [[nodiscard]] std::string root_verdict(const std::vector<std::string>& verdicts);
  // Finish (7.4).
  [[nodiscard]] Result<Resumed> finish();
  [[nodiscard]] std::vector<TierRecord> learned_records();
  [[nodiscard]] Status retire_abandoned(std::vector<TierRecord>& learned, bool fresh);
  [[nodiscard]] Status refill();
  [[nodiscard]] std::string refill_list() const;

  TieredCheckpointer& tiers;
  const std::function<Status(TierView&)>& load;
  const std::uint32_t me, world;
  Resumed out;
  // Scan.
  detail::MemoryScan scan;
  std::vector<std::unique_ptr<Store>> readers;  // other ranks' stores, read-only
  bool persistent_scanned;
  std::set<std::uint64_t> persistent_steps;  // rank 0: the steps scan_persistent() found
  // The persistent tier read-only, opened by this rank alone when first needed; it outlives every copy
  // read through it (the loaded steps, the refill).
  std::unique_ptr<PersistentTier> persistent;
  // Plan: every rank's report, the failed steps and the copies set aside (rank 0's), and the decision.
  std::vector<detail::RankReport> reports;
  std::set<detail::StepKey> failed, newly_failed;
  std::set<CopyRef> aside;
  detail::Decision decision;
  // Fetch: what this rank loaded in the last round.
  std::vector<std::unique_ptr<StepReader>> open_steps;
  std::vector<std::pair<std::uint32_t, ShardReader*>> loaded;  // (shard, reader)
  std::map<std::uint32_t, detail::LocalCopy> loaded_copies;
  // shard -> the reader of a copy only this rank reads, verified as the load copies it (7.2, revision 10).
  std::map<std::uint32_t, ShardReader*> verify_on_load;
  // (shard, txn) of every copy this resume received into a held store, verified on receipt: a later round
  // or the refill that receives the same shard again retires it instead of setting it aside.
  std::set<std::pair<std::uint32_t, std::uint64_t>> fetched;
  [[nodiscard]] std::function<bool(const StepInfo&)> fetched_here(std::uint32_t shard) const {
    return [this, shard](const StepInfo& info) { return fetched.count({shard, info.txn}) != 0; };
  }
};

CKPT_INLINE Result<Resumed> TieredCheckpointer::resume(const std::function<Status(TierView&)>& load) {
  if (saver_ || refill_.joinable()) return make_error(Code::invalid_argument, "resume() must come before the first step()");
  // Parity groups first (spec/TIERS.md 12.4): a lost shard rebuilt into its rank's own store is then a copy like any.
  if (parity_) CKPT_TRY(rebuild_from_parity());
  // On the heap: a refill that outlives this call keeps the copies it sends from open (7.4).
  auto owned = std::make_shared<Resume>(*this, load);
  Resume& run = *owned;
  // 1. Scan: what this rank reaches; rank 0 hears every rank's report.
  run.scan_memory();
  CKPT_TRY(run.gather_reports());
  // 2. Rounds: the root plans, every rank fetches and verifies its shards and loads them, the root hears
  // every verdict; a bad copy is set aside and the round repeats, a step that cannot load is failed.
  for (int round = 0;; ++round) {
    if (run.me == 0) run.plan();
    CKPT_TRY(run.share_decision());
    if (run.decision.verdict != detail::Verdict::load) break;
    CKPT_ASSIGN_OR_RETURN(const bool all_ok, run.fetch_and_load());
    if (all_ok) {
      if (run.me == 0) run.decision.verdict = detail::Verdict::done;
      CKPT_TRY(run.share_decision());
      break;
    }
    if (round > 4096) return make_error(Code::corrupt, "resume did not converge");
  }
  // 3. Record what was learned, on every rank; the holders that lost their copies are refilled in the
  // background once the state is loaded (the first capture and wait() join it: it uses the communicator).
  auto resumed = run.finish();
  if (!resumed.ok()) parity_refill_.reset();
  if (resumed.ok() && (resumed->refilling || parity_refill_)) {
    const bool replicas = resumed->refilling;
    resumed->refilling = true;
    refill_ = std::thread([this, owned, replicas] {  // reads no caller state (`load`)
      (void)lower_this_thread_priority(options_.background_nice);
      Status done = replicas ? owned->refill() : Status();
      refill_result_ = done.ok() ? refill_parity() : done;
    });
  }
  return resumed;
}

// --- scan ---

CKPT_INLINE void TieredCheckpointer::Resume::scan_memory() {
  // The rank directories of the node's memory root (a root that cannot be listed holds nothing to resume).
  auto dirs = memory_layout::scan_memory_root(tiers.fs_, tiers.options_.memory_root);
  if (dirs.ok()) {
    // Every log of the node first: a rank may have set aside a copy in another rank's directory.
    std::set<std::pair<std::string, std::uint64_t>> aside_paths;
    for (const auto& d : *dirs) {
      auto records = d.rank == me ? Result<std::vector<TierRecord>>(tiers.records()) : read_tier_log(tiers.fs_, d.path);
      if (records.ok()) detail::scan_log(*records, d.path, scan, aside_paths);
      else scan.notes.push_back(records.status().message());
    }
    for (const auto& d : *dirs)
      for (const auto& s : d.stores)
        if (s.parity) continue;  // parity is no copy of a shard: the rebuild before this read it (spec/TIERS.md 12.4)
        else if (Store* store = open_store(d, s))
          detail::scan_store(tiers.fs_, *store, s.own ? detail::CopyKind::own : detail::CopyKind::held, s.shard, aside_paths, scan);
  }
  out.setbacks = tiers.notes();
  // What the scan could not read is a setback too: a copy this rank should reach and does not (spec/TIERS.md 7.1).
  out.setbacks.insert(out.setbacks.end(), scan.notes.begin(), scan.notes.end());
}

// This rank's own stores are its open ones; another rank's directory is opened read-only.
CKPT_INLINE Store* TieredCheckpointer::Resume::open_store(const memory_layout::RankDirEntry& dir, const memory_layout::StoreEntry& store) {
  if (dir.rank == me) {
    if (store.own) return tiers.own_.get();
    auto held = tiers.held(store.shard);
    if (held.ok()) return *held;
    scan.notes.push_back(held.status().message());
    return nullptr;
  }
  auto opened = Store::open(tiers.fs_, store.path, Access::read_only);
  if (!opened.ok()) {
    scan.notes.push_back(opened.status().message());
    return nullptr;
  }
  readers.push_back(std::move(*opened));
  return readers.back().get();
}

CKPT_INLINE Status TieredCheckpointer::Resume::open_persistent() {
  if (persistent) return Status();
  CKPT_ASSIGN_OR_RETURN(persistent, PersistentTier::open_read(tiers.fs_, tiers.options_.persistent, tiers.options_.open_objects));
  return Status();
}

// Rank 0 reads the persistent store for everyone: a claim and a copy per shard of each committed step,
// skipping the copies its own log set aside.
CKPT_INLINE void TieredCheckpointer::Resume::scan_persistent() {
  persistent_scanned = true;
  out.read_persistent = true;
  Status opened = open_persistent();
  if (!opened.ok()) {
    if (opened.code() != Code::not_found) scan.notes.push_back(opened.message());
    return;
  }
  std::set<std::pair<std::string, std::uint64_t>> aside_here;
  for (const auto& r : tiers.records())
    if (r.event == TierEvent::set_aside) aside_here.insert({r.detail, r.txn});
  for (const StepInfo& info : persistent->steps()) {
    auto reader = persistent->open_step(info);
    if (!reader.ok()) {
      scan.notes.push_back(reader.status().with_context(persistent->path()).message());
      continue;
    }
    detail::Claim claim;
    claim.step = info.step;
    persistent_steps.insert(info.step);
    for (std::size_t s = 0; s < reader->shard_count(); ++s) claim.shards.push_back(shard_digest(reader->shard(s)));
    claim.digest = step_digest(info.step, claim.shards);
    for (std::uint32_t s = 0; s < claim.shards.size(); ++s) {
      if (aside_here.count({persistent->path() + "#" + std::to_string(s), info.txn})) continue;
      detail::LocalCopy c = detail::persistent_copy(*persistent, info, s, claim.shards[s]);
      // Rank 0's table and its report grow together: a copy's index is the same in both.
      reports[0].copies.push_back(detail::RankReport::Copy{c.step, c.shard, c.digest, c.kind});
      scan.copies.push_back(std::move(c));
    }
    reports[0].claims.push_back(claim);
    scan.claims.push_back(std::move(claim));
  }
}

CKPT_INLINE Status TieredCheckpointer::Resume::gather_reports() {
  CKPT_ASSIGN_OR_RETURN(auto gathered, tiers.comm_.gather(detail::encode_report(scan), 0));
  if (me != 0) return Status();
  for (std::uint32_t r = 0; r < world; ++r) {
    CKPT_ASSIGN_OR_RETURN(detail::RankReport rep, detail::decode_report(gathered[r], static_cast<int>(r)));
    for (const auto& f : rep.failed) failed.insert(f);
    reports.push_back(std::move(rep));
  }
  return Status();
}

// --- plan ---

// Rank 0's choice. The persistent store is read only when memory cannot serve the newest recorded step:
// a restarted job whose memory tier holds it never touches storage (spec/TIERS.md 7.1).
CKPT_INLINE void TieredCheckpointer::Resume::plan() {
  decision = detail::plan_resume(reports, tiers.topology_.node_of_rank, failed, aside, world, tiers.options_.load_all_shards);
  if (persistent_scanned) return;
  std::uint64_t newest_claim = 0;
  bool any_claim = false;
  for (const auto& rep : reports)
    for (const auto& c : rep.claims) newest_claim = std::max(newest_claim, c.step), any_claim = true;
  if (decision.verdict != detail::Verdict::load || !any_claim || newest_claim > decision.step) {
    scan_persistent();
    decision = detail::plan_resume(reports, tiers.topology_.node_of_rank, failed, aside, world, tiers.options_.load_all_shards);
  }
}

// Rank 0's decision, with the copies set aside and the steps failed so far, to every rank.
CKPT_INLINE Status TieredCheckpointer::Resume::share_decision() {
  std::string bytes;
  if (me == 0) {
    decision.set_aside.assign(aside.begin(), aside.end());
    decision.failed.assign(newly_failed.begin(), newly_failed.end());
    bytes = detail::encode_decision(decision);
  }
  CKPT_TRY(tiers.comm_.broadcast(bytes, 0));
  CKPT_ASSIGN_OR_RETURN(decision, detail::decode_decision(bytes));
  return Status();
}

// --- fetch, verify, load ---

CKPT_INLINE Result<bool> TieredCheckpointer::Resume::fetch_and_load() {
  out.step = decision.step, out.digest = decision.digest;
  tiers.phase("resuming", decision.step);
  open_steps.clear(), loaded.clear(), loaded_copies.clear(), verify_on_load.clear(), shared_from.clear();
  Fetch fetch = sources();
  CKPT_TRY(exchange_copies(fetch));  // the communicator failed: no agreement is possible
  if (fetch.local.ok()) verify_fetched(fetch);
  CKPT_TRY(share_verified(fetch));
  const bool needs_met = fetch.bad.empty() && fetch.local.ok();
  const Status load_status = needs_met ? load_view(fetch) : Status();
  return judge(fetch, needs_met, load_status);
}

// Where this rank reads each shard the plan gives it: its own copies, a held store for a peer's, or the
// persistent store (the plan's persistent entries are rank 0's; every rank opens the store itself).
CKPT_INLINE TieredCheckpointer::Resume::Fetch TieredCheckpointer::Resume::sources() {
  Fetch fetch;
  std::vector<const detail::PlanEntry*> from_persistent;
  for (const auto& p : decision.plan) {
    if (p.rank != me) continue;
    if (p.how == detail::How::shared || p.how == detail::How::sibling || p.how == detail::How::received ||
        p.how == detail::How::stored_sibling)
      continue;  // share_verified
    if (p.how == detail::How::local) {
      fetch.mine[p.shard] = scan.copies.at(p.copy);
    } else if (p.how == detail::How::peer) {
      auto store = tiers.held(p.shard);
      fetch.incoming.emplace_back(&p, store.ok() ? *store : nullptr);  // without a store the stream is still drained
      if (!store.ok()) fetch.local = store.status();
    } else {
      from_persistent.push_back(&p);
    }
  }
  if (from_persistent.empty()) return fetch;
  Status opened = open_persistent();
  if (!opened.ok()) {
    fetch.local = opened;
    return fetch;
  }
  for (const detail::PlanEntry* p : from_persistent) {
    auto info = persistent->find(decision.step);
    if (!info.ok()) {
      fetch.bad.emplace_back(p->holder, p->copy);
      continue;
    }
    fetch.mine[p->shard] = detail::persistent_copy(*persistent, *info, p->shard, decision.shards[p->shard]);
  }
  return fetch;
}

// Sends the copies peers need from this rank while receiving the ones it needs (spec/TIERS.md 7.2).
CKPT_INLINE Status TieredCheckpointer::Resume::exchange_copies(Fetch& fetch) {
  return detail::exchange(
      [&]() -> Status {
        for (const auto& p : decision.plan) {
          if (p.how != detail::How::peer || p.holder != me) continue;
          CKPT_TRY(detail::send_copy(tiers.comm_, scan.copies.at(p.copy), decision, static_cast<int>(p.rank), detail::kFetchTag,
                                     tiers.options_.transfer_block, &out.verified_bytes));
        }
        return Status();
      },
      [&]() -> Status {
        for (const auto& [p, store] : fetch.incoming) {
          std::optional<detail::Received> got;
          Status copy_failure;
          const Result<Store*> into = store ? Result<Store*>(store) : Result<Store*>(fetch.local);
          CKPT_TRY(detail::receive_shard(tiers.fs_, tiers.comm_, into, static_cast<int>(p->holder), detail::kFetchTag, decision.step,
                                         p->shard, decision.shards[p->shard], got, copy_failure, fetched_here(p->shard)));
          if (!got) {
            out.setbacks.push_back(copy_failure.message());
            fetch.bad.emplace_back(p->holder, p->copy);
            continue;
          }
          detail::LocalCopy c;
          c.step = decision.step, c.shard = p->shard, c.digest = decision.shards[p->shard], c.kind = detail::CopyKind::held;
          c.store_path = store->path(), c.fs = tiers.fs_, c.root = store->path(), c.info = got->info, c.uuid = store->uuid();
          fetch.mine[p->shard] = c;
          fetched.insert({p->shard, got->info.txn});
          hashed_here.insert(hashed_key(c));
          (void)tiers.log({TierRecord{TierEvent::held, decision.step, static_cast<std::uint32_t>(decision.shards.size()), p->shard,
                                  decision.digest, decision.shards[p->shard], got->info.txn, 0, std::string(), 0}});
        }
        return Status();
      });
}

// Verifies every byte of every shard this rank will load and its content digest (spec/TIERS.md 7.2); a
// copy that fails is blamed (set aside by the root), the others are kept open for the load. A copy only this
// rank reads is verified as the load copies it instead, in one pass over its bytes (revision 10): load_view.
CKPT_INLINE void TieredCheckpointer::Resume::verify_fetched(Fetch& fetch) {
  for (auto& [s, c] : fetch.mine) {
    auto reader = detail::open_copy(c);
    Status ok = reader.ok() ? Status() : reader.status();
    VerifyOptions whole;
    whole.use_mmap = c.fs && c.fs->can_map();  // hash the pages in place: one pass over the bytes, no copy
    // Mapped once for the verification and the load after it: its pages are faulted in once, and the load copies
    // from them instead of reading (spec/TIERS.md 7.2). A file system that cannot map reads.
    if (ok.ok() && whole.use_mmap && reader->shard(c.shard_in_step).map_file().ok()) whole.mapped = reader->shard(c.shard_in_step).mapped();
    // A copy this resume received (hashed as written, its digest checked: 4.3) or verified in an earlier round
    // is not hashed again.
    const bool unhashed = ok.ok() && hashed_here.count(hashed_key(c)) == 0;
    const bool on_load = unhashed && !vouches_for(s);
    if (unhashed && !on_load) {
      ok = detail::verify_status(verify_file(*c.fs, reader->shard(c.shard_in_step).path(), whole));
      if (ok.ok()) out.verified_bytes += detail::data_bytes(reader->shard(c.shard_in_step)), hashed_here.insert(hashed_key(c));
    }
    if (ok.ok() && shard_digest(reader->shard(c.shard_in_step)) != decision.shards[s])
      ok = make_error(Code::corrupt, reader->shard(c.shard_in_step).path() + ": content digest differs from step " +
                                         std::to_string(decision.step) + "'s shard " + std::to_string(s));
    if (!ok.ok() && reader.ok() && c.root != c.store_path) ok = ok.with_context(c.store_path);  // an object key names no store
    if (!ok.ok()) {
      blame(fetch, s, ok);
      continue;
    }
    open_steps.push_back(std::make_unique<StepReader>(std::move(*reader)));
    ShardReader& shard = open_steps.back()->shard(c.shard_in_step);
    loaded.emplace_back(s, &shard);
    loaded_copies[s] = c;
    if (on_load) shard.remember_verified_chunks(), verify_on_load[s] = &shard;
  }
}

// Whether this rank tells other ranks this round that its copy of the shard verified, or sends its bytes
// unhashed (shared, sibling: 7.2): that copy is verified whole before anyone relies on it.
CKPT_INLINE bool TieredCheckpointer::Resume::vouches_for(std::uint32_t shard) const {
  for (const auto& p : decision.plan)
    if (p.holder == me && p.shard == shard && p.rank != me &&
        (p.how == detail::How::shared || p.how == detail::How::sibling || p.how == detail::How::stored_sibling))
      return true;
  return false;
}

// This rank's copy of the shard failed: every plan entry that reads it goes to the root, which sets the
// copies aside; the round repeats with the next source (7.3).
CKPT_INLINE void TieredCheckpointer::Resume::blame(Fetch& fetch, std::uint32_t shard, const Status& why) {
  out.setbacks.push_back(why.message());
  for (const auto& p : decision.plan)
    if (p.rank == me && p.shard == shard) fetch.bad.emplace_back(p.holder, p.copy);
}

// A data-parallel resume's second exchange (spec/TIERS.md 7.2): each rank sends the shards it verified this
// round to the ranks the plan names (read without a hash: this process has just verified these bytes; each
// receiver hashes them on receipt against the agreed digest), while receiving the shards others verified.
// Both ends walk the plan in its order, so no send waits on a receive that waits on it. A shard whose
// verifier had no verified copy (it blames its copy) or that fails its receipt leaves this rank's needs unmet.
CKPT_INLINE Status TieredCheckpointer::Resume::share_verified(Fetch& fetch) {
  // What this rank verified, before the receiver below adds to `loaded`: shard -> (reader, its step's state).
  std::map<std::uint32_t, std::pair<ShardReader*, const TrainingState*>> verified;
  for (const auto& step : open_steps)
    for (std::size_t k = 0; k < step->shard_count(); ++k)
      for (const auto& [s, r] : loaded)
        if (r == &step->shard(k)) verified[s] = {r, &step->state()};
  return detail::exchange(
      [&]() -> Status {
        for (const auto& p : decision.plan) {
          const bool sibling = p.how == detail::How::sibling || p.how == detail::How::stored_sibling;
          if ((p.how != detail::How::shared && !sibling) || p.holder != me) continue;
          if (sibling) {  // the rank reads the file itself: only the verdict travels
            Encoder said;
            wire::put_status(said, verified.count(p.shard) ? Status()
                                                           : make_error(Code::corrupt, "shard " + std::to_string(p.shard) + ": rank " +
                                                                                           std::to_string(me) + "'s copy did not verify"));
            CKPT_TRY(tiers.comm_.send(detail::as_view(said), static_cast<int>(p.rank), detail::kShareTag));
            continue;
          }
          detail::ShardSource src{"shard " + std::to_string(p.shard) + ": rank " + std::to_string(me) + " has no verified copy", nullptr,
                                  TrainingState(), ReadCheck::none, {}};
          auto v = verified.find(p.shard);
          if (v != verified.end()) src.where = v->second.first->path(), src.reader = v->second.first, src.state = *v->second.second;
          // The receiver's memory store holds one shard of the step, also when the verifier read a whole persistent step (2.1).
          src.state.values[std::string(kPartialStepKey)] = Value(std::to_string(p.shard) + "/" + std::to_string(world));
          Status copy_failure;
          CKPT_TRY(detail::send_shard(tiers.comm_, src, decision.step, p.shard, world, decision.digest, decision.shards[p.shard],
                                      static_cast<int>(p.rank), detail::kShareTag, tiers.options_.transfer_block, &copy_failure));
        }
        return Status();
      },
      [&]() -> Status {
        for (const auto& p : decision.plan) {
          if ((p.how != detail::How::shared && p.how != detail::How::sibling && p.how != detail::How::received &&
               p.how != detail::How::stored_sibling) ||
              p.rank != me)
            continue;
          if (p.how == detail::How::sibling || p.how == detail::How::stored_sibling) {
            CKPT_TRY(load_sibling(fetch, p));
            continue;
          }
          if (p.how == detail::How::received) {
            CKPT_TRY(load_received(fetch, p));
            continue;
          }
          auto store = tiers.held(p.shard);
          std::optional<detail::Received> got;
          Status copy_failure;
          CKPT_TRY(detail::receive_shard(tiers.fs_, tiers.comm_, fetch.local.ok() ? store : Result<Store*>(fetch.local),
                                         static_cast<int>(p.holder), detail::kShareTag, decision.step, p.shard, decision.shards[p.shard], got,
                                         copy_failure, fetched_here(p.shard)));
          // The node's other ranks read what this rank received: where it lies, or why there is nothing.
          Encoder where;
          wire::put_status(where, got ? Status() : copy_failure.ok() ? make_error(Code::io, "nothing received") : copy_failure);
          if (got) wire::put_text(where, (*store)->path()), where.u64(got->info.txn);
          for (const auto& q : decision.plan)
            if (q.how == detail::How::received && q.holder == me && q.shard == p.shard)
              CKPT_TRY(tiers.comm_.send(detail::as_view(where), static_cast<int>(q.rank), detail::kReceivedTag));
          if (!got) {
            if (fetch.local.ok()) fetch.local = copy_failure;
            continue;
          }
          fetched.insert({p.shard, got->info.txn});
          detail::LocalCopy c;
          c.step = decision.step, c.shard = p.shard, c.digest = decision.shards[p.shard], c.kind = detail::CopyKind::held;
          c.store_path = (*store)->path(), c.fs = tiers.fs_, c.root = (*store)->path(), c.info = got->info, c.uuid = (*store)->uuid();
          if (!read_where_it_lies(fetch, p, c, detail::open_copy(c), "sent")) continue;
          (void)tiers.log({TierRecord{TierEvent::held, decision.step, world, p.shard, decision.digest, decision.shards[p.shard],
                                      got->info.txn, 0, std::string(), 0}});
        }
        return Status();
      });
}

// A file of this node that rank p.holder verified this round (spec/TIERS.md 7.2): once it says so, read where
// it lies, not hashed again (the node's memory is one trust boundary); its index still names the agreed shard.
// stored_sibling: the persistent store's file the holder read and verified, read through the same page cache.
CKPT_INLINE Status TieredCheckpointer::Resume::load_sibling(Fetch& fetch, const detail::PlanEntry& p) {
  std::string said;
  CKPT_TRY(tiers.comm_.recv(said, static_cast<int>(p.holder), detail::kShareTag));
  Decoder d = wire::decoder(said);
  Status verdict;
  if (!wire::get_status(d, verdict)) return make_error(Code::corrupt, "undecodable verdict of rank " + std::to_string(p.holder));
  if (p.how == detail::How::sibling) {
    const detail::LocalCopy& c = scan.copies.at(p.copy);
    (void)read_where_it_lies(fetch, p, c, verdict.ok() ? detail::open_copy(c) : Result<StepReader>(verdict), "verified");
    return Status();
  }
  // stored_sibling: the persistent store's file, opened by this rank as a persistent entry is (sources()).
  if (verdict.ok()) verdict = open_persistent();
  Result<StepInfo> info = verdict.ok() ? persistent->find(decision.step) : Result<StepInfo>(verdict);
  detail::LocalCopy c;
  if (info.ok()) c = detail::persistent_copy(*persistent, *info, p.shard, decision.shards[p.shard]);
  (void)read_where_it_lies(fetch, p, c, info.ok() ? detail::open_copy(c) : Result<StepReader>(info.status()), "verified");
  return Status();
}

// The copy a rank verified or received for p (this rank's receipt too): mapped for the load, its index checked
// against the agreed shard digest, and loaded; else (false) this rank cannot take part in the round (`fetch.local`).
CKPT_INLINE bool TieredCheckpointer::Resume::read_where_it_lies(Fetch& fetch, const detail::PlanEntry& p, const detail::LocalCopy& c,
                                                                Result<StepReader> reader, const char* what) {
  if (reader.ok() && c.fs && c.fs->can_map()) reader->shard(c.shard_in_step).map_file().ignore_error();  // else the load reads: as good
  if (reader.ok() && shard_digest(reader->shard(c.shard_in_step)) != decision.shards[p.shard])
    reader = make_error(Code::corrupt, reader->shard(c.shard_in_step).path() + ": content digest differs from step " +
                                           std::to_string(decision.step) + "'s shard " + std::to_string(p.shard));
  if (!reader.ok()) {
    if (fetch.local.ok())
      fetch.local = reader.status().with_context("shard " + std::to_string(p.shard) + " as rank " + std::to_string(p.holder) + " " + what + " it");
    return false;
  }
  open_steps.push_back(std::make_unique<StepReader>(std::move(*reader)));
  loaded.emplace_back(p.shard, &open_steps.back()->shard(c.shard_in_step));
  loaded_copies[p.shard] = c;
  shared_from[p.shard] = p;
  return true;
}

// A shard rank p.holder of this node received and hashed this round (spec/TIERS.md 7.2): read from its held
// store once it says where, not received again.
CKPT_INLINE Status TieredCheckpointer::Resume::load_received(Fetch& fetch, const detail::PlanEntry& p) {
  std::string said;
  CKPT_TRY(tiers.comm_.recv(said, static_cast<int>(p.holder), detail::kReceivedTag));
  Decoder d = wire::decoder(said);
  Status verdict;
  std::string path;
  std::uint64_t txn = 0;
  if (!wire::get_status(d, verdict) || (verdict.ok() && (!wire::get_text(d, path, journal::kMaxPayload) || !d.u64(txn))))
    return make_error(Code::corrupt, "undecodable notice of rank " + std::to_string(p.holder));
  detail::LocalCopy c;
  c.step = decision.step, c.shard = p.shard, c.digest = decision.shards[p.shard], c.kind = detail::CopyKind::held;
  c.store_path = path, c.fs = tiers.fs_, c.root = path;
  Status ok = verdict;
  if (ok.ok()) {
    auto store = Store::open(tiers.fs_, path, Access::read_only);
    ok = store.ok() ? Status() : store.status();
    if (ok.ok()) {
      ok = make_error(Code::not_found, path + ": no transaction " + std::to_string(txn) + " of step " + std::to_string(decision.step));
      for (const StepInfo& info : (*store)->steps())
        if (info.txn == txn && info.step == decision.step) c.info = info, c.uuid = (*store)->uuid(), ok = Status();
    }
  }
  (void)read_where_it_lies(fetch, p, c, ok.ok() ? detail::open_copy(c) : Result<StepReader>(ok), "received");
  return Status();
}

// The caller's load over the verified shards, with this rank's training state: its own rank's in the
// step, or rank 0's when the world changed (spec/TIERS.md 2.3).
CKPT_INLINE Status TieredCheckpointer::Resume::load_view(Fetch& fetch) {
  TierView view;
  view.step_ = decision.step;
  view.world_ = static_cast<std::uint32_t>(decision.shards.size());
  for (auto& [s, r] : loaded) view.shards_.push_back(r);
  for (auto& [s, r] : verify_on_load) view.verify_on_read_.push_back(r);
  for (auto& step : open_steps)
    for (std::size_t k = 0; k < step->shard_count(); ++k)
      if (std::find(view.shards_.begin(), view.shards_.end(), &step->shard(k)) == view.shards_.end()) view.others_.push_back(&step->shard(k));
  const std::uint32_t whose = decision.shards.size() == world ? me : 0;  // a rank of the step that still exists
  const std::string where = "step " + std::to_string(decision.step);
  const TensorRecord* st = view.find_tensor(layout::state_tensor(whose));
  std::uint64_t n = 0;
  Status status = st == nullptr ? make_error(Code::corrupt, where + " has no training state of rank " + std::to_string(whose))
                  : !shape_bytes(st->shape, st->dtype, n) || n > journal::kMaxPayload ? make_error(Code::corrupt, "training state tensor too large")
                                                                                       : Status();
  std::string state_bytes(status.ok() ? static_cast<std::size_t>(n) : 0, '\0');
  if (status.ok()) status = view.read_tensor(layout::state_tensor(whose), state_bytes.empty() ? nullptr : &state_bytes[0], state_bytes.size());
  Decoder d = wire::decoder(state_bytes);
  if (status.ok()) status = decode_training_state(d, view.state_, where + " state");
  view.state_.step = decision.step;
  if (status.ok()) status = load(view);
  // A copy verified as it was read: the chunks the load did not read and the rest verify_file checks (after a
  // failed load, all it did not check). A copy that fails is blamed and the round repeats (7.3), even when the
  // load read only good chunks of it: every shard loaded is verified whole (7.2).
  bool blamed = false;
  for (const auto& [s, r] : verify_on_load) {
    const detail::LocalCopy& c = loaded_copies.at(s);
    VerifyOptions rest;
    rest.use_mmap = c.fs && c.fs->can_map();
    rest.mapped = r->mapped();
    const ShardReader* read = r;
    rest.already_verified = [read](std::uint64_t k) { return read->chunk_verified(k); };
    Status ok = detail::verify_status(verify_file(*c.fs, r->path(), rest));
    if (ok.ok()) {
      out.verified_bytes += detail::data_bytes(*r), hashed_here.insert(hashed_key(c));
      continue;
    }
    if (c.root != c.store_path) ok = ok.with_context(c.store_path);  // an object key names no store
    blame(fetch, s, ok);
    blamed = true;
  }
  if (status.ok() && !blamed) out.state = view.state_;
  return status;
}

// Every rank's verdict to the root, the root's judgement back: true when every rank loaded.
CKPT_INLINE Result<bool> TieredCheckpointer::Resume::judge(const Fetch& fetch, bool needs_met, const Status& load_status) {
  Encoder verdict;
  wire::put_status(verdict, needs_met ? load_status : Status());
  verdict.u32(static_cast<std::uint32_t>(fetch.bad.size()));
  for (const auto& b : fetch.bad) verdict.u32(b.first), verdict.u32(b.second);
  if (!fetch.local.ok()) wire::put_status(verdict, fetch.local);
  CKPT_ASSIGN_OR_RETURN(auto verdicts, tiers.comm_.gather(std::move(verdict.str()), 0));
  std::string next = me == 0 ? root_verdict(verdicts) : std::string();
  CKPT_TRY(tiers.comm_.broadcast(next, 0));
  Decoder nd = wire::decoder(next);
  std::uint8_t all_ok = 0;
  std::string why;
  if (!nd.u8(all_ok) || !wire::get_text(nd, why, journal::kMaxPayload)) return make_error(Code::corrupt, "undecodable round verdict");
  if (!all_ok && !why.empty()) out.setbacks.push_back("step " + std::to_string(decision.step) + " did not load: " + why);
  return all_ok != 0;
}

// Rank 0: the copies blamed are set aside; a load that failed with no copy to blame fails the step for
// everyone (spec/TIERS.md 7.3).
CKPT_INLINE std::string TieredCheckpointer::Resume::root_verdict(const std::vector<std::string>& verdicts) {
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
  if (!all_ok && !any_bad) {
    failed.insert(detail::step_key(decision.step, decision.digest));
    newly_failed.insert(detail::step_key(decision.step, decision.digest));
  }
  Encoder next;
  next.u8(all_ok ? 1 : 0);
  wire::put_text(next, why);
  return std::move(next.str());
}

// --- finish ---

CKPT_INLINE Result<Resumed> TieredCheckpointer::Resume::finish() {
  std::vector<TierRecord> learned = learned_records();
  if (decision.verdict == detail::Verdict::fail) {
    CKPT_TRY(tiers.log(learned));
    return make_error(Code::corrupt, decision.reason);
  }
  tiers.resumed_ = true;
  if (decision.verdict != detail::Verdict::done) {
    // Fresh: no rank's log records a step, so what the memory stores hold are captures the job never agreed
    // on (a crash between a rank's own commit and the agreement); they leave, or the fresh run's first
    // capture of that number would find it taken (spec/TIERS.md 7.4).
    CKPT_TRY(retire_abandoned(learned, true));
    CKPT_TRY(tiers.log(learned));
    return std::move(out);
  }
  out.fresh = false;
  tiers.resumed_step_ = decision.step;
  // The newest persisted step the promotions count from (spec/TIERS.md 4.6): one above the step resumed from did not load.
  if (auto above = persistent_steps.upper_bound(decision.step); above != persistent_steps.begin())
    tiers.scanned_persisted_ = *std::prev(above);
  out.world = static_cast<std::uint32_t>(decision.shards.size());
  TierRecord r;
  r.event = TierEvent::resumed, r.step = decision.step, r.world = out.world, r.shard = std::min(me, out.world - 1);
  r.step_digest = decision.digest;
  learned.push_back(r);
  for (const auto& [s, c] : loaded_copies) {
    auto from = shared_from.find(s);
    if (from == shared_from.end()) {
      out.sources.push_back("shard " + std::to_string(s) + " from " + detail::copy_kind_name(c.kind) + " (" + c.store_path + ")");
      continue;
    }
    if (from->second.how == detail::How::sibling || from->second.how == detail::How::stored_sibling) {
      out.sources.push_back("shard " + std::to_string(s) + " from " + detail::copy_kind_name(c.kind) + " (" + c.store_path + "), which rank " +
                            std::to_string(from->second.holder) + " of this node verified");
      continue;
    }
    if (from->second.how == detail::How::received) {
      out.sources.push_back("shard " + std::to_string(s) + " from what rank " + std::to_string(from->second.holder) +
                            " of this node received (" + c.store_path + ")");
      continue;
    }
    const auto kind = from->second.copy <= static_cast<std::uint32_t>(detail::CopyKind::persistent) ? static_cast<detail::CopyKind>(from->second.copy)
                                                                                                  : detail::CopyKind::held;
    out.sources.push_back("shard " + std::to_string(s) + " from " + detail::copy_kind_name(kind) + " via rank " +
                          std::to_string(from->second.holder) + ", which verified it (received into " + c.store_path + ")");
  }
  // The verdicts are durable first: retiring the abandoned timeline reads which copies were set aside.
  CKPT_TRY(tiers.log(learned));
  std::vector<TierRecord> evicted;
  CKPT_TRY(retire_abandoned(evicted, false));
  if (!evicted.empty()) CKPT_TRY(tiers.log(evicted));
  // A replacement node gets its peers' replicas again (same world): every holder the placement names, in
  // the background (resume() starts it).
  out.refilling = out.world == world && tiers.placement_.achievable > 0;
  return std::move(out);
}

// The copies of this rank set aside (recorded, never deleted) and the steps that failed to load.
CKPT_INLINE std::vector<TierRecord> TieredCheckpointer::Resume::learned_records() {
  std::vector<TierRecord> learned;
  for (const auto& [h, c] : decision.set_aside) {
    if (h != me || c >= scan.copies.size()) continue;
    const detail::LocalCopy& copy = scan.copies[c];
    TierRecord r;
    r.event = TierEvent::set_aside, r.step = copy.step, r.world = std::max<std::uint32_t>(copy.shard + 1, 1), r.shard = copy.shard;
    r.shard_digest = copy.digest, r.txn = copy.info.txn;
    r.detail = copy.kind == detail::CopyKind::persistent ? copy.store_path + "#" + std::to_string(copy.shard) : copy.store_path;
    learned.push_back(r);
    out.setbacks.push_back("set aside " + std::string(detail::copy_kind_name(copy.kind)) + " copy of shard " + std::to_string(copy.shard) +
                           " of step " + std::to_string(copy.step) + " (" + copy.store_path + ")");
  }
  for (const auto& f : decision.failed) {
    TierRecord r;
    r.event = TierEvent::load_failed, r.step = std::get<0>(f), r.world = 1, r.shard = 0;
    r.step_digest = Digest128{std::get<1>(f), std::get<2>(f)}, r.detail = "the job could not load it";
    learned.push_back(r);
  }
  return learned;
}

// Steps newer than the one resumed belong to a timeline the job abandoned: retired from this rank's memory.
// Fresh: every step there is one no rank recorded; when this rank's own log was damaged (set aside at
// create()), that absence proves nothing, so its steps move to quarantine/ instead, never deleted.
CKPT_INLINE Status TieredCheckpointer::Resume::retire_abandoned(std::vector<TierRecord>& learned, bool fresh) {
  std::vector<std::pair<Store*, std::uint32_t>> stores{{tiers.own_.get(), me}};
  for (auto& [s, store] : tiers.held_) stores.emplace_back(store.get(), s);
  for (auto& [store, shard] : stores)
    for (const StepInfo& info : store->steps()) {
      if (!fresh && info.step <= decision.step) continue;
      CKPT_TRY(fresh && tiers.log_replaced_ ? store->set_aside(info.step) : tiers.leave_memory(*store, info));
      TierRecord e;
      e.event = TierEvent::evicted, e.step = info.step, e.world = std::max(world, shard + 1), e.shard = shard, e.txn = info.txn;
      e.detail = fresh ? std::string("recorded by no rank: a capture never agreed on, before a fresh start") +
                             (tiers.log_replaced_ ? " (kept in quarantine/: this rank's log was damaged)" : "")
                       : "newer than the resumed step " + std::to_string(decision.step);
      learned.push_back(e);
    }
  return Status();
}

// Rank 0: every (shard, holder) of the placement whose holder reaches no copy of the resumed step.
CKPT_INLINE std::string TieredCheckpointer::Resume::refill_list() const {
  std::vector<CopyRef> list;  // (shard, holder)
  for (std::uint32_t s = 0; s < world; ++s)
    for (int h : tiers.placement_.holders[s]) {
      const auto holder = static_cast<std::uint32_t>(h);
      bool has = false;
      const auto& copies = reports[holder].copies;
      for (std::uint32_t i = 0; i < copies.size() && !has; ++i)
        has = copies[i].step == decision.step && copies[i].shard == s && copies[i].digest == decision.shards[s] &&
              copies[i].kind != detail::CopyKind::persistent && !aside.count({holder, i});
      for (const auto& p : decision.plan)
        has = has || (p.rank == holder && p.shard == s && (p.how == detail::How::peer || p.how == detail::How::shared));
      if (!has) list.emplace_back(s, holder);
    }
  Encoder e;
  e.u32(static_cast<std::uint32_t>(list.size()));
  for (const auto& [s, h] : list) e.u32(s), e.u32(h);
  return std::move(e.str());
}

// The owners send the copies the list names (tag 0x103); the holders verify them and record HELD.
CKPT_INLINE Status TieredCheckpointer::Resume::refill() {
  tiers.phase("refilling", decision.step);
  std::string bytes = me == 0 ? refill_list() : std::string();
  CKPT_TRY(tiers.comm_.broadcast(bytes, 0));
  Decoder d = wire::decoder(bytes);
  std::uint32_t n = 0;
  std::vector<CopyRef> list;  // (shard, holder)
  if (!d.u32(n) || !d.has(std::size_t{8} * n)) return make_error(Code::corrupt, "undecodable refill list");
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t s = 0, h = 0;
    if (!d.u32(s) || !d.u32(h)) return make_error(Code::corrupt, "undecodable refill list");
    list.emplace_back(s, h);
  }
  std::vector<TierRecord> held_records;
  Status refilled = detail::exchange(
      [&]() -> Status {
        for (const auto& [s, h] : list) {
          if (s != me) continue;
          CKPT_TRY(detail::send_copy(tiers.comm_, loaded_copies.at(s), decision, static_cast<int>(h), detail::kRefillTag,
                                     tiers.options_.transfer_block));
        }
        return Status();
      },
      [&]() -> Status {
        for (const auto& [s, h] : list) {
          if (h != me) continue;
          auto store = tiers.held(s);
          std::optional<detail::Received> got;
          Status copy_failure;
          CKPT_TRY(detail::receive_shard(tiers.fs_, tiers.comm_, store, static_cast<int>(s), detail::kRefillTag, decision.step, s,
                                         decision.shards[s], got, copy_failure, fetched_here(s)));
          if (!got) {
            tiers.note("refill: " + copy_failure.message());
            continue;
          }
          held_records.push_back(TierRecord{TierEvent::held, decision.step, world, s, decision.digest, decision.shards[s], got->info.txn, 0,
                                            std::string(), 0});
          tiers.note("refilled a replica of shard " + std::to_string(s) + " of step " + std::to_string(decision.step));
        }
        return Status();
      });
  CKPT_TRY(refilled);
  return tiers.log(held_records);
}

}  // namespace ckpt::tiers
