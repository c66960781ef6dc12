// ckpt: the memory tier's parity groups at capture and at resume (spec/TIERS.md 12.3, 12.4): members of
// TieredCheckpointer. The arithmetic is parity.hpp's (ISA-L); this file moves segments between ranks.
#pragma once

#include "../tiered.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <sys/statvfs.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "../../core/coding.hpp"
#include "../parity.hpp"

namespace ckpt::tiers {

namespace detail {

inline constexpr int kParityTag = 0x105;   // a shard file's segment to the holder of its stripe's parity (spec/TIERS.md 12.3)
inline constexpr int kRebuildTag = 0x106;  // a segment to the rank rebuilding a lost shard (12.4)

// A committed shard file read as bytes: through the mapping its store keeps, else pread.
struct FileBytes {
  FsRef fs;
  FileHandle file;
  std::string path;
  std::uint64_t length = 0;
  std::string_view mapped;  // the whole file, when its store keeps it mapped

  // n bytes from `off`, zero past the file's end.
  [[nodiscard]] Status read(std::uint64_t off, std::size_t n, unsigned char* out) const {
    const std::size_t have = off >= length ? 0 : static_cast<std::size_t>(std::min<std::uint64_t>(n, length - off));
    if (have > 0) {
      if (mapped.size() >= length) std::memcpy(out, mapped.data() + off, have);
      else CKPT_TRY(read_exact(fs, file, path, out, have, off));
    }
    std::memset(out + have, 0, n - have);
    return Status();
  }
  // Bytes [off, off + n) of segment d (segment_length `segment`), as a stripe of `length` bytes sees it: zero past
  // the segment's end and past the file's (spec/TIERS.md 12.2).
  [[nodiscard]] Status segment(std::uint64_t segment_bytes, int d, std::uint64_t off, std::size_t n, unsigned char* out) const {
    const std::size_t inside = off >= segment_bytes ? 0 : static_cast<std::size_t>(std::min<std::uint64_t>(n, segment_bytes - off));
    if (inside > 0) CKPT_TRY(read(static_cast<std::uint64_t>(d) * segment_bytes + off, inside, out));
    std::memset(out + inside, 0, n - inside);
    return Status();
  }
  // The same bytes as a view: of the mapping where they lie in it whole (no copy), else made in `scratch`.
  [[nodiscard]] Result<std::string_view> segment_view(std::uint64_t segment_bytes, int d, std::uint64_t off, std::size_t n,
                                                      std::string& scratch) const {
    const std::uint64_t at = static_cast<std::uint64_t>(d) * segment_bytes + off;
    if (mapped.size() >= length && off <= segment_bytes && n <= segment_bytes - off && at <= length && n <= length - at)
      return std::string_view(mapped.data() + at, n);
    scratch.resize(n);
    CKPT_TRY(segment(segment_bytes, d, off, n, reinterpret_cast<unsigned char*>(&scratch[0])));
    return std::string_view(scratch);
  }
};

// `length` bytes in messages of `block` (the last one shorter), each the view produce(off, n, scratch) gives: bytes
// where they lie, or made in `scratch`, a buffer the caller reuses (no fresh pages per message).
using ProduceBytes = std::function<Result<std::string_view>(std::uint64_t off, std::size_t n, std::string& scratch)>;
[[nodiscard]] CKPT_INLINE Status send_bytes(CommRef comm, int dest, int tag, std::uint64_t length, std::size_t block, std::string& scratch,
                                            const ProduceBytes& produce) {
  for (std::uint64_t off = 0; off < length;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, length - off));
    CKPT_ASSIGN_OR_RETURN(const std::string_view bytes, produce(off, n, scratch));
    CKPT_TRY(comm.send(bytes, dest, tag));
    off += n;
  }
  return Status();
}

// The receiving half: every message must have the length send_bytes gives it, or the stream is broken.
[[nodiscard]] CKPT_INLINE Status receive_bytes(CommRef comm, int source, int tag, std::uint64_t length, std::size_t block, std::string& msg,
                                               const std::function<void(std::uint64_t, const unsigned char*, std::size_t)>& consume) {
  for (std::uint64_t off = 0; off < length;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, length - off));
    CKPT_TRY(comm.recv(msg, source, tag));
    if (msg.size() != n)
      return make_error(Code::corrupt, "a segment from rank " + std::to_string(source) + ": a message of " + std::to_string(msg.size()) +
                                           " bytes at offset " + std::to_string(off) + ", expected " + std::to_string(n));
    consume(off, reinterpret_cast<const unsigned char*>(msg.data()), n);
    off += n;
  }
  return Status();
}

// The free space of the file system holding `path`: no header of a peer makes a rank allocate past it.
[[nodiscard]] CKPT_INLINE std::uint64_t free_space(const std::string& path) {
  struct statvfs sv {};
  if (::statvfs(path.c_str(), &sv) != 0) return 0;
  return static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
}

// What each rank tells rank 0 before a rebuild (spec/TIERS.md 12.4).
struct ParityReport {
  struct Claim {
    std::uint64_t step = 0;
    Digest128 digest;
    std::vector<Digest128> shards;
  };
  struct Own {
    Digest128 digest;
    std::uint64_t file_length = 0;
  };
  std::vector<Claim> claims;                     // CAPTURED records of its log
  std::set<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> failed;  // (step, digest): LOAD_FAILED, SDC
  std::map<std::uint64_t, Own> own;              // step -> its own copy
  std::map<std::uint64_t, ParityLayout> parity;  // step -> the parity it holds
};

