// Crash-state exploration of the store (spec/JOURNAL.md 5.3, 6.4, 10): saves run over SimFs, and at
// every persistence point the test enumerates the states a crash could leave (all of them where few,
// a seeded sample where many), recovers each one with a writable open and checks the oracle:
//   - the store opens, is not corrupt, and holds exactly the steps the protocol allows: every step
//     acknowledged before the crash (minus what retention had retired), plus possibly the step whose
//     save was in flight; so latest() is the last acknowledged step or the one in flight;
//   - every step it lists reads back bit for bit (tensors and training state) and verifies;
//   - nothing but JOURNAL, LOCK and live step directories is left;
//   - a later save gets a txn id and a directory name never used before.
// The same is done while retention retires steps and while recovery itself runs (crash the recovery,
// recover again). Fault injection (FaultFs) fails every operation of a save in turn.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <deque>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ckpt/store/async_save.hpp>
#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/store/store.hpp>

using namespace ckpt;

#if defined(__SANITIZE_ADDRESS__)
#define CKPT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_TEST_ASAN 1
#endif
#endif
#ifndef CKPT_TEST_ASAN
#define CKPT_TEST_ASAN 0
#endif

namespace {

// Sampling budget. Release must check >= 10,000 states in all; ASan runs a smaller, still seeded share.
constexpr std::uint64_t kExhaustiveLimit = CKPT_TEST_ASAN ? 48 : 160;  // enumerate every state up to this count
constexpr std::uint64_t kSamplesPerPoint = CKPT_TEST_ASAN ? 100 : 700;   // otherwise this many seeded samples
constexpr std::uint64_t kRequiredStates = CKPT_TEST_ASAN ? 2000 : 10000;
// Every test case below adds its states here; the last one checks the whole run (issue 9: >= 10^5 in Release).
constexpr std::uint64_t kRequiredRunStates = CKPT_TEST_ASAN ? 10000 : 100000;
std::uint64_t g_run_states = 0;
std::uint64_t g_run_cases = 0;
constexpr std::size_t kRecoveryCrashesPerMoment = 2;  // crashed states per moment whose recovery is crashed again
constexpr std::size_t kRecoveryStride = CKPT_TEST_ASAN ? 3 : 1;
constexpr std::uint64_t kSaveAgainEvery = 8;  // a full save after every k-th recovered state (names never reused)

constexpr std::size_t kWeights = 4000;  // 16000 bytes of F32: four 4 KiB chunks and several writes, so tears split a tensor
constexpr std::size_t kMoments = 300;   // 1200 bytes: one chunk
const char* const kStore = "/store";

StoreOptions store_options(bool create, RetentionPolicy retention = {}, bool reuse_files = false) {
  StoreOptions o;
  o.reuse_files = reuse_files;
  o.create_if_missing = create;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = 9;  // sector-aligned pieces: tears at 512 B boundaries fall between and inside them
  o.buffer_size = 4096;
  o.retention = retention;
  return o;
}

// Everything a step holds is a function of its number, so any recovered step can be checked bit for bit.
std::vector<float> tensor_values(std::uint64_t step, std::size_t n, std::uint64_t salt) {
  std::vector<float> v(n);
  std::uint64_t x = step * 0x9E3779B97F4A7C15ULL + salt;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    v[i] = static_cast<float>(static_cast<std::int64_t>(x >> 40) - (std::int64_t{1} << 23)) / 4096.0f;
  }
  return v;
}

TrainingState expected_state(std::uint64_t step) {
  TrainingState s;
  s.step = step;
  s.rng = std::string("rng\0state-", 10) + std::to_string(step * 7919);
  s.data = DataPosition{step / 3, step * 64, "sampler@" + std::to_string(step)};
  s.optimizer_tensors = {"adam.m/w"};
  s.values["lr"] = 0.5 / static_cast<double>(step + 1);
  s.values["tag"] = "step " + std::to_string(step);
  s.values["final"] = false;
  return s;
}

Result<CommitResult> save_step(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const auto w = tensor_values(step, kWeights, 1);
  const auto m = tensor_values(step, kMoments, 2);
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kWeights}, w.data(), w.size() * sizeof(float)));
  CKPT_TRY(tx->add_optimizer_tensor("adam.m/w", DType::F32, {kMoments}, m.data(), m.size() * sizeof(float)));
  const TrainingState want = expected_state(step);
  tx->state().rng = want.rng;
  tx->state().data = want.data;
  tx->state().values = want.values;
  return tx->commit();
}

