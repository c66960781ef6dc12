// Tests for include/ckpt/shard/index.hpp: hostile indexes built by hand (with the index digest and footer
// recomputed, so the decoder's rules and not the digest reject them), a seeded mutation fuzzer, and
// the replay of every regression file under tests/regress/.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "heap_counter.hpp"  // replaces operator new in this program
#include "hostile_shard.hpp"
#include "shard_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;
using ckpt_test::HeapPeak;


namespace {

constexpr std::uint64_t kChunk = 4096;
constexpr std::uint64_t kAlign = 64;
const std::string kPath = "hostile.ckpt";

// Where each table starts inside an index, from its header counts (spec 5.1).
struct Layout {
  std::uint64_t nt = 0, np = 0, nc = 0, nd = 0, nm = 0, nb = 0;
  std::uint64_t tensors = 0, pieces = 0, chunks = 0, dims = 0, meta = 0, blob = 0;
  explicit Layout(const std::string& idx) {
    const auto* h = reinterpret_cast<const unsigned char*>(idx.data());
    nt = get_u64(h + 8), np = get_u64(h + 16), nc = get_u64(h + 24), nd = get_u64(h + 32), nm = get_u64(h + 40),
    nb = get_u64(h + 48);
    tensors = format::kIndexHeaderSize;
    pieces = tensors + nt * format::kTensorRecordSize;
    chunks = pieces + np * format::kPieceRecordSize;
    dims = chunks + nc * format::kChunkRecordSize;
    meta = dims + nd * format::kDimRecordSize;
    blob = meta + nm * format::kMetaRecordSize;
  }
  std::uint64_t tensor(std::uint64_t i) const { return tensors + i * format::kTensorRecordSize; }
  std::uint64_t piece(std::uint64_t k) const { return pieces + k * format::kPieceRecordSize; }
  std::uint64_t chunk(std::uint64_t c) const { return chunks + c * format::kChunkRecordSize; }
  std::uint64_t metadata(std::uint64_t m) const { return meta + m * format::kMetaRecordSize; }
};

// A valid shard: tensor order b, a, c, z (first write order); b has two pieces written apart, a has
// four chunks, c is a scalar, z has zero elements; five metadata records of every type.
struct Good {
  ckpt_test::TempDir dir;
  std::string file;
  Superblock sb;
  Footer footer;
  std::string index;
  Index parsed;
  Good() {
    PosixFs fs;
    const std::string path = dir.file("good.ckpt");
    auto w = ShardWriter::create(fs, path, ckpt_test::small_writer_options(6));
    REQUIRE(w.ok());
    const auto rnd = ckpt_test::random_bytes(16000, 1);
    ckpt_test::write_piece(*w, "b", DType::I16, {6, 8}, {3, 0}, {3, 8}, rnd.data(), 48);
    REQUIRE(w->add_tensor("a", DType::F32, {4, 1000}, rnd.data(), 16000).ok());
    REQUIRE(w->add_tensor("c", DType::U8, {}, rnd.data(), 1).ok());
    ckpt_test::write_piece(*w, "b", DType::I16, {6, 8}, {0, 0}, {3, 8}, rnd.data() + 100, 48);
    REQUIRE(w->add_tensor("z", DType::BF16, {0, 3}, nullptr, 0).ok());
    ckpt_test::set_metadata(*w, {{"i", Value(std::int64_t{-5})}, {"f", Value(1.5)}, {"t", Value(true)}, {"s", Value("hello")},
                                 {"y", Value(Bytes{std::string("\0\1\2", 3)})}});
    const ShardReader r = ckpt_test::finish_and_open(fs, *w, path);
    file = ckpt_test::read_file(path);
    sb = r.superblock();
    footer = r.footer();
    parsed = r.index();
    index = file.substr(footer.index_offset, footer.index_length);
    REQUIRE(parsed.tensors.size() == 4);
    REQUIRE(parsed.tensors[0].name == "b");
    REQUIRE(parsed.tensors[1].name == "a");
    REQUIRE(parsed.pieces.size() == 5);
    REQUIRE(parsed.chunks.size() == 7);
  }
};

// The file around an edited index: the data up to the (possibly moved) index, then index and footer.
std::string file_with_index(const Good& g, const std::string& index, std::uint64_t index_offset) {
  std::string f = g.file.substr(0, std::min<std::uint64_t>(g.footer.index_offset, index_offset));
  f.resize(index_offset, '\0');
  f += index;
  Footer ft;
  ft.index_offset = index_offset;
  ft.index_length = index.size();
  ft.index_digest = xxh3_64(index.data(), index.size());
  ft.uuid = g.sb.uuid;
  const auto fb = encode_footer(ft);
  f.append(reinterpret_cast<const char*>(fb.data()), fb.size());
  return f;
}

// An index being edited for one hostile case.
struct Edit {
  std::string index;
  std::uint64_t index_offset;
  Layout at;
  Index ix;  // decoded form, for edits that re-encode
  void set64(std::uint64_t off, std::uint64_t v) { put_u64(reinterpret_cast<unsigned char*>(&index[off]), v); }
  void set32(std::uint64_t off, std::uint32_t v) { put_u32(reinterpret_cast<unsigned char*>(&index[off]), v); }
  void set16(std::uint64_t off, std::uint16_t v) { put_u16(reinterpret_cast<unsigned char*>(&index[off]), v); }
  std::uint64_t get64(std::uint64_t off) const { return get_u64(reinterpret_cast<const unsigned char*>(&index[off])); }
  std::size_t tensor(const std::string& name) const {
    for (std::size_t i = 0; i < ix.tensors.size(); ++i)
      if (ix.tensors[i].name == name) return i;
    FAIL("no tensor " << name);
    return 0;
  }
  std::size_t meta(const std::string& key) const {
    for (std::size_t i = 0; i < ix.metadata.size(); ++i)
      if (ix.metadata[i].key == key) return i;
    FAIL("no metadata " << key);
    return 0;
  }
  // Re-encodes ix (after a structural edit) in canonical form.
  void encode() {
    index = encode_index(ix);
    at = Layout(index);
  }
  // Moves piece k's data (and its chunk records) to a new file offset.
  void move_piece(std::size_t k, std::uint64_t offset) {
    auto& p = ix.pieces[k];
    p.data_offset = offset;
    for (std::uint64_t c = 0; c < p.chunk_count; ++c) ix.chunks[p.chunk_first + c].offset = offset + c * kChunk;
  }
  // Adds a piece to tensor t at the end of the data region, keeping every grouping rule of 5.3.
  void add_piece(std::size_t t, const Shape& offsets, const Shape& shape) {
    auto& tensor = ix.tensors[t];
    std::uint64_t length = 0;
    REQUIRE(shape_bytes(shape, tensor.dtype, length));
    std::uint64_t data_end = 128;
    for (const auto& p : ix.pieces) data_end = std::max(data_end, p.data_offset + p.data_length);
    const std::size_t pos = tensor.piece_first + tensor.piece_count;
    PieceRecord p;
    p.tensor = t;
    p.offsets = offsets;
    p.shape = shape;
    p.data_offset = align_up(data_end, kAlign);
    p.data_length = length;
    p.chunk_first = pos < ix.pieces.size() ? ix.pieces[pos].chunk_first : ix.chunks.size();
    p.chunk_count = (length + kChunk - 1) / kChunk;
    std::vector<ChunkRecord> chunks;
    for (std::uint64_t c = 0; c < p.chunk_count; ++c)
      chunks.push_back({p.data_offset + c * kChunk, std::min(kChunk, length - c * kChunk), 0});
    ix.chunks.insert(ix.chunks.begin() + static_cast<std::ptrdiff_t>(p.chunk_first), chunks.begin(), chunks.end());
    for (std::size_t k = pos; k < ix.pieces.size(); ++k) ix.pieces[k].chunk_first += chunks.size();
    ix.pieces.insert(ix.pieces.begin() + static_cast<std::ptrdiff_t>(pos), p);
    for (std::size_t j = t + 1; j < ix.tensors.size(); ++j) ++ix.tensors[j].piece_first;
    ++tensor.piece_count;
    index_offset = align_up(p.data_offset + length, 8);
  }
};

struct Case {
  const char* name;
  std::function<void(Edit&)> edit;
  const char* expect;  // a phrase of the message: proves which rule fired
};

const std::vector<Case>& hostile_cases() {
  static const std::vector<Case> cases = {
      // Header (5.1).
      {"bad index magic", [](Edit& e) { e.index[3] = 'X'; }, "index magic"},
      {"reserved header field set", [](Edit& e) { e.set64(56, 1); }, "reserved index bytes"},
      {"tensor count overflows on multiply", [](Edit& e) { e.set64(8, std::uint64_t{1} << 62); }, "overflow"},
      {"chunk count is all ones", [](Edit& e) { e.set64(24, ~std::uint64_t{0}); }, "overflow"},
      {"metadata count overflows on multiply", [](Edit& e) { e.set64(40, std::uint64_t{1} << 59); }, "overflow"},
      {"blob size overflows the sum", [](Edit& e) { e.set64(48, ~std::uint64_t{0} - 10); }, "overflow"},
      {"tensor count one too many", [](Edit& e) { e.set64(8, e.at.nt + 1); }, "add up"},
      {"dim count one too few", [](Edit& e) { e.set64(32, e.at.nd - 1); }, "add up"},
      {"blob size one too many", [](Edit& e) { e.set64(48, e.at.nb + 1); }, "add up"},
      {"all counts zero", [](Edit& e) { for (int f = 8; f < 56; f += 8) e.set64(f, 0); }, "add up"},
      // Tensor table (5.2).
      {"name starts at the blob's end", [](Edit& e) { e.set64(e.at.tensor(0), e.at.nb); }, "outside the blob"},
      {"name offset wraps around", [](Edit& e) { e.set64(e.at.tensor(0), ~std::uint64_t{0}); }, "outside the blob"},
      {"name runs past the blob", [](Edit& e) { e.set32(e.at.tensor(0) + 8, static_cast<std::uint32_t>(e.at.nb + 1)); }, "outside the blob"},
      {"empty name", [](Edit& e) { e.set32(e.at.tensor(0) + 8, 0); }, "is empty"},
      {"name longer than 65535", [](Edit& e) { e.set32(e.at.tensor(1) + 8, 65536); }, "is empty or outside"},
      {"name is a lone 0xff byte", [](Edit& e) { e.index[e.at.blob + e.get64(e.at.tensor(0))] = '\xff'; }, "not valid UTF-8"},
      {"name is an overlong NUL", [](Edit& e) { e.ix.tensors[0].name = std::string("\xc0\x80", 2); e.encode(); }, "not valid UTF-8"},
      {"name is a UTF-16 surrogate", [](Edit& e) { e.ix.tensors[0].name = "\xed\xa0\x80"; e.encode(); }, "not valid UTF-8"},
      {"name is a truncated sequence", [](Edit& e) { e.ix.tensors[0].name = "ok\xe2\x82"; e.encode(); }, "not valid UTF-8"},
      {"name is past U+10FFFF", [](Edit& e) { e.ix.tensors[0].name = "\xf4\x90\x80\x80"; e.encode(); }, "not valid UTF-8"},
      {"dtype code 0", [](Edit& e) { e.set16(e.at.tensor(0) + 12, 0); }, "unknown dtype code 0"},
      {"dtype code 18", [](Edit& e) { e.set16(e.at.tensor(1) + 12, 18); }, "unknown dtype code 18"},
      {"dtype code 65535", [](Edit& e) { e.set16(e.at.tensor(2) + 12, 0xFFFF); }, "unknown dtype"},
      {"rank 65", [](Edit& e) { e.set16(e.at.tensor(0) + 14, 65); }, "rank 65 exceeds 64"},
      {"rank 65535", [](Edit& e) { e.set16(e.at.tensor(3) + 14, 0xFFFF); }, "exceeds 64"},
      {"shape past the dims table", [](Edit& e) { e.set64(e.at.tensor(0) + 16, e.at.nd - 1); }, "shape outside the dims table"},
      {"shape range wraps around", [](Edit& e) { e.set64(e.at.tensor(1) + 16, ~std::uint64_t{0}); }, "shape outside the dims table"},
      {"global shape overflows 64 bits",
       [](Edit& e) { e.ix.tensors[e.tensor("a")].shape = {std::uint64_t{1} << 40, std::uint64_t{1} << 30}; e.encode(); },
       "overflows 64 bits"},
      {"byte size overflows but element count does not",
       [](Edit& e) { e.ix.tensors[e.tensor("a")].shape = {std::uint64_t{1} << 31, std::uint64_t{1} << 31}; e.encode(); },
       "overflows 64 bits"},
      {"second tensor's pieces restart at 0", [](Edit& e) { e.set64(e.at.tensor(1) + 24, 0); }, "expected to start at 2"},
      {"tensor with no pieces", [](Edit& e) { e.set64(e.at.tensor(1) + 32, 0); }, "with 1 to 4096 pieces"},
      {"tensor with 4097 pieces", [](Edit& e) { e.set64(e.at.tensor(3) + 32, 4097); }, "with 1 to 4096 pieces"},
      {"piece range past the table", [](Edit& e) { e.set64(e.at.tensor(3) + 32, 2); }, "with 1 to 4096 pieces"},
      {"piece count wraps around", [](Edit& e) { e.set64(e.at.tensor(0) + 32, ~std::uint64_t{0}); }, "with 1 to 4096 pieces"},
      // Piece table (5.3, 4.2, 4.3).
      {"piece owned by another tensor", [](Edit& e) { e.set64(e.at.piece(1), 1); }, "owner is 1, expected 0"},
      {"piece dims past the table", [](Edit& e) { e.set64(e.at.piece(0) + 40, e.at.nd - 3); }, "outside the dims table"},
      {"piece dims wrap around", [](Edit& e) { e.set64(e.at.piece(2) + 40, ~std::uint64_t{0} - 1); }, "outside the dims table"},
      {"piece sticks out of the tensor",
       [](Edit& e) { e.ix.pieces[1].offsets = {4, 0}; e.encode(); }, "exceeds global shape"},
      {"piece offset past the tensor",
       [](Edit& e) { e.ix.pieces[1].offsets = {7, 0}; e.ix.pieces[1].shape = {0, 8}; e.encode(); }, "exceeds global shape"},
      {"data length one byte long", [](Edit& e) { e.set64(e.at.piece(2) + 16, e.get64(e.at.piece(2) + 16) + 1); }, "data length"},
      {"data length zero for a scalar", [](Edit& e) { e.set64(e.at.piece(3) + 16, 0); }, "data length 0, expected 1"},
      {"data offset unaligned", [](Edit& e) { e.set64(e.at.piece(2) + 8, e.get64(e.at.piece(2) + 8) + 8); }, "unaligned or outside"},
      {"data inside the superblock", [](Edit& e) { e.set64(e.at.piece(0) + 8, 0); }, "unaligned or outside"},
      {"data runs into the index", [](Edit& e) { e.set64(e.at.piece(2) + 8, align_up(e.index_offset, kAlign)); }, "unaligned or outside"},
      {"data offset wraps around", [](Edit& e) { e.set64(e.at.piece(2) + 8, ~std::uint64_t{0} - 63); }, "unaligned or outside"},
      {"chunks of a later piece restart at 0", [](Edit& e) { e.set64(e.at.piece(1) + 24, 0); }, "expected [1, +1)"},
      {"chunk count one short", [](Edit& e) { e.set64(e.at.piece(2) + 32, 3); }, "expected [2, +4)"},
      {"chunk count one long", [](Edit& e) { e.set64(e.at.piece(4) + 32, 1); }, "expected [7, +0)"},
      {"chunk offset shifted", [](Edit& e) { e.set64(e.at.chunk(3), e.get64(e.at.chunk(3)) + kChunk); }, "chunk 1: range"},
      {"last chunk one byte short", [](Edit& e) { e.set64(e.at.chunk(5) + 8, e.get64(e.at.chunk(5) + 8) - 1); }, "chunk 3: range"},
      {"full chunk claims to be short", [](Edit& e) { e.set64(e.at.chunk(2) + 8, 100); }, "chunk 0: range"},
      {"a piece that belongs to no tensor",
       [](Edit& e) {
         PieceRecord p = e.ix.pieces.back();
         p.chunk_first = e.ix.chunks.size();
         e.ix.pieces.push_back(p);
         e.encode();
       },
       "1 pieces belong to no tensor"},
      {"a chunk that belongs to no piece",
       [](Edit& e) { e.ix.chunks.push_back({0, 0, 0}); e.encode(); }, "1 chunks belong to no piece"},
      {"two pieces share bytes in the file",
       [](Edit& e) { e.move_piece(1, e.ix.pieces[2].data_offset + 64); e.encode(); }, "(pieces are packed in file order, aligned)"},
      {"two pieces at the same offset",
       [](Edit& e) { e.move_piece(1, e.ix.pieces[0].data_offset); e.encode(); }, "expected"},
      {"a hole between pieces",
       [](Edit& e) { e.move_piece(1, e.ix.pieces[1].data_offset + 2 * kAlign); e.index_offset += 2 * kAlign; e.encode(); },
       "(pieces are packed in file order, aligned)"},
      {"a zero-length piece out of place",
       [](Edit& e) { e.move_piece(4, e.ix.pieces[4].data_offset + kAlign); e.index_offset += kAlign; e.encode(); },
       "(pieces are packed in file order, aligned)"},
      {"a hole before the index", [](Edit& e) { e.index_offset += 8; }, "index must start at"},
      {"index overlaps the data", [](Edit& e) { e.index_offset -= 8; }, "unaligned or outside"},
      {"pieces overlap in index space",
       [](Edit& e) { e.ix.pieces[1].offsets = {1, 0}; e.encode(); }, "pieces 0 and 1 overlap"},
      {"pieces coincide in index space",
       [](Edit& e) { e.ix.pieces[1].offsets = e.ix.pieces[0].offsets; e.encode(); }, "pieces 0 and 1 overlap"},
      {"a scalar stored twice", [](Edit& e) { e.add_piece(e.tensor("c"), {}, {}); e.encode(); }, "pieces 0 and 1 overlap"},
      {"a third piece overlapping in one column",
       [](Edit& e) { e.add_piece(e.tensor("b"), {2, 7}, {1, 1}); e.encode(); }, "pieces 1 and 2 overlap"},
      {"duplicate tensor names", [](Edit& e) { e.ix.tensors[1].name = "b"; e.encode(); }, "tensor name 'b' appears twice"},
      // Metadata (5.6).
      {"key outside the blob", [](Edit& e) { e.set64(e.at.metadata(0), e.at.nb); }, "metadata 0: key"},
      {"empty key", [](Edit& e) { e.set32(e.at.metadata(1) + 8, 0); }, "metadata 1: key"},
      {"key not UTF-8", [](Edit& e) { e.ix.metadata[2].key = "\xff"; e.encode(); }, "metadata 2: key"},
      {"metadata reserved set", [](Edit& e) { e.set16(e.at.metadata(0) + 14, 1); }, "reserved bytes must be zero"},
      {"value type 0", [](Edit& e) { e.set16(e.at.metadata(0) + 12, 0); }, "unknown value type 0"},
      {"value type 6", [](Edit& e) { e.set16(e.at.metadata(4) + 12, 6); }, "unknown value type 6"},
      {"bool 2", [](Edit& e) { e.set64(e.at.metadata(e.meta("t")) + 16, 2); }, "bool must be 0 or 1"},
      {"int with a value length", [](Edit& e) { e.set64(e.at.metadata(e.meta("i")) + 24, 1); }, "scalar with a value length"},
      {"float with a value length", [](Edit& e) { e.set64(e.at.metadata(e.meta("f")) + 24, 8); }, "scalar with a value length"},
      {"string outside the blob", [](Edit& e) { e.set64(e.at.metadata(e.meta("s")) + 16, e.at.nb); }, "value outside the blob"},
      {"string length wraps around", [](Edit& e) { e.set64(e.at.metadata(e.meta("s")) + 24, ~std::uint64_t{0}); }, "value outside the blob"},
      {"bytes outside the blob", [](Edit& e) { e.set64(e.at.metadata(e.meta("y")) + 16, e.at.nb - 2); }, "value outside the blob"},
      {"string not UTF-8", [](Edit& e) { e.ix.metadata[e.meta("s")].value = Value(std::string("a\xff")); e.encode(); }, "string is not valid UTF-8"},
      {"duplicate metadata keys", [](Edit& e) { e.ix.metadata[e.meta("f")].key = "i"; e.encode(); }, "metadata key 'i' appears twice"},
  };
  return cases;
}

Edit make_edit(const Good& g) {
  return Edit{g.index, g.footer.index_offset, Layout(g.index), g.parsed};
}

}  // namespace

