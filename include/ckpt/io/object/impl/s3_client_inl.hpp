// ckpt: definitions of object/s3_client.hpp (spec/OBJECT.md 2).
#pragma once

#include <curl/curl.h>
#include <zlib.h>

#include <pugixml.hpp>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "../s3_client.hpp"
#include "../s3_response.hpp"

namespace ckpt::object {

namespace s3_detail {

// An error body beyond this is dropped: the Code and Message come first (spec/OBJECT.md 2.3).
constexpr std::size_t kErrorBodyLimit = 64 * 1024;
// A LIST page of 1000 keys is a few hundred KiB; anything past this is not a page we asked for.
constexpr std::size_t kXmlBodyLimit = 16 * 1024 * 1024;

// RFC 3986 unreserved characters stay, everything else is %XX; '/' stays in a path (SigV4 encodes an
// S3 path once, segment by segment).
inline std::string uri_encode(std::string_view text, bool keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// x-amz-checksum-crc32 of a body: zlib's standard CRC-32, as base64 of its 4 big-endian bytes.
inline std::string crc32_base64(const void* data, std::size_t size) {
  return crc32_base64(static_cast<std::uint32_t>(::crc32_z(::crc32_z(0L, Z_NULL, 0), static_cast<const Bytef*>(data), size)));
}

inline std::string trim(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\r' || text[end - 1] == '\n')) --end;
  return std::string(text.substr(begin, end - begin));
}

// curl_global_init is not thread-safe on every build: once per process, never cleaned up (other
// clients may live until exit).
inline CURLcode global_init() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = ::curl_global_init(CURL_GLOBAL_DEFAULT); });
  return result;
}

// One request as the client builds it; the transport signs, sends and retries it.
struct Request {
  const char* operation = "";  // "PutObject", for messages
  const char* method = "GET";
  std::string key;    // relative to the client's root; url() names it in messages
  bool bucket_level = false;  // the bucket itself (LIST), not root + key
  std::string query;  // sorted by name, each "name=value" encoded (curl 7.88 signs the query as given)
  std::vector<std::string> headers;
  const void* body = nullptr;
  std::size_t body_size = 0;
  void* out = nullptr;  // GET: the caller's buffer, never written past out_capacity
  std::size_t out_capacity = 0;
  bool want_xml = false;  // an answer is expected in a 2xx body (LIST, Create, Complete): kept up to kXmlBodyLimit
  bool retry_conflict = false;  // 409 ConditionalRequestConflict is retryable on PutObject (spec 2.5)
};

// A LIST of the bucket: answered in XML, its query built by the caller.
[[nodiscard]] inline Request bucket_list(const char* operation) {
  Request request;
  request.operation = operation;
  request.bucket_level = true;
  request.want_xml = true;
  return request;
}

struct Response {
  long http_status = 0;
  std::string body;  // the XML of a want_xml request, or any other body but a GET's (capped, spec 2.2)
  std::size_t out_size = 0;
  std::string etag, checksum_crc32, content_range;
  std::uint64_t content_length = 0;
  bool has_content_length = false;
  bool overflow = false;  // the server sent more than asked (GET) or a body past the limit
  std::optional<S3Error> error;  // the body is an error document, whatever the status (spec 2.2)
};

struct Transfer {
  const Request* request = nullptr;
  Response* response = nullptr;
};

inline std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  Response& response = *transfer->response;
  const std::string_view line(data, size * count);
  if (line.size() >= 5 && line.substr(0, 5) == "HTTP/") {
    // A new status line (after 100 Continue, or a retried connection): forget the previous headers.
    const std::size_t space = line.find(' ');
    response.http_status = space == std::string_view::npos ? 0 : std::strtol(std::string(line.substr(space + 1, 3)).c_str(), nullptr, 10);
    response.etag.clear();
    response.checksum_crc32.clear();
    response.content_range.clear();
    response.has_content_length = false;
    return size * count;
  }
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * count;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string value = trim(line.substr(colon + 1));
  if (name == "etag") response.etag = strip_quotes(value);
  else if (name == "x-amz-checksum-crc32") response.checksum_crc32 = value;
  else if (name == "content-range") response.content_range = value;
  else if (name == "content-length") {
    response.content_length = std::strtoull(value.c_str(), nullptr, 10);
    response.has_content_length = true;
  }
  return size * count;
}