[[nodiscard]] CKPT_INLINE std::string encode_parity_report(const ParityReport& r) {
  Encoder e;
  e.u32(static_cast<std::uint32_t>(r.claims.size()));
  for (const auto& c : r.claims) {
    e.u64(c.step), wire::put_digest(e, c.digest), e.u32(static_cast<std::uint32_t>(c.shards.size()));
    for (const auto& s : c.shards) wire::put_digest(e, s);
  }
  e.u32(static_cast<std::uint32_t>(r.failed.size()));
  for (const auto& [step, high, low] : r.failed) e.u64(step), e.u64(high), e.u64(low);
  e.u32(static_cast<std::uint32_t>(r.own.size()));
  for (const auto& [step, o] : r.own) e.u64(step), wire::put_digest(e, o.digest), e.u64(o.file_length);
  e.u32(static_cast<std::uint32_t>(r.parity.size()));
  for (const auto& [step, l] : r.parity) e.u64(step), wire::put_text(e, encode_parity_layout(l));
  return std::move(e.str());
}

[[nodiscard]] CKPT_INLINE Result<ParityReport> decode_parity_report(const std::string& bytes, int rank) {
  const std::string where = "rank " + std::to_string(rank) + "'s parity report";
  Decoder d = wire::decoder(bytes);
  ParityReport r;
  std::uint32_t n = 0;
  auto bad = [&] { return make_error(Code::corrupt, where + ": undecodable at byte " + std::to_string(d.position())); };
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    ParityReport::Claim c;
    std::uint32_t shards = 0;
    if (!d.u64(c.step) || !wire::get_digest(d, c.digest) || !d.u32(shards) || !d.has(std::size_t{16} * shards)) return bad();
    c.shards.resize(shards);
    for (auto& s : c.shards)
      if (!wire::get_digest(d, s)) return bad();
    r.claims.push_back(std::move(c));
  }
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t step = 0, high = 0, low = 0;
    if (!d.u64(step) || !d.u64(high) || !d.u64(low)) return bad();
    r.failed.insert({step, high, low});
  }
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t step = 0;
    ParityReport::Own o;
    if (!d.u64(step) || !wire::get_digest(d, o.digest) || !d.u64(o.file_length)) return bad();
    r.own[step] = o;
  }
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t step = 0;
    std::string layout;
    if (!d.u64(step) || !wire::get_text(d, layout, journal::kMaxPayload)) return bad();
    CKPT_ASSIGN_OR_RETURN(r.parity[step], decode_parity_layout(layout, where));
  }
  if (d.remaining() != 0) return bad();
  return r;
}

// Rank 0's plan of one rebuild round: for each lost shard, each of its stripes and the m segments it is decoded from.
struct RebuildPlan {
  std::uint8_t kind = 0;  // 0: nothing to rebuild; 1: rebuild
  std::uint64_t step = 0;
  Digest128 digest;
  std::vector<Digest128> shards;
  std::vector<std::string> notes;
  struct Source {
    std::uint32_t rank = 0, row = 0;  // row < m: the rank's data segment `row`; else its parity row - m
  };
  struct Entry {
    std::uint32_t target = 0, group = 0, stripe = 0, d = 0;
    std::uint64_t file_length = 0;
    std::vector<Source> sources;
  };
  std::vector<Entry> entries;
};

[[nodiscard]] CKPT_INLINE std::string encode_rebuild_plan(const RebuildPlan& p) {
  Encoder e;
  e.u8(p.kind), e.u64(p.step), wire::put_digest(e, p.digest), e.u32(static_cast<std::uint32_t>(p.shards.size()));
  for (const auto& s : p.shards) wire::put_digest(e, s);
  e.u32(static_cast<std::uint32_t>(p.notes.size()));
  for (const auto& n : p.notes) wire::put_text(e, n);
  e.u32(static_cast<std::uint32_t>(p.entries.size()));
  for (const auto& x : p.entries) {
    e.u32(x.target), e.u32(x.group), e.u32(x.stripe), e.u32(x.d), e.u64(x.file_length), e.u32(static_cast<std::uint32_t>(x.sources.size()));
    for (const auto& s : x.sources) e.u32(s.rank), e.u32(s.row);
  }
  return std::move(e.str());
}

[[nodiscard]] CKPT_INLINE Result<RebuildPlan> decode_rebuild_plan(const std::string& bytes) {
  Decoder d = wire::decoder(bytes);
  RebuildPlan p;
  std::uint32_t n = 0;
  auto bad = [&] { return make_error(Code::corrupt, "undecodable rebuild plan at byte " + std::to_string(d.position())); };
  if (!d.u8(p.kind) || !d.u64(p.step) || !wire::get_digest(d, p.digest) || !d.u32(n) || !d.has(std::size_t{16} * n)) return bad();
  p.shards.resize(n);
  for (auto& s : p.shards)
    if (!wire::get_digest(d, s)) return bad();
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string text;
    if (!wire::get_text(d, text, journal::kMaxPayload)) return bad();
    p.notes.push_back(std::move(text));
  }
  if (!d.u32(n)) return bad();
  for (std::uint32_t i = 0; i < n; ++i) {
    RebuildPlan::Entry x;
    std::uint32_t sources = 0;
    if (!d.u32(x.target) || !d.u32(x.group) || !d.u32(x.stripe) || !d.u32(x.d) || !d.u64(x.file_length) || !d.u32(sources) ||
        !d.has(std::size_t{8} * sources))
      return bad();
    x.sources.resize(sources);
    for (auto& s : x.sources)
      if (!d.u32(s.rank) || !d.u32(s.row)) return bad();
    p.entries.push_back(std::move(x));
  }
  if (d.remaining() != 0) return bad();
  return p;
}

// Whether `holder`'s parity layout covers stripe j's parity p of the claim: the same members and shard digests.
[[nodiscard]] CKPT_INLINE const ParityStripe* covering(const ParityLayout& layout, const ParityGroup& g, int j, int p,
                                                      const std::vector<Digest128>& shards) {
  const int n = g.size(), k = g.losses;
  if (layout.n != static_cast<std::uint32_t>(n) || layout.k != static_cast<std::uint32_t>(k)) return nullptr;
  for (const auto& s : layout.stripes) {
    if (s.stripe != static_cast<std::uint32_t>(j) || s.parity != static_cast<std::uint32_t>(p)) continue;
    for (int d = 0; d < n - k; ++d) {
      const auto member = static_cast<std::uint32_t>(g.ranks[static_cast<std::size_t>(stripes::data_position(n, k, j, d))]);
      const auto& m = s.members[static_cast<std::size_t>(d)];
      if (m.rank != member || member >= shards.size() || m.shard_digest != shards[member]) return nullptr;
    }
    return &s;
  }
  return nullptr;
}

