// Golden files (spec/golden/, spec/README.md): committed .ckpt files and the JSON that describes
// them, checked both ways, plus XXH3-64 golden vectors.
//
//   (a) writing the content a JSON file describes, with its options, reproduces the .ckpt byte for byte;
//   (b) reading the .ckpt gives exactly the tensors, pieces, chunks and metadata the JSON describes;
//   (c) the definitions in this file still produce the committed JSON (so (a) and (b) test what we mean).
//
// CKPT_REGENERATE_GOLDEN=1 rewrites spec/golden/ from the definitions below (a format change only).
// The hidden case "[interop_fresh]" writes freshly made files for tests/interop/test_xxhash_oracle.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "test_util.hpp"

using namespace ckpt;
using Json = nlohmann::ordered_json;

namespace {

const std::string kGoldenDir = std::string(CKPT_SOURCE_DIR) + "/spec/golden";

bool regenerating() {
  const char* v = std::getenv("CKPT_REGENERATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

// ---- small helpers ---------------------------------------------------------------------------

std::string to_hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

std::string from_hex(const std::string& hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  REQUIRE(hex.size() % 2 == 0);
  std::string out(hex.size() / 2, '\0');
  bool valid = true;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    valid = valid && hi >= 0 && lo >= 0;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  REQUIRE(valid);
  return out;
}

Uuid parse_uuid(const std::string& text) {
  std::string hex;
  for (const char c : text)
    if (c != '-') hex += c;
  const std::string bytes = from_hex(hex);
  REQUIRE(bytes.size() == 16);
  Uuid u{};
  std::memcpy(u.data(), bytes.data(), 16);
  return u;
}

std::uint32_t log2_exact(std::uint64_t v) {
  std::uint32_t n = 0;
  while ((std::uint64_t{1} << n) < v) ++n;
  REQUIRE((std::uint64_t{1} << n) == v);
  return n;
}

std::uint64_t elements_of(const Shape& shape) {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// Copies the row-major region [offsets, offsets + shape) out of a row-major global tensor.
std::string extract_region(const std::string& global, const Shape& global_shape, std::size_t esize,
                           const Shape& offsets, const Shape& shape) {
  const std::size_t rank = global_shape.size();
  std::string out;
  const std::uint64_t n = elements_of(shape);
  out.reserve(static_cast<std::size_t>(n * esize));
  Shape idx(rank, 0);
  for (std::uint64_t e = 0; e < n; ++e) {
    std::uint64_t at = 0;
    for (std::size_t d = 0; d < rank; ++d) at = at * global_shape[d] + offsets[d] + idx[d];
    out.append(global, static_cast<std::size_t>(at * esize), esize);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <class T>
void append_le(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // host value to bytes, then force little-endian order below
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) bits |= std::uint64_t{b[i]} << (8 * i);
  static const std::uint16_t probe = 1;
  const bool little = *reinterpret_cast<const unsigned char*>(&probe) == 1;
  if (!little) {
    bits = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) bits |= std::uint64_t{b[sizeof(T) - 1 - i]} << (8 * i);
  }
  for (std::size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>(bits >> (8 * i));
}

// The bytes of element k of a tensor of this dtype: deterministic, readable values per dtype.
void append_element(std::string& out, DType dtype, std::uint64_t k) {
  const float f = static_cast<float>(k) * 0.25f - 1.0f;
  switch (dtype) {
    case DType::BOOL: out += static_cast<char>(k % 2); break;
    case DType::U8: out += static_cast<char>((k * 37 + 11) & 0xFF); break;
    case DType::I8: append_le(out, static_cast<std::int8_t>(static_cast<std::int64_t>(k) * 13 - 60)); break;
    case DType::U16: append_le(out, static_cast<std::uint16_t>(k * 1009 + 7)); break;
    case DType::I16: append_le(out, static_cast<std::int16_t>(300 - static_cast<std::int64_t>(k) * 517)); break;
    case DType::U32: append_le(out, static_cast<std::uint32_t>(k * 2654435761u)); break;
    case DType::I32: append_le(out, static_cast<std::int32_t>(static_cast<std::int64_t>(k) * 7 - 100)); break;
    case DType::U64: append_le(out, static_cast<std::uint64_t>(k * 0x9E3779B97F4A7C15ull + 1)); break;
    case DType::I64: append_le(out, static_cast<std::int64_t>(-5 - static_cast<std::int64_t>(k) * 1000003)); break;
    case DType::F16: append_le(out, static_cast<std::uint16_t>(0x3800 + (k * 0x155) % 0x3000)); break;
    case DType::BF16: {
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      append_le(out, static_cast<std::uint16_t>(bits >> 16));
      break;
    }
    case DType::F32: append_le(out, f); break;
    case DType::F64: append_le(out, static_cast<double>(k) * 0.125 - 2.0); break;
    case DType::F8_E4M3: out += static_cast<char>((k * 29 + 3) & 0x7E); break;
    case DType::F8_E5M2: out += static_cast<char>((k * 17 + 5) & 0x7B); break;
    case DType::F8_E8M0: out += static_cast<char>(120 + k % 16); break;
    case DType::C64:
      append_le(out, static_cast<float>(k));
      append_le(out, static_cast<float>(k) * -0.5f);
      break;
  }
}

// ---- golden definitions ----------------------------------------------------------------------

struct PieceDef {
  Shape offsets, shape;
};
struct TensorDef {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<PieceDef> pieces;  // in write order for this tensor
  std::string global;            // row-major bytes of the whole tensor (pieces are cut from it)
};
struct FileDef {
  std::string name, description;
  std::uint32_t alignment_log2, chunk_size_log2;
  std::string uuid;
  std::vector<TensorDef> tensors;                             // in index order (first appearance)
  std::vector<std::pair<std::size_t, std::size_t>> write_order;  // (tensor, piece) in file order
  std::vector<std::pair<std::string, Value>> metadata;        // in index order
};

TensorDef tensor(std::string name, DType dtype, Shape shape, std::vector<PieceDef> pieces = {}) {
  TensorDef t{std::move(name), dtype, shape, std::move(pieces), {}};
  if (t.pieces.empty()) t.pieces.push_back(PieceDef{Shape(shape.size(), 0), shape});
  const std::uint64_t n = elements_of(shape);
  for (std::uint64_t k = 0; k < n; ++k) append_element(t.global, dtype, k);
  return t;
}

// Pieces written tensor after tensor, each tensor's pieces in order.
std::vector<std::pair<std::size_t, std::size_t>> sequential(const std::vector<TensorDef>& tensors) {
  std::vector<std::pair<std::size_t, std::size_t>> order;
  for (std::size_t t = 0; t < tensors.size(); ++t)
    for (std::size_t p = 0; p < tensors[t].pieces.size(); ++p) order.emplace_back(t, p);
  return order;
}

std::vector<FileDef> golden_definitions() {
  std::vector<FileDef> files;
  {
    // The worked example of spec/FORMAT.md section 11.
    FileDef f{"example.ckpt", "spec/FORMAT.md worked example: a 2x3 F32 tensor, a scalar I64, one metadata entry",
              6, 12, "00112233-4455-4677-8899-aabbccddeeff", {}, {}, {}};
    f.tensors.push_back(tensor("weight", DType::F32, {2, 3}));
    f.tensors.back().global.clear();
    for (const float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}) append_le(f.tensors.back().global, v);
    f.tensors.push_back(tensor("step", DType::I64, {}));
    f.tensors.back().global.clear();
    append_le(f.tensors.back().global, std::int64_t{1000});
    f.write_order = sequential(f.tensors);
    f.metadata.emplace_back("optimizer", Value("adam"));
    files.push_back(std::move(f));
  }
  {
    FileDef f{"dtypes.ckpt", "one tensor of every dtype, a zero-size tensor, scalars, every metadata value type",
              6, 12, "c4e1d3a0-7b5f-4e2a-9d1c-0f3b5a7c9e11", {}, {}, {}};
    for (const auto& info : format::kDTypes) {
      std::string name = std::string(info.name);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      f.tensors.push_back(tensor("dtype/" + name, info.dtype, {2, 3}));
    }
    f.tensors.push_back(tensor("empty", DType::F32, {0, 4}));
    f.tensors.push_back(tensor("scalar/f64", DType::F64, {}));
    f.tensors.push_back(tensor("scalar/bool", DType::BOOL, {}));
    f.tensors.push_back(tensor("rank3", DType::I16, {2, 3, 4}));
    f.tensors.push_back(tensor("vector/one", DType::U8, {1}));
    f.tensors.push_back(tensor("caf\xc3\xa9/\xe2\x9c\x93", DType::U8, {5}));  // UTF-8 name: "café/✓"
    f.write_order = sequential(f.tensors);
    f.metadata.emplace_back("int/positive", Value(std::int64_t{42}));
    f.metadata.emplace_back("int/min", Value(std::numeric_limits<std::int64_t>::min()));
    f.metadata.emplace_back("int/max", Value(std::numeric_limits<std::int64_t>::max()));
    f.metadata.emplace_back("float/tenth", Value(0.1));
    f.metadata.emplace_back("float/negative_zero", Value(-0.0));
    f.metadata.emplace_back("float/large", Value(-1.5e300));
    f.metadata.emplace_back("bool/true", Value(true));
    f.metadata.emplace_back("bool/false", Value(false));
    f.metadata.emplace_back("string/ascii", Value("hello, checkpoint"));
    f.metadata.emplace_back("string/utf8", Value("na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x9a\x80"));  // "naïve ✓ 🚀"
    f.metadata.emplace_back("string/empty", Value(""));
    f.metadata.emplace_back("bytes/binary", Value(Bytes{std::string("\x00\x01\xfe\xff\x00", 5)}));
    f.metadata.emplace_back("bytes/empty", Value(Bytes{""}));
    files.push_back(std::move(f));
  }
  {
    FileDef f{"sharded.ckpt",
              "pieces of global tensors written interleaved: a tensor covered by 3 pieces, a partial tensor "
              "(rank 0 of a 2-rank save), multi-chunk pieces (chunk size 4096, short last chunk)",
              8, 12, "9a3f6c21-0d4e-4b8a-a1f2-3c5d7e9f0b24", {}, {}, {}};
    f.tensors.push_back(tensor("layer.0.weight", DType::F32, {4, 6},
                               {{{0, 0}, {2, 6}}, {{2, 0}, {2, 3}}, {{2, 3}, {2, 3}}}));
    f.tensors.push_back(tensor("big", DType::F32, {2600}));
    f.tensors.push_back(tensor("layer.1.weight", DType::BF16, {8, 4}, {{{0, 0}, {2, 4}}, {{6, 0}, {2, 4}}}));
    f.tensors.push_back(tensor("optimizer.exp_avg", DType::I32, {2200}, {{{0}, {1200}}, {{1200}, {1000}}}));
    f.write_order = {{0, 0}, {1, 0}, {0, 1}, {2, 0}, {3, 0}, {0, 2}, {3, 1}, {2, 1}};
    f.metadata.emplace_back("step", Value(std::int64_t{1200}));
    f.metadata.emplace_back("rank", Value(std::int64_t{0}));
    f.metadata.emplace_back("world_size", Value(std::int64_t{2}));
    f.metadata.emplace_back("rng/state", Value(Bytes{std::string("\x13\x37\xc0\xde\x00\x00\x00\x2a\xff\xee\xdd\xcc\xbb\xaa\x99\x88", 16)}));
    f.metadata.emplace_back("loader/epoch_fraction", Value(0.375));
    f.metadata.emplace_back("zero1", Value(true));
    files.push_back(std::move(f));
  }
  return files;
}

// ---- writing and describing ------------------------------------------------------------------

struct WrittenPiece {
  std::size_t tensor, piece;
  std::string bytes;
};

// Writes a file piece by piece in the given order; the same routine serves definitions and JSON.
ShardSummary write_file(const std::string& path, std::uint32_t alignment_log2, std::uint32_t chunk_size_log2,
                        const std::optional<Uuid>& uuid, const std::vector<TensorDef>& tensors,
                        const std::vector<WrittenPiece>& order,
                        const std::vector<std::pair<std::string, Value>>& metadata) {
  PosixFs fs;
  WriterOptions o;
  o.alignment_log2 = alignment_log2;
  o.chunk_size_log2 = chunk_size_log2;
  o.uuid = uuid;
  o.durable = false;  // test files: durability is tested elsewhere, not here
  auto w = ShardWriter::create(fs, path, o);
  REQUIRE(w.ok());
  for (const auto& wp : order) {
    const auto& t = tensors[wp.tensor];
    const auto& p = t.pieces[wp.piece];
    REQUIRE(w->begin_piece(t.name, t.dtype, t.shape, p.offsets, p.shape).ok());
    // Hand the bytes over in uneven slices: the writer's chunking must not depend on call sizes.
    std::size_t at = 0, step = 1;
    while (at < wp.bytes.size()) {
      const std::size_t n = std::min(step, wp.bytes.size() - at);
      REQUIRE(w->write(wp.bytes.data() + at, n).ok());
      at += n;
      step = step * 3 + 1;
    }
    REQUIRE(w->end_piece().ok());
  }
  for (const auto& m : metadata) REQUIRE(w->set_metadata(m.first, m.second).ok());
  auto summary = w->finish();
  REQUIRE(summary.ok());
  return *summary;
}

std::vector<WrittenPiece> pieces_in_write_order(const FileDef& f) {
  std::vector<WrittenPiece> out;
  for (const auto& [t, p] : f.write_order) {
    const auto& td = f.tensors[t];
    const auto esize = format::dtype_info(td.dtype)->size;
    out.push_back({t, p, extract_region(td.global, td.shape, esize, td.pieces[p].offsets, td.pieces[p].shape)});
  }
  return out;
}

Json metadata_json(const std::string& key, const Value& v) {
  Json m;
  m["key"] = key;
  m["type"] = value_type_name(v.type());
  if (v.is_int()) m["value"] = v.as_int();
  else if (v.is_float()) { m["value"] = v.as_float(); m["bits"] = hex64(f64_bits(v.as_float())); }
  else if (v.is_bool()) m["value"] = v.as_bool();
  else if (v.is_string()) m["value"] = v.as_string();
  else m["hex"] = to_hex(v.as_bytes());
  return m;
}

// Describes a file from its definition alone: offsets follow the packing rule of spec 4.2,
// chunks the chunking rule of spec 4.4; only the index position, length and digest come from the writer.
Json describe(const FileDef& f, const ShardSummary& summary) {
  const std::uint64_t alignment = std::uint64_t{1} << f.alignment_log2;
  const std::uint64_t chunk_size = std::uint64_t{1} << f.chunk_size_log2;
  const std::uint64_t data_offset = align_up(format::kSuperblockSize, alignment);
  std::vector<std::vector<Json>> piece_json(f.tensors.size());
  for (std::size_t t = 0; t < f.tensors.size(); ++t) piece_json[t].resize(f.tensors[t].pieces.size());
  std::uint64_t at = data_offset;
  for (const auto& wp : pieces_in_write_order(f)) {
    const auto& pd = f.tensors[wp.tensor].pieces[wp.piece];
    const std::uint64_t off = align_up(at, alignment);
    Json p;
    p["offsets"] = pd.offsets;
    p["shape"] = pd.shape;
    p["data_offset"] = off;
    p["data_length"] = wp.bytes.size();
    Json chunks = Json::array();
    for (std::uint64_t c = 0; c * chunk_size < wp.bytes.size(); ++c) {
      const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_size, wp.bytes.size() - c * chunk_size));
      chunks.push_back(Json{{"offset", off + c * chunk_size},
                            {"length", len},
                            {"digest", hex64(xxh3_64(wp.bytes.data() + c * chunk_size, len))}});
    }
    p["chunks"] = chunks;
    p["data_hex"] = to_hex(wp.bytes);
    piece_json[wp.tensor][wp.piece] = p;
    at = off + wp.bytes.size();
  }
  Json j;
  j["description"] = f.description;
  j["format_version"] = format::kVersion;
  j["file_size"] = summary.file_size;
  j["uuid"] = f.uuid;
  j["alignment"] = alignment;
  j["chunk_size"] = chunk_size;
  j["data_offset"] = data_offset;
  j["index_offset"] = align_up(at, 8);
  j["index_length"] = summary.file_size - format::kFooterSize - align_up(at, 8);
  j["index_digest"] = hex64(summary.index_digest);
  j["tensors"] = Json::array();
  for (std::size_t t = 0; t < f.tensors.size(); ++t) {
    const auto& td = f.tensors[t];
    std::uint64_t covered = 0;
    for (const auto& p : td.pieces) covered += elements_of(p.shape);
    Json tj;
    tj["name"] = td.name;
    tj["dtype"] = std::string(format::dtype_info(td.dtype)->name);
    tj["shape"] = td.shape;
    tj["complete"] = covered == elements_of(td.shape);  // pieces never overlap, so counting suffices
    if (tj["complete"].get<bool>()) tj["data_hex"] = to_hex(td.global);
    tj["pieces"] = piece_json[t];
    j["tensors"].push_back(tj);
  }
  j["metadata"] = Json::array();
  for (const auto& [key, v] : f.metadata) j["metadata"].push_back(metadata_json(key, v));
  return j;
}

std::string json_text(const Json& j) { return j.dump(2) + "\n"; }

Json load_json(const std::string& path) {
  const std::string text = ckpt_test::read_file(path);
  REQUIRE_FALSE(text.empty());
  return Json::parse(text);
}

Value metadata_value(const Json& m) {
  const std::string type = m.at("type");
  if (type == "int64") return Value(m.at("value").get<std::int64_t>());
  if (type == "float64") return Value(bits_f64(std::stoull(m.at("bits").get<std::string>(), nullptr, 16)));
  if (type == "bool") return Value(m.at("value").get<bool>());
  if (type == "string") return Value(m.at("value").get<std::string>());
  REQUIRE(type == "bytes");
  return Value(Bytes{from_hex(m.at("hex").get<std::string>())});
}

// Rebuilds the tensors, file order and metadata a JSON description gives.
void from_json(const Json& j, std::vector<TensorDef>& tensors, std::vector<WrittenPiece>& order,
               std::vector<std::pair<std::string, Value>>& metadata) {
  struct Placed { std::uint64_t offset, length; std::size_t tensor, piece; };
  std::vector<Placed> placed;
  for (const auto& tj : j.at("tensors")) {
    TensorDef t;
    t.name = tj.at("name");
    const auto* info = format::dtype_by_name(tj.at("dtype").get<std::string>());
    REQUIRE(info != nullptr);
    t.dtype = info->dtype;
    t.shape = tj.at("shape").get<Shape>();
    for (const auto& pj : tj.at("pieces")) {
      t.pieces.push_back(PieceDef{pj.at("offsets").get<Shape>(), pj.at("shape").get<Shape>()});
      placed.push_back({pj.at("data_offset").get<std::uint64_t>(), pj.at("data_length").get<std::uint64_t>(), tensors.size(),
                        t.pieces.size() - 1});
      order.push_back({tensors.size(), t.pieces.size() - 1, from_hex(pj.at("data_hex").get<std::string>())});
    }
    tensors.push_back(std::move(t));
  }
  // File order is write order; zero-length pieces share an offset with the next piece and go first.
  std::vector<std::size_t> idx(placed.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(placed[a].offset, placed[a].length) < std::tie(placed[b].offset, placed[b].length);
  });
  std::vector<WrittenPiece> sorted;
  for (const auto i : idx) sorted.push_back(order[i]);
  order = std::move(sorted);
  for (const auto& m : j.at("metadata")) metadata.emplace_back(m.at("key").get<std::string>(), metadata_value(m));
}

}  // namespace

