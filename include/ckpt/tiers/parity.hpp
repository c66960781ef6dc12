// ckpt: parity groups of the memory tier (spec/TIERS.md 12). Instead of a whole replica per shard, the
// ranks of a group of n nodes keep Reed-Solomon parity of each other's shard files: any k of the n may be
// lost and their shards are rebuilt from the survivors, for k/(n-k) of a shard per rank instead of one
// shard per replica. The arithmetic is ISA-L's (libisal-dev): its Cauchy generator matrix, its GF(2^8)
// tables and its vector code; nothing here multiplies in GF(2^8) by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../identity/identity.hpp"
#include "topology.hpp"

namespace ckpt::tiers {

// One parity group: ranks on `size()` different nodes; any `losses` of them may be lost together.
struct ParityGroup {
  std::vector<int> ranks;  // position q in the group -> rank
  int losses = 0;          // k: parity segments per stripe
  [[nodiscard]] int size() const noexcept { return static_cast<int>(ranks.size()); }
  [[nodiscard]] int data() const noexcept { return size() - losses; }  // m = n - k: data segments per stripe
};

struct ParityPlacement {
  int group_nodes = 0, losses = 0;  // asked for
  std::vector<ParityGroup> groups;
  std::vector<int> group_of;     // rank -> index into groups; -1: the rank is in no group (no parity)
  std::vector<int> position_of;  // rank -> its position in its group
  std::vector<std::string> notes;  // what the topology could not give, said plainly
  [[nodiscard]] const ParityGroup* group(int rank) const;
};

// Nodes sorted by name, cut into groups of `group_nodes` consecutive nodes (the remainder joins the last
// group); within a group of nodes, the ranks at the same position on each node form a parity group. A
// group of k or fewer ranks keeps no parity (a note says so). spec/TIERS.md 12.1.
[[nodiscard]] Result<ParityPlacement> place_parity(const Topology& topology, int group_nodes, int losses);

// The stripes of a group of n with k parity segments each (spec/TIERS.md 12.2). There are n stripes; in
// stripe j the parity segment p (0 <= p < k) is held at position (j + p) mod n and the data segment d
// (0 <= d < n - k) comes from position (j + k + d) mod n, whose segment d it is: no position holds data and
// parity of one stripe, and every position gives each of its n - k segments to one stripe.
namespace stripes {
[[nodiscard]] int parity_position(int n, int k, int stripe, int p);
[[nodiscard]] int data_position(int n, int k, int stripe, int d);
[[nodiscard]] std::optional<int> data_index(int n, int k, int stripe, int position);    // d, when the position gives data
[[nodiscard]] std::optional<int> parity_index(int n, int k, int stripe, int position);  // p, when it holds parity
[[nodiscard]] int stripe_of_segment(int n, int k, int position, int d);                 // where segment d of a position goes
// A shard file of `file_length` bytes is cut into n - k segments of this length (the last one zero-padded).
[[nodiscard]] std::uint64_t segment_length(std::uint64_t file_length, int n, int k);
}  // namespace stripes

// Reed-Solomon over GF(2^8) for m = n - k data segments and k parity segments: ISA-L's Cauchy matrix
// (gf_gen_cauchy1_matrix(a, n, m)): rows 0..m-1 the identity, row m + p the coefficients of parity p.
// Any m of the n segments give back the others (a Cauchy matrix's square submatrices are invertible).
class ErasureCode {
 public:
  // Code::unsupported in a build without ISA-L (CKPT_HAVE_ISAL); invalid_argument unless 1 <= k < n <= 255.
  [[nodiscard]] static Result<ErasureCode> create(int n, int k);
  [[nodiscard]] int n() const noexcept { return n_; }
  [[nodiscard]] int k() const noexcept { return k_; }
  [[nodiscard]] int m() const noexcept { return n_ - k_; }
  // The coefficient of data segment d in parity p.
  [[nodiscard]] unsigned char coefficient(int p, int d) const;
  // The coefficients giving segment `wanted` (a code row: d < m data, m + p parity) from the m segments `from`
  // (code rows, distinct), in from's order; Code::invalid_argument when they cannot.
  [[nodiscard]] Result<std::vector<unsigned char>> decoder(const std::vector<int>& from, int wanted) const;
  // All k parity segments of m data segments of `length` bytes at once (the benchmark's encode).
  void encode(std::size_t length, const std::vector<const unsigned char*>& data, const std::vector<unsigned char*>& parity) const;

 private:
  int n_ = 0, k_ = 0;
  std::vector<unsigned char> matrix_;  // n x m, row major
};

// dst ^= coefficient * src over `length` bytes, in GF(2^8) (ISA-L's vector code): a parity segment built up one
// received window at a time, and a lost segment decoded the same way.
class GfMultiplyAdd {
 public:
  explicit GfMultiplyAdd(unsigned char coefficient);
  void operator()(const unsigned char* src, std::size_t length, unsigned char* dst) const;

 private:
  unsigned char coefficient_ = 0;
  unsigned char tables_[32] = {};
};

// What a rank's parity of one step covers (spec/TIERS.md 12.3): the parity segments of the stripes it holds,
// and for each stripe every data member's rank, shard file length and shard digest. The U8 tensor
// `__ckpt_tiers__/parity/layout` of the parity shard and the PARITY record's detail carry this encoding.
struct ParityStripe {
  std::uint32_t stripe = 0;         // j
  std::uint32_t parity = 0;         // p: which parity segment of the stripe this is
  std::uint64_t length = 0;         // bytes of the parity segment: the longest member segment
  struct Member {
    std::uint32_t rank = 0;
    std::uint64_t file_length = 0;  // of the member's shard file
    Digest128 shard_digest;
  };
  std::vector<Member> members;      // data index d -> its member
};
struct ParityLayout {
  std::uint32_t n = 0, k = 0;
  std::vector<std::uint32_t> ranks;  // position -> rank
  std::vector<ParityStripe> stripes;
};
[[nodiscard]] std::string encode_parity_layout(const ParityLayout& layout);
[[nodiscard]] Result<ParityLayout> decode_parity_layout(std::string_view bytes, const std::string& where);
// Tensor names of a parity shard.
inline constexpr std::string_view kParityLayoutTensor = "__ckpt_tiers__/parity/layout";
[[nodiscard]] std::string parity_tensor(std::uint32_t stripe);  // "__ckpt_tiers__/parity/stripe-<j>"

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/parity_inl.hpp"
#endif
