// Tests for open_gguf (foreign.hpp, spec/FOREIGN.md 5): GGUF files built byte by byte here, read
// back intact, and hostile ones as a table (header errors and layout problems).
#include <catch2/catch.hpp>

#include <ckpt/interop/foreign.hpp>
#include <ckpt/interop/gguf.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/io/posix_fs.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "heap_counter.hpp"  // replaces operator new in this program
#include "test_util.hpp"

using namespace ckpt;

namespace {

std::string le32(std::uint32_t v) {
  unsigned char b[4];
  put_u32(b, v);
  return std::string(reinterpret_cast<const char*>(b), 4);
}
std::string le64(std::uint64_t v) {
  unsigned char b[8];
  put_u64(b, v);
  return std::string(reinterpret_cast<const char*>(b), 8);
}
std::string gstr(const std::string& s) { return le64(s.size()) + s; }

// A metadata value: its type and its encoding after the type field.
struct Val {
  std::uint32_t type;
  std::string bytes;
};
enum : std::uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32V, BOOL, STR, ARR, U64, I64, F64V };
Val vu8(std::uint8_t v) { return {U8, std::string(1, static_cast<char>(v))}; }
Val vi8(std::int8_t v) { return {I8, std::string(1, static_cast<char>(v))}; }
Val vu16(std::uint16_t v) { return {U16, le32(v).substr(0, 2)}; }
Val vi16(std::int16_t v) { return {I16, le32(static_cast<std::uint16_t>(v)).substr(0, 2)}; }
Val vu32(std::uint32_t v) { return {U32, le32(v)}; }
Val vi32(std::int32_t v) { return {I32, le32(static_cast<std::uint32_t>(v))}; }
Val vf32(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return {F32V, le32(u)};
}
Val vbool(bool b) { return {BOOL, std::string(1, b ? '\1' : '\0')}; }
Val vstr(const std::string& s) { return {STR, gstr(s)}; }
Val vu64(std::uint64_t v) { return {U64, le64(v)}; }
Val vi64(std::int64_t v) { return {I64, le64(static_cast<std::uint64_t>(v))}; }
Val vf64(double d) { return {F64V, le64(f64_bits(d))}; }
// The bytes of an array's elements: what its summary's digest covers.
std::string elements(const std::vector<Val>& items) {
  std::string s;
  for (const auto& v : items) s += v.bytes;
  return s;
}
Val varr(std::uint32_t type, const std::vector<Val>& items) {
  return {ARR, le32(type) + le64(items.size()) + elements(items)};
}

constexpr std::uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ4_K = 12, kI32 = 26, kBF16 = 30;

struct TensorSpec {
  std::string name;
  std::uint32_t type;
  std::vector<std::uint64_t> ne;  // innermost first, as in the file
  std::uint64_t bytes;
  std::optional<std::uint64_t> offset;  // relative to the data section; default: as gguf-py places it
};

// A GGUF file as a writer would lay it out (gguf-py: each tensor at the next multiple of the
// alignment, zero padding after the tensor infos and after every tensor), with overrides.
struct Gguf {
  std::uint32_t version = 3;
  std::vector<std::pair<std::string, Val>> kvs;
  std::vector<TensorSpec> tensors;
  std::uint64_t alignment = 32;  // what the layout uses; a general.alignment kv is the caller's
  std::optional<std::uint64_t> tensor_count, kv_count;

  // Filled by build().
  std::vector<std::pair<std::string, std::uint64_t>> fields;  // each header field's file offset
  std::uint64_t data_offset = 0;
  std::vector<std::uint64_t> offsets;  // relative, per tensor
  std::vector<std::string> data;       // per tensor

