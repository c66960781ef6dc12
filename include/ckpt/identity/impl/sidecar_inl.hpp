// ckpt: definitions for sidecar.hpp.
#pragma once

#include "../sidecar.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "../../core/coding.hpp"
#include "../../core/hash.hpp"
#include "../../io/atomic_file.hpp"
#include "../../core/problem.hpp"
#include "../../interop/safetensors.hpp"

namespace ckpt {

CKPT_INLINE std::string sidecar_path(const ForeignCheckpoint& checkpoint) {
  return checkpoint.primary + std::string(sidecar::kSuffix);
}

namespace detail {

// One byte range of one file whose chunk digests a sidecar records: a tensor's piece or a region.
struct CoveredRange {
  std::uint64_t offset = 0, length = 0;
  std::vector<std::uint64_t>* digests = nullptr;  // filled by hashing, or compared against
  std::string tensor;                              // empty for a region (header bytes)
  std::int64_t piece = -1;
};

[[nodiscard]] CKPT_INLINE std::uint64_t chunk_count_of(std::uint64_t length, std::uint64_t chunk_size) noexcept {
  return length / chunk_size + (length % chunk_size != 0 ? 1 : 0);
}

// Hashes the chunks of ranges (sorted, not overlapping) of an open file into their digest lists.
[[nodiscard]] CKPT_INLINE Status hash_ranges(FsRef fs, FileHandle file, const std::string& path, std::vector<CoveredRange>& ranges,
                                             std::uint64_t chunk_size, std::vector<unsigned char>& buffer,
                                             const std::function<void(std::uint64_t)>& advance) {
  buffer.resize(static_cast<std::size_t>(chunk_size));
  for (auto& r : ranges) {
    r.digests->clear();
    for (std::uint64_t done = 0; done < r.length;) {
      const auto n = static_cast<std::size_t>(std::min(chunk_size, r.length - done));
      auto got = fs.pread(file, buffer.data(), n, r.offset + done);
      if (!got.ok()) return got.status().with_context(path);
      if (*got != n)
        return make_error(Code::incomplete, path + ": ends at byte " + std::to_string(r.offset + done + *got) + ", expected " +
                                                std::to_string(r.offset + r.length) + " bytes");
      r.digests->push_back(xxh3_64(buffer.data(), n));
      done += n;
      if (advance) advance(n);
    }
  }
  return Status();
}

// The ranges of a sidecar file in offset order: its regions and every piece the tensors place in it.
[[nodiscard]] CKPT_INLINE std::vector<CoveredRange> sidecar_ranges(Sidecar& s, std::size_t file) {
  std::vector<CoveredRange> out;
  for (auto& r : s.files[file].regions) out.push_back(CoveredRange{r.offset, r.length, &r.chunk_digests, {}, -1});
  for (auto& t : s.content.tensors)
    for (std::size_t k = 0; k < t.pieces.size(); ++k)
      if (t.pieces[k].file == s.files[file].name)
        out.push_back(CoveredRange{t.pieces[k].file_offset, t.pieces[k].length, &t.pieces[k].chunk_digests, t.name,
                                   static_cast<std::int64_t>(k)});
  std::sort(out.begin(), out.end(), [](const CoveredRange& a, const CoveredRange& b) {
    return std::tie(a.offset, a.length) < std::tie(b.offset, b.length);
  });
  return out;
}

// True when the ranges tile [0, size) exactly: every byte in exactly one (spec/IDENTITY.md 4.3).
[[nodiscard]] CKPT_INLINE bool ranges_tile(const std::vector<CoveredRange>& ranges, std::uint64_t size, std::uint64_t& at) {
  at = 0;
  for (const auto& r : ranges) {
    if (r.length == 0) continue;
    if (r.offset != at) return false;
    at += r.length;
  }
  return at == size;
}

[[nodiscard]] CKPT_INLINE Value metadata_text_value(const std::string& text) {
  return valid_utf8(text) ? Value(text) : Value(Bytes{text});
}

}  // namespace detail

CKPT_INLINE Result<Sidecar> build_sidecar(FsRef fs, const ForeignCheckpoint& checkpoint, std::uint32_t chunk_size_log2,
                                          const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (!checkpoint.problems.empty())
    return make_error(Code::corrupt, checkpoint.path + ": not recording digests of a damaged checkpoint: " +
                                         checkpoint.problems.front().message);
  if (chunk_size_log2 < sidecar::kMinChunkSizeLog2 || chunk_size_log2 > sidecar::kMaxChunkSizeLog2)
    return make_error(Code::invalid_argument, "chunk size 2^" + std::to_string(chunk_size_log2) + " is outside 2^12 to 2^30");
  Sidecar s;
  s.format = checkpoint.format;
  s.chunk_size_log2 = chunk_size_log2;
  s.content.description = checkpoint.path;
  std::uint64_t total = 0;
  // The primary file first: a reader maps it to the file its sidecar is named after, so a renamed
  // copy of a one-file checkpoint keeps its sidecar (spec/IDENTITY.md 4.1).
  const std::string primary_name = base_name(checkpoint.primary);
  for (const auto& f : checkpoint.files) {
    if (!f.present) return make_error(Code::corrupt, join_path(checkpoint.dir, f.name) + ": missing");
    total += f.size;
    if (f.name == primary_name) s.files.insert(s.files.begin(), SidecarFile{f.name, f.size, {}});
    else s.files.push_back(SidecarFile{f.name, f.size, {}});
  }
  if (s.files.empty() || s.files.front().name != primary_name)
    return make_error(Code::invalid_argument, checkpoint.path + ": its primary file " + checkpoint.primary + " is not among its files");
  for (const auto& t : checkpoint.tensors) {
    // A sidecar holds names as non-empty UTF-8 (spec/IDENTITY.md 4.3): refused here, not written for decode_sidecar to refuse.
    if (t.name.empty() || !valid_utf8(t.name))
      return make_error(Code::unsupported, checkpoint.path + ": tensor " + detail::printable(t.name) +
                                               ": expected a non-empty UTF-8 name, which a sidecar can record, found " +
                                               (t.name.empty() ? "an empty one" : "invalid UTF-8"));
    ContentTensor ct;
    ct.name = t.name;
    ct.dtype = t.dtype;
    ct.shape = t.shape;
    for (const auto& p : t.pieces) {
      ContentPiece cp;
      cp.offsets = p.offsets;
      cp.shape = p.shape;
      cp.length = p.length;
      cp.chunk_size = s.chunk_size();
      cp.file = checkpoint.files.at(p.file).name;
      cp.file_offset = p.offset;
      ct.pieces.push_back(std::move(cp));
    }
    s.content.tensors.push_back(std::move(ct));
  }
  for (const auto& [key, text] : checkpoint.metadata) {
    if (!valid_utf8(key))
      return make_error(Code::unsupported, checkpoint.path + ": metadata key " + detail::printable(key) +
                                               ": expected UTF-8, which a sidecar can record, found invalid UTF-8");
    s.content.metadata.push_back(MetaEntry{key, detail::metadata_text_value(text)});
  }
  // Every byte a piece does not hold is a region: headers, padding, DCP's .metadata (spec 4.2).
  for (std::size_t f = 0; f < s.files.size(); ++f) {
    auto pieces = detail::sidecar_ranges(s, f);
    std::uint64_t at = 0;
    for (const auto& r : pieces) {
      if (r.offset < at)
        return make_error(Code::corrupt, join_path(checkpoint.dir, s.files[f].name) + ": tensor '" + r.tensor + "' overlaps bytes before " +
                                             std::to_string(at));
      if (r.offset > at) s.files[f].regions.push_back(SidecarRegion{at, r.offset - at, {}});
      at = r.offset + r.length;
    }
    if (at > s.files[f].size)
      return make_error(Code::incomplete, join_path(checkpoint.dir, s.files[f].name) + ": tensors end at byte " + std::to_string(at) +
                                              ", the file has " + std::to_string(s.files[f].size));
    if (at < s.files[f].size) s.files[f].regions.push_back(SidecarRegion{at, s.files[f].size - at, {}});
  }
  std::uint64_t done = 0;
  std::vector<unsigned char> buffer;
  for (std::size_t f = 0; f < s.files.size(); ++f) {
    const std::string path = join_path(checkpoint.dir, s.files[f].name);
    auto ranges = detail::sidecar_ranges(s, f);
    auto file = fs.open(path, OpenMode::read);
    if (!file.ok()) return file.status();
    auto size = fs.file_size(*file);
    Status st = size.ok() ? Status() : size.status();
    if (st.ok() && *size != s.files[f].size)
      st = make_error(Code::conflict, path + ": changed size while being read (" + std::to_string(s.files[f].size) + " then " +
                                          std::to_string(*size) + " bytes)");
    if (st.ok())
      st = detail::hash_ranges(fs, *file, path, ranges, s.chunk_size(), buffer, [&](std::uint64_t n) {
        done += n;
        if (progress) progress(done, total);
      });
    (void)fs.close(*file);
    CKPT_TRY(st);
  }
  CKPT_TRY(seal_content(s.content));
  return s;
}

namespace detail {
CKPT_INLINE void sidecar_string(Encoder& e, std::string_view s) {
  e.u64(s.size());
  e.bytes(s);
}
}  // namespace detail

CKPT_INLINE std::string encode_sidecar(const Sidecar& s) {
  Encoder e;
  e.raw(sidecar::kMagic, sizeof sidecar::kMagic);
  e.u32(sidecar::kVersion);
  e.u32(static_cast<std::uint32_t>(s.format));
  e.u32(s.chunk_size_log2);
  e.u32(0);
  e.u64(s.files.size());
  e.u64(s.content.tensors.size());
  e.u64(s.content.metadata.size());
  e.u64(s.content.root.high);
  e.u64(s.content.root.low);
  std::unordered_map<std::string, std::uint64_t> file_index;
  for (std::size_t i = 0; i < s.files.size(); ++i) {
    const auto& f = s.files[i];
    file_index.emplace(f.name, i);
    detail::sidecar_string(e, f.name);
    e.u64(f.size);
    e.u64(f.regions.size());
    for (const auto& r : f.regions) {
      e.u64(r.offset);
      e.u64(r.length);
      for (const auto d : r.chunk_digests) e.u64(d);
    }
  }
  for (const auto& t : s.content.tensors) {
    detail::sidecar_string(e, t.name);
    detail::sidecar_string(e, t.dtype);
    e.u64(t.shape.size());
    for (const auto d : t.shape) e.u64(d);
    e.u64(t.pieces.size());
    for (const auto& p : t.pieces) {
      e.u64(file_index.at(p.file));
      e.u64(p.file_offset);
      e.u64(p.length);
      for (const auto d : p.offsets) e.u64(d);
      for (const auto d : p.shape) e.u64(d);
      for (const auto d : p.chunk_digests) e.u64(d);
    }
  }
  for (const auto& m : s.content.metadata) {
    detail::sidecar_string(e, m.key);
    e.u64(m.value.is_bytes() ? 1 : 0);
    detail::sidecar_string(e, m.value.is_bytes() ? m.value.as_bytes() : m.value.as_string());
  }
  const std::uint64_t digest = xxh3_64(e.str().data(), e.size());
  e.u64(digest);
  e.raw(sidecar::kEndMagic, sizeof sidecar::kEndMagic);
  return std::move(e.str());
}

namespace detail {

// Decodes one sidecar; every failure names the byte offset where decoding stopped.
class SidecarDecoder {
 public:
  SidecarDecoder(const unsigned char* bytes, std::size_t size, const std::string& path) : in_(bytes, size), path_(path) {}

