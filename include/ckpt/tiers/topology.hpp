// ckpt: failure domains and where a shard's replicas go (spec/TIERS.md 3). A rank lives on a node, a
// node in a rack (optional). A replica must be in another failure domain than its source: another node
// always, another rack when racks are known and enough of them exist. Placement is a pure function of
// the topology and the replica count, so every rank computes the same answer without talking.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../dist/comm.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace ckpt::tiers {

struct Topology {
  std::vector<std::string> node_of_rank;            // rank -> node name (non-empty)
  std::map<std::string, std::string> rack_of_node;  // node -> rack; empty: racks unknown
  [[nodiscard]] int size() const noexcept { return static_cast<int>(node_of_rank.size()); }
  [[nodiscard]] const std::string& node(int rank) const { return node_of_rank.at(static_cast<std::size_t>(rank)); }
  // The rack of a rank's node; its node name when racks are unknown (each node its own rack).
  [[nodiscard]] std::string rack(int rank) const;
  // Node names, sorted, each once.
  [[nodiscard]] std::vector<std::string> nodes() const;
};

// Every rank's hostname, gathered and broadcast (collective over comm).
[[nodiscard]] Result<Topology> topology_from_hostnames(CommRef comm);
// An explicit map, one rank per line: "RANK NODE [RACK]"; '#' starts a comment. Every rank of
// 0..world-1 must appear once; a node named twice must name the same rack. `where` names the input.
[[nodiscard]] Result<Topology> parse_topology(std::string_view text, int world, const std::string& where);
// The same map written back (what parse_topology reads).
[[nodiscard]] std::string format_topology(const Topology& topology);

struct Placement {
  int replicas = 0;                        // asked for
  int achievable = 0;                      // the fewest copies in other domains any shard gets
  std::vector<std::vector<int>> holders;   // holders[r]: ranks that keep replicas of rank r's shard
  std::vector<std::string> notes;          // what the topology could not give, said plainly
  // Ranks whose shards `rank` keeps, in source order.
  [[nodiscard]] std::vector<int> held_by(int rank) const;
};

// Nodes in a ring (sorted by name): a rank's copies go to the next nodes around the ring, those in
// other racks first, to the rank at the same position there (modulo that node's ranks), so any number
// of nodes works and the load spreads. Fewer domains than replicas: fewer copies, with a note.
[[nodiscard]] Result<Placement> place_replicas(const Topology& topology, int replicas);

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/topology_inl.hpp"
#endif