  std::string build() {
    fields.clear();
    std::string out;
    auto field = [&](const std::string& what) { fields.emplace_back(what, out.size()); };
    field("magic");
    out += "GGUF";
    field("version");
    out += le32(version);
    field("tensor_count");
    out += le64(tensor_count.value_or(tensors.size()));
    field("kv_count");
    out += le64(kv_count.value_or(kvs.size()));
    for (const auto& [key, value] : kvs) {
      field("kv " + key + " key length");
      out += le64(key.size());
      if (!key.empty()) field("kv " + key + " key");
      out += key;
      field("kv " + key + " value type");
      out += le32(value.type);
      field("kv " + key + " value");
      out += value.bytes;
    }
    offsets.clear();
    std::uint64_t next = 0;
    for (const auto& t : tensors) {
      field("tensor " + t.name + " name length");
      out += le64(t.name.size());
      field("tensor " + t.name + " name");
      out += t.name;
      field("tensor " + t.name + " n_dims");
      out += le32(static_cast<std::uint32_t>(t.ne.size()));
      for (std::size_t d = 0; d < t.ne.size(); ++d) {
        field("tensor " + t.name + " ne[" + std::to_string(d) + "]");
        out += le64(t.ne[d]);
      }
      field("tensor " + t.name + " type");
      out += le32(t.type);
      field("tensor " + t.name + " offset");
      const std::uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      out += le64(off);
      next = align_up(off + t.bytes, alignment);
    }
    data_offset = align_up(out.size(), alignment);
    std::uint64_t end = data_offset;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      end = std::max(end, align_up(data_offset + offsets[i] + tensors[i].bytes, alignment));
    out.resize(end, '\0');
    data.clear();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto bytes = ckpt_test::random_bytes(tensors[i].bytes, 100 + i);
      data.emplace_back(bytes.begin(), bytes.end());
      std::memcpy(&out[data_offset + offsets[i]], data.back().data(), data.back().size());
    }
    return out;
  }
  [[nodiscard]] std::uint64_t field(const std::string& what) const {
    for (const auto& [name, at] : fields)
      if (name == what) return at;
    FAIL("no field " << what);
    return 0;
  }
};

std::vector<Val> token_list(std::size_t n) {
  std::vector<Val> tokens;
  for (std::size_t i = 0; i < n; ++i) tokens.push_back(vstr("tok" + std::to_string(i)));
  return tokens;
}

// Metadata of every value type, with the text each must read back as (spec/FOREIGN.md 5.5).
std::vector<std::tuple<std::string, Val, std::string>> every_value_type() {
  std::vector<Val> ints;
  for (int i = 0; i < 100; ++i) ints.push_back(vi32(i - 50));
  const std::string long_text(70000, 'x');
  const std::vector<Val> tokens = token_list(20);
  const std::vector<Val> long_items = {vstr(std::string(600, 'a')), vstr(std::string(600, 'b'))};
  return {
      {"general.architecture", vstr("llama"), "llama"},
      {"t.u8", vu8(200), "200"},
      {"t.i8", vi8(-5), "-5"},
      {"t.u16", vu16(65535), "65535"},
      {"t.i16", vi16(-300), "-300"},
      {"t.u32", vu32(4000000000u), "4000000000"},
      {"t.i32", vi32(-7), "-7"},
      {"t.f32", vf32(0.1f), "0.1"},
      {"t.f32_small", vf32(1e-5f), "1e-05"},
      {"t.f32_inf", vf32(-std::numeric_limits<float>::infinity()), "-inf"},
      {"t.bool_true", vbool(true), "true"},
      {"t.bool_false", vbool(false), "false"},
      {"t.string_lines", vstr("line1\nline2"), "line1\nline2"},
      {"t.u64", vu64(std::uint64_t{1} << 40), "1099511627776"},
      {"t.i64", vi64(-(std::int64_t{1} << 40)), "-1099511627776"},
      {"t.f64", vf64(0.1), "0.1"},
      {"t.f64_big", vf64(1e300), "1e+300"},
      {"t.array_u32", varr(U32, {vu32(1), vu32(2), vu32(3)}), "[3 x u32: 1, 2, 3]"},
      {"t.array_empty", varr(F32V, {}), "[0 x f32]"},
      {"t.array_bool", varr(BOOL, {vbool(true), vbool(false)}), "[2 x bool: true, false]"},
      {"t.array_nested", varr(ARR, {varr(U8, {vu8(1), vu8(2)}), varr(STR, {vstr("a\"b")})}),
       "[2 x array: [2 x u8: 1, 2], [1 x string: \"a\\\"b\"]]"},
      {"tokenizer.ggml.tokens", varr(STR, tokens),
       "array of 20 string, xxh3-64 " + hex64(xxh3_64(elements(tokens).data(), elements(tokens).size())) +
           " of its encoded bytes"},
      {"t.array_long_i32", varr(I32, ints),
       "array of 100 i32, xxh3-64 " + hex64(xxh3_64(elements(ints).data(), elements(ints).size())) + " of its encoded bytes"},
      {"t.array_long_text", varr(STR, long_items),
       "array of 2 string, xxh3-64 " + hex64(xxh3_64(elements(long_items).data(), elements(long_items).size())) +
           " of its encoded bytes"},
      {"t.string_long", vstr(long_text),
       "string of 70000 bytes, xxh3-64 " + hex64(xxh3_64(long_text.data(), long_text.size())) + " of its bytes"},
  };
}

