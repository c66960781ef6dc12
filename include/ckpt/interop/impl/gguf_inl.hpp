// ckpt: definitions for the GGUF reader declared in foreign.hpp (spec/FOREIGN.md 5).
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../core/coding.hpp"
#include "../gguf.hpp"
#include "../../core/hash.hpp"
#include "../../core/problem.hpp"
#include "../safetensors.hpp"  // detail::printable

namespace ckpt {

namespace detail {

// A string element of an array in metadata text: double-quoted, '"', '\\' and control bytes escaped.
[[nodiscard]] CKPT_INLINE std::string gguf_quoted(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}
// A key or tensor name in a message, as the safetensors reader names them ('name', controls escaped).
[[nodiscard]] CKPT_INLINE std::string gguf_name(std::string_view s) { return printable(s); }

// Shortest text that reads back as the same value ("0.1", "1e-05", "nan", "-inf").
template <class Float>
[[nodiscard]] std::string gguf_float_text(Float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  const auto done = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, done.ptr);
#else
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(v));
    if (static_cast<Float>(std::strtod(buf, nullptr)) == v) break;
  }
  return buf;
#endif
}

// Reads the header of a GGUF file front to back through pread in bounded blocks; never reads the
// data section. Every consumed byte is also fed to the hashers pushed (the summarised arrays).
class GgufReader {
 public:
  static constexpr std::size_t kBlock = 64 * 1024;

  GgufReader(FsRef fs, FileHandle file, const std::string& path, std::uint64_t size)
      : fs_(fs), file_(file), path_(path), size_(size) {}

