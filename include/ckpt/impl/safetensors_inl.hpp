// ckpt: definitions for safetensors.hpp.
#pragma once

#include "../safetensors.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "../coding.hpp"
#include "../io/atomic_file.hpp"
#include "../shard_writer.hpp"
#include "../sharded.hpp"

namespace ckpt {

namespace detail {

// Thrown from the parser callback to stop at the first error; never escapes parse_safetensors_json.
struct SafetensorsAbort {};

// A name as it appears in a one-line message: control characters escaped, the rest as is.
[[nodiscard]] CKPT_INLINE std::string printable(std::string_view s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// "a string \"F4\"", "a negative integer -3": the found half of an error message.
[[nodiscard]] CKPT_INLINE std::string describe_json(const nlohmann::json& j) {
  std::string kind;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return j.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::string: kind = "a string "; break;
    case nlohmann::json::value_t::number_unsigned: kind = "an integer "; break;
    case nlohmann::json::value_t::number_integer: kind = "an integer "; break;
    case nlohmann::json::value_t::number_float: kind = "a non-integer number "; break;
    case nlohmann::json::value_t::array: kind = "an array "; break;
    case nlohmann::json::value_t::object: kind = "an object "; break;
    default: return j.type_name();
  }
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 60) + "...";
  std::string out;
  for (const char ch : text) out += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  return kind + out;
}

// Reads a JSON number as a non-negative integer; false for negatives, fractions and anything else.
[[nodiscard]] CKPT_INLINE bool json_u64(const nlohmann::json& j, std::uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<std::uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(j.get<std::int64_t>());
    return true;
  }
  return false;
}