// Tensors in data order (not name order), of plain and quantised types, 0-d to 3-d.
std::vector<TensorSpec> model_tensors() {
  return {
      {"token_embd.weight", kF32, {4, 3}, 48, {}},
      {"blk.0.attn_norm.weight", kF16, {5}, 10, {}},
      {"blk.0.ffn_down.weight", kQ8_0, {64, 2}, 2 * 2 * 34, {}},
      {"blk.0.cube", kF32, {2, 3, 4}, 96, {}},
      {"blk.0.q4k", kQ4_K, {256, 1}, 144, {}},
      {"blk.0.scalar", kI32, {}, 4, {}},
      {"blk.0.empty", kBF16, {0, 7}, 0, {}},
      {"output.weight", kBF16, {3, 2}, 12, {}},
  };
}

Gguf model_file() {
  Gguf g;
  for (auto& [key, value, text] : every_value_type()) g.kvs.emplace_back(key, value);
  g.tensors = model_tensors();
  return g;
}

Result<ForeignCheckpoint> open_bytes(const std::string& bytes, ckpt_test::TempDir& dir, const std::string& name = "model.gguf") {
  const std::string path = dir.file(name);
  ckpt_test::write_file(path, bytes);
  PosixFs fs;
  return open_gguf(fs, path);
}

std::string dtype_of(std::uint32_t type) { return std::string(gguf::type_info(type)->name); }

void check_reads_back(Gguf& g, const std::string& bytes, const ForeignCheckpoint& c, const std::string& path) {
  CHECK(c.format == ForeignFormat::gguf);
  CHECK(c.path == path);
  CHECK(c.primary == path);
  CHECK(c.dir == parent_path(path));
  REQUIRE(c.files.size() == 1);
  CHECK(c.files[0].name == base_name(path));
  CHECK(c.files[0].size == bytes.size());
  CHECK(c.files[0].present);
  for (const auto& p : c.problems) INFO("problem: " << p.message);
  CHECK(c.problems.empty());
  REQUIRE(c.tensors.size() == g.tensors.size());
  for (std::size_t i = 1; i < c.tensors.size(); ++i) CHECK(c.tensors[i - 1].name < c.tensors[i].name);
  for (std::size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorSpec& spec = g.tensors[i];
    const auto it = std::find_if(c.tensors.begin(), c.tensors.end(), [&](const ForeignTensor& t) { return t.name == spec.name; });
    REQUIRE(it != c.tensors.end());
    INFO("tensor " << spec.name);
    CHECK(it->dtype == dtype_of(spec.type));
    const Shape shape(spec.ne.rbegin(), spec.ne.rend());
    CHECK(it->shape == shape);
    REQUIRE(it->pieces.size() == 1);
    const ForeignPiece& piece = it->pieces[0];
    CHECK(piece.file == 0);
    CHECK(piece.offset == g.data_offset + g.offsets[i]);
    CHECK(piece.length == spec.bytes);
    CHECK(piece.offsets == Shape(shape.size(), 0));
    CHECK(piece.shape == shape);
    CHECK(bytes.substr(piece.offset, piece.length) == g.data[i]);
  }
}

}  // namespace