  [[nodiscard]] Status fail(const std::string& what) const {
    return make_error(Code::corrupt, path_ + ": sidecar byte " + std::to_string(in_.position()) + ": " + what);
  }
  [[nodiscard]] Status u64(std::uint64_t& v, const char* what) {
    return in_.u64(v) ? Status() : fail(std::string("ends inside ") + what);
  }
  // A count of records of at least min_record bytes each must fit in what is left: nothing is
  // allocated for records the bytes cannot hold.
  [[nodiscard]] Status count(std::uint64_t& v, std::uint64_t min_record, const char* what) {
    CKPT_TRY(u64(v, what));
    if (v > in_.remaining() / min_record)
      return fail(std::string(what) + " " + std::to_string(v) + " exceeds the " + std::to_string(in_.remaining()) + " bytes left");
    return Status();
  }
  [[nodiscard]] Status text(std::string& s, const char* what, bool utf8) {
    std::uint64_t n = 0;
    CKPT_TRY(u64(n, what));
    if (n > in_.remaining()) return fail(std::string(what) + " length " + std::to_string(n) + " exceeds the bytes left");
    s.assign(reinterpret_cast<const char*>(in_.cursor()), static_cast<std::size_t>(n));
    if (!in_.skip(static_cast<std::size_t>(n))) return fail(what);
    if (utf8 && !valid_utf8(s)) return fail(std::string(what) + " is not valid UTF-8");
    return Status();
  }
  [[nodiscard]] Status digests(std::vector<std::uint64_t>& out, std::uint64_t length, std::uint64_t chunk_size, const char* what) {
    const std::uint64_t n = chunk_count_of(length, chunk_size);
    if (n > in_.remaining() / 8) return fail(std::string(what) + ": " + std::to_string(n) + " chunk digests exceed the bytes left");
    out.resize(static_cast<std::size_t>(n));
    for (auto& d : out) CKPT_TRY(u64(d, what));
    return Status();
  }
  [[nodiscard]] std::size_t remaining() const noexcept { return in_.remaining(); }

