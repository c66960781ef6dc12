// Tests for include/ckpt/interop/safetensors.hpp: hostile headers, round trips in both directions, and the
// export of a sharded step of a store (read through Checkpoint::open, sharded.hpp).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <ckpt/interop/safetensors.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/testing/sim_fs.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "heap_counter.hpp"  // replaces operator new in this program
#include "sharded_fixture.hpp"
#include "store_test_util.hpp"
#include "shard_test_util.hpp"
#include "test_util.hpp"
#include "thread_ranks.hpp"

using namespace ckpt;

namespace {

// u64 little-endian header length, header text, data buffer.
std::string st_bytes(std::uint64_t length, const std::string& json, const std::string& data) {
  unsigned char field[8];
  put_u64(field, length);
  return std::string(reinterpret_cast<const char*>(field), 8) + json + data;
}
std::string st_bytes(const std::string& json, const std::string& data) { return st_bytes(json.size(), json, data); }

// One well-formed entry: {"dtype":D,"shape":S,"data_offsets":[b,e]}.
std::string entry(const std::string& dtype, const std::string& shape, std::uint64_t b, std::uint64_t e) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
         std::to_string(e) + "]}";
}

// A file whose header holds only __metadata__ with that JSON value, and no data.
std::string metadata_only(const std::string& metadata) { return st_bytes("{\"__metadata__\":" + metadata + "}", ""); }

// A file holding one tensor 'a' with that header entry, then `data` as the data region.
std::string one_tensor(const std::string& dtype, const std::string& shape, std::uint64_t b, std::uint64_t e,
                       const std::string& data) {
  return st_bytes("{\"a\":" + entry(dtype, shape, b, e) + "}", data);
}

struct GenTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::string bytes;
};

std::uint64_t byte_size(const Shape& shape, DType dtype) {
  std::uint64_t n = 0;
  REQUIRE(shape_bytes(shape, dtype, n));
  return n;
}

// Writes a safetensors file whose data buffer holds the tensors in the given order (not name order),
// so a converter that follows names instead of offsets would be caught. Layout as ckpt writes it:
// __metadata__ first, entries in data order, fields dtype, shape, data_offsets, padded with spaces.
std::string make_safetensors(const std::vector<GenTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) json += "\"__metadata__\":" + nlohmann::json(metadata).dump();
  std::string data;
  for (const auto& t : tensors) {
    if (json.size() > 1) json += ",";
    json += nlohmann::json(t.name).dump() + ":{\"dtype\":\"" + std::string(format::dtype_info(t.dtype)->name) +
            "\",\"shape\":" + nlohmann::json(t.shape).dump() + ",\"data_offsets\":[" + std::to_string(data.size()) + "," +
            std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  return st_bytes(json, data);
}

std::vector<GenTensor> generated_tensors(std::uint64_t seed) {
  std::vector<GenTensor> out;
  std::uint64_t k = seed;
  auto add = [&](std::string name, DType dtype, Shape shape) {
    const auto n = static_cast<std::size_t>(byte_size(shape, dtype));
    const auto bytes = ckpt_test::random_bytes(n, ++k);
    out.push_back(GenTensor{std::move(name), dtype, std::move(shape), std::string(bytes.begin(), bytes.end())});
  };
  add("z.last.in.name.order", DType::F32, {3, 5000});  // spans several 4 KiB chunks and blocks
  for (const auto& d : format::kDTypes) add(std::string("dtype.") + std::string(d.name), d.dtype, {3, 7});
  add("scalar", DType::F64, {});
  add("empty.cols", DType::I32, {5, 0});  // empty tensors sort by name at a shared offset
  add("empty.rows", DType::F16, {0, 4});
  add("odd", DType::U8, {13, 1, 7});
  add("bool", DType::BOOL, {11});
  add("caf\xc3\xa9.\xe5\x90\x8d\xe5\x89\x8d", DType::BF16, {2, 3});
  add("a.first.in.name.order", DType::I64, {9001});
  add("wider.than.a.slice", DType::U8, {600001});  // several 256 KiB hash-and-write slices per block
  return out;
}

// Reads every tensor of a safetensors file through the library parser: name -> (dtype, shape, bytes).
struct Loaded {
  std::map<std::string, std::tuple<DType, Shape, std::string>> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;
};
Loaded load_safetensors(const std::string& path) {
  PosixFs fs;
  auto header = parse_safetensors_header(fs, path);
  INFO(header.status().to_string());
  REQUIRE(header.ok());
  const std::string file = ckpt_test::read_file(path);
  Loaded l;
  for (const auto& t : header->tensors)
    l.tensors[t.name] = {t.dtype, t.shape, file.substr(static_cast<std::size_t>(header->data_offset + t.begin),
                                                      static_cast<std::size_t>(t.end - t.begin))};
  l.metadata = header->metadata;
  return l;
}

// Saves `step` of the sharded fixture's tensors into the store at `path`, written by `world` ranks.
void save_step(const std::string& path, int world, std::uint64_t step) {
  PosixFs fs;
  const auto results = ckpt_test::run_ranks(world, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, ckpt_test::small_store_options(), comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
    CKPT_TRY(sharded_fixture::save_rank(*tx, static_cast<std::uint32_t>(world), rank, step));
    return tx->commit().status();
  });
  for (const auto& s : results) {
    INFO(s.to_string());
    REQUIRE(s.ok());
  }
}

// Every fixture tensor of `file` holds the bytes the ranks saved at `step`, whole.
void check_fixture_tensors(const Loaded& loaded, std::uint64_t step) {
  REQUIRE(loaded.tensors.size() == sharded_fixture::specs().size());
  for (const auto& t : sharded_fixture::specs()) {
    INFO("tensor " << t.name);
    const auto it = loaded.tensors.find(t.name);
    REQUIRE(it != loaded.tensors.end());
    CHECK(std::get<0>(it->second) == t.dtype);
    CHECK(std::get<1>(it->second) == t.shape);
    const auto expected = sharded_fixture::global_bytes(t, step);
    CHECK(std::get<2>(it->second) == std::string(expected.begin(), expected.end()));
  }
}

std::size_t files_in(const std::string& dir) {
  PosixFs fs;
  auto names = fs.list_dir(dir);
  REQUIRE(names.ok());
  return names->size();
}

// r failed with code and a message containing text.
template <class R>
void check_refused(const R& r, Code code, const std::string& text) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == code);
  CHECK(r.status().message().find(text) != std::string::npos);
}

// Where write_damaged flips bits: byte `at` of chunk `chunk` of tensor `tensor`, xor-ed with mask.
struct ChunkDamage {
  const char* tensor;
  std::size_t chunk;
  std::uint64_t at;
  unsigned char mask;
};

// A shard file at path holding, under each name, a U8 tensor of the same 20000 random bytes in 4 KiB
// chunks, then damaged as `damage` says.
void write_damaged(PosixFs& fs, const std::string& path, std::initializer_list<const char*> names, const ChunkDamage& damage) {
  const auto data = ckpt_test::random_bytes(20000, 9);
  std::uint64_t chunk_offset = 0;
  {
    auto w = ShardWriter::create(fs, path, ckpt_test::small_writer_options());
    REQUIRE(w.ok());
    for (const char* name : names) REQUIRE(w->add_tensor(name, DType::U8, {20000}, data.data(), data.size()).ok());
    const ShardReader r = ckpt_test::finish_and_open(fs, *w, path);
    const TensorRecord* t = r.index().find_tensor(damage.tensor);
    REQUIRE(t != nullptr);
    chunk_offset = r.index().chunks[r.index().pieces[t->piece_first].chunk_first + damage.chunk].offset;
  }
  ckpt_test::xor_byte(path, chunk_offset + damage.at, damage.mask);
}

// The built ckpt-convert, run with a command line; its exit status (output discarded).
struct ConvertTool {
  std::string path = std::string(CKPT_BINARY_DIR) + "/ckpt-convert";
  [[nodiscard]] bool built() const {
    PosixFs fs;
    return fs.stat(path).ok();
  }
  int operator()(const std::string& args) const { return ckpt_test::run_command(path + " " + args + " >/dev/null 2>&1"); }
};

}  // namespace