TEST_CASE("an intact GGUF file reads back with names, dtypes, shapes, offsets and metadata text", "[gguf]") {
  ckpt_test::TempDir dir;
  for (const std::uint32_t version : {3u, 2u}) {
    Gguf g = model_file();
    g.version = version;
    const std::string bytes = g.build();
    auto opened = open_bytes(bytes, dir);
    INFO("version " << version);
    REQUIRE(opened.ok());
    check_reads_back(g, bytes, *opened, dir.file("model.gguf"));
    std::map<std::string, std::string> expected;
    for (auto& [key, value, text] : every_value_type()) expected[key] = text;
    std::map<std::string, std::string> found(opened->metadata.begin(), opened->metadata.end());
    CHECK(found == expected);
    for (std::size_t i = 1; i < opened->metadata.size(); ++i) CHECK(opened->metadata[i - 1].first < opened->metadata[i].first);
    CHECK(opened->data_bytes() == 48 + 10 + 136 + 96 + 144 + 4 + 0 + 12);
  }
}

TEST_CASE("general.alignment moves the data section and the tensor offsets", "[gguf]") {
  ckpt_test::TempDir dir;
  for (const std::uint32_t alignment : {1u, 8u, 64u, 4096u}) {
    Gguf g;
    g.alignment = alignment;
    g.kvs.emplace_back("general.alignment", vu32(alignment));
    g.tensors = model_tensors();
    const std::string bytes = g.build();
    INFO("alignment " << alignment);
    CHECK(g.data_offset % alignment == 0);
    auto opened = open_bytes(bytes, dir);
    REQUIRE(opened.ok());
    check_reads_back(g, bytes, *opened, dir.file("model.gguf"));
  }
}

TEST_CASE("a GGUF file without tensors or metadata is intact", "[gguf]") {
  ckpt_test::TempDir dir;
  Gguf g;
  const std::string bytes = g.build();
  CHECK(bytes.size() == 32);  // the 24-byte header padded to the default alignment
  auto opened = open_bytes(bytes, dir);
  REQUIRE(opened.ok());
  CHECK(opened->tensors.empty());
  CHECK(opened->metadata.empty());
  CHECK(opened->problems.empty());
  auto unpadded = open_bytes(bytes.substr(0, 24), dir);
  REQUIRE(unpadded.ok());
  CHECK(unpadded->problems.empty());
}

namespace {

// One row of the corruption table: bytes, and either the error (code, text) or the problems.
struct Expect {
  Code code;
  std::vector<std::string> texts;  // each must appear in the error message (or the problem's)
  std::string region;              // empty: open_gguf fails; else: it succeeds with this problem
  std::string tensor;              // the problem's tensor, when it names one
  std::size_t problems = 1;        // how many problems, for a problem row
};

Expect fails(Code code, std::vector<std::string> texts) { return Expect{code, std::move(texts), "", "", 0}; }
Expect problem(Code code, std::vector<std::string> texts, std::string region, std::string tensor, std::size_t count = 1) {
  return Expect{code, std::move(texts), std::move(region), std::move(tensor), count};
}

void check_row(const std::string& label, const std::string& bytes, const Expect& e) {
  ckpt_test::TempDir dir;
  auto opened = open_bytes(bytes, dir);
  INFO(label);
  const std::string path = dir.file("model.gguf");
  if (e.region.empty()) {
    REQUIRE_FALSE(opened.ok());
    const Status& s = opened.status();
    INFO(s.to_string());
    CHECK(s.code() == e.code);
    CHECK(s.message().find("\n") == std::string::npos);
    CHECK_THAT(s.message(), Catch::StartsWith(path + ": offset "));
    for (const auto& text : e.texts) CHECK_THAT(s.message(), Catch::Contains(text));
    return;
  }
  REQUIRE(opened.ok());
  for (const auto& p : opened->problems) INFO("problem: " << p.message);
  REQUIRE(opened->problems.size() == e.problems);
  const auto it = std::find_if(opened->problems.begin(), opened->problems.end(), [&](const Problem& p) {
    return p.code == e.code && p.region == e.region && p.tensor == e.tensor;
  });
  REQUIRE(it != opened->problems.end());
  CHECK(it->file == path);
  CHECK_FALSE(it->expected.empty());
  CHECK_FALSE(it->found.empty());
  CHECK_THAT(it->message, Catch::StartsWith(path + ": offset " + std::to_string(it->offset) + ": "));
  CHECK_THAT(it->message, Catch::Contains(it->expected) && Catch::Contains(it->found));
  for (const auto& text : e.texts) CHECK_THAT(it->message, Catch::Contains(text));
}

std::string with_u32(std::string bytes, std::uint64_t at, std::uint32_t v) { return bytes.replace(at, 4, le32(v)); }
std::string with_u64(std::string bytes, std::uint64_t at, std::uint64_t v) { return bytes.replace(at, 8, le64(v)); }

}  // namespace

