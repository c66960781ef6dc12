// Tests for include/ckpt/dist/gloo_comm.hpp: ranks as threads of one process, bootstrapped through a
// ThreadComm and then talking over gloo's TCP transport on loopback; gloo's collectives in order, point-to-
// point messages in order per tag, and a rank that leaves or fails waking the others instead of a hang.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/dist/gloo_comm.hpp>
#include <ckpt/dist/thread_comm.hpp>

#include "thread_ranks.hpp"

using namespace ckpt;

namespace {

GlooCommOptions loopback() {
  GlooCommOptions o;
  o.hostname = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);  // a hang is a failure of the test, not a 1-hour wait
  return o;
}

// Runs body(rank, gloo comm) on `world` threads after connecting them through a ThreadComm.
std::vector<Status> run_gloo_ranks(int world, const std::function<Status(int, GlooComm&)>& body, GlooCommOptions o = loopback()) {
  return ckpt_test::run_ranks(world, [&](std::uint32_t rank, ThreadComm& bootstrap) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto comm, GlooComm::connect(bootstrap, o));
    return body(static_cast<int>(rank), *comm);
  });
}

void check_all_ok(const std::vector<Status>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].message());
    CHECK(results[r].ok());
  }
}

std::string pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + static_cast<std::size_t>(seed) * 17) & 0xff);
  return s;
}

}  // namespace

TEST_CASE("gloo ranks gather in rank order, receive broadcasts and pass barriers, round after round", "[gloo_comm]") {
  constexpr int kWorld = 4;
  check_all_ok(run_gloo_ranks(kWorld, [](int r, GlooComm& comm) -> Status {
    CommRef ref(comm);
    for (int round = 0; round < 50; ++round) {
      const int root = round % kWorld;
      // Parts of different sizes, one empty: gloo gathers equal sizes, the communicator pads and cuts.
      const std::string mine = r == 1 ? std::string() : std::to_string(round) + ":" + std::string(static_cast<std::size_t>(r * 7), 'x');
      CKPT_ASSIGN_OR_RETURN(auto all, ref.gather(mine, root));
      if (r == root) {
        if (all.size() != static_cast<std::size_t>(kWorld)) return make_error(Code::corrupt, "gather gave " + std::to_string(all.size()) + " parts");
        for (int k = 0; k < kWorld; ++k) {
          const std::string want = k == 1 ? std::string() : std::to_string(round) + ":" + std::string(static_cast<std::size_t>(k * 7), 'x');
          if (all[static_cast<std::size_t>(k)] != want) return make_error(Code::corrupt, "round " + std::to_string(round) + " part " + std::to_string(k));
        }
      } else if (!all.empty()) {
        return make_error(Code::corrupt, "a non-root rank got gather parts");
      }
      std::string b = r == root ? "from " + std::to_string(root) + " in " + std::to_string(round) : "stale and longer than the root's";
      CKPT_TRY(ref.broadcast(b, root));
      if (b != "from " + std::to_string(root) + " in " + std::to_string(round)) return make_error(Code::corrupt, "broadcast gave '" + b + "'");
      std::string empty = r == root ? std::string() : std::string("stale");
      CKPT_TRY(ref.broadcast(empty, root));
      if (!empty.empty()) return make_error(Code::corrupt, "an empty broadcast left bytes");
      CKPT_TRY(ref.barrier());
    }
    return Status();
  }));
}

TEST_CASE("gloo point-to-point messages arrive whole and in order per tag, both ways at once", "[gloo_comm]") {
  // Two ranks send to each other at once, messages of 0 bytes to several MiB on two tags from two sender
  // threads; each receives one tag's stream whole before the other's: tags are separate streams, and each
  // one's messages arrive in the order sent. A send may wait for its receiver (as MPI_Send may).
  const std::vector<std::size_t> sizes{0, 1, 7, 4096, 65537, std::size_t{3} << 20, 0, 12345};
  check_all_ok(run_gloo_ranks(2, [&](int r, GlooComm& comm) -> Status {
    const int peer = 1 - r;
    Status sent_bulk, sent_small;
    std::thread bulk([&] {
      for (std::size_t i = 0; i < sizes.size() && sent_bulk.ok(); ++i) sent_bulk = comm.send(pattern(sizes[i], r * 100 + static_cast<int>(i)), peer, 5);
    });
    std::thread small([&] {
      for (std::size_t i = 0; i < sizes.size() && sent_small.ok(); ++i) sent_small = comm.send(std::to_string(i), peer, kMaxP2pTag);
    });
    Status got;
    std::string msg = "not empty";
    for (std::size_t i = 0; i < sizes.size() && got.ok(); ++i) {
      got = comm.recv(msg, peer, kMaxP2pTag);  // the later tag's whole stream first
      if (got.ok() && msg != std::to_string(i)) got = make_error(Code::corrupt, "tag order: got '" + msg + "'");
    }
    for (std::size_t i = 0; i < sizes.size() && got.ok(); ++i) {
      got = comm.recv(msg, peer, 5);
      if (got.ok() && msg != pattern(sizes[i], peer * 100 + static_cast<int>(i)))
        got = make_error(Code::corrupt, "message " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " bytes differs (" + std::to_string(msg.size()) + " came)");
    }
    bulk.join(), small.join();
    return !sent_bulk.ok() ? sent_bulk : !sent_small.ok() ? sent_small : got;
  }));
}

