// The fuzz harnesses (issue 9; the foreign decoders: issue 22 part 6): one function per decoder that
// takes any bytes and returns "" or the invariant it saw broken. The libFuzzer targets of this folder abort on a non-empty answer;
// tests/test_regress.cpp replays every tests/regress/ file and seed through the same functions, so a
// crasher, once saved, is checked by the normal suite (CLI11 tests/FuzzFailTest.cpp does the same).
//
// Digests would stop a mutation fuzzer at the first check, so the shard and manifest harnesses
// recompute them before decoding; the journal harness uses only scan_journal_bytes (its internals
// are being rewritten) and so mostly explores framing and damage handling. The foreign readers that
// take an Fs (GGUF, DCP, a Hugging Face set) read their input from a SimFs: the same code path as a
// file on disk, without one; a checkpoint they find intact must also get a sidecar that round-trips
// and that verify_foreign then finds every byte of intact against.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/interop/foreign.hpp>
#include <ckpt/interop/gguf.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/shard/index.hpp>
#include <ckpt/store/journal.hpp>
#include <ckpt/store/manifest.hpp>
#include <ckpt/interop/pickle.hpp>
#include <ckpt/interop/safetensors.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/identity/sidecar.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/store/training_state.hpp>
#include <ckpt/shard/verify.hpp>

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

namespace detail {

// Bytes the DCP harness may create for the files its metadata names: a fuzzed offset can name exabytes.
inline constexpr std::uint64_t kMaxMadeBytes = std::uint64_t{1} << 20;

// A file of a SimFs holding size bytes of data, or zeros where data is null (its folders made first);
// false when the name cannot be a file there (a folder of that name exists).
[[nodiscard]] inline bool put_file(ckpt::SimFs& fs, const std::string& path, const unsigned char* data, std::uint64_t size) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    fs.mkdir(path.substr(0, slash)).ignore_error();  // exists already, or the open below fails
  auto file = fs.open(path, ckpt::OpenMode::create_new);
  if (!file.ok()) return false;
  const bool written = data == nullptr ? fs.truncate(*file, size).ok()
                                       : size == 0 || fs.pwrite(*file, data, static_cast<std::size_t>(size), 0).ok();
  return fs.close(*file).ok() && written;
}

// What every foreign reader promises (foreign.hpp): tensors sorted by name, files sorted by name, every
// piece naming one of them; and where it reports no problem, each tensor and file once, every piece
// inside its file and no byte in two pieces.
[[nodiscard]] inline std::string foreign_layout(const ckpt::ForeignCheckpoint& c) {
  for (std::size_t i = 1; i < c.tensors.size(); ++i)
    if (c.tensors[i].name < c.tensors[i - 1].name) return "tensors not sorted by name: '" + c.tensors[i].name + "'";
  for (std::size_t i = 1; i < c.files.size(); ++i)
    if (!(c.files[i - 1].name < c.files[i].name)) return "files not sorted by unique name: '" + c.files[i].name + "'";
  struct Span {
    std::uint64_t offset, length;
    const std::string* tensor;
  };
  std::vector<std::vector<Span>> spans(c.files.size());
  for (const auto& t : c.tensors)
    for (const auto& p : t.pieces) {
      if (p.file >= c.files.size()) return "tensor '" + t.name + "' has a piece in file " + std::to_string(p.file) + " of " + std::to_string(c.files.size());
      if (p.length > 0) spans[p.file].push_back(Span{p.offset, p.length, &t.name});
    }
  if (!c.problems.empty()) return "";
  for (std::size_t i = 1; i < c.tensors.size(); ++i)
    if (c.tensors[i].name == c.tensors[i - 1].name) return "no problem reported, but tensor '" + c.tensors[i].name + "' twice";
  for (std::size_t f = 0; f < c.files.size(); ++f) {
    auto& in_file = spans[f];
    std::sort(in_file.begin(), in_file.end(), [](const Span& a, const Span& b) { return a.offset < b.offset; });
    for (std::size_t k = 0; k < in_file.size(); ++k) {
      if (!c.files[f].present || !ckpt::range_within(in_file[k].offset, in_file[k].length, c.files[f].size))
        return "no problem reported, but tensor '" + *in_file[k].tensor + "' lies outside file '" + c.files[f].name + "'";
      if (k > 0 && in_file[k].offset - in_file[k - 1].offset < in_file[k - 1].length)
        return "no problem reported, but tensors '" + *in_file[k - 1].tensor + "' and '" + *in_file[k].tensor + "' overlap";
    }
  }
  return "";
}

