// ckpt: how the S3 client reads a server's answers (spec/OBJECT.md 2.2). An answer succeeded when its
// status is 2xx and its body is not an error document; its fields are read from whichever element holds
// them. Nothing is judged by the name of the document element: S3-compatible servers name it differently
// (moto 5.2.1 answered CompleteMultipartUpload with <CompleteMultipartUploadResponse>, AWS with
// <CompleteMultipartUploadResult>). Functions of a body alone, so tests/test_s3_response.cpp checks them
// against the bodies real servers send (tests/data/s3_responses/) without a server.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client.hpp"

namespace ckpt::object {

// The Code and Message of an error document (either may be empty: the document is still an error).
struct S3Error {
  std::string code, message;
};

// The error document in body: an <Error> document element, or an <Error> inside an <ErrorResponse>
// (the query-protocol form); none for an empty body, a body that is not XML, or any other document.
// Element names are matched without a namespace prefix.
[[nodiscard]] std::optional<S3Error> parse_s3_error(std::string_view body);

// One page of ListObjectsV2. Keys as the server sent them (bucket-relative); ETags without quotes.
struct S3ObjectPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_continuation_token;
};

// One page of ListMultipartUploads.
struct S3UploadPage {
  std::vector<UploadInfo> uploads;  // keys bucket-relative
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};

// What CompleteMultipartUpload's answer says of the object; empty where it says nothing.
struct S3CompletedUpload {
  std::string etag;            // quotes removed
  std::string checksum_crc32;  // as sent: "<base64>-<parts>" (composite) or "<base64>" (full object)
};

// Each parser takes the body of a 2xx answer and `where` ("s3://bucket/key: Operation") for its messages.
// A body that is not XML, is an error document, holds none of the operation's fields, or holds a field
// that does not parse is Code::io naming where, the element and what was found.
[[nodiscard]] Result<S3ObjectPage> parse_list_objects(std::string_view body, std::string_view where);
[[nodiscard]] Result<S3UploadPage> parse_list_uploads(std::string_view body, std::string_view where);
// The UploadId of CreateMultipartUpload's answer.
[[nodiscard]] Result<std::string> parse_create_upload(std::string_view body, std::string_view where);
// Any XML that is not an error document is a success (2.2): the ETag and CRC32 are read where present.
[[nodiscard]] Result<S3CompletedUpload> parse_complete_upload(std::string_view body, std::string_view where);

// The composite CRC32 S3 reports for an object completed from parts that carried CRC32 checksums
// (spec/OBJECT.md 2.4): base64 of the CRC32 of the parts' 4-byte big-endian CRC32s in part order, then
// "-" and the number of parts. Empty when a part has no checksum or one that is not base64 of 4 bytes.
[[nodiscard]] std::string composite_crc32(const std::vector<UploadPart>& parts);

}  // namespace ckpt::object

#if !CKPT_DECLARATIONS_ONLY
#include "impl/s3_response_inl.hpp"
#endif