TEST_CASE("hostile safetensors headers are errors that name file and cause, never crashes", "[safetensors]") {
  const std::string f32x2 = entry("F32", "[2]", 0, 8);
  const std::string ones65 = "[" + [] { std::string s = "1"; for (int i = 0; i < 64; ++i) s += ",1"; return s; }() + "]";
  struct Case {
    const char* label;
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"shorter than the length field", "abc", "expected at least 8"},
      {"header length zero", st_bytes(0, "", ""), "header length 0"},
      {"header length one", st_bytes(1, "{", ""), "header length 1"},
      {"header length huge", st_bytes(~std::uint64_t{0}, "{}", ""), "exceeds the limit"},
      {"header length over 100 MiB", st_bytes((std::uint64_t{100} << 20) + 1, "{}", ""), "exceeds the limit"},
      {"header length larger than the file", st_bytes(1000, "{}", "12345678"), "bytes after the length field"},
      {"invalid JSON", st_bytes("{\"a\":", ""), "not valid JSON"},
      {"garbage after the JSON object", st_bytes("{} x", ""), "not valid JSON"},
      {"JSON comment", st_bytes("{/*c*/}", ""), "not valid JSON"},
      {"NUL padding instead of spaces", st_bytes(std::string("{}\0\0", 4), ""), "offset 10: header is not valid JSON"},
      {"NUL then garbage", st_bytes(std::string("{}\0{\"a\":", 8), "12"), "found a NUL byte"},
      {"raw invalid UTF-8 in a name", st_bytes("{\"\xff\":" + f32x2 + "}", "12345678"), "not valid JSON"},
      {"overlong UTF-8 in a name", st_bytes("{\"\xc0\xaf\":" + f32x2 + "}", "12345678"), "not valid JSON"},
      {"lone high surrogate escape in a name", st_bytes("{\"\\ud800\":" + f32x2 + "}", "12345678"), "not valid JSON"},
      {"lone low surrogate escape in a name", st_bytes("{\"\\udc00x\":" + f32x2 + "}", "12345678"), "not valid JSON"},
      {"header is an array", st_bytes("[]", ""), "must be a JSON object, found an array"},
      {"header is a number", st_bytes("5 ", ""), "must be a JSON object, found an integer 5"},
      {"header is null", st_bytes("null", ""), "must be a JSON object, found null"},
      {"entry is a number", st_bytes("{\"a\":5}", ""), "tensor 'a': expected an object, found an integer 5"},
      {"entry is an array", st_bytes("{\"a\":[]}", ""), "tensor 'a': expected an object, found an array"},
      {"entry is a string", st_bytes("{\"a\":\"x\"}", ""), "expected an object, found a string"},
      {"missing dtype", st_bytes("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "12345678"), "missing field 'dtype'"},
      {"missing shape", st_bytes("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", "12345678"), "missing field 'shape'"},
      {"missing data_offsets", st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", "12345678"), "missing field 'data_offsets'"},
      {"extra field", st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}", "12345678"),
       "unknown field 'extra'"},
      {"unknown dtype", one_tensor("F4", "[2]", 0, 1, "1"), "dtype expected one of BOOL"},
      {"lower-case dtype", one_tensor("f32", "[2]", 0, 8, "12345678"), "found a string \"f32\""},
      {"dtype not a string", st_bytes("{\"a\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", "12345678"),
       "dtype expected one of"},
      {"negative shape", one_tensor("F32", "[-1]", 0, 8, "12345678"),
       "shape[0] expected a non-negative integer, found an integer -1"},
      {"fractional shape", one_tensor("F32", "[2.5]", 0, 8, "12345678"), "found a non-integer number 2.5"},
      {"float-spelled shape", one_tensor("F32", "[2.0]", 0, 8, "12345678"), "found a non-integer number"},
      {"string shape element", one_tensor("F32", "[\"2\"]", 0, 8, "12345678"), "found a string"},
      {"shape element past 64 bits", one_tensor("U8", "[18446744073709551616]", 0, 8, "12345678"),
       "found a non-integer number"},
      {"shape not an array", one_tensor("F32", "2", 0, 8, "12345678"), "shape expected an array"},
      {"nested shape", one_tensor("F32", "[[2]]", 0, 8, "12345678"), "found a nested array"},
      {"shape object", one_tensor("F32", "{}", 0, 8, "12345678"), "field 'shape': expected an array"},
      {"rank over 64", one_tensor("U8", ones65, 0, 1, "1"), "at most 64 elements"},
      {"element count overflows", one_tensor("U8", "[4294967296,4294967296]", 0, 8, "12345678"),
       "overflows 64 bits"},
      {"byte count overflows", one_tensor("F32", "[4611686018427387904]", 0, 8, "12345678"),
       "overflows 64 bits"},
      {"offsets beyond the data buffer", one_tensor("F32", "[25]", 0, 100, "12345678"),
       "expected within the data buffer of 8 bytes"},
      {"offsets end before begin", one_tensor("U8", "[0]", 8, 4, "12345678"), "end before they begin"},
      {"one offset", st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}", ""), "data_offsets expected [begin, end]"},
      {"three offsets", st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0,0]}}", ""), "data_offsets expected"},
      {"negative offset", st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,0]}}", ""), "data_offsets expected"},
      {"size mismatch", one_tensor("F32", "[2]", 0, 4, "1234"), "hold 4 bytes, expected 8"},
      {"overlap", st_bytes("{\"a\":" + f32x2 + ",\"b\":" + entry("F32", "[2]", 4, 12) + "}", "123456789012"), "overlap tensor 'a'"},
      {"empty tensor inside another", st_bytes("{\"a\":" + f32x2 + ",\"z\":" + entry("U8", "[0]", 4, 4) + "}", "12345678"),
       "overlap tensor 'a'"},
      {"hole between tensors", st_bytes("{\"a\":" + entry("F32", "[1]", 0, 4) + ",\"b\":" + entry("F32", "[1]", 8, 12) + "}", "123456789012"),
       "hole before tensor 'b'"},
      {"hole at the start", st_bytes("{\"b\":" + entry("F32", "[1]", 4, 8) + "}", "12345678"), "hole before tensor 'b'"},
      {"trailing bytes after the data", one_tensor("F32", "[1]", 0, 4, "123456"), "2 trailing bytes"},
      {"data but no tensors", st_bytes("{}", "1234"), "4 trailing bytes"},
      {"duplicate tensor key", st_bytes("{\"a\":" + entry("U8", "[0]", 0, 0) + ",\"a\":" + entry("U8", "[0]", 0, 0) + "}", ""),
       "appears twice"},
      {"duplicate field", st_bytes("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", ""),
       "appears twice"},
      {"metadata with an integer value", metadata_only("{\"k\":1}"), "__metadata__ key 'k': expected a string value, found an integer 1"},
      {"metadata with null", metadata_only("{\"k\":null}"), "found null"},
      {"metadata with an object value", metadata_only("{\"k\":{}}"), "expected a string, found an object"},
      {"metadata with an array value", metadata_only("{\"k\":[\"v\"]}"), "expected a string, found an array"},
      {"metadata not an object", metadata_only("\"x\""), "__metadata__: expected an object, found a string"},
      {"metadata key twice", metadata_only("{\"k\":\"1\",\"k\":\"2\"}"), "appears twice"},
      {"metadata twice", st_bytes("{\"__metadata__\":{},\"__metadata__\":{}}", ""), "appears twice"},
      {"control character in a name is escaped in the message", st_bytes("{\"a\\nb\":5}", ""), "tensor 'a\\x0ab'"},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      const ckpt_test::ScratchFile file("hostile.safetensors", c.bytes);
      const std::string& path = file.path;
      PosixFs fs;
      auto header = parse_safetensors_header(fs, path);
      REQUIRE_FALSE(header.ok());
      const std::string message = header.status().message();
      INFO(message);
      CHECK(header.status().code() == Code::corrupt);
      CHECK(message.find(path) != std::string::npos);
      CHECK(message.find(c.expect) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
      // The converter refuses it the same way and leaves nothing behind.
      auto converted = safetensors_to_ckpt(fs, path, file.dir.file("out.ckpt"));
      REQUIRE_FALSE(converted.ok());
      CHECK(converted.status().message() == message);
      CHECK(files_in(file.dir.path()) == 1);
    }
  }
}

