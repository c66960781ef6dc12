// ckpt-bench-s3: a store on S3 against the same server's raw throughput, in one run (issue 23 "What to
// measure"; DESIGN "How it is tested": benchmarks are ratios to this machine's own limits measured in
// the same run). Four contenders on the same random bytes, with the same number of connections N,
// alternating round by round so a burst of load from other processes hits them alike:
//
//   raw_save          a plain multipart upload through S3Client: CreateMultipartUpload, N UploadPart in
//                     flight straight from memory, CompleteMultipartUpload
//   ckpt_save         Store begin + add_tensor per tensor + commit (ObjectFsOptions parallel_parts N):
//                     shard upload, MANIFEST, commit object
//   raw_load          ranged GETs of the raw object, N in flight, into memory
//   ckpt_load_verify  open_step + StepReader::read_tensor of every tensor, every chunk's XXH3-64 checked
//
// and the ratios ckpt/raw (targets: save >= 0.85x, load+verify >= 0.85x).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/core/hash.hpp>
#if CKPT_HAVE_S3
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>
#endif

#include "bench_util.hpp"
#include "cli.hpp"

namespace {

using namespace ckpt;
using namespace ckpt::bench;

constexpr const char* kTool = "ckpt-bench-s3";

constexpr const char* kAbout = R"(Measures a ckpt store on an S3 server against the same server's raw throughput in one run, with the
same number of connections for every contender: a plain multipart upload against Store's save, and
ranged GETs against StepReader's load with every chunk verified. Prints GB/s and the ratios ckpt/raw
(targets: save >= 0.85x, load+verify >= 0.85x).

The server and credentials come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_REGION; tools/s3-test-server.py --server seaweedfs run -- build/ckpt-bench-s3 starts a local one.
Everything is written under a fresh prefix below --url and removed at the end.

Exit status: 0 measured, 1 the bytes loaded differ from those saved, 2 bad arguments, no server, or a
request that failed.)";

struct Config {
  std::string url;
  std::uint64_t size = std::uint64_t{1} << 30;
  unsigned connections = 8;
  std::uint64_t part_size = std::uint64_t{8} << 20;
  std::uint64_t tensor_size = std::uint64_t{32} << 20;
  unsigned repeat = 3;
  bool json = false;
};

}  // namespace

#if CKPT_HAVE_S3
namespace {

using namespace ckpt::object;

struct Measurement {
  std::string id, label;
  std::function<void()> before;  // untimed preparation before every run
  std::function<void()> body;    // the timed work
  std::vector<double> secs, cpu_secs;
  Timing timing;
  double best_cpu_share = 0;  // process CPU seconds / wall seconds of the best run (all threads, server excluded)
};

struct Comparison {
  std::string measure, limit;
  double target = 0.85;
};

// Runs work(i) for i in [0, count) on `threads` threads; the first failure is rethrown after all joined.
template <class Work>
void parallel_checked(unsigned threads, std::size_t count, const Work& work) {
  std::mutex mutex;
  std::string failure;
  parallel_items(std::max(1u, static_cast<unsigned>(std::min<std::size_t>(threads, count))), count, [&](std::size_t i) {
    try {
      work(i);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure.empty()) failure = e.what();
    }
  });
  if (!failure.empty()) throw BenchError(failure);
}

// A fresh prefix under the URL, removed at the end: no run meets another's objects.
std::string fresh_prefix(const std::string& url) {
  std::string base = url;
  if (base.empty() || base.back() != '/') base += '/';
  std::random_device random;
  char tag[32];
  std::snprintf(tag, sizeof tag, "ckpt-bench-s3-%08x%08x/", random(), random());
  return base + tag;
}

std::unique_ptr<ObjectClient> open_client(const std::string& url, const S3Options& s3) {
  auto opened = open_s3_url(url, s3);
  check(opened, "open " + url);
  return std::move(opened).value();
}

