// ckpt: definitions of object/s3_response.hpp (spec/OBJECT.md 2.2, 2.7).
#pragma once

#include <zlib.h>

#include <pugixml.hpp>

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "../s3_response.hpp"

namespace ckpt::object {

namespace s3_detail {

// An element's name without its namespace prefix ("s3:ETag" is "ETag").
inline std::string_view local_name(const pugi::xml_node& node) {
  const std::string_view name = node.name();
  const std::size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

inline pugi::xml_node child(const pugi::xml_node& parent, std::string_view name) {
  for (pugi::xml_node node = parent.first_child(); node; node = node.next_sibling()) {
    if (node.type() == pugi::node_element && local_name(node) == name) return node;
  }
  return {};
}

inline std::string child_text(const pugi::xml_node& parent, std::string_view name) {
  return child(parent, name).text().get();
}

inline std::vector<pugi::xml_node> children(const pugi::xml_node& parent, std::string_view name) {
  std::vector<pugi::xml_node> found;
  for (pugi::xml_node node = parent.first_child(); node; node = node.next_sibling()) {
    if (node.type() == pugi::node_element && local_name(node) == name) found.push_back(node);
  }
  return found;
}

inline std::string strip_quotes(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

// Standard base64 of a CRC32's 4 big-endian bytes, the form of x-amz-checksum-crc32.
inline std::string crc32_base64(std::uint32_t crc) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const std::uint32_t first = crc >> 8;  // the first 3 bytes
  const std::uint32_t last = (crc & 0xffu) << 16;
  std::string out;
  for (int shift = 18; shift >= 0; shift -= 6) out.push_back(alphabet[(first >> shift) & 63]);
  out.push_back(alphabet[(last >> 18) & 63]);
  out.push_back(alphabet[(last >> 12) & 63]);
  out += "==";
  return out;
}

// The error document of a parsed body (parse_s3_error).
inline std::optional<S3Error> error_of(const pugi::xml_document& doc) {
  pugi::xml_node error = doc.document_element();
  if (local_name(error) == "ErrorResponse") error = child(error, "Error");
  if (!error || local_name(error) != "Error") return std::nullopt;
  return S3Error{child_text(error, "Code"), child_text(error, "Message")};
}

// The element that holds an answer's fields: the shallowest one, breadth first from the document
// element down to its grandchildren, with a child named in `fields`. Servers wrap answers differently
// (<X>, <XResult>, <XResponse><XResult>); none of them hides a field deeper.
inline pugi::xml_node holder(const pugi::xml_document& doc, std::initializer_list<std::string_view> fields) {
  std::vector<pugi::xml_node> level{doc.document_element()};
  for (int depth = 0; depth < 3 && !level.empty(); ++depth) {
    std::vector<pugi::xml_node> next;
    for (const pugi::xml_node& node : level) {
      for (std::string_view field : fields) {
        if (child(node, field)) return node;
      }
      for (pugi::xml_node sub = node.first_child(); sub; sub = sub.next_sibling()) {
        if (sub.type() == pugi::node_element) next.push_back(sub);
      }
    }
    level = std::move(next);
  }
  return {};
}

inline std::string field_list(std::initializer_list<std::string_view> fields) {
  std::string out;
  for (std::string_view field : fields) out += (out.empty() ? "<" : ", <") + std::string(field) + ">";
  return out;
}

// Parses a 2xx body into doc and finds the element holding one of fields: an error when the body is
// not XML or is an error document, and when no element holds them unless they are optional (a null node).
inline Result<pugi::xml_node> answer(pugi::xml_document& doc, std::string_view body, std::string_view where,
                                     std::initializer_list<std::string_view> fields, bool optional = false) {
  const std::string prefix = std::string(where) + ": ";
  const pugi::xml_parse_result parsed = doc.load_buffer(body.data(), body.size());
  if (!parsed) {
    return make_error(Code::io, prefix + "the answer is not XML (" + parsed.description() + " at byte " +
                                    std::to_string(parsed.offset) + " of " + std::to_string(body.size()) + ")");
  }
  if (auto error = error_of(doc)) {
    return make_error(Code::io, prefix + "the answer is an error document: " +
                                    (error->code.empty() ? std::string("(no Code)") : error->code) +
                                    (error->message.empty() ? std::string() : ": " + error->message));
  }
  pugi::xml_node node = holder(doc, fields);
  if (!node && !optional) {
    return make_error(Code::io, prefix + "the answer <" + std::string(local_name(doc.document_element())) +
                                    "> holds none of " + field_list(fields));
  }
  return node;
}

// "true" or "false" (S3 writes lower case; any case is taken); an absent element is false.
inline Result<bool> parse_flag(const pugi::xml_node& parent, std::string_view name, std::string_view where) {
  std::string text = child_text(parent, name);
  for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (text.empty() || text == "false") return false;
  if (text == "true") return true;
  return make_error(Code::io, std::string(where) + ": <" + std::string(name) + "> is '" + child_text(parent, name) +
                                  "', expected true or false");
}

inline Result<std::uint64_t> parse_size(const pugi::xml_node& item, std::string_view where, const std::string& key) {
  const std::string text = child_text(item, "Size");
  std::uint64_t value = 0;
  bool valid = !text.empty() && text.size() <= 20;
  for (const char c : text) {
    if (c < '0' || c > '9' || value > (UINT64_MAX - static_cast<std::uint64_t>(c - '0')) / 10) {
      valid = false;
      break;
    }
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!valid) {
    return make_error(Code::io, std::string(where) + ": <Size> of '" + key + "' is '" + text + "', expected a byte count");
  }
  return value;
}

// The 4 bytes of a standard base64 CRC32 ("AAAAAA=="), or false.
inline bool decode_crc32_base64(std::string_view text, unsigned char out[4]) {
  if (text.size() != 8 || text.substr(6) != "==") return false;
  std::uint64_t bits = 0;  // 6 characters: 36 bits, the 32 of the CRC and 4 of padding
  for (std::size_t i = 0; i < 6; ++i) {
    const char c = text[i];
    std::uint64_t v;
    if (c >= 'A' && c <= 'Z') v = static_cast<std::uint64_t>(c - 'A');
    else if (c >= 'a' && c <= 'z') v = static_cast<std::uint64_t>(c - 'a' + 26);
    else if (c >= '0' && c <= '9') v = static_cast<std::uint64_t>(c - '0' + 52);
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else return false;
    bits = (bits << 6) | v;
  }
  if ((bits & 15u) != 0) return false;  // the padding bits are zero
  bits >>= 4;
  for (int i = 3; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(bits & 0xff);
    bits >>= 8;
  }
  return true;
}

}  // namespace s3_detail

CKPT_INLINE std::optional<S3Error> parse_s3_error(std::string_view body) {
  if (body.empty()) return std::nullopt;
  pugi::xml_document doc;
  if (!doc.load_buffer(body.data(), body.size())) return std::nullopt;
  return s3_detail::error_of(doc);
}

CKPT_INLINE Result<S3ObjectPage> parse_list_objects(std::string_view body, std::string_view where) {
  pugi::xml_document doc;
  CKPT_ASSIGN_OR_RETURN(pugi::xml_node root,
                        s3_detail::answer(doc, body, where, {"IsTruncated", "KeyCount", "Contents", "MaxKeys"}));
  S3ObjectPage page;
  for (const pugi::xml_node& item : s3_detail::children(root, "Contents")) {
    ObjectInfo info;
    info.key = s3_detail::child_text(item, "Key");
    if (info.key.empty()) return make_error(Code::io, std::string(where) + ": a <Contents> without <Key>");
    CKPT_ASSIGN_OR_RETURN(info.size, s3_detail::parse_size(item, where, info.key));
    info.etag = s3_detail::strip_quotes(s3_detail::child_text(item, "ETag"));
    page.objects.push_back(std::move(info));
  }
  CKPT_ASSIGN_OR_RETURN(page.truncated, s3_detail::parse_flag(root, "IsTruncated", where));
  page.next_continuation_token = s3_detail::child_text(root, "NextContinuationToken");
  return page;
}

CKPT_INLINE Result<S3UploadPage> parse_list_uploads(std::string_view body, std::string_view where) {
  pugi::xml_document doc;
  CKPT_ASSIGN_OR_RETURN(pugi::xml_node root,
                        s3_detail::answer(doc, body, where, {"IsTruncated", "Upload", "MaxUploads", "UploadIdMarker"}));
  S3UploadPage page;
  for (const pugi::xml_node& item : s3_detail::children(root, "Upload")) {
    UploadInfo info{s3_detail::child_text(item, "Key"), s3_detail::child_text(item, "UploadId")};
    if (info.key.empty() || info.upload_id.empty()) {
      return make_error(Code::io, std::string(where) + ": an <Upload> without <Key> or <UploadId> (key '" + info.key + "')");
    }
    page.uploads.push_back(std::move(info));
  }
  CKPT_ASSIGN_OR_RETURN(page.truncated, s3_detail::parse_flag(root, "IsTruncated", where));
  page.next_key_marker = s3_detail::child_text(root, "NextKeyMarker");
  page.next_upload_id_marker = s3_detail::child_text(root, "NextUploadIdMarker");
  return page;
}

CKPT_INLINE Result<std::string> parse_create_upload(std::string_view body, std::string_view where) {
  pugi::xml_document doc;
  CKPT_ASSIGN_OR_RETURN(pugi::xml_node root, s3_detail::answer(doc, body, where, {"UploadId"}));
  std::string upload_id = s3_detail::child_text(root, "UploadId");
  if (upload_id.empty()) return make_error(Code::io, std::string(where) + ": <UploadId> is empty");
  return upload_id;
}

CKPT_INLINE Result<S3CompletedUpload> parse_complete_upload(std::string_view body, std::string_view where) {
  pugi::xml_document doc;
  // Success is a 2xx that is not an error document (2.2): an answer without these fields is one too.
  CKPT_ASSIGN_OR_RETURN(pugi::xml_node root, s3_detail::answer(doc, body, where, {"ETag", "ChecksumCRC32"}, true));
  S3CompletedUpload completed;
  if (!root) return completed;
  completed.etag = s3_detail::strip_quotes(s3_detail::child_text(root, "ETag"));
  completed.checksum_crc32 = s3_detail::child_text(root, "ChecksumCRC32");
  return completed;
}

CKPT_INLINE std::string composite_crc32(const std::vector<UploadPart>& parts) {
  if (parts.empty()) return {};
  std::vector<unsigned char> crcs(parts.size() * 4);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!s3_detail::decode_crc32_base64(parts[i].checksum, crcs.data() + 4 * i)) return {};
  }
  const auto crc = static_cast<std::uint32_t>(::crc32_z(::crc32_z(0L, Z_NULL, 0), crcs.data(), crcs.size()));
  return s3_detail::crc32_base64(crc) + "-" + std::to_string(parts.size());
}

}  // namespace ckpt::object
