// Tests for include/ckpt/tiers/parity.hpp: parity groups over any number of nodes, the stripe geometry of
// spec/TIERS.md 12.2 (no node holds data and parity of one stripe), ISA-L's Reed-Solomon code giving back
// every pattern of up to k lost segments bit for bit, and the parity layout's encoding with its damage as a table.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ckpt/tiers/parity.hpp>

#include "test_util.hpp"

using namespace ckpt;
using namespace ckpt::tiers;

namespace {

Topology nodes_of(const std::vector<std::string>& nodes) {
  Topology t;
  t.node_of_rank = nodes;
  return t;
}

}  // namespace

TEST_CASE("parity groups take one rank per node from groups of consecutive nodes", "[parity]") {
  // 8 nodes of 2 ranks, groups of 4 nodes: 4 parity groups, each on 4 different nodes.
  std::vector<std::string> nodes;
  for (int i = 0; i < 16; ++i) nodes.push_back("n" + std::to_string(i / 2));
  const Topology t = nodes_of(nodes);
  auto p = place_parity(t, 4, 1);
  REQUIRE(p.ok());
  CHECK(p->groups.size() == 4);
  for (const auto& g : p->groups) {
    CHECK(g.size() == 4);
    std::set<std::string> on;
    for (int r : g.ranks) on.insert(t.node(r));
    CHECK(on.size() == 4);
  }
  for (int r = 0; r < 16; ++r) {
    REQUIRE(p->group(r) != nullptr);
    CHECK(p->group(r)->ranks[static_cast<std::size_t>(p->position_of[static_cast<std::size_t>(r)])] == r);
  }
  CHECK(p->notes.empty());
}

TEST_CASE("a remainder of nodes joins the last parity group; too small a group keeps no parity, said plainly", "[parity]") {
  auto six = place_parity(nodes_of({"a", "b", "c", "d", "e", "f"}), 4, 1);
  REQUIRE(six.ok());
  REQUIRE(six->groups.size() == 1);
  CHECK(six->groups[0].size() == 6);
  auto two = place_parity(nodes_of({"a", "b"}), 4, 2);  // a group of 2 cannot survive 2 losses
  REQUIRE(two.ok());
  CHECK(two->groups.empty());
  CHECK(two->group(0) == nullptr);
  REQUIRE(two->notes.size() == 2);
  CHECK(two->notes[1].find("no parity is kept") != std::string::npos);
  CHECK(place_parity(nodes_of({"a", "b"}), 2, 2).status().code() == Code::invalid_argument);
  CHECK(place_parity(nodes_of({"a", "b"}), 4, 0).status().code() == Code::invalid_argument);
}

TEST_CASE("in every stripe no position gives data and holds parity, and each position gives each segment once", "[parity]") {
  for (int n = 2; n <= 9; ++n)
    for (int k = 1; k < n; ++k) {
      INFO("n " << n << " k " << k);
      std::vector<int> parity_held(static_cast<std::size_t>(n), 0);
      std::vector<std::set<int>> segments(static_cast<std::size_t>(n));
      for (int j = 0; j < n; ++j) {
        std::set<int> positions;
        for (int p = 0; p < k; ++p) {
          const int q = stripes::parity_position(n, k, j, p);
          CHECK(stripes::parity_index(n, k, j, q) == p);
          CHECK_FALSE(stripes::data_index(n, k, j, q).has_value());
          positions.insert(q);
          ++parity_held[static_cast<std::size_t>(q)];
        }
        for (int d = 0; d < n - k; ++d) {
          const int q = stripes::data_position(n, k, j, d);
          CHECK(stripes::data_index(n, k, j, q) == d);
          CHECK(stripes::stripe_of_segment(n, k, q, d) == j);
          positions.insert(q);
          segments[static_cast<std::size_t>(q)].insert(d);
        }
        CHECK(positions.size() == static_cast<std::size_t>(n));  // n distinct positions: data and parity apart
      }
      for (int q = 0; q < n; ++q) {
        CHECK(parity_held[static_cast<std::size_t>(q)] == k);
        CHECK(segments[static_cast<std::size_t>(q)].size() == static_cast<std::size_t>(n - k));
      }
    }
  CHECK(stripes::segment_length(0, 4, 1) == 0);
  CHECK(stripes::segment_length(10, 4, 1) == 4);
  CHECK(stripes::segment_length(12, 4, 1) == 4);
  CHECK(stripes::segment_length(13, 6, 2) == 4);
}