  [[nodiscard]] std::uint64_t position() const noexcept { return pos_; }
  [[nodiscard]] std::uint64_t remaining() const noexcept { return size_ - pos_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  // "PATH: offset N: WHAT: MESSAGE".
  [[nodiscard]] Status error(Code code, std::uint64_t offset, const std::string& what, const std::string& message) const {
    return make_error(code, path_ + ": offset " + std::to_string(offset) + ": " + what + ": " + message);
  }

  // Checks that `count` items of at least `item_size` bytes each can follow, before anything is
  // allocated for them. A count that no header this reader accepts could hold (over kMaxHeaderBytes)
  // is corrupt; a plausible one that the rest of the file cannot hold is a truncated copy
  // (spec/FOREIGN.md 5.6).
  [[nodiscard]] Status check_count(std::uint64_t count, std::uint64_t item_size, std::uint64_t field_offset,
                                   const std::string& what) const {
    std::uint64_t need = 0;
    const bool overflow = !checked_mul(count, item_size, need);
    if (!overflow && need <= remaining()) return Status();
    const std::string message =
        item_size == 1 ? "expected at most " + std::to_string(remaining()) + " bytes (the rest of the file from offset " +
                             std::to_string(pos_) + "), found " + std::to_string(count) + "; the file ends at " +
                             std::to_string(size_)
                       : "expected at most " + std::to_string(remaining() / item_size) + " (the " + std::to_string(remaining()) +
                             " bytes left at offset " + std::to_string(pos_) + " hold no more of " + std::to_string(item_size) +
                             " bytes or more each), found " + std::to_string(count) + "; the file ends at " +
                             std::to_string(size_);
    return error(overflow || need > gguf::kMaxHeaderBytes ? Code::corrupt : Code::incomplete, field_offset, what, message);
  }

  // Reads a fixed-size little-endian field of n <= 8 bytes.
  [[nodiscard]] Status fixed(unsigned char* out, std::size_t n, const std::string& what) {
    CKPT_TRY(fill(n, what));
    std::memcpy(out, window_.data() + (pos_ - window_start_), n);
    consume(out, n);
    return Status();
  }
  [[nodiscard]] Status u32(std::uint32_t& v, const std::string& what) {
    unsigned char b[4];
    CKPT_TRY(fixed(b, 4, what));
    v = get_u32(b);
    return Status();
  }
  [[nodiscard]] Status u64(std::uint64_t& v, const std::string& what) {
    unsigned char b[8];
    CKPT_TRY(fixed(b, 8, what));
    v = get_u64(b);
    return Status();
  }

  // Reads `length` bytes (already checked against what is left), keeping the first `keep` in `out`.
  [[nodiscard]] Status bytes(std::uint64_t length, std::size_t keep, std::string& out, const std::string& what) {
    out.clear();
    out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(length, keep)));
    while (length > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(length, kBlock));
      CKPT_TRY(fill(n, what));
      const unsigned char* p = window_.data() + (pos_ - window_start_);
      if (out.size() < keep) out.append(reinterpret_cast<const char*>(p), std::min(n, keep - out.size()));
      consume(p, n);
      length -= n;
    }
    return Status();
  }

  void push_tap(StreamHasher* h) { taps_.push_back(h); }
  void pop_tap() noexcept { taps_.pop_back(); }

 private:
  // Makes [pos_, pos_ + n) available in the window, n <= kBlock.
  [[nodiscard]] Status fill(std::size_t n, const std::string& what) {
    if (n > size_ - pos_)
      return error(Code::incomplete, pos_, what,
                   "expected " + std::to_string(n) + " bytes, found " + std::to_string(size_ - pos_) + " (the file ends at " +
                       std::to_string(size_) + ")");
    if (n > gguf::kMaxHeaderBytes - std::min(pos_, gguf::kMaxHeaderBytes))
      return error(Code::corrupt, pos_, what,
                   "expected the key/value pairs and tensor infos to end within " + std::to_string(gguf::kMaxHeaderBytes) +
                       " bytes (this reader's limit), found more");
    if (pos_ >= window_start_ && n <= window_len_ - std::min<std::uint64_t>(window_len_, pos_ - window_start_)) return Status();
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kBlock, size_ - pos_));
    window_.resize(kBlock);
    auto got = fs_.pread(file_, window_.data(), want, pos_);
    if (!got.ok()) return got.status().with_context(path_ + ": offset " + std::to_string(pos_));
    window_start_ = pos_;
    window_len_ = *got;
    if (window_len_ < n)
      return error(Code::incomplete, pos_, what,
                   "expected " + std::to_string(n) + " bytes, found " + std::to_string(window_len_) + " (the file shrank while read)");
    return Status();
  }
  void consume(const unsigned char* p, std::size_t n) noexcept {
    for (StreamHasher* h : taps_) h->update(p, n);
    pos_ += n;
  }

  FsRef fs_;
  FileHandle file_;
  const std::string& path_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::vector<unsigned char> window_;
  std::uint64_t window_start_ = 0;
  std::size_t window_len_ = 0;
  std::vector<StreamHasher*> taps_;
};