inline std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const Request& request = *transfer->request;
  Response& response = *transfer->response;
  const std::size_t n = size * count;
  const bool success = response.http_status >= 200 && response.http_status < 300;
  if (!success || (request.out == nullptr && !request.want_xml)) {
    // Error bodies, and the bodies of 2xx answers that should have none (a 200 can carry an <Error>,
    // spec 2.2), are kept up to the limit and the rest is read and dropped (spec 2.3).
    if (response.body.size() < kErrorBodyLimit) response.body.append(data, std::min(n, kErrorBodyLimit - response.body.size()));
    return n;
  }
  if (request.out != nullptr) {
    // Into the caller's buffer, never past it: a server sending more than asked fails the request.
    if (n > request.out_capacity - response.out_size) {
      response.overflow = true;
      return 0;
    }
    std::memcpy(static_cast<char*>(request.out) + response.out_size, data, n);
    response.out_size += n;
    return n;
  }
  if (n > kXmlBodyLimit - response.body.size()) {
    response.overflow = true;
    return 0;
  }
  response.body.append(data, n);
  return n;
}

// S3 codes that mean "try again" (spec 2.5), whatever the HTTP status they came with.
inline bool retryable_code(const std::string& code) {
  return code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable" || code == "RequestTimeout" ||
         code == "RequestTimeTooSkewed" || code == "OperationAborted";
}

// Transport errors that no retry can fix: the request itself or the configuration is wrong.
inline bool permanent_transport_error(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_LOGIN_DENIED:
    case CURLE_UNKNOWN_OPTION:
      return true;
    default:
      return false;
  }
}

}  // namespace s3_detail

// The pool of easy handles: each keeps its own connection cache, so a handle given back keeps its
// connection alive for the next request (spec 2.5); at most max_connections exist.
struct S3Client::Transport {
  std::mutex mutex;
  std::condition_variable available;
  std::vector<CURL*> idle;
  int created = 0;
  int limit = 16;

  ~Transport() {
    for (CURL* handle : idle) ::curl_easy_cleanup(handle);
  }

  [[nodiscard]] CURL* acquire() {
    std::unique_lock<std::mutex> lock(mutex);
    available.wait(lock, [&] { return !idle.empty() || created < limit; });
    if (!idle.empty()) {
      CURL* handle = idle.back();
      idle.pop_back();
      return handle;
    }
    CURL* handle = ::curl_easy_init();
    if (handle != nullptr) ++created;
    return handle;
  }

  void release(CURL* handle) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      idle.push_back(handle);
    }
    available.notify_one();
  }
};

// --- URLs and configuration -------------------------------------------------------------------

CKPT_INLINE bool is_s3_url(std::string_view text) noexcept { return text.substr(0, 5) == "s3://"; }

CKPT_INLINE Result<S3Location> parse_s3_url(std::string_view url) {
  const std::string quoted = "'" + std::string(url) + "'";
  if (!is_s3_url(url)) return make_error(Code::invalid_argument, quoted + ": not an s3:// URL (expected s3://bucket/prefix)");
  const std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  S3Location location;
  location.bucket = std::string(rest.substr(0, slash));
  // S3 bucket names: 3-63 characters of lowercase letters, digits, '.' and '-' (path-style safe).
  if (location.bucket.size() < 3 || location.bucket.size() > 63) {
    return make_error(Code::invalid_argument, quoted + ": bucket name '" + location.bucket + "' must have 3 to 63 characters");
  }
  for (const char c : location.bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) {
      return make_error(Code::invalid_argument,
                        quoted + ": bucket name '" + location.bucket + "' may hold only lowercase letters, digits, '.' and '-'");
    }
  }
  if (slash == std::string_view::npos) return location;
  std::string prefix(rest.substr(slash + 1));
  if (prefix.empty()) return location;
  if (prefix.back() != '/') prefix.push_back('/');
  // An empty segment ("a//b") is almost always a typo, and "." or ".." would name a different
  // object on servers that normalize paths.
  std::size_t begin = 0;
  while (begin < prefix.size()) {
    const std::size_t end = prefix.find('/', begin);
    const std::string_view segment(prefix.data() + begin, end - begin);
    if (segment.empty() || segment == "." || segment == "..") {
      return make_error(Code::invalid_argument, quoted + ": the prefix has an empty, '.' or '..' path segment");
    }
    begin = end + 1;
  }
  for (const char c : prefix) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return make_error(Code::invalid_argument, quoted + ": the prefix holds a control character");
    }
  }
  location.prefix = std::move(prefix);
  return location;
}