// What the four contenders share: the random bytes, the raw object "raw" (rewritten every round) and a
// store under "store/", opened once (a job opens its store once and saves many steps).
struct Contenders {
  std::size_t size, part;
  unsigned n;
  std::unique_ptr<ObjectClient> client;
  Buffer data, dst;
  std::vector<TensorSpan> tensors;
  std::size_t parts;
  std::string raw_key = "raw";
  bool raw_exists = false;
  std::unique_ptr<ObjectClient> store_client;
  std::unique_ptr<Store> store;
  std::uint64_t next_step = 1;

  Contenders(const std::string& url, const S3Options& s3, std::size_t size_bytes, std::size_t part_bytes, unsigned connections,
             std::uint64_t tensor_size)
      : size(size_bytes), part(part_bytes), n(connections), client(open_client(url, s3)), data(size), dst(size),
        tensors(model_tensors(size, tensor_size)), parts((size + part - 1) / part) {
    fill_random(data.data(), size, 0x636b70742d733362ull);
    store_client = open_client(url + "store/", s3);
    StoreOptions sopts;
    sopts.create_if_missing = true;
    sopts.io.part_size = part;
    sopts.io.parallel_parts = n;
    auto store_or = Store::open(object_log(*store_client), Access::read_write, sopts);
    check(store_or, "open store " + store_client->url(""));
    store = std::move(store_or).value();
  }

  void remove_raw() {
    if (raw_exists) check(client->remove(raw_key), "delete " + client->url(raw_key));
    raw_exists = false;
  }
  void raw_save() {
    auto id = client->create_upload(raw_key);
    check(id, "CreateMultipartUpload " + client->url(raw_key));
    std::vector<UploadPart> uploaded(parts);
    try {
      parallel_checked(n, parts, [&](std::size_t i) {
        const std::size_t off = i * part;
        auto r = client->upload_part(raw_key, *id, static_cast<int>(i + 1), data.data() + off, std::min(part, size - off));
        check(r, "UploadPart " + client->url(raw_key));
        uploaded[i] = std::move(*r);
      });
      check(client->complete_upload(raw_key, *id, uploaded, Condition::create_only), "CompleteMultipartUpload " + client->url(raw_key));
    } catch (...) {
      (void)client->abort_upload(raw_key, *id);
      throw;
    }
    raw_exists = true;
  }
  void raw_load() {
    parallel_checked(n, parts, [&](std::size_t i) {
      const std::size_t off = i * part, len = std::min(part, size - off);
      auto got = client->get(raw_key, off, dst.data() + off, len);
      check(got, "GET " + client->url(raw_key));
      if (*got != len) throw BenchError(client->url(raw_key) + ": short GET");
    });
  }
  // Untimed: the last round's step leaves, so the store holds one step.
  void retire_previous() {
    if (auto latest = store->latest()) check(store->retire(latest->step), "retire step " + std::to_string(latest->step));
  }
  void ckpt_save() {
    auto tx = store->begin(next_step);
    check(tx, "begin step " + std::to_string(next_step));
    for (const auto& t : tensors)
      check((*tx)->add_tensor(t.name, DType::BF16, {t.size / 2}, data.data() + t.offset, t.size), "add_tensor " + t.name);
    check((*tx)->commit(), "commit step " + std::to_string(next_step));
    ++next_step;
  }
  void ckpt_load() {
    auto latest = store->latest();
    if (!latest) throw BenchError("the store has no step to load");
    auto reader = store->open_step(*latest);
    check(reader, "open step " + std::to_string(latest->step));
    for (const auto& t : tensors)
      check(reader->read_tensor(t.name, dst.data() + t.offset, t.size, ReadCheck::touched), "read_tensor " + t.name);
  }
  void clear_dst() { std::memset(dst.data(), 0, size); }
  void check_dst(const char* what) {
    if (std::memcmp(dst.data(), data.data(), size) != 0) throw IntegrityError(std::string(what) + ": loaded bytes differ from the saved ones");
  }
  // Best effort, untimed: every object under the run's prefix, and uploads left by a failure.
  void cleanup() {
    if (auto uploads = client->list_uploads(""); uploads.ok())
      for (const auto& u : *uploads) (void)client->abort_upload(u.key, u.upload_id);
    if (auto listed = client->list(""); listed.ok())
      for (const auto& o : *listed) (void)client->remove(o.key);
  }
};

