// Build test (cmake/tests-build.cmake): every public header is included here and in
// multi_include_b.cpp, and both are linked into one program. A function or variable defined in a
// header without `inline` is then defined twice and the link fails (vimpunk/mio #87).
#include <ckpt/ckpt.hpp>

#include "ckpt_all_headers_forward.hpp"

#include <cstdio>
#include <string>

int multi_include_b(const std::string& dir);  // multi_include_b.cpp

namespace {

// Uses the codecs from this translation unit: superblock and footer round trips.
int multi_include_a() {
  ckpt::Superblock sb;
  sb.uuid = ckpt::random_uuid();
  sb.data_offset = ckpt::align_up(ckpt::format::kSuperblockSize, sb.alignment());
  const auto sb_bytes = ckpt::encode_superblock(sb);
  auto sb_back = ckpt::decode_superblock(sb_bytes.data(), "multi_include_a");
  if (!sb_back.ok() || sb_back->uuid != sb.uuid) {
    std::fprintf(stderr, "multi_include_a: superblock round trip failed: %s\n", sb_back.status().to_string().c_str());
    return 1;
  }
  ckpt::Footer footer;
  footer.index_offset = 4096;
  footer.index_length = 64;
  footer.uuid = sb.uuid;
  const auto ft_bytes = ckpt::encode_footer(footer);
  auto ft_back = ckpt::decode_footer(ft_bytes.data(), 4096 + 64 + 64, "multi_include_a");
  if (!ft_back.ok() || ft_back->index_offset != 4096) {
    std::fprintf(stderr, "multi_include_a: footer round trip failed: %s\n", ft_back.status().to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  const int a = multi_include_a();
  const int b = multi_include_b(dir);
  std::printf("multi_include: translation unit a %s, b %s\n", a == 0 ? "ok" : "FAILED", b == 0 ? "ok" : "FAILED");
  return a == 0 && b == 0 ? 0 : 1;
}
