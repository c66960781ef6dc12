// Tests for include/ckpt/dist/comm.hpp: the single-process communicator and the type-erased reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include <ckpt/dist/comm.hpp>

using namespace ckpt;

namespace {
// A two-rank communicator as seen from rank 1, to prove CommRef forwards to the real object.
struct FakeRank1 {
  int barriers = 0;
  int rank() const { return 1; }
  int size() const { return 2; }
  Status barrier() { ++barriers; return Status(); }
  Result<std::vector<std::string>> gather(std::string bytes, int root) {
    last = std::move(bytes);
    (void)root;
    return std::vector<std::string>{};
  }
  Status broadcast(std::string& bytes, int root) {
    bytes = "from root " + std::to_string(root);
    return Status();
  }
  std::string last;
};
}  // namespace

TEST_CASE("a local communicator is one rank that gathers and broadcasts to itself", "[comm]") {
  LocalComm comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.barrier().ok());
  auto all = comm.gather("abc", 0);
  REQUIRE(all.ok());
  CHECK(*all == std::vector<std::string>{"abc"});
  std::string b = "x";
  CHECK(comm.broadcast(b, 0).ok());
  CHECK(b == "x");
  CHECK(comm.gather("abc", 1).status().code() == Code::invalid_argument);
  CHECK(comm.broadcast(b, 2).code() == Code::invalid_argument);
}

TEST_CASE("a comm reference forwards to the communicator and copies as a reference", "[comm]") {
  FakeRank1 fake;
  CommRef ref(fake);
  CommRef copy = ref;  // must copy the reference, not wrap it
  CHECK(copy.rank() == 1);
  CHECK(copy.size() == 2);
  CHECK(copy.barrier().ok());
  CHECK(fake.barriers == 1);
  auto g = copy.gather("mine", 0);
  REQUIRE(g.ok());
  CHECK(g->empty());
  CHECK(fake.last == "mine");
  std::string b;
  CHECK(ref.broadcast(b, 0).ok());
  CHECK(b == "from root 0");
}

namespace {
// A point-to-point communicator without recv_into of its own: its next message is always `next`.
struct P2pOnly {
  std::string next;
  int rank() const { return 0; }
  int size() const { return 2; }
  Status barrier() { return Status(); }
  Result<std::vector<std::string>> gather(std::string, int) { return std::vector<std::string>{}; }
  Status broadcast(std::string&, int) { return Status(); }
  Status send(std::string_view, int, int) { return Status(); }
  Status recv(std::string& bytes, int, int) {
    bytes = next;
    return Status();
  }
};
}  // namespace

TEST_CASE("recv_into through a reference: a message that fits lands at the destination, a longer one in the string",
          "[comm]") {
  // spec/TIERS.md 4.2: a transport without recv_into of its own still serves, through recv and one copy.
  P2pOnly p2p;
  CommRef ref(p2p);
  char dst[8] = {'-', '-', '-', '-', '-', '-', '-', '-'};
  std::string bytes;
  struct Row {
    const char* name;
    std::string message;
    std::size_t capacity;
    bool in_place;
  };
  const std::vector<Row> rows = {{"shorter than the room", "abc", 8, true},
                                 {"exactly the room", "abcdefgh", 8, true},
                                 {"one byte over the room", "abcdefghi", 8, false},
                                 {"no room at all", "a", 0, false}};
  for (const Row& row : rows) {
    INFO(row.name);
    std::fill(std::begin(dst), std::end(dst), '-');
    p2p.next = row.message;
    auto got = ref.recv_into(dst, row.capacity, bytes, 1, 0);
    REQUIRE(got.ok());
    CHECK(got->in_place == row.in_place);
    CHECK(got->size == row.message.size());
    if (row.in_place) CHECK(std::string(dst, row.message.size()) == row.message);
    else CHECK(bytes == row.message);
    if (!row.in_place) CHECK(std::string(dst, 8) == "--------");  // a message that does not fit never touches dst
  }
  LocalComm local;  // no point-to-point at all
  CHECK(CommRef(local).recv_into(dst, 8, bytes, 0, 0).status().code() == Code::unsupported);
}
