// ckpt: definitions for safetensors.hpp.
#pragma once

#include "../safetensors.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "../../core/coding.hpp"
#include "../../io/atomic_file.hpp"
#include "../../shard/shard_writer.hpp"
#include "../../store/sharded.hpp"

namespace ckpt {

namespace detail {

// Thrown from the parser callback to stop at the first error; never escapes parse_safetensors_json.
struct SafetensorsAbort {};

CKPT_INLINE std::string escape_controls(std::string_view s) {
  std::string out;
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
  return out;
}

// A name as it appears in a one-line message: quoted, control characters escaped, the rest as is.
[[nodiscard]] CKPT_INLINE std::string printable(std::string_view s) { return "'" + escape_controls(s) + "'"; }

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

// Walks an index as the parser produces it: weight_map pairs go straight to the result (and never into
// the DOM); metadata.total_size is read; every other entry is dropped once parsed.
class SafetensorsIndexParser {
 public:
  explicit SafetensorsIndexParser(const std::string& path) : path_(path) {}

  [[nodiscard]] bool on_event(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    const bool in_map = depth >= 2 && section_ == "weight_map";
    const bool known = section_ == "weight_map" || section_ == "metadata";
    switch (event) {
      case E::object_start:
      case E::array_start: {
        const char* found = event == E::object_start ? "an object" : "an array";
        if (depth == 0 && event == E::array_start) fail("index must be a JSON object, found an array");
        if (depth == 1 && known && event == E::array_start) fail(section_ + ": expected an object, found an array");
        if (in_map) fail("weight_map tensor " + printable(field_) + ": expected a file name (a string), found " + found);
        return true;
      }
      case E::key:
        if (depth == 1) {
          section_ = parsed.get<std::string>();
          if (!sections_.insert(section_).second) fail("key " + printable(section_) + " appears twice in the index");
          if (section_ == "weight_map") has_weight_map_ = true;
        } else if (depth == 2) {
          field_ = parsed.get<std::string>();
        }
        return true;
      case E::value:
        if (depth == 0) fail("index must be a JSON object, found " + describe_json(parsed));
        if (depth == 1 && known) fail(section_ + ": expected an object, found " + describe_json(parsed));
        if (in_map) {
          if (!parsed.is_string())
            fail("weight_map tensor " + printable(field_) + ": expected a file name (a string), found " + describe_json(parsed));
          index_.weight_map.emplace_back(field_, std::move(parsed.get_ref<std::string&>()));
          return false;
        }
        if (depth == 2 && section_ == "metadata" && field_ == "total_size") {
          std::uint64_t n = 0;
          if (json_u64(parsed, n)) index_.total_size = n;
        }
        return true;
      case E::array_end:
        return true;
      case E::object_end:
        return depth != 1;  // a top-level entry is done with: drop it from the DOM
    }
    return true;
  }

  // Each tensor once, each file a plain name in the index's directory.
  [[nodiscard]] Status finish() {
    if (!has_weight_map_) return error("no \"weight_map\": expected {\"metadata\": {...}, \"weight_map\": {tensor: file}}");
    auto& map = index_.weight_map;
    std::sort(map.begin(), map.end());
    for (std::size_t i = 1; i < map.size(); ++i)
      if (map[i - 1].first == map[i].first)
        return error("weight_map tensor " + printable(map[i].first) + ": key appears twice (files " + printable(map[i - 1].second) +
                     " and " + printable(map[i].second) + ")");
    for (const auto& [tensor, file] : map) {
      // Never a path outside the index's directory: no '/', so neither absolute nor "sub/../..".
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos || file.find('\0') != std::string::npos)
        return error("weight_map tensor " + printable(tensor) + ": file " + printable(file) +
                     " is not a file name in the index's directory: expected a name without '/', not '.' or '..'");
      index_.files.push_back(file);
    }
    std::sort(index_.files.begin(), index_.files.end());
    index_.files.erase(std::unique(index_.files.begin(), index_.files.end()), index_.files.end());
    return Status();
  }

  [[nodiscard]] SafetensorsIndex& index() noexcept { return index_; }
  [[nodiscard]] const Status& failure() const noexcept { return failure_; }
  [[nodiscard]] Status error(const std::string& message) const { return make_error(Code::corrupt, path_ + ": " + message); }