const std::vector<Comparison> kComparisons = {{"ckpt_save", "raw_save", 0.85}, {"ckpt_load_verify", "raw_load", 0.85}};

// Runs the four round by round, checking the loaded bytes after each load; the prefix is emptied
// whether or not they succeed.
std::vector<Measurement> measure(Contenders& c, unsigned repeat) {
  const unsigned n = c.n;
  std::vector<Measurement> ms(4);
  ms[0] = {"raw_save", "raw: multipart upload, " + std::to_string(n) + " parts in flight", [&c] { c.remove_raw(); }, [&c] { c.raw_save(); }, {}, {}, {}, 0};
  ms[1] = {"ckpt_save", "ckpt: Store begin + add_tensor + commit", [&c] { c.retire_previous(); }, [&c] { c.ckpt_save(); }, {}, {}, {}, 0};
  ms[2] = {"raw_load", "raw: ranged GETs, " + std::to_string(n) + " in flight", [&c] { c.clear_dst(); }, [&c] { c.raw_load(); }, {}, {}, {}, 0};
  ms[3] = {"ckpt_load_verify", "ckpt: open_step + read_tensor, verified", [&c] { c.clear_dst(); }, [&c] { c.ckpt_load(); }, {}, {}, {}, 0};
  try {
    for (unsigned r = 0; r < repeat; ++r) {
      for (std::size_t i = 0; i < ms.size(); ++i) {
        run_once(ms[i]);
        if (i == 2) c.check_dst("raw load");
        if (i == 3) c.check_dst("ckpt load");
      }
    }
  } catch (...) {
    c.store.reset();
    c.cleanup();
    throw;
  }
  c.store.reset();
  c.cleanup();
  return ms;
}

void summarize_runs(std::vector<Measurement>& ms) {
  for (auto& m : ms) {
    m.timing = summarize(m.secs);
    const auto best = std::min_element(m.secs.begin(), m.secs.end()) - m.secs.begin();
    m.best_cpu_share = m.cpu_secs[best] / m.secs[best];
  }
}

// What the report says about the run besides the measurements.
struct RunFacts {
  CpuInfo cpu;
  double load_before = 0, load_after = 0;
  std::size_t size = 0, part = 0, tensor_count = 0;
  unsigned n = 0;
};

const Measurement& find(const std::vector<Measurement>& ms, const std::string& id) {
  return *std::find_if(ms.begin(), ms.end(), [&](const Measurement& m) { return m.id == id; });
}

// Throughput ratio on the same bytes: limit time / ckpt time.
double ratio_of(const std::vector<Measurement>& ms, const Comparison& c, bool median) {
  const Measurement& m = find(ms, c.measure);
  const Measurement& l = find(ms, c.limit);
  return median ? l.timing.median / m.timing.median : l.timing.best / m.timing.best;
}