TEST_CASE("the canonical index decodes to what the writer wrote", "[index]") {
  Good g;
  auto ix = decode_index(reinterpret_cast<const unsigned char*>(g.index.data()), g.index.size(), g.sb,
                         g.footer.index_offset, kPath);
  REQUIRE(ix.ok());
  CHECK(encode_index(*ix) == g.index);
  CHECK(ix->find_metadata("i")->value == Value(std::int64_t{-5}));
  CHECK(ix->find_metadata("f")->value == Value(1.5));
  CHECK(ix->find_metadata("t")->value == Value(true));
  CHECK(ix->find_metadata("s")->value == Value("hello"));
  CHECK(ix->find_metadata("y")->value == Value(Bytes{std::string("\0\1\2", 3)}));
  CHECK(ix->find_tensor("c")->shape.empty());
  CHECK(ix->find_tensor("nope") == nullptr);
}

TEST_CASE("hostile indexes fail with corrupt and a message naming the offset", "[index]") {
  Good g;
  PosixFs fs;
  const std::string path = g.dir.file(kPath);
  std::set<std::string> names;
  for (const auto& c : hostile_cases()) {
    INFO("case: " << c.name);
    CHECK(names.insert(c.name).second);
    Edit e = make_edit(g);
    c.edit(e);
    const bool changed = e.index != g.index || e.index_offset != g.footer.index_offset;
    REQUIRE(changed);
    auto ix = decode_index(reinterpret_cast<const unsigned char*>(e.index.data()), e.index.size(), g.sb, e.index_offset, path);
    REQUIRE_FALSE(ix.ok());
    const Status& st = ix.status();
    INFO("message: " << st.message());
    CHECK(st.code() == Code::corrupt);
    CHECK(st.message().rfind(path + ": offset ", 0) == 0);
    CHECK(st.message().find(c.expect) != std::string::npos);
    // The named offset lies inside the file that holds this index.
    const std::uint64_t named = std::stoull(st.message().substr(path.size() + 9));
    CHECK(named < e.index_offset + e.index.size() + format::kFooterSize);

    // The same through a file whose digests are all correct: open and verify say the same thing.
    ckpt_test::write_file(path, file_with_index(g, e.index, e.index_offset));
    auto r = ShardReader::open(fs, path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::corrupt);
    CHECK(r.status().message() == st.message());
    auto v = verify_file(fs, path);
    REQUIRE(v.ok());
    REQUIRE(v->problems.size() == 1);
    CHECK(v->problems[0].region == "index");
    CHECK(v->problems[0].code == Code::corrupt);
    CHECK(v->problems[0].message == st.message());
  }
  CHECK(names.size() >= 60);
}