TEST_CASE("edge cases that safetensors allows are accepted", "[safetensors]") {
  struct Case {
    const char* label;
    std::string json;
    std::string data;
    std::size_t tensors;
  };
  const std::vector<Case> cases = {
      {"empty header", "{}", "", 0},
      {"padded with spaces", "{}      ", "", 0},
      {"leading whitespace", " \n{}", "", 0},
      {"scalar", "{\"s\":" + entry("F64", "[]", 0, 8) + "}", "12345678", 1},
      {"empty tensors share an offset", "{\"a\":" + entry("U8", "[0]", 0, 0) + ",\"b\":" + entry("F32", "[0,3]", 0, 0) + "}", "", 2},
      {"empty tensor at the end", "{\"a\":" + entry("U8", "[3]", 0, 3) + ",\"e\":" + entry("U8", "[0]", 3, 3) + "}", "123", 2},
      {"escaped non-ASCII name", "{\"caf\\u00e9\":" + entry("U8", "[1]", 0, 1) + "}", "1", 1},
      {"surrogate pair name", "{\"\\ud83d\\ude00\":" + entry("U8", "[1]", 0, 1) + "}", "1", 1},
      {"empty metadata", "{\"__metadata__\":{}}", "", 0},
      {"keys in any order", "{\"b\":" + entry("U8", "[1]", 1, 2) + ",\"a\":" + entry("U8", "[1]", 0, 1) + "}", "12", 2},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      const ckpt_test::ScratchFile file("edge.safetensors", st_bytes(c.json, c.data));
      const std::string& path = file.path;
      PosixFs fs;
      auto header = parse_safetensors_header(fs, path);
      INFO(header.status().to_string());
      REQUIRE(header.ok());
      CHECK(header->tensors.size() == c.tensors);
      CHECK(header->data_size == c.data.size());
      for (std::size_t i = 1; i < header->tensors.size(); ++i) CHECK(header->tensors[i - 1].end <= header->tensors[i].begin);
    }
  }
  SECTION("a surrogate pair escape decodes to UTF-8") {
    auto h = parse_safetensors_json("{\"\\ud83d\\ude00\":" + entry("U8", "[1]", 0, 1) + "}", 1, "x");
    REQUIRE(h.ok());
    CHECK(h->tensors[0].name == "\xf0\x9f\x98\x80");
  }
}

TEST_CASE("mutated headers never crash the parser", "[safetensors]") {
  const auto tensors = generated_tensors(7);
  const std::string good = make_safetensors({tensors[0], tensors[3], tensors[20]}, {{"k", "v"}});
  const std::uint64_t header_end = 8 + get_u64(reinterpret_cast<const unsigned char*>(good.data()));
  std::mt19937_64 rng(42);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = static_cast<std::size_t>(rng() % header_end);
      switch (rng() % 3) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes[at] = "{}[],:\"0-9e.\\ "[rng() % 15]; break;
        default: bytes[at] ^= static_cast<char>(1u << (rng() % 8)); break;
      }
    }
    const std::string json = bytes.substr(8, static_cast<std::size_t>(header_end - 8));
    std::uint64_t length = get_u64(reinterpret_cast<const unsigned char*>(bytes.data()));
    auto h = parse_safetensors_json(json, bytes.size() - header_end, "mutant");
    if (length == json.size() && h.ok()) ++accepted;
    if (!h.ok()) CHECK(h.status().code() == Code::corrupt);
  }
  CHECK(accepted < 3000);  // most mutations are caught
}

TEST_CASE("safetensors to ckpt and back preserves names, dtypes, shapes, bytes and metadata", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto tensors = generated_tensors(1);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}, {"", "empty key"}};
  std::map<std::string, std::string> ckpt_metadata = metadata;
  ckpt_metadata.erase("");  // ckpt keys are never empty: tested separately below
  const std::string in = dir.file("in.safetensors");
  ckpt_test::write_file(in, make_safetensors(tensors, ckpt_metadata));

  ConvertOptions options;
  options.chunk_size_log2 = 12;
  options.alignment_log2 = 6;
  options.block_size = 5000;  // blocks that straddle chunk boundaries
  std::uint64_t last_done = 0, last_total = 0;
  options.progress = [&](std::uint64_t done, std::uint64_t total) {
    CHECK(done >= last_done);
    last_done = done;
    last_total = total;
  };
  auto to_ckpt = safetensors_to_ckpt(fs, in, dir.file("mid.ckpt"), options);
  INFO(to_ckpt.status().to_string());
  REQUIRE(to_ckpt.ok());
  CHECK(to_ckpt->tensors == tensors.size());
  CHECK(last_done == last_total);

  {
    auto reader = ShardReader::open(fs, dir.file("mid.ckpt"));
    REQUIRE(reader.ok());
    CHECK(reader->superblock().chunk_size() == 4096);
    const Index& index = reader->index();
    REQUIRE(index.tensors.size() == tensors.size());
    // Written in data-offset order, which is the generator's order.
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      CHECK(index.tensors[i].name == t.name);
      CHECK(index.tensors[i].dtype == t.dtype);
      CHECK(index.tensors[i].shape == t.shape);
      std::string back(t.bytes.size(), '\0');
      REQUIRE(reader->read_tensor(t.name, back.data(), back.size()).ok());
      CHECK(back == t.bytes);
    }
    REQUIRE(index.metadata.size() == ckpt_metadata.size());
    for (const auto& [key, value] : ckpt_metadata) {
      const MetaEntry* m = index.find_metadata(key);
      REQUIRE(m != nullptr);
      CHECK(m->value == Value(value));
    }
  }

  last_done = 0;
  auto back = ckpt_to_safetensors(fs, dir.file("mid.ckpt"), dir.file("back.safetensors"), options);
  INFO(back.status().to_string());
  REQUIRE(back.ok());
  CHECK(back->warnings.empty());
  const Loaded loaded = load_safetensors(dir.file("back.safetensors"));
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& t : tensors) {
    const auto it = loaded.tensors.find(t.name);
    REQUIRE(it != loaded.tensors.end());
    CHECK(std::get<0>(it->second) == t.dtype);
    CHECK(std::get<1>(it->second) == t.shape);
    CHECK(std::get<2>(it->second) == t.bytes);
  }
  CHECK(loaded.metadata == std::vector<std::pair<std::string, std::string>>(ckpt_metadata.begin(), ckpt_metadata.end()));
  // Same layout and header as the input: the round trip reproduces the file byte for byte.
  CHECK(ckpt_test::read_file(dir.file("back.safetensors")) == ckpt_test::read_file(in));
  // The header is padded to a multiple of 8 so the data buffer is aligned (reference layout).
  const std::string written = ckpt_test::read_file(dir.file("back.safetensors"));
  CHECK(get_u64(reinterpret_cast<const unsigned char*>(written.data())) % 8 == 0);
  CHECK(files_in(dir.path()) == 3);  // no temporary files left
}

TEST_CASE("a mapped input converts like a read one", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto tensors = generated_tensors(11);
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(tensors, {{"k", "v"}}));
  ConvertOptions options;
  options.use_mmap = true;
  options.block_size = 4096;  // many mappings, most not page-aligned in the file
  auto r = safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("mapped.ckpt"), options);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  REQUIRE(ckpt_to_safetensors(fs, dir.file("mapped.ckpt"), dir.file("back.safetensors")).ok());
  CHECK(ckpt_test::read_file(dir.file("back.safetensors")) == ckpt_test::read_file(dir.file("in.safetensors")));
}

TEST_CASE("an empty metadata key cannot become a ckpt key", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors({}, {{"", "v"}}));
  auto r = safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("out.ckpt"));
  check_refused(r, Code::invalid_argument, "in.safetensors");
  CHECK(files_in(dir.path()) == 1);
}