CKPT_INLINE Result<S3Config> S3Config::from_env() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? std::string(value) : std::string();
  };
  S3Config config;
  config.access_key_id = env("AWS_ACCESS_KEY_ID");
  config.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  config.session_token = env("AWS_SESSION_TOKEN");
  if (config.access_key_id.empty() || config.secret_access_key.empty()) {
    return make_error(Code::invalid_argument,
                      "S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set "
                      "(ckpt reads no other credential source, spec/OBJECT.md 2.6)");
  }
  config.region = env("AWS_REGION");
  if (config.region.empty()) config.region = env("AWS_DEFAULT_REGION");
  if (config.region.empty()) config.region = "us-east-1";
  config.endpoint = env("AWS_ENDPOINT_URL");
  if (config.endpoint.empty()) config.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (config.endpoint.empty()) {
    config.endpoint = "https://s3." + config.region + ".amazonaws.com";
    config.path_style = false;  // AWS: virtual-host style (path style is deprecated there)
  }
  while (!config.endpoint.empty() && config.endpoint.back() == '/') config.endpoint.pop_back();
  return config;
}

// --- The client ---------------------------------------------------------------------------------

CKPT_INLINE S3Client::S3Client(S3Location location, S3Config config, S3Options options)
    : location_(std::move(location)), config_(std::move(config)), options_(options), transport_(new Transport) {
  transport_->limit = options_.max_connections;
}

CKPT_INLINE S3Client::~S3Client() = default;

CKPT_INLINE Result<std::unique_ptr<S3Client>> S3Client::open(const S3Location& location, S3Config config, S3Options options) {
  const std::string where = "s3://" + location.bucket + "/" + location.prefix;
  if (location.bucket.empty()) return make_error(Code::invalid_argument, where + ": no bucket");
  if (!location.prefix.empty() && location.prefix.back() != '/') {
    return make_error(Code::invalid_argument, where + ": the prefix must end with '/' (parse_s3_url adds it)");
  }
  while (!config.endpoint.empty() && config.endpoint.back() == '/') config.endpoint.pop_back();
  if (config.endpoint.rfind("http://", 0) != 0 && config.endpoint.rfind("https://", 0) != 0) {
    return make_error(Code::invalid_argument, where + ": endpoint '" + config.endpoint + "' must start with http:// or https://");
  }
  if (config.region.empty()) return make_error(Code::invalid_argument, where + ": no region");
  if (options.max_connections < 1 || options.max_attempts < 1 || options.list_page_size < 1 ||
      options.list_page_size > 1000 || options.base_delay.count() < 0 || options.max_delay < options.base_delay) {
    return make_error(Code::invalid_argument,
                      where + ": S3Options need max_connections >= 1, max_attempts >= 1, list_page_size in 1..1000 "
                              "and 0 <= base_delay <= max_delay");
  }
  if (s3_detail::global_init() != CURLE_OK) return make_error(Code::io, where + ": curl_global_init failed");
  // The SigV4 scope string ends up in a curl option: no ':' may hide in the region.
  if (config.region.find(':') != std::string::npos) return make_error(Code::invalid_argument, where + ": bad region");
  return std::unique_ptr<S3Client>(new S3Client(location, std::move(config), options));
}