// ---- golden files ----------------------------------------------------------------------------

TEST_CASE("golden JSON matches the golden definitions", "[golden]") {
  const bool regen = regenerating();
  ckpt_test::TempDir dir;
  for (const auto& f : golden_definitions()) {
    INFO("golden file " << f.name);
    const std::string fresh = dir.file(f.name);
    const auto summary = write_file(fresh, f.alignment_log2, f.chunk_size_log2, parse_uuid(f.uuid), f.tensors,
                                    pieces_in_write_order(f), f.metadata);
    const std::string text = json_text(describe(f, summary));
    const std::string base = f.name.substr(0, f.name.size() - 5);
    if (regen) {
      ckpt_test::write_file(kGoldenDir + "/" + f.name, ckpt_test::read_file(fresh));
      ckpt_test::write_file(kGoldenDir + "/" + base + ".json", text);
      WARN("regenerated " << kGoldenDir << "/" << f.name << " and " << base << ".json");
    }
    CHECK(ckpt_test::read_file(kGoldenDir + "/" + base + ".json") == text);
    CHECK(ckpt_test::read_file(kGoldenDir + "/" + f.name) == ckpt_test::read_file(fresh));
  }
}

TEST_CASE("writing a golden description reproduces the golden file byte for byte", "[golden]") {
  ckpt_test::TempDir dir;
  for (const auto& f : golden_definitions()) {
    INFO("golden file " << f.name);
    const Json j = load_json(kGoldenDir + "/" + f.name.substr(0, f.name.size() - 5) + ".json");
    std::vector<TensorDef> tensors;
    std::vector<WrittenPiece> order;
    std::vector<std::pair<std::string, Value>> metadata;
    from_json(j, tensors, order, metadata);
    const std::string out = dir.file(f.name);
    const auto summary = write_file(out, log2_exact(j.at("alignment").get<std::uint64_t>()),
                                    log2_exact(j.at("chunk_size").get<std::uint64_t>()), parse_uuid(j.at("uuid").get<std::string>()), tensors, order, metadata);
    const std::string golden = ckpt_test::read_file(kGoldenDir + "/" + f.name);
    const std::string written = ckpt_test::read_file(out);
    REQUIRE(golden.size() == j.at("file_size").get<std::size_t>());
    CHECK(summary.file_size == golden.size());
    REQUIRE(written.size() == golden.size());
    // Name the first differing byte so a format change is easy to locate in the spec.
    std::size_t first_diff = 0;
    while (first_diff < golden.size() && golden[first_diff] == written[first_diff]) ++first_diff;
    INFO("first differing byte at offset " << first_diff);
    CHECK(first_diff == golden.size());
  }
}

