// ckpt-demo-train: a small, deterministic training program that checkpoints into a ckpt store.
//
// A 2-layer MLP (32 -> 64 tanh -> 1) learns a fixed synthetic teacher by Adam on a synthetic data
// set, in plain C++ float math in a fixed order, so the same seed gives the same bits on every run.
// Every K steps it saves the weights, the Adam moments, the RNG state, the data-loader position and
// the step into the store (optionally with M MiB of extra optimizer state, so checkpoints are large).
// Started on a store that already has steps, it resumes from the latest committed one; the saved
// RNG state and data position fully determine the continuation, so an interrupted and resumed run
// ends with exactly the weights of an uninterrupted one. The last line is the final step and an
// XXH3-64 of the final weights: "final step 200 weights xxh3 0123456789abcdef".
//
// With --async the saves go through AsyncSaver (training continues while a step persists); with
// --flush-deadline S, SIGTERM, SIGPWR or SIGUSR1 stop the run within S seconds: the save in flight is
// committed if it fits, else abandoned, and the last line is "stopped at step N, latest step M ...".
#include <array>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/store/flush.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/store/open_store.hpp>

#include "cli.hpp"

namespace {

constexpr const char* kTool = "ckpt-demo-train";
constexpr std::size_t kIn = 32, kHidden = 64;
constexpr std::size_t kSamples = 4096;  // the synthetic data set
constexpr float kLearningRate = 0.01f, kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f, kNoise = 0.01f;
const char* const kModel = "mlp-32-64-1";

// A counter-based mix: data and teacher are pure functions of (seed, indices), never of run history.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
// Uniform in [-1, 1) with 24 bits, exactly representable in float.
float unit(std::uint64_t h) { return static_cast<float>(h >> 40) / 8388608.0f - 1.0f; }

// xoshiro256**: the training RNG (input noise). Its 32 bytes of state are saved with every step.
struct Rng {
  std::array<std::uint64_t, 4> s{};
  explicit Rng(std::uint64_t seed = 0) {
    for (auto& w : s) w = seed = mix(seed);
  }
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  [[nodiscard]] std::string bytes() const {  // little-endian, explicitly
    std::string out(32, '\0');
    for (std::size_t w = 0; w < 4; ++w)
      for (std::size_t b = 0; b < 8; ++b) out[w * 8 + b] = static_cast<char>(s[w] >> (8 * b));
    return out;
  }
  [[nodiscard]] bool load(const std::string& in) {
    if (in.size() != 32) return false;
    for (std::size_t w = 0; w < 4; ++w) {
      s[w] = 0;
      for (std::size_t b = 0; b < 8; ++b) s[w] |= std::uint64_t{static_cast<unsigned char>(in[w * 8 + b])} << (8 * b);
    }
    return true;
  }
};

struct Tensor {
  const char* name;
  std::vector<std::uint64_t> shape;
  std::vector<float> value, grad, m, v;
};

struct Model {
  Tensor w1{"mlp.w1", {kHidden, kIn}, {}, {}, {}, {}};
  Tensor b1{"mlp.b1", {kHidden}, {}, {}, {}, {}};
  Tensor w2{"mlp.w2", {1, kHidden}, {}, {}, {}, {}};
  Tensor b2{"mlp.b2", {1}, {}, {}, {}, {}};
  [[nodiscard]] std::array<Tensor*, 4> params() { return {&w1, &b1, &w2, &b2}; }
};

std::size_t elements(const Tensor& t) {
  std::size_t n = 1;
  for (const auto d : t.shape) n *= static_cast<std::size_t>(d);
  return n;
}

void init_model(Model& model, std::uint64_t seed) {
  std::uint64_t k = 0;
  for (Tensor* t : model.params()) {
    const std::size_t n = elements(*t);
    const float scale = t->shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(t->shape[1])) : 0.0f;
    t->value.resize(n);
    for (std::size_t i = 0; i < n; ++i) t->value[i] = scale * unit(mix(seed * 0x100000001B3ULL + 0x5EED0000 + k++));
    t->grad.assign(n, 0.0f);
    t->m.assign(n, 0.0f);
    t->v.assign(n, 0.0f);
  }
}

// The data set and its teacher: functions of (seed, sample, feature).
float feature(std::uint64_t seed, std::uint64_t sample, std::uint64_t j) { return unit(mix(mix(seed ^ 0xDA7A) + sample * kIn + j)); }
float teacher(std::uint64_t seed, const float* x) {
  float a = 0.0f, b = 0.0f;
  for (std::size_t j = 0; j < kIn; ++j) {
    a += unit(mix(seed ^ 0x7EAC4E5ULL) + j) * x[j];
    b += unit(mix(seed ^ 0xB0B) + j) * x[j];
  }
  return std::sin(a) + 0.5f * std::tanh(b);
}