 private:
  [[noreturn]] void fail(const std::string& message) {
    failure_ = error(message);
    throw SafetensorsAbort{};
  }

  const std::string& path_;
  SafetensorsIndex index_;
  Status failure_;
  std::unordered_set<std::string> sections_;  // top-level keys, for duplicates
  std::string section_, field_;
  bool has_weight_map_ = false;
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

namespace detail {

// Feeds JSON text to a parser's on_event, entry by entry (the DOM is only a scratch area: the callback
// takes each entry and drops it). Errors name the file offset: `base` is that of the text's first byte.
template <class Parser>
[[nodiscard]] Status parse_json_events(std::string_view json, Parser& parser, std::uint64_t base, const char* what) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore whatever follows it.
  const std::size_t nul = json.find('\0');
  if (nul != std::string_view::npos)
    return parser.error("offset " + std::to_string(base + nul) + ": " + what +
                        " is not valid JSON: expected JSON text or space padding, found a NUL byte");
  try {
    const nlohmann::json rest = nlohmann::json::parse(
        json.begin(), json.end(),
        [&parser](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          return parser.on_event(depth, event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
    (void)rest;
  } catch (const SafetensorsAbort&) {
    return parser.failure();
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based within the text.
    const std::uint64_t at = base + (e.byte > 0 ? e.byte - 1 : 0);
    std::string message = e.what();
    const auto cut = message.find("] ");
    if (cut != std::string::npos) message = message.substr(cut + 2);
    return parser.error("offset " + std::to_string(at) + ": " + what + " is not valid JSON: " + message);
  } catch (const nlohmann::json::exception& e) {
    return parser.error("offset " + std::to_string(base) + ": " + what + " rejected by the JSON parser: " + std::string(e.what()));
  }
  return Status();
}

}  // namespace detail

CKPT_INLINE Result<SafetensorsHeader> parse_safetensors_json(std::string_view json, std::uint64_t data_size,
                                                        const std::string& path) {
  detail::SafetensorsHeaderParser parser(path, data_size);
  parser.header().header_length = json.size();
  parser.header().data_offset = safetensors::kLengthFieldSize + json.size();
  CKPT_TRY(detail::parse_json_events(json, parser, safetensors::kLengthFieldSize, "header"));
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
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  return parse_safetensors_header(fs, opened.file.get(), opened.size, path);
}

CKPT_INLINE bool is_safetensors_index(std::string_view path) noexcept {
  const std::string_view suffix = safetensors::kIndexSuffix;
  const std::string_view name = path.substr(path.find_last_of('/') == std::string_view::npos ? 0 : path.find_last_of('/') + 1);
  if (name.size() <= suffix.size()) return false;
  const std::string_view tail = name.substr(name.size() - suffix.size());
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(tail[i])) != suffix[i]) return false;
  return true;
}

CKPT_INLINE Result<SafetensorsIndex> parse_safetensors_index_json(std::string_view json, const std::string& path) {
  detail::SafetensorsIndexParser parser(path);
  CKPT_TRY(detail::parse_json_events(json, parser, 0, "index"));
  CKPT_TRY(parser.finish());
  return std::move(parser.index());
}

CKPT_INLINE Result<SafetensorsIndex> parse_safetensors_index(FsRef fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  if (opened.size > safetensors::kMaxIndexLength)
    return make_error(Code::corrupt, path + ": index is " + std::to_string(opened.size) + " bytes, over the limit of " +
                                         std::to_string(safetensors::kMaxIndexLength));
  std::string text(static_cast<std::size_t>(opened.size), '\0');
  CKPT_TRY(read_exact(fs, opened.file.get(), path, text.data(), text.size(), 0));
  return parse_safetensors_index_json(text, path);
}

CKPT_INLINE Result<std::string> find_safetensors_index(FsRef fs, const std::string& dir) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.list_dir(dir));
  std::vector<std::string> found;
  for (const auto& name : names)
    if (is_safetensors_index(name)) found.push_back(name);
  std::sort(found.begin(), found.end());
  if (found.empty())
    return make_error(Code::not_found, dir + ": holds no *" + std::string(safetensors::kIndexSuffix) + " (the index of a sharded set)");
  if (found.size() > 1) {
    std::string list;
    for (const auto& name : found) list += (list.empty() ? "" : ", ") + detail::printable(name);
    return make_error(Code::invalid_argument, dir + ": holds " + std::to_string(found.size()) + " indexes (" + list + "): name one");
  }
  return join_path(dir, found.front());
}

