// Tests for include/ckpt/dist/comm.hpp: the single-process communicator and the type-erased reference.
#include <catch2/catch.hpp>

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