// The loader visits every sample once per epoch in an order that is a function of (seed, epoch).
struct Loader {
  std::uint64_t seed = 0, epoch = 0, offset = 0;
  std::vector<std::uint32_t> order;
  void shuffle() {
    order.resize(kSamples);
    for (std::uint32_t i = 0; i < kSamples; ++i) order[i] = i;
    std::uint64_t h = mix(seed ^ 0x5A5A5A5AULL) ^ mix(epoch + 1);
    for (std::size_t i = kSamples - 1; i > 0; --i) {
      h = mix(h);
      std::swap(order[i], order[h % (i + 1)]);
    }
  }
  std::uint32_t next() {
    if (order.empty()) shuffle();
    const std::uint32_t s = order[offset];
    if (++offset == kSamples) {
      ++epoch;
      offset = 0;
      shuffle();
    }
    return s;
  }
};

struct Trainer {
  std::uint64_t seed = 1, step = 0, batch = 32;
  Model model;
  Rng rng;
  Loader loader;
  float last_loss = 0.0f;

  // One Adam step on one batch; every sum runs in the same order every time.
  void train_step() {
    for (Tensor* t : model.params()) std::fill(t->grad.begin(), t->grad.end(), 0.0f);
    float loss = 0.0f;
    std::array<float, kIn> x{};
    std::array<float, kHidden> h{};
    for (std::uint64_t b = 0; b < batch; ++b) {
      const std::uint32_t sample = loader.next();
      for (std::size_t j = 0; j < kIn; ++j) x[j] = feature(seed, sample, j);
      const float y = teacher(seed, x.data());
      for (std::size_t j = 0; j < kIn; ++j) x[j] += kNoise * unit(rng.next());  // augmentation: the RNG matters
      float out = model.b2.value[0];
      for (std::size_t k = 0; k < kHidden; ++k) {
        float a = model.b1.value[k];
        for (std::size_t j = 0; j < kIn; ++j) a += model.w1.value[k * kIn + j] * x[j];
        h[k] = std::tanh(a);
        out += model.w2.value[k] * h[k];
      }
      const float err = out - y;
      loss += err * err;
      const float d_out = 2.0f * err / static_cast<float>(batch);
      model.b2.grad[0] += d_out;
      for (std::size_t k = 0; k < kHidden; ++k) {
        model.w2.grad[k] += d_out * h[k];
        const float d_a = d_out * model.w2.value[k] * (1.0f - h[k] * h[k]);
        model.b1.grad[k] += d_a;
        for (std::size_t j = 0; j < kIn; ++j) model.w1.grad[k * kIn + j] += d_a * x[j];
      }
    }
    ++step;
    const float c1 = 1.0f - std::pow(kBeta1, static_cast<float>(step));
    const float c2 = 1.0f - std::pow(kBeta2, static_cast<float>(step));
    for (Tensor* t : model.params())
      for (std::size_t i = 0; i < t->value.size(); ++i) {
        const float g = t->grad[i];
        t->m[i] = kBeta1 * t->m[i] + (1.0f - kBeta1) * g;
        t->v[i] = kBeta2 * t->v[i] + (1.0f - kBeta2) * g * g;
        t->value[i] -= kLearningRate * (t->m[i] / c1) / (std::sqrt(t->v[i] / c2) + kEps);
      }
    last_loss = loss / static_cast<float>(batch);
  }

  // XXH3-64 of every weight, as little-endian IEEE-754 bytes, in parameter order.
  [[nodiscard]] std::uint64_t weights_digest() {
    std::string bytes;
    for (Tensor* t : model.params())
      for (const float f : t->value) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &f, 4);
        for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(bits >> (8 * b)));
      }
    return ckpt::xxh3_64(bytes.data(), bytes.size());
  }
};

// Extra optimizer state: deterministic bytes of (seed, step), so checkpoints can be made large.
void fill_extra(std::vector<unsigned char>& extra, std::uint64_t seed, std::uint64_t step) {
  std::uint64_t h = mix(seed ^ 0xE7A) ^ mix(step);
  for (std::size_t i = 0; i < extra.size(); i += 8) {
    h = mix(h);
    for (std::size_t b = 0; b < 8 && i + b < extra.size(); ++b) extra[i + b] = static_cast<unsigned char>(h >> (8 * b));
  }
}