CKPT_INLINE Result<std::uint64_t> parse_shard_size(std::string_view text) {
  const auto refuse = [&] {
    return make_error(Code::invalid_argument, "shard size " + detail::printable(text) +
                                                  ": expected a positive byte count, alone or with a unit KB, MB, GB, TB "
                                                  "(powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)");
  };
  std::size_t i = 0;
  std::uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - digit) / 10) return refuse();
    n = n * 10 + digit;
  }
  if (i == 0) return refuse();
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  static const std::pair<const char*, std::uint64_t> kUnits[] = {
      {"", 1},  {"b", 1}, {"kb", 1000}, {"mb", 1000'000}, {"gb", 1000'000'000}, {"tb", 1000'000'000'000},
      {"kib", std::uint64_t{1} << 10}, {"mib", std::uint64_t{1} << 20}, {"gib", std::uint64_t{1} << 30}, {"tib", std::uint64_t{1} << 40}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    if (n == 0 || n > UINT64_MAX / scale) return refuse();
    return n * scale;
  }
  return refuse();
}

namespace detail {

// One safetensors file of an input, open (it stays open until converted), its header validated.
struct SafetensorsInput {
  std::string path;
  ScopedFile file;
  SafetensorsHeader header;
};

[[nodiscard]] CKPT_INLINE Result<SafetensorsInput> open_safetensors_file(FsRef fs, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  SafetensorsInput input{path, std::move(opened.file), {}};
  CKPT_ASSIGN_OR_RETURN(input.header, parse_safetensors_header(fs, input.file.get(), opened.size, path));
  return input;
}

// The files of `in`: itself, or every file of the set its index names (`in` is the index or a
// directory holding one), checked against the weight_map before anything is converted.
[[nodiscard]] CKPT_INLINE Result<std::vector<SafetensorsInput>> open_safetensors_input(FsRef fs, const std::string& in,
                                                                                  std::vector<std::string>& warnings) {
  std::vector<SafetensorsInput> inputs;
  auto info = fs.stat(in);
  const bool is_dir = info.ok() && info->is_dir;
  if (!is_dir && !is_safetensors_index(in)) {
    CKPT_ASSIGN_OR_RETURN(SafetensorsInput input, open_safetensors_file(fs, in));
    inputs.push_back(std::move(input));
    return inputs;
  }
  std::string index_path = in;
  if (is_dir) {
    CKPT_ASSIGN_OR_RETURN(index_path, find_safetensors_index(fs, in));
  }
  CKPT_ASSIGN_OR_RETURN(const SafetensorsIndex index, parse_safetensors_index(fs, index_path));
  const std::string dir = parent_path(index_path);
  inputs.reserve(index.files.size());  // holder views names inside these headers
  // Which file holds each tensor, from the headers; a tensor in two files is refused (spec/SHARDING.md 6.5).
  std::unordered_map<std::string_view, std::size_t> holder;
  for (const auto& name : index.files) {
    auto opened = open_safetensors_file(fs, join_path(dir, name));
    if (!opened.ok()) return opened.status().with_context(index_path + ": file " + printable(name) + " of the weight_map");
    inputs.push_back(std::move(*opened));
    const SafetensorsInput& input = inputs.back();
    for (const auto& t : input.header.tensors) {
      const auto [it, added] = holder.emplace(t.name, inputs.size() - 1);
      if (!added)
        return make_error(Code::corrupt, index_path + ": tensor " + printable(t.name) + " is in two files of the set, " +
                                             inputs[it->second].path + " and " + input.path);
    }
  }
  // The weight_map and the files agree exactly: each tensor where it says, and nothing it does not name.
  std::unordered_map<std::string_view, std::string_view> map(index.weight_map.begin(), index.weight_map.end());
  for (const auto& [tensor, file] : index.weight_map) {
    const auto it = holder.find(tensor);
    if (it == holder.end())
      return make_error(Code::corrupt, index_path + ": weight_map puts tensor " + printable(tensor) + " in " +
                                           join_path(dir, file) + ", which does not hold it");
  }
  std::uint64_t data_bytes = 0;
  for (const auto& input : inputs) {
    data_bytes += input.header.data_size;
    for (const auto& t : input.header.tensors) {
      const auto it = map.find(t.name);
      if (it == map.end())
        return make_error(Code::corrupt, input.path + ": holds tensor " + printable(t.name) + ", which the weight_map of " +
                                             index_path + " does not name");
      if (join_path(dir, std::string(it->second)) != input.path)
        return make_error(Code::corrupt, index_path + ": weight_map puts tensor " + printable(t.name) + " in " +
                                             join_path(dir, std::string(it->second)) + ", but it is in " + input.path);
    }
  }
  // Hugging Face writes total_size and reads nothing from it: a wrong one is reported, not refused.
  if (index.total_size && *index.total_size != data_bytes)
    warnings.push_back(index_path + ": metadata total_size is " + std::to_string(*index.total_size) + ", the files hold " +
                       std::to_string(data_bytes) + " bytes of tensor data");
  return inputs;
}

}  // namespace detail