// One metadata value's text (spec/FOREIGN.md 5.5); with `want_text` false the value is only checked
// and consumed. `raw` receives a fixed-size value's bits (general.alignment is read through it).
[[nodiscard]] CKPT_INLINE Status gguf_value(GgufReader& in, std::uint32_t type, std::uint32_t depth, bool want_text,
                                            const std::string& what, std::string& text, std::uint64_t* raw = nullptr) {
  using gguf::ValueType;
  text.clear();
  const std::uint64_t at = in.position();
  if (type == static_cast<std::uint32_t>(ValueType::string)) {
    const std::size_t limit = depth == 0 ? gguf::kMaxShownString : gguf::kMaxShownArrayText;
    std::uint64_t length = 0;
    CKPT_TRY(in.u64(length, what + " length"));
    CKPT_TRY(in.check_count(length, 1, at, what + " length"));
    StreamHasher h;  // of the string's bytes alone, for the summary of a long one
    if (want_text) in.push_tap(&h);
    std::string s;
    const Status st = in.bytes(length, want_text ? limit + 1 : 0, s, what);
    if (want_text) in.pop_tap();
    CKPT_TRY(st);
    if (!want_text) return Status();
    if (length > limit)
      text = "string of " + std::to_string(length) + " bytes, xxh3-64 " + hex64(h.digest()) + " of its bytes";
    else
      text = depth == 0 ? std::move(s) : gguf_quoted(s);
    return Status();
  }
  if (type == static_cast<std::uint32_t>(ValueType::array)) {
    std::uint32_t element = 0;
    CKPT_TRY(in.u32(element, what + " element type"));
    const char* element_name = gguf::value_type_name(element);
    if (element_name == nullptr)
      return in.error(Code::corrupt, at, what + " element type",
                      "expected a value type 0 to 12, found " + std::to_string(element));
    if (element == static_cast<std::uint32_t>(ValueType::array) && depth + 1 >= gguf::kMaxArrayDepth)
      return in.error(Code::corrupt, at, what,
                      "expected arrays nested at most " + std::to_string(gguf::kMaxArrayDepth) + " deep, found deeper");
    const std::uint64_t count_at = in.position();
    std::uint64_t count = 0;
    CKPT_TRY(in.u64(count, what + " count"));
    CKPT_TRY(in.check_count(count, gguf::value_min_size(element), count_at, what + " count"));
    StreamHasher h;
    in.push_tap(&h);
    bool show = want_text && count <= gguf::kMaxShownElements;
    std::string shown = "[" + std::to_string(count) + " x " + element_name + (count > 0 ? ": " : "");
    Status st;
    const std::uint64_t fixed = gguf::value_fixed_size(element);
    if (!show && fixed > 0 && element != static_cast<std::uint32_t>(ValueType::boolean)) {
      std::string none;
      st = in.bytes(count * fixed, 0, none, what);  // count * fixed was checked against the file
    } else {
      std::string item;
      for (std::uint64_t i = 0; st.ok() && i < count; ++i) {
        st = gguf_value(in, element, depth + 1, show, what + "[" + std::to_string(i) + "]", item);
        if (st.ok() && show) {
          shown += (i > 0 ? ", " : "") + item;
          show = shown.size() <= gguf::kMaxShownArrayText;
        }
      }
    }
    in.pop_tap();
    CKPT_TRY(st);
    if (want_text)
      text = show ? shown + "]"
                  : "array of " + std::to_string(count) + " " + element_name + ", xxh3-64 " + hex64(h.digest()) +
                        " of its encoded bytes";
    return Status();
  }
  const std::uint64_t size = gguf::value_fixed_size(type);
  if (size == 0) return in.error(Code::corrupt, at, what, "expected a value type 0 to 12, found " + std::to_string(type));
  unsigned char b[8] = {};
  CKPT_TRY(in.fixed(b, static_cast<std::size_t>(size), what));
  const std::uint64_t bits = get_u64(b);  // zero-extended: b holds `size` bytes and zeros
  if (raw != nullptr) *raw = bits;
  const auto sign_extend = [bits, size]() -> std::int64_t {
    const unsigned shift = static_cast<unsigned>(64 - 8 * size);
    return static_cast<std::int64_t>(bits << shift) >> shift;
  };
  switch (static_cast<ValueType>(type)) {
    case ValueType::boolean:
      if (bits > 1) return in.error(Code::corrupt, at, what, "expected a bool 0 or 1, found " + std::to_string(bits));
      if (want_text) text = bits ? "true" : "false";
      return Status();
    case ValueType::i8:
    case ValueType::i16:
    case ValueType::i32:
    case ValueType::i64:
      if (want_text) text = std::to_string(sign_extend());
      return Status();
    case ValueType::f32: {
      float f;
      const auto u = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &u, sizeof f);
      if (want_text) text = gguf_float_text(f);
      return Status();
    }
    case ValueType::f64:
      if (want_text) text = gguf_float_text(bits_f64(bits));
      return Status();
    default:
      if (want_text) text = std::to_string(bits);
      return Status();
  }
}

