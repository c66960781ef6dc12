// Tests for include/ckpt/shard/shard_reader.hpp: slices of multi-piece tensors against a reference built
// here, verification of exactly the chunks a read touches, zero-copy maps, and coverage errors.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include "shard_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

using Bytes8 = std::vector<unsigned char>;
constexpr std::uint64_t kChunk = 4096;

// Calls fn with every multi-index of a slice of this shape, row-major; nothing for an empty slice.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  for (const auto d : shape)
    if (d == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    fn(idx);
    std::size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

std::uint64_t linear(const Shape& idx, const Shape& shape) {
  std::uint64_t at = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) at = at * shape[d] + idx[d];
  return at;
}

std::uint64_t elements(const Shape& s) {
  std::uint64_t n = 1;
  for (const auto d : s) n *= d;
  return n;
}

// The reference: the slice [off, off+shape) of a row-major global array, computed element by element.
Bytes8 extract(const Bytes8& global, const Shape& gshape, std::size_t esize, const Shape& off, const Shape& shape) {
  Bytes8 out(elements(shape) * esize);
  std::uint64_t k = 0;
  for_each_index(shape, [&](const Shape& idx) {
    Shape g(idx.size());
    for (std::size_t d = 0; d < idx.size(); ++d) g[d] = off[d] + idx[d];
    std::memcpy(&out[k * esize], &global[linear(g, gshape) * esize], esize);
    ++k;
  });
  return out;
}

struct PieceSpec {
  Shape offsets, shape;
};

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<PieceSpec> pieces;
  Bytes8 data;  // the whole global tensor
  std::size_t esize() const { return format::dtype_info(dtype)->size; }
};

// Every slice of the grid that the split points cut the shape into.
std::vector<PieceSpec> grid(const Shape& shape, const std::vector<std::vector<std::uint64_t>>& splits) {
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> ranges(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::uint64_t at = 0;
    for (const auto s : splits[d]) {
      ranges[d].emplace_back(at, s - at);
      at = s;
    }
    ranges[d].emplace_back(at, shape[d] - at);
  }
  Shape counts(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) counts[d] = ranges[d].size();
  std::vector<PieceSpec> out;
  for_each_index(counts, [&](const Shape& idx) {
    PieceSpec p;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      p.offsets.push_back(ranges[d][idx[d]].first);
      p.shape.push_back(ranges[d][idx[d]].second);
    }
    out.push_back(p);
  });
  return out;
}

TensorSpec make_tensor(std::string name, DType dtype, Shape shape, const std::vector<std::vector<std::uint64_t>>& splits,
                       std::uint64_t seed) {
  TensorSpec t{std::move(name), dtype, std::move(shape), {}, {}};
  t.pieces = grid(t.shape, splits);
  t.data = ckpt_test::random_bytes(elements(t.shape) * t.esize(), seed);
  return t;
}

std::vector<TensorSpec> make_tensors() {
  std::vector<TensorSpec> ts;
  ts.push_back(make_tensor("r1", DType::U8, {20000}, {{7000}}, 1));
  ts.push_back(make_tensor("r2", DType::F32, {90, 61}, {{20}, {30}}, 2));
  ts.push_back(make_tensor("r3", DType::BF16, {6, 17, 29}, {{}, {5, 11}, {}}, 3));
  ts.push_back(make_tensor("r4", DType::F64, {3, 4, 5, 6}, {{1}, {}, {}, {2}}, 4));
  ts.push_back(make_tensor("r5", DType::I16, {2, 3, 4, 5, 6}, {{}, {}, {}, {}, {3}}, 5));
  ts.push_back(make_tensor("scalar", DType::C64, {}, {}, 6));
  ts.push_back(make_tensor("empty", DType::F32, {4, 0, 3}, {{2}, {}, {}}, 7));
  return ts;
}