// "" when the step reads back exactly as save_step wrote it and every chunk verifies; else what differs.
std::string check_step_exact(Store& store, const StepInfo& info) {
  const std::string where = "step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + "): ";
  auto reader = store.open_step(info);
  if (!reader.ok()) return where + reader.status().to_string();
  std::vector<float> w(kWeights), m(kMoments);
  Status s = reader->read_tensor("w", w.data(), w.size() * sizeof(float));
  if (s.ok()) s = reader->read_tensor("adam.m/w", m.data(), m.size() * sizeof(float));
  if (!s.ok()) return where + s.to_string();
  const auto want_w = tensor_values(info.step, kWeights, 1);
  const auto want_m = tensor_values(info.step, kMoments, 2);
  if (std::memcmp(w.data(), want_w.data(), w.size() * sizeof(float)) != 0) return where + "tensor w differs";
  if (std::memcmp(m.data(), want_m.data(), m.size() * sizeof(float)) != 0) return where + "tensor adam.m/w differs";
  if (reader->state() != expected_state(info.step)) return where + "training state differs";
  auto verified = store.verify_step(info.step);
  if (!verified.ok()) return where + verified.status().to_string();
  if (!verified->ok()) {
    std::string p = where + "verify_step found damage:";
    for (const auto& line : verified->problems) p += " " + line.message;
    for (const auto& shard : verified->shards)
      for (const auto& prob : shard.problems) p += " " + prob.message;
    return p;
  }
  return "";
}

// What a crash at one moment may leave: the oracle of the file header.
struct Expectation {
  std::vector<std::uint64_t> acked;      // live steps acknowledged before this moment, in commit order
  std::optional<std::uint64_t> in_flight;  // the step whose save (commit + retention) had not returned
  std::set<std::uint64_t> may_retire;    // acked steps the in-flight commit's retention may retire
  std::string label;
};

struct Explorer {
  std::uint64_t states = 0;   // crash states recovered and checked
  std::uint64_t points = 0;   // persistence points visited
  std::uint64_t exhaustive_points = 0, sampled_points = 0;
  std::uint64_t saved_again = 0;
  std::uint64_t with_in_flight = 0;  // states in which the in-flight step had committed
  std::uint64_t failures = 0;
};

template <class Fs>
std::vector<std::string> sorted_entries(Fs& fs, const std::string& dir) {
  auto list = fs.list_dir(dir);
  if (!list.ok()) return {"<" + list.status().to_string() + ">"};
  std::vector<std::string> names = *list;
  std::sort(names.begin(), names.end());
  return names;
}

// Recovers `crashed` (a writable open) and checks the oracle. Returns "" or the first violation. With
// save_again, also saves one more step and checks its txn id and directory name were never used.
std::string recover_and_check(SimFs& crashed, const Expectation& e, Explorer& ex, bool save_again,
                              std::vector<std::uint64_t>* listed_out = nullptr) {
  // Directory names present before recovery count as used, whether or not recovery removes them.
  std::uint64_t max_txn_before = 0;
  std::set<std::string> dirs_before;
  for (const auto& name : sorted_entries(crashed, kStore)) {
    std::uint64_t s = 0, t = 0;
    if (parse_step_dir_name(name, s, t)) {
      dirs_before.insert(name);
      max_txn_before = std::max(max_txn_before, t);
    }
  }
  auto opened = Store::open(crashed, kStore, Access::read_write, store_options(false));
  if (!opened.ok()) return "writable open failed: " + opened.status().to_string();
  Store& store = **opened;
  if (store.recovery_report().corrupt()) return "recovery reports corruption: " + store.recovery_report().corruption_status().to_string();
  std::vector<std::uint64_t> listed;
  for (const auto& s : store.steps()) listed.push_back(s.step);
  if (listed_out != nullptr) *listed_out = listed;
  auto text = [](const std::vector<std::uint64_t>& v) {
    std::string t = "{";
    for (const auto x : v) t += (t.size() > 1 ? "," : "") + std::to_string(x);
    return t + "}";
  };
  // Allowed sets: acked (minus retirable ones only once the in-flight step is durable) [+ in flight].
  const bool flight_committed = e.in_flight && !listed.empty() && listed.back() == *e.in_flight &&
                                std::find(e.acked.begin(), e.acked.end(), *e.in_flight) == e.acked.end();
  std::vector<std::uint64_t> required, allowed = e.acked;
  for (const auto s : e.acked)
    if (!(flight_committed && e.may_retire.count(s) != 0)) required.push_back(s);
  if (e.in_flight) allowed.push_back(*e.in_flight);
  for (const auto s : required)
    if (std::find(listed.begin(), listed.end(), s) == listed.end())
      return "acknowledged step " + std::to_string(s) + " is missing; listed " + text(listed);
  for (const auto s : listed)
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
      return "step " + std::to_string(s) + " should not exist; listed " + text(listed);
  if (!std::is_sorted(listed.begin(), listed.end()) || std::adjacent_find(listed.begin(), listed.end()) != listed.end())
    return "steps out of commit order or repeated: " + text(listed);
  // latest is the last acknowledged step or the one in flight.
  const auto latest = store.latest();
  const std::optional<std::uint64_t> last_acked = e.acked.empty() ? std::nullopt : std::optional<std::uint64_t>(e.acked.back());
  if (latest.has_value() != (last_acked.has_value() || flight_committed))
    return "latest() is " + (latest ? std::to_string(latest->step) : std::string("none")) + ", expected a step";
  if (latest && !((last_acked && latest->step == *last_acked) || (flight_committed && latest->step == *e.in_flight)))
    return "latest() is step " + std::to_string(latest->step) + ", neither the last acknowledged nor the one in flight";
  if (flight_committed) ++ex.with_in_flight;
  for (const auto& s : store.steps())
    if (std::string p = check_step_exact(store, s); !p.empty()) return p;
  // Recovery leaves only the journal, the lock and live step directories, and the files kept for reuse
  // (slots/: free space, spec/JOURNAL.md 10.1).
  const auto have = sorted_entries(crashed, kStore);
  std::vector<std::string> want{"JOURNAL", "LOCK"};
  for (const auto& s : store.steps()) want.push_back(s.dir);
  if (std::find(have.begin(), have.end(), std::string(journal::kSlotsName)) != have.end()) want.emplace_back(journal::kSlotsName);
  std::sort(want.begin(), want.end());
  if (have != want) {
    std::string t;
    for (const auto& n : have) t += " " + n;
    return "store holds" + t + " after recovery";
  }
  if (!store.recovery_report().unknown_entries.empty()) return "unknown entries after a crash: " + store.recovery_report().unknown_entries.front();
  if (save_again) {
    const std::uint64_t next_step = e.in_flight.value_or(last_acked.value_or(0)) + 1000;
    std::uint64_t max_txn = max_txn_before;
    for (const auto& t : store.transactions()) max_txn = std::max(max_txn, t.txn);
    for (const auto& d : store.recovery_report().journal.corruption)
      for (const auto& r : d.unapplied) max_txn = std::max(max_txn, r.txn());
    if (store.recovery_report().journal.torn_tail)
      for (const auto& r : store.recovery_report().journal.torn_tail->unapplied) max_txn = std::max(max_txn, r.txn());
    auto again = save_step(store, next_step);
    if (!again.ok()) return "a save after recovery failed: " + again.status().to_string();
    if (again->step.txn <= max_txn)
      return "txn id " + std::to_string(again->step.txn) + " reused (ids up to " + std::to_string(max_txn) + " were seen)";
    if (dirs_before.count(again->step.dir) != 0) return "directory name " + again->step.dir + " reused";
    if (std::string p = check_step_exact(store, again->step); !p.empty()) return "after recovery: " + p;
    ++ex.saved_again;
  }
  return "";
}

