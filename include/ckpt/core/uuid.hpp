// ckpt: random file identifiers (RFC 9562 version 4), so a footer can never be paired with another file's superblock.
#pragma once

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <array>
#include <stdexcept>
#include <string>

namespace ckpt {

// A file, store or step identifier: 16 bytes, compared bytewise (spec/FORMAT.md 3).
using Uuid = std::array<unsigned char, 16>;

namespace detail {

// n bytes from the kernel's generator; false when neither getrandom(2) nor /dev/urandom answers.
[[nodiscard]] inline bool kernel_random(unsigned char* out, std::size_t n) noexcept {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      break;  // ENOSYS (a kernel before 3.17, a seccomp filter): try the device
    }
  }
  if (got == n) return true;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (got < n) {
    const ssize_t r = ::read(fd, out + got, n - got);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fd);
  return got == n;
}

}  // namespace detail

// Every uuid is drawn from the kernel, with no generator state in the process: a forked child (or a
// raw clone()) cannot repeat its parent's sequence, which an inherited user-space engine did (two
// files then shared one uuid). Throws std::runtime_error, as std::random_device did, only when the
// kernel gives no randomness at all.
[[nodiscard]] inline Uuid random_uuid() {
  Uuid u{};
  if (!detail::kernel_random(u.data(), u.size()))
    throw std::runtime_error("ckpt: random_uuid: no randomness from getrandom(2) or /dev/urandom");
  u[6] = static_cast<unsigned char>((u[6] & 0x0F) | 0x40);
  u[8] = static_cast<unsigned char>((u[8] & 0x3F) | 0x80);
  return u;
}

// 8-4-4-4-12 lowercase hex, as RFC 9562 writes a uuid.
[[nodiscard]] inline std::string uuid_string(const Uuid& uuid) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += digits[uuid[i] >> 4];
    s += digits[uuid[i] & 15];
  }
  return s;
}

}  // namespace ckpt