// A tensor as its tensor info describes it.
struct GgufTensorInfo {
  std::string name;
  std::uint64_t info_offset = 0;  // file offset of its tensor info
  const gguf::TypeInfo* type = nullptr;
  Shape dims;                   // ne order: innermost first
  std::uint64_t offset = 0;     // relative to the data section
  std::uint64_t absolute = 0;   // data_offset + offset (valid when !offset_overflows)
  bool offset_overflows = false;
  std::uint64_t bytes = 0;
};

// "[a, b)" of file offsets.
[[nodiscard]] CKPT_INLINE std::string gguf_range(std::uint64_t begin, std::uint64_t length) {
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + length) + ")";
}

// Padding must be 0x00 (ggml docs/gguf.md: "padded with 0x00 bytes"): a problem names the first
// other byte of [begin, end), clipped to the file.
[[nodiscard]] CKPT_INLINE Status gguf_check_padding(FsRef fs, FileHandle file, const std::string& path, std::uint64_t file_size,
                                                    std::uint64_t begin, std::uint64_t end, const std::string& subject,
                                                    std::vector<unsigned char>& block, std::vector<Problem>& problems) {
  end = std::min(end, file_size);
  for (std::uint64_t at = begin; at < end;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(end - at, GgufReader::kBlock));
    block.resize(n);
    CKPT_TRY(read_exact(fs, file, path, block.data(), n, at));
    for (std::size_t i = 0; i < n; ++i) {
      if (block[i] == 0) continue;
      char found[48];
      std::snprintf(found, sizeof found, "byte 0x%02x at offset %llu", block[i],
                    static_cast<unsigned long long>(at + i));
      problems.push_back(structure_problem(Code::corrupt, "padding", path, "", -1, begin, end - begin, ProblemMessage::at_offset,
                                           subject + " " + gguf_range(begin, end - begin), "zero bytes (GGUF pads with 0x00)", found));
      return Status();
    }
    at += n;
  }
  return Status();
}

// Row-major shape (outermost first) and byte size of a tensor from its ne dimensions.
[[nodiscard]] CKPT_INLINE Status gguf_tensor_bytes(const GgufReader& in, GgufTensorInfo& t) {
  const std::string subject = "tensor " + gguf_name(t.name);
  const std::uint64_t ne0 = t.dims.empty() ? 1 : t.dims[0];
  if (ne0 % t.type->block != 0)
    return in.error(Code::corrupt, t.info_offset, subject,
                    "expected dimension 0 (ne0) a multiple of the " + std::to_string(t.type->block) + "-element block of " +
                        std::string(t.type->name) + ", found " + std::to_string(ne0));
  std::uint64_t bytes = 0;
  bool fits = checked_mul(ne0 / t.type->block, t.type->size, bytes);
  for (std::size_t d = 1; fits && d < t.dims.size(); ++d) fits = checked_mul(bytes, t.dims[d], bytes);
  if (!fits)
    return in.error(Code::corrupt, t.info_offset, subject,
                    "expected a size that fits 64 bits, found dimensions " + shape_string(t.dims) + " of " + std::string(t.type->name));
  t.bytes = bytes;
  return Status();
}