// One moment of a run: the SimFs as it was there (unsynced items included) and the oracle for it.
struct Moment {
  SimFs fs;
  Expectation expect;
  PersistencePoint point;
};

// Visits the crash states of one moment: all of them when few, else the durable state plus seeded samples.
template <class Visit>
void for_each_crash_state(const SimFs& fs, std::uint64_t seed, Explorer& ex, Visit&& visit,
                          std::uint64_t samples = kSamplesPerPoint) {
  const std::uint64_t count = fs.crash_state_count();
  ++ex.points;
  if (count <= kExhaustiveLimit) {
    ++ex.exhaustive_points;
    for (std::uint64_t i = 0; i < count; ++i) {
      auto state = fs.crash_state(i);
      REQUIRE(state.ok());
      visit(*state, "crash state " + std::to_string(i) + " of " + std::to_string(count));
    }
    return;
  }
  ++ex.sampled_points;
  SimFs durable = fs.durable_state();
  visit(durable, "durable state of " + std::to_string(count));
  for (std::uint64_t k = 0; k < samples; ++k) {
    const std::uint64_t s = seed * 1000003 + k;
    SimFs sampled = fs.sample_crash_state(s);
    visit(sampled, "sampled state seed " + std::to_string(s) + " of " + std::to_string(count));
  }
}

void explore_moment(const Moment& m, std::uint64_t seed, Explorer& ex, std::uint64_t max_failures = 5,
                    std::uint64_t samples = kSamplesPerPoint) {
  for_each_crash_state(m.fs, seed, ex, [&](SimFs& state, const std::string& which) {
    const bool again = (ex.states % kSaveAgainEvery) == 0;
    ++ex.states;
    const std::string problem = recover_and_check(state, m.expect, ex, again);
    if (!problem.empty()) {
      ++ex.failures;
      if (ex.failures <= max_failures) {
        FAIL_CHECK(m.expect.label << ", after " << fs_op_name(m.point.op) << " " << m.point.path << " (point "
                                  << m.point.sequence << "), " << which << ": " << problem << "\n"
                                  << state.crash_note());
      }
    }
  }, samples);
}

// What apply_retention would retire once `step` is committed after `acked`.
std::set<std::uint64_t> retirable(const std::vector<std::uint64_t>& acked, std::uint64_t step, RetentionPolicy retention) {
  std::set<std::uint64_t> out;
  if (!retention.enabled()) return out;
  std::vector<std::uint64_t> after = acked;
  after.push_back(step);
  for (std::size_t k = 0; k < after.size(); ++k) {
    const bool recent = after.size() - k <= retention.keep_last;
    const bool milestone = retention.keep_every != 0 && after[k] % retention.keep_every == 0;
    if (!recent && !milestone) out.insert(after[k]);
  }
  return out;
}

