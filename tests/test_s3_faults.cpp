// The store on real servers through a fault proxy (spec/OBJECT.md 6): cmake/tests-object.cmake runs this
// program under moto and SeaweedFS with `tools/s3-test-server.py --proxy`, which puts
// tools/s3-fault-proxy.py between the client and the server and exports AWS_ENDPOINT_URL (the proxy),
// CKPT_S3_PROXY_CONTROL (its rules and request log) and CKPT_S3_DIRECT_ENDPOINT (the server itself).
//
// Each case saves step 1 cleanly, sets one fault, saves step 2 through the proxy, and then judges the
// store through a client WITHOUT the proxy: the latest step is 2 when the save reported success and 1
// when it failed, every committed step reads back bit for bit, verify_paths exits 0, no committed step
// holds anything but its MANIFEST and complete shards, and no multipart upload is left behind where the
// save ended cleanly. The request log proves the fault was hit and what the client did next.
#include <catch2/catch.hpp>

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>
#include <ckpt/report/verify.hpp>

#include "s3_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;
using namespace ckpt::object;

namespace {

[[nodiscard]] std::string env_or_fail(const char* name) {
  const char* value = std::getenv(name);
  INFO(name << " is not set: run under tools/s3-test-server.py --proxy (ctest -L object does)");
  REQUIRE(value != nullptr);
  return value;
}

// --- the proxy's control API ------------------------------------------------------------------------

std::size_t collect(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

std::string control(const char* method, const std::string& path, const std::string& body = "") {
  CURL* curl = ::curl_easy_init();
  REQUIRE(curl != nullptr);
  const std::string url = env_or_fail("CKPT_S3_PROXY_CONTROL") + path;
  std::string answer;
  ::curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  ::curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  ::curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  ::curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  if (!body.empty()) {
    ::curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    ::curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  ::curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &collect);
  ::curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  const CURLcode code = ::curl_easy_perform(curl);
  long http = 0;
  ::curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
  ::curl_easy_cleanup(curl);
  INFO(method << " " << url << ": " << ::curl_easy_strerror(code) << ", HTTP " << http << ": " << answer);
  REQUIRE(code == CURLE_OK);
  REQUIRE(http == 200);
  return answer;
}

void set_rules(const std::string& json) {
  control("PUT", "/rules", json);
  control("DELETE", "/log");
}

struct LogEntry {
  std::string method, path, query, action;
  long status = 0;
};

[[nodiscard]] std::vector<LogEntry> request_log() {
  std::vector<LogEntry> entries;
  std::istringstream lines(control("GET", "/log"));
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::size_t begin = 0;
    while (true) {
      const std::size_t tab = line.find('\t', begin);
      fields.push_back(line.substr(begin, tab - begin));
      if (tab == std::string::npos) break;
      begin = tab + 1;
    }
    REQUIRE(fields.size() == 6);
    entries.push_back(LogEntry{fields[1], fields[2], fields[3], fields[5], std::strtol(fields[4].c_str(), nullptr, 10)});
  }
  return entries;
}

[[nodiscard]] std::string dump(const std::vector<LogEntry>& log) {
  std::string out;
  for (const auto& e : log) out += e.method + " " + e.path + "?" + e.query + " -> " + std::to_string(e.status) + " " + e.action + "\n";
  return out;
}

bool has_param(const std::string& query, const std::string& name) {
  return ("&" + query).find("&" + name + "=") != std::string::npos;
}
bool is_upload_part(const LogEntry& e) { return e.method == "PUT" && has_param(e.query, "uploadId") && has_param(e.query, "partNumber"); }
bool is_complete(const LogEntry& e) { return e.method == "POST" && has_param(e.query, "uploadId"); }
bool is_commit_put(const LogEntry& e) {
  return e.method == "PUT" && e.query.empty() && e.path.find("/log/") != std::string::npos &&
         e.path.size() > 7 && e.path.compare(e.path.size() - 7, 7, ".commit") == 0;
}

template <class Pred>
[[nodiscard]] std::size_t count(const std::vector<LogEntry>& log, Pred pred) {
  std::size_t n = 0;
  for (const auto& e : log) n += pred(e) ? 1 : 0;
  return n;
}

// Matches of the rules below, as the proxy reads them (tools/s3-fault-proxy.py).
constexpr const char* kUploadPart = R"("method": "PUT", "query": ["uploadId", "partNumber"])";
constexpr const char* kComplete = R"("method": "POST", "query": ["uploadId"])";
constexpr const char* kCommitPut = R"("method": "PUT", "no_query": true, "path": "/log/[0-9]+\\.commit$")";

// A rule list of one rule: what it matches (above) and what the proxy does, as JSON fields.
[[nodiscard]] std::string one_rule(const char* match, const char* action) {
  return std::string("[{") + match + ", " + action + "}]";
}

// --- clients, store, data ---------------------------------------------------------------------------

[[nodiscard]] std::string fresh_url() { return ckpt_test::fresh_s3_url("faults"); }

// Small delays so every retry costs milliseconds; a stalled transfer fails after one second.
[[nodiscard]] S3Options fast_options(std::chrono::milliseconds deadline = std::chrono::milliseconds(5000)) {
  S3Options o;
  o.base_delay = std::chrono::milliseconds(5);
  o.max_delay = std::chrono::milliseconds(50);
  o.max_attempts = 5;
  o.request_deadline = deadline;
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.low_speed_time = std::chrono::seconds(1);
  return o;
}

// Through the proxy (AWS_ENDPOINT_URL).
[[nodiscard]] std::unique_ptr<ObjectClient> proxied_client(const std::string& url, const S3Options& options) {
  return ckpt_test::s3_client_for(url, options);
}

// Straight to the server: what judges the store after a fault.
[[nodiscard]] Result<std::unique_ptr<ObjectClient>> open_direct(const std::string& url) {
  CKPT_ASSIGN_OR_RETURN(S3Location location, parse_s3_url(url));
  CKPT_ASSIGN_OR_RETURN(S3Config config, S3Config::from_env());
  const char* direct = std::getenv("CKPT_S3_DIRECT_ENDPOINT");
  if (direct == nullptr) return make_error(Code::invalid_argument, "CKPT_S3_DIRECT_ENDPOINT is not set");
  config.endpoint = direct;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::open(location, std::move(config), fast_options()));
  return std::unique_ptr<ObjectClient>(std::move(client));
}

