// ckpt: definitions of parity.hpp (spec/TIERS.md 12).
#pragma once

#include "../parity.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <map>

#include "../../core/coding.hpp"
#include "../../dist/wire.hpp"

#if CKPT_HAVE_ISAL
#include <isa-l/erasure_code.h>
#endif

namespace ckpt::tiers {

CKPT_INLINE const ParityGroup* ParityPlacement::group(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= group_of.size() || group_of[static_cast<std::size_t>(rank)] < 0) return nullptr;
  return &groups[static_cast<std::size_t>(group_of[static_cast<std::size_t>(rank)])];
}

CKPT_INLINE Result<ParityPlacement> place_parity(const Topology& topology, int group_nodes, int losses) {
  if (losses < 1 || group_nodes <= losses || group_nodes > 255)
    return make_error(Code::invalid_argument, "parity groups of " + std::to_string(group_nodes) + " nodes with " + std::to_string(losses) +
                                                  " losses: need 1 <= losses < group nodes <= 255");
  const int world = topology.size();
  ParityPlacement p;
  p.group_nodes = group_nodes, p.losses = losses;
  p.group_of.assign(static_cast<std::size_t>(world), -1);
  p.position_of.assign(static_cast<std::size_t>(world), -1);
  const std::vector<std::string> nodes = topology.nodes();
  std::map<std::string, std::vector<int>> ranks_of;  // ranks sorted within their node
  for (int r = 0; r < world; ++r) ranks_of[topology.node(r)].push_back(r);
  const int n_nodes = static_cast<int>(nodes.size());
  const int node_groups = std::max(1, n_nodes / group_nodes);
  if (n_nodes < group_nodes)
    p.notes.push_back(std::to_string(n_nodes) + " nodes: one parity group of " + std::to_string(n_nodes) + " nodes, not " +
                      std::to_string(group_nodes));
  for (int g = 0; g < node_groups; ++g) {
    const int first = g * group_nodes, last = g + 1 == node_groups ? n_nodes : first + group_nodes;  // the remainder joins the last
    std::size_t deepest = 0;
    for (int i = first; i < last; ++i) deepest = std::max(deepest, ranks_of[nodes[static_cast<std::size_t>(i)]].size());
    for (std::size_t position = 0; position < deepest; ++position) {
      ParityGroup group;
      group.losses = losses;
      for (int i = first; i < last; ++i) {
        const auto& on_node = ranks_of[nodes[static_cast<std::size_t>(i)]];
        if (position < on_node.size()) group.ranks.push_back(on_node[position]);
      }
      if (group.size() <= losses) {
        std::string who;
        for (int r : group.ranks) who += (who.empty() ? "" : ", ") + std::to_string(r);
        p.notes.push_back("ranks " + who + ": a group of " + std::to_string(group.size()) + " nodes cannot survive " + std::to_string(losses) +
                          " losses: no parity is kept for them");
        continue;
      }
      for (int q = 0; q < group.size(); ++q) {
        p.group_of[static_cast<std::size_t>(group.ranks[static_cast<std::size_t>(q)])] = static_cast<int>(p.groups.size());
        p.position_of[static_cast<std::size_t>(group.ranks[static_cast<std::size_t>(q)])] = q;
      }
      p.groups.push_back(std::move(group));
    }
  }
  return p;
}

namespace stripes {
[[nodiscard]] CKPT_INLINE int mod(int a, int n) { return ((a % n) + n) % n; }
CKPT_INLINE int parity_position(int n, int k, int stripe, int p) { (void)k; return mod(stripe + p, n); }
CKPT_INLINE int data_position(int n, int k, int stripe, int d) { return mod(stripe + k + d, n); }
CKPT_INLINE std::optional<int> data_index(int n, int k, int stripe, int position) {
  const int d = mod(position - stripe - k, n);
  return d < n - k ? std::optional<int>(d) : std::nullopt;
}
CKPT_INLINE std::optional<int> parity_index(int n, int k, int stripe, int position) {
  const int p = mod(position - stripe, n);
  return p < k ? std::optional<int>(p) : std::nullopt;
}
CKPT_INLINE int stripe_of_segment(int n, int k, int position, int d) { return mod(position - k - d, n); }
CKPT_INLINE std::uint64_t segment_length(std::uint64_t file_length, int n, int k) {
  const auto m = static_cast<std::uint64_t>(n - k);
  return file_length / m + (file_length % m != 0 ? 1 : 0);
}
}  // namespace stripes

