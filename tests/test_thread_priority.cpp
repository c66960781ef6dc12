// Tests for include/ckpt/io/thread_priority.hpp: a thread's nice value is raised, never lowered, and only
// the calling thread's (Linux keeps nice per thread).
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <ckpt/io/thread_priority.hpp>

namespace {
int nice_of_this_thread() {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}
}  // namespace

TEST_CASE("a thread's priority is lowered to the nice value asked, never raised, and its siblings keep theirs", "[thread_priority]") {
  const int caller = nice_of_this_thread();
  struct Row {
    const char* name;
    int first, then;  // asked in turn on one new thread
    int expected;
  };
  const Row rows[] = {{"0 leaves it", 0, 0, caller},
                      {"10 lowers it", 10, 0, caller > 10 ? caller : 10},
                      {"a later 5 does not raise it back", 10, 5, caller > 10 ? caller : 10},
                      {"above 19 is 19", 25, 0, 19}};
  for (const Row& row : rows) {
    INFO(row.name);
    int seen = -100;
    bool lowered = false;
    std::thread t([&] {
      lowered = ckpt::lower_this_thread_priority(row.first);
      (void)ckpt::lower_this_thread_priority(row.then);
      seen = nice_of_this_thread();
    });
    t.join();
    CHECK(seen == row.expected);
    CHECK(lowered == (row.first > 0));
    CHECK(nice_of_this_thread() == caller);  // only the calling thread's
  }
}