[[nodiscard]] std::unique_ptr<ObjectClient> direct_client(const std::string& url) {
  auto client = open_direct(url);
  INFO(client.status().to_string());
  REQUIRE(client.ok());
  return std::move(client).value();
}

[[nodiscard]] StoreOptions store_options() { return ckpt_test::s3_store_options(); }
[[nodiscard]] std::vector<unsigned char> tensor_bytes(std::uint64_t step) { return ckpt_test::s3_tensor_bytes(step); }
[[nodiscard]] Status save_step(Store& store, std::uint64_t step) { return ckpt_test::s3_save_step(store, step); }

// A store at a fresh prefix, step 1 saved through the proxy with no faults.
struct Fixture {
  std::string url = fresh_url();
  std::unique_ptr<ObjectClient> client;
  std::unique_ptr<Store> store;

  explicit Fixture(const S3Options& options = fast_options()) {
    set_rules("[]");
    client = proxied_client(url, options);
    auto opened = Store::open(object_log(*client), Access::read_write, store_options());
    INFO(opened.status().to_string());
    REQUIRE(opened.ok());
    store = std::move(opened).value();
    const Status first = save_step(*store, 1);
    INFO(first.to_string());
    REQUIRE(first.ok());
  }
  ~Fixture() {
    control("POST", "/release");  // no request stays hung past its case
    control("DELETE", "/rules");
  }
};

// The verdict through a client that bypasses the proxy: latest step `expected`, every committed step
// bit for bit, verify exit 0, committed prefixes hold only their MANIFEST and shards.
void judge(const std::string& url, std::uint64_t expected, bool uploads_must_be_gone) {
  control("DELETE", "/rules");
  auto client = direct_client(url);
  auto opened = Store::open(object_log(*client), Access::read_only);
  INFO(opened.status().to_string());
  REQUIRE(opened.ok());
  Store& store = **opened;
  CHECK(store.recovery_report().log_damage.empty());
  REQUIRE(store.latest().has_value());
  CHECK(store.latest()->step == expected);
  for (const StepInfo& info : store.steps()) {
    auto reader = store.open_step(info);
    INFO("step " << info.step << ": " << reader.status().to_string());
    REQUIRE(reader.ok());
    const auto want = tensor_bytes(info.step);
    std::vector<unsigned char> got(want.size());
    REQUIRE(reader->read_tensor("w", got.data(), got.size()).ok());
    CHECK(got == want);
    // Nothing but the MANIFEST and the shards the commit names, each whole (verify checks sizes and digests).
    auto listed = client->list(info.dir + "/");
    REQUIRE(listed.ok());
    for (const auto& object : *listed) {
      const std::string name = object.key.substr(info.dir.size() + 1);
      INFO("object " << object.key);
      bool named = name == "MANIFEST";
      for (const TxnFile& file : info.files) named = named || file.name == name;
      CHECK(named);
    }
  }
  PosixFs posix;
  report::VerifyPathsOptions o;
  o.open_objects = [](const std::string& u) { return open_direct(u); };
  auto verdict = report::verify_paths(posix, {url}, o);
  INFO(report::verify_json(verdict).dump());
  CHECK(report::exit_code(verdict) == report::kOk);
  CHECK(verdict.steps.size() == store.steps().size());
  if (uploads_must_be_gone) {
    auto uploads = client->list_uploads("");
    REQUIRE(uploads.ok());
    for (const auto& u : *uploads) INFO("left behind: " << u.key << " " << u.upload_id);
    CHECK(uploads->empty());
  }
}