CKPT_INLINE std::string S3Client::url(const std::string& key) const {
  return "s3://" + location_.bucket + "/" + location_.prefix + key;
}

namespace s3_detail {

// Sends request through one pooled handle with retries (spec 2.5). Returns the final response, or an
// error that names url, operation, HTTP status and S3 code. A 2xx response with an <Error> body is an
// error (CompleteMultipartUpload may answer so, spec 2.2).
inline Result<Response> perform(S3Client::Transport& transport, const S3Config& config, const S3Options& options,
                                const S3Location& location, const std::string& url_for_messages, const Request& request) {
  std::string http_url;
  const std::string object_path = request.bucket_level ? std::string() : uri_encode(location.prefix + request.key, true);
  if (config.path_style) {
    http_url = config.endpoint + "/" + location.bucket + "/" + object_path;
  } else {
    const std::size_t scheme_end = config.endpoint.find("://") + 3;
    http_url = config.endpoint.substr(0, scheme_end) + location.bucket + "." + config.endpoint.substr(scheme_end) + "/" + object_path;
  }
  if (!request.query.empty()) http_url += "?" + request.query;
  const std::string sigv4 = "aws:amz:" + config.region + ":s3";
  const std::string userpwd = config.access_key_id + ":" + config.secret_access_key;

  thread_local std::mt19937_64 jitter(std::random_device{}());
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.request_deadline;
  std::string last_error;
  bool outcome_unknown = false;  // an earlier attempt may have taken effect (its answer was lost)
  int attempt = 0;
  auto fail = [&](Code code, const std::string& what) -> Status {
    std::string message = url_for_messages + ": " + request.operation + " failed: " + what;
    if (attempt > 1) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::ostringstream text;
      text.precision(3);
      text << " (after " << attempt << " attempts in " << seconds << " s";
      if (outcome_unknown) text << "; an earlier attempt's outcome is unknown";
      text << ")";
      message += text.str();
    }
    return make_error(code, message);
  };