 private:
  Decoder in_;
  const std::string& path_;
};

// A relative name that stays inside the checkpoint's directory.
[[nodiscard]] CKPT_INLINE bool safe_relative_name(std::string_view name) noexcept {
  if (name.empty() || name.front() == '/') return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return name.find('\0') == std::string_view::npos;
}

}  // namespace detail

CKPT_INLINE Result<Sidecar> decode_sidecar(const unsigned char* bytes, std::size_t size, const std::string& path) {
  using namespace sidecar;
  if (size < kHeaderSize + kTrailerSize)
    return make_error(Code::incomplete, path + ": " + std::to_string(size) + " bytes, a sidecar has at least " +
                                            std::to_string(kHeaderSize + kTrailerSize));
  if (std::memcmp(bytes + size - 8, kEndMagic, 8) != 0)
    return make_error(Code::incomplete, path + ": does not end with CKPTSEND at byte " + std::to_string(size - 8) +
                                            " (a torn or truncated sidecar)");
  const std::uint64_t stored = get_u64(bytes + size - kTrailerSize);
  const std::uint64_t actual = xxh3_64(bytes, size - kTrailerSize);
  if (stored != actual)
    return make_error(Code::corrupt, path + ": sidecar digest at byte " + std::to_string(size - kTrailerSize) + ": expected " +
                                         hex64(stored) + ", found " + hex64(actual));
  if (std::memcmp(bytes + hd::kMagic, kMagic, 8) != 0) return make_error(Code::corrupt, path + ": byte 0: not a ckpt sidecar (no CKPTSUMS)");
  if (get_u32(bytes + hd::kVersion) != kVersion)
    return make_error(Code::unsupported, path + ": sidecar version " + std::to_string(get_u32(bytes + hd::kVersion)) + ", expected 1");
  Sidecar s;
  const std::uint32_t format_code = get_u32(bytes + hd::kFormat);
  if (format_code < 1 || format_code > 4)
    return make_error(Code::corrupt, path + ": byte 12: format " + std::to_string(format_code) + ", expected 1 to 4");
  s.format = static_cast<ForeignFormat>(format_code);
  s.chunk_size_log2 = get_u32(bytes + hd::kChunkSizeLog2);
  if (s.chunk_size_log2 < kMinChunkSizeLog2 || s.chunk_size_log2 > kMaxChunkSizeLog2)
    return make_error(Code::corrupt, path + ": byte 16: chunk size log2 " + std::to_string(s.chunk_size_log2) + ", expected 12 to 30");
  if (get_u32(bytes + hd::kReserved) != 0) return make_error(Code::corrupt, path + ": byte 20: reserved field is not zero");
  const Digest128 root{get_u64(bytes + hd::kRoot), get_u64(bytes + hd::kRoot + 8)};
  detail::SidecarDecoder in(bytes + kHeaderSize, size - kHeaderSize - kTrailerSize, path);
  const std::uint64_t chunk = s.chunk_size();
  std::uint64_t files = get_u64(bytes + hd::kFileCount), tensors = get_u64(bytes + hd::kTensorCount),
                metas = get_u64(bytes + hd::kMetaCount);
  // Smallest records: a file is 25 bytes (a name of one byte, size, region count), a tensor 33, an entry 25.
  if (files > in.remaining() / 25 || tensors > in.remaining() / 33 || metas > in.remaining() / 25)
    return make_error(Code::corrupt, path + ": byte 24: counts exceed the sidecar's size");
  std::unordered_map<std::string, std::size_t> file_index;
  std::unordered_set<std::string> tensor_names;
  for (std::uint64_t i = 0; i < files; ++i) {
    SidecarFile f;
    CKPT_TRY(in.text(f.name, "file name", true));
    if (!detail::safe_relative_name(f.name)) return in.fail("file name '" + f.name + "' is not a name inside the directory");
    if (!file_index.emplace(f.name, s.files.size()).second) return in.fail("file '" + f.name + "' listed twice");
    CKPT_TRY(in.u64(f.size, "file size"));
    std::uint64_t regions = 0;
    CKPT_TRY(in.count(regions, 16, "region count"));
    for (std::uint64_t r = 0; r < regions; ++r) {
      SidecarRegion reg;
      CKPT_TRY(in.u64(reg.offset, "region offset"));
      CKPT_TRY(in.u64(reg.length, "region length"));
      if (reg.offset > f.size || reg.length > f.size - reg.offset) return in.fail("region past the end of '" + f.name + "'");
      CKPT_TRY(in.digests(reg.chunk_digests, reg.length, chunk, "region digests"));
      f.regions.push_back(std::move(reg));
    }
    s.files.push_back(std::move(f));
  }
  for (std::uint64_t i = 0; i < tensors; ++i) {
    ContentTensor t;
    CKPT_TRY(in.text(t.name, "tensor name", true));
    if (t.name.empty()) return in.fail("empty tensor name");
    if (!tensor_names.insert(t.name).second) return in.fail("tensor '" + t.name + "' listed twice");
    CKPT_TRY(in.text(t.dtype, "dtype", true));
    std::uint64_t ndim = 0, pieces = 0;
    CKPT_TRY(in.u64(ndim, "rank"));
    if (ndim > format::kMaxRank) return in.fail("rank " + std::to_string(ndim) + " of '" + t.name + "' exceeds 64");
    t.shape.resize(static_cast<std::size_t>(ndim));
    for (auto& d : t.shape) CKPT_TRY(in.u64(d, "shape"));
    CKPT_TRY(in.count(pieces, 24 + 16 * ndim, "piece count"));
    for (std::uint64_t k = 0; k < pieces; ++k) {
      ContentPiece p;
      std::uint64_t file = 0;
      CKPT_TRY(in.u64(file, "piece file"));
      if (file >= s.files.size()) return in.fail("piece of '" + t.name + "' names file " + std::to_string(file));
      p.file = s.files[static_cast<std::size_t>(file)].name;
      CKPT_TRY(in.u64(p.file_offset, "piece offset"));
      CKPT_TRY(in.u64(p.length, "piece length"));
      const std::uint64_t fsize = s.files[static_cast<std::size_t>(file)].size;
      if (p.file_offset > fsize || p.length > fsize - p.file_offset) return in.fail("piece of '" + t.name + "' past the end of its file");
      p.offsets.resize(static_cast<std::size_t>(ndim));
      p.shape.resize(static_cast<std::size_t>(ndim));
      for (auto& d : p.offsets) CKPT_TRY(in.u64(d, "piece offsets"));
      for (auto& d : p.shape) CKPT_TRY(in.u64(d, "piece shape"));
      p.chunk_size = chunk;
      CKPT_TRY(in.digests(p.chunk_digests, p.length, chunk, "piece digests"));
      t.pieces.push_back(std::move(p));
    }
    s.content.tensors.push_back(std::move(t));
  }
  for (std::uint64_t i = 0; i < metas; ++i) {
    MetaEntry m;
    std::uint64_t is_bytes = 0;
    std::string value;
    CKPT_TRY(in.text(m.key, "metadata key", true));
    CKPT_TRY(in.u64(is_bytes, "metadata type"));
    if (is_bytes > 1) return in.fail("metadata type " + std::to_string(is_bytes) + ", expected 0 (text) or 1 (bytes)");
    CKPT_TRY(in.text(value, "metadata value", is_bytes == 0));
    m.value = is_bytes ? Value(Bytes{std::move(value)}) : Value(std::move(value));
    s.content.metadata.push_back(std::move(m));
  }
  if (in.remaining() != 0) return in.fail(std::to_string(in.remaining()) + " bytes follow the last record");
  // Every byte of every file is covered exactly once (spec 4.3).
  for (std::size_t f = 0; f < s.files.size(); ++f) {
    auto ranges = detail::sidecar_ranges(s, f);
    std::uint64_t at = 0;
    if (!detail::ranges_tile(ranges, s.files[f].size, at))
      return make_error(Code::corrupt, path + ": the ranges of '" + s.files[f].name + "' do not tile its " +
                                           std::to_string(s.files[f].size) + " bytes (a gap or overlap at byte " + std::to_string(at) + ")");
  }
  s.content.description = path;
  CKPT_TRY(seal_content(s.content));  // names are unique (checked above): it cannot fail
  if (s.content.root != root)
    return make_error(Code::corrupt, path + ": byte 48: root digest expected " + root.hex() + ", recomputed " + s.content.root.hex());
  return s;
}

CKPT_INLINE Result<Sidecar> read_sidecar(FsRef fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  if (opened.size > sidecar::kMaxSize) {
    return make_error(Code::corrupt, path + ": sidecar of " + std::to_string(opened.size) + " bytes exceeds the limit of 256 MiB");
  }
  std::vector<unsigned char> bytes(static_cast<std::size_t>(opened.size));
  auto got = fs.pread(opened.file.get(), bytes.data(), bytes.size(), 0);
  if (!got.ok()) return got.status().with_context(path);
  if (*got != bytes.size()) return make_error(Code::io, path + ": changed size while being read");
  return decode_sidecar(bytes.data(), bytes.size(), path);
}

CKPT_INLINE Status write_sidecar(FsRef fs, const Sidecar& sidecar, const std::string& path) {
  const std::string bytes = encode_sidecar(sidecar);
  auto out = AtomicFile::create(fs, path);
  if (!out.ok()) return out.status();
  CKPT_TRY(out->write(bytes.data(), bytes.size()));
  return out->commit();
}

namespace detail {

// The file a foreign path's sidecar is named after, told without decoding its header (which may be
// the damaged part): spec/IDENTITY.md 4.1.
[[nodiscard]] CKPT_INLINE Result<std::string> foreign_primary(FsRef fs, const std::string& path, ForeignFormat format) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();
  if (format == ForeignFormat::dcp) return info->is_dir ? join_path(path, ".metadata") : path;
  if (format == ForeignFormat::safetensors_index && info->is_dir) return find_safetensors_index(fs, path);
  return path;
}

// Every byte of every file the sidecar lists, against its digests; problems named as a .ckpt file's.
CKPT_INLINE Status check_against_sidecar(FsRef fs, const std::string& dir, const std::string& primary, Sidecar& s,
                                         ForeignVerifyReport& report, const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::uint64_t total = 0, done = 0;
  for (const auto& f : s.files) total += f.size;
  std::vector<unsigned char> buffer;
  const std::uint64_t chunk = s.chunk_size();
  for (std::size_t fi = 0; fi < s.files.size(); ++fi) {
    const SidecarFile& sf = s.files[fi];
    // File 0 is the primary: whatever it is called now, it is the file the sidecar is named after.
    const std::string path = fi == 0 ? primary : join_path(dir, sf.name);
    auto file = fs.open(path, OpenMode::read);
    if (!file.ok()) {
      if (file.status().code() != Code::not_found) return file.status();
      report.problems.push_back(structure_problem(Code::corrupt, "missing", path, "", -1, 0, 0, ProblemMessage::given,
                                                  path + ": missing; the sidecar records it as " + std::to_string(sf.size) + " bytes",
                                                  std::to_string(sf.size) + " bytes", "no file"));
      continue;
    }
    auto size = fs.file_size(*file);
    if (!size.ok()) {
      (void)fs.close(*file);
      return size.status().with_context(path);
    }
    if (*size != sf.size) {
      const bool shorter = *size < sf.size;
      report.problems.push_back(structure_problem(shorter ? Code::incomplete : Code::corrupt, "file", path, "", -1,
                                                  std::min(*size, sf.size), shorter ? sf.size - *size : *size - sf.size,
                                                  ProblemMessage::given,
                                                  path + (shorter ? ": truncated to " : ": grown to ") + std::to_string(*size) +
                                                      " bytes; the sidecar records " + std::to_string(sf.size),
                                                  std::to_string(sf.size) + " bytes", std::to_string(*size) + " bytes"));
    }
    buffer.resize(static_cast<std::size_t>(chunk));
    for (const auto& r : sidecar_ranges(s, fi)) {
      for (std::uint64_t c = 0; c < r.digests->size(); ++c) {
        const std::uint64_t off = r.offset + c * chunk;
        const auto n = static_cast<std::size_t>(std::min(chunk, r.length - c * chunk));
        if (off >= *size) break;  // the truncation is reported once, above
        auto got = fs.pread(*file, buffer.data(), n, off);
        if (!got.ok()) {
          (void)fs.close(*file);
          return got.status().with_context(path);
        }
        if (*got < n) break;  // a chunk the truncation cut: reported above
        const std::uint64_t found = xxh3_64(buffer.data(), n);
        ++report.chunks_checked;
        report.bytes_checked += n;
        done += n;
        if (progress) progress(done, total);
        if (found == (*r.digests)[c]) continue;
        Problem p;
        p.code = Code::corrupt;
        p.region = r.tensor.empty() ? "header" : "data";
        p.file = path;
        p.tensor = r.tensor;
        p.piece = r.piece;
        p.chunk = static_cast<std::int64_t>(c);
        p.offset = off;
        p.length = n;
        p.expected = hex64((*r.digests)[c]);
        p.found = hex64(found);
        const std::string what = r.tensor.empty() ? std::string("bytes outside any tensor")
                                                  : "tensor '" + r.tensor + "' piece " + std::to_string(r.piece) + " chunk " + std::to_string(c);
        p.message = path + ": " + what + " bytes [" + std::to_string(off) + ", " + std::to_string(off + n) + "): digest expected " +
                    p.expected + ", found " + p.found + " (sidecar " + report.sidecar + ")";
        report.problems.push_back(std::move(p));
      }
    }
    (void)fs.close(*file);
  }
  return Status();
}

}  // namespace detail