CKPT_INLINE Result<ErasureCode> ErasureCode::create(int n, int k) {
#if CKPT_HAVE_ISAL
  if (k < 1 || n <= k || n > 255)
    return make_error(Code::invalid_argument, "an erasure code of " + std::to_string(n) + " segments with " + std::to_string(k) +
                                                  " parity: need 1 <= k < n <= 255");
  ErasureCode code;
  code.n_ = n, code.k_ = k;
  code.matrix_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(n - k));
  gf_gen_cauchy1_matrix(code.matrix_.data(), n, n - k);
  return code;
#else
  (void)n, (void)k;
  return make_error(Code::unsupported, "parity groups need ISA-L: this build has none (install libisal-dev and rebuild)");
#endif
}

CKPT_INLINE unsigned char ErasureCode::coefficient(int p, int d) const {
  return matrix_[static_cast<std::size_t>(m() + p) * static_cast<std::size_t>(m()) + static_cast<std::size_t>(d)];
}

CKPT_INLINE Result<std::vector<unsigned char>> ErasureCode::decoder(const std::vector<int>& from, int wanted) const {
#if CKPT_HAVE_ISAL
  const auto mm = static_cast<std::size_t>(m());
  if (from.size() != mm || wanted < 0 || wanted >= n_)
    return make_error(Code::invalid_argument, "a decoder needs " + std::to_string(mm) + " segments, not " + std::to_string(from.size()));
  std::vector<unsigned char> square(mm * mm), inverse(mm * mm);
  for (std::size_t i = 0; i < mm; ++i) {
    if (from[i] < 0 || from[i] >= n_ || std::count(from.begin(), from.end(), from[i]) != 1)
      return make_error(Code::invalid_argument, "a decoder's segments must be distinct rows of the code");
    std::copy_n(matrix_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(from[i]) * mm), mm, square.begin() + static_cast<std::ptrdiff_t>(i * mm));
  }
  if (gf_invert_matrix(square.data(), inverse.data(), static_cast<int>(mm)) != 0)
    return make_error(Code::invalid_argument, "the segments chosen do not determine the others (a singular matrix)");
  // Segment `wanted` = its generator row times the data, and the data = inverse times the chosen segments.
  std::vector<unsigned char> out(mm, 0);
  for (std::size_t i = 0; i < mm; ++i) {
    unsigned char c = 0;
    for (std::size_t d = 0; d < mm; ++d)
      c ^= gf_mul(matrix_[static_cast<std::size_t>(wanted) * mm + d], inverse[d * mm + i]);
    out[i] = c;
  }
  return out;
#else
  (void)from, (void)wanted;
  return make_error(Code::unsupported, "parity groups need ISA-L");
#endif
}

CKPT_INLINE void ErasureCode::encode(std::size_t length, const std::vector<const unsigned char*>& data,
                                     const std::vector<unsigned char*>& parity) const {
#if CKPT_HAVE_ISAL
  std::vector<unsigned char> tables(32 * static_cast<std::size_t>(m()) * static_cast<std::size_t>(k_));
  ec_init_tables(m(), k_, const_cast<unsigned char*>(matrix_.data()) + static_cast<std::size_t>(m()) * static_cast<std::size_t>(m()), tables.data());
  std::vector<unsigned char*> in, out(parity.begin(), parity.end());
  for (const unsigned char* d : data) in.push_back(const_cast<unsigned char*>(d));  // ISA-L reads its sources only
  for (std::size_t done = 0; done < length;) {
    const std::size_t n = std::min<std::size_t>(length - done, std::size_t{1} << 30);  // ISA-L takes an int length
    std::vector<unsigned char*> src(in), dst(out);
    for (auto& p : src) p += done;
    for (auto& p : dst) p += done;
    ec_encode_data(static_cast<int>(n), m(), k_, tables.data(), src.data(), dst.data());
    done += n;
  }
#else
  (void)length, (void)data, (void)parity;
#endif
}

