// ckpt: background threads yield to the training thread: a checkpoint's hashing, replication and promotion
// run at a lower scheduling priority, so on a host whose cores are all busy they take what training leaves
// (spec/ASYNC.md 1, "Background priority").
#pragma once

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cerrno>

namespace ckpt {

// The calling thread's nice value raised to at least `nice` (0..19; lower values leave it as it is, so a
// thread is never given a higher priority than it has). Linux sets nice per thread, and threads this one
// starts inherit it. Returns whether the thread now runs at `nice` or lower priority; elsewhere false.
[[nodiscard]] inline bool lower_this_thread_priority(int nice) noexcept {
#if defined(__linux__)
  if (nice <= 0) return false;
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return false;
  if (now >= nice) return true;
  return ::setpriority(PRIO_PROCESS, tid, nice > 19 ? 19 : nice) == 0;
#else
  (void)nice;
  return false;
#endif
}

}  // namespace ckpt
