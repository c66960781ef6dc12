// Tests for include/ckpt/tiers/topology.hpp: replicas in other failure domains for any number of
// nodes, racks preferred when known, and the topology map's errors as a table.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include <ckpt/tiers/topology.hpp>

using namespace ckpt;
using namespace ckpt::tiers;

namespace {

Topology nodes_of(const std::vector<std::string>& nodes, std::map<std::string, std::string> racks = {}) {
  Topology t;
  t.node_of_rank = nodes;
  t.rack_of_node = std::move(racks);
  return t;
}

// Every copy on another node (and rack, when `racks`), never twice on one node, exactly `copies` each.
void check_domains(const Topology& t, const Placement& p, int copies, bool racks) {
  for (int r = 0; r < t.size(); ++r) {
    const auto& hs = p.holders[static_cast<std::size_t>(r)];
    CHECK(static_cast<int>(hs.size()) == copies);
    std::set<std::string> seen;
    for (int h : hs) {
      CHECK(t.node(h) != t.node(r));
      if (racks) CHECK(t.rack(h) != t.rack(r));
      CHECK(seen.insert(t.node(h)).second);
    }
  }
}

}  // namespace

TEST_CASE("one replica per shard goes to the next node around the ring", "[topology]") {
  const Topology t = nodes_of({"n0", "n1", "n2", "n3"});
  auto p = place_replicas(t, 1);
  REQUIRE(p.ok());
  CHECK(p->achievable == 1);
  CHECK(p->notes.empty());
  CHECK(p->holders == std::vector<std::vector<int>>{{1}, {2}, {3}, {0}});
  CHECK(p->held_by(0) == std::vector<int>{3});
  check_domains(t, *p, 1, false);
}

TEST_CASE("placement works for node counts that are not multiples of replicas + 1", "[topology]") {
  for (int n : {2, 3, 5, 7}) {
    std::vector<std::string> nodes;
    for (int i = 0; i < n; ++i) nodes.push_back("node" + std::to_string(i));
    const Topology t = nodes_of(nodes);
    for (int r = 1; r < n; ++r) {
      auto p = place_replicas(t, r);
      REQUIRE(p.ok());
      CHECK(p->achievable == r);
      check_domains(t, *p, r, false);
    }
  }
}

TEST_CASE("several ranks per node, uneven nodes: never a copy on the source's node", "[topology]") {
  const Topology t = nodes_of({"a", "a", "b", "c", "c", "c"});
  auto p = place_replicas(t, 2);
  REQUIRE(p.ok());
  CHECK(p->achievable == 2);
  check_domains(t, *p, 2, false);
}

TEST_CASE("a topology that cannot give the copies says so and keeps what it can", "[topology]") {
  auto one = place_replicas(nodes_of({"solo", "solo", "solo"}), 1);
  REQUIRE(one.ok());
  CHECK(one->achievable == 0);
  REQUIRE(one->notes.size() == 1);
  CHECK_THAT(one->notes[0], Catch::Contains("one node") && Catch::Contains("no replicas"));
  auto few = place_replicas(nodes_of({"x", "y", "z"}), 3);
  REQUIRE(few.ok());
  CHECK(few->achievable == 2);
  CHECK_THAT(few->notes.at(0), Catch::Contains("3 nodes") && Catch::Contains("3 were asked, 2 are kept"));
  CHECK(place_replicas(nodes_of({"x"}), -1).status().code() == Code::invalid_argument);
}

TEST_CASE("with racks, copies go to other racks first", "[topology]") {
  const Topology t = nodes_of({"n0", "n1", "n2", "n3"}, {{"n0", "r0"}, {"n1", "r0"}, {"n2", "r1"}, {"n3", "r1"}});
  auto p = place_replicas(t, 1);
  REQUIRE(p.ok());
  CHECK(p->notes.empty());
  check_domains(t, *p, 1, true);
  auto two = place_replicas(t, 3);
  REQUIRE(two.ok());
  CHECK(two->achievable == 3);
  bool noted = false;
  for (const auto& n : two->notes) noted = noted || n.find("same rack") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("a topology map is read and written back", "[topology]") {
  auto t = parse_topology("# rank node rack\n0 alpha r1\n1 alpha r1\n2 beta r2   # comment\n\n3 gamma r2\n", 4, "map");
  REQUIRE(t.ok());
  CHECK(t->node(2) == "beta");
  CHECK(t->rack(3) == "r2");
  CHECK(t->nodes() == std::vector<std::string>{"alpha", "beta", "gamma"});
  auto again = parse_topology(format_topology(*t), 4, "again");
  REQUIRE(again.ok());
  CHECK(again->node_of_rank == t->node_of_rank);
  CHECK(again->rack_of_node == t->rack_of_node);
}

TEST_CASE("bad topology maps are refused naming the line", "[topology]") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"0 a\n1 b\n", "rank 2 has no node"},
      {"0 a\n0 b\n1 c\n2 d\n", "map:2: rank 0 is named twice"},
      {"0 a\n1 b\n2 c\n9 d\n", "map:4: rank \"9\" is not in 0..2"},
      {"0 a\n1 b\nx c\n", "map:3: rank \"x\""},
      {"0\n1 b\n2 c\n", "map:1: expected \"RANK NODE [RACK]\""},
      {"0 a r1\n1 a r2\n2 c r1\n", "node a is in rack r1, not r2"},
      {"0 a r1\n1 b\n2 c r1\n", "node b has no rack while others do"},
      {"0 a r1 extra\n1 b\n2 c\n", "unexpected \"extra\""},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto t = parse_topology(c.text, 3, "map");
    CHECK(t.status().code() == Code::invalid_argument);
    CHECK_THAT(t.status().message(), Catch::Contains(c.message));
  }
}