// Rank 0: the newest claimed step some shard of which no rank's memory holds and every such shard can be rebuilt
// (spec/TIERS.md 12.4). `excluded`: (rank, step) of copies that failed in an earlier round (own or parity).
[[nodiscard]] CKPT_INLINE RebuildPlan plan_rebuild(const std::vector<ParityReport>& reports, const ParityPlacement& placement,
                                                   std::uint32_t world, const std::set<std::pair<std::uint32_t, std::uint64_t>>& excluded,
                                                   const std::set<std::uint64_t>& hopeless) {
  RebuildPlan plan;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, const ParityReport::Claim*> claims;
  std::set<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> failed;
  for (const auto& r : reports) {
    for (const auto& c : r.claims) claims.emplace(std::make_tuple(c.step, c.digest.high, c.digest.low), &c);
    failed.insert(r.failed.begin(), r.failed.end());
  }
  for (auto it = claims.rbegin(); it != claims.rend(); ++it) {
    const ParityReport::Claim& c = *it->second;
    if (c.shards.size() != world || failed.count(it->first) != 0 || hopeless.count(c.step) != 0) continue;
    // A step no rank keeps parity of any more (retired everywhere) is no candidate, and no note either.
    if (std::none_of(reports.begin(), reports.end(), [&](const ParityReport& r) { return r.parity.count(c.step) != 0; })) continue;
    auto holds_own = [&](std::uint32_t r) {
      auto o = reports[r].own.find(c.step);
      return o != reports[r].own.end() && o->second.digest == c.shards[r] && excluded.count({r, c.step}) == 0;
    };
    std::vector<std::uint32_t> missing;
    for (std::uint32_t r = 0; r < world; ++r)
      if (!holds_own(r)) missing.push_back(r);
    if (missing.empty()) break;  // whole in memory: nothing to rebuild (spec/TIERS.md 12.4)
    const std::string about = "step " + std::to_string(c.step) + ": ";
    std::vector<RebuildPlan::Entry> entries;
    std::string why;
    for (std::uint32_t r : missing) {
      const ParityGroup* g = placement.group(static_cast<int>(r));
      if (g == nullptr) {
        why = "rank " + std::to_string(r) + "'s shard is in no memory and in no parity group";
        break;
      }
      const int n = g->size(), k = g->losses, m = g->data(), q = placement.position_of[r];
      for (int d = 0; d < m && why.empty(); ++d) {
        const int j = stripes::stripe_of_segment(n, k, q, d);
        RebuildPlan::Entry e;
        e.target = r, e.group = static_cast<std::uint32_t>(placement.group_of[r]), e.stripe = static_cast<std::uint32_t>(j);
        e.d = static_cast<std::uint32_t>(d);
        bool length_known = false;
        for (int dd = 0; dd < m && static_cast<int>(e.sources.size()) < m; ++dd) {
          const auto rr = static_cast<std::uint32_t>(g->ranks[static_cast<std::size_t>(stripes::data_position(n, k, j, dd))]);
          if (rr != r && holds_own(rr)) e.sources.push_back({rr, static_cast<std::uint32_t>(dd)});
        }
        for (int p = 0; p < k; ++p) {
          const auto h = static_cast<std::uint32_t>(g->ranks[static_cast<std::size_t>(stripes::parity_position(n, k, j, p))]);
          auto held = reports[h].parity.find(c.step);
          if (held == reports[h].parity.end() || excluded.count({h, c.step}) != 0) continue;
          const ParityStripe* s = covering(held->second, *g, j, p, c.shards);
          if (s == nullptr) continue;
          if (!length_known) e.file_length = s->members[static_cast<std::size_t>(d)].file_length, length_known = true;
          if (static_cast<int>(e.sources.size()) < m) e.sources.push_back({h, static_cast<std::uint32_t>(m + p)});
        }
        if (!length_known || static_cast<int>(e.sources.size()) < m)
          why = "rank " + std::to_string(r) + "'s shard: stripe " + std::to_string(j) + " of its parity group has " +
                std::to_string(e.sources.size()) + " of the " + std::to_string(m) + " segments a rebuild needs" +
                (length_known ? "" : " (no parity of it survives)");
        else
          entries.push_back(std::move(e));
      }
      if (!why.empty()) break;
    }
    if (!why.empty()) {
      plan.notes.push_back(about + "cannot be rebuilt from parity: " + why);
      continue;
    }
    plan.kind = 1, plan.step = c.step, plan.digest = c.digest, plan.shards = c.shards, plan.entries = std::move(entries);
    return plan;
  }
  return plan;
}

}  // namespace detail

CKPT_INLINE Result<Store*> TieredCheckpointer::parity_store() {
  if (parity_store_) return parity_store_.get();
  StoreOptions so;
  so.create_if_missing = true;
  so.chunk_size_log2 = options_.chunk_size_log2;
  so.reuse_files = true;  // parity writes over a retired step's pages (spec/TIERS.md 2.1)
  CKPT_ASSIGN_OR_RETURN(parity_store_, Store::open(fs_, memory_layout::parity_store(options_.memory_root, static_cast<std::uint32_t>(rank())),
                                                   Access::read_write, so));
  return parity_store_.get();
}

