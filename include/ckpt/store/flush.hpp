// ckpt: deadline-bounded flush requests for power loss and preemption (spec/ASYNC.md 5).
//
// A UPS daemon's hook (NUT's SHUTDOWNCMD, apcupsd's onbattery script), a scheduler's SIGTERM before a
// preemption, or SIGPWR asks the process to stop within its hold-up time. request_flush() is
// async-signal-safe: it reads CLOCK_MONOTONIC and stores into lock-free atomics, nothing else, so it
// may run inside a signal handler. AsyncSaver polls the request and finishes or cleanly abandons the
// save in flight before the deadline; the training loop polls flush_requested() and exits.
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <optional>
#include <string>

#include "../core/error.hpp"

namespace ckpt {

namespace flush_detail {
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "signal handlers may only touch lock-free atomics");
// CLOCK_MONOTONIC nanoseconds of the requested deadline; 0 when no flush is requested.
inline std::atomic<std::int64_t> deadline_ns{0};
inline std::atomic<int> signal_number{0};      // the signal that asked, 0 for a call
inline std::atomic<std::int64_t> hold_up_ns{0};  // what install_flush_handler armed the handler with
}  // namespace flush_detail

// CLOCK_MONOTONIC in nanoseconds; async-signal-safe (clock_gettime is on POSIX's list).
[[nodiscard]] inline std::int64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
// A CLOCK_MONOTONIC instant as a steady_clock time point (the two clocks are not assumed to agree).
[[nodiscard]] inline std::chrono::steady_clock::time_point monotonic_to_steady(std::int64_t ns) noexcept {
  return std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns - monotonic_ns());
}

// Asks for a flush that must be over `hold_up` from now. Async-signal-safe. A second request keeps the
// earlier deadline: the hold-up time only shrinks.
inline void request_flush(std::chrono::nanoseconds hold_up, int signal = 0) noexcept {
  const std::int64_t deadline = monotonic_ns() + static_cast<std::int64_t>(hold_up.count());
  std::int64_t current = flush_detail::deadline_ns.load();
  while ((current == 0 || deadline < current) && !flush_detail::deadline_ns.compare_exchange_weak(current, deadline)) {
  }
  int none = 0;
  flush_detail::signal_number.compare_exchange_strong(none, signal);
}

// The deadline of the pending request, if any (steady_clock).
[[nodiscard]] inline std::optional<std::chrono::steady_clock::time_point> flush_requested() noexcept {
  const std::int64_t d = flush_detail::deadline_ns.load();
  if (d == 0) return std::nullopt;
  return monotonic_to_steady(d);
}
// The signal that requested the flush (0: a call, or none).
[[nodiscard]] inline int flush_signal() noexcept { return flush_detail::signal_number.load(); }
// Forgets the request (tests, or a process that survived a false alarm).
inline void clear_flush_request() noexcept {
  flush_detail::deadline_ns.store(0);
  flush_detail::signal_number.store(0);
}

namespace flush_detail {
inline void on_signal(int sig) {
  const int saved = errno;  // a handler must leave errno as it found it
  request_flush(std::chrono::nanoseconds(hold_up_ns.load()), sig);
  errno = saved;
}
}  // namespace flush_detail

// Installs a handler that turns each of `signals` (e.g. SIGTERM, SIGPWR, SIGUSR1) into a flush request
// with `hold_up` of time. The handler only calls request_flush().
[[nodiscard]] inline Status install_flush_handler(std::initializer_list<int> signals, std::chrono::nanoseconds hold_up) {
  if (hold_up.count() <= 0) return make_error(Code::invalid_argument, "flush hold-up time must be positive");
  flush_detail::hold_up_ns.store(static_cast<std::int64_t>(hold_up.count()));
  for (const int sig : signals) {
    struct sigaction action {};
    action.sa_handler = &flush_detail::on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // interrupted reads and writes resume; the saver polls the request
    if (::sigaction(sig, &action, nullptr) != 0)
      return make_error(Code::io, "sigaction(" + std::to_string(sig) + "): " + std::strerror(errno));
  }
  return Status();
}

}  // namespace ckpt