TEST_CASE("a tensor split into pieces is assembled in row-major order", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const Shape shape = {5, 6, 700};  // U16: 1400 bytes per [1, 1, 700] row
  const auto full = ckpt_test::random_bytes(5 * 6 * 700 * 2, 3);
  const Shape rows_shape = {7, 300};
  const auto rows = ckpt_test::random_bytes(7 * 300 * 4, 4);
  // Copies the region [offsets, offsets + extent) of a row-major tensor.
  auto region = [](const std::vector<unsigned char>& src, const Shape& global, const Shape& offsets, const Shape& extent, std::size_t esize) {
    std::vector<unsigned char> out;
    std::vector<std::uint64_t> idx(global.size(), 0);
    std::uint64_t count = 1;
    for (auto e : extent) count *= e;
    for (std::uint64_t n = 0; n < count; ++n) {
      std::uint64_t flat = 0;
      for (std::size_t d = 0; d < global.size(); ++d) flat = flat * global[d] + offsets[d] + idx[d];
      out.insert(out.end(), src.begin() + static_cast<std::ptrdiff_t>(flat * esize), src.begin() + static_cast<std::ptrdiff_t>((flat + 1) * esize));
      for (std::size_t d = global.size(); d-- > 0;) {
        if (++idx[d] < extent[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  };
  {
    auto w = ShardWriter::create(fs, dir.file("pieces.ckpt"), ckpt_test::small_writer_options());
    REQUIRE(w.ok());
    // Column pieces along dimension 1, written in reverse order.
    for (const auto& [off, ext] : std::vector<std::pair<Shape, Shape>>{{{0, 2, 0}, {5, 4, 700}}, {{0, 0, 0}, {5, 2, 700}}}) {
      const auto bytes = region(full, shape, off, ext, 2);
      ckpt_test::write_piece(*w, "cols", DType::U16, shape, off, ext, bytes.data(), bytes.size());
    }
    for (const auto& [off, ext] : std::vector<std::pair<Shape, Shape>>{{{3, 0}, {4, 300}}, {{0, 0}, {3, 300}}}) {
      const auto bytes = region(rows, rows_shape, off, ext, 4);
      ckpt_test::write_piece(*w, "rows", DType::F32, rows_shape, off, ext, bytes.data(), bytes.size());
    }
    REQUIRE(w->set_metadata("step", Value("12")).ok());
    REQUIRE(w->finish().ok());
  }
  ConvertOptions options;
  options.block_size = 4096;  // forces several reads per tensor, split below the leading dimension
  auto r = ckpt_to_safetensors(fs, dir.file("pieces.ckpt"), dir.file("out.safetensors"), options);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const Loaded loaded = load_safetensors(dir.file("out.safetensors"));
  CHECK(std::get<2>(loaded.tensors.at("cols")) == std::string(full.begin(), full.end()));
  CHECK(std::get<1>(loaded.tensors.at("cols")) == shape);
  CHECK(std::get<2>(loaded.tensors.at("rows")) == std::string(rows.begin(), rows.end()));
  CHECK(loaded.metadata == std::vector<std::pair<std::string, std::string>>{{"step", "12"}});
}

TEST_CASE("metadata safetensors cannot hold is refused unless stringified", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  {
    auto w = ShardWriter::create(fs, dir.file("m.ckpt"));
    REQUIRE(w.ok());
    const unsigned char one = 1;
    REQUIRE(w->add_tensor("t", DType::U8, {1}, &one, 1).ok());
    REQUIRE(w->set_metadata("step", Value(std::int64_t{-42})).ok());
    REQUIRE(w->set_metadata("lr", Value(0.1)).ok());
    REQUIRE(w->set_metadata("done", Value(true)).ok());
    REQUIRE(w->set_metadata("rng", Value(Bytes{std::string("\x00\xff\x10", 3)})).ok());
    REQUIRE(w->set_metadata("name", Value("run-1")).ok());
    REQUIRE(w->finish().ok());
  }
  auto refused = ckpt_to_safetensors(fs, dir.file("m.ckpt"), dir.file("m.safetensors"));
  check_refused(refused, Code::unsupported, "m.ckpt");
  CHECK(refused.status().message().find("'step' is int64") != std::string::npos);
  CHECK(files_in(dir.path()) == 1);

  ConvertOptions options;
  options.stringify_metadata = true;
  auto converted = ckpt_to_safetensors(fs, dir.file("m.ckpt"), dir.file("m.safetensors"), options);
  REQUIRE(converted.ok());
  CHECK(converted->warnings.size() == 4);
  const Loaded loaded = load_safetensors(dir.file("m.safetensors"));
  const std::map<std::string, std::string> got(loaded.metadata.begin(), loaded.metadata.end());
  CHECK(got == std::map<std::string, std::string>{{"step", "-42"}, {"lr", "0.1"}, {"done", "true"}, {"rng", "00ff10"}, {"name", "run-1"}});
}

TEST_CASE("a damaged chunk stops ckpt to safetensors and leaves no output", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_damaged(fs, dir.file("d.ckpt"), {"w"}, {"w", 1, 17, 0x04});
  auto r = ckpt_to_safetensors(fs, dir.file("d.ckpt"), dir.file("d.safetensors"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::corrupt);
  const std::string message = r.status().message();
  INFO(message);
  CHECK(message.find("d.ckpt: tensor 'w' piece 0 chunk 1") != std::string::npos);  // the shard reader's wording
  CHECK(message.find("digest expected") != std::string::npos);
  CHECK(files_in(dir.path()) == 1);
}

TEST_CASE("ckpt files safetensors cannot express are refused", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto data = ckpt_test::random_bytes(64, 5);
  SECTION("a tensor only partly in this file") {
    auto w = ShardWriter::create(fs, dir.file("p.ckpt"));
    REQUIRE(w.ok());
    ckpt_test::write_piece(*w, "half", DType::U8, {8, 8}, {0, 0}, {4, 8}, data.data(), 32);
    REQUIRE(w->finish().ok());
    auto r = ckpt_to_safetensors(fs, dir.file("p.ckpt"), dir.file("p.safetensors"));
    // Checkpoint::open's verdict on a file that is one shard of a step (spec/SHARDING.md 4).
    check_refused(r, Code::invalid_argument, "tensor 'half': its pieces hold 32 of 64 elements");
  }
  SECTION("a tensor named __metadata__") {
    auto w = ShardWriter::create(fs, dir.file("p.ckpt"));
    REQUIRE(w.ok());
    REQUIRE(w->add_tensor("__metadata__", DType::U8, {64}, data.data(), 64).ok());
    REQUIRE(w->finish().ok());
    auto r = ckpt_to_safetensors(fs, dir.file("p.ckpt"), dir.file("p.safetensors"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("reserved") != std::string::npos);
  }
  CHECK(files_in(dir.path()) == 1);
}

TEST_CASE("an existing output is replaced only when asked", "[safetensors]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(generated_tensors(2), {}));
  ckpt_test::write_file(dir.file("out.ckpt"), "old");
  auto refused = safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("out.ckpt"));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::conflict);
  CHECK(ckpt_test::read_file(dir.file("out.ckpt")) == "old");
  ConvertOptions options;
  options.overwrite = true;
  REQUIRE(safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("out.ckpt"), options).ok());
  CHECK(ShardReader::open(fs, dir.file("out.ckpt")).ok());
  CHECK(files_in(dir.path()) == 2);
}

TEST_CASE("ckpt-convert maps outcomes to exit codes", "[safetensors][tool]") {
  const ConvertTool run;
  if (!run.built()) {
    WARN("ckpt-convert is not built; skipping the tool checks");
    return;
  }
  ckpt_test::TempDir dir;
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(generated_tensors(3), {{"k", "v"}}));
  ckpt_test::write_file(dir.file("bad.safetensors"), st_bytes("{\"a\":", ""));
  CHECK(run("--help") == 0);
  CHECK(run("") == 2);
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("out.bin")) == 2);
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("out.ckpt") + " --chunk-size 3000") == 2);
  CHECK(run(dir.file("bad.safetensors") + " " + dir.file("bad.ckpt")) == 2);
  CHECK(run(dir.file("missing.safetensors") + " " + dir.file("m.ckpt")) == 2);
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("out.ckpt") + " --chunk-size 4KiB --json") == 0);
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("out.ckpt")) == 2);  // exists
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("out.ckpt") + " --force") == 0);
  CHECK(run(dir.file("out.ckpt") + " " + dir.file("back.safetensors")) == 0);
  CHECK(ckpt_test::read_file(dir.file("back.safetensors")) == ckpt_test::read_file(dir.file("in.safetensors")));
}

TEST_CASE("a header of many short entries parses in a small multiple of its size (issue 9)", "[safetensors][limits]") {
  // 100000 __metadata__ pairs of 13 bytes and 20000 empty tensors: each is kept once, never in a DOM.
  std::string json = "{\"__metadata__\":{";
  for (int i = 0; i < 100000; ++i) json += (i ? ",\"" : "\"") + std::to_string(1000000 + i) + "\":\"\"";
  json += "}";
  for (int i = 0; i < 20000; ++i) json += ",\"t" + std::to_string(i) + "\":" + entry("U8", "[0]", 0, 0);
  json += "}";
  ckpt_test::HeapPeak peak;
  auto h = parse_safetensors_json(json, 0, "many.safetensors");
  const std::int64_t used = peak.bytes();
  INFO(h.status().message());
  REQUIRE(h.ok());
  CHECK(h->metadata.size() == 100000);
  CHECK(h->tensors.size() == 20000);
  CHECK(std::is_sorted(h->metadata.begin(), h->metadata.end()));
  INFO("parse used " << used << " heap bytes for " << json.size() << " header bytes");
  CHECK(used < static_cast<std::int64_t>(8 * json.size()));

  SECTION("a key given twice among them is still found") {
    auto twice = parse_safetensors_json("{\"__metadata__\":{\"b\":\"1\",\"a\":\"\",\"b\":\"2\"}}", 0, "twice.safetensors");
    REQUIRE_FALSE(twice.ok());
    CHECK(twice.status().message() == "twice.safetensors: __metadata__ key 'b': key appears twice");
  }
}