// What the request log must show: how many requests `matches` picks, exactly or at least.
struct Seen {
  bool (*matches)(const LogEntry&);
  std::size_t times;
  bool or_more = false;
};

// A fault the client gets past: the save succeeds (in under `seconds_under` when that is set), the log shows
// the fault hit and what the client did next, and step 2 is committed.
struct Overcome {
  const char* name;
  std::string rules;
  std::vector<Seen> seen;
  double seconds_under = 0;
  std::chrono::milliseconds deadline = std::chrono::milliseconds(5000);
};

bool is_commit_get(const LogEntry& e) {
  return e.method == "GET" && e.path.size() > 7 && e.path.compare(e.path.size() - 7, 7, ".commit") == 0;
}

}  // namespace

TEST_CASE("faults the client gets past: retried, committed", "[s3_faults]") {
  const Overcome cases[] = {
      {"SlowDown on two parts: retried with backoff, committed",
       one_rule(kUploadPart, R"("action": "slowdown", "times": 2)"),
       {{[](const LogEntry& e) { return e.action == "slowdown" && e.status == 503; }, 2},
        {[](const LogEntry& e) { return is_upload_part(e) && e.status == 200; }, 3}}},
      {"SlowDown on the commit PUT: retried, committed once", one_rule(kCommitPut, R"("action": "slowdown", "times": 3)"),
       {{[](const LogEntry& e) { return is_commit_put(e) && e.status == 503; }, 3},
        {[](const LogEntry& e) { return is_commit_put(e) && e.status == 200; }, 1}}},
      {"a reset in the middle of a part: retried, committed",
       one_rule(kUploadPart, R"("action": "reset", "reset_after": 1048576, "skip": 1, "times": 1)"),
       {{[](const LogEntry& e) { return e.action == "reset"; }, 1},
        {[](const LogEntry& e) { return is_upload_part(e) && e.status == 200; }, 3}}},
      // The 200 was not taken for a completion: the client sent the completion again.
      {"an Error body in a 200 to Complete, not acted on: retried, committed",
       one_rule(kComplete, R"("action": "error200", "forward": false, "times": 1)"),
       {{[](const LogEntry& e) { return is_complete(e) && e.action == "error200"; }, 1},
        {[](const LogEntry& e) { return is_complete(e) && e.status == 200 && e.action == "forward"; }, 1}}},
      // Every completion's answer renamed on the way (spec/OBJECT.md 2.2: never judged by the root's name).
      {"a Complete answer under another root element, as moto 5.2.1 sent it: committed",
       one_rule(kComplete,
                R"("action": "rewrite", "pattern": "CompleteMultipartUploadResult", "replacement": "CompleteMultipartUploadResponse", "times": null)"),
       {{[](const LogEntry& e) { return is_complete(e) && e.action == "rewrite" && e.status == 200; }, 1, true}}},
      // The retried PUT found the object (412), and the GET of the commit object proved it ours.
      {"a lost commit PUT response: the commit object read back, committed",
       one_rule(kCommitPut, R"("action": "lose_response", "times": 1)"),
       {{[](const LogEntry& e) { return is_commit_put(e) && e.action == "lose_response"; }, 1},
        {[](const LogEntry& e) { return is_commit_put(e) && e.status == 412; }, 1},
        {is_commit_get, 1, true}}},
      // curl judges the low-speed limit on its speed over the last 5 s: a part whose first megabytes went into
      // the socket buffers at once fails some seconds after low_speed_time, so this client has a longer deadline.
      // 15 s: low_speed_time (1 s) plus curl's 5 s window and a retry, not the proxy's 60 s.
      {"a part hanging past the low-speed limit: retried, committed", one_rule(kUploadPart, R"("action": "hang", "times": 1)"),
       {{[](const LogEntry& e) { return is_upload_part(e) && e.status == 200; }, 3}},
       15.0,
       std::chrono::milliseconds(20000)},
      // The proxy forwarded nothing, so the retry completes the upload.
      {"a Complete never answered: timed out, retried, committed", one_rule(kComplete, R"("action": "hang", "times": 1)"),
       {{[](const LogEntry& e) { return is_complete(e) && e.status == 200; }, 1}},
       5.0},
  };
  for (const Overcome& c : cases) {
    DYNAMIC_SECTION(c.name) {
      Fixture f(fast_options(c.deadline));
      set_rules(c.rules);
      const auto start = std::chrono::steady_clock::now();
      const Status saved = save_step(*f.store, 2);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      INFO(saved.to_string());
      REQUIRE(saved.ok());
      if (c.seconds_under > 0) CHECK(seconds < c.seconds_under);
      const auto log = request_log();
      INFO(dump(log));
      for (std::size_t i = 0; i < c.seen.size(); ++i) {
        INFO("seen[" << i << "]");
        const std::size_t n = count(log, c.seen[i].matches);
        if (c.seen[i].or_more) CHECK(n >= c.seen[i].times);
        else CHECK(n == c.seen[i].times);
      }
      judge(f.url, 2, true);
    }
  }
}