CKPT_INLINE Result<ConvertSummary> safetensors_to_ckpt(FsRef fs, const std::string& in, const std::string& out,
                                           const ConvertOptions& options) {
  CKPT_TRY(detail::check_output(fs, out, options.overwrite));
  ConvertSummary summary;
  CKPT_ASSIGN_OR_RETURN(std::vector<detail::SafetensorsInput> inputs, detail::open_safetensors_input(fs, in, summary.warnings));
  // __metadata__ of every file; a set's files carry the same (save_pretrained writes it to each).
  std::map<std::string, std::pair<std::string, const std::string*>> metadata;  // key -> value, file
  std::uint64_t largest = 0, data_size = 0;
  for (const auto& input : inputs) {
    for (const auto& [key, value] : input.header.metadata) {
      const auto [it, added] = metadata.emplace(key, std::make_pair(value, &input.path));
      if (!added && it->second.first != value)
        return make_error(Code::conflict, "__metadata__ key " + detail::printable(key) + " differs between " +
                                              *it->second.second + " and " + input.path);
    }
    for (const auto& t : input.header.tensors) largest = std::max(largest, t.end - t.begin);
    data_size += input.header.data_size;
  }

  WriterOptions writer_options;
  writer_options.alignment_log2 = options.alignment_log2;
  writer_options.chunk_size_log2 = options.chunk_size_log2;
  auto created = ShardWriter::create(fs, out, writer_options);
  if (!created.ok()) return created.status();
  ShardWriter& writer = *created;

  const auto block_size = static_cast<std::size_t>(std::min<std::uint64_t>(detail::block_bytes(options), std::max<std::uint64_t>(largest, 1)));
  std::vector<unsigned char> block;
  if (!options.use_mmap || !fs.can_map()) block.resize(block_size);
  std::uint64_t done = 0;
  // File by file, each in data-offset order: every input is read front to back, once.
  for (const auto& input : inputs) {
    const std::string& path = input.path;
    const SafetensorsHeader& header = input.header;
    const FileHandle file = input.file.get();
    for (const auto& t : header.tensors) {
      Status s = writer.begin_piece(t.name, t.dtype, t.shape, Shape(t.shape.size(), 0), t.shape);
      if (!s.ok()) return s.with_context(path + ": tensor " + detail::printable(t.name));
      for (std::uint64_t at = t.begin; at < t.end;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(block_size, t.end - at));
        bool mapped = false;
        {
          if (options.use_mmap && fs.can_map()) {
            auto mapping = fs.map(file, header.data_offset + at, n);
            if (!mapping.ok()) return mapping.status().with_context(path);
            CKPT_TRY(writer.write(mapping->data(), n));
            mapped = true;
          }
        }
        if (!mapped) {
          CKPT_TRY(read_exact(fs, file, path, block.data(), n, header.data_offset + at));
          CKPT_TRY(writer.write(block.data(), n));
        }
        at += n;
        done += n;
        if (options.progress) options.progress(done, data_size);
      }
      CKPT_TRY(writer.end_piece());
    }
    summary.tensors += header.tensors.size();
    summary.files.push_back(path);
  }
  for (const auto& [key, value] : metadata) {
    Status s = writer.set_metadata(key, Value(value.first));
    if (!s.ok()) return s.with_context(*value.second + ": __metadata__ key " + detail::printable(key));
  }
  auto finished = writer.finish();
  if (!finished.ok()) return finished.status();
  summary.output = out;
  summary.data_bytes = data_size;
  summary.metadata = metadata.size();
  summary.output_size = finished->file_size;
  return summary;
}