// Writes every piece of every tensor, interleaving tensors so the file order differs from index order,
// each piece in several write() calls of odd sizes.
void write_shard(const std::string& path, const std::vector<TensorSpec>& ts) {
  PosixFs fs;
  auto w = ShardWriter::create(fs, path, ckpt_test::small_writer_options(6));
  REQUIRE(w.ok());
  std::vector<std::pair<std::size_t, std::size_t>> order;
  for (std::size_t i = 0; i < ts.size(); ++i)
    for (std::size_t k = 0; k < ts[i].pieces.size(); ++k) order.emplace_back(i, k);
  std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a.second < b.second; });
  for (const auto& [i, k] : order) {
    const auto& t = ts[i];
    const auto& p = t.pieces[k];
    const Bytes8 bytes = extract(t.data, t.shape, t.esize(), p.offsets, p.shape);
    REQUIRE(w->begin_piece(t.name, t.dtype, t.shape, p.offsets, p.shape).ok());
    std::size_t at = 0, step = 1;
    while (at < bytes.size()) {
      const std::size_t n = std::min(bytes.size() - at, step);
      REQUIRE(w->write(bytes.data() + at, n).ok());
      at += n;
      step = step * 3 + 7;
    }
    REQUIRE(w->end_piece().ok());
  }
  REQUIRE(w->finish().ok());
}

// A random slice inside shape, sometimes empty along a dimension, sometimes the whole extent.
void random_box(std::mt19937_64& rng, const Shape& shape, Shape& off, Shape& len) {
  off.assign(shape.size(), 0);
  len.assign(shape.size(), 0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const int kind = static_cast<int>(rng() % 8);
    if (kind == 0) {
      off[d] = 0;
      len[d] = shape[d];
    } else if (kind == 1 && rng() % 4 == 0) {
      off[d] = rng() % (shape[d] + 1);
      len[d] = 0;
    } else {
      off[d] = rng() % (shape[d] + 1);
      len[d] = shape[d] == off[d] ? 0 : 1 + rng() % (shape[d] - off[d]);
    }
  }
}

struct Shard {
  ckpt_test::TempDir dir;
  std::string path;
  std::vector<TensorSpec> tensors = make_tensors();
  PosixFs fs;
  Shard() : path(dir.file("s.ckpt")) { write_shard(path, tensors); }
  ShardReader open() {
    auto r = ShardReader::open(fs, path);
    REQUIRE(r.ok());
    return std::move(r).value();
  }
};

}  // namespace

TEST_CASE("whole tensors of every rank and dtype read back bit for bit", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  for (const auto& t : s.tensors) {
    INFO("tensor " << t.name);
    const TensorRecord* rec = r.index().find_tensor(t.name);
    REQUIRE(rec != nullptr);
    CHECK(rec->dtype == t.dtype);
    CHECK(rec->shape == t.shape);
    CHECK(rec->piece_count == t.pieces.size());
    for (ReadCheck v : {ReadCheck::touched, ReadCheck::none}) {
      Bytes8 back(t.data.size() + 1, 0xAB);
      REQUIRE(r.read_tensor(t.name, back.data(), t.data.size(), v).ok());
      CHECK(std::equal(t.data.begin(), t.data.end(), back.begin()));
      CHECK(back.back() == 0xAB);  // nothing written past the buffer's end
    }
  }
}

TEST_CASE("random hyper-rectangular slices match the reference", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  std::mt19937_64 rng(20240611);
  std::size_t slices = 0, empty = 0;
  for (const auto& t : s.tensors) {
    for (int i = 0; i < 120; ++i) {
      Shape off, len;
      random_box(rng, t.shape, off, len);
      INFO("tensor " << t.name << " slice at " << shape_string(off) << " shape " << shape_string(len));
      const Bytes8 want = extract(t.data, t.shape, t.esize(), off, len);
      Bytes8 got(want.size(), 0xCD);
      const ReadCheck v = i % 5 == 4 ? ReadCheck::none : ReadCheck::touched;
      REQUIRE(r.read_slice(t.name, off, len, got.data(), got.size(), v).ok());
      CHECK(got == want);
      ++slices;
      empty += want.empty();
    }
  }
  CHECK(slices == 120 * s.tensors.size());
  CHECK(empty < slices / 2);  // most slices move data
}