[[nodiscard]] CKPT_INLINE std::string dtype_names() {
  std::string s;
  for (const auto& d : format::kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// Walks the header as the parser produces it: each top-level entry is validated and then dropped
// from the DOM, so memory stays proportional to one entry plus the result.
class SafetensorsHeaderParser {
 public:
  SafetensorsHeaderParser(const std::string& path, std::uint64_t data_size) : path_(path) {
    header_.data_size = data_size;
  }

  [[nodiscard]] bool on_event(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
        if (depth == 1) entry_keys_.clear();
        if (depth >= 2) fail(where() + ": expected " + expectation() + ", found an object");
        return true;
      case E::array_start:
        if (depth == 0) fail("offset 8: header must be a JSON object, found an array");
        if (depth == 1) fail(entry_name() + ": expected an object, found an array");
        if (depth == 2 && current_ == safetensors::kMetadataKey) fail(where() + ": expected a string, found an array");
        if (depth >= 3) fail(where() + ": expected an integer, found a nested array");
        array_items_ = 0;
        return true;
      case E::key:
        if (depth == 1) {
          current_ = parsed.get<std::string>();
          if (!seen_.insert(current_).second) fail(entry_name() + ": key appears twice in the header");
        } else if (depth == 2) {
          field_ = parsed.get<std::string>();
          // __metadata__ pairs go straight to the result (and never into the DOM): duplicates are found
          // there once sorted, so a 100 MiB object of short pairs is not held three times (issue 9).
          if (current_ == safetensors::kMetadataKey) return false;
          if (!entry_keys_.insert(field_).second) fail(where() + ": key appears twice");
        }
        return true;
      case E::value:
        if (depth == 0) fail("offset 8: header must be a JSON object, found " + describe_json(parsed));
        if (depth == 1) fail(entry_name() + ": expected an object, found " + describe_json(parsed));
        if (depth == 2 && current_ == safetensors::kMetadataKey) {
          if (!parsed.is_string()) fail(where() + ": expected a string value, found " + describe_json(parsed));
          header_.metadata.emplace_back(field_, std::move(parsed.get_ref<std::string&>()));
          return false;
        }
        // A shape longer than the rank limit is refused before it is stored (spec 8 decoder limits).
        if (depth == 3 && ++array_items_ > format::kMaxRank)
          fail(where() + ": expected at most " + std::to_string(format::kMaxRank) + " elements, found more");
        return true;
      case E::array_end:
        return true;
      case E::object_end:
        if (depth != 1) return true;
        if (current_ != safetensors::kMetadataKey) take_tensor(parsed);  // metadata was taken pair by pair
        return false;  // validated and copied: drop it from the DOM
    }
    return true;
  }

  // Sorts by data offset and checks that the tensors tile the data buffer exactly (no overlap, no hole).
  [[nodiscard]] Status finish() {
    auto& metadata = header_.metadata;
    std::sort(metadata.begin(), metadata.end());
    for (std::size_t i = 1; i < metadata.size(); ++i)
      if (metadata[i - 1].first == metadata[i].first)
        return error("__metadata__ key " + printable(metadata[i].first) + ": key appears twice");
    auto& tensors = header_.tensors;
    std::sort(tensors.begin(), tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
      if (a.begin != b.begin) return a.begin < b.begin;
      if (a.end != b.end) return a.end < b.end;
      return a.name < b.name;
    });
    std::uint64_t cursor = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const auto& t : tensors) {
      if (t.begin < cursor)
        return error("tensor " + printable(t.name) + ": data_offsets [" + std::to_string(t.begin) + ", " +
                     std::to_string(t.end) + "] overlap tensor " + printable(previous->name) + " [" +
                     std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "]; expected to start at " +
                     std::to_string(cursor));
      if (t.begin > cursor)
        return error("data buffer bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) + ") (file offset " +
                     std::to_string(header_.data_offset + cursor) + ") belong to no tensor: hole before tensor " +
                     printable(t.name) + ", expected it to start at " + std::to_string(cursor));
      cursor = t.end;
      previous = &t;
    }
    if (cursor != header_.data_size)
      return error("file offset " + std::to_string(header_.data_offset + cursor) + ": tensors end at data offset " +
                   std::to_string(cursor) + " but the data buffer is " + std::to_string(header_.data_size) + " bytes: " +
                   std::to_string(header_.data_size - cursor) + " trailing bytes belong to no tensor");
    return Status();
  }

  [[nodiscard]] SafetensorsHeader& header() noexcept { return header_; }
  [[nodiscard]] const Status& failure() const noexcept { return failure_; }
  [[nodiscard]] Status error(const std::string& message) const {
    return make_error(Code::corrupt, path_ + ": " + message);
  }

 private:
  [[noreturn]] void fail(const std::string& message) {
    failure_ = error(message);
    throw SafetensorsAbort{};
  }
  [[nodiscard]] std::string entry_name() const {
    return current_ == safetensors::kMetadataKey ? std::string("__metadata__") : "tensor " + printable(current_);
  }
  [[nodiscard]] std::string where() const {
    return current_ == safetensors::kMetadataKey ? "__metadata__ key " + printable(field_)
                                                 : "tensor " + printable(current_) + " field " + printable(field_);
  }
  [[nodiscard]] std::string expectation() const {
    if (current_ == safetensors::kMetadataKey || field_ == "dtype") return "a string";
    if (field_ == "shape") return "an array of non-negative integers";
    if (field_ == "data_offsets") return "an array of two non-negative integers";
    return "only the fields dtype, shape, data_offsets";
  }


  void take_tensor(const nlohmann::json& object) {
    const std::string name = "tensor " + printable(current_);
    for (auto it = object.begin(); it != object.end(); ++it)
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
        fail(name + ": unknown field " + printable(it.key()) + ", expected only dtype, shape, data_offsets");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (object.find(field) == object.end()) fail(name + ": missing field '" + field + "'");
    SafetensorsTensor t;
    t.name = current_;

    const auto& dtype = object.at("dtype");
    const format::DTypeInfo* info = dtype.is_string() ? format::dtype_by_name(dtype.get<std::string>()) : nullptr;
    if (info == nullptr) fail(name + ": dtype expected one of " + dtype_names() + ", found " + describe_json(dtype));
    t.dtype = info->dtype;

    const auto& shape = object.at("shape");
    if (!shape.is_array()) fail(name + ": shape expected an array of non-negative integers, found " + describe_json(shape));
    for (std::size_t d = 0; d < shape.size(); ++d) {
      std::uint64_t extent = 0;
      if (!json_u64(shape[d], extent))
        fail(name + ": shape[" + std::to_string(d) + "] expected a non-negative integer, found " + describe_json(shape[d]));
      t.shape.push_back(extent);
    }
    std::uint64_t bytes = 0;
    if (!shape_bytes(t.shape, t.dtype, bytes))
      fail(name + ": shape " + shape_string(t.shape) + " of " + std::string(info->name) + " overflows 64 bits of bytes");

    const auto& offsets = object.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !json_u64(offsets[0], t.begin) || !json_u64(offsets[1], t.end))
      fail(name + ": data_offsets expected [begin, end] as two non-negative integers, found " + describe_json(offsets));
    if (t.end < t.begin)
      fail(name + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] end before they begin");
    if (t.end > header_.data_size)
      fail(name + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           "] expected within the data buffer of " + std::to_string(header_.data_size) + " bytes (file offset " +
           std::to_string(header_.data_offset) + " to end of file)");
    if (t.end - t.begin != bytes)
      fail(name + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " +
           std::to_string(t.end - t.begin) + " bytes, expected " + std::to_string(bytes) + " for " +
           std::string(info->name) + " " + shape_string(t.shape));
    header_.tensors.push_back(std::move(t));
  }

  const std::string& path_;
  SafetensorsHeader header_;
  Status failure_;
  std::unordered_set<std::string> seen_;        // top-level keys, for duplicates
  std::unordered_set<std::string> entry_keys_;  // keys of the current entry, for duplicates
  std::string current_, field_;
  std::uint64_t array_items_ = 0;
};