  while (true) {
    ++attempt;
    CURL* handle = transport.acquire();
    if (handle == nullptr) return fail(Code::io, "curl_easy_init failed");
    ::curl_easy_reset(handle);  // options go; the handle's live connections stay (spec 2.5)
    Response response;
    Transfer transfer{&request, &response};
    char curl_message[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    // curl 7.88 signs a payload hash only when this header names one (spec 2.6); integrity comes from
    // TLS and the CRC32 checksum header instead of hashing every body twice.
    headers = ::curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config.session_token.empty()) {
      headers = ::curl_slist_append(headers, ("x-amz-security-token: " + config.session_token).c_str());
    }
    for (const std::string& header : request.headers) headers = ::curl_slist_append(headers, header.c_str());

    ::curl_easy_setopt(handle, CURLOPT_URL, http_url.c_str());
    ::curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // several threads; timeouts without SIGALRM
    ::curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, curl_message);
    ::curl_easy_setopt(handle, CURLOPT_AWS_SIGV4, sigv4.c_str());
    ::curl_easy_setopt(handle, CURLOPT_USERPWD, userpwd.c_str());
    ::curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
    ::curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, &on_header);
    ::curl_easy_setopt(handle, CURLOPT_HEADERDATA, &transfer);
    ::curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, &on_body);
    ::curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer);
    ::curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
    ::curl_easy_setopt(handle, CURLOPT_LOW_SPEED_LIMIT, options.low_speed_bytes);
    ::curl_easy_setopt(handle, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.low_speed_time.count()));
    ::curl_easy_setopt(handle, CURLOPT_TCP_KEEPALIVE, 1L);
    // Bodies over 1 MiB wait for "100 Continue", so a refusal (412, 403) comes before the bytes; a
    // server that never sends it costs this wait. (No "Expect:" header to turn it off: curl 7.88 signs
    // the empty header it does not send, and SigV4 fails.)
    ::curl_easy_setopt(handle, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
    ::curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 0L);  // a redirect (wrong region) is an error to report
    const std::string method = request.method;
    if (method == "HEAD") {
      ::curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
    } else if (method == "PUT" || method == "POST") {
      // The body from memory: curl resends it on a retried connection without a read callback.
      ::curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body_size));
      ::curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body != nullptr ? request.body : "");
      if (method == "PUT") ::curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (method != "GET") {
      ::curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method);
    }
    const CURLcode code = ::curl_easy_perform(handle);
    ::curl_slist_free_all(headers);
    // A handle whose transfer failed may hold a broken connection: curl discards it itself.
    transport.release(handle);

    bool retry = false;
    if (response.overflow) {
      return fail(Code::io, request.out != nullptr
                                ? "the server sent more than the " + std::to_string(request.out_capacity) + " bytes asked for"
                                : "the response body exceeds " + std::to_string(kXmlBodyLimit) + " bytes");
    }
    if (code != CURLE_OK) {
      last_error = std::string("curl error ") + std::to_string(static_cast<int>(code)) + " (" + ::curl_easy_strerror(code) +
                   ")" + (curl_message[0] != '\0' ? std::string(": ") + curl_message : std::string());
      if (permanent_transport_error(code)) return fail(Code::io, last_error);
      retry = true;
      // A request that was sent may have taken effect; one refused at connect did not.
      if (code != CURLE_COULDNT_CONNECT && code != CURLE_COULDNT_RESOLVE_HOST) outcome_unknown = true;
    } else {
      const long http = response.http_status;
      // Judged by the status and by whether the body is an error document, never by other names (2.2).
      response.error = parse_s3_error(response.body);
      const bool success = http >= 200 && http < 300 && !response.error;
      if (success) return response;
      // A range at or past the end: no bytes there, for get() to report (ObjectClient::get).
      if (http == 416 && request.out != nullptr) {
        response.out_size = 0;
        return response;
      }
      last_error = "HTTP " + std::to_string(http);
      const std::string error_code = response.error ? response.error->code : std::string();
      if (response.error) last_error += " " + (error_code.empty() ? std::string("<Error> without a Code") : error_code);
      if (response.error && !response.error->message.empty()) last_error += ": " + response.error->message;
      retry = http == 500 || http == 502 || http == 503 || http == 504 || http == 429 || http == 408 ||
              retryable_code(error_code) || (http == 409 && request.retry_conflict);
      if (retry && (http >= 500 || http < 300)) outcome_unknown = true;  // a 200 <Error> may have acted too
      if (!retry) {
        Code status_code = Code::io;
        if (http == 404) status_code = Code::not_found;
        else if (http == 412) status_code = Code::conflict;
        return fail(status_code, last_error);
      }
    }
    // Jittered exponential backoff ("full jitter"), bounded by attempts and the deadline (spec 2.5).
    if (attempt >= options.max_attempts) return fail(Code::io, last_error);
    const int doublings = std::min(attempt - 1, 30);
    const auto ceiling = std::min<std::chrono::milliseconds::rep>(
        options.max_delay.count(), options.base_delay.count() * (std::int64_t{1} << std::min(doublings, 20)));
    std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(ceiling, 0));
    const auto delay = std::chrono::milliseconds(pick(jitter));
    if (std::chrono::steady_clock::now() + delay >= deadline) return fail(Code::io, last_error + " (retry deadline reached)");
    std::this_thread::sleep_for(delay);
  }
}

inline std::string conditional_header(Condition condition) {
  return condition == Condition::create_only ? "If-None-Match: *" : std::string();
}

}  // namespace s3_detail

#define CKPT_S3_PERFORM(request, key_for_message) \
  s3_detail::perform(*transport_, config_, options_, location_, url(key_for_message), request)