namespace detail {

// A training state with nothing but its step: exported as ckpt.step alone (spec/SHARDING.md 6.4).
[[nodiscard]] CKPT_INLINE bool only_step(const TrainingState& state) {
  TrainingState bare;
  bare.step = state.step;
  return state == bare;
}

// What of a state a safetensors export leaves out without --stringify-metadata, for its warning.
[[nodiscard]] CKPT_INLINE std::string state_contents(const TrainingState& state) {
  std::string parts;
  const auto add = [&parts](const std::string& part) { parts += (parts.empty() ? "" : ", ") + part; };
  if (!state.rng.empty()) add(std::to_string(state.rng.size()) + " RNG bytes");
  if (!(state.data == DataPosition{})) add("the data position");
  if (!state.optimizer_tensors.empty()) add(std::to_string(state.optimizer_tensors.size()) + " optimizer tensor names");
  if (!state.values.empty()) add(std::to_string(state.values.size()) + " values");
  return parts;
}

// The first tensor of each file: one file, or for a set a new one whenever the next tensor would take
// the current file past max_bytes of data, a larger tensor alone in its file (save_pretrained's split).
[[nodiscard]] CKPT_INLINE std::vector<std::size_t> plan_files(const std::vector<TensorInfo>& tensors, bool sharded,
                                                         std::uint64_t max_bytes) {
  std::vector<std::size_t> starts{0};
  std::uint64_t in_file = 0;
  for (std::size_t i = 0; sharded && i < tensors.size(); ++i) {
    const std::uint64_t bytes = tensors[i].bytes;
    if (i > 0 && bytes > max_bytes - in_file) {  // in_file <= max_bytes: no overflow
      starts.push_back(i);
      in_file = 0;
    }
    in_file = bytes > max_bytes ? max_bytes : in_file + bytes;  // an oversized tensor fills its file
  }
  return starts;
}

// Writes tensors [first, last) of `source` as one safetensors file, committed atomically and durably
// (temporary name, fsync, rename, directory fsync); returns its size. `metadata` is the JSON text of
// the __metadata__ entry, or empty.
[[nodiscard]] CKPT_INLINE Result<std::uint64_t> write_safetensors_file(FsRef fs, Checkpoint& source, std::size_t first, std::size_t last,
                                                                  const std::string& metadata, const std::string& path,
                                                                  const std::string& where, const ConvertOptions& options,
                                                                  std::uint64_t& done, std::uint64_t total) {
  const auto& tensors = source.tensors();
  // Header: __metadata__ first, then the tensors in the order their data follows (reference layout).
  std::string json = "{" + metadata;
  std::uint64_t data_size = 0;
  for (std::size_t i = first; i < last; ++i) {
    const TensorInfo& t = tensors[i];
    if (json.size() > 1) json += ",";
    json += json_string(t.name) + ":{\"dtype\":\"" + std::string(format::dtype_info(t.dtype)->name) + "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(data_size) + "," + std::to_string(data_size + t.bytes) + "]}";
    data_size += t.bytes;
  }
  json += "}";
  // Pad with spaces so the data buffer starts 8-byte aligned, as the reference writer does.
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > safetensors::kMaxHeaderLength)
    return make_error(Code::unsupported, where + ": safetensors header of " + path + " would be " + std::to_string(json.size()) +
                                             " bytes, over the " + std::to_string(safetensors::kMaxHeaderLength) +
                                             "-byte limit of safetensors readers");

  auto created = AtomicFile::create(fs, path, kCopyWindow);
  if (!created.ok()) return created.status();
  AtomicFile& file = *created;
  unsigned char length_field[safetensors::kLengthFieldSize];
  put_u64(length_field, json.size());
  CKPT_TRY(file.write(length_field, sizeof length_field));
  CKPT_TRY(file.write(json.data(), json.size()));

  // Each tensor whole, row-major, in blocks of at most block_size bytes gathered from every piece
  // (of every shard) that overlaps them; each read verifies the chunks it touches (spec/SHARDING.md 5.2).
  // On any error `file` is dropped uncommitted: its temporary name is removed, `path` never appears.
  std::vector<unsigned char> block;
  for (std::size_t i = first; i < last; ++i) {
    const TensorInfo& t = tensors[i];
    const Slice whole{Shape(t.shape.size(), 0), t.shape};
    CKPT_TRY(copy_slice(source, t, whole, block_bytes(options), block, file, [&](std::uint64_t bytes) {
      done += bytes;
      if (options.progress) options.progress(done, total);
    }));
  }
  CKPT_TRY(file.commit());
  return file.size();
}

}  // namespace detail