// The tensor infos after the key/value pairs.
[[nodiscard]] CKPT_INLINE Status gguf_tensor_infos(GgufReader& in, std::uint64_t count, std::vector<GgufTensorInfo>& out) {
  out.reserve(static_cast<std::size_t>(count));  // at most kMaxTensorCount, and count * kMinTensorInfoSize bytes follow
  for (std::uint64_t i = 0; i < count; ++i) {
    GgufTensorInfo t;
    t.info_offset = in.position();
    const std::string index = "tensor " + std::to_string(i);
    std::uint64_t length = 0;
    const std::uint64_t length_at = in.position();
    CKPT_TRY(in.u64(length, index + " name length"));
    if (length > format::kMaxNameLength)
      return in.error(Code::corrupt, length_at, index + " name length",
                      "expected at most " + std::to_string(format::kMaxNameLength) + " bytes, found " + std::to_string(length));
    CKPT_TRY(in.check_count(length, 1, length_at, index + " name length"));
    CKPT_TRY(in.bytes(length, static_cast<std::size_t>(length), t.name, index + " name"));
    if (!valid_utf8(t.name))  // gguf_string_t is UTF-8 (docs/gguf.md); gguf-py cannot read the file either
      return in.error(Code::corrupt, length_at + 8, index + " name", "expected UTF-8 text, found invalid UTF-8");
    const std::string subject = "tensor " + gguf_name(t.name);
    const std::uint64_t dims_at = in.position();
    std::uint32_t n_dims = 0;
    CKPT_TRY(in.u32(n_dims, subject + " n_dims"));
    if (n_dims > gguf::kMaxDims)
      return in.error(Code::corrupt, dims_at, subject + " n_dims",
                      "expected at most " + std::to_string(gguf::kMaxDims) + ", found " + std::to_string(n_dims));
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t at = in.position();
      std::uint64_t ne = 0;
      CKPT_TRY(in.u64(ne, subject + " ne[" + std::to_string(d) + "]"));
      if (ne > static_cast<std::uint64_t>(INT64_MAX))  // ggml holds dimensions as int64_t
        return in.error(Code::corrupt, at, subject + " ne[" + std::to_string(d) + "]",
                        "expected at most 2^63-1, found " + std::to_string(ne));
      t.dims.push_back(ne);
    }
    const std::uint64_t type_at = in.position();
    std::uint32_t type = 0;
    CKPT_TRY(in.u32(type, subject + " type"));
    t.type = gguf::type_info(type);
    if (t.type == nullptr)
      return in.error(Code::corrupt, type_at, subject + " type",
                      "expected a ggml type of spec/FOREIGN.md 5.4 (0-3, 6-30, 34, 35, 39-41), found " + std::to_string(type));
    CKPT_TRY(in.u64(t.offset, subject + " offset"));
    CKPT_TRY(gguf_tensor_bytes(in, t));
    out.push_back(std::move(t));
  }
  return Status();
}