// The same through AsyncSaver (spec/ASYNC.md 4): the persistence points happen on the saver's worker,
// so the oracle is kept by the worker itself: on_complete acknowledges a step (after its commit and
// retention), and the step in flight is the oldest one taken and not completed. With max_in_flight 2 and
// a pool smaller than a step, the next save is being staged while the previous one persists.
std::vector<Moment> record_async_saves(const std::vector<std::uint64_t>& steps, std::size_t warmup, RetentionPolicy retention,
                                       std::size_t max_in_flight) {
  SimFs sim;
  std::vector<Moment> moments;
  std::mutex mutex;  // guards everything below: the hook and on_complete run on the worker
  Expectation now;
  std::deque<std::uint64_t> taken;  // saves taken and not completed, in order
  bool recording = false, all_ok = true;
  auto set_in_flight = [&] {
    now.in_flight.reset();
    now.may_retire.clear();
    if (taken.empty()) return;
    now.in_flight = taken.front();
    now.may_retire = retirable(now.acked, taken.front(), retention);
    now.label = "async save of step " + std::to_string(taken.front()) + (taken.size() > 1 ? ", the next one staged" : "");
  };
  sim.set_persistence_hook(
      [&](const SimFs& fs, const PersistencePoint& p) {
        std::lock_guard<std::mutex> lock(mutex);
        if (recording) moments.push_back(Moment{SimFs(fs), now, p});
      },
      true);
  {
    auto store = Store::open(sim, kStore, Access::read_write, store_options(true, retention));
    REQUIRE(store.ok());
    AsyncSaveOptions o;
    o.staging_bytes = 12 << 10;  // three 4 KiB slabs: a step (about 17 KiB) streams through them
    o.slab_bytes = 4 << 10;
    o.max_in_flight = max_in_flight;
    o.on_complete = [&](const SaveOutcome& out) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!out.status.ok() || !out.commit) {
        all_ok = false;
        return;
      }
      for (const auto& gone : out.commit->retired)
        now.acked.erase(std::remove(now.acked.begin(), now.acked.end(), gone.step), now.acked.end());
      now.acked.push_back(out.step);
      taken.pop_front();
      set_in_flight();
    };
    auto saver = AsyncSaver::create(**store, o);
    REQUIRE(saver.ok());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (i == warmup) {
        REQUIRE((*saver)->wait().ok());
        std::lock_guard<std::mutex> lock(mutex);
        recording = true;
      }
      const auto w = tensor_values(steps[i], kWeights, 1);
      const auto m = tensor_values(steps[i], kMoments, 2);
      SaveRequest r(steps[i]);
      r.add_tensor("w", DType::F32, {kWeights}, w.data(), w.size() * sizeof(float));
      r.add_optimizer_tensor("adam.m/w", DType::F32, {kMoments}, m.data(), m.size() * sizeof(float));
      const TrainingState want = expected_state(steps[i]);
      r.state() = want;
      {
        std::lock_guard<std::mutex> lock(mutex);
        taken.push_back(steps[i]);
        set_in_flight();  // the front is unchanged when one is in flight; the label says the next is staged
      }
      auto ticket = (*saver)->save(std::move(r));
      REQUIRE(ticket.ok());
      REQUIRE_FALSE(ticket->skipped);
    }
    REQUIRE((*saver)->wait().ok());
    std::lock_guard<std::mutex> lock(mutex);
    now.label = "closing the store after async saves";
  }
  sim.set_persistence_hook(nullptr);
  REQUIRE(all_ok);
  return moments;
}

// Runs `saves` steps into a fresh store over SimFs and records every moment (each persistence point,
// including every mutation) of the saves after the first `warmup`.
std::vector<Moment> record_saves(const std::vector<std::uint64_t>& steps, std::size_t warmup, RetentionPolicy retention,
                                 bool reuse_files = false) {
  SimFs sim;
  std::vector<Moment> moments;
  Expectation now;
  {
    auto store = Store::open(sim, kStore, Access::read_write, store_options(true, retention, reuse_files));
    REQUIRE(store.ok());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      now.in_flight = steps[i];
      now.may_retire = retirable(now.acked, steps[i], retention);
      now.label = "save of step " + std::to_string(steps[i]);
      if (i == warmup)
        sim.set_persistence_hook(
            [&](const SimFs& fs, const PersistencePoint& p) { moments.push_back(Moment{SimFs(fs), now, p}); }, true);
      auto r = save_step(**store, steps[i]);
      REQUIRE(r.ok());
      REQUIRE(r->retention.ok());
      // Acknowledged: the step is live, and what retention retired is gone.
      for (const auto& gone : r->retired)
        now.acked.erase(std::remove(now.acked.begin(), now.acked.end(), gone.step), now.acked.end());
      now.acked.push_back(steps[i]);
      now.in_flight.reset();
      now.may_retire.clear();
    }
    now.label = "closing the store";
  }
  sim.set_persistence_hook(nullptr);
  return moments;
}

// A new store on a simulated file system holding the committed steps 10 and 20, the store closed.
SimFs store_with_steps_10_and_20() {
  SimFs base;
  auto store = Store::open(base, kStore, Access::read_write, store_options(true));
  REQUIRE(store.ok());
  REQUIRE(save_step(**store, 10).ok());
  REQUIRE(save_step(**store, 20).ok());
  store->reset();
  return base;
}

}  // namespace

