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

int run(const Config& cfg) {
  const CpuInfo cpu = cpu_info();
  const double load_before = load_average();
  const std::size_t size = static_cast<std::size_t>(cfg.size & ~std::uint64_t{4095});
  const std::size_t part = static_cast<std::size_t>(cfg.part_size);
  const unsigned n = cfg.connections;

  // A fresh prefix under the URL, removed at the end.
  std::string base = cfg.url;
  if (base.empty() || base.back() != '/') base += '/';
  std::random_device random;
  char tag[32];
  std::snprintf(tag, sizeof tag, "ckpt-bench-s3-%08x%08x/", random(), random());
  const std::string url = base + tag;
  S3Options s3;
  s3.max_connections = static_cast<int>(n);
  auto opened = open_s3_url(url, s3);
  check(opened, "open " + url);
  std::unique_ptr<ObjectClient> client = std::move(opened).value();
  const char* server_name = std::getenv("CKPT_S3_TEST_SERVER");
  const char* endpoint = std::getenv("AWS_ENDPOINT_URL");

  Buffer data(size), dst(size);
  fill_random(data.data(), size, 0x636b70742d733362ull);
  const std::vector<TensorSpan> tensors = model_tensors(size, cfg.tensor_size);
  const std::size_t parts = (size + part - 1) / part;

  // --- raw: one object "raw", rewritten every round.
  const std::string raw_key = "raw";
  bool raw_exists = false;
  auto remove_raw = [&] {
    if (raw_exists) check(client->remove(raw_key), "delete " + client->url(raw_key));
    raw_exists = false;
  };
  auto raw_save = [&] {
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
  };
  auto raw_load = [&] {
    parallel_checked(n, parts, [&](std::size_t i) {
      const std::size_t off = i * part, len = std::min(part, size - off);
      auto got = client->get(raw_key, off, dst.data() + off, len);
      check(got, "GET " + client->url(raw_key));
      if (*got != len) throw BenchError(client->url(raw_key) + ": short GET");
    });
  };

  // --- ckpt: a store under "store/", opened once (a job opens its store once and saves many steps).
  auto store_opened = open_s3_url(url + "store/", s3);
  check(store_opened, "open " + url + "store/");
  std::unique_ptr<ObjectClient> store_client = std::move(store_opened).value();
  StoreOptions sopts;
  sopts.create_if_missing = true;
  sopts.io.part_size = part;
  sopts.io.parallel_parts = n;
  auto store_or = Store::open(object_log(*store_client), Access::read_write, sopts);
  check(store_or, "open store " + store_client->url(""));
  std::unique_ptr<Store> store = std::move(store_or).value();
  std::uint64_t next_step = 1;
  auto retire_previous = [&] {  // untimed: the last round's step leaves, so the store holds one step
    if (auto latest = store->latest()) check(store->retire(latest->step), "retire step " + std::to_string(latest->step));
  };
  auto ckpt_save = [&] {
    auto tx = store->begin(next_step);
    check(tx, "begin step " + std::to_string(next_step));
    for (const auto& t : tensors)
      check((*tx)->add_tensor(t.name, DType::BF16, {t.size / 2}, data.data() + t.offset, t.size), "add_tensor " + t.name);
    check((*tx)->commit(), "commit step " + std::to_string(next_step));
    ++next_step;
  };
  auto ckpt_load = [&] {
    auto latest = store->latest();
    if (!latest) throw BenchError("the store has no step to load");
    auto reader = store->open_step(*latest);
    check(reader, "open step " + std::to_string(latest->step));
    for (const auto& t : tensors)
      check(reader->read_tensor(t.name, dst.data() + t.offset, t.size, ReadCheck::touched), "read_tensor " + t.name);
  };
  auto clear_dst = [&] { std::memset(dst.data(), 0, size); };
  auto check_dst = [&](const char* what) {
    if (std::memcmp(dst.data(), data.data(), size) != 0) throw IntegrityError(std::string(what) + ": loaded bytes differ from the saved ones");
  };

  std::vector<Measurement> ms(4);
  ms[0] = {"raw_save", "raw: multipart upload, " + std::to_string(n) + " parts in flight", remove_raw, raw_save, {}, {}, {}, 0};
  ms[1] = {"ckpt_save", "ckpt: Store begin + add_tensor + commit", retire_previous, ckpt_save, {}, {}, {}, 0};
  ms[2] = {"raw_load", "raw: ranged GETs, " + std::to_string(n) + " in flight", clear_dst, raw_load, {}, {}, {}, 0};
  ms[3] = {"ckpt_load_verify", "ckpt: open_step + read_tensor, verified", clear_dst, ckpt_load, {}, {}, {}, 0};
  const std::vector<Comparison> comparisons = {{"ckpt_save", "raw_save", 0.85}, {"ckpt_load_verify", "raw_load", 0.85}};

  auto cleanup = [&] {
    // Best effort, untimed: every object under the run's prefix, and uploads left by a failure.
    if (auto uploads = client->list_uploads(""); uploads.ok())
      for (const auto& u : *uploads) (void)client->abort_upload(u.key, u.upload_id);
    if (auto listed = client->list(""); listed.ok())
      for (const auto& o : *listed) (void)client->remove(o.key);
  };
  try {
    for (unsigned r = 0; r < cfg.repeat; ++r) {
      for (std::size_t i = 0; i < ms.size(); ++i) {
        run_once(ms[i]);
        if (i == 2) check_dst("raw load");
        if (i == 3) check_dst("ckpt load");
      }
    }
  } catch (...) {
    store.reset();
    cleanup();
    throw;
  }
  store.reset();
  cleanup();
  const double load_after = load_average();

  for (auto& m : ms) {
    m.timing = summarize(m.secs);
    const auto best = std::min_element(m.secs.begin(), m.secs.end()) - m.secs.begin();
    m.best_cpu_share = m.cpu_secs[best] / m.secs[best];
  }
  auto find = [&](const std::string& id) -> const Measurement& {
    return *std::find_if(ms.begin(), ms.end(), [&](const Measurement& m) { return m.id == id; });
  };
  auto gbps = [&](double secs) { return double(size) / secs / 1e9; };
  // Throughput ratio on the same bytes: limit time / ckpt time.
  auto ratio_of = [&](const Comparison& c, bool median) {
    const Measurement& m = find(c.measure);
    const Measurement& l = find(c.limit);
    return median ? l.timing.median / m.timing.median : l.timing.best / m.timing.best;
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string server = server_name != nullptr ? server_name : "";
  if (cfg.json) {
    nlohmann::ordered_json j;
    j["tool"] = kTool;
    j["url"] = cfg.url;
    j["endpoint"] = endpoint != nullptr ? endpoint : "";
    j["server"] = server;
    j["size_bytes"] = size;
    j["tensor_count"] = tensors.size();
    j["connections"] = n;
    j["part_size"] = part;
    j["repeat"] = cfg.repeat;
    j["statistic"] = "best";  // ratios use the best (shortest) run of each; medians beside them
    j["cpu"] = {{"model", cpu.model}, {"cores_online", cores}, {"avx2", cpu.avx2}, {"avx512f", cpu.avx512}};
    j["xxh3_vector"] = xxh3_vector_name();
    j["load_average"] = {{"before", load_before}, {"after", load_after}};
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& m : ms)
      rows.push_back({{"id", m.id}, {"label", m.label}, {"bytes", size}, {"best_s", m.timing.best}, {"median_s", m.timing.median},
                      {"worst_s", m.timing.worst}, {"best_gb_per_s", gbps(m.timing.best)}, {"median_gb_per_s", gbps(m.timing.median)},
                      {"best_cpu_share", m.best_cpu_share}, {"runs_s", m.secs}, {"runs_cpu_s", m.cpu_secs}});
    j["measurements"] = rows;
    nlohmann::ordered_json ratios = nlohmann::ordered_json::array();
    for (const auto& c : comparisons)
      ratios.push_back({{"measure", c.measure}, {"limit", c.limit}, {"ratio", ratio_of(c, false)}, {"median_ratio", ratio_of(c, true)},
                        {"target", c.target}, {"meets_target", ratio_of(c, false) >= c.target}});
    j["ratios"] = ratios;
    cli::print_json(j);
    return cli::kOk;
  }
  std::printf("ckpt-bench-s3: %s of random data as %zu BF16 tensors, %s parts, %u connections, server %s%s%s\n",
              cli::human_bytes(double(size)).c_str(), tensors.size(), cli::human_bytes(double(part)).c_str(), n,
              endpoint != nullptr ? endpoint : "(AWS)", server.empty() ? "" : " ", server.empty() ? "" : ("(" + server + ")").c_str());
  std::printf("CPU: %s, %u cores online, AVX2 %s, AVX-512 %s; XXH3 compiled for %s; load average %.2f before, %.2f after\n\n",
              cpu.model.c_str(), cores, cpu.avx2 ? "yes" : "no", cpu.avx512 ? "yes" : "no", xxh3_vector_name(), load_before, load_after);
  std::printf("%-48s %7s %7s %6s   %s\n", "contender", "GB/s", "median", "cpu", "ckpt / raw: best (median)  target");
  for (const auto& m : ms) {
    std::printf("  %-46s %7.3f %7.3f %5.0f%%", m.label.c_str(), gbps(m.timing.best), gbps(m.timing.median), 100.0 * m.best_cpu_share);
    for (const auto& c : comparisons)
      if (c.measure == m.id)
        std::printf("   %.2fx (%.2fx)  >= %.2f %s", ratio_of(c, false), ratio_of(c, true), c.target,
                    ratio_of(c, false) >= c.target ? "ok" : "MISSED");
    std::printf("\n");
  }
  std::printf("\nGB/s: 10^9 bytes of tensor data per second, best of %u rounds (the four alternate round by round), median beside it.\n"
              "cpu: this process's CPU time / wall time of the best run (all its threads; the server's own CPU is not counted).\n",
              cfg.repeat);
  return cli::kOk;
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