// Where the bytes of the data section go (spec/FOREIGN.md 5.3): each tensor aligned and inside the
// file, no two overlapping, no gap of `alignment` bytes or more (padding is shorter), zero padding,
// nothing after the last tensor's padding; each name once.
[[nodiscard]] CKPT_INLINE Status gguf_layout(FsRef fs, FileHandle file, const std::string& path, std::uint64_t file_size,
                                             std::uint64_t alignment, std::uint64_t data_offset,
                                             std::vector<GgufTensorInfo>& tensors, std::vector<Problem>& problems) {
  std::vector<unsigned char> block;
  for (auto& t : tensors) {
    const std::string subject = "tensor " + gguf_name(t.name);
    t.offset_overflows = !checked_add(data_offset, t.offset, t.absolute);
    if (t.offset_overflows) t.absolute = UINT64_MAX;
    if (t.offset % alignment != 0)
      problems.push_back(structure_problem(Code::corrupt, "layout", path, t.name, -1, t.absolute, t.bytes, ProblemMessage::at_offset,
                                           subject + " offset", "a multiple of the alignment " + std::to_string(alignment),
                                           "data offset " + std::to_string(t.offset) + " (" + std::to_string(t.offset % alignment) +
                                               " past a multiple)"));
    // An empty tensor too: it holds no byte, but a piece past the end of the file is no place (a sidecar refuses it).
    if (t.offset_overflows || !range_within(t.absolute, t.bytes, file_size))
      problems.push_back(structure_problem(Code::incomplete, "layout", path, t.name, -1, t.absolute, t.bytes, ProblemMessage::at_offset,
                                           subject + " data",
                                           std::to_string(t.bytes) + " bytes at data offset " + std::to_string(t.offset) +
                                               " within the file of " + std::to_string(file_size) + " bytes",
                                           t.offset_overflows ? std::string("an offset past 2^64")
                                                              : "the file ends at " + std::to_string(file_size) + " (a truncated copy?)"));
  }
  std::vector<const GgufTensorInfo*> by_name;
  for (const auto& t : tensors) by_name.push_back(&t);
  std::stable_sort(by_name.begin(), by_name.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i - 1]->name)
      problems.push_back(structure_problem(Code::corrupt, "layout", path, by_name[i]->name, -1, by_name[i]->info_offset, 0,
                                           ProblemMessage::at_offset, "tensor " + gguf_name(by_name[i]->name), "each tensor name once",
                                           "a second tensor info of that name (the first at offset " +
                                               std::to_string(by_name[i - 1]->info_offset) + ")"));

  // The walk by data offset; empty tensors take no bytes and are left out of it.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : tensors)
    if (t.bytes > 0 && !t.offset_overflows && t.bytes <= UINT64_MAX - t.absolute) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
  });
  std::uint64_t cursor = 0;  // data offset where the bytes accounted for end
  const GgufTensorInfo* last = nullptr;
  for (const GgufTensorInfo* t : by_offset) {
    const std::string subject = "tensor " + gguf_name(t->name);
    if (t->offset < cursor) {
      problems.push_back(structure_problem(Code::corrupt, "layout", path, t->name, -1, t->absolute, t->bytes, ProblemMessage::at_offset,
                                           subject + " data " + gguf_range(t->absolute, t->bytes),
                                           "to start at or after file offset " + std::to_string(data_offset + cursor) + " where tensor " +
                                               gguf_name(last->name) + " " + gguf_range(last->absolute, last->bytes) + " ends",
                                           "an overlap of " + std::to_string(std::min(cursor, t->offset + t->bytes) - t->offset) + " bytes"));
    } else if (t->offset - cursor >= alignment) {
      problems.push_back(structure_problem(Code::corrupt, "layout", path, t->name, -1, data_offset + cursor, t->offset - cursor,
                                           ProblemMessage::at_offset,
                                           "bytes " + gguf_range(data_offset + cursor, t->offset - cursor) + " before tensor " +
                                               gguf_name(t->name),
                                           "at most " + std::to_string(alignment - 1) + " bytes of padding",
                                           "a hole of " + std::to_string(t->offset - cursor) + " bytes that belong to no tensor"));
    } else if (t->offset > cursor) {
      CKPT_TRY(gguf_check_padding(fs, file, path, file_size, data_offset + cursor, t->absolute, "padding before " + subject, block,
                                  problems));
    }
    if (t->offset + t->bytes > cursor) {  // no overflow: absolute + bytes fits 64 bits
      cursor = t->offset + t->bytes;
      last = t;
    }
  }
  // After the last tensor: its padding, then the end of the file.
  std::uint64_t end = 0;
  if (!checked_add(data_offset, cursor, end) || end > file_size) return Status();
  const std::uint64_t padded = align_up(end, alignment);  // end <= file_size < 2^63
  CKPT_TRY(gguf_check_padding(fs, file, path, file_size, end, padded,
                              last ? "padding after tensor " + gguf_name(last->name) : std::string("padding of the data section"),
                              block, problems));
  if (file_size > padded)
    problems.push_back(structure_problem(Code::corrupt, "layout", path, "", -1, padded, file_size - padded, ProblemMessage::at_offset,
                                         "bytes " + gguf_range(padded, file_size - padded),
                                         "the file to end at " + std::to_string(padded) +
                                             (last ? ", after the last tensor " + gguf_name(last->name) + " and its padding"
                                                   : std::string(", the end of the header and its padding")),
                                         std::to_string(file_size - padded) + " bytes that belong to no tensor"));
  return Status();
}

}  // namespace detail