// Refuses to replace an existing output unless asked to, and never replaces a directory.
[[nodiscard]] CKPT_INLINE Status check_output(FsRef fs, const std::string& out, bool overwrite) {
  auto info = fs.stat(out);
  if (!info.ok()) return info.status().code() == Code::not_found ? Status() : info.status();
  if (info->is_dir) return make_error(Code::conflict, out + ": output is a directory");
  if (!overwrite) return make_error(Code::conflict, out + ": output already exists");
  return Status();
}

// Text form of a metadata value safetensors cannot hold (its __metadata__ is string to string).
[[nodiscard]] CKPT_INLINE std::string metadata_text(const Value& v) {
  switch (v.type()) {
    case format::ValueType::int64: return std::to_string(v.as_int());
    case format::ValueType::float64: {
      // Shortest of %.15g..%.17g that reads back to the same double.
      char buf[40];
      for (int precision = 15; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v.as_float());
        if (std::strtod(buf, nullptr) == v.as_float() || std::isnan(v.as_float())) break;
      }
      return buf;
    }
    case format::ValueType::boolean: return v.as_bool() ? "true" : "false";
    case format::ValueType::string: return v.as_string();
    case format::ValueType::bytes: {
      static const char digits[] = "0123456789abcdef";
      std::string s;
      for (const char ch : v.as_bytes()) {
        s += digits[static_cast<unsigned char>(ch) >> 4];
        s += digits[static_cast<unsigned char>(ch) & 15];
      }
      return s;
    }
  }
  return std::string();
}

[[nodiscard]] CKPT_INLINE std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Unit of hashing and writing: small enough to stay in cache between the hash and the copy to the kernel.
inline constexpr std::size_t kCopyWindow = std::size_t{256} << 10;

[[nodiscard]] CKPT_INLINE std::size_t block_bytes(const ConvertOptions& options) {
  return std::max<std::size_t>(options.block_size, 4096);
}

}  // namespace detail