TEST_CASE("a GGUF file truncated inside any header field is incomplete, naming where it ends", "[gguf]") {
  Gguf g = model_file();
  const std::string bytes = g.build();
  // The end of the tensor infos: every field before it.
  const std::uint64_t infos_end = g.field("tensor output.weight offset") + 8;
  std::vector<std::uint64_t> starts;
  for (const auto& [what, at] : g.fields) starts.push_back(at);
  starts.push_back(infos_end);
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    const std::string& what = g.fields[i].first;
    for (const std::uint64_t cut : {starts[i], starts[i] + (starts[i + 1] - starts[i]) / 2}) {
      if (cut == 0) {
        check_row(what + " (empty file)", "", fails(Code::incomplete, {"offset 0", "the file ends at 0"}));
        continue;
      }
      check_row(what + " cut at " + std::to_string(cut), bytes.substr(0, cut),
                fails(Code::incomplete, {"the file ends at " + std::to_string(cut)}));
    }
  }
}

TEST_CASE("hostile GGUF headers are errors naming file, offset, expected and found", "[gguf]") {
  Gguf g = model_file();
  const std::string intact = g.build();
  const std::uint64_t kv0 = g.field("kv general.architecture key length");
  const std::uint64_t u32_type = g.field("kv t.u32 value type");
  const std::uint64_t bool_value = g.field("kv t.bool_true value");
  const std::uint64_t array_value = g.field("kv t.array_u32 value");
  const std::uint64_t string_value = g.field("kv general.architecture value");
  const std::uint64_t q8_ne0 = g.field("tensor blk.0.ffn_down.weight ne[0]");
  const std::uint64_t q8_type = g.field("tensor blk.0.ffn_down.weight type");
  const std::uint64_t cube_dims = g.field("tensor blk.0.cube n_dims");
  const auto at = [](std::uint64_t offset) { return "offset " + std::to_string(offset); };

  struct Row {
    std::string label;
    std::string bytes;
    Expect expect;
  };
  std::vector<Row> rows = {
      {"bad magic", "GGUX" + intact.substr(4), fails(Code::corrupt, {at(0), "\"GGUF\"", "47 47 55 58"})},
      {"a safetensors file", le64(2) + "{}", fails(Code::corrupt, {at(0), "found 02 00 00 00"})},
      {"version 1", with_u32(intact, 4, 1), fails(Code::unsupported, {at(4), "version 2 or 3, found 1"})},
      {"version 0", with_u32(intact, 4, 0), fails(Code::corrupt, {at(4), "found 0"})},
      {"version 4", with_u32(intact, 4, 4), fails(Code::version, {at(4), "version 2 or 3, found 4"})},
      {"big-endian version 3", with_u32(intact, 4, 0x03000000), fails(Code::unsupported, {at(4), "big-endian"})},
      {"kv_count 2^60", with_u64(intact, 16, std::uint64_t{1} << 60), fails(Code::corrupt, {at(16), "kv_count", "limit"})},
      {"tensor_count 2^60", with_u64(intact, 8, std::uint64_t{1} << 60), fails(Code::corrupt, {at(8), "tensor_count", "limit"})},
      {"kv_count 100000, more than the file holds", with_u64(intact, 16, 100000),
       fails(Code::incomplete, {at(16), "kv_count", "found 100000"})},
      {"key length 2^40", with_u64(intact, kv0, std::uint64_t{1} << 40), fails(Code::corrupt, {at(kv0), "key length", "65535"})},
      {"string length 2^40", with_u64(intact, string_value, std::uint64_t{1} << 40),
       fails(Code::corrupt, {at(string_value), "general.architecture", "found 1099511627776"})},
      {"string length past the end of the file", with_u64(intact, string_value, intact.size()),
       fails(Code::incomplete, {at(string_value), "general.architecture", "the file ends at"})},
      {"unknown value type 13", with_u32(intact, u32_type, 13), fails(Code::corrupt, {at(u32_type), "t.u32", "found 13"})},
      {"array element type 99", with_u32(intact, array_value, 99), fails(Code::corrupt, {at(array_value), "t.array_u32", "found 99"})},
      {"array count 2^61", with_u64(intact, array_value + 4, std::uint64_t{1} << 61),
       fails(Code::corrupt, {at(array_value + 4), "t.array_u32' count"})},
      {"bool value 2", intact.substr(0, bool_value) + '\2' + intact.substr(bool_value + 1),
       fails(Code::corrupt, {at(bool_value), "t.bool_true", "0 or 1, found 2"})},
      {"removed ggml type 4 (Q4_2)", with_u32(intact, q8_type, 4),
       fails(Code::corrupt, {at(q8_type), "tensor 'blk.0.ffn_down.weight' type", "found 4"})},
      {"unknown ggml type 99", with_u32(intact, q8_type, 99),
       fails(Code::corrupt, {at(q8_type), "tensor 'blk.0.ffn_down.weight'", "found 99"})},
      {"n_dims 5", with_u32(intact, cube_dims, 5), fails(Code::corrupt, {at(cube_dims), "tensor 'blk.0.cube' n_dims", "at most 4, found 5"})},
      {"ne0 not a multiple of the block", with_u64(intact, q8_ne0, 33),
       fails(Code::corrupt, {"tensor 'blk.0.ffn_down.weight'", "32-element block of Q8_0, found 33"})},
      {"ne 2^63", with_u64(intact, g.field("tensor blk.0.cube ne[1]"), std::uint64_t{1} << 63),
       fails(Code::corrupt, {at(g.field("tensor blk.0.cube ne[1]")), "tensor 'blk.0.cube' ne[1]"})},
  };
  {
    Gguf big;
    big.tensors = {{"huge", kF32, {std::uint64_t{1} << 40, std::uint64_t{1} << 40}, 0, std::uint64_t{0}}};
    rows.push_back({"size past 2^64 bytes", big.build(), fails(Code::corrupt, {"tensor 'huge'", "fits 64 bits"})});
  }
  for (const std::uint32_t alignment : {0u, 48u}) {
    Gguf bad;
    bad.kvs.emplace_back("general.alignment", vu32(alignment));
    const std::string bytes = bad.build();
    rows.push_back({"general.alignment " + std::to_string(alignment), bytes,
                    fails(Code::corrupt, {at(bad.field("kv general.alignment value")), "power of two, found " + std::to_string(alignment)})});
  }
  {
    Gguf bad;
    bad.kvs.emplace_back("general.alignment", vu64(64));
    const std::string bytes = bad.build();
    rows.push_back({"general.alignment as u64", bytes, fails(Code::corrupt, {at(bad.field("kv general.alignment value type")), "expected u32"})});
  }
  {
    Val deep = varr(U8, {vu8(1)});
    for (int i = 0; i < 9; ++i) deep = varr(ARR, {deep});
    Gguf bad;
    bad.kvs.emplace_back("t.deep", deep);
    rows.push_back({"arrays nested 10 deep", bad.build(), fails(Code::corrupt, {"t.deep", "nested at most 8"})});
  }
  for (const auto& row : rows) check_row(row.label, row.bytes, row.expect);
}