TEST_CASE("gloo recv_into puts a message that fits straight at the destination, a longer one in the string", "[gloo_comm]") {
  // spec/TIERS.md 4.2: a replica's whole messages land in its slot without a copy of the receiver's.
  const std::vector<std::size_t> sizes{1, 65536, std::size_t{1} << 20, (std::size_t{1} << 20) + 1};
  check_all_ok(run_gloo_ranks(2, [&](int r, GlooComm& comm) -> Status {
    if (r == 0) {
      for (std::size_t i = 0; i < sizes.size(); ++i) CKPT_TRY(comm.send(pattern(sizes[i], static_cast<int>(i)), 1, 9));
      return Status();
    }
    std::vector<char> dst((std::size_t{1} << 20) + 16, '-');
    std::string bytes;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::fill(dst.begin(), dst.end(), '-');
      CKPT_ASSIGN_OR_RETURN(const Received got, comm.recv_into(dst.data(), std::size_t{1} << 20, bytes, 0, 9));
      const bool fits = sizes[i] <= (std::size_t{1} << 20);
      const std::string expected = pattern(sizes[i], static_cast<int>(i));
      if (got.in_place != fits || got.size != sizes[i]) return make_error(Code::corrupt, "message " + std::to_string(i) + ": wrong landing");
      if (fits && std::string(dst.data(), sizes[i]) != expected) return make_error(Code::corrupt, "message " + std::to_string(i) + " differs in place");
      if (!fits && (bytes != expected || dst[0] != '-')) return make_error(Code::corrupt, "message " + std::to_string(i) + " differs in the string");
    }
    return Status();
  }));
}

TEST_CASE("gloo refuses ranks and tags outside the world", "[gloo_comm]") {
  check_all_ok(run_gloo_ranks(2, [](int r, GlooComm& comm) -> Status {
    std::string out;
    struct Bad {
      const char* name;
      Status status;
    };
    const Bad bad[] = {
        {"send to itself", comm.send("x", r, 0)},
        {"send to a rank past the world", comm.send("x", 2, 0)},
        {"send with a negative tag", comm.send("x", 1 - r, -1)},
        {"send with a tag past kMaxP2pTag", comm.send("x", 1 - r, kMaxP2pTag + 1)},
        {"recv from a negative rank", comm.recv(out, -1, 0)},
        {"gather to a rank past the world", comm.gather("x", 3).status()},
        {"broadcast from a negative rank", comm.broadcast(out, -2)},
    };
    for (const auto& b : bad)
      if (b.status.code() != Code::invalid_argument) return make_error(Code::corrupt, std::string(b.name) + " gave: " + b.status.message());
    // None of them broke the communicator.
    return comm.barrier();
  }));
}

TEST_CASE("a gloo rank that leaves fails the others' waiting operations, and theirs fail the rest", "[gloo_comm]") {
  // Rank 2 leaves while rank 1 waits for its message and rank 0 waits in a broadcast from rank 1: rank 1's
  // recv fails, it breaks and closes its connections, so rank 0's broadcast fails too (no 20 s timeout).
  std::vector<Status> seen(3);
  const auto started = std::chrono::steady_clock::now();
  run_gloo_ranks(3, [&](int r, GlooComm& comm) -> Status {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.leave(make_error(Code::io, "disk gone"));
      seen[2] = comm.barrier();
      return Status();
    }
    if (r == 1) {
      std::string msg;
      seen[1] = comm.recv(msg, 2, 3);
      std::string b = "from 1";
      (void)comm.broadcast(b, 1);
      return Status();
    }
    std::string b;
    seen[0] = comm.broadcast(b, 1);
    return Status();
  });
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < std::chrono::seconds(15));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << seen[static_cast<std::size_t>(r)].message());
    CHECK(!seen[static_cast<std::size_t>(r)].ok());
  }
  CHECK(seen[2].message() == "this rank left the communicator: disk gone");
  CHECK(seen[1].message().find("recv from rank 2") != std::string::npos);
}