CKPT_INLINE Result<ForeignVerifyReport> verify_foreign(FsRef fs, const std::string& path,
                                                       const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  ForeignVerifyReport report;
  report.path = path;
  auto format = detect_foreign(fs, path);
  if (!format.ok()) return format.status();
  if (!*format) return make_error(Code::invalid_argument, path + ": not a checkpoint format ckpt reads (spec/FOREIGN.md 1.5)");
  report.format = **format;
  auto primary = detail::foreign_primary(fs, path, **format);
  if (!primary.ok()) return primary.status();
  std::string dir = parent_path(*primary);
  auto checkpoint = open_foreign(fs, path);
  if (checkpoint.ok()) {
    for (const auto& p : checkpoint->problems) report.problems.push_back(p);
    dir = checkpoint->dir;
    report.checkpoint = std::move(checkpoint).value();
  } else if (checkpoint.status().code() == Code::corrupt || checkpoint.status().code() == Code::incomplete) {
    report.problems.push_back(structure_problem(checkpoint.status().code(), "header", *primary, "", -1, 0, 0, ProblemMessage::given,
                                                checkpoint.status().message(), "", ""));
  } else {
    return checkpoint.status();
  }
  const std::string side = *primary + std::string(sidecar::kSuffix);
  auto s = read_sidecar(fs, side);
  if (!s.ok()) {
    if (s.status().code() == Code::not_found) return report;
    if (s.status().code() == Code::io) return s.status();
    report.sidecar = side;
    report.problems.push_back(
        structure_problem(s.status().code(), "sidecar", side, "", -1, 0, 0, ProblemMessage::given, s.status().message(), "", ""));
    return report;
  }
  report.sidecar = side;
  if (s->format != **format)
    report.problems.push_back(structure_problem(Code::corrupt, "sidecar", side, "", -1, 0, 0, ProblemMessage::given,
                                                side + ": records a " + std::string(foreign_format_name(s->format)) + " checkpoint, " +
                                                    path + " is " + foreign_format_name(**format),
                                                "", ""));
  CKPT_TRY(detail::check_against_sidecar(fs, dir, *primary, *s, report, progress));
  report.data_checked = true;
  report.root = s->content.root;
  return report;
}

