// ckpt: a load's destination faulted in before the copy. A restarted process loads into memory it has just
// allocated (an optimizer's new state tensors); copying into it takes a page fault per 4 KiB page inside the
// copy, and in a fresh process that cost as much as the copy itself. One madvise(MADV_POPULATE_WRITE) for the
// whole destination allocates the same pages without a fault each (spec/TIERS.md 7.2, docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace ckpt {

// Destinations smaller than this are copied as they are: one call would save at most a few faults.
inline constexpr std::size_t kPrefaultMin = std::size_t{1} << 20;

// Faults in the whole pages of [p, p + n) for writing where the first of them is not in memory yet (memory
// already in use is left alone: populating present pages costs a page-table walk, about a third of a copy).
// Never changes a byte; does nothing where the kernel (Linux >= 5.14) or the memory does not allow it.
inline void prefault_for_write(void* p, std::size_t n) noexcept {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // <linux/mman.h>, Linux 5.14; older kernels say EINVAL: ignored
#endif
  if (n < kPrefaultMin) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
  if (end <= begin) return;
  unsigned char resident = 0;
  if (::mincore(reinterpret_cast<void*>(begin), static_cast<std::size_t>(page), &resident) != 0 || (resident & 1) != 0) return;
  (void)::madvise(reinterpret_cast<void*>(begin), static_cast<std::size_t>(end - begin), MADV_POPULATE_WRITE);
#else
  (void)p, (void)n;
#endif
}

}  // namespace ckpt