TEST_CASE("indexes shorter than their header are refused", "[index]") {
  Good g;
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, std::size_t{63}}) {
    auto ix = decode_index(reinterpret_cast<const unsigned char*>(g.index.data()), n, g.sb, g.footer.index_offset, kPath);
    REQUIRE_FALSE(ix.ok());
    CHECK(ix.status().code() == Code::corrupt);
    CHECK(ix.status().message().find("offset " + std::to_string(g.footer.index_offset)) != std::string::npos);
  }
}

TEST_CASE("non-canonical but valid indexes are accepted (spec 5.5)", "[index]") {
  Good g;
  PosixFs fs;
  const std::string path = g.dir.file("valid.ckpt");
  struct Row { const char* name; std::function<void(Edit&)> edit; };
  const std::vector<Row> rows = {
      {"an unreferenced byte at the blob's end",
       [](Edit& e) { e.set64(48, e.at.nb + 1); e.index += 'q'; }},
      {"a key sharing the bytes of a tensor name",
       [](Edit& e) {
         e.set64(e.at.metadata(0), e.get64(e.at.tensor(0)));  // key "i" now reads "b"
       }},
      {"a scalar's empty dims range at the table's end",
       [](Edit& e) { e.set64(e.at.tensor(2) + 16, e.at.nd); e.set64(e.at.piece(3) + 40, e.at.nd); }},
      {"an unused dims entry",
       [](Edit& e) {
         e.set64(32, e.at.nd + 1);
         e.index.insert(e.at.meta, std::string(8, '\x07'));
       }},
      {"bytes metadata that is not UTF-8",
       [](Edit& e) { e.ix.metadata[e.meta("y")].value = Value(Bytes{"\xff\xfe"}); e.encode(); }},
      {"an empty string value", [](Edit& e) { e.ix.metadata[e.meta("s")].value = Value(""); e.encode(); }},
      {"float metadata holding a NaN",
       [](Edit& e) { e.set64(e.at.metadata(e.meta("f")) + 16, 0x7ff8000000000001ULL); }},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    Edit e = make_edit(g);
    row.edit(e);
    const bool changed = e.index != g.index;
    REQUIRE(changed);
    auto ix = decode_index(reinterpret_cast<const unsigned char*>(e.index.data()), e.index.size(), g.sb, e.index_offset, path);
    INFO(ix.status().message());
    REQUIRE(ix.ok());
    ckpt_test::write_file(path, file_with_index(g, e.index, e.index_offset));
    auto v = verify_file(fs, path);
    REQUIRE(v.ok());
    CHECK(v->ok());
  }
}

