// Tests for include/ckpt/identity/sidecar.hpp (and the safetensors side of foreign.hpp): sidecars round-trip,
// every corruption of one is refused with its offset, damage of the checkpoint is named through one,
// and foreign formats are told apart from ckpt's own files (spec/IDENTITY.md 4, spec/FOREIGN.md 1.5).
#include <catch2/catch.hpp>

#include <ckpt/interop/foreign.hpp>
#include <ckpt/identity/identity.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/identity/sidecar.hpp>
#include <ckpt/store/store.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

using namespace ckpt;

namespace {

std::string st_file(const std::string& json, const std::string& data) {
  unsigned char field[8];
  put_u64(field, json.size());
  return std::string(reinterpret_cast<const char*>(field), 8) + json + data;
}

// A safetensors file of two tensors, "big" spanning three 4 KiB chunks; returns the data offset.
std::uint64_t write_model(const std::string& path) {
  std::string data(2 * 4096 + 500 + 8, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
  const std::string n = std::to_string(data.size() - 8);
  const std::string json = "{\"big\":{\"dtype\":\"U8\",\"shape\":[" + n + "],\"data_offsets\":[0," + n +
                           "]},\"small\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[" + n + "," + std::to_string(data.size()) +
                           "]},\"__metadata__\":{\"format\":\"pt\"}}";
  ckpt_test::write_file(path, st_file(json, data));
  return 8 + json.size();
}

Sidecar make_sidecar(PosixFs& fs, const std::string& path) {
  auto checkpoint = open_foreign(fs, path);
  REQUIRE(checkpoint.ok());
  auto s = build_sidecar(fs, *checkpoint, 12);
  REQUIRE(s.ok());
  return std::move(s).value();
}

// Recomputes the trailing digest after an edit, so the decoder's later checks are reached.
std::string reseal(std::string bytes) {
  const std::size_t at = bytes.size() - sidecar::kTrailerSize;
  unsigned char d[8];
  put_u64(d, xxh3_64(bytes.data(), at));
  bytes.replace(at, 8, reinterpret_cast<const char*>(d), 8);
  return bytes;
}

Result<Sidecar> decode(const std::string& bytes) {
  return decode_sidecar(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "x.ckptsum");
}

void flip(const std::string& path, std::uint64_t offset) {
  std::string bytes = ckpt_test::read_file(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x10);
  ckpt_test::write_file(path, bytes);
}

}  // namespace

TEST_CASE("a sidecar covers every byte of the file and round-trips", "[sidecar]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::uint64_t data_offset = write_model(dir.file("m.safetensors"));
  const Sidecar s = make_sidecar(fs, dir.file("m.safetensors"));
  REQUIRE(s.files.size() == 1);
  CHECK(s.files[0].name == "m.safetensors");
  // The header is the one region; the tensors hold every other byte.
  REQUIRE(s.files[0].regions.size() == 1);
  CHECK(s.files[0].regions[0].offset == 0);
  CHECK(s.files[0].regions[0].length == data_offset);
  REQUIRE(s.content.tensors.size() == 2);
  CHECK(s.content.tensors[0].pieces[0].chunk_digests.size() == 3);

  const std::string bytes = encode_sidecar(s);
  auto back = decode(bytes);
  REQUIRE(back.ok());
  CHECK(back->content.root == s.content.root);
  CHECK(back->files[0].regions[0].chunk_digests == s.files[0].regions[0].chunk_digests);
  CHECK(encode_sidecar(*back) == bytes);
}

TEST_CASE("every flipped byte and every truncation of a sidecar is refused", "[sidecar]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_model(dir.file("m.safetensors"));
  const std::string bytes = encode_sidecar(make_sidecar(fs, dir.file("m.safetensors")));
  for (const auto& d : ckpt_test::flips_and_cuts(bytes, 0x01)) {
    INFO(d.what);
    auto r = decode(d.bytes);
    REQUIRE_FALSE(r.ok());
    if (!d.cut) CHECK((r.status().code() == Code::corrupt || r.status().code() == Code::incomplete));
  }
}

TEST_CASE("a sidecar whose digest matches but whose records lie is refused, naming where", "[sidecar]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_model(dir.file("m.safetensors"));
  const Sidecar good = make_sidecar(fs, dir.file("m.safetensors"));
  const std::string bytes = encode_sidecar(good);
  // The sidecar with its little-endian field of `width` bytes at `at` set to v, resealed.
  auto patch = [&](std::size_t at, std::size_t width, std::uint64_t v) {
    std::string b = bytes;
    unsigned char f[8];
    put_u64(f, v);
    b.replace(at, width, reinterpret_cast<const char*>(f), width);
    return reseal(b);
  };
  auto patch_u32 = [&](std::size_t at, std::uint32_t v) { return patch(at, 4, v); };
  auto patch_u64 = [&](std::size_t at, std::uint64_t v) { return patch(at, 8, v); };
  auto edited = [&](const std::function<void(Sidecar&)>& edit) {
    Sidecar s = good;
    edit(s);
    return encode_sidecar(s);
  };
  struct Case {
    const char* what;
    std::string bytes;
    Code code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"version 2", patch_u32(sidecar::hd::kVersion, 2), Code::unsupported, "version 2"},
      {"unknown format", patch_u32(sidecar::hd::kFormat, 9), Code::corrupt, "byte 12: format 9"},
      {"chunk size 32 bytes", patch_u32(sidecar::hd::kChunkSizeLog2, 5), Code::corrupt, "byte 16"},
      {"reserved not zero", patch_u32(sidecar::hd::kReserved, 1), Code::corrupt, "byte 20"},
      {"file count of 2^60", patch_u64(sidecar::hd::kFileCount, std::uint64_t{1} << 60), Code::corrupt, "byte 24"},
      {"tensor count one short", patch_u64(sidecar::hd::kTensorCount, 1), Code::corrupt, "sidecar byte"},
      {"root digest", patch_u64(sidecar::hd::kRoot, 1), Code::corrupt, "byte 48: root digest"},
      {"a region removed (a gap)", edited([](Sidecar& s) { s.files[0].regions.clear(); }), Code::corrupt, "do not tile"},
      {"a file name reaching outside", edited([](Sidecar& s) {
         s.files[0].name = "../m.safetensors";
         for (auto& t : s.content.tensors)
           for (auto& p : t.pieces) p.file = "../m.safetensors";
       }),
       Code::corrupt, "not a name inside the directory"},
      {"a piece past the end of its file", edited([](Sidecar& s) { s.files[0].size -= 1; s.files[0].regions.clear(); }), Code::corrupt,
       "past the end"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto r = decode(c.bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    CHECK_THAT(r.status().message(), Catch::Contains(c.message));
  }
}

TEST_CASE("damage of a foreign file is named through its sidecar; a renamed copy keeps its sidecar", "[sidecar]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::uint64_t data_offset = write_model(dir.file("m.safetensors"));
  auto checkpoint = open_foreign(fs, dir.file("m.safetensors"));
  REQUIRE(checkpoint.ok());
  const std::string side = sidecar_path(*checkpoint);
  CHECK(side == dir.file("m.safetensors.ckptsum"));

  auto bare = verify_foreign(fs, dir.file("m.safetensors"));
  REQUIRE(bare.ok());
  CHECK(bare->ok());
  CHECK_FALSE(bare->data_checked);
  CHECK_FALSE(bare->root);

  const std::string before = ckpt_test::read_file(dir.file("m.safetensors"));
  auto s = build_sidecar(fs, *checkpoint, 12);
  REQUIRE(s.ok());
  REQUIRE(write_sidecar(fs, *s, side).ok());
  CHECK(ckpt_test::read_file(dir.file("m.safetensors")) == before);
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);  // no temporary file left

  auto intact = verify_foreign(fs, dir.file("m.safetensors"));
  REQUIRE(intact.ok());
  CHECK(intact->ok());
  CHECK(intact->data_checked);
  CHECK(intact->bytes_checked == before.size());
  CHECK(intact->root == s->content.root);

  std::filesystem::copy_file(dir.file("m.safetensors"), dir.file("copy.safetensors"));
  std::filesystem::copy_file(side, dir.file("copy.safetensors.ckptsum"));
  flip(dir.file("copy.safetensors"), data_offset + 4096 + 10);  // "big", chunk 1
  auto damaged = verify_foreign(fs, dir.file("copy.safetensors"));
  REQUIRE(damaged.ok());
  REQUIRE(damaged->problems.size() == 1);
  const Problem& p = damaged->problems[0];
  CHECK(p.region == "data");
  CHECK(p.tensor == "big");
  CHECK(p.piece == 0);
  CHECK(p.chunk == 1);
  CHECK(p.offset == data_offset + 4096);
  CHECK(p.length == 4096);
  CHECK(p.file == dir.file("copy.safetensors"));
  CHECK_THAT(p.message, Catch::Contains("digest expected " + p.expected + ", found " + p.found));

  // A flipped header byte is damage of the bytes outside any tensor; a grown file is reported too.
  std::filesystem::copy_file(dir.file("m.safetensors"), dir.file("hdr.safetensors"));
  std::filesystem::copy_file(side, dir.file("hdr.safetensors.ckptsum"));
  flip(dir.file("hdr.safetensors"), 3);
  auto header = verify_foreign(fs, dir.file("hdr.safetensors"));
  REQUIRE(header.ok());
  bool header_damage = false;
  for (const auto& q : header->problems) header_damage = header_damage || (q.region == "header" && q.offset == 0);
  CHECK(header_damage);
  std::filesystem::copy_file(dir.file("m.safetensors"), dir.file("grown.safetensors"));
  std::filesystem::copy_file(side, dir.file("grown.safetensors.ckptsum"));
  ckpt_test::write_file(dir.file("grown.safetensors"), before + "xx");
  auto grown = verify_foreign(fs, dir.file("grown.safetensors"));
  REQUIRE(grown.ok());
  REQUIRE_FALSE(grown->ok());

  // A damaged sidecar is reported as such, never silently ignored.
  std::filesystem::copy_file(dir.file("m.safetensors"), dir.file("bad.safetensors"));
  ckpt_test::write_file(dir.file("bad.safetensors.ckptsum"), "CKPTSUMS but nothing else");
  auto bad = verify_foreign(fs, dir.file("bad.safetensors"));
  REQUIRE(bad.ok());
  REQUIRE(bad->problems.size() == 1);
  CHECK(bad->problems[0].region == "sidecar");
  CHECK_FALSE(bad->data_checked);
}

TEST_CASE("a damaged checkpoint gets no sidecar", "[sidecar]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_model(dir.file("m.safetensors"));
  auto checkpoint = open_foreign(fs, dir.file("m.safetensors"));
  REQUIRE(checkpoint.ok());
  ForeignCheckpoint damaged = *checkpoint;
  Problem p;
  p.message = "a hole";
  damaged.problems.push_back(p);
  auto s = build_sidecar(fs, damaged, 12);
  CHECK(s.status().code() == Code::corrupt);
  CHECK_THAT(s.status().message(), Catch::Contains("a hole"));
  CHECK(build_sidecar(fs, *checkpoint, 11).status().code() == Code::invalid_argument);
}

TEST_CASE("foreign formats are recognised by content and name, ckpt's own never", "[foreign]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_model(dir.file("m.safetensors"));
  ckpt_test::write_file(dir.file("renamed.bin"), ckpt_test::read_file(dir.file("m.safetensors")));
  ckpt_test::write_file(dir.file("model.gguf"), std::string("GGUF\x03\0\0\0", 8));
  ckpt_test::write_file(dir.file("tiny"), "{}");
  ckpt_test::write_file(dir.file("long-header"), st_file(std::string(100, ' '), "").substr(0, 20));
  ckpt_test::write_file(dir.file("text.txt"), "hello, world\n");
  std::filesystem::create_directory(dir.file("dcp"));
  ckpt_test::write_file(dir.file("dcp/.metadata"), "x");
  std::filesystem::create_directory(dir.file("hf"));
  ckpt_test::write_file(dir.file("hf/model.safetensors.index.json"), "{\"weight_map\":{}}");
  std::filesystem::create_directory(dir.file("empty"));
  StoreOptions create;
  create.create_if_missing = true;
  REQUIRE(Store::open(fs, dir.file("store"), Access::read_write, create).ok());
  // Each format with the paths recognised as it; nullopt: not a foreign checkpoint.
  const std::vector<std::pair<std::optional<ForeignFormat>, std::vector<std::string>>> formats = {
      {ForeignFormat::safetensors, {"m.safetensors", "renamed.bin"}},
      {ForeignFormat::gguf, {"model.gguf"}},
      {ForeignFormat::dcp, {"dcp", "dcp/.metadata"}},
      {ForeignFormat::safetensors_index, {"hf", "hf/model.safetensors.index.json"}},
      {std::nullopt, {"tiny", "long-header", "text.txt", "empty", "store", "store/JOURNAL"}},
  };
  for (const auto& [format, names] : formats)
    for (const auto& name : names) {
      INFO(name);
      auto f = detect_foreign(fs, dir.file(name));
      REQUIRE(f.ok());
      CHECK(*f == format);
    }
  CHECK(detect_foreign(fs, dir.file("absent")).status().code() == Code::not_found);
}

TEST_CASE("a file missing from a Hugging Face set is damage of the set, not a usage error", "[foreign]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_model(dir.file("model-00001-of-00002.safetensors"));
  ckpt_test::write_file(dir.file("model.safetensors.index.json"),
                        "{\"metadata\":{\"total_size\":1},\"weight_map\":{\"big\":\"model-00001-of-00002.safetensors\","
                        "\"small\":\"model-00001-of-00002.safetensors\",\"other\":\"model-00002-of-00002.safetensors\"}}");
  auto r = open_foreign(fs, dir.path());
  CHECK(r.status().code() == Code::corrupt);
  CHECK_THAT(r.status().message(), Catch::Contains("model-00002-of-00002.safetensors"));
  auto report = verify_foreign(fs, dir.path());
  REQUIRE(report.ok());
  REQUIRE(report->problems.size() == 1);
  CHECK(report->problems[0].region == "header");
}
