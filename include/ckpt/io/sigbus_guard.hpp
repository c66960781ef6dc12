// ckpt: reading a memory-mapped file that may shrink underneath. A file truncated by another process
// while it is mapped turns every access past its new end into SIGBUS, which by default kills the
// reader (ckpt-verify --mmap died this way, issue 5). run_catching_sigbus(fn) runs fn with this thread
// armed: a SIGBUS raised by fn's accesses makes it return false (and the faulting address) instead.
//
// Rules for fn: it must only read mapped memory and plain locals. A fault leaves fn with siglongjmp,
// so nothing in fn may allocate, lock, or own an object whose destructor has to run.
//
// The handler is installed once per process and chains: a SIGBUS this thread did not arm for goes to
// the handler that was installed before (a sanitizer's, say) or, where there was none, is re-raised
// with the default action, so a real bus error still kills the process with a core dump.
#pragma once

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>

#include <cstdint>
#include <mutex>

namespace ckpt {

namespace detail {

struct SigbusArm {
  sigjmp_buf env;
  volatile sig_atomic_t armed = 0;
  const void* volatile fault_address = nullptr;
};

// Constant-initialised, so the handler reads it without any lazy TLS initialisation.
inline thread_local SigbusArm sigbus_arm;

inline struct sigaction& sigbus_previous_action() {
  static struct sigaction previous {};
  return previous;
}

inline void sigbus_handler(int sig, siginfo_t* info, void* context) {
  SigbusArm& arm = sigbus_arm;
  if (arm.armed != 0) {
    arm.armed = 0;
    arm.fault_address = info != nullptr ? info->si_addr : nullptr;
    siglongjmp(arm.env, 1);
  }
  // Not ours: the handler that was there before, or the default action (death with a core dump).
  const struct sigaction& previous = sigbus_previous_action();
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(sig);
    return;
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(SIGBUS, &fallback, nullptr);
  ::raise(SIGBUS);  // pending until this handler returns; a hardware fault also recurs on return
}

inline void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = &sigbus_handler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &sigbus_previous_action());
  });
}

}  // namespace detail

// Runs fn() with SIGBUS caught for this thread. Returns true when fn finished; false when one of its
// accesses raised SIGBUS, with the faulting address in *fault_address (nullptr when unknown).
template <class F>
[[nodiscard]] bool run_catching_sigbus(F&& fn, const void** fault_address = nullptr) {
  detail::install_sigbus_handler();
  detail::SigbusArm& arm = detail::sigbus_arm;
  // savemask 0: no sigprocmask call on the fast path; after a fault SIGBUS is unblocked below instead.
  if (sigsetjmp(arm.env, 0) != 0) {
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);  // the handler was left by siglongjmp with SIGBUS blocked
    if (fault_address != nullptr) *fault_address = arm.fault_address;
    return false;
  }
  arm.fault_address = nullptr;
  arm.armed = 1;
  fn();
  arm.armed = 0;
  return true;
}

}  // namespace ckpt