TEST_CASE("every pattern of up to k lost segments is decoded bit for bit from the others", "[parity]") {
  std::mt19937_64 rng(7);
  for (auto [n, k] : std::vector<std::pair<int, int>>{{4, 1}, {4, 2}, {6, 1}, {6, 2}, {8, 2}, {8, 3}}) {
    INFO("n " << n << " k " << k);
    auto code = ErasureCode::create(n, k);
    REQUIRE(code.ok());
    const int m = n - k;
    const std::size_t len = 4096 + 37;  // not a multiple of any vector width
    std::vector<std::vector<unsigned char>> seg(static_cast<std::size_t>(n), std::vector<unsigned char>(len, 0));
    for (int d = 0; d < m; ++d)
      for (auto& b : seg[static_cast<std::size_t>(d)]) b = static_cast<unsigned char>(rng());
    // Parity two ways: all at once, and one source window at a time (as a holder builds it from messages).
    std::vector<const unsigned char*> data;
    std::vector<unsigned char*> parity;
    for (int d = 0; d < m; ++d) data.push_back(seg[static_cast<std::size_t>(d)].data());
    for (int p = 0; p < k; ++p) parity.push_back(seg[static_cast<std::size_t>(m + p)].data());
    code->encode(len, data, parity);
    for (int p = 0; p < k; ++p) {
      std::vector<unsigned char> built(len, 0);
      for (int d = 0; d < m; ++d) {
        const GfMultiplyAdd add(code->coefficient(p, d));
        for (std::size_t off = 0; off < len; off += 1000) add(data[static_cast<std::size_t>(d)] + off, std::min<std::size_t>(1000, len - off), built.data() + off);
      }
      CHECK(built == seg[static_cast<std::size_t>(m + p)]);
    }
    for (int lost = 1; lost <= k; ++lost)
      for (const auto& gone : ckpt_test::subsets_of(n, lost, lost)) {
        std::vector<int> from;
        for (int i = 0; i < n && static_cast<int>(from.size()) < m; ++i)
          if (std::find(gone.begin(), gone.end(), i) == gone.end()) from.push_back(i);
        for (int w : gone) {
          auto coeffs = code->decoder(from, w);
          REQUIRE(coeffs.ok());
          std::vector<unsigned char> out(len, 0);
          for (std::size_t i = 0; i < from.size(); ++i) {
            const GfMultiplyAdd add{(*coeffs)[i]};
            add(seg[static_cast<std::size_t>(from[i])].data(), len, out.data());
          }
          CHECK(out == seg[static_cast<std::size_t>(w)]);
        }
      }
  }
}

TEST_CASE("a decoder refuses what cannot decode", "[parity]") {
  auto code = ErasureCode::create(4, 2);
  REQUIRE(code.ok());
  CHECK(code->decoder({0}, 1).status().code() == Code::invalid_argument);     // too few
  CHECK(code->decoder({0, 0}, 1).status().code() == Code::invalid_argument);  // not distinct
  CHECK(code->decoder({0, 9}, 1).status().code() == Code::invalid_argument);  // no such row
  CHECK(ErasureCode::create(4, 4).status().code() == Code::invalid_argument);
  CHECK(ErasureCode::create(256, 2).status().code() == Code::invalid_argument);
}

TEST_CASE("a parity layout round-trips, and damaged encodings are refused naming the byte", "[parity]") {
  ParityLayout l;
  l.n = 4, l.k = 1, l.ranks = {0, 1, 2, 3};
  ParityStripe s;
  s.stripe = 2, s.parity = 0, s.length = 100;
  for (std::uint32_t r : {3u, 0u, 1u}) s.members.push_back(ParityStripe::Member{r, 300 + r, Digest128{r, r + 1}});
  l.stripes.push_back(s);
  const std::string bytes = encode_parity_layout(l);
  auto back = decode_parity_layout(bytes, "x");
  REQUIRE(back.ok());
  CHECK(encode_parity_layout(*back) == bytes);
  CHECK(back->stripes[0].members[2].file_length == 301);

  struct Damage {
    const char* what;
    std::function<std::string(std::string)> make;
    const char* says;
  };
  const std::vector<Damage> table{
      {"truncated", [](std::string b) { return b.substr(0, b.size() - 1); }, "truncated"},
      {"trailing bytes", [](std::string b) { return b + "z"; }, "after the last stripe"},
      {"k = 0", [](std::string b) { return b.replace(4, 1, 1, static_cast<char>(0)); }, "need 1 <= k < n"},
      {"k = n", [](std::string b) { return b.replace(4, 1, 1, static_cast<char>(4)); }, "need 1 <= k < n"},
      {"stripe past n", [](std::string b) { return b.replace(28, 1, 1, static_cast<char>(9)); }, "stripe 9"},
      {"wrong member count", [](std::string b) { return b.replace(44, 1, 1, static_cast<char>(2)); }, "2 members"},
  };
  for (const auto& d : table) {
    INFO(d.what);
    auto r = decode_parity_layout(d.make(bytes), "rank-1/parity");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::corrupt);
    CHECK_THAT(r.status().message(), Catch::Contains("rank-1/parity") && Catch::Contains(d.says));
  }
}