TEST_CASE("a two-rank step of a store exports whole, each tensor gathered from both shards", "[safetensors][store]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  save_step(store, 2, 4);
  save_step(store, 2, 6);
  ConvertOptions options;
  options.block_size = 4096;  // several blocks per shard piece, straddling its 4 KiB chunks
  std::uint64_t last_done = 0, last_total = 0;
  options.progress = [&](std::uint64_t done, std::uint64_t total) {
    CHECK(done >= last_done);
    last_done = done;
    last_total = total;
  };
  const std::string out = dir.file("latest.safetensors");

  SECTION("a store: its latest committed step") {
    auto r = ckpt_to_safetensors(fs, store, out, options);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(r->tensors == sharded_fixture::specs().size());
    // The fixture's state holds RNG bytes, an optimizer list and a value: left out, and said so.
    REQUIRE(r->warnings.size() == 1);
    CHECK(r->warnings[0].find("training state of step 6 (") != std::string::npos);
    CHECK(r->warnings[0].find(" values) not exported") != std::string::npos);
    CHECK(last_done == last_total);
    CHECK(last_total == r->data_bytes);
    const Loaded loaded = load_safetensors(out);
    check_fixture_tensors(loaded, 6);
    // The step number is the one piece of the training state safetensors can carry as text.
    CHECK(loaded.metadata == std::vector<std::pair<std::string, std::string>>{{"ckpt.step", "6"}});
    CHECK(files_in(dir.path()) == 2);  // the store and the output: no temporary left
  }
  SECTION("options.step chooses an older step") {
    options.step = 4;
    auto r = ckpt_to_safetensors(fs, store, out, options);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    const Loaded loaded = load_safetensors(out);
    check_fixture_tensors(loaded, 4);
    CHECK(loaded.metadata == std::vector<std::pair<std::string, std::string>>{{"ckpt.step", "4"}});
  }
  SECTION("a step directory") {
    auto opened = Store::open(fs, store, Access::read_only);
    REQUIRE(opened.ok());
    auto four = (*opened)->find(4);
    REQUIRE(four.ok());
    auto r = ckpt_to_safetensors(fs, store + "/" + four->dir, out, options);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    check_fixture_tensors(load_safetensors(out), 4);
  }
  SECTION("stringified, the whole training state comes along in hex") {
    options.stringify_metadata = true;
    auto r = ckpt_to_safetensors(fs, store, out, options);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    REQUIRE(r->warnings.size() == 1);
    CHECK(r->warnings[0].find("'ckpt.training_state' (bytes) written as text in hex") != std::string::npos);
    const Loaded loaded = load_safetensors(out);
    const std::map<std::string, std::string> got(loaded.metadata.begin(), loaded.metadata.end());
    REQUIRE(got.count("ckpt.training_state") == 1);
    auto opened = Store::open(fs, store, Access::read_only);
    REQUIRE(opened.ok());
    auto step_reader = (*opened)->open_latest();
    REQUIRE(step_reader.ok());
    // The encoding of a standalone file's kTrainingStateKey (spec/SHARDING.md 6.3), as lower-case hex.
    std::string hex;
    for (const unsigned char c : encode_state_metadata(step_reader->state())) {
      const char digits[] = "0123456789abcdef";
      hex += digits[c >> 4];
      hex += digits[c & 15];
    }
    CHECK(got.at("ckpt.training_state") == hex);
    CHECK(got.at("ckpt.step") == "6");
  }
  SECTION("a missing step is a clear error and writes nothing") {
    options.step = 5;
    auto r = ckpt_to_safetensors(fs, store, out, options);
    INFO(r.status().to_string());
    check_refused(r, Code::not_found, store + ": no committed step 5");
    CHECK(files_in(dir.path()) == 1);
  }
}

TEST_CASE("a damaged chunk in one shard of a step stops the export and leaves no output", "[safetensors][store]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  save_step(store, 2, 4);
  auto opened = Store::open(fs, store, Access::read_only);
  REQUIRE(opened.ok());
  const auto latest = (*opened)->latest();
  REQUIRE(latest);
  const std::string shard = store + "/" + latest->dir + "/shard-00001-of-00002.ckpt";
  std::uint64_t at = 0;
  {
    auto reader = ShardReader::open(fs, shard);
    REQUIRE(reader.ok());
    const TensorRecord* emb = reader->index().find_tensor("emb");
    REQUIRE(emb != nullptr);
    at = reader->index().chunks[reader->index().pieces[emb->piece_first].chunk_first].offset + 5;
  }
  ckpt_test::xor_byte(shard, at, 0x20);

  auto r = ckpt_to_safetensors(fs, store, dir.file("out.safetensors"));
  REQUIRE_FALSE(r.ok());
  const std::string message = r.status().message();
  INFO(message);
  CHECK(r.status().code() == Code::corrupt);
  CHECK(message.find(shard + ": tensor 'emb' piece 0 chunk 0 ") != std::string::npos);
  CHECK(message.find("digest expected") != std::string::npos);
  CHECK_FALSE(fs.stat(dir.file("out.safetensors")).ok());
  CHECK(files_in(dir.path()) == 1);  // the store alone: no output, no temporary
}

TEST_CASE("ckpt-convert exports a store or a step directory, --step picks the step", "[safetensors][tool]") {
  PosixFs fs;
  const ConvertTool run;
  if (!run.built()) {
    WARN("ckpt-convert is not built; skipping the tool checks");
    return;
  }
  ckpt_test::TempDir dir;
  const std::string store = dir.file("s");
  save_step(store, 2, 4);
  save_step(store, 2, 6);
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(generated_tensors(4), {}));
  CHECK(run(store + " " + dir.file("latest.safetensors")) == 0);
  check_fixture_tensors(load_safetensors(dir.file("latest.safetensors")), 6);
  CHECK(run(store + "/ " + dir.file("four.safetensors") + " --step 4 --json") == 0);
  check_fixture_tensors(load_safetensors(dir.file("four.safetensors")), 4);
  CHECK(run(store + " " + dir.file("five.safetensors") + " --step 5") == 2);  // no such step
  CHECK_FALSE(fs.stat(dir.file("five.safetensors")).ok());
  CHECK(run(dir.file("in.safetensors") + " " + dir.file("x.ckpt") + " --step 4") == 2);  // --step is for the export only
  CHECK_FALSE(fs.stat(dir.file("x.ckpt")).ok());
  CHECK(run(store + " " + dir.file("x.ckpt")) == 2);  // a directory cannot become a .ckpt here
}

TEST_CASE("a shard's own ckpt.step metadata is refused on export, never overwritten", "[safetensors][store]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string store = dir.file("s");
  {
    auto s = Store::open(fs, store, Access::read_write, ckpt_test::small_store_options());
    REQUIRE(s.ok());
    auto tx = (*s)->begin(3);
    REQUIRE(tx.ok());
    const std::vector<float> w(16, 1.0f);
    REQUIRE((*tx)->add_tensor("w", DType::F32, {16}, w.data(), w.size() * 4).ok());
    REQUIRE((*tx)->shard_writer().set_metadata("ckpt.step", Value("7")).ok());
    REQUIRE((*tx)->commit().ok());
  }
  const std::string out = dir.file("o.safetensors");
  auto r = ckpt_to_safetensors(fs, store, out, ConvertOptions{});
  check_refused(r, Code::conflict, "ckpt.step");
  CHECK(files_in(dir.path()) == 1);  // the store only: no output, no temporary
}

// --- Hugging Face sharded sets (spec/SHARDING.md 6.5) ---------------------------------------------