TEST_CASE("superblock and footer codecs refuse what spec 3 and 6 forbid", "[index]") {
  Superblock sb;
  sb.alignment_log2 = 12;
  sb.chunk_size_log2 = 20;
  sb.data_offset = 4096;
  sb.uuid[0] = 0x42;
  const auto good = encode_superblock(sb);
  {
    auto d = decode_superblock(good.data(), kPath);
    REQUIRE(d.ok());
    CHECK(d->uuid == sb.uuid);
    CHECK(d->chunk_size() == (1u << 20));
  }
  // Each row sets one field, then re-signs the superblock so only the rule can reject it.
  struct Row { const char* name; std::size_t field; int width; std::uint64_t value; Code code; };
  const Row rows[] = {
      {"version 2", format::sb::kVersion, 4, 2, Code::version},
      {"size 129", format::sb::kSize, 4, 129, Code::corrupt},
      {"unknown incompat bit", format::sb::kIncompat, 8, 1, Code::version},
      {"alignment 2^5", format::sb::kAlignmentLog2, 4, 5, Code::corrupt},
      {"alignment 2^22", format::sb::kAlignmentLog2, 4, 22, Code::corrupt},
      {"chunk size 2^11", format::sb::kChunkSizeLog2, 4, 11, Code::corrupt},
      {"chunk size 2^31", format::sb::kChunkSizeLog2, 4, 31, Code::corrupt},
      {"hash id 2", format::sb::kHashId, 4, 2, Code::version},
      {"reserved word", format::sb::kReserved0, 4, 1, Code::corrupt},
      {"reserved tail", format::sb::kReserved1 + 39, 1, 1, Code::corrupt},
      {"data offset 128", format::sb::kDataOffset, 8, 128, Code::corrupt},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    auto b = good;
    if (row.width == 8) put_u64(b.data() + row.field, row.value);
    else if (row.width == 4) put_u32(b.data() + row.field, static_cast<std::uint32_t>(row.value));
    else b[row.field] = static_cast<unsigned char>(row.value);
    put_u64(b.data() + format::sb::kDigest, xxh3_64(b.data(), format::sb::kDigest));
    auto d = decode_superblock(b.data(), kPath);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == row.code);
    CHECK(d.status().message().find(kPath) == 0);
  }
  {
    auto b = good;
    b[5] ^= 1;
    CHECK(decode_superblock(b.data(), kPath).status().code() == Code::corrupt);
    b = good;
    b[100] ^= 1;
    CHECK(decode_superblock(b.data(), kPath).status().message().find("digest mismatch") != std::string::npos);
  }

  Footer ft;
  ft.index_offset = 4096;
  ft.index_length = 200;
  const std::uint64_t size = 4096 + 200 + 64;
  REQUIRE(decode_footer(encode_footer(ft).data(), size, kPath).ok());
  struct FRow { const char* name; std::uint64_t offset, length, file_size; Code code; };
  const FRow frows[] = {
      {"index ends before the footer", 4096, 199, size, Code::corrupt},
      {"index runs into the footer", 4096, 201, size, Code::corrupt},
      {"index starts past the footer", size, 0, size, Code::corrupt},
      {"index shorter than its header", size - 64 - 63, 63, size, Code::corrupt},
      {"index length wraps around", 4096, ~std::uint64_t{0}, size, Code::corrupt},
      {"index longer than 4 GiB", 128, (std::uint64_t{1} << 32) + 8, (std::uint64_t{1} << 32) + 200, Code::corrupt},
  };
  for (const auto& row : frows) {
    INFO(row.name);
    Footer f = ft;
    f.index_offset = row.offset;
    f.index_length = row.length;
    auto d = decode_footer(encode_footer(f).data(), row.file_size, kPath);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == row.code);
    CHECK(d.status().message().find("offset ") != std::string::npos);
  }
  {
    Footer f = ft;
    f.version = 2;
    CHECK(decode_footer(encode_footer(f).data(), size, kPath).status().code() == Code::version);
    auto b = encode_footer(ft);
    put_u32(b.data() + format::ft::kReserved, 1);
    put_u64(b.data() + format::ft::kDigest, xxh3_64(b.data(), format::ft::kDigest));
    CHECK(decode_footer(b.data(), size, kPath).status().code() == Code::corrupt);
    b = encode_footer(ft);
    b[63] = 'x';
    CHECK(decode_footer(b.data(), size, kPath).status().code() == Code::incomplete);
  }
}

