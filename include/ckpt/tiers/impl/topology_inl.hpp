// ckpt: definitions for tiers/topology.hpp (spec/TIERS.md 3).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

#include "../../core/coding.hpp"
#include "../topology.hpp"

namespace ckpt::tiers {

CKPT_INLINE std::string Topology::rack(int rank) const {
  const std::string& n = node(rank);
  auto it = rack_of_node.find(n);
  return it == rack_of_node.end() ? n : it->second;
}

CKPT_INLINE std::vector<std::string> Topology::nodes() const {
  std::set<std::string> names(node_of_rank.begin(), node_of_rank.end());
  return std::vector<std::string>(names.begin(), names.end());
}

CKPT_INLINE Result<Topology> topology_from_hostnames(CommRef comm) {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return make_error(Code::io, "gethostname failed");
  std::string mine(name);
  if (mine.empty()) mine = "localhost";
  auto all = comm.gather(mine, 0);
  if (!all.ok()) return all.status();
  Encoder out;
  if (comm.rank() == 0)
    for (const auto& h : *all) out.u32(static_cast<std::uint32_t>(h.size())), out.bytes(h);
  std::string bytes = std::move(out.str());
  CKPT_TRY(comm.broadcast(bytes, 0));
  Topology t;
  Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  for (int r = 0; r < comm.size(); ++r) {
    std::uint32_t n = 0;
    std::string h;
    if (!in.u32(n) || !in.str(n, h)) return make_error(Code::corrupt, "topology broadcast: truncated at rank " + std::to_string(r));
    t.node_of_rank.push_back(std::move(h));
  }
  return t;
}

CKPT_INLINE Result<Topology> parse_topology(std::string_view text, int world, const std::string& where) {
  if (world < 1) return make_error(Code::invalid_argument, where + ": world size " + std::to_string(world));
  Topology t;
  t.node_of_rank.assign(static_cast<std::size_t>(world), std::string());
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string rank_text, node, rack, extra;
    if (!(words >> rank_text)) continue;
    const std::string at = where + ":" + std::to_string(line_no) + ": ";
    if (!(words >> node)) return make_error(Code::invalid_argument, at + "expected \"RANK NODE [RACK]\", found \"" + line + "\"");
    words >> rack;
    if (words >> extra) return make_error(Code::invalid_argument, at + "unexpected \"" + extra + "\" after the rack");
    long r = -1;
    if (rank_text.find_first_not_of("0123456789") == std::string::npos && rank_text.size() <= 9) r = std::stol(rank_text);
    if (r < 0 || r >= world)
      return make_error(Code::invalid_argument, at + "rank \"" + rank_text + "\" is not in 0.." + std::to_string(world - 1));
    auto& slot = t.node_of_rank[static_cast<std::size_t>(r)];
    if (!slot.empty()) return make_error(Code::invalid_argument, at + "rank " + rank_text + " is named twice");
    slot = node;
    if (!rack.empty()) {
      auto [it, fresh] = t.rack_of_node.emplace(node, rack);
      if (!fresh && it->second != rack)
        return make_error(Code::invalid_argument, at + "node " + node + " is in rack " + it->second + ", not " + rack);
    }
  }
  for (int r = 0; r < world; ++r)
    if (t.node_of_rank[static_cast<std::size_t>(r)].empty())
      return make_error(Code::invalid_argument, where + ": rank " + std::to_string(r) + " has no node");
  if (!t.rack_of_node.empty())
    for (const auto& n : t.nodes())
      if (!t.rack_of_node.count(n)) return make_error(Code::invalid_argument, where + ": node " + n + " has no rack while others do");
  return t;
}

CKPT_INLINE std::string format_topology(const Topology& topology) {
  std::string out;
  for (int r = 0; r < topology.size(); ++r) {
    out += std::to_string(r) + " " + topology.node(r);
    auto it = topology.rack_of_node.find(topology.node(r));
    if (it != topology.rack_of_node.end()) out += " " + it->second;
    out += "\n";
  }
  return out;
}

CKPT_INLINE std::vector<int> Placement::held_by(int rank) const {
  std::vector<int> out;
  for (std::size_t s = 0; s < holders.size(); ++s)
    if (std::find(holders[s].begin(), holders[s].end(), rank) != holders[s].end()) out.push_back(static_cast<int>(s));
  return out;
}

CKPT_INLINE Result<Placement> place_replicas(const Topology& topology, int replicas) {
  if (replicas < 0) return make_error(Code::invalid_argument, "replicas must be >= 0, not " + std::to_string(replicas));
  const int world = topology.size();
  Placement p;
  p.replicas = replicas;
  p.holders.assign(static_cast<std::size_t>(world), {});
  const std::vector<std::string> nodes = topology.nodes();
  std::map<std::string, std::vector<int>> ranks_of;  // ranks sorted within their node
  for (int r = 0; r < world; ++r) ranks_of[topology.node(r)].push_back(r);
  const int n_nodes = static_cast<int>(nodes.size());
  int fewest = replicas;
  bool same_rack = false;
  for (int i = 0; i < n_nodes; ++i) {
    const auto& members = ranks_of[nodes[static_cast<std::size_t>(i)]];
    const std::string my_rack = topology.rack(members.front());
    // Around the ring from the next node: other racks first, then this rack's other nodes.
    std::vector<int> ring, later;
    for (int k = 1; k < n_nodes; ++k) {
      const int t = (i + k) % n_nodes;
      (topology.rack(ranks_of[nodes[static_cast<std::size_t>(t)]].front()) != my_rack ? ring : later).push_back(t);
    }
    const std::size_t other_racks = ring.size();
    ring.insert(ring.end(), later.begin(), later.end());
    const int copies = std::min<int>(replicas, static_cast<int>(ring.size()));
    fewest = std::min(fewest, copies);
    if (copies > static_cast<int>(other_racks) && !topology.rack_of_node.empty()) same_rack = true;
    for (std::size_t j = 0; j < members.size(); ++j)
      for (int c = 0; c < copies; ++c) {
        const auto& target = ranks_of[nodes[static_cast<std::size_t>(ring[static_cast<std::size_t>(c)])]];
        p.holders[static_cast<std::size_t>(members[j])].push_back(target[j % target.size()]);
      }
  }
  p.achievable = world == 0 ? 0 : fewest;
  if (replicas > 0 && n_nodes <= 1)
    p.notes.push_back("all " + std::to_string(world) + " ranks are on one node (" + (nodes.empty() ? std::string("?") : nodes[0]) +
                      "): no replica can be in another failure domain, so no replicas are kept");
  else if (p.achievable < replicas)
    p.notes.push_back(std::to_string(n_nodes) + " nodes give each shard at most " + std::to_string(n_nodes - 1) +
                      " copies on other nodes; " + std::to_string(replicas) + " were asked, " + std::to_string(p.achievable) +
                      " are kept");
  if (same_rack) p.notes.push_back("too few racks: some copies are on another node of the same rack");
  return p;
}

}  // namespace ckpt::tiers