TEST_CASE("SlowDown on every request: fails promptly, step 1 stays latest", "[s3_faults]") {
  Fixture f;
  set_rules(R"([{"action": "slowdown", "times": null}])");
  const auto start = std::chrono::steady_clock::now();
  const Status saved = save_step(*f.store, 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(saved.to_string());
  CHECK(!saved.ok());
  CHECK(saved.to_string().find("SlowDown") != std::string::npos);
  // Each request gives up after 5 attempts and at most 5 + 10 + 20 + 40 ms of backoff.
  CHECK(seconds < 5.0);
  const auto log = request_log();
  INFO(dump(log));
  CHECK(count(log, [](const LogEntry& e) { return e.action != "slowdown"; }) == 0);
  // Nothing was acted on, so the abandoned transaction is "in progress, or in doubt": kept, not listed.
  judge(f.url, 1, true);
}

TEST_CASE("an Error body in a 200 to Complete after the server acted: not done", "[s3_faults]") {
  Fixture f;
  set_rules(one_rule(kComplete, R"("action": "error200", "forward": true, "times": 1)"));
  const Status saved = save_step(*f.store, 2);
  INFO(saved.to_string());
  const auto log = request_log();
  INFO(dump(log));
  CHECK(count(log, [](const LogEntry& e) { return is_complete(e) && e.action == "error200"; }) == 1);
  // Treated as an error: retried (the retry finds the upload completed), never a completion by itself.
  CHECK(count(log, is_complete) >= 2);
  // The retry is refused (moto completes it again; SeaweedFS answers 412): the object of exactly the bytes
  // written at this transaction's key is the upload's own, so the save commits (spec/OBJECT.md 3.3).
  CHECK(saved.ok());
  judge(f.url, saved.ok() ? 2 : 1, true);
}

TEST_CASE("a Complete answer whose composite CRC32 is not the parts': the save fails, the last step stays", "[s3_faults]") {
  Fixture f;
  // The checksum of other parts, put before any the server sent (the first <ChecksumCRC32> is read).
  set_rules(one_rule(kComplete,
                     R"("action": "rewrite", "pattern": "</ETag>", "replacement": "</ETag><ChecksumCRC32>AAAAAA==-2</ChecksumCRC32>", "times": null)"));
  const Status saved = save_step(*f.store, 2);
  INFO(saved.to_string());
  REQUIRE_FALSE(saved.ok());
  CHECK(saved.to_string().find("composite CRC32 AAAAAA==-2 is not") != std::string::npos);
  judge(f.url, 1, true);
}

TEST_CASE("a lost Complete response: the object is found, committed whole", "[s3_faults]") {
  Fixture f;
  set_rules(one_rule(kComplete, R"("action": "lose_response", "times": 1)"));
  const Status saved = save_step(*f.store, 2);
  INFO(saved.to_string());
  const auto log = request_log();
  INFO(dump(log));
  CHECK(count(log, [](const LogEntry& e) { return is_complete(e) && e.action == "lose_response"; }) == 1);
  CHECK(count(log, is_complete) >= 2);  // the retry (the client's, or curl's own resend on a reused connection)
  CHECK(saved.ok());  // as above: the completed object is found and taken as this upload's
  judge(f.url, saved.ok() ? 2 : 1, true);
}