// One save's content, the same whichever way it is saved. The request only points at the trainer's memory.
ckpt::SaveRequest save_request(Trainer& t, std::vector<unsigned char>& extra, std::uint64_t extra_mib) {
  ckpt::SaveRequest r(t.step);
  // F32 tensors are little-endian on disk (spec/FORMAT.md); this demo runs on little-endian hosts.
  for (Tensor* p : t.model.params()) r.add_tensor(p->name, ckpt::DType::F32, p->shape, p->value.data(), p->value.size() * sizeof(float));
  for (Tensor* p : t.model.params()) {
    r.add_optimizer_tensor(std::string("adam.m.") + p->name, ckpt::DType::F32, p->shape, p->m.data(), p->m.size() * sizeof(float));
    r.add_optimizer_tensor(std::string("adam.v.") + p->name, ckpt::DType::F32, p->shape, p->v.data(), p->v.size() * sizeof(float));
  }
  if (!extra.empty()) {
    fill_extra(extra, t.seed, t.step);
    r.add_optimizer_tensor("adam.extra_state", ckpt::DType::U8, {extra.size()}, extra.data(), extra.size());
  }
  auto& st = r.state();
  st.rng = t.rng.bytes();
  st.data = ckpt::DataPosition{t.loader.epoch, t.loader.offset, ""};
  st.values["seed"] = static_cast<std::int64_t>(t.seed);
  st.values["batch"] = static_cast<std::int64_t>(t.batch);
  st.values["model"] = kModel;
  st.values["extra_mib"] = static_cast<std::int64_t>(extra_mib);
  st.values["loss"] = static_cast<double>(t.last_loss);
  return r;
}

// The synchronous save: the same request through one transaction.
ckpt::Status save(ckpt::Store& store, const ckpt::SaveRequest& request) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(request.step()));
  for (const auto& t : request.tensors()) {
    if (t.optimizer) CKPT_TRY(tx->add_optimizer_tensor(t.name, t.dtype, t.global_shape, t.data, t.size));
    else CKPT_TRY(tx->add_tensor(t.name, t.dtype, t.global_shape, t.data, t.size));
  }
  const auto optimizer = tx->state().optimizer_tensors;
  tx->state() = request.state();
  tx->state().optimizer_tensors = optimizer;
  CKPT_ASSIGN_OR_RETURN(ckpt::CommitResult r, tx->commit());
  if (!r.retention.ok()) std::fprintf(stderr, "%s: note: retention: %s\n", kTool, r.retention.message().c_str());
  return ckpt::Status();
}

// Restores everything from the latest committed step; the model was initialised already (shapes).
ckpt::Status resume(ckpt::Store& store, Trainer& t, std::vector<unsigned char>& extra, std::uint64_t extra_mib) {
  const auto latest = store.latest();
  if (!latest) return ckpt::make_error(ckpt::Code::not_found, store.path() + ": no committed step to resume from");
  CKPT_ASSIGN_OR_RETURN(auto reader, store.open_step(*latest));
  const auto& st = reader.state();
  auto int_value = [&](const char* key) -> std::int64_t {
    const auto it = st.values.find(key);
    return it != st.values.end() && it->second.is_int() ? it->second.as_int() : -1;
  };
  const auto model_it = st.values.find("model");
  if (model_it == st.values.end() || !model_it->second.is_string() || model_it->second.as_string() != kModel)
    return ckpt::make_error(ckpt::Code::invalid_argument, store.path() + ": the latest step was not saved by " + kTool);
  if (int_value("seed") != static_cast<std::int64_t>(t.seed) || int_value("batch") != static_cast<std::int64_t>(t.batch) ||
      int_value("extra_mib") != static_cast<std::int64_t>(extra_mib))
    return ckpt::make_error(ckpt::Code::invalid_argument,
                            store.path() + ": the run in this store used --seed " + std::to_string(int_value("seed")) + " --batch " +
                                std::to_string(int_value("batch")) + " --extra-mib " + std::to_string(int_value("extra_mib")) +
                                "; resume it with the same options");
  for (Tensor* p : t.model.params()) {
    CKPT_TRY(reader.read_tensor(p->name, p->value.data(), p->value.size() * sizeof(float)));
    CKPT_TRY(reader.read_tensor(std::string("adam.m.") + p->name, p->m.data(), p->m.size() * sizeof(float)));
    CKPT_TRY(reader.read_tensor(std::string("adam.v.") + p->name, p->v.data(), p->v.size() * sizeof(float)));
  }
  if (!extra.empty()) {
    CKPT_TRY(reader.read_tensor("adam.extra_state", extra.data(), extra.size()));
    std::vector<unsigned char> expected(extra.size());
    fill_extra(expected, t.seed, reader.info().step);
    if (expected != extra)
      return ckpt::make_error(ckpt::Code::corrupt, store.path() + ": adam.extra_state of step " + std::to_string(reader.info().step) +
                                                       " is not what was saved");
  }
  if (!t.rng.load(st.rng))
    return ckpt::make_error(ckpt::Code::corrupt, store.path() + ": RNG state of " + std::to_string(st.rng.size()) + " bytes, expected 32");
  if (st.data.offset >= kSamples)
    return ckpt::make_error(ckpt::Code::corrupt, store.path() + ": data offset " + std::to_string(st.data.offset) + " past the data set");
  t.loader.epoch = st.data.epoch;
  t.loader.offset = st.data.offset;
  t.loader.shuffle();  // the order of the saved epoch, then continue at the saved offset
  t.step = reader.info().step;
  return ckpt::Status();
}

