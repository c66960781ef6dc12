// ckpt: ObjectClient over S3's REST API (spec/OBJECT.md 2): HTTP and SigV4 signing by libcurl, XML by
// pugixml, per-part CRC32 by zlib. Optional at build time (CMake option CKPT_S3, target ckpt::s3) and
// outside the umbrella header: only code that talks to object storage parses it.
//
//   auto loc = parse_s3_url("s3://bucket/run-7");          // bucket "bucket", prefix "run-7/"
//   auto config = S3Config::from_env();                     // AWS_* variables (spec/OBJECT.md 2.6)
//   auto client = S3Client::open(*loc, *config);            // keys below are relative to run-7/
//   client.value()->put("a", data, size, Condition::create_only);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client.hpp"

namespace ckpt::object {

// Where a client's keys live: s3://bucket/prefix. The prefix is empty or ends with '/'.
struct S3Location {
  std::string bucket, prefix;
};

// Whether text starts with "s3://" (a path to give to S3Client rather than to the file system).
[[nodiscard]] bool is_s3_url(std::string_view text) noexcept;
// "s3://bucket", "s3://bucket/", "s3://bucket/a/b" and "s3://bucket/a/b/" (prefix "a/b/"); anything else,
// an empty or malformed bucket name, or an empty path segment, is Code::invalid_argument.
[[nodiscard]] Result<S3Location> parse_s3_url(std::string_view url);

// Endpoint and credentials (spec/OBJECT.md 2.6).
struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:9000" or "https://s3.us-east-1.amazonaws.com", no trailing '/'
  std::string region = "us-east-1";
  std::string access_key_id, secret_access_key, session_token;
  // Path style (endpoint/bucket/key) as S3-compatible servers need; false is virtual-host style
  // (bucket.endpoint/key), which AWS prefers and from_env picks when no endpoint is given.
  bool path_style = true;

  // From AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (else AWS_DEFAULT_REGION,
  // else us-east-1) and AWS_ENDPOINT_URL (else AWS_ENDPOINT_URL_S3, else AWS's regional endpoint).
  // Missing credentials are Code::invalid_argument: ckpt reads no other credential source.
  [[nodiscard]] static Result<S3Config> from_env();
};

// How hard the client tries (spec/OBJECT.md 2.5). Defaults suit AWS; tests shrink the delays.
struct S3Options {
  int max_connections = 16;  // requests in flight at once; more callers wait for a connection
  // Retries of 500/502/503/504, 429, 408 and RequestTimeout, 409 on PutObject, and transport errors:
  int max_attempts = 8;
  std::chrono::milliseconds base_delay{50};  // backoff before attempt n: random in [0, min(max, base * 2^(n-1))]
  std::chrono::milliseconds max_delay{5000};
  std::chrono::milliseconds request_deadline{60000};  // no attempt starts later than this after the first
  std::chrono::milliseconds connect_timeout{10000};
  // A transfer slower than low_speed_bytes per second for low_speed_time fails (and is retried), so
  // a stalled connection cannot hold a rank forever (marin#9209).
  long low_speed_bytes = 1024;
  std::chrono::seconds low_speed_time{30};
  // x-amz-checksum-crc32 on PutObject and UploadPart, verified by the server (spec/OBJECT.md 2.4).
  bool part_checksums = true;
  int list_page_size = 1000;  // max-keys / max-uploads of one LIST page (1..1000)
};

class S3Client final : public ObjectClient {
 public:
  // Checks the options and the endpoint's syntax; sends no request (the store's probe does).
  [[nodiscard]] static Result<std::unique_ptr<S3Client>> open(const S3Location& location, S3Config config,
                                                              S3Options options = {});
  ~S3Client() override;
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  [[nodiscard]] const S3Location& location() const noexcept { return location_; }
  [[nodiscard]] std::string url(const std::string& key) const override;
  [[nodiscard]] Result<ObjectInfo> put(const std::string& key, const void* data, std::size_t size,
                                       Condition condition) override;
  [[nodiscard]] Result<std::size_t> get(const std::string& key, std::uint64_t offset, void* buf, std::size_t size) override;
  [[nodiscard]] Result<ObjectInfo> head(const std::string& key) override;
  [[nodiscard]] Result<std::vector<ObjectInfo>> list(const std::string& prefix) override;
  [[nodiscard]] Status remove(const std::string& key) override;
  [[nodiscard]] Result<std::string> create_upload(const std::string& key) override;
  [[nodiscard]] Result<UploadPart> upload_part(const std::string& key, const std::string& upload_id, int number,
                                               const void* data, std::size_t size) override;
  // The ObjectInfo's size is 0: CompleteMultipartUpload does not say it (the caller knows its parts).
  [[nodiscard]] Result<ObjectInfo> complete_upload(const std::string& key, const std::string& upload_id,
                                                   const std::vector<UploadPart>& parts, Condition condition) override;
  [[nodiscard]] Status abort_upload(const std::string& key, const std::string& upload_id) override;
  [[nodiscard]] Result<std::vector<UploadInfo>> list_uploads(const std::string& prefix) override;

  struct Transport;  // the pool of curl handles and the request loop (impl/s3_client_inl.hpp)

 private:
  S3Client(S3Location location, S3Config config, S3Options options);

  S3Location location_;
  S3Config config_;
  S3Options options_;
  std::unique_ptr<Transport> transport_;
};

// The client an "s3://bucket/prefix" URL names, with endpoint and credentials from the environment
// (S3Config::from_env): what every tool and the Python package open an s3:// path with.
[[nodiscard]] Result<std::unique_ptr<ObjectClient>> open_s3_url(const std::string& url, S3Options options = {});

}  // namespace ckpt::object

#if !CKPT_DECLARATIONS_ONLY
#include "impl/s3_client_inl.hpp"
#endif