// A checkpoint whose reader reports no problem gets a sidecar that decodes to what was encoded, and
// verify_foreign then checks every byte against it and finds nothing. Skipped where a file of the
// checkpoint has the sidecar's name (or its temporary one), which writing the sidecar would change.
[[nodiscard]] inline std::string sidecar_agrees(ckpt::SimFs& fs, const ckpt::ForeignCheckpoint& c, const std::string& path) {
  using namespace ckpt;
  const std::string side = sidecar_path(c);
  for (const auto& f : c.files)
    if (f.name.rfind(base_name(side), 0) == 0) return "";
  // A sidecar records names as non-empty UTF-8 text (spec/IDENTITY.md 4.3); other names are unsupported.
  bool recordable = true;
  for (const auto& t : c.tensors) recordable = recordable && !t.name.empty() && valid_utf8(t.name);
  for (const auto& m : c.metadata) recordable = recordable && valid_utf8(m.first);
  auto built = build_sidecar(fs, c, sidecar::kMinChunkSizeLog2);
  if (!recordable) {
    if (built.ok() || built.status().code() != Code::unsupported) return "build_sidecar takes a name a sidecar cannot record";
    return "";
  }
  if (!built.ok()) return "build_sidecar refuses a checkpoint its reader reports no problem in: " + built.status().message();
  const std::string bytes = encode_sidecar(*built);
  auto decoded = decode_sidecar(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), side);
  if (!decoded.ok()) return "decode_sidecar refuses what encode_sidecar wrote: " + decoded.status().message();
  if (encode_sidecar(*decoded) != bytes) return "a built sidecar does not re-encode to the bytes it was decoded from";
  if (Status st = write_sidecar(fs, *built, side); !st.ok()) return "write_sidecar: " + st.message();
  auto report = verify_foreign(fs, path);
  if (!report.ok()) return "verify_foreign fails on a checkpoint its reader reports no problem in: " + report.status().message();
  if (!report->ok()) return "verify_foreign reports, against a sidecar just built: " + report->problems.front().message;
  if (!report->data_checked) return "verify_foreign did not check the data against the sidecar just written";
  return "";
}