CKPT_INLINE Result<ObjectInfo> S3Client::put(const std::string& key, const void* data, std::size_t size, Condition condition) {
  s3_detail::Request request;
  request.operation = "PutObject";
  request.method = "PUT";
  request.key = key;
  request.body = data;
  request.body_size = size;
  request.retry_conflict = true;  // 409 ConditionalRequestConflict: "you can retry" (spec 2.5)
  request.headers.push_back("Content-Type: application/octet-stream");
  if (condition == Condition::create_only) request.headers.push_back(s3_detail::conditional_header(condition));
  if (options_.part_checksums) {
    request.headers.push_back("x-amz-sdk-checksum-algorithm: CRC32");
    request.headers.push_back("x-amz-checksum-crc32: " + s3_detail::crc32_base64(data, size));
  }
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  return ObjectInfo{key, size, response.etag};
}

CKPT_INLINE Result<std::size_t> S3Client::get(const std::string& key, std::uint64_t offset, void* buf, std::size_t size) {
  if (size == 0) return std::size_t{0};  // no request: "bytes=off-(off-1)" is no range
  s3_detail::Request request;
  request.operation = "GetObject";
  request.key = key;
  request.out = buf;
  request.out_capacity = size;
  request.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + size - 1));
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  if (response.http_status == 416) return std::size_t{0};
  // 200 instead of 206: the server ignored the Range; the bytes are the object's start.
  if (response.http_status == 200 && offset != 0) {
    return make_error(Code::io, url(key) + ": GetObject failed: the server ignored the Range header (HTTP 200 for offset " +
                                    std::to_string(offset) + ")");
  }
  return response.out_size;
}

CKPT_INLINE Result<ObjectInfo> S3Client::head(const std::string& key) {
  s3_detail::Request request;
  request.operation = "HeadObject";
  request.method = "HEAD";
  request.key = key;
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  if (!response.has_content_length) {
    return make_error(Code::io, url(key) + ": HeadObject: the response has no Content-Length");
  }
  return ObjectInfo{key, response.content_length, response.etag};
}

CKPT_INLINE Result<std::vector<ObjectInfo>> S3Client::list(const std::string& prefix) {
  std::vector<ObjectInfo> objects;
  std::string token;
  const std::string full_prefix = location_.prefix + prefix;
  while (true) {
    s3_detail::Request request = s3_detail::bucket_list("ListObjectsV2");
    // Sorted by name: curl 7.88 signs the query string as given (spec 2.6).
    if (!token.empty()) request.query += "continuation-token=" + s3_detail::uri_encode(token, false) + "&";
    request.query += "list-type=2&max-keys=" + std::to_string(options_.list_page_size) +
                     "&prefix=" + s3_detail::uri_encode(full_prefix, false);
    CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, prefix));
    // One page at a time: parsed, copied out, freed (spec 2.5).
    CKPT_ASSIGN_OR_RETURN(S3ObjectPage page, parse_list_objects(response.body, url(prefix) + ": ListObjectsV2"));
    for (ObjectInfo& info : page.objects) {
      if (info.key.compare(0, location_.prefix.size(), location_.prefix) != 0) {
        return make_error(Code::io, url(prefix) + ": ListObjectsV2 returned key '" + info.key + "' outside the prefix");
      }
      info.key.erase(0, location_.prefix.size());
      objects.push_back(std::move(info));
    }
    if (!page.truncated) break;
    token = std::move(page.next_continuation_token);
    if (token.empty()) {
      return make_error(Code::io, url(prefix) + ": ListObjectsV2: a truncated page without NextContinuationToken");
    }
  }
  std::sort(objects.begin(), objects.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return objects;
}

CKPT_INLINE Status S3Client::remove(const std::string& key) {
  s3_detail::Request request;
  request.operation = "DeleteObject";
  request.method = "DELETE";
  request.key = key;
  auto response = CKPT_S3_PERFORM(request, key);
  // Idempotent: a key already gone is success (ObjectClient::remove).
  if (!response.ok() && response.status().code() == Code::not_found) return Status();
  return std::move(response).take_status();
}