TEST_CASE("a read verifies exactly the chunks it touches", "[shard_reader]") {
  Shard s;
  // Damage one byte in chunk 1 of piece 2 of the 2-D tensor.
  const std::string name = "r2";
  const std::uint64_t piece_no = 2, chunk_no = 1, byte_in_chunk = 123;
  const TensorSpec& t = *std::find_if(s.tensors.begin(), s.tensors.end(), [&](const auto& x) { return x.name == name; });
  std::uint64_t file_offset = 0;
  PieceRecord piece;
  {
    auto r = s.open();
    const TensorRecord* rec = r.index().find_tensor(name);
    piece = r.index().pieces[rec->piece_first + piece_no];
    REQUIRE(piece.chunk_count > chunk_no + 1);
    file_offset = r.index().chunks[piece.chunk_first + chunk_no].offset + byte_in_chunk;
  }
  std::string bytes = ckpt_test::read_file(s.path);
  bytes[file_offset] = static_cast<char>(bytes[file_offset] ^ 0x40);
  ckpt_test::write_file(s.path, bytes);
  // The damaged reference: what ReadCheck::none must return.
  Bytes8 damaged = t.data;
  const std::uint64_t local_byte = chunk_no * kChunk + byte_in_chunk;
  {
    Shape idx(piece.shape.size());
    std::uint64_t e = local_byte / t.esize();
    for (std::size_t d = piece.shape.size(); d-- > 0;) {
      idx[d] = piece.offsets[d] + e % piece.shape[d];
      e /= piece.shape[d];
    }
    damaged[linear(idx, t.shape) * t.esize() + local_byte % t.esize()] ^= 0x40;
  }
  // Which slices touch the damaged chunk, computed element by element.
  auto touches = [&](const Shape& off, const Shape& len) {
    bool hit = false;
    for_each_index(len, [&](const Shape& idx) {
      if (hit) return;
      Shape local(idx.size());
      for (std::size_t d = 0; d < idx.size(); ++d) {
        const std::uint64_t g = off[d] + idx[d];
        if (g < piece.offsets[d] || g >= piece.offsets[d] + piece.shape[d]) return;
        local[d] = g - piece.offsets[d];
      }
      const std::uint64_t b = linear(local, piece.shape) * t.esize();
      hit = b / kChunk == chunk_no || (b + t.esize() - 1) / kChunk == chunk_no;
    });
    return hit;
  };

  auto r = s.open();
  std::mt19937_64 rng(7);
  std::size_t failed = 0, passed = 0;
  for (int i = 0; i < 300; ++i) {
    Shape off, len;
    random_box(rng, t.shape, off, len);
    INFO("slice at " << shape_string(off) << " shape " << shape_string(len));
    const Bytes8 want = extract(t.data, t.shape, t.esize(), off, len);
    Bytes8 got(want.size());
    Status st = r.read_slice(name, off, len, got.data(), got.size());
    if (touches(off, len)) {
      REQUIRE_FALSE(st.ok());
      CHECK(st.code() == Code::corrupt);
      CHECK(st.message().find("tensor 'r2' piece 2 chunk 1 ") != std::string::npos);
      CHECK(st.message().find(s.path) != std::string::npos);
      ++failed;
    } else {
      REQUIRE(st.ok());
      CHECK(got == want);
      ++passed;
    }
    // ReadCheck::none never looks at digests and returns the bytes as they are on disk.
    REQUIRE(r.read_slice(name, off, len, got.data(), got.size(), ReadCheck::none).ok());
    CHECK(got == extract(damaged, t.shape, t.esize(), off, len));
  }
  CHECK(failed > 10);  // both outcomes are exercised
  CHECK(passed > 10);

  Bytes8 whole(t.data.size());
  Status st = r.read_tensor(name, whole.data(), whole.size());
  CHECK(st.code() == Code::corrupt);
  REQUIRE(r.read_tensor(name, whole.data(), whole.size(), ReadCheck::none).ok());
  CHECK(whole == damaged);
  // Other tensors are untouched by the damage.
  for (const auto& other : s.tensors) {
    if (other.name == name) continue;
    Bytes8 back(other.data.size());
    CHECK(r.read_tensor(other.name, back.data(), back.size()).ok());
  }
  // Piece-level access agrees.
  const std::size_t piece_index = r.index().find_tensor(name)->piece_first + piece_no;
  Bytes8 pbytes(piece.data_length);
  CHECK(r.read_piece(piece_index, pbytes.data(), pbytes.size()).code() == Code::corrupt);
  CHECK(r.read_piece(piece_index, pbytes.data(), pbytes.size(), ReadCheck::none).ok());
  CHECK(r.verify_piece_chunks(piece_index, 0, chunk_no).ok());
  CHECK(r.verify_piece_chunks(piece_index, chunk_no + 1, piece.chunk_count - chunk_no - 1).ok());
  CHECK(r.verify_piece_chunks(piece_index, chunk_no, 1).code() == Code::corrupt);
  CHECK(r.verify_piece_chunks(piece_index, 0, piece.chunk_count + 1).code() == Code::invalid_argument);
  CHECK(r.map_piece(piece_index).status().code() == Code::corrupt);
  auto unverified = r.map_piece(piece_index, ReadCheck::none);
  REQUIRE(unverified.ok());
  CHECK(unverified->size() == piece.data_length);
}