CKPT_INLINE Result<Content> foreign_content(FsRef fs, const std::string& path, const ContentOptions& options) {
  auto format = detect_foreign(fs, path);
  if (!format.ok()) return format.status();
  if (!*format) return make_error(Code::invalid_argument, path + ": neither a ckpt checkpoint nor a format ckpt reads (spec/FOREIGN.md 1.5)");
  auto primary = detail::foreign_primary(fs, path, **format);
  if (!primary.ok()) return primary.status();
  auto s = read_sidecar(fs, *primary + std::string(sidecar::kSuffix));
  if (s.ok()) {
    s->content.description = path;
    return std::move(s->content);
  }
  if (s.status().code() != Code::not_found) return s.status();
  if (!options.read_foreign_data)
    return make_error(Code::unsupported, path + ": a " + std::string(foreign_format_name(**format)) +
                                             " checkpoint records no digests and has no sidecar (ckpt-verify --write-sidecar records them)");
  auto checkpoint = open_foreign(fs, path);
  if (!checkpoint.ok()) return checkpoint.status();
  auto built = build_sidecar(fs, *checkpoint, options.chunk_size_log2, options.progress);
  if (!built.ok()) return built.status();
  built->content.description = path;
  return std::move(built->content);
}

}  // namespace ckpt