TEST_CASE("every crash state of saves, retention and recovery recovers to the last acknowledged step", "[crash]") {
  Explorer ex;
  std::uint64_t seed = 1;

  // 1. Saves: a store with two steps, then five more saves explored at every persistence point.
  const auto saves = record_saves({10, 20, 30, 40, 50, 60, 70}, 2, {});
  REQUIRE(saves.size() >= 5 * 12);  // BEGIN, mkdir, shard writes and syncs, MANIFEST, COMMIT per save
  for (const auto& m : saves) explore_moment(m, seed++, ex);
  const std::uint64_t after_saves = ex.states;
  CHECK(ex.with_in_flight > 0);  // some crashes came after the COMMIT was durable

  // 2. Retention: keep the last 2 and every step that is a multiple of 40; saves retire older steps.
  RetentionPolicy retention;
  retention.keep_last = 2;
  retention.keep_every = 40;
  const auto retiring = record_saves({10, 20, 30, 40, 50, 60}, 2, retention);
  bool saw_retire = false;
  for (const auto& m : retiring) {
    saw_retire = saw_retire || (m.point.op == FsOp::rmdir) || (m.point.op == FsOp::unlink);
    explore_moment(m, seed++, ex);
  }
  CHECK(saw_retire);
  const std::uint64_t after_retention = ex.states;

  // 3. Recovery itself: crash states that need recovery work (a torn tail, an open transaction, files
  // to remove) are recovered with a hook, and every moment of that recovery is crashed and recovered
  // again. The second recovery must agree with what the uninterrupted recovery gave.
  std::uint64_t recoveries = 0;
  for (std::size_t i = 0; i < kRecoveryCrashesPerMoment * saves.size(); i += kRecoveryStride) {
    const Moment& m = saves[i / kRecoveryCrashesPerMoment];  // different crashes of every moment
    SimFs crashed = m.fs.sample_crash_state(seed * 7 + 3);
    ++seed;
    // The uninterrupted outcome, on a copy.
    SimFs reference(crashed);
    std::vector<std::uint64_t> reference_steps;
    {
      Explorer scratch;
      const std::string p = recover_and_check(reference, m.expect, scratch, false, &reference_steps);
      if (!p.empty()) {
        FAIL_CHECK("reference recovery of " << m.expect.label << ": " << p);
        continue;
      }
    }
    std::vector<Moment> during;
    Expectation pinned = m.expect;
    pinned.label = m.expect.label + ", crashed, then crashed again during recovery";
    crashed.set_persistence_hook(
        [&](const SimFs& fs, const PersistencePoint& p) { during.push_back(Moment{SimFs(fs), pinned, p}); }, true);
    {
      auto store = Store::open(crashed, kStore, Access::read_write, store_options(false));
      REQUIRE(store.ok());
    }
    crashed.set_persistence_hook(nullptr);
    if (during.empty()) continue;  // nothing to recover in this state
    ++recoveries;
    for (const auto& d : during) {
      for_each_crash_state(d.fs, seed++, ex, [&](SimFs& state, const std::string& which) {
        ++ex.states;
        std::vector<std::uint64_t> listed;
        std::string problem = recover_and_check(state, d.expect, ex, (ex.states % kSaveAgainEvery) == 0, &listed);
        // Recovery decides from durable facts only, so an interrupted one ends where the whole one did.
        if (problem.empty() && listed != reference_steps) problem = "a recovery crashed midway decided differently";
        if (!problem.empty() && ++ex.failures <= 5)
          FAIL_CHECK(d.expect.label << ", after " << fs_op_name(d.point.op) << " " << d.point.path << ", " << which << ": "
                                    << problem << "\n"
                                    << state.crash_note());
      });
    }
  }
  CHECK(recoveries > 0);

  std::printf("crash exploration%s: %llu crash states checked at %llu persistence points (%llu enumerated whole, "
              "%llu sampled): saves %llu, retention %llu, recovery %llu; %llu saved again after recovery\n",
              CKPT_TEST_ASAN ? " (ASan, reduced sampling)" : "", static_cast<unsigned long long>(ex.states),
              static_cast<unsigned long long>(ex.points), static_cast<unsigned long long>(ex.exhaustive_points),
              static_cast<unsigned long long>(ex.sampled_points), static_cast<unsigned long long>(after_saves),
              static_cast<unsigned long long>(after_retention - after_saves),
              static_cast<unsigned long long>(ex.states - after_retention), static_cast<unsigned long long>(ex.saved_again));
  std::fflush(stdout);
  g_run_states += ex.states;
  ++g_run_cases;
  CHECK(ex.failures == 0);
  REQUIRE(ex.states >= kRequiredStates);
}