TEST_CASE("map_piece gives the piece's bytes without copying", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const auto& t : s.tensors) {
    const TensorRecord* rec = r.index().find_tensor(t.name);
    REQUIRE(rec != nullptr);
    for (std::uint64_t k = 0; k < rec->piece_count; ++k) {
      INFO("tensor " << t.name << " piece " << k);
      const auto& p = r.index().pieces[rec->piece_first + k];
      const auto& spec = t.pieces[k];
      CHECK(p.offsets == spec.offsets);
      const Bytes8 want = extract(t.data, t.shape, t.esize(), spec.offsets, spec.shape);
      auto m = r.map_piece(rec->piece_first + k);
      REQUIRE(m.ok());
      REQUIRE(m->size() == want.size());
      if (want.empty()) continue;
      CHECK(std::memcmp(m->data(), want.data(), want.size()) == 0);
      // A view into the page cache sits at the same offset within its page as the data within the file.
      CHECK(reinterpret_cast<std::uintptr_t>(m->data()) % static_cast<std::uintptr_t>(page) ==
            p.data_offset % static_cast<std::uint64_t>(page));
      Bytes8 copy(want.size());
      REQUIRE(r.read_piece(rec->piece_first + k, copy.data(), copy.size()).ok());
      CHECK(copy == want);
    }
  }
  CHECK(r.map_piece(r.index().pieces.size()).status().code() == Code::invalid_argument);
}

TEST_CASE("map_file serves unchecked reads from one mapping and a verification from the same pages", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  REQUIRE(r.map_file().ok());
  REQUIRE(r.mapped().size() == r.file_size());
  std::mt19937_64 rng(7);
  for (const auto& t : s.tensors)
    for (int i = 0; i < 20; ++i) {
      Shape off, len;
      random_box(rng, t.shape, off, len);
      const Bytes8 want = extract(t.data, t.shape, t.esize(), off, len);
      Bytes8 got(want.size(), 0xCD);
      REQUIRE(r.read_slice(t.name, off, len, got.data(), got.size(), ReadCheck::none).ok());
      CHECK(got == want);
    }
  VerifyOptions o;
  o.mapped = r.mapped();
  auto clean = verify_file(s.fs, s.path, o);
  REQUIRE(clean.ok());
  CHECK(clean->ok());
  // A byte changed in the file is a changed byte in the mapping: the verification through it finds it.
  {
    std::fstream f(s.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(r.index().pieces[0].data_offset));
    f.put('\x5a' ^ static_cast<char>(r.mapped()[r.index().pieces[0].data_offset]));
  }
  auto damaged = verify_file(s.fs, s.path, o);
  REQUIRE(damaged.ok());
  CHECK_FALSE(damaged->ok());
  // A file cut while mapped: an unchecked read reports it, never a crash (SIGBUS caught).
  REQUIRE(::truncate(s.path.c_str(), 0) == 0);
  const auto& big = *std::max_element(s.tensors.begin(), s.tensors.end(), [](const TensorSpec& a, const TensorSpec& b) { return a.data.size() < b.data.size(); });
  Bytes8 out(big.data.size());
  auto cut = r.read_tensor(big.name, out.data(), out.size(), ReadCheck::none);
  CHECK(cut.code() == Code::io);
  CHECK_THAT(cut.message(), Catch::Contains("file changed while it was read"));
}

