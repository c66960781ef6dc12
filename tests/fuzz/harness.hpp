// The four fuzz harnesses (issue 9): one function per decoder that takes any bytes and returns ""
// or the invariant it saw broken. The libFuzzer targets of this folder abort on a non-empty answer;
// tests/test_regress.cpp replays every tests/regress/ file and seed through the same functions, so a
// crasher, once saved, is checked by the normal suite (CLI11 tests/FuzzFailTest.cpp does the same).
//
// Digests would stop a mutation fuzzer at the first check, so the shard and manifest harnesses
// recompute them before decoding; the journal harness uses only scan_journal_bytes (its internals
// are being rewritten) and so mostly explores framing and damage handling.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/hash.hpp>
#include <ckpt/index.hpp>
#include <ckpt/journal.hpp>
#include <ckpt/manifest.hpp>
#include <ckpt/safetensors.hpp>
#include <ckpt/shard_reader.hpp>
#include <ckpt/training_state.hpp>
#include <ckpt/verify.hpp>

namespace ckpt_fuzz {

using Bytes = std::vector<unsigned char>;

namespace detail {

// Tensors larger than this are not read whole: a hostile shape may name exabytes that no piece holds.
inline constexpr std::uint64_t kMaxReadBytes = std::uint64_t{1} << 20;

[[nodiscard]] inline bool same_index(const ckpt::Index& a, const ckpt::Index& b) {
  if (a.tensors.size() != b.tensors.size() || a.pieces.size() != b.pieces.size() || a.chunks.size() != b.chunks.size() ||
      a.metadata.size() != b.metadata.size())
    return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.piece_first != y.piece_first ||
        x.piece_count != y.piece_count)
      return false;
  }
  for (std::size_t k = 0; k < a.pieces.size(); ++k) {
    const auto &x = a.pieces[k], &y = b.pieces[k];
    if (x.tensor != y.tensor || x.offsets != y.offsets || x.shape != y.shape || x.data_offset != y.data_offset ||
        x.data_length != y.data_length || x.chunk_first != y.chunk_first || x.chunk_count != y.chunk_count)
      return false;
  }
  for (std::size_t c = 0; c < a.chunks.size(); ++c)
    if (a.chunks[c].offset != b.chunks[c].offset || a.chunks[c].length != b.chunks[c].length ||
        a.chunks[c].digest != b.chunks[c].digest)
      return false;
  for (std::size_t m = 0; m < a.metadata.size(); ++m) {
    // Compare bits: a NaN float64 is not equal to itself but must survive unchanged (spec 2.3).
    const auto &x = a.metadata[m].value, &y = b.metadata[m].value;
    if (a.metadata[m].key != b.metadata[m].key || x.type() != y.type()) return false;
    if (x.is_float() ? ckpt::f64_bits(x.as_float()) != ckpt::f64_bits(y.as_float()) : !(x == y)) return false;
  }
  return true;
}

// Recomputes the index digest and the footer digest of a shard image in place.
inline void seal_footer(Bytes& f) {
  namespace ft = ckpt::format::ft;
  unsigned char* footer = f.data() + f.size() - ckpt::format::kFooterSize;
  const std::uint64_t at = ckpt::get_u64(footer + ft::kIndexOffset);
  const std::uint64_t length = ckpt::get_u64(footer + ft::kIndexLength);
  if (ckpt::range_within(at, length, f.size() - ckpt::format::kFooterSize))
    ckpt::put_u64(footer + ft::kIndexDigest, ckpt::xxh3_64(f.data() + at, static_cast<std::size_t>(length)));
  ckpt::put_u64(footer + ft::kDigest, ckpt::xxh3_64(footer, ft::kDigest));
}

// A file for the reader and the verifier, private to this process, removed at exit.
inline const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string p = std::string(dir) + "/ckpt-fuzz-" + std::to_string(::getpid()) + ".ckpt";
    static struct Remover { std::string p; ~Remover() { std::remove(p.c_str()); } } remover{p};
    return p;
  }();
  return path;
}

}  // namespace detail