TEST_CASE("layout damage in a decodable GGUF file is reported as problems", "[gguf]") {
  const auto file = [](const std::function<void(Gguf&)>& edit) {
    Gguf g = model_file();
    edit(g);
    return g;
  };
  struct Row {
    std::string label;
    std::string bytes;
    Expect expect;
  };
  std::vector<Row> rows;
  {
    // Misaligned: 8 bytes before where it belongs, after token_embd.weight's end and zero padding.
    Gguf g = file([](Gguf& f) { f.tensors[1].offset = 56; });
    const std::string bytes = g.build();
    rows.push_back({"offset not a multiple of the alignment", bytes,
                    problem(Code::corrupt, {"multiple of the alignment 32", "data offset 56 (24 past a multiple)"}, "layout",
                     "blk.0.attn_norm.weight")});
  }
  {
    Gguf g = file([](Gguf& f) { f.tensors[1].offset = 32; });  // [32, 42) inside token_embd.weight [0, 48)
    const std::string bytes = g.build();
    rows.push_back({"overlapping tensors", bytes,
                    problem(Code::corrupt, {"'token_embd.weight'", "an overlap of 10 bytes",
                                     "offset " + std::to_string(g.data_offset + 32)},
                     "layout", "blk.0.attn_norm.weight")});
  }
  {
    Gguf g = file([](Gguf& f) { f.tensors[1].offset = 96; });  // 48 bytes after token_embd.weight ends
    const std::string bytes = g.build();
    rows.push_back({"a hole between tensors", bytes,
                    problem(Code::corrupt, {"a hole of 48 bytes", "offset " + std::to_string(g.data_offset + 48)}, "layout",
                     "blk.0.attn_norm.weight")});
  }
  {
    Gguf g = model_file();
    const std::string bytes = g.build();
    const std::uint64_t last = g.data_offset + g.offsets.back();
    rows.push_back({"data past the end of the file (a truncated copy)", bytes.substr(0, last + 5),
                    problem(Code::incomplete, {"the file ends at " + std::to_string(last + 5), "offset " + std::to_string(last)}, "layout",
                     "output.weight")});
    const std::uint64_t q4k = g.data_offset + g.offsets[4];
    // Three tensors with data past the end, and blk.0.empty, whose offset is past it too.
    rows.push_back({"the data section cut in the middle: each tensor past the end", bytes.substr(0, q4k + 1),
                    problem(Code::incomplete, {"the file ends at " + std::to_string(q4k + 1)}, "layout", "blk.0.q4k", 4)});
    rows.push_back({"trailing bytes after the last tensor's padding", bytes + std::string(32, '\0'),
                    problem(Code::corrupt, {"32 bytes that belong to no tensor", "offset " + std::to_string(bytes.size())}, "layout", "")});
    rows.push_back({"one trailing garbage byte", bytes + "x",
                    problem(Code::corrupt, {"1 bytes that belong to no tensor"}, "layout", "")});
    std::string header_pad = bytes;
    const std::uint64_t infos_end = g.field("tensor output.weight offset") + 8;
    REQUIRE(infos_end < g.data_offset);
    header_pad[infos_end] = 'Z';
    rows.push_back({"a nonzero byte in the padding after the tensor infos", header_pad,
                    problem(Code::corrupt, {"byte 0x5a at offset " + std::to_string(infos_end)}, "padding", "")});
    std::string tensor_pad = bytes;
    const std::uint64_t after_f16 = g.data_offset + g.offsets[1] + 10;
    tensor_pad[after_f16 + 3] = '\1';
    rows.push_back({"a nonzero byte in the padding between tensors", tensor_pad,
                    problem(Code::corrupt, {"byte 0x01 at offset " + std::to_string(after_f16 + 3), "'blk.0.ffn_down.weight'"}, "padding",
                     "")});
  }
  {
    Gguf g = file([](Gguf& f) { f.tensors[3].name = "token_embd.weight"; });
    const std::string bytes = g.build();
    rows.push_back({"a tensor name given twice", bytes,
                    problem(Code::corrupt, {"each tensor name once", "the first at offset " + std::to_string(g.field("tensor token_embd.weight name length"))},
                     "layout", "token_embd.weight")});
  }
  {
    Gguf g = file([](Gguf& f) { f.kvs.emplace_back("t.u8", vu8(1)); });
    const std::string bytes = g.build();
    rows.push_back({"a key given twice", bytes, problem(Code::corrupt, {"each key once", "kv 't.u8'"}, "layout", "")});
  }
  for (const auto& row : rows) check_row(row.label, row.bytes, row.expect);
}