struct RunFlags {
  std::string store_path;
  std::uint64_t steps, save_every, extra_mib, staging_mib;
  double flush_deadline;
  bool quiet, async;
};

// Resumes from the latest step when there is one, then trains and saves every save_every steps.
// A directory store, or one on objects (s3://), saved and resumed through the same calls.
int train(ckpt::Store& store, Trainer& t, std::vector<unsigned char>& extra, const RunFlags& flags) {
  const std::uint64_t steps = flags.steps, save_every = flags.save_every, extra_mib = flags.extra_mib;
  const bool quiet = flags.quiet;
  if (store.latest()) {
    if (ckpt::Status s = resume(store, t, extra, extra_mib); !s.ok()) return ckpt::cli::report(kTool, s);
    if (!quiet) std::printf("resumed from step %llu\n", static_cast<unsigned long long>(t.step));
  } else if (!quiet) {
    std::printf("starting a new run in %s\n", flags.store_path.c_str());
  }
  std::fflush(stdout);
  std::unique_ptr<ckpt::AsyncSaver> saver;
  {
    const double flush_deadline = flags.flush_deadline;
    if (flush_deadline > 0) {  // the handler is installed in main, before the store opens
      if (const auto estimate = store.estimate_save(); estimate.known() && !quiet)
        std::printf("a save of %llu bytes takes %.3f s at the slowest recorded rate: %s the %.3f s deadline\n",
                    static_cast<unsigned long long>(estimate.bytes), estimate.seconds,
                    estimate.seconds <= flush_deadline ? "fits" : "does NOT fit", flush_deadline);
    }
    if (flags.async) {
      ckpt::AsyncSaveOptions o;
      o.staging_bytes = static_cast<std::size_t>(flags.staging_mib) << 20;
      auto created = ckpt::AsyncSaver::create(store, o);
      if (!created.ok()) return ckpt::cli::report(kTool, created.status());
      saver = std::move(created).value();
    }
  }
  // A flush request (a signal) ends the run here: the save in flight is committed or abandoned in time.
  auto stop_requested = [&]() -> std::optional<int> {
    const auto deadline = ckpt::flush_requested();
    if (!deadline) return std::nullopt;
    ckpt::Status flushed = saver ? saver->flush(*deadline) : ckpt::Status();
    const auto latest = store.latest();
    const double left = std::chrono::duration<double>(*deadline - std::chrono::steady_clock::now()).count();
    std::printf("stopped at step %llu by signal %d, latest step %s, %.3f s before the deadline: %s\n",
                static_cast<unsigned long long>(t.step), ckpt::flush_signal(),
                latest ? std::to_string(latest->step).c_str() : "none", left,
                flushed.ok() ? "every save taken committed" : flushed.to_string().c_str());
    std::fflush(stdout);
    const bool clean = flushed.ok() || flushed.code() == ckpt::Code::cancelled;
    return clean ? static_cast<int>(ckpt::cli::kOk) : ckpt::cli::report(kTool, flushed);
  };
  while (t.step < steps) {
    if (auto rc = stop_requested()) return *rc;
    t.train_step();
    if (t.step % save_every == 0 || t.step == steps) {
      if (!quiet) {
        std::printf("step %llu loss %.6f: saving...\n", static_cast<unsigned long long>(t.step), static_cast<double>(t.last_loss));
        std::fflush(stdout);
      }
      ckpt::SaveRequest request = save_request(t, extra, extra_mib);
      if (saver) {
        auto ticket = saver->save(std::move(request));
        if (!ticket.ok() && ticket.status().code() == ckpt::Code::cancelled) {
          if (auto rc = stop_requested()) return *rc;
        }
        if (!ticket.ok()) return ckpt::cli::report(kTool, ticket.status());
      } else if (ckpt::Status s = save(store, request); !s.ok()) {
        return ckpt::cli::report(kTool, s);
      }
      if (!quiet) {
        std::printf(saver ? "step %llu staged\n" : "step %llu saved\n", static_cast<unsigned long long>(t.step));
        std::fflush(stdout);
      }
    }
  }
  if (saver) {
    ckpt::Status waited = saver->wait();
    if (auto rc = stop_requested()) return *rc;
    if (!waited.ok()) return ckpt::cli::report(kTool, waited);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(t.weights_digest()));
  std::printf("final step %llu weights xxh3 %s\n", static_cast<unsigned long long>(t.step), hex);
  return static_cast<int>(ckpt::cli::kOk);
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(A small deterministic training run (a 2-layer MLP trained by Adam on synthetic data) that
checkpoints weights, optimizer state, RNG state, data position and step into a ckpt store
every K steps, and resumes from the latest committed step when the store has one. The last
line is "final step N weights xxh3 HEX": equal for an interrupted-and-resumed run and an
uninterrupted one.

Exit status: 0 finished, 1 the store is damaged, 2 usage or I/O error.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string store_path;
    std::uint64_t steps = 200, save_every = 20, seed = 1, extra_mib = 0, batch = 32, keep = 3;
    bool quiet = false, async = false;
    double flush_deadline = 0;
    std::uint64_t staging_mib = 64;
    app.add_option("--store", store_path, "store directory, or s3://bucket/prefix (created when missing)")->required();
    app.add_option("--steps", steps, "train until this step")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
    app.add_option("--save-every", save_every, "save every K steps (and at the last step)")
        ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
    app.add_option("--seed", seed, "seed of the data, the teacher, the initial weights and the RNG");
    app.add_option("--extra-mib", extra_mib, "add M MiB of extra optimizer state to every checkpoint")
        ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{4096}));
    app.add_option("--batch", batch, "samples per step")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{4096}));
    app.add_option("--keep", keep, "keep the last N checkpoints (0: keep all)");
    app.add_flag("--async", async, "save in the background: training goes on while a step persists (spec/ASYNC.md)");
    app.add_option("--staging-mib", staging_mib, "--async: staging pool size in MiB (a larger state streams through it)")
        ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
    app.add_option("--flush-deadline", flush_deadline,
                   "on SIGTERM, SIGPWR or SIGUSR1 stop within SECONDS: the save in flight is committed if it fits, else abandoned")
        ->check(CLI::PositiveNumber);
    app.add_flag("-q,--quiet", quiet, "print only the final line");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;
    // First of all: a signal that comes while the store opens or the run resumes is a flush request too,
    // never the default action (death by SIGTERM).
    if (flush_deadline > 0) {
      const auto hold_up = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(flush_deadline));
      if (ckpt::Status s = ckpt::install_flush_handler({SIGTERM, SIGPWR, SIGUSR1}, hold_up); !s.ok())
        return ckpt::cli::report(kTool, s);
    }

    Trainer t;
    t.seed = seed;
    t.batch = batch;
    t.rng = Rng(seed ^ 0x12345);
    t.loader.seed = seed;
    init_model(t.model, seed);
    std::vector<unsigned char> extra(static_cast<std::size_t>(extra_mib) << 20);

    const RunFlags flags{store_path, steps, save_every, extra_mib, staging_mib, flush_deadline, quiet, async};
    // A directory or a store on objects (spec/OBJECT.md 7, 4.9): the same calls, AsyncSaver and the flush
    // deadline included.
    ckpt::StoreOptions options;
    options.create_if_missing = true;
    options.retention.keep_last = keep;
    options.open_objects = ckpt::cli::object_opener();
    auto store = ckpt::open_store(store_path, ckpt::Access::read_write, options);
    if (!store.ok()) return ckpt::cli::report(kTool, store.status());
    if (!quiet)
      for (const auto& p : (*store)->recovery_report().log_damage) std::printf("note: damaged log object: %s\n", p.message.c_str());
    if (!quiet && !(*store)->recovery_report().clean()) {
      std::printf("recovered the store:");
      for (const auto& a : (*store)->recovery_report().actions) std::printf(" %s;", a.describe().c_str());
      std::printf("\n");
    }
    return train(**store, t, extra, flags);
  });
}