// A shard file: superblock, footer and index digests are recomputed (and, once the index decodes, every
// chunk digest), then the index decoder, its canonical re-encoding, the reader and the verifier run.
[[nodiscard]] inline std::string shard_file(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  const std::string path = "fuzz.ckpt";
  if (size < format::kSuperblockSize + format::kFooterSize || size > (std::size_t{1} << 24)) return "";
  Bytes f(data, data + size);
  put_u64(f.data() + format::sb::kDigest, xxh3_64(f.data(), format::sb::kDigest));
  detail::seal_footer(f);
  auto sb = decode_superblock(f.data(), path);
  auto footer = decode_footer(f.data() + size - format::kFooterSize, size, path);
  if (sb.ok() && footer.ok() && footer->index_offset >= sb->data_offset) {
    const unsigned char* index_bytes = f.data() + footer->index_offset;
    const auto index_size = static_cast<std::size_t>(footer->index_length);
    auto ix = decode_index(index_bytes, index_size, *sb, footer->index_offset, path);
    if (ix.ok()) {
      // The decoder limit (issue 9): what it returns is never larger than a small multiple of its input.
      std::uint64_t decoded = 0;
      for (const auto& t : ix->tensors) decoded += t.name.size() + 8 * t.shape.size();
      for (const auto& p : ix->pieces) decoded += 8 * (p.offsets.size() + p.shape.size());
      for (const auto& m : ix->metadata)
        decoded += m.key.size() + (m.value.is_string() ? m.value.as_string().size() : 0) +
                   (m.value.is_bytes() ? m.value.as_bytes().size() : 0);
      if (decoded > 2 * index_size) return "decoded index holds " + std::to_string(decoded) + " bytes for " + std::to_string(index_size);
      const std::string again = encode_index(*ix);
      auto ix2 = decode_index(reinterpret_cast<const unsigned char*>(again.data()), again.size(), *sb, footer->index_offset, path);
      if (!ix2.ok()) return "canonical re-encoding is refused: " + ix2.status().message();
      if (!detail::same_index(*ix, *ix2)) return "canonical re-encoding decodes to a different index";
      for (const auto& t : ix->tensors) {
        if (ix->find_tensor(t.name) == nullptr) return "find_tensor misses tensor '" + t.name + "'";
      }
      // Make every chunk digest right, so reads go past the first chunk.
      Bytes fixed = f;
      for (std::size_t c = 0; c < ix->chunks.size(); ++c) {
        const auto& rec = ix->chunks[c];
        const std::uint64_t digest = xxh3_64(fixed.data() + rec.offset, static_cast<std::size_t>(rec.length));
        // The chunk table starts after the tensor and piece tables (spec 5.1).
        const std::size_t at = format::kIndexHeaderSize + ix->tensors.size() * format::kTensorRecordSize +
                               ix->pieces.size() * format::kPieceRecordSize + c * format::kChunkRecordSize + 16;
        put_u64(fixed.data() + footer->index_offset + at, digest);
      }
      detail::seal_footer(fixed);
      f.swap(fixed);
    }
  }
  {
    std::FILE* out = std::fopen(detail::scratch_path().c_str(), "wb");
    if (out == nullptr) return "";
    const bool written = std::fwrite(f.data(), 1, f.size(), out) == f.size();
    std::fclose(out);
    if (!written) return "";
  }
  PosixFs fs;
  auto reader = ShardReader::open(fs, detail::scratch_path());
  if (reader.ok()) {
    auto& r = *reader;
    for (const auto& t : r.index().tensors) {
      std::uint64_t bytes = 0;
      if (!shape_bytes(t.shape, t.dtype, bytes)) return "accepted tensor '" + t.name + "' whose size overflows";
      if (bytes > detail::kMaxReadBytes) continue;
      std::vector<unsigned char> buf(static_cast<std::size_t>(bytes));
      const Status st = r.read_tensor(t.name, buf.data(), buf.size());
      if (!st.ok() && st.code() != Code::corrupt && st.code() != Code::not_found)
        return "read_tensor: unexpected " + st.message();
      // A one-element-thick slice through the middle: the partial-chunk path.
      Shape off(t.shape.size()), shape(t.shape.size());
      for (std::size_t d = 0; d < t.shape.size(); ++d) {
        off[d] = t.shape[d] / 2;
        shape[d] = t.shape[d] - off[d] > 0 ? 1 : 0;
      }
      std::uint64_t slice_bytes = 0;
      (void)shape_bytes(shape, t.dtype, slice_bytes);
      std::vector<unsigned char> slice(static_cast<std::size_t>(slice_bytes));
      const Status ss = r.read_slice(t.name, off, shape, slice.data(), slice.size());
      if (!ss.ok() && ss.code() != Code::corrupt && ss.code() != Code::not_found)
        return "read_slice: unexpected " + ss.message();
    }
    for (std::size_t k = 0; k < r.index().pieces.size(); ++k) {
      if (r.index().pieces[k].data_length > detail::kMaxReadBytes) continue;
      std::vector<unsigned char> buf(static_cast<std::size_t>(r.index().pieces[k].data_length));
      const Status st = r.read_piece(k, buf.data(), buf.size());
      if (!st.ok() && st.code() != Code::corrupt) return "read_piece: unexpected " + st.message();
    }
  } else if (reader.status().code() != Code::corrupt && reader.status().code() != Code::incomplete &&
             reader.status().code() != Code::version) {
    return "open: unexpected " + reader.status().message();
  }
  auto report = verify_file(fs, detail::scratch_path());
  if (!report.ok()) return "verify_file failed: " + report.status().message();
  if (!reader.ok() && report->ok()) return "verify_file calls intact a file the reader refuses: " + reader.status().message();
  if (reader.ok())
    for (const auto& p : report->problems)
      if (p.region != "data" && p.region != "padding")
        return "reader accepts the file but verify_file reports region " + p.region + ": " + p.message;
  return "";
}