TEST_CASE("reading a golden file gives exactly what its description says", "[golden]") {
  PosixFs fs;
  for (const auto& f : golden_definitions()) {
    INFO("golden file " << f.name);
    const std::string path = kGoldenDir + "/" + f.name;
    const Json j = load_json(kGoldenDir + "/" + f.name.substr(0, f.name.size() - 5) + ".json");
    auto opened = ShardReader::open(fs, path);
    REQUIRE(opened.ok());
    auto& r = *opened;
    CHECK(r.file_size() == j.at("file_size").get<std::uint64_t>());
    CHECK(r.superblock().version == j.at("format_version").get<std::uint32_t>());
    CHECK(r.superblock().uuid == parse_uuid(j.at("uuid").get<std::string>()));
    CHECK(r.superblock().alignment() == j.at("alignment").get<std::uint64_t>());
    CHECK(r.superblock().chunk_size() == j.at("chunk_size").get<std::uint64_t>());
    CHECK(r.superblock().data_offset == j.at("data_offset").get<std::uint64_t>());
    CHECK(r.footer().uuid == r.superblock().uuid);
    CHECK(r.footer().index_offset == j.at("index_offset").get<std::uint64_t>());
    CHECK(r.footer().index_length == j.at("index_length").get<std::uint64_t>());
    CHECK(hex64(r.footer().index_digest) == j.at("index_digest").get<std::string>());

    const Index& index = r.index();
    REQUIRE(index.tensors.size() == j.at("tensors").size());
    std::size_t piece_total = 0, chunk_total = 0;
    for (std::size_t t = 0; t < index.tensors.size(); ++t) {
      const Json& tj = j.at("tensors")[t];
      const TensorRecord& rec = index.tensors[t];
      INFO("tensor " << rec.name);
      CHECK(rec.name == tj.at("name").get<std::string>());
      CHECK(format::dtype_info(rec.dtype)->name == tj.at("dtype").get<std::string>());
      CHECK(rec.shape == tj.at("shape").get<Shape>());
      CHECK(index.find_tensor(rec.name) == &rec);
      REQUIRE(rec.piece_count == tj.at("pieces").size());
      CHECK(rec.piece_first == piece_total);
      for (std::size_t k = 0; k < rec.piece_count; ++k) {
        const Json& pj = tj.at("pieces")[k];
        const std::size_t piece = static_cast<std::size_t>(rec.piece_first + k);
        const PieceRecord& p = index.pieces[piece];
        INFO("piece " << k);
        CHECK(p.tensor == t);
        CHECK(p.offsets == pj.at("offsets").get<Shape>());
        CHECK(p.shape == pj.at("shape").get<Shape>());
        CHECK(p.data_offset == pj.at("data_offset").get<std::uint64_t>());
        CHECK(p.data_length == pj.at("data_length").get<std::uint64_t>());
        REQUIRE(p.chunk_count == pj.at("chunks").size());
        CHECK(p.chunk_first == chunk_total);
        for (std::size_t c = 0; c < p.chunk_count; ++c) {
          const ChunkRecord& ch = index.chunks[static_cast<std::size_t>(p.chunk_first + c)];
          const Json& cj = pj.at("chunks")[c];
          CHECK(ch.offset == cj.at("offset").get<std::uint64_t>());
          CHECK(ch.length == cj.at("length").get<std::uint64_t>());
          CHECK(hex64(ch.digest) == cj.at("digest").get<std::string>());
        }
        chunk_total += static_cast<std::size_t>(p.chunk_count);
        const std::string want = from_hex(pj.at("data_hex").get<std::string>());
        std::string got(static_cast<std::size_t>(p.data_length), '\0');
        REQUIRE(r.read_piece(piece, got.data(), got.size()).ok());
        CHECK(to_hex(got) == to_hex(want));
      }
      piece_total += static_cast<std::size_t>(rec.piece_count);

      std::uint64_t bytes = 0;
      REQUIRE(shape_bytes(rec.shape, rec.dtype, bytes));
      std::string whole(static_cast<std::size_t>(bytes), '\0');
      const Status st = r.read_tensor(rec.name, whole.data(), whole.size());
      if (tj.at("complete").get<bool>()) {
        REQUIRE(st.ok());
        CHECK(to_hex(whole) == tj.at("data_hex").get<std::string>());
        // An interior slice that crosses piece boundaries reads what the global bytes say.
        if (rec.shape.size() >= 1 && elements_of(rec.shape) > 1) {
          Shape lo(rec.shape.size()), len(rec.shape.size());
          for (std::size_t d = 0; d < rec.shape.size(); ++d) {
            lo[d] = rec.shape[d] / 3;
            len[d] = std::max<std::uint64_t>(1, rec.shape[d] - 2 * lo[d]);
          }
          const auto esize = format::dtype_info(rec.dtype)->size;
          const std::string expect = extract_region(from_hex(tj.at("data_hex").get<std::string>()), rec.shape, esize, lo, len);
          std::string slice(expect.size(), '\0');
          REQUIRE(r.read_slice(rec.name, lo, len, slice.data(), slice.size()).ok());
          CHECK(to_hex(slice) == to_hex(expect));
        }
      } else {
        CHECK(st.code() == Code::not_found);  // a partial tensor is a shard of a multi-rank save
      }
    }
    CHECK(piece_total == index.pieces.size());
    CHECK(chunk_total == index.chunks.size());

    REQUIRE(index.metadata.size() == j.at("metadata").size());
    for (std::size_t m = 0; m < index.metadata.size(); ++m) {
      const Json& mj = j.at("metadata")[m];
      INFO("metadata " << mj.at("key"));
      CHECK(index.metadata[m].key == mj.at("key").get<std::string>());
      CHECK(value_type_name(index.metadata[m].value.type()) == mj.at("type").get<std::string>());
      const Value want = metadata_value(mj);
      if (want.is_float())  // compare bits: -0.0 == 0.0 but the file must keep the sign
        CHECK(hex64(f64_bits(index.metadata[m].value.as_float())) == mj.at("bits").get<std::string>());
      else
        CHECK(index.metadata[m].value == want);
    }

    auto report = verify_file(fs, path);
    REQUIRE(report.ok());
    CHECK(report->ok());
    CHECK(report->chunks_checked == index.chunks.size());
  }
}