// The tree decode_pickle built, walked once per node (it may share nodes and hold cycles): every
// accessor answers, and it is bounded by its input: each opcode makes at most one node and pushes at
// most one stack entry, and a global's text is charged against the input too.
[[nodiscard]] inline std::string pickle_tree(const ckpt::PickleValue& root, std::size_t size) {
  using ckpt::PickleKind;
  using ckpt::PickleValue;
  std::vector<PickleValue> todo{root};
  std::unordered_set<std::uint64_t> seen;  // (offset, kind, value of a bool): a node's identity
  std::uint64_t nodes = 0, text = 0, items = 0;
  while (!todo.empty()) {
    const PickleValue v = todo.back();
    todo.pop_back();
    if (!v.valid()) continue;
    const std::uint64_t id = (v.offset() << 5) | (static_cast<std::uint64_t>(v.kind()) << 1) | (v.as_bool().value_or(false) ? 1 : 0);
    if (!seen.insert(id).second) continue;
    ++nodes;
    if (v.offset() >= size) return "a node made at offset " + std::to_string(v.offset()) + " of " + std::to_string(size) + " bytes";
    switch (v.kind()) {
      case PickleKind::string: text += v.as_string()->size(); break;
      case PickleKind::bytes: text += v.as_bytes()->size(); break;
      case PickleKind::global: text += v.module()->size() + v.name()->size(); break;
      case PickleKind::integer:
        if (!v.as_int() || !v.as_float()) return "an int without its value";
        break;
      case PickleKind::dict:
        for (std::size_t i = 0; i < v.size(); ++i) {
          if (!v.key(i).valid() || !v.value(i).valid()) return "a dict pair without its key or value";
          todo.push_back(v.key(i));
          todo.push_back(v.value(i));
        }
        items += 2 * v.size();
        break;
      case PickleKind::object:
        if (!v.callable().valid() || v.args().kind() != PickleKind::tuple) return "an object without a callable or an args tuple";
        for (const PickleValue& part : {v.callable(), v.args(), v.state(), v.kwargs()}) todo.push_back(part);
        items += 4;
        break;
      default:
        for (std::size_t i = 0; i < v.size(); ++i) {
          if (!v.at(i).valid()) return "a container element that is not there";
          todo.push_back(v.at(i));
        }
        items += v.size();
        if (v.at(v.size()).valid()) return "an element past the end of a container";
    }
    if (nodes > size + 3 || text > 2 * std::uint64_t{size} || items > 4 * std::uint64_t{size})
      return "decoded pickle holds " + std::to_string(nodes) + " nodes, " + std::to_string(text) + " text bytes and " +
             std::to_string(items) + " references for " + std::to_string(size) + " bytes";
  }
  for (const std::size_t limit : {std::size_t{4}, std::size_t{120}, std::size_t{4096}})
    if (ckpt::pickle_repr(root, limit).size() > limit) return "pickle_repr longer than its limit " + std::to_string(limit);
  return "";
}

}  // namespace detail

// A pickle (what DCP's .metadata is): the restricted decoder and a walk of its tree; then the DCP
// reader on the same bytes in a SimFs and, where it reads a checkpoint, again once the files it names
// exist as large as the metadata says, and where it then reports no problem, a sidecar of it.
[[nodiscard]] inline std::string pickle(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  auto root = decode_pickle(data, size, "fuzz.pickle");
  if (root.ok()) {
    if (std::string broken = detail::pickle_tree(*root, size); !broken.empty()) return broken;
  } else if (root.status().code() != Code::corrupt) {
    return "decode_pickle: unexpected " + root.status().message();
  } else if (root.status().message().rfind("fuzz.pickle: offset ", 0) != 0) {
    return "decode_pickle: an error that names no offset: " + root.status().message();
  }
  SimFs fs;
  const std::string dir = "/ckpt";
  if (!detail::put_file(fs, dir + "/.metadata", data, size)) return "";
  auto first = open_dcp(fs, dir);
  if (!first.ok()) {
    if (first.status().code() != Code::corrupt) return "open_dcp: unexpected " + first.status().message();
    return "";
  }
  if (!root.ok()) return "open_dcp reads a .metadata that decode_pickle refuses: " + root.status().message();
  if (std::string broken = detail::foreign_layout(*first); !broken.empty()) return broken;
  // Every file the metadata names, made as large as the last byte a piece of it needs.
  std::map<std::string, std::uint64_t> made;
  for (const auto& f : first->files)
    if (!f.present) made[f.name] = 0;
  for (const auto& t : first->tensors)
    for (const auto& p : t.pieces) {
      const auto it = made.find(first->files[p.file].name);
      if (it == made.end()) continue;
      if (p.offset > detail::kMaxMadeBytes || p.length > detail::kMaxMadeBytes) return "";
      it->second = std::max(it->second, p.offset + p.length);
    }
  std::uint64_t total = 0;
  for (const auto& [name, bytes] : made) total += bytes;
  if (total > detail::kMaxMadeBytes) return "";
  for (const auto& [name, bytes] : made)
    if (!detail::put_file(fs, dir + "/" + name, nullptr, bytes)) return "";
  auto second = open_dcp(fs, dir);
  if (!second.ok()) return "open_dcp refuses once the files exist what it read before: " + second.status().message();
  if (std::string broken = detail::foreign_layout(*second); !broken.empty()) return broken;
  if (second->problems.empty()) return detail::sidecar_agrees(fs, *second, dir);
  return "";
}

