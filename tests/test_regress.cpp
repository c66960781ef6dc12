// Tests for tests/fuzz/harness.hpp: every fuzzer finding under tests/regress/ and every seed under
// tests/fuzz/seeds/ is replayed through the harness of its decoder (the file-name prefix or seed folder
// names it), so a crasher once saved is checked by the normal suite, under ASan in the sanitizer build.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fuzz/harness.hpp"
#include "test_util.hpp"

namespace {

using Harness = std::string (*)(const unsigned char*, std::size_t);

struct Decoder {
  const char* name;  // file-name prefix in tests/regress/, folder in tests/fuzz/seeds/
  Harness harness;
};
const Decoder kDecoders[] = {{"index", ckpt_fuzz::shard_file},   {"manifest", ckpt_fuzz::manifest},
                             {"journal", ckpt_fuzz::journal},      {"safetensors", ckpt_fuzz::safetensors},
                             {"pickle", ckpt_fuzz::pickle},        {"gguf", ckpt_fuzz::gguf},
                             {"sidecar", ckpt_fuzz::sidecar},      {"hf_index", ckpt_fuzz::hf_index}};

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && name != "README.md") names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void replay(Harness harness, const std::string& path) {
  INFO("input " << path);
  const std::string bytes = ckpt_test::read_file(path);
  const std::string broken = harness(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  CHECK(broken == "");
}

}  // namespace

TEST_CASE("every file under tests/regress is replayed through the harness its prefix names", "[regress][fuzz]") {
  const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/regress";
  int replayed = 0;
  for (const auto& name : files_in(dir)) {
    const Decoder* decoder = nullptr;
    for (const auto& d : kDecoders)
      if (name.rfind(std::string(d.name) + "-", 0) == 0) decoder = &d;
    // A shard file without a prefix is one of the older reader regressions: the index harness takes it too.
    if (decoder == nullptr && name.size() > 5 && name.substr(name.size() - 5) == ".ckpt") decoder = &kDecoders[0];
    INFO("file " << name);
    REQUIRE(decoder != nullptr);  // README.md: every file names its decoder
    replay(decoder->harness, dir + "/" + name);
    ++replayed;
  }
  SUCCEED(replayed << " regression files replayed");
}

TEST_CASE("every fuzz seed passes its harness", "[regress][fuzz]") {
  for (const auto& d : kDecoders) {
    const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/fuzz/seeds/" + d.name;
    const auto names = files_in(dir);
    INFO("seed folder " << dir);
    CHECK_FALSE(names.empty());
    for (const auto& name : names) replay(d.harness, dir + "/" + name);
  }
  const std::string golden = std::string(CKPT_SOURCE_DIR) + "/spec/golden";
  for (const auto& name : files_in(golden))
    if (name.size() > 5 && name.substr(name.size() - 5) == ".ckpt") replay(ckpt_fuzz::shard_file, golden + "/" + name);
  // The DCP fixtures of test_dcp.cpp (torch's own .metadata, and damaged copies) seed the pickle target too.
  const std::string dcp = std::string(CKPT_SOURCE_DIR) + "/tests/data/dcp";
  for (const auto& name : files_in(dcp))
    if (name.size() > 9 && name.substr(name.size() - 9) == ".metadata") replay(ckpt_fuzz::pickle, dcp + "/" + name);
}

TEST_CASE("the harnesses take empty and tiny inputs", "[regress][fuzz]") {
  const unsigned char zero[256] = {};
  for (const auto& d : kDecoders)
    for (std::size_t n : {0, 1, 7, 8, 9, 72, 191, 192, 256}) {
      INFO(d.name << " with " << n << " zero bytes");
      CHECK(d.harness(zero, n) == "");
    }
}