TEST_CASE("golden files cover what they promise", "[golden]") {
  // Guards the golden set itself: several dtypes, a multi-piece tensor, a multi-chunk piece,
  // a zero-size tensor, a scalar, a partial tensor, every metadata type.
  std::vector<std::string> dtypes, types;
  bool multi_piece = false, multi_chunk = false, zero_size = false, scalar = false, partial = false;
  for (const auto& f : golden_definitions()) {
    const Json j = load_json(kGoldenDir + "/" + f.name.substr(0, f.name.size() - 5) + ".json");
    for (const auto& t : j.at("tensors")) {
      dtypes.push_back(t.at("dtype"));
      multi_piece |= t.at("pieces").size() > 1;
      zero_size |= t.at("pieces")[0].at("data_length").get<std::uint64_t>() == 0;
      scalar |= t.at("shape").empty();
      partial |= !t.at("complete").get<bool>();
      for (const auto& p : t.at("pieces")) multi_chunk |= p.at("chunks").size() > 2;
    }
    for (const auto& m : j.at("metadata")) types.push_back(m.at("type"));
  }
  for (const auto& info : format::kDTypes) CHECK(std::count(dtypes.begin(), dtypes.end(), std::string(info.name)) > 0);
  for (const char* t : {"int64", "float64", "bool", "string", "bytes"}) CHECK(std::count(types.begin(), types.end(), t) > 0);
  CHECK(multi_piece);
  CHECK(multi_chunk);
  CHECK(zero_size);
  CHECK(scalar);
  CHECK(partial);
}