TEST_CASE("every crash state of async saves, of a save staged while another persists and of retention after async "
          "commits recovers to the last acknowledged step", "[crash][async]") {
  constexpr std::uint64_t kAsyncSamples = kSamplesPerPoint;
  Explorer ex;
  std::uint64_t seed = 90001;
  // 1. One save in flight at a time; 2. two in flight (the next staged meanwhile); 3. retention.
  const auto one = record_async_saves({10, 20, 30, 40}, 1, {}, 1);
  REQUIRE(one.size() >= 3 * 12);
  for (const auto& m : one) explore_moment(m, seed++, ex, 5, kAsyncSamples);
  const std::uint64_t after_one = ex.states;
  const auto two = record_async_saves({10, 20, 30, 40, 50}, 1, {}, 2);
  bool staged_meanwhile = false;
  for (const auto& m : two) {
    staged_meanwhile = staged_meanwhile || m.expect.label.find("the next one staged") != std::string::npos;
    explore_moment(m, seed++, ex, 5, kAsyncSamples);
  }
  CHECK(staged_meanwhile);
  const std::uint64_t after_two = ex.states;
  RetentionPolicy retention;
  retention.keep_last = 2;
  const auto retiring = record_async_saves({10, 20, 30, 40, 50}, 2, retention, 2);
  bool saw_retire = false;
  for (const auto& m : retiring) {
    saw_retire = saw_retire || m.point.op == FsOp::rmdir || m.point.op == FsOp::unlink;
    explore_moment(m, seed++, ex, 5, kAsyncSamples);
  }
  CHECK(saw_retire);
  CHECK(ex.with_in_flight > 0);
  std::printf("async crash exploration%s: %llu crash states checked at %llu persistence points: one in flight %llu, "
              "two in flight %llu, retention %llu\n",
              CKPT_TEST_ASAN ? " (ASan, reduced sampling)" : "", static_cast<unsigned long long>(ex.states),
              static_cast<unsigned long long>(ex.points), static_cast<unsigned long long>(after_one),
              static_cast<unsigned long long>(after_two - after_one), static_cast<unsigned long long>(ex.states - after_two));
  std::fflush(stdout);
  g_run_states += ex.states;
  ++g_run_cases;
  CHECK(ex.failures == 0);
  REQUIRE(ex.states >= (CKPT_TEST_ASAN ? 500u : 3000u));
}

// Crashes every moment of a recorded run (5 whole states and half the samples per point), adds its states to
// the run's totals, and returns how many of its persistence points `counts` picks.
std::size_t explore_saves(const std::vector<Moment>& moments, std::uint64_t seed, Explorer& ex,
                          const std::function<bool(const PersistencePoint&)>& counts) {
  std::size_t n = 0;
  for (const auto& m : moments) {
    n += counts(m.point) ? 1 : 0;
    explore_moment(m, seed++, ex, 5, kSamplesPerPoint / 2);
  }
  g_run_states += ex.states;
  ++g_run_cases;
  return n;
}

TEST_CASE("every crash state of journal compactions during retention recovers to the last acknowledged step",
          "[crash][compaction]") {
  // Keep-last 1 retires a step at every save, so the journal outgrows its live records and is rewritten
  // (temporary name, fsync, rename, directory fsync) every few saves; every moment of that is crashed.
  Explorer ex;
  std::uint64_t seed = 500;
  RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  std::vector<std::uint64_t> steps;
  for (std::uint64_t s = 1; s <= 16; ++s) steps.push_back(s * 10);
  const std::size_t rewrites = explore_saves(record_saves(steps, 4, keep_one), seed, ex, [](const PersistencePoint& p) {
    return p.op == FsOp::rename && p.path.find("JOURNAL") != std::string::npos;
  });
  CHECK(rewrites >= 2);
  std::printf("compaction crash exploration: %llu crash states at %llu persistence points, %zu journal rewrites\n",
              static_cast<unsigned long long>(ex.states), static_cast<unsigned long long>(ex.points), rewrites);
  std::fflush(stdout);
  CHECK(ex.failures == 0);
}

TEST_CASE("every crash state of saves written over retired steps' files recovers to the last acknowledged step",
          "[crash][reuse]") {
  // Keep-last 2 with reuse_files (spec/JOURNAL.md 10.1): each save retires a step whose shard file moves to
  // slots/ and the next save writes over it; every moment of the moves, the takes and the overwrites is crashed.
  Explorer ex;
  // Shard files renamed into slots/ and out of it (a store save renames nothing else but the journal).
  const std::size_t moves = explore_saves(record_saves({10, 20, 30, 40, 50, 60, 70}, 3, RetentionPolicy{2, 0}, true), 900, ex,
                                          [](const PersistencePoint& p) {
                                            return p.op == FsOp::rename && p.path.find("JOURNAL") == std::string::npos;
                                          });
  CHECK(moves >= 4);  // at least two kept and two taken back
  std::printf("reuse crash exploration: %llu crash states at %llu persistence points, %zu shard file moves\n",
              static_cast<unsigned long long>(ex.states), static_cast<unsigned long long>(ex.points), moves);
  std::fflush(stdout);
  CHECK(ex.failures == 0);
}