TEST_CASE("a hostile count allocates nothing in proportion to it", "[gguf][limits]") {
  ckpt_test::TempDir dir;
  Gguf g = model_file();
  const std::string intact = g.build();
  for (const std::uint64_t at : {std::uint64_t{8}, std::uint64_t{16}, g.field("kv t.array_u32 value") + 4}) {
    for (const std::uint64_t count : {std::uint64_t{1} << 60, std::uint64_t{1} << 19, intact.size() / 13}) {
      const std::string bytes = with_u64(intact, at, count);
      ckpt_test::write_file(dir.file("hostile.gguf"), bytes);
      PosixFs fs;
      ckpt_test::HeapPeak peak;
      auto opened = open_gguf(fs, dir.file("hostile.gguf"));
      INFO("count " << count << " at offset " << at << ": " << (opened.ok() ? std::string("ok") : opened.status().to_string()));
      CHECK_FALSE(opened.ok());
      CHECK(peak.bytes() < 1024 * 1024);
    }
  }
}

TEST_CASE("a large vocabulary is read in bounded memory and summarised", "[gguf][limits]") {
  ckpt_test::TempDir dir;
  Gguf g;
  const std::vector<Val> tokens = token_list(200000);
  g.kvs.emplace_back("tokenizer.ggml.tokens", varr(STR, tokens));
  g.tensors = {{"w", kF32, {8}, 32, {}}};
  const std::string bytes = g.build();
  REQUIRE(bytes.size() > 2'000'000);
  ckpt_test::write_file(dir.file("vocab.gguf"), bytes);
  PosixFs fs;
  ckpt_test::HeapPeak peak;
  auto opened = open_gguf(fs, dir.file("vocab.gguf"));
  REQUIRE(opened.ok());
  CHECK(peak.bytes() < 512 * 1024);
  REQUIRE(opened->metadata.size() == 1);
  const std::string encoded = elements(tokens);
  CHECK(opened->metadata[0].second ==
        "array of 200000 string, xxh3-64 " + hex64(xxh3_64(encoded.data(), encoded.size())) + " of its encoded bytes");
  CHECK(opened->problems.empty());
}