namespace {

// A sharded set as files: name -> bytes, the index included.
using SetFiles = std::map<std::string, std::string>;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kFile1 = "model-00001-of-00002.safetensors";
constexpr const char* kFile2 = "model-00002-of-00002.safetensors";

GenTensor gen(std::string name, DType dtype, Shape shape, std::uint64_t seed) {
  const auto bytes = ckpt_test::random_bytes(static_cast<std::size_t>(byte_size(shape, dtype)), seed);
  return GenTensor{std::move(name), dtype, std::move(shape), std::string(bytes.begin(), bytes.end())};
}

// The index as save_pretrained writes it: {"metadata": {"total_size": N}, "weight_map": {...}}.
std::string index_json(const std::map<std::string, std::string>& weight_map, std::uint64_t total_size) {
  nlohmann::json j;
  j["metadata"]["total_size"] = total_size;
  j["weight_map"] = weight_map;
  return j.dump(2) + "\n";
}

// Two files, both with __metadata__ {"format": "pt"} as save_pretrained writes them, and their index.
struct TwoFileSet {
  std::vector<GenTensor> first = {gen("a", DType::U8, {100}, 1), gen("b", DType::F32, {10}, 2), gen("c", DType::I16, {7}, 3)};
  std::vector<GenTensor> second = {gen("d", DType::U8, {50}, 4), gen("e", DType::F64, {0}, 5)};
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::map<std::string, std::string> weight_map() const {
    std::map<std::string, std::string> m;
    for (const auto& t : first) m[t.name] = kFile1;
    for (const auto& t : second) m[t.name] = kFile2;
    return m;
  }
  SetFiles files() const {
    return {{kFile1, make_safetensors(first, metadata)},
            {kFile2, make_safetensors(second, metadata)},
            {kIndexName, index_json(weight_map(), 100 + 40 + 14 + 50)}};
  }
};

void write_set(const std::string& dir, const SetFiles& files) {
  PosixFs fs;
  if (!fs.stat(dir).ok()) REQUIRE(fs.mkdir(dir).ok());
  for (const auto& [name, bytes] : files) ckpt_test::write_file(join_path(dir, name), bytes);
}

// What a set holds: its index, parsed, and each file's tensors and metadata.
struct LoadedSet {
  nlohmann::json index;
  std::map<std::string, Loaded> files;
};
LoadedSet load_set(const std::string& index_path) {
  LoadedSet s;
  s.index = nlohmann::json::parse(ckpt_test::read_file(index_path));
  std::set<std::string> names;
  for (const auto& [tensor, file] : s.index["weight_map"].items()) names.insert(file.get<std::string>());
  for (const auto& name : names) s.files[name] = load_safetensors(join_path(parent_path(index_path), name));
  return s;
}

}  // namespace

TEST_CASE("a sharded set converts to one file holding every tensor of every file", "[safetensors][hf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const TwoFileSet set;
  write_set(dir.file("hf"), set.files());
  const std::string out = dir.file("model.ckpt");
  SECTION("named by its index") {
    auto r = safetensors_to_ckpt(fs, dir.file("hf") + "/" + kIndexName, out);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(r->tensors == 5);
    CHECK(r->data_bytes == 204);
    CHECK(r->warnings.empty());
    CHECK(r->files == std::vector<std::string>{dir.file("hf") + "/" + kFile1, dir.file("hf") + "/" + kFile2});
  }
  SECTION("named by its directory") {
    auto r = safetensors_to_ckpt(fs, dir.file("hf"), out);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
  }
  auto reader = ShardReader::open(fs, out);
  REQUIRE(reader.ok());
  for (const auto* part : {&set.first, &set.second})
    for (const auto& t : *part) {
      INFO("tensor " << t.name);
      const TensorRecord* rec = reader->index().find_tensor(t.name);
      REQUIRE(rec != nullptr);
      CHECK(rec->dtype == t.dtype);
      std::string bytes(t.bytes.size(), '\0');
      REQUIRE(reader->read_tensor(t.name, bytes.data(), bytes.size()).ok());
      CHECK(bytes == t.bytes);
    }
  const MetaEntry* format = reader->index().find_metadata("format");
  REQUIRE(format != nullptr);
  CHECK(format->value == Value("pt"));
  CHECK(reader->index().metadata.size() == 1);  // the files' shared __metadata__, once; nothing added
}

TEST_CASE("a wrong total_size in the index is a warning, as Hugging Face reads nothing from it", "[safetensors][hf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const TwoFileSet set;
  SetFiles files = set.files();
  files[kIndexName] = index_json(set.weight_map(), 999);
  write_set(dir.path(), files);
  auto r = safetensors_to_ckpt(fs, dir.file(kIndexName), dir.file("m.ckpt"));
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  REQUIRE(r->warnings.size() == 1);
  CHECK(r->warnings[0].find("total_size is 999, the files hold 204 bytes") != std::string::npos);
}

TEST_CASE("a damaged sharded set is refused naming the file or tensor, and nothing is written", "[safetensors][hf]") {
  const TwoFileSet set;
  struct Case {
    const char* label;
    std::function<void(SetFiles&)> damage;
    Code code;
    const char* expect;
  };
  auto map_with = [&](const std::function<void(std::map<std::string, std::string>&)>& edit) {
    return [&set, edit](SetFiles& f) {
      auto m = set.weight_map();
      edit(m);
      f[kIndexName] = index_json(m, 204);
    };
  };
  auto index_text = [](std::string text) { return [text](SetFiles& f) { f[kIndexName] = text; }; };
  const std::vector<Case> cases = {
      {"a file the weight_map names is missing", [](SetFiles& f) { f.erase(kFile2); }, Code::not_found,
       "file 'model-00002-of-00002.safetensors' of the weight_map"},
      {"a file of the set is truncated", [](SetFiles& f) { f[kFile2].resize(f[kFile2].size() - 1); }, Code::corrupt,
       "model-00002-of-00002.safetensors: "},
      {"a tensor the weight_map names is not in its file", map_with([](auto& m) { m["ghost"] = kFile1; }), Code::corrupt,
       "weight_map puts tensor 'ghost' in "},
      {"a tensor the weight_map puts in the other file", map_with([](auto& m) { m["d"] = kFile1; }), Code::corrupt,
       "weight_map puts tensor 'd' in "},
      {"a tensor in a file the weight_map does not name", map_with([](auto& m) { m.erase("d"); }), Code::corrupt,
       "holds tensor 'd', which the weight_map of "},
      {"a tensor in two files",
       [&set](SetFiles& f) {
         auto second = set.second;
         second.push_back(gen("a", DType::U8, {3}, 9));
         f[kFile2] = make_safetensors(second, set.metadata);
       },
       Code::corrupt, "tensor 'a' is in two files of the set"},
      {"__metadata__ differs between files",
       [&set](SetFiles& f) { f[kFile2] = make_safetensors(set.second, {{"format", "tf"}}); }, Code::conflict,
       "__metadata__ key 'format' differs between "},
      {"index JSON truncated", [](SetFiles& f) { f[kIndexName].resize(f[kIndexName].size() / 2); }, Code::corrupt,
       "index is not valid JSON"},
      {"index JSON garbage", index_text("{\"weight_map\": {\"a\": \"x\"} trailing"), Code::corrupt, "index is not valid JSON"},
      {"index is an array", index_text("[]"), Code::corrupt, "index must be a JSON object, found an array"},
      {"index has no weight_map", index_text("{\"metadata\": {\"total_size\": 0}}"), Code::corrupt, "no \"weight_map\""},
      {"weight_map is an array", index_text("{\"weight_map\": []}"), Code::corrupt, "weight_map: expected an object, found an array"},
      {"weight_map value not a string", index_text("{\"weight_map\": {\"a\": 1}}"), Code::corrupt,
       "weight_map tensor 'a': expected a file name (a string), found an integer 1"},
      {"weight_map value an object", index_text("{\"weight_map\": {\"a\": {}}}"), Code::corrupt, "found an object"},
      {"weight_map names a tensor twice",
       index_text(std::string("{\"weight_map\": {\"a\": \"") + kFile1 + "\", \"a\": \"" + kFile2 + "\"}}"), Code::corrupt,
       "weight_map tensor 'a': key appears twice"},
      {"weight_map twice", index_text("{\"weight_map\": {}, \"weight_map\": {}}"), Code::corrupt, "appears twice in the index"},
      {"a file named ../x.safetensors (outside the directory)", map_with([](auto& m) { m["a"] = "../x.safetensors"; }),
       Code::corrupt, "file '../x.safetensors' is not a file name in the index's directory"},
      {"an absolute file name", map_with([](auto& m) { m["a"] = "/tmp/x.safetensors"; }), Code::corrupt,
       "file '/tmp/x.safetensors' is not a file name in the index's directory"},
      {"a file in a subdirectory", map_with([](auto& m) { m["a"] = "sub/x.safetensors"; }), Code::corrupt,
       "file 'sub/x.safetensors' is not a file name"},
      {"a file named ..", map_with([](auto& m) { m["a"] = ".."; }), Code::corrupt, "file '..' is not a file name"},
      {"an empty file name", map_with([](auto& m) { m["a"] = ""; }), Code::corrupt, "file '' is not a file name"},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      ckpt_test::TempDir dir;
      PosixFs fs;
      // A valid file outside the set's directory, where "../x.safetensors" would lead: it must never be read.
      ckpt_test::write_file(dir.file("x.safetensors"), make_safetensors({gen("a", DType::U8, {100}, 1)}, {{"format", "pt"}}));
      SetFiles files = set.files();
      c.damage(files);
      const std::string set_dir = dir.file("hf");
      write_set(set_dir, files);
      const std::string index = set_dir + "/" + kIndexName;
      auto r = safetensors_to_ckpt(fs, index, dir.file("out.ckpt"));
      REQUIRE_FALSE(r.ok());
      const std::string message = r.status().message();
      INFO(message);
      CHECK(r.status().code() == c.code);
      CHECK(message.find(c.expect) != std::string::npos);
      CHECK(message.find(set_dir + "/") != std::string::npos);  // names the index or the file
      CHECK(message.find('\n') == std::string::npos);
      CHECK_FALSE(fs.stat(dir.file("out.ckpt")).ok());
      CHECK(files_in(dir.path()) == 2);  // the outside file and the set: no output, no temporary
    }
  }
}