CKPT_INLINE Status TieredCheckpointer::encode_parity(std::uint64_t step, const Digest128& digest, const std::vector<Digest128>& shards,
                                                     const ParityWork* only, std::vector<TierRecord>& records, std::uint32_t& built,
                                                     Status& failure) {
  built = 0;
  const ParityGroup* g = parity_ ? parity_->group(rank()) : nullptr;
  if (g == nullptr) return Status();
  const auto me = static_cast<std::uint32_t>(rank());
  const int n = g->size(), k = g->losses, m = g->data(), q = parity_->position_of[me], gi = parity_->group_of[me];
  auto wanted = [&](int j, int p) { return only == nullptr || only->count({gi, j, p}) != 0; };
  CKPT_ASSIGN_OR_RETURN(const ErasureCode code, ErasureCode::create(n, k));
  // The parity this rank holds: parity p of stripe j = its position - p (spec/TIERS.md 12.2).
  std::vector<std::pair<int, int>> holds;  // (stripe, p)
  for (int j = 0; j < n; ++j)
    if (auto p = stripes::parity_index(n, k, j, q); p && wanted(j, *p)) holds.push_back({j, *p});

  // This rank's committed shard file of the step: the bytes its segments are.
  Status local;
  std::optional<StepReader> reader;
  detail::FileBytes file{fs_, {}, {}, 0, {}};
  if (auto info = own_->find(step); info.ok()) {
    auto opened = StepReader::open(fs_, own_->path(), *info, own_->uuid());
    if (opened.ok()) reader.emplace(std::move(*opened));
    else local = opened.status();
  } else {
    local = info.status().with_context("parity of step " + std::to_string(step));
  }
  if (reader) {
    ShardReader& s = reader->shard(0);
    file.file = s.file(), file.path = s.path(), file.length = s.file_size();
    const std::string_view mapped = own_->kept_mapping(s.path());
    if (mapped.size() >= file.length) file.mapped = mapped;  // the capture's own pages (spec/TIERS.md 4.2)
  }
  Store* store = nullptr;
  if (!holds.empty()) {
    auto opened = parity_store();
    if (!opened.ok()) return opened.status();
    store = *opened;
    // The parity writes over the oldest parity step's file (spec/TIERS.md 2.1).
    evict_held(*store, me, ring_steps() - 1, records);
  }
  const std::uint64_t room = detail::free_space(rank_dir_);
  std::map<int, std::vector<unsigned char>> parity;
  std::map<int, ParityStripe> stripes_built;
  const std::size_t block = options_.transfer_block;
  // Rounds (d, p): in each, every position sends its segment d to the holder of parity p of that segment's stripe,
  // a shift of the group, so every rank sends one message stream and receives one at once (spec/TIERS.md 12.3).
  struct Building {
    ParityStripe stripe;
    Status bad;
  };
  std::map<int, Building> building;  // stripe -> what its holder (this rank) has heard so far
  for (const auto& [j, p] : holds) building[j].stripe.stripe = static_cast<std::uint32_t>(j), building[j].stripe.parity = static_cast<std::uint32_t>(p);
  const Status exchanged = detail::exchange(
      [&]() -> Status {
        std::string scratch;
        const std::uint64_t segment = stripes::segment_length(file.length, n, k);
        for (int d = 0; d < m; ++d)
          for (int p = 0; p < k; ++p) {
            const int j = stripes::stripe_of_segment(n, k, q, d);
            if (!wanted(j, p)) continue;
            const int dest = g->ranks[static_cast<std::size_t>(stripes::parity_position(n, k, j, p))];
            Encoder h;
            wire::put_status(h, local);
            if (local.ok()) {
              h.u64(step), h.u32(static_cast<std::uint32_t>(j)), h.u32(static_cast<std::uint32_t>(d)), h.u64(file.length);
              wire::put_digest(h, shards[me]);
            }
            CKPT_TRY(comm_.send(detail::as_view(h), dest, detail::kParityTag));
            if (!local.ok()) continue;
            CKPT_TRY(detail::send_bytes(comm_, dest, detail::kParityTag, segment, block, scratch,
                                        [&](std::uint64_t off, std::size_t len, std::string& buffer) {
                                          return file.segment_view(segment, d, off, len, buffer);
                                        }));
          }
        return Status();
      },
      [&]() -> Status {
        std::string msg_buffer;  // one message buffer for every segment: its pages are faulted once
        std::uint64_t allocated = 0;
        for (int d = 0; d < m; ++d)
          for (int p = 0; p < k; ++p) {
            const int j = stripes::mod(q - p, n);  // the stripe whose parity p this rank holds
            if (!wanted(j, p)) continue;
            Building& b = building[j];
            std::vector<unsigned char>& out = parity[j];
            const int src = g->ranks[static_cast<std::size_t>(stripes::data_position(n, k, j, d))];
            const std::string from = "stripe " + std::to_string(j) + " of step " + std::to_string(step) + " from rank " + std::to_string(src);
            std::string msg;
            CKPT_TRY(comm_.recv(msg, src, detail::kParityTag));
            Decoder h = wire::decoder(msg);
            Status sender;
            if (!wire::get_status(h, sender)) return make_error(Code::corrupt, from + ": undecodable header");
            if (!sender.ok()) {
              if (b.bad.ok()) b.bad = make_error(Code::corrupt, from + ": the sender has no segment: " + sender.message());
              continue;
            }
            std::uint64_t got_step = 0, length = 0;
            std::uint32_t got_j = 0, got_d = 0;
            Digest128 offered;
            if (!h.u64(got_step) || !h.u32(got_j) || !h.u32(got_d) || !h.u64(length) || !wire::get_digest(h, offered))
              return make_error(Code::corrupt, from + ": truncated header");
            if (got_step != step || got_j != static_cast<std::uint32_t>(j) || got_d != static_cast<std::uint32_t>(d))
              return make_error(Code::corrupt, from + ": the sender offers step " + std::to_string(got_step) + " stripe " +
                                                   std::to_string(got_j) + " segment " + std::to_string(got_d) + ": the stream is out of step");
            const std::uint64_t segment = stripes::segment_length(length, n, k);
            if (b.bad.ok() && offered != shards[static_cast<std::size_t>(src)])
              b.bad = make_error(Code::corrupt, from + ": its shard digest " + offered.hex() + " is not the step's " +
                                                    shards[static_cast<std::size_t>(src)].hex());
            // The length is the sender's word: the parity grows only within the memory tier's free space.
            if (b.bad.ok() && segment > out.size() && (segment - out.size() > room || allocated + segment - out.size() > room))
              b.bad = make_error(Code::io, from + ": a segment of " + std::to_string(segment) + " bytes does not fit the " + std::to_string(room) +
                                               " bytes free in " + rank_dir_);
            if (b.bad.ok() && segment > out.size()) allocated += segment - out.size(), out.resize(static_cast<std::size_t>(segment), 0);
            const GfMultiplyAdd add(code.coefficient(p, d));
            const Status& bad = b.bad;
            CKPT_TRY(detail::receive_bytes(comm_, src, detail::kParityTag, segment, block, msg_buffer,
                                           [&](std::uint64_t off, const unsigned char* bytes, std::size_t len) {
                                             if (bad.ok()) add(bytes, len, out.data() + off);
                                           }));
            b.stripe.members.push_back(ParityStripe::Member{static_cast<std::uint32_t>(src), length, offered});
          }
        return Status();
      });
  for (auto& [j, b] : building) {
    if (!b.bad.ok() || b.stripe.members.size() != static_cast<std::size_t>(m)) {
      if (failure.ok()) failure = b.bad.ok() ? make_error(Code::corrupt, "stripe " + std::to_string(j) + ": members missing") : b.bad;
      parity.erase(j);
      continue;
    }
    b.stripe.length = parity[j].size();
    stripes_built[j] = std::move(b.stripe);
  }
  CKPT_TRY(exchanged);
  if (stripes_built.empty()) return Status();
  // One transaction of the parity store: the layout, then each stripe's parity segment (spec/TIERS.md 12.3).
  ParityLayout layout;
  layout.n = static_cast<std::uint32_t>(n), layout.k = static_cast<std::uint32_t>(k);
  for (int r : g->ranks) layout.ranks.push_back(static_cast<std::uint32_t>(r));
  for (auto& [j, s] : stripes_built) layout.stripes.push_back(s);
  const std::string layout_bytes = encode_parity_layout(layout);
  Status committed;
  // A step number is live once (spec/JOURNAL.md 10): parity a refill recomputes replaces the stale one (derived bytes of
  // a file that was rebuilt in other bytes, 12.4); any other copy of the number leaves into quarantine/.
  if (auto there = store->find(step); there.ok()) committed = only != nullptr ? store->retire(step) : store->set_aside(step);
  std::unique_ptr<Transaction> tx;
  if (committed.ok()) {
    auto begun = store->begin(step);
    if (begun.ok()) tx = std::move(*begun);
    else committed = begun.status();
  }
  auto put = [&](const std::string& name, const void* bytes, std::uint64_t size) -> Status {
    CKPT_TRY(tx->begin_piece(name, DType::U8, {size}, {0}, {size}));
    if (size > 0) CKPT_TRY(tx->write(bytes, static_cast<std::size_t>(size)));
    return tx->end_piece();
  };
  if (committed.ok()) {
    tx->state().step = step;
    tx->state().values[std::string(kPartialStepKey)] = Value(std::to_string(me) + "/" + std::to_string(world()));
    committed = put(std::string(kParityLayoutTensor), layout_bytes.data(), layout_bytes.size());
    for (const auto& [j, bytes] : parity)
      if (committed.ok()) committed = put(parity_tensor(static_cast<std::uint32_t>(j)), bytes.data(), bytes.size());
  }
  if (!committed.ok()) {
    if (tx) (void)tx->abort();
    if (failure.ok()) failure = committed.with_context("parity of step " + std::to_string(step));
    return Status();
  }
  auto result = tx->commit();
  if (!result.ok()) {
    if (failure.ok()) failure = result.status().with_context("parity of step " + std::to_string(step));
    return Status();
  }
  TierRecord rec;
  rec.event = TierEvent::parity, rec.step = step, rec.world = static_cast<std::uint32_t>(world()), rec.shard = me, rec.step_digest = digest;
  if (auto written = StepReader::open(fs_, store->path(), result->step, store->uuid()); written.ok()) rec.shard_digest = shard_digest(written->shard(0));
  rec.txn = result->step.txn, rec.detail = layout_bytes;
  records.push_back(rec);
  built = static_cast<std::uint32_t>(stripes_built.size());
  evict_held(*store, me, options_.memory_keep, records);
  return Status();
}