namespace {

// Bytes the decoded form holds in names, keys, values and shapes: what the decoder limit bounds.
std::uint64_t decoded_bytes(const Index& ix) {
  std::uint64_t n = 0;
  for (const auto& t : ix.tensors) n += t.name.size() + 8 * t.shape.size();
  for (const auto& p : ix.pieces) n += 8 * (p.offsets.size() + p.shape.size());
  for (const auto& m : ix.metadata) {
    n += m.key.size();
    if (m.value.is_string()) n += m.value.as_string().size();
    if (m.value.is_bytes()) n += m.value.as_bytes().size();
  }
  return n;
}

Result<Index> decode_hostile(const ckpt_test::HostileShard& h) {
  return decode_index(reinterpret_cast<const unsigned char*>(h.index.data()), h.index.size(), h.sb, h.index_offset, kPath);
}

}  // namespace

TEST_CASE("overlapping blob references that outgrow the index are refused before copying (issue 9)", "[index][limits]") {
  // The issue 9 file: 2 MiB whose names and values share blob bytes; copying them would need 17 GiB.
  const auto h = ckpt_test::hostile_shared_blob_shard(ckpt_test::issue9_shape());
  REQUIRE(h.file.size() < (std::uint64_t{3} << 20));
  HeapPeak peak;
  auto ix = decode_hostile(h);
  const std::int64_t used = peak.bytes();
  REQUIRE_FALSE(ix.ok());
  INFO(ix.status().message().substr(0, 400));
  CHECK(ix.status().code() == Code::corrupt);
  const std::string& msg = ix.status().message();
  CHECK(msg.rfind(kPath + ": offset ", 0) == 0);
  CHECK(msg.find("decoder limit") != std::string::npos);
  CHECK(msg.find("expected at most") != std::string::npos);
  CHECK(msg.find("found 65535") != std::string::npos);
  // The refusal costs a small multiple of the index, not of what the references would copy.
  CHECK(used < static_cast<std::int64_t>(4 * h.index.size()));

  SECTION("values alone: one 1 MiB value per record is refused at the first record over the limit") {
    ckpt_test::HostileShape s;
    s.metadata = 512;
    s.name_length = 8;
    const auto values = ckpt_test::hostile_shared_blob_shard(s);
    HeapPeak values_peak;
    auto vx = decode_hostile(values);
    REQUIRE_FALSE(vx.ok());
    INFO(vx.status().message());
    CHECK(vx.status().message().find("metadata 1 value") != std::string::npos);  // the first 1 MiB value fits in the index length
    CHECK(values_peak.bytes() < static_cast<std::int64_t>(4 * values.index.size()));
  }
  SECTION("shapes: rank-64 pieces sharing one dims range are refused once they outgrow the index") {
    Good g;
    // 2000 empty rank-64 tensors whose shapes and pieces all read the same 128 dims entries.
    Index big;
    for (int i = 0; i < 2000; ++i) {
      TensorRecord t;
      t.name = "t" + std::to_string(i);
      t.dtype = DType::U8;
      t.shape.assign(64, 0);
      t.piece_first = static_cast<std::uint64_t>(i);
      t.piece_count = 1;
      big.tensors.push_back(t);
      PieceRecord p;
      p.tensor = static_cast<std::uint64_t>(i);
      p.offsets.assign(64, 0);
      p.shape.assign(64, 0);
      p.data_offset = 128;
      big.pieces.push_back(p);
    }
    std::string idx = encode_index(big);
    Layout at(idx);
    // Keep 128 dims entries (all zero), point every shape and piece at them, drop the rest.
    const std::uint64_t keep = 128;
    idx.erase(at.dims + keep * 8, (at.nd - keep) * 8);
    put_u64(reinterpret_cast<unsigned char*>(&idx[32]), keep);
    for (std::uint64_t i = 0; i < at.nt; ++i) put_u64(reinterpret_cast<unsigned char*>(&idx[at.tensor(i) + 16]), 0);
    for (std::uint64_t k = 0; k < at.np; ++k) put_u64(reinterpret_cast<unsigned char*>(&idx[at.piece(k) + 40]), 0);
    // Blob offsets in the records do not move: the blob moved as a whole, and offsets are blob-relative.
    auto dx = decode_index(reinterpret_cast<const unsigned char*>(idx.data()), idx.size(), g.sb, 128, kPath);
    REQUIRE_FALSE(dx.ok());
    INFO(dx.status().message());
    CHECK(dx.status().message().find("shapes, offsets and piece shapes") != std::string::npos);
  }
}