TEST_CASE("a directory holding no index or several is refused", "[safetensors][hf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto none = safetensors_to_ckpt(fs, dir.path(), dir.file("o.ckpt"));
  check_refused(none, Code::not_found, "holds no *.safetensors.index.json");
  ckpt_test::write_file(dir.file("a.safetensors.index.json"), "{\"weight_map\":{}}");
  ckpt_test::write_file(dir.file("b.safetensors.index.json"), "{\"weight_map\":{}}");
  auto two = safetensors_to_ckpt(fs, dir.path(), dir.file("o.ckpt"));
  check_refused(two, Code::invalid_argument, "holds 2 indexes ('a.safetensors.index.json', 'b.safetensors.index.json')");
}

TEST_CASE("a checkpoint exports to a sharded set split at max_shard_size, the index last", "[safetensors][hf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  // Data bytes 400, 400, 300, 1500, 80, 0 with a limit of 1000: [400 400] [300] [1500 alone] [80 0].
  const std::vector<GenTensor> tensors = {gen("w1", DType::U8, {400}, 1),  gen("w2", DType::F32, {100}, 2),
                                          gen("w3", DType::I16, {150}, 3), gen("big", DType::U8, {1500}, 4),
                                          gen("w5", DType::F64, {5, 2, 1, 1}, 5), gen("empty", DType::F32, {0, 3}, 6)};
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(tensors, {{"format", "pt"}, {"note", "x"}}));
  REQUIRE(safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("in.ckpt")).ok());
  ConvertOptions options;
  options.max_shard_size = 1000;
  const std::string out_dir = dir.file("hf");  // created by the export
  const std::string index = out_dir + "/" + kIndexName;
  auto r = ckpt_to_safetensors(fs, dir.file("in.ckpt"), index, options);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const std::vector<std::string> names = {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                          "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  std::vector<std::string> written;
  for (const auto& n : names) written.push_back(out_dir + "/" + n);
  written.push_back(index);
  CHECK(r->files == written);  // the index last
  CHECK(r->tensors == 6);
  CHECK(r->data_bytes == 2680);
  CHECK(files_in(out_dir) == 5);  // no temporaries

  const LoadedSet loaded = load_set(index);
  CHECK(loaded.index["metadata"] == nlohmann::json{{"total_size", 2680}});
  const std::map<std::string, std::string> expected_map = {{"w1", names[0]}, {"w2", names[0]}, {"w3", names[1]},
                                                           {"big", names[2]}, {"w5", names[3]}, {"empty", names[3]}};
  CHECK(loaded.index["weight_map"].get<std::map<std::string, std::string>>() == expected_map);
  // save_pretrained's text: indent 2, sorted keys, a final newline.
  const std::string text = ckpt_test::read_file(index);
  CHECK(text == nlohmann::json::parse(text).dump(2) + "\n");
  for (const auto& t : tensors) {
    INFO("tensor " << t.name);
    const Loaded& file = loaded.files.at(expected_map.at(t.name));
    const auto& [dtype, shape, bytes] = file.tensors.at(t.name);
    CHECK(dtype == t.dtype);
    CHECK(shape == t.shape);
    CHECK(bytes == t.bytes);
  }
  // Every file carries the whole __metadata__, as save_pretrained writes it to each.
  for (const auto& [name, file] : loaded.files)
    CHECK(file.metadata == std::vector<std::pair<std::string, std::string>>{{"format", "pt"}, {"note", "x"}});

  SECTION("the set converts back to the same tensors and metadata") {
    REQUIRE(safetensors_to_ckpt(fs, out_dir, dir.file("back.ckpt")).ok());
    REQUIRE(ckpt_to_safetensors(fs, dir.file("back.ckpt"), dir.file("back.safetensors")).ok());
    CHECK(ckpt_test::read_file(dir.file("back.safetensors")) == ckpt_test::read_file(dir.file("in.safetensors")));
  }
  SECTION("an existing set is replaced only when asked") {
    auto refused = ckpt_to_safetensors(fs, dir.file("in.ckpt"), index, options);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == Code::conflict);
    REQUIRE(fs.unlink(index).ok());  // a shard file of the same name is also refused
    refused = ckpt_to_safetensors(fs, dir.file("in.ckpt"), index, options);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message().find(names[0] + ": output already exists") != std::string::npos);
    options.overwrite = true;
    options.max_shard_size = 1 << 20;  // now one file
    auto replaced = ckpt_to_safetensors(fs, dir.file("in.ckpt"), index, options);
    INFO(replaced.status().to_string());
    REQUIRE(replaced.ok());
    CHECK(replaced->files == std::vector<std::string>{out_dir + "/model-00001-of-00001.safetensors", index});
    CHECK(load_set(index).files.size() == 1);
  }
}

TEST_CASE("an export to a set that fails part-way leaves no index and removes the files it wrote", "[safetensors][hf]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  write_damaged(fs, dir.file("d.ckpt"), {"first", "second"}, {"second", 0, 3, 0x01});
  ConvertOptions options;
  options.max_shard_size = 20000;  // one tensor per file: the first file is complete when the second fails
  auto r = ckpt_to_safetensors(fs, dir.file("d.ckpt"), dir.file("hf/") + kIndexName, options);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().message());
  CHECK(r.status().code() == Code::corrupt);
  CHECK(r.status().message().find("tensor 'second'") != std::string::npos);
  CHECK(files_in(dir.file("hf")) == 0);
}

TEST_CASE("a crash during an export to a set never leaves an index naming a missing or torn file", "[safetensors][hf][crash]") {
  SimFs sim;
  const std::vector<GenTensor> tensors = {gen("a", DType::U8, {5000}, 1), gen("b", DType::U8, {5000}, 2), gen("c", DType::U8, {5000}, 3)};
  {
    auto w = ShardWriter::create(sim, "/in.ckpt");
    REQUIRE(w.ok());
    for (const auto& t : tensors) REQUIRE(w->add_tensor(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()).ok());
    REQUIRE(w->finish().ok());
  }
  REQUIRE(sim.mkdir("/hf").ok());
  REQUIRE(sim.sync_dir("/").ok());
  std::vector<SimFs> moments;
  sim.set_persistence_hook([&](const SimFs& fs, const PersistencePoint&) { moments.emplace_back(fs); });
  ConvertOptions options;
  options.max_shard_size = 5000;
  const std::string index = std::string("/hf/") + kIndexName;
  auto r = ckpt_to_safetensors(sim, "/in.ckpt", index, options);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  moments.emplace_back(sim);
  REQUIRE(moments.size() > 4);
  std::size_t states = 0, with_index = 0;
  for (const auto& moment : moments) {
    const std::uint64_t count = moment.crash_state_count();
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(count, 24) + 4; ++i) {
      SimFs crashed = i < std::min<std::uint64_t>(count, 24) ? std::move(*moment.crash_state(i)) : moment.sample_crash_state(i);
      ++states;
      if (!crashed.stat(index).ok()) continue;
      ++with_index;
      // An index that survived names complete files: the whole set converts and holds every tensor.
      auto back = safetensors_to_ckpt(crashed, index, "/back.ckpt");
      INFO("crash state " << i << ": " << back.status().to_string());
      REQUIRE(back.ok());
      CHECK(back->tensors == tensors.size());
    }
  }
  INFO(states << " crash states, " << with_index << " with an index");
  CHECK(with_index > 0);
}

