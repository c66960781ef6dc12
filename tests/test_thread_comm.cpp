// Tests for include/ckpt/dist/thread_comm.hpp: ranks as threads, collectives in order, and a rank that
// leaves waking the others with an error instead of a hang.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include <ckpt/dist/comm.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include "thread_ranks.hpp"

using namespace ckpt;

TEST_CASE("thread ranks gather in rank order and receive broadcasts, round after round", "[thread_comm]") {
  constexpr int kWorld = 4;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  ckpt_test::run_ranks(kWorld, [&](std::uint32_t rank, ThreadComm& comm) {
    const int r = static_cast<int>(rank);
    CommRef ref(comm);  // through the type-erased reference, as the store uses it
    for (int round = 0; round < kRounds; ++round) {
      const int root = round % kWorld;
      auto all = ref.gather(std::to_string(round) + ":" + std::to_string(r), root);
      if (!all.ok()) ++failures;
      else if (r == root) {
        for (int k = 0; k < kWorld; ++k)
          if ((*all)[static_cast<std::size_t>(k)] != std::to_string(round) + ":" + std::to_string(k)) ++failures;
      } else if (!all->empty()) {
        ++failures;
      }
      std::string b = r == root ? "from " + std::to_string(root) + " in " + std::to_string(round) : "stale";
      if (!ref.broadcast(b, root).ok() || b != "from " + std::to_string(root) + " in " + std::to_string(round)) ++failures;
      if (!ref.barrier().ok()) ++failures;
    }
    return Status();
  });
  CHECK(failures == 0);
}

TEST_CASE("a rank that leaves fails the collectives of the others", "[thread_comm]") {
  ThreadGroup group(3);
  std::vector<Status> seen(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      if (r == 2) {
        comm.leave(make_error(Code::io, "disk gone"));
        return;
      }
      seen[static_cast<std::size_t>(r)] = comm.gather("x", 0).status();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    CHECK(seen[static_cast<std::size_t>(r)].code() == Code::io);
    CHECK(seen[static_cast<std::size_t>(r)].message() == "rank 2 left the thread group: disk gone");
  }
  ThreadComm late(group, 0);
  CHECK(late.barrier().code() == Code::io);  // and every later one
}

TEST_CASE("thread collectives refuse roots outside the group", "[thread_comm]") {
  ThreadGroup group(1);
  ThreadComm comm(group, 0);
  CHECK(comm.size() == 1);
  CHECK(comm.gather("a", 1).status().code() == Code::invalid_argument);
  std::string b;
  CHECK(comm.broadcast(b, -1).code() == Code::invalid_argument);
  auto one = comm.gather("a", 0);
  REQUIRE(one.ok());
  CHECK(*one == std::vector<std::string>{"a"});
}

TEST_CASE("thread ranks send point to point in order per source and tag, both ways at once", "[thread_comm]") {
  constexpr int kWorld = 3;
  std::atomic<int> failures{0};
  ckpt_test::run_ranks(kWorld, [&](std::uint32_t rank, ThreadComm& comm) {
    const int r = static_cast<int>(rank);
    CommRef ref(comm);
    const int next = (r + 1) % kWorld, prev = (r + kWorld - 1) % kWorld;
    for (int i = 0; i < 50; ++i)
      if (!ref.send(std::to_string(r) + ":" + std::to_string(i), next, 7).ok()) ++failures;
    if (!ref.send("other tag", next, 8).ok()) ++failures;
    std::string got;
    if (!ref.recv(got, prev, 8).ok() || got != "other tag") ++failures;
    for (int i = 0; i < 50; ++i)
      if (!ref.recv(got, prev, 7).ok() || got != std::to_string(prev) + ":" + std::to_string(i)) ++failures;
    return Status();
  });
  CHECK(failures == 0);
}

TEST_CASE("a receive waiting on a rank that leaves fails instead of hanging", "[thread_comm]") {
  ThreadGroup group(2);
  Status received;
  std::thread waiter([&] {
    ThreadComm comm(group, 0);
    std::string bytes;
    received = comm.recv(bytes, 1, 3);
  });
  ThreadComm leaver(group, 1);
  leaver.leave(make_error(Code::io, "device lost"));
  waiter.join();
  CHECK(received.code() == Code::io);
  CHECK_THAT(received.message(), Catch::Contains("device lost"));
  std::string bytes;
  CHECK(leaver.send("late", 0, 3).code() == Code::io);
  CHECK(leaver.recv(bytes, 0, kMaxP2pTag + 1).code() == Code::invalid_argument);
}

TEST_CASE("a communicator without point-to-point transfer says so", "[thread_comm]") {
  LocalComm local;
  CommRef ref(local);
  std::string bytes;
  CHECK(ref.send("x", 0, 1).code() == Code::unsupported);
  CHECK(ref.recv(bytes, 0, 1).code() == Code::unsupported);
}