TEST_CASE("shared blob and dims ranges within the index length still decode (spec 5.5)", "[index][limits]") {
  // 16 names and 64 keys of 100 bytes with overlapping ranges, 64 values sharing the same 64 bytes.
  ckpt_test::HostileShape s;
  s.tensors = 16;
  s.metadata = 64;
  s.blob = 16 << 10;
  s.name_length = 100;
  s.value_length = 64;
  const auto h = ckpt_test::hostile_shared_blob_shard(s);
  HeapPeak peak;
  auto ix = decode_hostile(h);
  INFO(ix.status().message().substr(0, 300));
  REQUIRE(ix.ok());
  const std::int64_t used = peak.bytes();
  CHECK(ix->tensors.size() == 16);
  CHECK(ix->metadata.size() == 64);
  CHECK(decoded_bytes(*ix) <= 2 * h.index.size());  // the limit: each class at most the index length
  CHECK(used < static_cast<std::int64_t>(8 * h.index.size()));
  // And the whole file verifies intact: sharing is allowed, only outgrowing the index is not.
  const ckpt_test::ScratchFile file("shared.ckpt", h.file);
  const std::string& path = file.path;
  PosixFs fs;
  auto v = verify_file(fs, path);
  REQUIRE(v.ok());
  CHECK(v->ok());
}