// A GGUF file, read from a SimFs by open_gguf; where it reports no problem, a sidecar of it.
[[nodiscard]] inline std::string gguf(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  SimFs fs;
  const std::string path = "/model.gguf";
  if (!detail::put_file(fs, path, data, size)) return "";
  auto c = open_gguf(fs, path);
  if (!c.ok()) {
    const Code code = c.status().code();
    if (code != Code::corrupt && code != Code::incomplete && code != Code::unsupported && code != Code::version)
      return "open_gguf: unexpected " + c.status().message();
    if (c.status().message().rfind(path + ": offset ", 0) != 0) return "open_gguf: an error that names no offset: " + c.status().message();
    return "";
  }
  if (c->files.size() != 1 || c->files[0].size != size) return "open_gguf describes a file other than its input";
  for (const auto& [key, text] : c->metadata)
    if (text.size() > gguf::kMaxShownString + 256) return "metadata text of " + std::to_string(text.size()) + " bytes for one value";
  for (std::size_t i = 1; i < c->metadata.size(); ++i)
    if (c->metadata[i].first < c->metadata[i - 1].first) return "metadata not sorted by key";
  for (const auto& t : c->tensors)
    if (t.pieces.size() != 1 || t.pieces[0].shape != t.shape || t.shape.size() > gguf::kMaxDims)
      return "tensor '" + t.name + "' is not one piece of its shape";
  for (const auto& p : c->problems)
    if (p.message.rfind(path + ": offset ", 0) != 0) return "a problem that names no offset: " + p.message;
  if (std::string broken = detail::foreign_layout(*c); !broken.empty()) return broken;
  if (c->problems.empty()) return detail::sidecar_agrees(fs, *c, path);
  return "";
}

// A sidecar: its trailing digest is recomputed, and its root digest where decode_sidecar says which
// it recomputed; what decodes re-encodes to a sidecar that decodes to the same.
[[nodiscard]] inline std::string sidecar(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  const std::string path = "fuzz.ckptsum";
  Bytes s(data, data + size);
  const auto reseal = [&s] {
    if (s.size() >= sidecar::kTrailerSize)
      put_u64(s.data() + s.size() - sidecar::kTrailerSize, xxh3_64(s.data(), s.size() - sidecar::kTrailerSize));
  };
  reseal();
  auto decoded = decode_sidecar(s.data(), s.size(), path);
  if (!decoded.ok()) {
    const std::string& m = decoded.status().message();
    const std::size_t at = m.find("root digest expected ");
    const std::size_t recomputed = m.find(", recomputed ");
    if (at != std::string::npos && recomputed != std::string::npos && s.size() >= sidecar::kHeaderSize) {
      if (auto root = parse_digest(std::string_view(m).substr(recomputed + 13))) {
        put_u64(s.data() + sidecar::hd::kRoot, root->high);
        put_u64(s.data() + sidecar::hd::kRoot + 8, root->low);
        reseal();
        decoded = decode_sidecar(s.data(), s.size(), path);
      }
    }
  }
  if (!decoded.ok()) {
    const Code code = decoded.status().code();
    if (code != Code::corrupt && code != Code::incomplete && code != Code::unsupported)
      return "decode_sidecar: unexpected " + decoded.status().message();
    if (decoded.status().message().rfind(path + ": ", 0) != 0) return "decode_sidecar: an error that names no file: " + decoded.status().message();
    return "";
  }
  // Tensors, pieces and metadata come back in the order seal_content sorts them (the root digest does
  // not depend on it), so the re-encoding is the canonical form: it decodes to the same sidecar.
  const std::string again = encode_sidecar(*decoded);
  auto redecoded = decode_sidecar(reinterpret_cast<const unsigned char*>(again.data()), again.size(), path);
  if (!redecoded.ok()) return "decode_sidecar refuses the re-encoding of what it decoded: " + redecoded.status().message();
  if (redecoded->content.root != decoded->content.root || encode_sidecar(*redecoded) != again)
    return "sidecar re-encodes to one that decodes to another";
  return "";
}