TEST_CASE("shard sizes are spelled as save_pretrained spells max_shard_size", "[safetensors][hf]") {
  const std::vector<std::pair<const char*, std::uint64_t>> good = {
      {"5GB", 5'000'000'000},   {"500MB", 500'000'000}, {"2GiB", std::uint64_t{2} << 30}, {"123", 123},
      {"1kb", 1000},            {"4KiB", 4096},         {"10B", 10},                      {"3TB", 3'000'000'000'000},
      {"1tib", std::uint64_t{1} << 40}, {"7mib", 7 << 20}};
  for (const auto& [text, bytes] : good) {
    INFO(text);
    auto r = parse_shard_size(text);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(*r == bytes);
  }
  for (const char* bad : {"", "GB", "0", "0GB", "-1", "1.5GB", "5 GB", "5XB", "5G", "99999999999999TB", "18446744073709551616"}) {
    INFO(bad);
    auto r = parse_shard_size(bad);
    check_refused(r, Code::invalid_argument, "expected a positive byte count");
  }
}

TEST_CASE("safetensors to ckpt and back adds no training state key", "[safetensors][state]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  ckpt_test::write_file(dir.file("in.safetensors"), make_safetensors(generated_tensors(7), {{"format", "pt"}}));
  REQUIRE(safetensors_to_ckpt(fs, dir.file("in.safetensors"), dir.file("in.ckpt")).ok());
  const auto original = load_safetensors(dir.file("in.safetensors")).metadata;

  // in.ckpt resharded to a two-rank store (its step numbered when given), that step exported to
  // store.safetensors with no warnings; what the export holds.
  auto through_store = [&](std::optional<std::uint64_t> step) {
    auto file = Checkpoint::open(fs, dir.file("in.ckpt"));
    REQUIRE(file.ok());
    ReshardOptions ro;
    ro.world_size = 2;
    ro.step = step;
    ro.store = ckpt_test::small_store_options();
    auto resharded = reshard_to_store(fs, *file, dir.file("store"), ro);
    INFO(resharded.status().to_string());
    REQUIRE(resharded.ok());
    auto from_store = ckpt_to_safetensors(fs, dir.file("store"), dir.file("store.safetensors"));
    INFO(from_store.status().to_string());
    REQUIRE(from_store.ok());
    CHECK(from_store->warnings.empty());
    return load_safetensors(dir.file("store.safetensors"));
  };
  // The store's step merged to one file first, merged.ckpt, then exported to merged.safetensors.
  auto through_merge = [&]() {
    auto step = Checkpoint::open(fs, dir.file("store"));
    REQUIRE(step.ok());
    auto merged = merge_to_file(fs, {&*step}, {SourceSelection{}}, dir.file("merged.ckpt"), MergeOptions{});
    INFO(merged.status().to_string());
    REQUIRE(merged.ok());
    auto from_file = ckpt_to_safetensors(fs, dir.file("merged.ckpt"), dir.file("merged.safetensors"));
    INFO(from_file.status().to_string());
    REQUIRE(from_file.ok());
    return std::move(from_file).value();
  };

  SECTION("through a store and a merge without a step number: nothing is added (issue 22)") {
    const Loaded store_loaded = through_store(std::nullopt);
    CHECK(store_loaded.metadata == original);
    (void)through_merge();
    const Loaded merged_loaded = load_safetensors(dir.file("merged.safetensors"));
    CHECK(merged_loaded.metadata == original);
    CHECK(merged_loaded.tensors == store_loaded.tensors);
    CHECK(merged_loaded.tensors == load_safetensors(dir.file("in.safetensors")).tensors);
  }
  SECTION("through a two-rank store numbered by --step and back to a merged file: only ckpt.step is added, no stringify needed") {
    auto expected = original;
    expected.emplace_back("ckpt.step", "7");
    std::sort(expected.begin(), expected.end());
    // The step, exported in one command: its shards gathered.
    const Loaded store_loaded = through_store(7);
    CHECK(store_loaded.metadata == expected);
    // The same step merged to one file first (ckpt.training_state of step 7, nothing else in it).
    CHECK(through_merge().warnings.empty());
    const Loaded merged_loaded = load_safetensors(dir.file("merged.safetensors"));
    CHECK(merged_loaded.metadata == expected);
    CHECK(merged_loaded.tensors == store_loaded.tensors);
    // Stringifying has nothing to stringify: still no ckpt.training_state.
    ConvertOptions stringify;
    stringify.stringify_metadata = true;
    REQUIRE(ckpt_to_safetensors(fs, dir.file("store"), dir.file("s2.safetensors"), stringify).ok());
    CHECK(load_safetensors(dir.file("s2.safetensors")).metadata == expected);
  }
  SECTION("a file whose training state holds more than its step: left out with a warning, in hex when stringified") {
    TrainingState state;
    state.step = 11;
    state.rng = "seed";
    state.values["lr"] = 0.5;
    {
      auto w = ShardWriter::create(fs, dir.file("s.ckpt"));
      REQUIRE(w.ok());
      const unsigned char one = 1;
      REQUIRE(w->add_tensor("t", DType::U8, {1}, &one, 1).ok());
      REQUIRE(w->set_metadata(std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(state)})).ok());
      REQUIRE(w->finish().ok());
    }
    auto r = ckpt_to_safetensors(fs, dir.file("s.ckpt"), dir.file("s.safetensors"));
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    REQUIRE(r->warnings.size() == 1);
    CHECK(r->warnings[0] == "training state of step 11 (4 RNG bytes, 1 values) not exported: safetensors holds weights; "
                            "stringify metadata to write it as 'ckpt.training_state' in hex");
    CHECK(load_safetensors(dir.file("s.safetensors")).metadata == std::vector<std::pair<std::string, std::string>>{{"ckpt.step", "11"}});
    ConvertOptions stringify;
    stringify.stringify_metadata = true;
    stringify.overwrite = true;
    REQUIRE(ckpt_to_safetensors(fs, dir.file("s.ckpt"), dir.file("s.safetensors"), stringify).ok());
    const auto metadata = load_safetensors(dir.file("s.safetensors")).metadata;
    REQUIRE(metadata.size() == 2);
    CHECK(metadata[0] == std::make_pair(std::string("ckpt.step"), std::string("11")));
    CHECK(metadata[1].first == "ckpt.training_state");
  }
}

TEST_CASE("ckpt-convert reads and writes sharded sets", "[safetensors][tool][hf]") {
  const ConvertTool run;
  if (!run.built()) {
    WARN("ckpt-convert is not built; skipping the tool checks");
    return;
  }
  PosixFs fs;
  ckpt_test::TempDir dir;
  const TwoFileSet set;
  write_set(dir.file("hf"), set.files());
  const std::string index = dir.file("hf/") + kIndexName;
  CHECK(run(index + " " + dir.file("a.ckpt")) == 0);
  CHECK(run(dir.file("hf") + " " + dir.file("b.ckpt") + " --json") == 0);
  CHECK(ckpt_test::read_file(dir.file("a.ckpt")).size() == ckpt_test::read_file(dir.file("b.ckpt")).size());
  CHECK(run(dir.file("a.ckpt") + " " + dir.file("out/") + kIndexName + " --max-shard-size 150B") == 0);
  CHECK(load_set(dir.file("out/") + kIndexName).files.size() == 2);  // [a 100 b 40] [c 14 d 50 e 0]
  CHECK(run(dir.file("a.ckpt") + " " + dir.file("one/") + kIndexName) == 0);  // default 5GB: one file
  CHECK(load_set(dir.file("one/") + kIndexName).files.count("model-00001-of-00001.safetensors") == 1);
  CHECK(run(dir.file("a.ckpt") + " " + dir.file("x.safetensors") + " --max-shard-size 5GB") == 2);  // single file: no shards
  CHECK(run(dir.file("a.ckpt") + " " + dir.file("y/") + kIndexName + " --max-shard-size 5XB") == 2);
  CHECK_FALSE(fs.stat(dir.file("y")).ok());
  // A weight_map that reaches outside the directory: exit 2, nothing written.
  auto outside = set.weight_map();
  outside["a"] = "../x.safetensors";
  write_set(dir.file("bad"), {{kIndexName, index_json(outside, 204)}});
  CHECK(run(dir.file("bad") + " " + dir.file("bad.ckpt")) == 2);
  CHECK_FALSE(fs.stat(dir.file("bad.ckpt")).ok());
}