CKPT_INLINE Result<std::string> S3Client::create_upload(const std::string& key) {
  s3_detail::Request request;
  request.operation = "CreateMultipartUpload";
  request.method = "POST";
  request.key = key;
  request.query = "uploads=";
  request.want_xml = true;
  request.headers.push_back("Content-Type: application/octet-stream");
  // The upload is created for CRC32 parts, so S3 requires (and verifies) one on every part (spec 2.4).
  if (options_.part_checksums) request.headers.push_back("x-amz-checksum-algorithm: CRC32");
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  return parse_create_upload(response.body, url(key) + ": CreateMultipartUpload");
}

CKPT_INLINE Result<UploadPart> S3Client::upload_part(const std::string& key, const std::string& upload_id, int number,
                                                     const void* data, std::size_t size) {
  if (number < 1 || number > 10000) {
    return make_error(Code::invalid_argument, url(key) + ": UploadPart: part number " + std::to_string(number) + " is not in 1..10000");
  }
  s3_detail::Request request;
  request.operation = "UploadPart";
  request.method = "PUT";
  request.key = key;
  request.query = "partNumber=" + std::to_string(number) + "&uploadId=" + s3_detail::uri_encode(upload_id, false);
  request.body = data;
  request.body_size = size;
  request.headers.push_back("Content-Type: application/octet-stream");
  UploadPart part;
  part.number = number;
  if (options_.part_checksums) {
    part.checksum = s3_detail::crc32_base64(data, size);
    request.headers.push_back("x-amz-sdk-checksum-algorithm: CRC32");
    request.headers.push_back("x-amz-checksum-crc32: " + part.checksum);
  }
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  // A server that echoes another checksum than the one sent stored other bytes.
  if (!part.checksum.empty() && !response.checksum_crc32.empty() && response.checksum_crc32 != part.checksum) {
    return make_error(Code::io, url(key) + ": UploadPart " + std::to_string(number) + ": the server's CRC32 " +
                                    response.checksum_crc32 + " is not the " + part.checksum + " sent");
  }
  if (response.etag.empty()) {
    return make_error(Code::io, url(key) + ": UploadPart " + std::to_string(number) + ": the response has no ETag");
  }
  part.etag = response.etag;
  return part;
}

CKPT_INLINE Result<ObjectInfo> S3Client::complete_upload(const std::string& key, const std::string& upload_id,
                                                         const std::vector<UploadPart>& parts, Condition condition) {
  if (parts.empty()) return make_error(Code::invalid_argument, url(key) + ": CompleteMultipartUpload: no parts");
  pugi::xml_document doc;
  pugi::xml_node root = doc.append_child("CompleteMultipartUpload");
  root.append_attribute("xmlns") = "http://s3.amazonaws.com/doc/2006-03-01/";
  for (const UploadPart& part : parts) {
    pugi::xml_node node = root.append_child("Part");
    node.append_child("PartNumber").text().set(part.number);
    node.append_child("ETag").text().set(("\"" + part.etag + "\"").c_str());
    // An upload created with a checksum algorithm must name each part's checksum (spec 2.4).
    if (!part.checksum.empty()) node.append_child("ChecksumCRC32").text().set(part.checksum.c_str());
  }
  std::ostringstream xml;
  doc.save(xml, "", pugi::format_raw | pugi::format_no_declaration);
  const std::string body = xml.str();

  s3_detail::Request request;
  request.operation = "CompleteMultipartUpload";
  request.method = "POST";
  request.key = key;
  request.query = "uploadId=" + s3_detail::uri_encode(upload_id, false);
  request.body = body.data();
  request.body_size = body.size();
  request.want_xml = true;
  request.headers.push_back("Content-Type: application/xml");
  if (condition == Condition::create_only) request.headers.push_back(s3_detail::conditional_header(condition));
  // perform() parses the body of the 200 too: "200 OK" with an <Error> is an error (spec 2.2).
  CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, key));
  CKPT_ASSIGN_OR_RETURN(S3CompletedUpload completed, parse_complete_upload(response.body, url(key) + ": CompleteMultipartUpload"));
  // A composite checksum ("<crc>-<parts>", spec 2.4) other than the one of the parts sent: the object was
  // assembled from other parts. (A full-object CRC32, without "-", needs the part sizes; it is not checked.)
  const std::string expected = composite_crc32(parts);
  if (!expected.empty() && completed.checksum_crc32.find('-') != std::string::npos && completed.checksum_crc32 != expected) {
    return make_error(Code::io, url(key) + ": CompleteMultipartUpload: the server's composite CRC32 " + completed.checksum_crc32 +
                                    " is not " + expected + ", the one of the " + std::to_string(parts.size()) + " parts sent");
  }
  ObjectInfo info;
  info.key = key;
  info.etag = std::move(completed.etag);
  // The size is not in the answer; the caller knows the sum of its parts, and head() tells anyone else.
  return info;
}