// ---- XXH3-64 golden vectors ------------------------------------------------------------------

namespace {
// The fixed byte pattern of spec/golden/xxh3_64.json.
std::string xxh3_pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 17) & 0xFF);
  return s;
}
const std::size_t kVectorLengths[] = {0,   1,   2,   3,   4,   7,   8,   9,   15,  16,  17,  31,   32,  64,
                                      127, 128, 129, 200, 239, 240, 241, 255, 256, 257, 300, 1000, 1024, 5000};
}  // namespace

TEST_CASE("xxh3-64 matches the golden vectors", "[golden][hash]") {
  // The seed-0 digest of no bytes is published by the XXH3 authors; it anchors the table.
  CHECK(xxh3_64("", 0) == 0x2D06800538D394C2ull);
  const std::string path = kGoldenDir + "/xxh3_64.json";
  if (regenerating()) {
    Json j;
    j["description"] = "XXH3-64, seed 0, of the first `length` bytes of the pattern byte[i] = (i * 131 + 17) mod 256";
    j["vectors"] = Json::array();
    for (const auto n : kVectorLengths) {
      const std::string data = xxh3_pattern(n);
      j["vectors"].push_back(Json{{"length", n}, {"digest", hex64(xxh3_64(data.data(), data.size()))}});
    }
    ckpt_test::write_file(path, json_text(j));
  }
  const Json j = load_json(path);
  REQUIRE(j.at("vectors").size() == std::size(kVectorLengths));
  for (const auto& v : j.at("vectors")) {
    const std::size_t n = v.at("length");
    INFO("length " << n);
    const std::string data = xxh3_pattern(n);
    CHECK(hex64(xxh3_64(data.data(), data.size())) == v.at("digest").get<std::string>());
    // The streaming hasher the writer uses agrees with the one-shot digest, whatever the split.
    for (const std::size_t split : {std::size_t{0}, n / 3, n}) {
      StreamHasher h;
      h.update(data.data(), split);
      h.update(data.data() + split, n - split);
      CHECK(hex64(h.digest()) == v.at("digest").get<std::string>());
    }
  }
}

