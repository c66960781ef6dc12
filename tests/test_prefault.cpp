// Tests for include/ckpt/io/prefault.hpp: a fresh destination is faulted in by one call and never changed; memory
// in use, small ranges, read-only and unmapped memory are left alone without an error.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include <ckpt/io/prefault.hpp>

namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

// How many of the pages of [p, p + n) are in memory.
std::size_t resident_pages(void* p, std::size_t n) {
  std::vector<unsigned char> v((n + kPage - 1) / kPage);
  REQUIRE(::mincore(p, n, v.data()) == 0);
  std::size_t k = 0;
  for (unsigned char b : v) k += b & 1;
  return k;
}

struct Region {
  explicit Region(std::size_t n, int prot = PROT_READ | PROT_WRITE) : size(n) {
    p = static_cast<unsigned char*>(::mmap(nullptr, n, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
  }
  ~Region() { ::munmap(p, size); }
  unsigned char* p;
  std::size_t size;
};

// Whether this kernel populates on request (Linux 5.14): where it does not, the function does nothing by design.
bool kernel_populates() {
  Region r(kPage);
  return ::madvise(r.p, kPage, 23 /* MADV_POPULATE_WRITE */) == 0;
}

}  // namespace

TEST_CASE("a fresh destination is faulted in by one call, every page of it", "[prefault]") {
  if (!kernel_populates()) {
    WARN("skipped: this kernel has no MADV_POPULATE_WRITE (Linux < 5.14); prefault_for_write does nothing here");
    return;
  }
  const std::size_t n = 8 * ckpt::kPrefaultMin;
  Region r(n);
  CHECK(resident_pages(r.p, n) == 0);
  ckpt::prefault_for_write(r.p, n);
  CHECK(resident_pages(r.p, n) == n / kPage);
  CHECK(r.p[0] == 0);
  CHECK(r.p[n - 1] == 0);  // populated pages of anonymous memory are zero, as a fault would leave them
}

TEST_CASE("prefault_for_write never changes a byte and leaves memory in use, small ranges and odd edges alone", "[prefault]") {
  const std::size_t n = 4 * ckpt::kPrefaultMin;
  SECTION("memory in use keeps its bytes") {
    Region r(n);
    for (std::size_t i = 0; i < n; ++i) r.p[i] = static_cast<unsigned char>(i * 31 + 7);
    ckpt::prefault_for_write(r.p + 3, n - 5);  // unaligned ends: only whole pages inside are touched
    bool same = true;
    for (std::size_t i = 0; i < n; ++i) same = same && r.p[i] == static_cast<unsigned char>(i * 31 + 7);
    CHECK(same);
  }
  SECTION("below kPrefaultMin nothing is faulted in") {
    Region r(n);
    ckpt::prefault_for_write(r.p, ckpt::kPrefaultMin - 1);
    CHECK(resident_pages(r.p, n) == 0);
  }
  SECTION("a range whose first page is in memory is left as it is") {
    Region r(n);
    r.p[0] = 1;  // in use: the rest is not populated on its behalf
    ckpt::prefault_for_write(r.p, n);
    CHECK(resident_pages(r.p, n) == 1);
  }
  SECTION("read-only and unmapped memory: no error, no crash") {
    Region ro(n, PROT_READ);
    ckpt::prefault_for_write(ro.p, n);
    unsigned char* gone = nullptr;
    {
      Region r(n);
      gone = r.p;
    }
    ckpt::prefault_for_write(gone, n);
    ckpt::prefault_for_write(nullptr, n);
    SUCCEED("returned");
  }
}