TEST_CASE("ckpt-verify on the issue 9 file exits promptly with bounded memory", "[index][limits][tool]") {
  const std::string verify = std::string(CKPT_BINARY_DIR) + "/ckpt-verify";
  if (::access(verify.c_str(), X_OK) != 0) {
    WARN("skipped: " << verify << " is not built (CKPT_BUILD_TOOLS=OFF)");
    return;
  }
  const ckpt_test::ScratchFile file("issue9.ckpt", ckpt_test::hostile_shared_blob_shard(ckpt_test::issue9_shape()).file);
  const std::string& path = file.path;
#if defined(__SANITIZE_ADDRESS__)
  // ASan reserves terabytes of shadow address space: an address-space limit cannot apply to it.
  const std::string limit = "";
  WARN("ASan build: ckpt-verify runs without ulimit -v");
#else
  const std::string limit = "ulimit -v 1048576; ";  // 1 GiB of address space; the old decoder wanted 17 GiB
#endif
  const auto run = ckpt_test::run_program("/bin/sh", {"-c", limit + "exec \"$0\" \"$1\"", verify, path});
  INFO("stdout: " << run.out.substr(0, 600) << "\nstderr: " << run.err.substr(0, 600));
  CHECK(run.code == 1);  // damaged, not killed (137), out of memory (2) or aborted (134)
  CHECK(run.out.find("decoder limit") != std::string::npos);
}

namespace {

// Checks what a decoded (possibly mutated) index promises its readers (spec 5.7): every range lies
// in the data region and every chunk where 4.4 puts it.
void check_invariants(const Index& ix, const Superblock& sb, std::uint64_t index_offset) {
  std::uint64_t next_piece = 0, next_chunk = 0;
  for (std::size_t i = 0; i < ix.tensors.size(); ++i) {
    const auto& t = ix.tensors[i];
    REQUIRE(t.piece_first == next_piece);
    REQUIRE(t.piece_count >= 1);
    REQUIRE(t.shape.size() <= format::kMaxRank);
    next_piece += t.piece_count;
    REQUIRE(next_piece <= ix.pieces.size());
    for (std::uint64_t k = t.piece_first; k < next_piece; ++k) {
      const auto& p = ix.pieces[k];
      REQUIRE(p.tensor == i);
      REQUIRE(p.offsets.size() == t.shape.size());
      REQUIRE(p.shape.size() == t.shape.size());
      REQUIRE(p.data_offset >= sb.data_offset);
      REQUIRE(range_within(p.data_offset, p.data_length, index_offset));
      REQUIRE(p.chunk_first == next_chunk);
      next_chunk += p.chunk_count;
      REQUIRE(next_chunk <= ix.chunks.size());
      for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
        const auto& rec = ix.chunks[p.chunk_first + c];
        REQUIRE(rec.offset == p.data_offset + c * sb.chunk_size());
        REQUIRE(range_within(rec.offset - p.data_offset, rec.length, p.data_length));
      }
    }
  }
  REQUIRE(next_piece == ix.pieces.size());
  REQUIRE(next_chunk == ix.chunks.size());
}

const std::uint64_t kInteresting[] = {0, 1, 2, 3, 7, 8, 63, 64, 65, 127, 128, 255, 4095, 4096, 4097, 65535, 65536,
                                      std::uint64_t{1} << 31, std::uint64_t{1} << 32, (std::uint64_t{1} << 32) + 1,
                                      std::uint64_t{1} << 63, ~std::uint64_t{0}, ~std::uint64_t{0} - 1,
                                      ~std::uint64_t{0} >> 1};