TEST_CASE("after an fsync error at any sync of a save, the reopen trusts only the disk", "[crash][fsync]") {
  // A failed fsync on Linux leaves the pages cached and clean but not on disk (SimFs::inject_sync_error).
  // The save fails; the next writable open sees the cache. It must not build on what it sees there:
  // its rewrite makes durable exactly what it decided, so a crash anywhere in that open or in the next
  // save (which retires everything older) still recovers to what was acknowledged.
  RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  const SimFs base = store_with_steps_10_and_20();
  std::uint64_t syncs = 0;
  {
    SimFs sim(base);
    auto store = Store::open(sim, kStore, Access::read_write, store_options(false));
    REQUIRE(store.ok());
    const std::uint64_t before = sim.op_count(FsOp::sync) + sim.op_count(FsOp::sync_data);
    REQUIRE(save_step(**store, 30).ok());
    syncs = sim.op_count(FsOp::sync) + sim.op_count(FsOp::sync_data) - before;
  }
  REQUIRE(syncs >= 3);  // the shard, the MANIFEST, BEGIN and COMMIT in the journal
  Explorer ex;
  std::uint64_t seed = 900, committed_30 = 0;
  for (std::uint64_t k = 1; k <= syncs; ++k) {
    INFO("fsync error at sync " << k << " of " << syncs);
    SimFs sim(base);
    std::string failed_path;
    {
      auto store = Store::open(sim, kStore, Access::read_write, store_options(false, keep_one));
      REQUIRE(store.ok());
      sim.inject_sync_error(k);
      auto r = save_step(**store, 30);
      REQUIRE(sim.sync_errors() == 1);
      failed_path = sim.sync_error_path();
      CHECK_FALSE(r.ok());
    }
    std::vector<Moment> moments;
    Expectation now;
    now.acked = {10, 20};
    now.in_flight = 30;
    now.label = "reopen after an fsync error on " + failed_path;
    sim.set_persistence_hook([&](const SimFs& fs, const PersistencePoint& p) { moments.push_back(Moment{SimFs(fs), now, p}); },
                             true);
    {
      auto store = Store::open(sim, kStore, Access::read_write, store_options(false, keep_one));
      REQUIRE(store.ok());
      CHECK_FALSE((*store)->recovery_report().corrupt());
      now.acked.clear();
      for (const auto& s : (*store)->steps()) now.acked.push_back(s.step);
      if (std::find(now.acked.begin(), now.acked.end(), 30) != now.acked.end()) ++committed_30;
      now.in_flight = 40;
      now.may_retire = retirable(now.acked, 40, keep_one);
      now.label = "save after a reopen after an fsync error on " + failed_path;
      auto r = save_step(**store, 40);
      REQUIRE(r.ok());
      now.acked = {40};
      now.in_flight.reset();
      now.may_retire.clear();
      now.label = "closing after an fsync error on " + failed_path;
    }
    sim.set_persistence_hook(nullptr);
    for (const auto& m : moments) explore_moment(m, seed++, ex, 5, kSamplesPerPoint);
  }
  g_run_states += ex.states;
  ++g_run_cases;
  std::printf("fsync-error crash exploration: %llu syncs per save, %llu crash states at %llu persistence points, "
              "step 30 kept by %llu reopenings\n",
              static_cast<unsigned long long>(syncs), static_cast<unsigned long long>(ex.states),
              static_cast<unsigned long long>(ex.points), static_cast<unsigned long long>(committed_30));
  std::fflush(stdout);
  CHECK(ex.failures == 0);
}