CKPT_INLINE GfMultiplyAdd::GfMultiplyAdd(unsigned char coefficient) : coefficient_(coefficient) {
#if CKPT_HAVE_ISAL
  ec_init_tables(1, 1, &coefficient_, tables_);
#endif
}

CKPT_INLINE void GfMultiplyAdd::operator()(const unsigned char* src, std::size_t length, unsigned char* dst) const {
#if CKPT_HAVE_ISAL
  if (coefficient_ == 0) return;
  for (std::size_t done = 0; done < length;) {
    const std::size_t n = std::min<std::size_t>(length - done, std::size_t{1} << 30);
    unsigned char* out = dst + done;
    ec_encode_data_update(static_cast<int>(n), 1, 1, 0, const_cast<unsigned char*>(tables_), const_cast<unsigned char*>(src) + done, &out);
    done += n;
  }
#else
  (void)src, (void)length, (void)dst;
#endif
}

CKPT_INLINE std::string encode_parity_layout(const ParityLayout& layout) {
  Encoder e;
  e.u32(layout.n), e.u32(layout.k);
  for (std::uint32_t r : layout.ranks) e.u32(r);
  e.u32(static_cast<std::uint32_t>(layout.stripes.size()));
  for (const auto& s : layout.stripes) {
    e.u32(s.stripe), e.u32(s.parity), e.u64(s.length);
    e.u32(static_cast<std::uint32_t>(s.members.size()));
    for (const auto& m : s.members) e.u32(m.rank), e.u64(m.file_length), wire::put_digest(e, m.shard_digest);
  }
  return std::move(e.str());
}

CKPT_INLINE Result<ParityLayout> decode_parity_layout(std::string_view bytes, const std::string& where) {
  Decoder d(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  ParityLayout out;
  auto bad = [&](const std::string& what) {
    return make_error(Code::corrupt, where + ": parity layout at byte " + std::to_string(d.position()) + ": " + what);
  };
  if (!d.u32(out.n) || !d.u32(out.k)) return bad("truncated");
  if (out.k < 1 || out.n <= out.k || out.n > 255) return bad("n " + std::to_string(out.n) + ", k " + std::to_string(out.k) + " (need 1 <= k < n <= 255)");
  out.ranks.resize(out.n);
  for (auto& r : out.ranks)
    if (!d.u32(r)) return bad("truncated ranks");
  std::uint32_t count = 0;
  if (!d.u32(count)) return bad("truncated");
  if (count > out.n) return bad(std::to_string(count) + " stripes in a group of " + std::to_string(out.n));
  for (std::uint32_t i = 0; i < count; ++i) {
    ParityStripe s;
    std::uint32_t members = 0;
    if (!d.u32(s.stripe) || !d.u32(s.parity) || !d.u64(s.length) || !d.u32(members)) return bad("truncated stripe");
    if (s.stripe >= out.n || s.parity >= out.k || members != out.n - out.k)
      return bad("stripe " + std::to_string(s.stripe) + " parity " + std::to_string(s.parity) + " with " + std::to_string(members) +
                 " members (expected stripe < " + std::to_string(out.n) + ", parity < " + std::to_string(out.k) + ", " +
                 std::to_string(out.n - out.k) + " members)");
    s.members.resize(members);
    for (auto& m : s.members)
      if (!d.u32(m.rank) || !d.u64(m.file_length) || !wire::get_digest(d, m.shard_digest)) return bad("truncated member");
    out.stripes.push_back(std::move(s));
  }
  if (d.remaining() != 0) return bad(std::to_string(d.remaining()) + " bytes after the last stripe");
  return out;
}

CKPT_INLINE std::string parity_tensor(std::uint32_t stripe) { return "__ckpt_tiers__/parity/stripe-" + std::to_string(stripe); }

}  // namespace ckpt::tiers