// One to four mutations of the index bytes, mostly below the header so the tables still add up.
void mutate_index(std::mt19937_64& rng, std::string& idx, std::uint64_t index_offset) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int m = 0; m < n; ++m) {
    const bool header = rng() % 8 == 0;
    const std::size_t lo = header ? 8 : format::kIndexHeaderSize;
    const std::size_t span = header ? 48 : idx.size() - format::kIndexHeaderSize;
    auto* b = reinterpret_cast<unsigned char*>(&idx[0]);
    std::size_t at = lo + rng() % span;
    switch (rng() % 7) {
      case 0: b[at] = static_cast<unsigned char>(rng()); break;
      case 1: b[at] ^= static_cast<unsigned char>(1u << (rng() % 8)); break;
      case 2:
      case 3: {
        at &= ~std::size_t{7};  // every u64 field of the index is 8-aligned
        if (at + 8 > idx.size()) break;
        std::uint64_t v = kInteresting[rng() % (sizeof kInteresting / sizeof kInteresting[0])];
        if (rng() % 4 == 0) v = get_u64(b + at) + (rng() % 2 ? 1 : -1) * static_cast<std::uint64_t>(1 + rng() % 64);
        if (rng() % 8 == 0) v = index_offset + (rng() % 3) * 8;
        put_u64(b + at, v);
        break;
      }
      case 4: {
        at &= ~std::size_t{3};
        if (at + 4 > idx.size()) break;
        put_u32(b + at, static_cast<std::uint32_t>(kInteresting[rng() % (sizeof kInteresting / sizeof kInteresting[0])]));
        break;
      }
      case 5: {
        at &= ~std::size_t{1};
        if (at + 2 > idx.size()) break;
        put_u16(b + at, static_cast<std::uint16_t>(rng() % 80));
        break;
      }
      case 6: {  // copy one 8-byte word over another
        at &= ~std::size_t{7};
        const std::size_t from = (format::kIndexHeaderSize + rng() % span) & ~std::size_t{7};
        if (at + 8 > idx.size() || from + 8 > idx.size()) break;
        std::memmove(b + at, b + from, 8);
        break;
      }
    }
  }
}

// Everything a reader or verifier does with a file; none of it may crash, whatever the outcome.
void exercise_file(PosixFs& fs, const std::string& path) {
  auto r = ShardReader::open(fs, path);
  if (r.ok()) {
    for (const auto& t : r->index().tensors) {
      std::uint64_t bytes = 0;
      REQUIRE(shape_bytes(t.shape, t.dtype, bytes));
      if (bytes > (std::uint64_t{1} << 24)) continue;  // a hostile shape may be huge: do not allocate it
      std::vector<unsigned char> buf(static_cast<std::size_t>(bytes));
      const Status st = r->read_tensor(t.name, buf.data(), buf.size());
      CHECK((st.ok() || st.code() == Code::corrupt || st.code() == Code::not_found));
    }
    for (std::size_t k = 0; k < r->index().pieces.size(); ++k) {
      auto m = r->map_piece(k, ReadCheck::touched);
      CHECK((m.ok() || m.status().code() == Code::corrupt));
    }
  } else {
    CHECK((r.status().code() == Code::corrupt || r.status().code() == Code::incomplete));
  }
  VerifyOptions o;
  o.threads = 2;
  auto v = verify_file(fs, path, o);
  REQUIRE(v.ok());
  if (!r.ok()) CHECK_FALSE(v->ok());
  // An index the reader accepts leaves only data to complain about (a mutated digest, say).
  if (r.ok())
    for (const auto& p : v->problems) CHECK(p.region == "data");
}

}  // namespace

TEST_CASE("mutated indexes either decode consistently or fail cleanly", "[index][fuzz]") {
  Good g;
  PosixFs fs;
  const std::string path = g.dir.file("fuzz.ckpt");
  // CKPT_FUZZ_ITERATIONS and CKPT_FUZZ_SEED run a longer campaign by hand; the suite keeps the defaults.
  const char* env_iterations = std::getenv("CKPT_FUZZ_ITERATIONS");
  const char* env_seed = std::getenv("CKPT_FUZZ_SEED");
  const int kIterations = env_iterations ? std::atoi(env_iterations) : 4000;
  std::mt19937_64 rng(env_seed ? std::strtoull(env_seed, nullptr, 0) : 0xC0FFEE);
  int decoded = 0, files = 0;
  std::set<std::string> rules;  // which checks fired: the fuzzer must reach deep into the decoder
  for (int i = 0; i < kIterations; ++i) {
    std::string idx = g.index;
    mutate_index(rng, idx, g.footer.index_offset);
    if (idx == g.index) continue;
    INFO("iteration " << i);
    auto ix = decode_index(reinterpret_cast<const unsigned char*>(idx.data()), idx.size(), g.sb, g.footer.index_offset, path);
    if (ix.ok()) {
      ++decoded;
      check_invariants(*ix, g.sb, g.footer.index_offset);
    } else {
      INFO("message: " << ix.status().message());
      REQUIRE(ix.status().code() == Code::corrupt);
      REQUIRE(ix.status().message().rfind(path + ": offset ", 0) == 0);
      std::string rule = ix.status().message().substr(path.size());
      rule.erase(std::remove_if(rule.begin(), rule.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }), rule.end());
      rules.insert(rule.substr(0, 40));
    }
    // Through the file with correct digests: every decodable mutation, and a sample of the rest.
    if (ix.ok() || i % 40 == 0) {
      ckpt_test::write_file(path, file_with_index(g, idx, g.footer.index_offset));
      exercise_file(fs, path);
      ++files;
    }
  }
  INFO(decoded << " decoded, " << files << " files, " << rules.size() << " distinct failures");
  CHECK(decoded > kIterations / 40);  // digests, metadata values and the like change freely
  CHECK(rules.size() > 25);           // and the checks it trips are many, not just the table sizes
  CHECK(files > kIterations / 40);
}

TEST_CASE("every regression file under tests/regress is read and verified without a crash", "[index][regress]") {
  const std::string dir = std::string(CKPT_SOURCE_DIR) + "/tests/regress";
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".ckpt") names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  PosixFs fs;
  for (const auto& name : names) {
    INFO("regression file " << name);
    exercise_file(fs, dir + "/" + name);
  }
  SUCCEED(names.size() << " regression files replayed");
}