// ---- fresh files for the Python oracle (tests/interop/test_xxhash_oracle.py) ----------------

TEST_CASE("write fresh files for the interop oracle", "[.][interop_fresh]") {
  // Hidden: run as `test_golden "[interop_fresh]"` with CKPT_INTEROP_OUT=<dir>.
  const char* out = std::getenv("CKPT_INTEROP_OUT");
  REQUIRE(out != nullptr);
  const DType dtypes[] = {DType::F32, DType::BF16, DType::I64, DType::U8, DType::F16, DType::C64, DType::F8_E4M3};
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](std::uint64_t lo, std::uint64_t hi) { return lo + rng() % (hi - lo + 1); };
    FileDef f;
    f.name = "fresh-" + std::to_string(seed) + ".ckpt";
    f.description = "fresh file, seed " + std::to_string(seed) + ", random uuid";
    f.alignment_log2 = static_cast<std::uint32_t>(pick(6, 13));
    f.chunk_size_log2 = static_cast<std::uint32_t>(pick(12, 14));
    const std::size_t n_tensors = static_cast<std::size_t>(pick(1, 5));
    for (std::size_t t = 0; t < n_tensors; ++t) {
      const DType dt = dtypes[pick(0, std::size(dtypes) - 1)];
      Shape shape = {pick(1, 64), pick(1, 700)};
      // Split along axis 0 into up to 3 pieces; sometimes drop one (a shard of a larger save).
      const std::uint64_t parts = std::min<std::uint64_t>(pick(1, 3), shape[0]);
      std::vector<PieceDef> pieces;
      for (std::uint64_t k = 0; k < parts; ++k) {
        const std::uint64_t lo = shape[0] * k / parts, hi = shape[0] * (k + 1) / parts;
        pieces.push_back(PieceDef{{lo, 0}, {hi - lo, shape[1]}});
      }
      if (pieces.size() > 1 && pick(0, 2) == 0) pieces.erase(pieces.begin() + 1);
      TensorDef td = tensor("t" + std::to_string(t), dt, shape, pieces);
      // Random bytes, not the readable pattern: digests of arbitrary data.
      const auto random = ckpt_test::random_bytes(td.global.size(), seed * 1000 + t);
      td.global.assign(random.begin(), random.end());
      f.tensors.push_back(std::move(td));
    }
    f.write_order = sequential(f.tensors);
    std::shuffle(f.write_order.begin() + 1, f.write_order.end(), rng);  // tensor 0 stays first
    // Keep each tensor's own pieces in order, and tensors in first-appearance order as listed.
    std::vector<std::size_t> next(f.tensors.size(), 0);
    std::vector<bool> seen(f.tensors.size(), false);
    std::vector<std::size_t> appearance;
    for (auto& [t, p] : f.write_order) {
      p = next[t]++;
      if (!seen[t]) { seen[t] = true; appearance.push_back(t); }
    }
    std::vector<std::size_t> rank_of(f.tensors.size());
    for (std::size_t i = 0; i < appearance.size(); ++i) rank_of[appearance[i]] = i;
    std::vector<TensorDef> reordered(f.tensors.size());
    for (std::size_t t = 0; t < f.tensors.size(); ++t) reordered[rank_of[t]] = f.tensors[t];
    for (auto& wp : f.write_order) wp.first = rank_of[wp.first];
    f.tensors = std::move(reordered);
    f.metadata.emplace_back("seed", Value(static_cast<std::int64_t>(seed)));
    f.metadata.emplace_back("note", Value("fresh \xe2\x9c\x93"));
    f.metadata.emplace_back("blob", Value(Bytes{std::string("\x00\xff\x10", 3)}));

    const std::string path = std::string(out) + "/" + f.name;
    const auto summary = write_file(path, f.alignment_log2, f.chunk_size_log2, std::nullopt, f.tensors,
                                    pieces_in_write_order(f), f.metadata);
    f.uuid = uuid_string(summary.uuid);
    ckpt_test::write_file(std::string(out) + "/fresh-" + std::to_string(seed) + ".json", json_text(describe(f, summary)));
  }
}