// A MANIFEST file: its trailing digest is recomputed, then decode; what decodes re-encodes to the same bytes.
// The training state codec also runs on the raw bytes.
[[nodiscard]] inline std::string manifest(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  Bytes m(data, data + size);
  if (size >= manifest::kDigestSize) put_u64(m.data() + size - 8, xxh3_64(m.data(), size - 8));
  auto decoded = decode_manifest(m.data(), m.size(), "MANIFEST");
  if (decoded.ok()) {
    if (!check_manifest(*decoded).ok()) return "decoded manifest fails check_manifest";
    const std::string again = encode_manifest(*decoded);
    if (again.size() != m.size() || std::memcmp(again.data(), m.data(), m.size()) != 0)
      return "manifest does not re-encode to the bytes it was decoded from";
  } else if (decoded.status().code() != Code::corrupt && decoded.status().code() != Code::incomplete &&
             decoded.status().code() != Code::version) {
    return "decode_manifest: unexpected " + decoded.status().message();
  }
  Decoder in(data, size);
  TrainingState state;
  if (decode_training_state(in, state, "state").ok()) {
    if (!check_training_state(state).ok()) return "decoded training state fails check_training_state";
    Encoder out;
    encode_training_state(out, state);
    if (out.size() != in.position() || std::memcmp(out.str().data(), data, out.size()) != 0)
      return "training state does not re-encode to the bytes it was decoded from";
  }
  return "";
}

// A JOURNAL file, through the public scanner only.
[[nodiscard]] inline std::string journal(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  auto scan = scan_journal_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!scan.ok()) {
    if (scan.status().code() != Code::version && scan.status().code() != Code::corrupt)
      return "scan_journal_bytes: unexpected " + scan.status().message();
    return "";
  }
  if (scan->file_size != size) return "scan reports a file size other than the input's";
  for (const auto& r : scan->records) {
    if (!range_within(r.offset, r.size, size)) return "record outside the input: " + r.describe();
    (void)r.txn();
  }
  for (const auto& d : scan->corruption)
    for (const auto& r : d.unapplied)
      if (!range_within(r.offset, r.size, size)) return "unapplied record outside the input: " + r.describe();
  (void)scan->corruption_summary();
  return "";
}

// A safetensors file: u64 header length, JSON header, data buffer (the length is checked as
// parse_safetensors_header checks it, then the JSON parser runs on the header text in memory).
[[nodiscard]] inline std::string safetensors(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  if (size < 8) return "";
  const std::uint64_t length = get_u64(data);
  if (length > size - 8 || length > safetensors::kMaxHeaderLength) return "";
  const std::string_view json(reinterpret_cast<const char*>(data + 8), static_cast<std::size_t>(length));
  auto header = parse_safetensors_json(json, size - 8 - length, "fuzz.safetensors");
  if (!header.ok()) {
    if (header.status().code() != Code::corrupt) return "parse_safetensors_json: unexpected " + header.status().message();
    return "";
  }
  // What the parser promises its converter: tensors tile the data buffer, in order, each of its size.
  std::uint64_t cursor = 0;
  for (const auto& t : header->tensors) {
    std::uint64_t bytes = 0;
    if (!shape_bytes(t.shape, t.dtype, bytes)) return "accepted a shape whose size overflows";
    if (t.begin != cursor || t.end < t.begin || t.end - t.begin != bytes) return "tensors do not tile the data buffer";
    if (t.shape.size() > format::kMaxRank) return "accepted a rank above 64";
    cursor = t.end;
  }
  if (cursor != header->data_size) return "tensors do not cover the data buffer";
  for (std::size_t i = 1; i < header->metadata.size(); ++i)
    if (!(header->metadata[i - 1].first < header->metadata[i].first)) return "metadata not sorted by unique key";
  return "";
}

}  // namespace ckpt_fuzz