int print_json_report(const Config& cfg, const RunFacts& f, const std::vector<Measurement>& ms) {
  auto gbps = [&](double secs) { return double(f.size) / secs / 1e9; };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const char* server_name = std::getenv("CKPT_S3_TEST_SERVER");
  const char* endpoint = std::getenv("AWS_ENDPOINT_URL");
  nlohmann::ordered_json j;
  j["tool"] = kTool;
  j["url"] = cfg.url;
  j["endpoint"] = endpoint != nullptr ? endpoint : "";
  j["server"] = server_name != nullptr ? server_name : "";
  j["size_bytes"] = f.size;
  j["tensor_count"] = f.tensor_count;
  j["connections"] = f.n;
  j["part_size"] = f.part;
  j["repeat"] = cfg.repeat;
  j["statistic"] = "best";  // ratios use the best (shortest) run of each; medians beside them
  j["cpu"] = {{"model", f.cpu.model}, {"cores_online", cores}, {"avx2", f.cpu.avx2}, {"avx512f", f.cpu.avx512}};
  j["xxh3_vector"] = xxh3_vector_name();
  j["load_average"] = {{"before", f.load_before}, {"after", f.load_after}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& m : ms)
    rows.push_back({{"id", m.id}, {"label", m.label}, {"bytes", f.size}, {"best_s", m.timing.best}, {"median_s", m.timing.median},
                    {"worst_s", m.timing.worst}, {"best_gb_per_s", gbps(m.timing.best)}, {"median_gb_per_s", gbps(m.timing.median)},
                    {"best_cpu_share", m.best_cpu_share}, {"runs_s", m.secs}, {"runs_cpu_s", m.cpu_secs}});
  j["measurements"] = rows;
  nlohmann::ordered_json ratios = nlohmann::ordered_json::array();
  for (const auto& c : kComparisons)
    ratios.push_back({{"measure", c.measure}, {"limit", c.limit}, {"ratio", ratio_of(ms, c, false)}, {"median_ratio", ratio_of(ms, c, true)},
                      {"target", c.target}, {"meets_target", ratio_of(ms, c, false) >= c.target}});
  j["ratios"] = ratios;
  cli::print_json(j);
  return cli::kOk;
}

int print_table_report(const Config& cfg, const RunFacts& f, const std::vector<Measurement>& ms) {
  auto gbps = [&](double secs) { return double(f.size) / secs / 1e9; };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const char* server_name = std::getenv("CKPT_S3_TEST_SERVER");
  const char* endpoint = std::getenv("AWS_ENDPOINT_URL");
  const std::string server = server_name != nullptr ? server_name : "";
  std::printf("ckpt-bench-s3: %s of random data as %zu BF16 tensors, %s parts, %u connections, server %s%s%s\n",
              cli::human_bytes(double(f.size)).c_str(), f.tensor_count, cli::human_bytes(double(f.part)).c_str(), f.n,
              endpoint != nullptr ? endpoint : "(AWS)", server.empty() ? "" : " ", server.empty() ? "" : ("(" + server + ")").c_str());
  std::printf("CPU: %s, %u cores online, AVX2 %s, AVX-512 %s; XXH3 on %s; load average %.2f before, %.2f after\n\n",
              f.cpu.model.c_str(), cores, f.cpu.avx2 ? "yes" : "no", f.cpu.avx512 ? "yes" : "no", xxh3_vector_name(), f.load_before,
              f.load_after);
  std::printf("%-48s %7s %7s %6s   %s\n", "contender", "GB/s", "median", "cpu", "ckpt / raw: best (median)  target");
  for (const auto& m : ms) {
    std::printf("  %-46s %7.3f %7.3f %5.0f%%", m.label.c_str(), gbps(m.timing.best), gbps(m.timing.median), 100.0 * m.best_cpu_share);
    for (const auto& c : kComparisons)
      if (c.measure == m.id)
        std::printf("   %.2fx (%.2fx)  >= %.2f %s", ratio_of(ms, c, false), ratio_of(ms, c, true), c.target,
                    ratio_of(ms, c, false) >= c.target ? "ok" : "MISSED");
    std::printf("\n");
  }
  std::printf("\nGB/s: 10^9 bytes of tensor data per second, best of %u rounds (the four alternate round by round), median beside it.\n"
              "cpu: this process's CPU time / wall time of the best run (all its threads; the server's own CPU is not counted).\n",
              cfg.repeat);
  return cli::kOk;
}