TEST_CASE("a region the file's pieces do not cover is not_found", "[shard_reader]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("partial.ckpt");
  // Rows [0, 4) and [6, 10) of a 10 x 8 tensor: rows 4 and 5 live in another rank's file.
  const auto data = ckpt_test::random_bytes(10 * 8 * 4, 3);
  auto w = ShardWriter::create(fs, path, ckpt_test::small_writer_options());
  REQUIRE(w.ok());
  ckpt_test::write_piece(*w, "w", DType::I32, {10, 8}, {0, 0}, {4, 8}, data.data(), 4 * 8 * 4);
  ckpt_test::write_piece(*w, "w", DType::I32, {10, 8}, {6, 0}, {4, 8}, data.data() + 6 * 8 * 4, 4 * 8 * 4);
  ShardReader r = ckpt_test::finish_and_open(fs, *w, path);
  Bytes8 whole(data.size());
  Status st = r.read_tensor("w", whole.data(), whole.size());
  CHECK(st.code() == Code::not_found);
  CHECK(st.message().find("'w'") != std::string::npos);
  Bytes8 part(3 * 8 * 4);
  REQUIRE(r.read_slice("w", {1, 0}, {3, 8}, part.data(), part.size()).ok());
  CHECK(std::equal(part.begin(), part.end(), data.begin() + 8 * 4));
  REQUIRE(r.read_slice("w", {6, 2}, {3, 5}, nullptr, 0).code() == Code::invalid_argument);
  Bytes8 cross(4 * 8 * 4);
  CHECK(r.read_slice("w", {3, 0}, {4, 8}, cross.data(), cross.size()).code() == Code::not_found);
  CHECK(r.read_slice("w", {4, 0}, {2, 8}, cross.data(), 2 * 8 * 4).code() == Code::not_found);
  // The partial read reports how much this file holds: rows 3 and 6 of [3, 7).
  auto copied = r.read_slice_partial(*r.index().find_tensor("w"), {3, 0}, {4, 8}, cross.data(), ReadCheck::touched);
  REQUIRE(copied.ok());
  CHECK(*copied == 2 * 8);
  CHECK(std::equal(cross.begin(), cross.begin() + 8 * 4, data.begin() + 3 * 8 * 4));
  CHECK(std::equal(cross.begin() + 3 * 8 * 4, cross.end(), data.begin() + 6 * 8 * 4));
  CHECK(r.read_tensor("nope", whole.data(), whole.size()).code() == Code::not_found);
}

TEST_CASE("scalars and zero-size tensors read like any other", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  const TensorSpec& scalar = *std::find_if(s.tensors.begin(), s.tensors.end(), [](const auto& x) { return x.name == "scalar"; });
  Bytes8 v(8);
  REQUIRE(r.read_tensor("scalar", v.data(), v.size()).ok());
  CHECK(v == scalar.data);
  REQUIRE(r.read_slice("scalar", {}, {}, v.data(), v.size()).ok());
  CHECK(v == scalar.data);
  CHECK(r.read_slice("scalar", {0}, {1}, v.data(), v.size()).code() == Code::invalid_argument);
  CHECK(r.read_tensor("scalar", v.data(), 4).code() == Code::invalid_argument);

  const TensorRecord* empty = r.index().find_tensor("empty");
  REQUIRE(empty != nullptr);
  CHECK(empty->piece_count == 2);
  for (std::uint64_t k = 0; k < empty->piece_count; ++k) {
    CHECK(r.index().pieces[empty->piece_first + k].data_length == 0);
    CHECK(r.index().pieces[empty->piece_first + k].chunk_count == 0);
  }
  REQUIRE(r.read_tensor("empty", nullptr, 0).ok());
  REQUIRE(r.read_slice("empty", {1, 0, 1}, {2, 0, 2}, nullptr, 0).ok());
  CHECK(r.read_slice("empty", {1, 0, 1}, {2, 1, 2}, nullptr, 0).code() == Code::invalid_argument);
  auto m = r.map_piece(empty->piece_first);
  REQUIRE(m.ok());
  CHECK(m->size() == 0);
}