CKPT_INLINE Result<SafetensorsHeader> parse_safetensors_json(std::string_view json, std::uint64_t data_size,
                                                        const std::string& path) {
  detail::SafetensorsHeaderParser parser(path, data_size);
  parser.header().header_length = json.size();
  parser.header().data_offset = safetensors::kLengthFieldSize + json.size();
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore whatever follows it.
  const std::size_t nul = json.find('\0');
  if (nul != std::string_view::npos)
    return parser.error("offset " + std::to_string(safetensors::kLengthFieldSize + nul) +
                        ": header is not valid JSON: expected JSON text or space padding, found a NUL byte");
  try {
    // The DOM is only a scratch area: the callback takes each entry and drops it.
    const nlohmann::json rest = nlohmann::json::parse(
        json.begin(), json.end(),
        [&parser](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          return parser.on_event(depth, event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
    (void)rest;
  } catch (const detail::SafetensorsAbort&) {
    return parser.failure();
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based within the header text; the header starts after the 8-byte length field.
    const std::uint64_t at = safetensors::kLengthFieldSize + (e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    const auto cut = what.find("] ");
    if (cut != std::string::npos) what = what.substr(cut + 2);
    return parser.error("offset " + std::to_string(at) + ": header is not valid JSON: " + what);
  } catch (const nlohmann::json::exception& e) {
    return parser.error("offset 8: header rejected by the JSON parser: " + std::string(e.what()));
  }
  CKPT_TRY(parser.finish());
  return std::move(parser.header());
}

CKPT_INLINE Result<SafetensorsHeader> parse_safetensors_header(FsRef fs, FileHandle file, std::uint64_t file_size,
                                                   const std::string& path) {
  using safetensors::kLengthFieldSize;
  if (file_size < kLengthFieldSize)
    return make_error(Code::corrupt, path + ": file is " + std::to_string(file_size) +
                                         " bytes, expected at least 8 (the header length field)");
  unsigned char length_field[kLengthFieldSize];
  CKPT_TRY(read_exact(fs, file, path, length_field, sizeof length_field, 0));
  const std::uint64_t length = get_u64(length_field);
  if (length < 2)
    return make_error(Code::corrupt, path + ": offset 0: header length " + std::to_string(length) +
                                         ", expected at least 2 (the smallest header is \"{}\")");
  if (length > safetensors::kMaxHeaderLength)
    return make_error(Code::corrupt, path + ": offset 0: header length " + std::to_string(length) +
                                         " exceeds the limit of " + std::to_string(safetensors::kMaxHeaderLength) + " bytes");
  if (length > file_size - kLengthFieldSize)
    return make_error(Code::corrupt, path + ": offset 0: header length " + std::to_string(length) + " exceeds the " +
                                         std::to_string(file_size - kLengthFieldSize) +
                                         " bytes after the length field (truncated file?)");
  std::string text(static_cast<std::size_t>(length), '\0');
  CKPT_TRY(read_exact(fs, file, path, text.data(), text.size(), kLengthFieldSize));
  return parse_safetensors_json(text, file_size - kLengthFieldSize - length, path);
}

CKPT_INLINE Result<SafetensorsHeader> parse_safetensors_header(FsRef fs, const std::string& path) {
  auto opened = fs.open(path, OpenMode::read);
  if (!opened.ok()) return opened.status();
  ScopedFile file(fs, *opened);
  auto size = fs.file_size(file.get());
  if (!size.ok()) return size.status().with_context(path);
  return parse_safetensors_header(fs, file.get(), *size, path);
}

CKPT_INLINE Result<ConvertSummary> safetensors_to_ckpt(FsRef fs, const std::string& in, const std::string& out,
                                           const ConvertOptions& options) {
  CKPT_TRY(detail::check_output(fs, out, options.overwrite));
  auto opened = fs.open(in, OpenMode::read);
  if (!opened.ok()) return opened.status();
  ScopedFile file(fs, *opened);
  auto size = fs.file_size(file.get());
  if (!size.ok()) return size.status().with_context(in);
  auto parsed = parse_safetensors_header(fs, file.get(), *size, in);
  if (!parsed.ok()) return parsed.status();
  const SafetensorsHeader& header = *parsed;

  WriterOptions writer_options;
  writer_options.alignment_log2 = options.alignment_log2;
  writer_options.chunk_size_log2 = options.chunk_size_log2;
  auto created = ShardWriter::create(fs, out, writer_options);
  if (!created.ok()) return created.status();
  ShardWriter& writer = *created;

  std::uint64_t largest = 0;
  for (const auto& t : header.tensors) largest = std::max(largest, t.end - t.begin);
  const auto block_size = static_cast<std::size_t>(std::min<std::uint64_t>(detail::block_bytes(options), std::max<std::uint64_t>(largest, 1)));
  std::vector<unsigned char> block;
  if (!options.use_mmap || !fs.can_map()) block.resize(block_size);
  std::uint64_t done = 0;
  // Data-offset order: the input is read front to back, once.
  for (const auto& t : header.tensors) {
    Status s = writer.begin_piece(t.name, t.dtype, t.shape, Shape(t.shape.size(), 0), t.shape);
    if (!s.ok()) return s.with_context(in + ": tensor " + detail::printable(t.name));
    for (std::uint64_t at = t.begin; at < t.end;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(block_size, t.end - at));
      bool mapped = false;
      {
        if (options.use_mmap && fs.can_map()) {
          auto mapping = fs.map(file.get(), header.data_offset + at, n);
          if (!mapping.ok()) return mapping.status().with_context(in);
          CKPT_TRY(writer.write(mapping->data(), n));
          mapped = true;
        }
      }
      if (!mapped) {
        CKPT_TRY(read_exact(fs, file.get(), in, block.data(), n, header.data_offset + at));
        CKPT_TRY(writer.write(block.data(), n));
      }
      at += n;
      done += n;
      if (options.progress) options.progress(done, header.data_size);
    }
    CKPT_TRY(writer.end_piece());
  }
  for (const auto& [key, value] : header.metadata) {
    Status s = writer.set_metadata(key, Value(value));
    if (!s.ok()) return s.with_context(in + ": __metadata__ key " + detail::printable(key));
  }
  auto finished = writer.finish();
  if (!finished.ok()) return finished.status();
  ConvertSummary summary;
  summary.output = out;
  summary.tensors = header.tensors.size();
  summary.data_bytes = header.data_size;
  summary.metadata = header.metadata.size();
  summary.output_size = finished->file_size;
  return summary;
}

CKPT_INLINE Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, const std::string& in, const std::string& out,
                                           const ConvertOptions& options) {
  CKPT_TRY(detail::check_output(fs, out, options.overwrite));
  // One reader for a file, a step directory and a store (spec/SHARDING.md 6, 6.4): no second copy here.
  StepSelector selector;
  selector.step = options.step;
  CKPT_ASSIGN_OR_RETURN(Checkpoint source, Checkpoint::open(fs, in, selector));
  const bool is_step = source.kind() == Checkpoint::Kind::step;
  const std::string where = is_step ? source.description() : in;
  ConvertSummary summary;
  summary.output = out;

  // __metadata__ (spec/SHARDING.md 6.4): the shard metadata, then the training state. A file's state
  // is its kTrainingStateKey entry, bytes like any other; a step's is in its manifest, so its step
  // number is written as text under kStepKey and the rest (RNG, data position, values) only when stringified.
  CKPT_ASSIGN_OR_RETURN(std::vector<MetaEntry> entries, source.metadata(ConflictPolicy::error));
  if (is_step) {
    for (const auto& m : entries)
      if (m.key == safetensors::kStepKey)
        return make_error(Code::conflict, where + ": metadata " + detail::printable(m.key) +
                                              " is the key the step number is exported under; rename it or export a merged file");
    entries.push_back(MetaEntry{std::string(safetensors::kStepKey), Value(std::to_string(*source.step()))});
    if (source.state() && options.stringify_metadata)
      entries.push_back(MetaEntry{std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(*source.state())})});
  } else if (source.state()) {
    entries.push_back(MetaEntry{std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(*source.state())})});
  }
  // safetensors __metadata__ maps strings to strings; anything else is refused or, on request, text.
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const auto& m : entries) {
    if (!m.value.is_string()) {
      const char* type = value_type_name(m.value.type());
      if (!options.stringify_metadata)
        return make_error(Code::unsupported, where + ": metadata " + detail::printable(m.key) + " is " + type +
                                                 "; safetensors __metadata__ holds only strings (stringify it to convert to text)");
      summary.warnings.push_back("metadata " + detail::printable(m.key) + " (" + type + ") written as text" +
                                 (m.value.is_bytes() ? " in hex" : ""));
    }
    metadata.emplace_back(m.key, detail::metadata_text(m.value));
  }

  // Header: __metadata__ first, then the tensors in the order their data follows (reference layout).
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i)
      json += (i ? "," : "") + detail::json_string(metadata[i].first) + ":" + detail::json_string(metadata[i].second);
    json += "}";
  }
  std::uint64_t data_size = 0;
  for (const auto& t : source.tensors()) {
    if (t.name == safetensors::kMetadataKey)
      return make_error(Code::unsupported, where + ": tensor '__metadata__' cannot be named in safetensors, where the key is reserved");
    if (json.size() > 1) json += ",";
    json += detail::json_string(t.name) + ":{\"dtype\":\"" + std::string(format::dtype_info(t.dtype)->name) + "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(data_size) + "," + std::to_string(data_size + t.bytes) + "]}";
    data_size += t.bytes;
  }
  json += "}";
  // Pad with spaces so the data buffer starts 8-byte aligned, as the reference writer does.
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > safetensors::kMaxHeaderLength)
    return make_error(Code::unsupported, where + ": safetensors header would be " + std::to_string(json.size()) +
                                             " bytes, over the " + std::to_string(safetensors::kMaxHeaderLength) +
                                             "-byte limit of safetensors readers");

  auto created = AtomicFile::create(fs, out, detail::kCopyWindow);
  if (!created.ok()) return created.status();
  AtomicFile& file = *created;
  unsigned char length_field[safetensors::kLengthFieldSize];
  put_u64(length_field, json.size());
  CKPT_TRY(file.write(length_field, sizeof length_field));
  CKPT_TRY(file.write(json.data(), json.size()));

  // Each tensor whole, row-major, in blocks of at most block_size bytes gathered from every piece
  // (of every shard) that overlaps them; each read verifies the chunks it touches (spec/SHARDING.md 5.2).
  // On any error `file` is dropped uncommitted: its temporary name is removed, `out` never appears.
  std::vector<unsigned char> block;
  std::uint64_t done = 0;
  for (const auto& t : source.tensors()) {
    const Slice whole{Shape(t.shape.size(), 0), t.shape};
    CKPT_TRY(detail::copy_slice(source, t, whole, detail::block_bytes(options), block, file, [&](std::uint64_t bytes) {
      done += bytes;
      if (options.progress) options.progress(done, data_size);
    }));
  }
  CKPT_TRY(file.commit());
  summary.tensors = source.tensors().size();
  summary.data_bytes = data_size;
  summary.metadata = metadata.size();
  summary.output_size = file.size();
  return summary;
}

}  // namespace ckpt