CKPT_INLINE Status TieredCheckpointer::commit_rebuilt(std::uint64_t step, const std::vector<unsigned char>& bytes, const Digest128& expected,
                                                      const Digest128& digest, std::vector<TierRecord>& records) {
  const auto me = static_cast<std::uint32_t>(rank());
  const std::string where = own_->path() + " step " + std::to_string(step) + " (rebuilt from parity)";
  CKPT_ASSIGN_OR_RETURN(const Index index, decode_shard_index(bytes.data(), bytes.size(), where));
  // The manifest's state is the one the capture wrote: its training state tensor, with the partial-step key (2.1, 2.3).
  TrainingState state;
  const std::string state_name = layout::state_tensor(me);
  for (const auto& p : index.pieces) {
    const TensorRecord& t = index.tensors[static_cast<std::size_t>(p.tensor)];
    if (t.name != state_name) continue;
    Decoder d(bytes.data() + p.data_offset, static_cast<std::size_t>(p.data_length));
    CKPT_TRY(decode_training_state(d, state, where + " state"));
  }
  if (own_->find(step).ok()) CKPT_TRY(own_->set_aside(step));  // a copy there that is not the claim's (spec/TIERS.md 7.3)
  CKPT_ASSIGN_OR_RETURN(auto tx, own_->begin(step));
  state.step = step;
  state.values[std::string(kPartialStepKey)] = Value(std::to_string(me) + "/" + std::to_string(world()));
  tx->state() = state;
  Status s;
  for (const auto& p : index.pieces) {
    const TensorRecord& t = index.tensors[static_cast<std::size_t>(p.tensor)];
    s = tx->begin_piece(t.name, t.dtype, t.shape, p.offsets, p.shape);
    if (s.ok() && p.data_length > 0) s = tx->write(bytes.data() + p.data_offset, static_cast<std::size_t>(p.data_length));
    if (s.ok()) s = tx->end_piece();
    if (!s.ok()) break;
    // Every chunk the writer hashed must be the rebuilt index's: the rebuilt bytes verified before they count.
    const auto& written = tx->shard_writer().last_piece_chunks();
    bool same = written.size() == p.chunk_count;
    for (std::size_t i = 0; same && i < written.size(); ++i)
      same = written[i].length == index.chunks[p.chunk_first + i].length && written[i].digest == index.chunks[p.chunk_first + i].digest;
    if (!same) {
      s = make_error(Code::corrupt, where + ": tensor '" + t.name + "': the rebuilt bytes do not match their chunk digests");
      break;
    }
  }
  if (!s.ok()) {
    (void)tx->abort();
    return s;
  }
  CKPT_ASSIGN_OR_RETURN(const CommitResult result, tx->commit());
  auto reader = StepReader::open(fs_, own_->path(), result.step, own_->uuid());
  Status verdict = reader.ok() ? Status() : reader.status();
  if (verdict.ok() && shard_digest(reader->shard(0)) != expected)
    verdict = make_error(Code::corrupt, where + ": shard digest " + shard_digest(reader->shard(0)).hex() + ", the step's claim is " + expected.hex());
  if (!verdict.ok()) {
    (void)own_->retire(step);
    return verdict;
  }
  TierRecord rec;
  rec.event = TierEvent::rebuilt, rec.step = step, rec.world = static_cast<std::uint32_t>(world()), rec.shard = me;
  rec.step_digest = digest, rec.shard_digest = expected, rec.txn = result.step.txn;
  records.push_back(rec);
  return Status();
}