TEST_CASE("a missing GGUF file is an error naming it", "[gguf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto opened = open_gguf(fs, dir.file("absent.gguf"));
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == Code::not_found);
  CHECK_THAT(opened.status().message(), Catch::Contains("absent.gguf"));
}

TEST_CASE("the ggml type table agrees with gguf-py's GGML_QUANT_SIZES on a sample", "[gguf]") {
  // (id, name, block, bytes) as gguf-py 0.19 constants.py computes them.
  const std::vector<std::tuple<std::uint32_t, std::string, std::uint32_t, std::uint32_t>> sample = {
      {0, "F32", 1, 4},       {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},     {10, "Q2_K", 256, 84},
      {11, "Q3_K", 256, 110}, {13, "Q5_K", 256, 176},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66},
      {19, "IQ1_S", 256, 50}, {21, "IQ3_S", 256, 110}, {23, "IQ4_XS", 256, 136}, {29, "IQ1_M", 256, 56},
      {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},   {40, "NVFP4", 64, 36},
  };
  for (const auto& [id, name, block, size] : sample) {
    const gguf::TypeInfo* t = gguf::type_info(id);
    REQUIRE(t != nullptr);
    CHECK(t->name == name);
    CHECK(t->block == block);
    CHECK(t->size == size);
  }
}
