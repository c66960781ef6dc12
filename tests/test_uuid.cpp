// Tests for include/ckpt/core/uuid.hpp: version 4 layout, and fresh identifiers in a forked child (a child
// used to repeat its parent's sequence, so two processes could give two files one uuid).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/core/uuid.hpp>

using namespace ckpt;

namespace {

// Forks; the child draws n uuids and writes them to a pipe; returns them, empty on failure.
[[nodiscard]] std::vector<Uuid> child_uuids(std::size_t n) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid < 0) return {};
  if (pid == 0) {
    ::close(fds[0]);
    for (std::size_t i = 0; i < n; ++i) {
      const Uuid u = random_uuid();
      if (::write(fds[1], u.data(), u.size()) != static_cast<ssize_t>(u.size())) ::_exit(1);
    }
    ::_exit(0);  // no atexit handlers, no Catch2 teardown in the child
  }
  ::close(fds[1]);
  std::vector<Uuid> out(n);
  std::size_t got = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  while (got < n * sizeof(Uuid)) {
    const ssize_t r = ::read(fds[0], bytes + got, n * sizeof(Uuid) - got);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != n * sizeof(Uuid) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return out;
}

}  // namespace

TEST_CASE("a uuid has the version 4 and variant bits", "[uuid]") {
  for (int i = 0; i < 100; ++i) {
    const Uuid u = random_uuid();
    CHECK((u[6] & 0xF0) == 0x40);
    CHECK((u[8] & 0xC0) == 0x80);
  }
}

TEST_CASE("a forked child draws uuids its parent does not", "[uuid]") {
  constexpr std::size_t n = 8;
  (void)random_uuid();  // the engine exists before the fork, so the child inherits its state
  const std::vector<Uuid> child = child_uuids(n);
  REQUIRE(child.size() == n);
  std::vector<Uuid> parent;
  for (std::size_t i = 0; i < n; ++i) parent.push_back(random_uuid());
  const std::vector<Uuid> second_child = child_uuids(n);
  REQUIRE(second_child.size() == n);
  std::set<Uuid> all(parent.begin(), parent.end());
  all.insert(child.begin(), child.end());
  all.insert(second_child.begin(), second_child.end());
  CHECK(all.size() == 3 * n);
}

TEST_CASE("a child forked from another thread also draws fresh uuids", "[uuid]") {
  constexpr std::size_t n = 4;
  std::vector<Uuid> parent, child;
  std::thread worker([&] {
    (void)random_uuid();  // this thread's engine exists before the fork
    child = child_uuids(n);
    for (std::size_t i = 0; i < n; ++i) parent.push_back(random_uuid());
  });
  worker.join();
  REQUIRE(child.size() == n);
  std::set<Uuid> all(parent.begin(), parent.end());
  all.insert(child.begin(), child.end());
  CHECK(all.size() == 2 * n);
}