CKPT_INLINE Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, const std::string& in, const std::string& out,
                                           const ConvertOptions& options) {
  if (is_safetensors_index(out) && options.max_shard_size == 0)
    return make_error(Code::invalid_argument, out + ": max_shard_size 0: expected at least one byte per file");
  CKPT_TRY(detail::check_output(fs, out, options.overwrite));  // before the input is opened: refused at once
  // One reader for a file, a step directory and a store (spec/SHARDING.md 6, 6.4): no second copy here.
  StepSelector selector;
  selector.step = options.step;
  CKPT_ASSIGN_OR_RETURN(Checkpoint source, Checkpoint::open(fs, in, selector));
  return ckpt_to_safetensors(fs, source, out, options);
}

CKPT_INLINE Result<ConvertSummary> ckpt_to_safetensors(FsRef fs, Checkpoint& source, const std::string& out,
                                                     const ConvertOptions& options) {
  const bool sharded = is_safetensors_index(out);
  const std::string dir = parent_path(out);
  const std::string prefix = base_name(out).substr(0, base_name(out).size() - (sharded ? safetensors::kIndexSuffix.size() : 0));
  if (sharded && options.max_shard_size == 0)
    return make_error(Code::invalid_argument, out + ": max_shard_size 0: expected at least one byte per file");
  CKPT_TRY(detail::check_output(fs, out, options.overwrite));
  const std::string where = source.kind() == Checkpoint::Kind::step ? source.description() : source.path();
  ConvertSummary summary;
  summary.output = out;

  // __metadata__ (spec/SHARDING.md 6.4): the shard metadata, then the training state, a step's (its
  // manifest) or a file's (its kTrainingStateKey entry) alike: its step number as text under kStepKey,
  // and the rest, when there is any, in the 6.3 encoding only when stringified, else left out with a warning.
  CKPT_ASSIGN_OR_RETURN(std::vector<MetaEntry> entries, source.metadata(ConflictPolicy::error));
  if (const std::optional<TrainingState>& state = source.state()) {
    for (const auto& m : entries)
      if (m.key == safetensors::kStepKey)
        return make_error(Code::conflict, where + ": metadata " + detail::printable(m.key) +
                                              " is the key the step number is exported under; rename it or export a merged file");
    entries.push_back(MetaEntry{std::string(safetensors::kStepKey), Value(std::to_string(state->step))});
    if (detail::only_step(*state)) {
      // Nothing else to carry: no ckpt.training_state, so a file converted from safetensors exports as it came.
    } else if (options.stringify_metadata) {
      entries.push_back(MetaEntry{std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(*state)})});
    } else {
      summary.warnings.push_back("training state of step " + std::to_string(state->step) + " (" + detail::state_contents(*state) +
                                 ") not exported: safetensors holds weights; stringify metadata to write it as " +
                                 detail::printable(kTrainingStateKey) + " in hex");
    }
  }
  // safetensors __metadata__ maps strings to strings; anything else is refused or, on request, text.
  std::string metadata;
  for (const auto& m : entries) {
    if (!m.value.is_string()) {
      const char* type = value_type_name(m.value.type());
      if (!options.stringify_metadata)
        return make_error(Code::unsupported, where + ": metadata " + detail::printable(m.key) + " is " + type +
                                                 "; safetensors __metadata__ holds only strings (stringify it to convert to text)");
      summary.warnings.push_back("metadata " + detail::printable(m.key) + " (" + type + ") written as text" +
                                 (m.value.is_bytes() ? " in hex" : ""));
    }
    metadata += (metadata.empty() ? "" : ",") + detail::json_string(m.key) + ":" + detail::json_string(detail::metadata_text(m.value));
  }
  if (!metadata.empty()) metadata = "\"__metadata__\":{" + metadata + "}";
  const auto& tensors = source.tensors();
  std::uint64_t data_size = 0;
  for (const auto& t : tensors) {
    if (t.name == safetensors::kMetadataKey)
      return make_error(Code::unsupported, where + ": tensor '__metadata__' cannot be named in safetensors, where the key is reserved");
    data_size += t.bytes;
  }

  // The files, PREFIX-00001-of-0000N.safetensors for a set (save_pretrained's names), or `out` alone.
  std::vector<std::size_t> starts = detail::plan_files(tensors, sharded, options.max_shard_size);
  starts.push_back(tensors.size());
  const std::size_t file_count = starts.size() - 1;
  std::vector<std::string> names;
  for (std::size_t k = 0; k < file_count; ++k) {
    char numbers[64];  // two 20-digit counts and the suffix fit
    std::snprintf(numbers, sizeof numbers, "-%05zu-of-%05zu.safetensors", k + 1, file_count);
    names.push_back(sharded ? prefix + numbers : base_name(out));
  }
  if (sharded) {
    auto info = fs.stat(dir);
    if (!info.ok() && info.status().code() == Code::not_found) {
      CKPT_TRY(fs.mkdir(dir).with_context("cannot create " + dir));
      CKPT_TRY(fs.sync_dir(parent_path(dir)).with_context(dir));  // the new directory is durable before files go in
    } else if (!info.ok() || !info->is_dir) {
      return info.ok() ? make_error(Code::invalid_argument, dir + ": not a directory") : info.status();
    }
    for (const auto& name : names) CKPT_TRY(detail::check_output(fs, join_path(dir, name), options.overwrite));
    // Replacing a set: its old index goes first, so no index ever names a mix of old and new files.
    if (options.overwrite && fs.stat(out).ok()) {
      CKPT_TRY(fs.unlink(out).with_context("cannot remove the old index"));
      CKPT_TRY(fs.sync_dir(dir).with_context(out));
    }
  }

  std::uint64_t done = 0;
  const auto write_all = [&]() -> Status {
    for (std::size_t k = 0; k < file_count; ++k) {
      const std::string path = sharded ? join_path(dir, names[k]) : out;
      CKPT_ASSIGN_OR_RETURN(const std::uint64_t size, detail::write_safetensors_file(fs, source, starts[k], starts[k + 1], metadata,
                                                                                     path, where, options, done, data_size));
      summary.files.push_back(path);
      summary.output_size += size;
    }
    if (!sharded) return Status();
    // The index last: a crash before it leaves files that no index names, never an index naming missing files.
    nlohmann::json index;
    index["metadata"]["total_size"] = data_size;  // tensor data bytes, as Hugging Face counts them
    nlohmann::json& weight_map = index["weight_map"] = nlohmann::json::object();
    for (std::size_t k = 0; k < file_count; ++k)
      for (std::size_t i = starts[k]; i < starts[k + 1]; ++i) weight_map[tensors[i].name] = names[k];
    // save_pretrained's layout: json.dumps(index, indent=2, sort_keys=True) + "\n" (ASCII, sorted keys).
    const std::string text = index.dump(2, ' ', true, nlohmann::json::error_handler_t::replace) + "\n";
    CKPT_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(fs, out, detail::kCopyWindow));
    CKPT_TRY(file.write(text.data(), text.size()));
    CKPT_TRY(file.commit());
    summary.files.push_back(out);
    summary.output_size += text.size();
    return Status();
  };
  if (Status s = write_all(); !s.ok()) {
    // A set that failed part-way: remove the files it completed; with no index they are no set.
    for (const auto& path : summary.files) fs.unlink(path).ignore_error();  // best effort: the error below is what counts
    return s;
  }
  summary.tensors = tensors.size();
  summary.data_bytes = data_size;
  summary.metadata = entries.size();
  return summary;
}

}  // namespace ckpt