int run(const Config& cfg) {
  RunFacts f;
  f.cpu = cpu_info();
  f.load_before = load_average();
  f.size = static_cast<std::size_t>(cfg.size & ~std::uint64_t{4095});
  f.part = static_cast<std::size_t>(cfg.part_size);
  f.n = cfg.connections;
  S3Options s3;
  s3.max_connections = static_cast<int>(f.n);
  Contenders contenders(fresh_prefix(cfg.url), s3, f.size, f.part, f.n, cfg.tensor_size);
  f.tensor_count = contenders.tensors.size();
  std::vector<Measurement> ms = measure(contenders, cfg.repeat);
  f.load_after = load_average();
  summarize_runs(ms);
  return cfg.json ? print_json_report(cfg, f, ms) : print_table_report(cfg, f, ms);
}

}  // namespace
#endif  // CKPT_HAVE_S3

int main(int argc, char** argv) {
  return cli::run_tool(kTool, kAbout, [&](CLI::App& app) -> int {
    Config cfg;
    const char* env_url = std::getenv("CKPT_S3_TEST_URL");
    cfg.url = env_url != nullptr ? env_url : "";
    std::string size_text = "1GiB", part_text = "8MiB", tensor_text = "32MiB";
    app.add_option("--url", cfg.url, "s3://bucket/prefix to measure under; a fresh prefix is made and removed below it (default: $CKPT_S3_TEST_URL)");
    app.add_option("--size", size_text, "bytes of data, e.g. 1GiB, 64MiB (default 1GiB)");
    app.add_option("--connections", cfg.connections, "requests in flight for every contender (default 8)")->check(CLI::Range(1u, 256u));
    app.add_option("--part-size", part_text, "multipart part size and ranged GET size, 5MiB..5GiB (default 8MiB)");
    app.add_option("--tensor-size", tensor_text, "bytes per tensor (default 32MiB)");
    app.add_option("--repeat", cfg.repeat, "rounds; the best is reported, the median beside it (default 3)")->check(CLI::Range(1u, 1000u));
    app.add_flag("--json", cfg.json, "print one JSON document instead of the table");
#if !CKPT_HAVE_S3
    return cli::main_without("S3 client (configure with CKPT_S3=ON where libcurl >= 7.75, pugixml and zlib are found)", app, argc, argv);
#else
    if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
    const auto size = parse_size(size_text), part = parse_size(part_text), tensor = parse_size(tensor_text);
    if (!size || *size < 4096 || *size > (std::uint64_t{1} << 40))
      return cli::usage_error(kTool, "--size '" + size_text + "' is not a byte count between 4KiB and 1TiB");
    if (!part || *part < object::limits::kMinPartSize || *part > object::limits::kMaxPartSize)
      return cli::usage_error(kTool, "--part-size '" + part_text + "' is not a byte count between 5MiB and 5GiB");
    if ((*size + *part - 1) / *part > static_cast<std::uint64_t>(object::limits::kMaxParts))
      return cli::usage_error(kTool, "--size needs more than 10000 parts of --part-size: raise --part-size");
    if (!tensor || *tensor < 2 || *tensor % 2 != 0)
      return cli::usage_error(kTool, "--tensor-size '" + tensor_text + "' is not an even byte count (BF16 elements)");
    if (cfg.url.empty()) return cli::usage_error(kTool, "no --url and no CKPT_S3_TEST_URL: say which s3://bucket/prefix to measure");
    if (!object::is_s3_url(cfg.url)) return cli::usage_error(kTool, "--url '" + cfg.url + "' is not an s3://bucket/prefix URL");
    cfg.size = *size;
    cfg.part_size = *part;
    cfg.tensor_size = *tensor;
    try {
      return run(cfg);
    } catch (const IntegrityError& e) {
      std::fprintf(stderr, "%s: %s\n", kTool, e.what());
      return int{cli::kIntegrity};
    }
#endif
  });
}