TEST_CASE("slices out of range or with the wrong buffer are invalid_argument", "[shard_reader]") {
  Shard s;
  auto r = s.open();
  Bytes8 buf(1 << 16);
  struct Row { Shape off, len; std::size_t size; };
  const Row rows[] = {
      {{0, 0}, {91, 1}, 91 * 4},           // past the end of dimension 0
      {{91, 0}, {1, 1}, 4},                // starts past the end
      {{0, 60}, {1, 2}, 8},                // past the end of dimension 1
      {{0, 0}, {1, 1}, 8},                 // buffer too large
      {{0, 0}, {2, 2}, 4},                 // buffer too small
      {{0}, {1}, 4},                       // wrong rank
      {{0, 0, 0}, {1, 1, 1}, 4},           // wrong rank
      {{~std::uint64_t{0}, 0}, {2, 1}, 8}, // offset + shape overflows
      {{1, 0}, {~std::uint64_t{0}, 1}, 8}, // shape overflows
  };
  for (const auto& row : rows) {
    INFO("slice at " << shape_string(row.off) << " shape " << shape_string(row.len));
    CHECK(r.read_slice("r2", row.off, row.len, buf.data(), row.size).code() == Code::invalid_argument);
  }
  CHECK(r.read_piece(r.index().pieces.size(), buf.data(), 1).code() == Code::invalid_argument);
  CHECK(r.read_piece(0, buf.data(), 1).code() == Code::invalid_argument);
}

namespace {

// One U8 tensor "w" of `data` in a file of 1 MiB chunks (kBulkCopyMin: whole chunks take the streamed copy;
// the last one is short), for the cases about chunks larger than one read.
void write_mib_chunked(FsRef fs, const std::string& path, const std::vector<unsigned char>& data) {
  WriterOptions o;
  o.chunk_size_log2 = 20;
  auto w = ShardWriter::create(fs, path, o);
  REQUIRE(w.ok());
  REQUIRE(w->add_tensor("w", DType::U8, {data.size()}, data.data(), data.size()).ok());
  REQUIRE(w->finish().ok());
}

}  // namespace

TEST_CASE("chunks larger than one read are verified whole, in place and through scratch", "[shard_reader]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("large.ckpt");
  const std::uint64_t mib = std::uint64_t{1} << 20;
  const auto data = ckpt_test::random_bytes(3 * mib + 12345, 17);
  write_mib_chunked(fs, path, data);
  struct Slice { std::uint64_t off, len; };
  const Slice slices[] = {{0, data.size()}, {0, mib}, {mib, mib}, {10, 1000}, {mib - 5, 10}, {mib + 300000, 5},
                          {2 * mib, mib + 12345}, {3 * mib, 12345}, {mib / 2, 2 * mib}};
  {
    auto r = ShardReader::open(fs, path);
    REQUIRE(r.ok());
    for (const auto& s : slices) {
      INFO("slice [" << s.off << ", +" << s.len << ")");
      Bytes8 got(s.len);
      REQUIRE(r->read_slice("w", {s.off}, {s.len}, got.data(), got.size()).ok());
      CHECK(std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(s.off)));
    }
    CHECK(r->verify_piece_chunks(0, 0, 4).ok());
  }
  // Damage chunk 1 past its first 256 KiB.
  std::string bytes = ckpt_test::read_file(path);
  const std::uint64_t damaged = 4096 + mib + 300000;
  bytes[damaged] ^= 0x02;
  ckpt_test::write_file(path, bytes);
  auto r = ShardReader::open(fs, path);
  REQUIRE(r.ok());
  for (const auto& s : slices) {
    INFO("slice [" << s.off << ", +" << s.len << ")");
    const bool touches = s.off < 2 * mib && s.off + s.len > mib;
    Bytes8 got(s.len);
    const Status st = r->read_slice("w", {s.off}, {s.len}, got.data(), got.size());
    if (touches) {
      CHECK(st.code() == Code::corrupt);
      CHECK(st.message().find("tensor 'w' piece 0 chunk 1 ") != std::string::npos);
    } else {
      CHECK(st.ok());
      CHECK(std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(s.off)));
    }
  }
  Bytes8 whole(data.size());
  CHECK(r->read_piece(0, whole.data(), whole.size()).code() == Code::corrupt);
  REQUIRE(r->read_piece(0, whole.data(), whole.size(), ReadCheck::none).ok());
  CHECK(whole[damaged - 4096] == (data[damaged - 4096] ^ 0x02));
  CHECK(r->verify_piece_chunks(0, 0, 1).ok());
  CHECK(r->verify_piece_chunks(0, 2, 2).ok());
  CHECK(r->verify_piece_chunks(0, 1, 1).code() == Code::corrupt);
  CHECK(r->map_piece(0).status().code() == Code::corrupt);
}