TEST_CASE("gloo refuses a message longer than max_message without allocating it", "[gloo_comm]") {
  GlooCommOptions o = loopback();
  o.max_message = 1000;
  std::vector<Status> seen(2);
  run_gloo_ranks(2, [&](int r, GlooComm& comm) -> Status {
    std::string msg;
    if (r == 0) seen[0] = comm.send(std::string(1001, 'x'), 1, 0);
    else seen[1] = comm.recv(msg, 0, 0);
    return Status();
  }, o);
  CHECK(seen[1].code() == Code::corrupt);
  CHECK(seen[1].message().find("a message of 1001 bytes, more than 1000") != std::string::npos);
}

TEST_CASE("a gloo communicator connects through any bootstrap, once, and then needs it no more", "[gloo_comm]") {
  // The bootstrap group breaks right after the connect: the gloo communicator goes on alone.
  ThreadGroup group(2);
  std::vector<Status> seen(2);
  std::atomic<int> connected{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ThreadComm bootstrap(group, r);
      auto comm = GlooComm::connect(bootstrap, loopback());
      ++connected;
      if (!comm.ok()) {
        seen[static_cast<std::size_t>(r)] = comm.status();
        return;
      }
      while (connected.load() < 2) std::this_thread::yield();  // both out of the bootstrap's collectives
      if (r == 0) bootstrap.leave(make_error(Code::io, "bootstrap done"));
      std::string b = r == 0 ? "over gloo" : "";
      seen[static_cast<std::size_t>(r)] = (*comm)->broadcast(b, 0);
      if (seen[static_cast<std::size_t>(r)].ok() && b != "over gloo") seen[static_cast<std::size_t>(r)] = make_error(Code::corrupt, b);
    });
  for (auto& t : threads) t.join();
  check_all_ok(seen);
}

TEST_CASE("gloo communicators connected in one exchange are independent, each usable from its own thread at once",
          "[gloo_comm]") {
  // connect_many (what the tiers connect from Python: background, skip agreement, promoter): 3 ranks, 3
  // communicators, one bootstrap round (counted: a fixed number of collectives, not one round per
  // communicator); then each communicator runs its own traffic on its own thread, all at the same time.
  constexpr int kWorld = 3;
  constexpr std::size_t kComms = 3;
  std::atomic<int> bootstrap_collectives{0};
  check_all_ok(ckpt_test::run_ranks(kWorld, [&](std::uint32_t rank, ThreadComm& bootstrap) -> Status {
    struct Counting {
      ThreadComm& inner;
      std::atomic<int>& n;
      int rank() const { return inner.rank(); }
      int size() const { return inner.size(); }
      Status barrier() { return ++n, inner.barrier(); }
      Result<std::vector<std::string>> gather(std::string b, int root) { return ++n, inner.gather(std::move(b), root); }
      Status broadcast(std::string& b, int root) { return ++n, inner.broadcast(b, root); }
      Status send(std::string_view b, int dest, int tag) { return inner.send(b, dest, tag); }
      Status recv(std::string& b, int source, int tag) { return inner.recv(b, source, tag); }
      void leave(const Status& why) { inner.leave(why); }
    } counting{bootstrap, bootstrap_collectives};
    CKPT_ASSIGN_OR_RETURN(auto comms, GlooComm::connect_many(counting, kComms, loopback()));
    if (comms.size() != kComms) return make_error(Code::corrupt, "wrong number of communicators");
    std::vector<Status> results(kComms);
    std::vector<std::thread> threads;
    for (std::size_t c = 0; c < kComms; ++c)
      threads.emplace_back([&, c] {
        GlooComm& comm = *comms[c];
        const int me = static_cast<int>(rank), next = (me + 1) % kWorld, prev = (me + kWorld - 1) % kWorld;
        for (int round = 0; round < 20 && results[c].ok(); ++round) {
          const std::string mine = pattern(1000 + c * 100 + static_cast<std::size_t>(round), me * 10 + static_cast<int>(c));
          std::string got;
          std::thread sender([&] { results[c] = comm.send(mine, next, 5); });
          Status r = comm.recv(got, prev, 5);
          sender.join();
          if (results[c].ok()) results[c] = r;
          if (results[c].ok() && got != pattern(1000 + c * 100 + static_cast<std::size_t>(round), prev * 10 + static_cast<int>(c)))
            results[c] = make_error(Code::corrupt, "communicator " + std::to_string(c) + " delivered another's bytes");
          std::string b = me == 0 ? "round " + std::to_string(round) + " on " + std::to_string(c) : "";
          if (results[c].ok()) results[c] = comm.broadcast(b, 0);
          if (results[c].ok() && b != "round " + std::to_string(round) + " on " + std::to_string(c))
            results[c] = make_error(Code::corrupt, "broadcast crossed communicators: " + b);
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& r : results) CKPT_TRY(r);
    return Status();
  }));
  // Per rank: agreement (gather + broadcast), gather, broadcast, agreement: 6, whatever kComms.
  CHECK(bootstrap_collectives.load() == 6 * kWorld);
}