TEST_CASE("a save failed at any operation by ENOSPC, EIO, a short write or EINTR keeps the previous step", "[crash][fault]") {
  // A store holding steps 10 and 20; the save of step 30 is run once to count its operations, then
  // once per operation and fault kind with that operation failing.
  const SimFs base = store_with_steps_10_and_20();
  std::uint64_t ops = 0;
  {
    SimFs sim(base);
    FaultFs<SimFs> counting(sim);
    auto store = Store::open(counting, kStore, Access::read_write, store_options(false));
    REQUIRE(store.ok());
    counting.set_plan({});
    REQUIRE(save_step(**store, 30).ok());
    ops = counting.count();
  }
  REQUIRE(ops >= 15);
  std::map<std::string, std::uint64_t> failed_saves, in_doubt;
  std::uint64_t reopened = 0;
  for (const Fault fault : {Fault::no_space, Fault::io_error, Fault::short_write, Fault::interrupted}) {
    for (std::uint64_t n = 1; n <= ops; ++n) {
      INFO(fault_name(fault) << " at operation " << n << " of " << ops);
      SimFs sim(base);
      FaultFs<SimFs> faulty(sim);
      std::uint64_t failed_txn = 0;
      bool said_in_doubt = false, acked_40 = false;
      {
        auto opened = Store::open(faulty, kStore, Access::read_write, store_options(false));
        REQUIRE(opened.ok());
        auto& store = **opened;
        failed_txn = store.next_txn();
        faulty.set_plan(FaultPlan::nth(n, fault));
        auto r = save_step(store, 30);
        INFO("injected: " << faulty.first_fault());
        REQUIRE(faulty.faults() == 1);
        faulty.set_plan({});
        if (fault == Fault::interrupted) {
          // EINTR is retried below the Fs interface: the save succeeds and is exact.
          REQUIRE(r.ok());
          REQUIRE(store.latest());
          CHECK(store.latest()->step == 30);
          CHECK(check_step_exact(store, r->step) == "");
          continue;
        }
        REQUIRE_FALSE(r.ok());
        CHECK(r.status().code() == Code::io);
        CHECK(r.status().message().find("injected fault") != std::string::npos);
        ++failed_saves[fault_name(fault)];
        said_in_doubt = r.status().message().find("COMMIT record could not be made durable") != std::string::npos;
        if (said_in_doubt) ++in_doubt[fault_name(fault)];
        if (store.failed()) {
          // The journal's state is unknown: every write is refused until a reopen decides (spec 5.4).
          CHECK(store.begin(40).status().code() == Code::io);
        } else {
          // The previous step is still the latest, intact, and the next save in the same session works
          // under a new id and a new directory.
          REQUIRE(store.latest());
          CHECK(store.latest()->step == 20);
          CHECK(check_step_exact(store, *store.latest()) == "");
          auto again = save_step(store, 40);
          REQUIRE(again.ok());
          CHECK(again->step.txn > failed_txn);
          CHECK(again->step.dir != step_dir_name(30, failed_txn));
          CHECK(check_step_exact(store, again->step) == "");
          acked_40 = true;
        }
      }
      if (fault == Fault::interrupted) continue;
      // Reopen as it is, and as a crash right after the failure would leave it (the durable state).
      SimFs crashed = sim.durable_state();
      for (SimFs* target : {&sim, &crashed}) {
        const bool live = target == &sim;
        INFO((live ? "reopened" : "crashed after the failure, then reopened"));
        auto entries_before = sorted_entries(*target, kStore);
        auto opened = Store::open(*target, kStore, Access::read_write, store_options(false));
        REQUIRE(opened.ok());
        auto& store = **opened;
        ++reopened;
        CHECK_FALSE(store.recovery_report().corrupt());
        std::vector<std::uint64_t> steps;
        for (const auto& s : store.steps()) steps.push_back(s.step);
        // The save acknowledged in the same session after the failure survives, crash or not.
        const bool saved_40 = std::find(steps.begin(), steps.end(), 40) != steps.end();
        std::vector<std::uint64_t> before_40(steps.begin(), std::remove(steps.begin(), steps.end(), 40));
        // Step 30 exists only when the error said its COMMIT was in doubt (spec 5.4); otherwise 20 is latest.
        if (said_in_doubt) CHECK((before_40 == std::vector<std::uint64_t>{10, 20} || before_40 == std::vector<std::uint64_t>{10, 20, 30}));
        else CHECK(before_40 == std::vector<std::uint64_t>{10, 20});
        CHECK(saved_40 == acked_40);
        for (const auto& s : store.steps()) CHECK(check_step_exact(store, s) == "");
        std::vector<std::string> want{"JOURNAL", "LOCK"};
        for (const auto& s : store.steps()) want.push_back(s.dir);
        std::sort(want.begin(), want.end());
        CHECK(sorted_entries(*target, kStore) == want);
        // An id that reached the disk (journal or a directory name) is never handed out again.
        bool reached = std::find(entries_before.begin(), entries_before.end(), step_dir_name(30, failed_txn)) != entries_before.end();
        for (const auto& t : store.transactions()) reached = reached || t.txn == failed_txn;
        if (store.recovery_report().journal.torn_tail)
          for (const auto& r : store.recovery_report().journal.torn_tail->unapplied) reached = reached || r.txn() == failed_txn;
        auto again = save_step(store, 50);
        REQUIRE(again.ok());
        if (reached) CHECK(again->step.txn > failed_txn);
        CHECK(std::find(entries_before.begin(), entries_before.end(), again->step.dir) == entries_before.end());
        CHECK(check_step_exact(store, again->step) == "");
        REQUIRE(store.latest());
        CHECK(store.latest()->step == 50);
      }
    }
  }
  for (const Fault fault : {Fault::no_space, Fault::io_error, Fault::short_write}) CHECK(failed_saves[fault_name(fault)] == ops);
  CHECK(in_doubt["io_error"] > 0);  // a failed fdatasync of the COMMIT leaves it in doubt
  std::printf("fault injection: %llu operations per save x 4 faults, %llu failed saves, %llu reopenings checked\n",
              static_cast<unsigned long long>(ops),
              static_cast<unsigned long long>(failed_saves["no_space"] + failed_saves["io_error"] + failed_saves["short_write"]),
              static_cast<unsigned long long>(reopened));
}

TEST_CASE("the crash exploration of one run checks at least 10^5 states in Release", "[crash]") {
  // Runs last (declaration order): the four explorations above each add their states.
  std::printf("crash exploration, whole run: %llu crash states in %llu explorations\n",
              static_cast<unsigned long long>(g_run_states), static_cast<unsigned long long>(g_run_cases));
  std::fflush(stdout);
  if (g_run_cases < 4) {
    WARN("only " << g_run_cases << " of the explorations ran (a filtered run): the total is not checked");
    return;
  }
  CHECK(g_run_states >= kRequiredRunStates);
}
