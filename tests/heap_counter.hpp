// Test helper: a counting global operator new, for tests that bound the heap a decoder needs (issue 9).
// Replacement allocation functions cannot be inline: include this in exactly one file of a test program.
#pragma once

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace ckpt_test {
inline std::atomic<std::int64_t> g_heap_now{0}, g_heap_peak{0};
inline void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const std::int64_t now = g_heap_now += static_cast<std::int64_t>(malloc_usable_size(p));
  for (std::int64_t peak = g_heap_peak; now > peak && !g_heap_peak.compare_exchange_weak(peak, now);) {}
  return p;
}
inline void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_heap_now -= static_cast<std::int64_t>(malloc_usable_size(p));
  std::free(p);
}
// Peak heap bytes above the level at construction, while it lives (one at a time).
struct HeapPeak {
  std::int64_t base = g_heap_now.load();
  HeapPeak() { g_heap_peak = base; }
  [[nodiscard]] std::int64_t bytes() const { return g_heap_peak.load() - base; }
};
}  // namespace ckpt_test

void* operator new(std::size_t n) { return ckpt_test::counted_alloc(n); }
void* operator new[](std::size_t n) { return ckpt_test::counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return ckpt_test::counted_alloc(n); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return ckpt_test::counted_alloc(n); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { ckpt_test::counted_free(p); }
void operator delete[](void* p) noexcept { ckpt_test::counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { ckpt_test::counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { ckpt_test::counted_free(p); }