// A Hugging Face index (*.safetensors.index.json): parsed, written back as transformers writes it
// and parsed again to the same index; then, with a safetensors file for each file it names holding
// its tensors, read as a set in a SimFs, which must report no problem and put each tensor where the
// index says; and a sidecar of that set.
[[nodiscard]] inline std::string hf_index(const unsigned char* data, std::size_t size) {
  using namespace ckpt;
  const std::string dir = "/hf", path = dir + "/model.safetensors.index.json";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = parse_safetensors_index_json(text, path);
  if (!index.ok()) {
    if (index.status().code() != Code::corrupt) return "parse_safetensors_index_json: unexpected " + index.status().message();
    if (index.status().message().rfind(path + ": ", 0) != 0) return "an error that names no file: " + index.status().message();
    return "";
  }
  const auto& map = index->weight_map;
  std::vector<std::string> files;
  for (std::size_t i = 0; i < map.size(); ++i) {
    if (i > 0 && !(map[i - 1].first < map[i].first)) return "weight_map not sorted by unique tensor: '" + map[i].first + "'";
    const std::string& f = map[i].second;
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
      return "accepted file name '" + f + "', which is not a name in the index's directory";
    files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  if (files != index->files) return "files are not the distinct file names of the weight_map";
  nlohmann::json written = {{"weight_map", nlohmann::json::object()}};
  if (index->total_size) written["metadata"]["total_size"] = *index->total_size;
  for (const auto& [tensor, file] : map) written["weight_map"][tensor] = file;
  std::string rewritten;
  try {
    rewritten = written.dump(2) + "\n";  // transformers: json.dumps(index, indent=2, sort_keys=True) + "\n"
  } catch (const nlohmann::json::exception& e) {
    return std::string("accepted a name that JSON cannot hold: ") + e.what();
  }
  auto again = parse_safetensors_index_json(rewritten, path);
  if (!again.ok()) return "the index written back is refused: " + again.status().message();
  if (again->weight_map != map || again->files != index->files || again->total_size != index->total_size)
    return "the index written back parses to a different index";

  // The set: each tensor one U8 element in its file, in name order; names a safetensors header
  // cannot hold (its __metadata__ key) or that would replace the index leave it out.
  if (map.size() > 256) return "";
  SimFs fs;
  if (!detail::put_file(fs, path, data, size)) return "";
  for (const auto& name : files) {
    if (name == base_name(path)) return "";
    nlohmann::json header = nlohmann::json::object();
    std::uint64_t at = 0;
    for (const auto& [tensor, file] : map) {
      if (file != name) continue;
      if (tensor == safetensors::kMetadataKey) return "";
      header[tensor] = {{"dtype", "U8"}, {"shape", nlohmann::json::array({1})}, {"data_offsets", nlohmann::json::array({at, at + 1})}};
      ++at;
    }
    const std::string json = header.dump();
    if (!parse_safetensors_json(json, at, name).ok()) return "";
    Bytes bytes(8 + json.size() + at, 0);
    put_u64(bytes.data(), json.size());
    std::memcpy(bytes.data() + 8, json.data(), json.size());
    if (!detail::put_file(fs, dir + "/" + name, bytes.data(), bytes.size())) return "";
  }
  auto set = open_safetensors_index_foreign(fs, path);
  if (!set.ok()) return "a set of the files its index names is refused: " + set.status().message();
  if (!set->problems.empty()) return "a set of the files its index names has problem " + set->problems.front().message;
  if (set->tensors.size() != map.size()) return "the set holds " + std::to_string(set->tensors.size()) + " tensors, its index " + std::to_string(map.size());
  for (std::size_t i = 0; i < map.size(); ++i) {
    const auto& t = set->tensors[i];
    if (t.name != map[i].first || t.pieces.size() != 1 || set->files[t.pieces[0].file].name != map[i].second)
      return "tensor '" + map[i].first + "' is not where the index puts it";
  }
  if (std::string broken = detail::foreign_layout(*set); !broken.empty()) return broken;
  return detail::sidecar_agrees(fs, *set, path);
}

}  // namespace ckpt_fuzz