CKPT_INLINE Status S3Client::abort_upload(const std::string& key, const std::string& upload_id) {
  s3_detail::Request request;
  request.operation = "AbortMultipartUpload";
  request.method = "DELETE";
  request.key = key;
  request.query = "uploadId=" + s3_detail::uri_encode(upload_id, false);
  return CKPT_S3_PERFORM(request, key).status();
}

CKPT_INLINE Result<std::vector<UploadInfo>> S3Client::list_uploads(const std::string& prefix) {
  std::vector<UploadInfo> uploads;
  std::string key_marker, upload_id_marker;
  const std::string full_prefix = location_.prefix + prefix;
  while (true) {
    s3_detail::Request request = s3_detail::bucket_list("ListMultipartUploads");
    // Sorted by name ("upload-id-marker" < "uploads"), see list().
    if (!key_marker.empty()) request.query += "key-marker=" + s3_detail::uri_encode(key_marker, false) + "&";
    request.query += "max-uploads=" + std::to_string(options_.list_page_size) + "&prefix=" + s3_detail::uri_encode(full_prefix, false) + "&";
    if (!upload_id_marker.empty()) request.query += "upload-id-marker=" + s3_detail::uri_encode(upload_id_marker, false) + "&";
    request.query += "uploads=";
    CKPT_ASSIGN_OR_RETURN(s3_detail::Response response, CKPT_S3_PERFORM(request, prefix));
    CKPT_ASSIGN_OR_RETURN(S3UploadPage page, parse_list_uploads(response.body, url(prefix) + ": ListMultipartUploads"));
    // The next page starts after NextKeyMarker and NextUploadIdMarker. A server that sends only the latter
    // (SeaweedFS 4.48, which orders uploads by id) gets only that: its last key as key-marker would
    // filter out uploads of lower keys that sort after it by id (spec 2.8).
    const std::string next_key = page.next_key_marker;
    const std::string next_upload = page.next_upload_id_marker;
    for (UploadInfo& upload : page.uploads) {
      // Some servers ignore prefix on this call: keep only ours.
      if (upload.key.compare(0, full_prefix.size(), full_prefix) != 0) continue;
      upload.key.erase(0, location_.prefix.size());
      uploads.push_back(std::move(upload));
    }
    if (!page.truncated) break;
    // No marker, or no progress, would loop forever: an error, never a silently short list.
    if ((next_key.empty() && next_upload.empty()) || (next_key == key_marker && next_upload == upload_id_marker)) {
      return make_error(Code::io, url(prefix) + ": ListMultipartUploads: a truncated page without a new marker");
    }
    key_marker = next_key;
    upload_id_marker = next_upload;
  }
  std::sort(uploads.begin(), uploads.end(), [](const UploadInfo& a, const UploadInfo& b) {
    return a.key != b.key ? a.key < b.key : a.upload_id < b.upload_id;
  });
  return uploads;
}

#undef CKPT_S3_PERFORM

CKPT_INLINE Result<std::unique_ptr<ObjectClient>> open_s3_url(const std::string& url, S3Options options) {
  CKPT_ASSIGN_OR_RETURN(S3Location location, parse_s3_url(url));
  CKPT_ASSIGN_OR_RETURN(S3Config config, S3Config::from_env());
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::open(location, std::move(config), options));
  return std::unique_ptr<ObjectClient>(std::move(client));
}

}  // namespace ckpt::object