CKPT_INLINE Status TieredCheckpointer::rebuild_from_parity() {
  const auto me = static_cast<std::uint32_t>(rank());
  const auto world_size = static_cast<std::uint32_t>(world());
  // 1. This rank's report: its log's claims and failures, its own copies, the parity it holds (spec/TIERS.md 12.4).
  detail::ParityReport mine;
  std::set<std::pair<std::string, std::uint64_t>> aside;
  for (const auto& r : records()) {
    if (r.event == TierEvent::captured) {
      auto shards = decode_shard_digests(r, rank_dir_);
      if (shards.ok()) mine.claims.push_back({r.step, r.step_digest, std::move(*shards)});
    } else if (r.event == TierEvent::load_failed || r.event == TierEvent::sdc) {
      mine.failed.insert({r.step, r.step_digest.high, r.step_digest.low});
    } else if (r.event == TierEvent::set_aside) {
      aside.insert({r.detail, r.txn});
    }
  }
  for (const StepInfo& info : own_->steps()) {
    if (aside.count({own_->path(), info.txn})) continue;
    auto reader = StepReader::open(fs_, own_->path(), info, own_->uuid());
    if (reader.ok()) mine.own[info.step] = {shard_digest(reader->shard(0)), reader->shard(0).file_size()};
  }
  CKPT_ASSIGN_OR_RETURN(Store* store, parity_store());
  for (const StepInfo& info : store->steps()) {
    if (aside.count({store->path(), info.txn})) continue;
    auto reader = StepReader::open(fs_, store->path(), info, store->uuid());
    if (!reader.ok()) continue;
    const TensorRecord* t = reader->find_tensor(kParityLayoutTensor);
    if (t == nullptr || t->shape.size() != 1 || t->shape[0] > journal::kMaxPayload) continue;
    std::string bytes(static_cast<std::size_t>(t->shape[0]), '\0');
    if (!reader->read_tensor(kParityLayoutTensor, bytes.empty() ? nullptr : &bytes[0], bytes.size()).ok()) continue;
    auto layout = decode_parity_layout(bytes, store->path());
    if (layout.ok()) mine.parity[info.step] = std::move(*layout);
  }
  CKPT_ASSIGN_OR_RETURN(auto gathered, comm_.gather(detail::encode_parity_report(mine), 0));
  std::vector<detail::ParityReport> reports;
  if (me == 0)
    for (std::uint32_t r = 0; r < world_size; ++r) {
      CKPT_ASSIGN_OR_RETURN(detail::ParityReport rep, detail::decode_parity_report(gathered[r], static_cast<int>(r)));
      reports.push_back(std::move(rep));
    }
  // 2. Rounds: rank 0 plans, every rank sends the segments asked of it while the targets decode; a copy that
  // fails is set aside and the round repeats without it.
  std::set<std::pair<std::uint32_t, std::uint64_t>> excluded;
  std::set<std::uint64_t> hopeless;
  for (int round = 0; round < 64; ++round) {
    std::string plan_bytes;
    if (me == 0) plan_bytes = detail::encode_rebuild_plan(detail::plan_rebuild(reports, *parity_, world_size, excluded, hopeless));
    CKPT_TRY(comm_.broadcast(plan_bytes, 0));
    CKPT_ASSIGN_OR_RETURN(const detail::RebuildPlan plan, detail::decode_rebuild_plan(plan_bytes));
    for (const auto& text : plan.notes) note(text);
    if (plan.kind != 1) return Status();
    const std::uint64_t step = plan.step;
    // The segments this rank gives.
    Status my_own_failed, my_parity_failed;
    std::optional<StepReader> own_step, parity_step;
    detail::FileBytes file{fs_, {}, {}, 0, {}};
    std::uint64_t my_segment = 0;
    const ParityGroup* g = parity_->group(static_cast<int>(me));
    std::vector<TierRecord> learned;
    auto open_own = [&]() -> Status {
      if (own_step) return Status();
      CKPT_ASSIGN_OR_RETURN(const StepInfo info, own_->find(step));
      CKPT_ASSIGN_OR_RETURN(StepReader r, StepReader::open(fs_, own_->path(), info, own_->uuid()));
      own_step.emplace(std::move(r));
      ShardReader& s = own_step->shard(0);
      file.file = s.file(), file.path = s.path(), file.length = s.file_size();
      my_segment = g ? stripes::segment_length(file.length, g->size(), g->losses) : 0;
      return Status();
    };
    std::map<std::uint32_t, std::string> parity_bytes;  // stripe -> its parity segment, verified as read
    auto parity_of = [&](std::uint32_t stripe) -> Result<const std::string*> {
      if (auto it = parity_bytes.find(stripe); it != parity_bytes.end()) return &it->second;
      if (!parity_step) {
        CKPT_ASSIGN_OR_RETURN(const StepInfo info, store->find(step));
        CKPT_ASSIGN_OR_RETURN(StepReader r, StepReader::open(fs_, store->path(), info, store->uuid()));
        parity_step.emplace(std::move(r));
      }
      const std::string name = parity_tensor(stripe);
      const TensorRecord* t = parity_step->find_tensor(name);
      if (t == nullptr || t->shape.size() != 1) return make_error(Code::not_found, store->path() + ": step " + std::to_string(step) + " has no " + name);
      std::string bytes(static_cast<std::size_t>(t->shape[0]), '\0');
      CKPT_TRY(parity_step->read_tensor(name, bytes.empty() ? nullptr : &bytes[0], bytes.size()));  // every chunk verified (12.4)
      return &(parity_bytes[stripe] = std::move(bytes));
    };
    // This rank's rebuilt shard, when it is a target.
    std::vector<unsigned char> rebuilt;
    Status my_rebuild;
    bool target = false;
    const std::size_t block = options_.transfer_block;
    const Status exchanged = detail::exchange(
        [&]() -> Status {
          std::string scratch;
          for (const auto& e : plan.entries) {
            const ParityGroup& eg = parity_->groups[e.group];
            const std::uint64_t length = stripes::segment_length(e.file_length, eg.size(), eg.losses);
            for (const auto& src : e.sources) {
              if (src.rank != me) continue;
              const bool data = src.row < static_cast<std::uint32_t>(eg.data());
              Status ready = data ? open_own() : Status();
              const std::string* par = nullptr;
              if (!data) {
                auto got = parity_of(e.stripe);
                if (got.ok()) par = *got;
                else ready = got.status();
              }
              if (!ready.ok()) (data ? my_own_failed : my_parity_failed) = ready;
              Encoder h;
              wire::put_status(h, ready);
              CKPT_TRY(comm_.send(detail::as_view(h), static_cast<int>(e.target), detail::kRebuildTag));
              if (!ready.ok()) continue;
              CKPT_TRY(detail::send_bytes(comm_, static_cast<int>(e.target), detail::kRebuildTag, length, block, scratch,
                                          [&](std::uint64_t off, std::size_t n, std::string& buffer) -> Result<std::string_view> {
                                            if (data) return file.segment_view(my_segment, static_cast<int>(src.row), off, n, buffer);
                                            if (off <= par->size() && n <= par->size() - off) return std::string_view(*par).substr(off, n);
                                            const std::size_t have = off >= par->size() ? 0 : par->size() - static_cast<std::size_t>(off);
                                            buffer.assign(n, '\0');
                                            if (have > 0) buffer.replace(0, have, *par, static_cast<std::size_t>(off), have);
                                            return std::string_view(buffer);
                                          }));
            }
          }
          return Status();
        },
        [&]() -> Status {
          std::string msg_buffer;
          for (const auto& e : plan.entries) {
            if (e.target != me) continue;
            const ParityGroup& eg = parity_->groups[e.group];
            const std::uint64_t length = stripes::segment_length(e.file_length, eg.size(), eg.losses);
            if (!target) {
              target = true;
              if (e.file_length > detail::free_space(rank_dir_))
                my_rebuild = make_error(Code::io, "a rebuilt shard of " + std::to_string(e.file_length) + " bytes does not fit " + rank_dir_);
              else
                rebuilt.assign(static_cast<std::size_t>(e.file_length), 0);
            }
            std::vector<int> rows;
            for (const auto& src : e.sources) rows.push_back(static_cast<int>(src.row));
            auto code = ErasureCode::create(eg.size(), eg.losses);
            auto coefficients = code.ok() ? code->decoder(rows, static_cast<int>(e.d)) : Result<std::vector<unsigned char>>(code.status());
            if (my_rebuild.ok() && !coefficients.ok()) my_rebuild = coefficients.status();
            std::vector<unsigned char> segment(my_rebuild.ok() ? static_cast<std::size_t>(length) : 0, 0);
            for (std::size_t i = 0; i < e.sources.size(); ++i) {
              std::string msg;
              CKPT_TRY(comm_.recv(msg, static_cast<int>(e.sources[i].rank), detail::kRebuildTag));
              Decoder h = wire::decoder(msg);
              Status sender;
              if (!wire::get_status(h, sender)) return make_error(Code::corrupt, "an undecodable rebuild header from rank " + std::to_string(e.sources[i].rank));
              if (!sender.ok()) {
                if (my_rebuild.ok())
                  my_rebuild = make_error(sender.code(), "stripe " + std::to_string(e.stripe) + ": rank " + std::to_string(e.sources[i].rank) +
                                                             "'s segment: " + sender.message());
                continue;
              }
              const GfMultiplyAdd add(my_rebuild.ok() ? (*coefficients)[i] : 0);
              CKPT_TRY(detail::receive_bytes(comm_, static_cast<int>(e.sources[i].rank), detail::kRebuildTag, length, block, msg_buffer,
                                             [&](std::uint64_t off, const unsigned char* bytes, std::size_t n) {
                                               if (my_rebuild.ok()) add(bytes, n, segment.data() + off);
                                             }));
            }
            if (!my_rebuild.ok()) continue;
            // Segment d of the file: its bytes up to the file's end (spec/TIERS.md 12.2).
            const std::uint64_t at = static_cast<std::uint64_t>(e.d) * length;
            if (at < e.file_length) std::memcpy(rebuilt.data() + at, segment.data(), static_cast<std::size_t>(std::min<std::uint64_t>(length, e.file_length - at)));
          }
          return Status();
        });
    CKPT_TRY(exchanged);
    if (target && my_rebuild.ok()) my_rebuild = commit_rebuilt(step, rebuilt, plan.shards[me], plan.digest, learned);
    // A parity copy that did not verify is set aside, never deleted (spec/TIERS.md 7.3).
    if (!my_parity_failed.ok() && my_parity_failed.code() != Code::not_found) {
      auto info = store->find(step);
      TierRecord r;
      r.event = TierEvent::set_aside, r.step = step, r.world = world_size, r.shard = me, r.step_digest = plan.digest;
      r.txn = info.ok() ? info->txn : 0, r.detail = store->path();
      learned.push_back(r);
      if (info.ok()) (void)store->set_aside(step);
      note("step " + std::to_string(step) + ": this rank's parity does not verify, set aside: " + my_parity_failed.message());
    }
    if (target && my_rebuild.ok()) note("step " + std::to_string(step) + ": this rank's shard was rebuilt from its parity group");
    if (!learned.empty()) CKPT_TRY(log(learned));
    // 3. Verdicts to rank 0: the round is done, or it repeats without the copies that failed.
    Encoder outcome;
    outcome.u8(my_own_failed.ok() ? 0 : 1), outcome.u8(my_parity_failed.ok() ? 0 : 1), outcome.u8(!target ? 0 : my_rebuild.ok() ? 1 : 2);
    wire::put_text(outcome, my_rebuild.ok() ? std::string() : my_rebuild.message());
    CKPT_ASSIGN_OR_RETURN(auto outcomes, comm_.gather(std::move(outcome.str()), 0));
    std::string verdict_bytes;
    if (me == 0) {
      bool all_ok = true, source_failed = false, rebuild_failed = false;
      for (std::uint32_t r = 0; r < world_size; ++r) {
        Decoder d = wire::decoder(outcomes[r]);
        std::uint8_t own_failed = 0, parity_failed = 0, rebuilt_state = 0;
        std::string why;
        if (!d.u8(own_failed) || !d.u8(parity_failed) || !d.u8(rebuilt_state) || !wire::get_text(d, why, journal::kMaxPayload))
          return make_error(Code::corrupt, "rank " + std::to_string(r) + "'s rebuild verdict is undecodable");
        if (own_failed || parity_failed) excluded.insert({r, step}), all_ok = false, source_failed = true;
        if (rebuilt_state == 2) all_ok = false, rebuild_failed = true;
      }
      // A rebuild that fails with every source good cannot succeed by repeating it: that step is left to the ladder.
      if (rebuild_failed && !source_failed) hopeless.insert(step);
      Encoder v;
      v.u8(all_ok ? 1 : 0);
      ParityWork refill;
      if (all_ok) {
        // The holders that lost parity of the step (a replacement node) get it again from the group's data; a group
        // with a rebuilt shard is encoded again whole, since its rebuilt file holds the same content in other bytes
        // (its own UUID and layout) than the file the parity was computed from (12.4).
        std::set<std::uint32_t> rebuilt_groups;
        for (const auto& e : plan.entries) rebuilt_groups.insert(e.group);
        for (std::size_t gi = 0; gi < parity_->groups.size(); ++gi) {
          const ParityGroup& eg = parity_->groups[gi];
          const bool whole = rebuilt_groups.count(static_cast<std::uint32_t>(gi)) != 0;
          for (int j = 0; j < eg.size(); ++j)
            for (int p = 0; p < eg.losses; ++p) {
              const auto h = static_cast<std::uint32_t>(eg.ranks[static_cast<std::size_t>(stripes::parity_position(eg.size(), eg.losses, j, p))]);
              auto held = reports[h].parity.find(step);
              const bool has = !whole && held != reports[h].parity.end() && excluded.count({h, step}) == 0 &&
                               detail::covering(held->second, eg, j, p, plan.shards) != nullptr;
              if (!has) refill.insert({static_cast<int>(gi), j, p});
            }
        }
      }
      v.u32(static_cast<std::uint32_t>(refill.size()));
      for (const auto& [gi, j, p] : refill) v.u32(static_cast<std::uint32_t>(gi)), v.u32(static_cast<std::uint32_t>(j)), v.u32(static_cast<std::uint32_t>(p));
      verdict_bytes = std::move(v.str());
    }
    CKPT_TRY(comm_.broadcast(verdict_bytes, 0));
    Decoder vd = wire::decoder(verdict_bytes);
    std::uint8_t done = 0;
    std::uint32_t count = 0;
    if (!vd.u8(done) || !vd.u32(count)) return make_error(Code::corrupt, "undecodable rebuild verdict");
    if (!done) continue;
    ParityWork refill;
    for (std::uint32_t i = 0; i < count; ++i) {
      std::uint32_t gi = 0, j = 0, p = 0;
      if (!vd.u32(gi) || !vd.u32(j) || !vd.u32(p)) return make_error(Code::corrupt, "undecodable rebuild verdict");
      refill.insert({static_cast<int>(gi), static_cast<int>(j), static_cast<int>(p)});
    }
    // The refill runs once the state is loaded, in the background (7.4): resume() does not wait for it.
    if (!refill.empty()) parity_refill_ = ParityRefill{step, plan.digest, plan.shards, std::move(refill)};
    return Status();
  }
  return make_error(Code::corrupt, "the rebuild from parity did not converge");
}

CKPT_INLINE Status TieredCheckpointer::refill_parity() {
  if (!parity_refill_) return Status();
  const ParityRefill r = std::move(*parity_refill_);
  parity_refill_.reset();
  phase("refilling", r.step);
  std::vector<TierRecord> refilled;
  std::uint32_t built = 0;
  Status failure;
  CKPT_TRY(encode_parity(r.step, r.digest, r.shards, &r.work, refilled, built, failure));
  if (!refilled.empty()) CKPT_TRY(log(refilled));
  if (!failure.ok()) note("step " + std::to_string(r.step) + ": refilling parity: " + failure.message());
  else if (built > 0) note("step " + std::to_string(r.step) + ": " + std::to_string(built) + " parity segments refilled on this rank");
  return Status();
}

}  // namespace ckpt::tiers