CKPT_INLINE Result<ForeignCheckpoint> open_gguf(FsRef fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  detail::GgufReader in(fs, opened.file.get(), path, opened.size);

  // Header (spec/FOREIGN.md 5.2). The magic is compared on the bytes there before the file's end is.
  unsigned char magic[4] = {};
  const auto magic_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(4, opened.size));
  CKPT_TRY(read_exact(fs, opened.file.get(), path, magic, magic_bytes, 0));
  if (std::memcmp(magic, gguf::kMagic.data(), magic_bytes) != 0) {
    char found[40];
    std::snprintf(found, sizeof found, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    return in.error(Code::corrupt, 0, "magic",
                    "expected \"GGUF\" (47 47 55 46), found " + std::string(found, 3 * magic_bytes - (magic_bytes ? 1 : 0)));
  }
  CKPT_TRY(in.fixed(magic, 4, "magic"));
  std::uint32_t version = 0;
  CKPT_TRY(in.u32(version, "version"));
  const std::uint32_t swapped = __builtin_bswap32(version);
  if (swapped >= 1 && swapped <= gguf::kMaxVersion)  // how gguf-py tells the byte order: the version's low half is zero
    return in.error(Code::unsupported, 4, "version",
                    "expected a little-endian file, found version " + std::to_string(swapped) +
                        " byte-swapped: a big-endian GGUF file, which ckpt does not read");
  if (version == 1)
    return in.error(Code::unsupported, 4, "version",
                    "expected version 2 or 3, found 1 (GGUF v1, with 32-bit counts, is not read)");
  if (version < gguf::kMinVersion)
    return in.error(Code::corrupt, 4, "version", "expected version 2 or 3, found " + std::to_string(version));
  if (version > gguf::kMaxVersion)
    return in.error(Code::version, 4, "version", "expected version 2 or 3, found " + std::to_string(version));
  std::uint64_t tensor_count = 0, kv_count = 0;
  CKPT_TRY(in.u64(tensor_count, "tensor_count"));
  CKPT_TRY(in.u64(kv_count, "kv_count"));
  if (kv_count > gguf::kMaxKvCount)
    return in.error(Code::corrupt, 16, "kv_count",
                    "expected at most " + std::to_string(gguf::kMaxKvCount) + " (this reader's limit), found " + std::to_string(kv_count));
  if (tensor_count > gguf::kMaxTensorCount)
    return in.error(Code::corrupt, 8, "tensor_count",
                    "expected at most " + std::to_string(gguf::kMaxTensorCount) + " (this reader's limit), found " +
                        std::to_string(tensor_count));
  CKPT_TRY(in.check_count(kv_count, gguf::kMinKvSize, 16, "kv_count"));

  // Key/value pairs (5.5).
  struct Kv {
    std::string key, text;
    std::uint64_t offset;
  };
  std::vector<Kv> kvs;
  kvs.reserve(static_cast<std::size_t>(kv_count));  // at most kMaxKvCount, and kv_count * kMinKvSize bytes follow
  std::uint64_t alignment = gguf::kDefaultAlignment;
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    Kv kv;
    kv.offset = in.position();
    const std::string index = "kv " + std::to_string(i);
    std::uint64_t length = 0;
    CKPT_TRY(in.u64(length, index + " key length"));
    if (length > format::kMaxNameLength)  // docs/gguf.md: a key is at most 65535 bytes
      return in.error(Code::corrupt, kv.offset, index + " key length",
                      "expected at most " + std::to_string(format::kMaxNameLength) + " bytes, found " + std::to_string(length));
    CKPT_TRY(in.check_count(length, 1, kv.offset, index + " key length"));
    CKPT_TRY(in.bytes(length, static_cast<std::size_t>(length), kv.key, index + " key"));
    if (!valid_utf8(kv.key))  // as a tensor name: GGUF strings are UTF-8
      return in.error(Code::corrupt, kv.offset + 8, index + " key", "expected UTF-8 text, found invalid UTF-8");
    const std::string subject = "kv " + detail::gguf_name(kv.key);
    const std::uint64_t type_at = in.position();
    std::uint32_t type = 0;
    CKPT_TRY(in.u32(type, subject + " value type"));
    if (gguf::value_type_name(type) == nullptr)
      return in.error(Code::corrupt, type_at, subject + " value type", "expected a value type 0 to 12, found " + std::to_string(type));
    const bool is_alignment = kv.key == gguf::kAlignmentKey;
    if (is_alignment && type != static_cast<std::uint32_t>(gguf::ValueType::u32))
      return in.error(Code::corrupt, type_at, subject + " value type",
                      "expected u32 (4), found " + std::string(gguf::value_type_name(type)) + " (" + std::to_string(type) + ")");
    const std::uint64_t value_at = in.position();
    std::uint64_t raw = 0;
    CKPT_TRY(detail::gguf_value(in, type, 0, true, subject, kv.text, &raw));
    if (is_alignment) {
      if (raw == 0 || (raw & (raw - 1)) != 0)
        return in.error(Code::corrupt, value_at, subject, "expected a power of two, found " + std::to_string(raw));
      alignment = raw;
    }
    kvs.push_back(std::move(kv));
  }

  // Tensor infos (5.2), then the data section at the next multiple of the alignment.
  CKPT_TRY(in.check_count(tensor_count, gguf::kMinTensorInfoSize, 8, "tensor_count"));
  std::vector<detail::GgufTensorInfo> infos;
  CKPT_TRY(detail::gguf_tensor_infos(in, tensor_count, infos));
  const std::uint64_t infos_end = in.position();
  const std::uint64_t data_offset = align_up(infos_end, alignment);  // infos_end <= 2^30, alignment <= 2^31

  ForeignCheckpoint out;
  out.format = ForeignFormat::gguf;
  out.path = path;
  out.dir = parent_path(path);
  out.primary = path;
  out.files.push_back(ForeignFile{base_name(path), opened.size, true});
  std::vector<unsigned char> block;
  CKPT_TRY(detail::gguf_check_padding(fs, opened.file.get(), path, opened.size, infos_end, data_offset, "padding after the tensor infos", block,
                                      out.problems));
  CKPT_TRY(detail::gguf_layout(fs, opened.file.get(), path, opened.size, alignment, data_offset, infos, out.problems));

  std::stable_sort(kvs.begin(), kvs.end(), [](const Kv& a, const Kv& b) { return a.key < b.key; });
  for (std::size_t i = 0; i < kvs.size(); ++i) {
    if (i > 0 && kvs[i].key == out.metadata.back().first)  // kvs[i - 1] was moved from
      out.problems.push_back(structure_problem(Code::corrupt, "layout", path, "", -1, kvs[i].offset, 0, ProblemMessage::at_offset,
                                               "kv " + detail::gguf_name(kvs[i].key), "each key once",
                                               "a second pair of that key (the first at offset " + std::to_string(kvs[i - 1].offset) + ")"));
    out.metadata.emplace_back(std::move(kvs[i].key), std::move(kvs[i].text));
  }

  std::stable_sort(infos.begin(), infos.end(),
                   [](const detail::GgufTensorInfo& a, const detail::GgufTensorInfo& b) { return a.name < b.name; });
  out.tensors.reserve(infos.size());
  for (auto& t : infos) {
    ForeignTensor ft;
    ft.name = std::move(t.name);
    ft.dtype = std::string(t.type->name);  // the plain types are spelled as ckpt spells them (gguf.hpp)
    ft.shape.assign(t.dims.rbegin(), t.dims.rend());
    ForeignPiece piece;
    piece.file = 0;
    piece.offset = t.absolute;
    piece.length = t.bytes;
    piece.offsets.assign(ft.shape.size(), 0);
    piece.shape = ft.shape;
    ft.pieces.push_back(std::move(piece));
    out.tensors.push_back(std::move(ft));
  }
  std::stable_sort(out.problems.begin(), out.problems.end(),
                   [](const Problem& a, const Problem& b) { return a.offset < b.offset; });
  CKPT_TRY(opened.file.close().with_context(path));
  return out;
}

}  // namespace ckpt