TEST_CASE("a checked read of a mapped file copies and hashes each chunk in one pass and remembers the chunks it found good",
          "[shard_reader]") {
  // spec/TIERS.md 7.2 (revision 10): a resume loads its own memory copy with its chunks checked as they are
  // copied (copy_hashed), then verify_file hashes only what the load did not read (VerifyOptions::already_verified).
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("mapped.ckpt");
  const std::uint64_t mib = std::uint64_t{1} << 20;
  const auto data = ckpt_test::random_bytes(3 * mib + 12345, 23);
  write_mib_chunked(fs, path, data);
  std::string bytes = ckpt_test::read_file(path);
  const std::uint64_t damaged = 4096 + mib + 300000;  // in chunk 1
  bytes[damaged] ^= 0x02;
  ckpt_test::write_file(path, bytes);
  auto r = ShardReader::open(fs, path);
  REQUIRE(r.ok());
  REQUIRE(r->map_file().ok());
  r->remember_verified_chunks();
  for (std::uint64_t k = 0; k < 4; ++k) CHECK_FALSE(r->chunk_verified(k));
  struct Read { std::uint64_t off, len; bool ok; };
  const Read reads[] = {{0, mib, true}, {3 * mib, 12345, true}, {mib, mib, false}, {2 * mib + 5, 10, true}};
  for (const auto& rd : reads) {
    INFO("slice [" << rd.off << ", +" << rd.len << ")");
    Bytes8 got(rd.len);
    const Status st = r->read_slice("w", {rd.off}, {rd.len}, got.data(), got.size());
    if (rd.ok) {
      REQUIRE(st.ok());
      CHECK(std::equal(got.begin(), got.end(), data.begin() + static_cast<std::ptrdiff_t>(rd.off)));
    } else {
      CHECK(st.code() == Code::corrupt);
      CHECK_THAT(st.message(), Catch::Contains("tensor 'w' piece 0 chunk 1 ") && Catch::Contains("digest expected"));
    }
  }
  CHECK(r->chunk_verified(0));
  CHECK_FALSE(r->chunk_verified(1));  // the damaged chunk is never remembered as good
  CHECK(r->chunk_verified(2));        // through scratch: a read of part of it checks it whole
  CHECK(r->chunk_verified(3));
  CHECK_FALSE(r->chunk_verified(4));  // past the index: no such chunk
  // The rest, hashed after the reads: only the unverified chunk, and it is found.
  VerifyOptions rest;
  rest.mapped = r->mapped();
  const ShardReader* read = &*r;
  rest.already_verified = [read](std::uint64_t k) { return read->chunk_verified(k); };
  auto report = verify_file(fs, path, rest);
  REQUIRE(report.ok());
  REQUIRE(report->problems.size() == 1);
  CHECK(report->problems[0].chunk == 1);
  CHECK(report->chunks_checked == 4);
  // A chunk the caller says it verified is not hashed again (here, falsely, the damaged one): nothing is found.
  rest.already_verified = [](std::uint64_t) { return true; };
  auto trusted = verify_file(fs, path, rest);
  REQUIRE(trusted.ok());
  CHECK(trusted->ok());
  // A file cut while mapped: the checked read reports it, never a crash (SIGBUS caught).
  REQUIRE(::truncate(path.c_str(), 0) == 0);
  Bytes8 out(mib);
  const Status cut = r->read_slice("w", {0}, {mib}, out.data(), out.size());
  CHECK(cut.code() == Code::io);
  CHECK_THAT(cut.message(), Catch::Contains("file changed while it was read"));
}
