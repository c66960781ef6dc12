// ckpt: what an object store offers (spec/OBJECT.md 2), as an interface: S3Client speaks it over HTTP
// (object/s3_client.hpp), MemoryObjects keeps it in memory with faults for tests (testing/memory_objects.hpp).
//
// Only the primitives the object-store protocol needs: whole-object PUT (optionally create-only),
// ranged GET, HEAD, LIST of a prefix, DELETE, and multipart uploads that are completed or aborted
// explicitly. No rename, append or overwrite is ever asked for. Keys are relative to the client's root
// (bucket and prefix); every method is safe to call from several threads at once.
//
// Errors (Status codes, spec/OBJECT.md 2.3): a missing key is Code::not_found; a create-only write whose
// key exists (HTTP 412) is Code::conflict; everything else that fails after the client's retries is
// Code::io, with a message naming the URL, the operation, the HTTP status and the server's error code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../core/error.hpp"

namespace ckpt::object {

// Whether a write may replace an object: create_only sends `If-None-Match: *` (spec/OBJECT.md 2.2).
enum class Condition : std::uint8_t { none, create_only };

struct ObjectInfo {
  std::string key;  // relative to the client's root
  std::uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes removed
};

// One uploaded part of a multipart upload (numbers 1..10000, spec/OBJECT.md 2.4).
struct UploadPart {
  int number = 0;
  std::string etag;
  std::string checksum;  // the per-part checksum the server verified, as sent (base64), when the client sends one
};

struct UploadInfo {
  std::string key, upload_id;
};

class ObjectClient {
 public:
  virtual ~ObjectClient() = default;
  // The key as a user would name it, for messages: "s3://bucket/prefix/key".
  [[nodiscard]] virtual std::string url(const std::string& key) const = 0;
  [[nodiscard]] virtual Result<ObjectInfo> put(const std::string& key, const void* data, std::size_t size,
                                               Condition condition) = 0;
  // Up to `size` bytes at `offset`; fewer only where the object ends (0 at or past its end).
  [[nodiscard]] virtual Result<std::size_t> get(const std::string& key, std::uint64_t offset, void* buf, std::size_t size) = 0;
  [[nodiscard]] virtual Result<ObjectInfo> head(const std::string& key) = 0;
  // Every object whose key starts with prefix, in key order, all pages.
  [[nodiscard]] virtual Result<std::vector<ObjectInfo>> list(const std::string& prefix) = 0;
  // Deleting a key that does not exist succeeds (S3's DELETE is idempotent).
  [[nodiscard]] virtual Status remove(const std::string& key) = 0;
  // Multipart uploads: the object appears only at complete_upload; abort_upload discards the parts.
  [[nodiscard]] virtual Result<std::string> create_upload(const std::string& key) = 0;
  [[nodiscard]] virtual Result<UploadPart> upload_part(const std::string& key, const std::string& upload_id, int number,
                                                       const void* data, std::size_t size) = 0;
  [[nodiscard]] virtual Result<ObjectInfo> complete_upload(const std::string& key, const std::string& upload_id,
                                                           const std::vector<UploadPart>& parts, Condition condition) = 0;
  [[nodiscard]] virtual Status abort_upload(const std::string& key, const std::string& upload_id) = 0;
  // Uploads begun and neither completed nor aborted, under prefix.
  [[nodiscard]] virtual Result<std::vector<UploadInfo>> list_uploads(const std::string& prefix) = 0;
};

// Opens the client an "s3://bucket/prefix" URL names (open_s3_url in a build with the S3 client): how the
// report functions and the tools reach object stores. Empty where the build has no client: such a URL is
// then Code::unsupported.
// Whether a path names a store on object storage ("s3://bucket/prefix") rather than a file or directory.
[[nodiscard]] inline bool is_object_url(const std::string& path) noexcept { return path.rfind("s3://", 0) == 0; }

using ObjectOpener = std::function<Result<std::unique_ptr<ObjectClient>>(const std::string& url)>;

// How ObjectFs uploads and reads (spec/OBJECT.md 3); here so that a store's options name it without ObjectFs.
struct ObjectFsOptions {
  // Multipart part size (spec/OBJECT.md 3.2): S3 allows 5 MiB..5 GiB and at most 10,000 parts, so 8 MiB
  // parts bound an object at 78 GiB; a larger shard needs a larger part size.
  std::size_t part_size = std::size_t{8} << 20;
  // Parts uploading at once across every file of this Fs (memory: parallel_parts x part_size), and
  // ranged GETs in flight for one read or one file's read-ahead (memory: parallel_parts x part_size per
  // file read in order; once read, up to parallel_parts of those buffers stay with the Fs for the next).
  std::size_t parallel_parts = 8;
  // Fetch ahead when a file is read in order (spec/OBJECT.md 3.1); false: every read is its own GETs.
  bool read_ahead = true;
};

}  // namespace ckpt::object
