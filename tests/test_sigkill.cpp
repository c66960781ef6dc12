// Real processes, real files: a child process saves steps into a store on disk (PosixFs) in a loop and
// reports each step on a pipe once commit() has returned; the parent kills it with SIGKILL at a random
// moment, recovers the store with a writable open and checks that the latest step is the last one the
// child acknowledged or the one it was saving, that every listed step is bit-for-bit what was saved
// and verifies, and that recovery left nothing behind. The next trial's child resumes the same store.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/store/store.hpp>

#include "test_util.hpp"

using namespace ckpt;

namespace {

constexpr std::size_t kWeights = 3000;  // 12000 bytes: three chunks
constexpr int kTrials = 50;

StoreOptions options(bool create) {
  StoreOptions o;
  o.create_if_missing = create;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = 9;
  o.buffer_size = 4096;
  o.retention.keep_last = 3;  // every save also retires a step, so kills land in retention too
  return o;
}

std::vector<float> weights_of(std::uint64_t step) {
  std::vector<float> v(kWeights);
  std::uint64_t x = step * 0x9E3779B97F4A7C15ULL + 12345;
  for (auto& f : v) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    f = static_cast<float>(static_cast<std::int64_t>(x >> 40) - (std::int64_t{1} << 23)) / 1024.0f;
  }
  return v;
}

std::string rng_of(std::uint64_t step) { return "rng-" + std::to_string(step * 2654435761u); }

Result<CommitResult> save(Store& store, std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  const auto w = weights_of(step);
  CKPT_TRY(tx->add_tensor("w", DType::F32, {kWeights}, w.data(), w.size() * sizeof(float)));
  tx->state().rng = rng_of(step);
  tx->state().data = DataPosition{0, step * 32, ""};
  return tx->commit();
}

// The child: resume after the latest step and save forever, acknowledging each commit on fd.
[[noreturn]] void writer_process(const std::string& path, int fd) {
  PosixFs fs;
  auto store = Store::open(fs, path, Access::read_write, options(true));
  if (!store.ok()) {
    std::fprintf(stderr, "child: %s\n", store.status().to_string().c_str());
    ::_exit(3);
  }
  std::uint64_t step = (*store)->latest() ? (*store)->latest()->step + 1 : 1;
  const unsigned char ready[8] = {};  // step 0: the store is open and recovered, saves start now
  if (::write(fd, ready, sizeof ready) != static_cast<ssize_t>(sizeof ready)) ::_exit(5);
  for (;; ++step) {
    auto r = save(**store, step);
    if (!r.ok()) {
      std::fprintf(stderr, "child: step %llu: %s\n", static_cast<unsigned long long>(step), r.status().to_string().c_str());
      ::_exit(4);
    }
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(step >> (8 * i));
    if (::write(fd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) ::_exit(5);
  }
}

// "" when the step is exactly what save() wrote and every chunk verifies.
std::string check_step(Store& store, const StepInfo& info) {
  const std::string where = "step " + std::to_string(info.step) + ": ";
  auto reader = store.open_step(info);
  if (!reader.ok()) return where + reader.status().to_string();
  std::vector<float> w(kWeights);
  if (Status s = reader->read_tensor("w", w.data(), w.size() * sizeof(float)); !s.ok()) return where + s.to_string();
  const auto want = weights_of(info.step);
  if (std::memcmp(w.data(), want.data(), w.size() * sizeof(float)) != 0) return where + "tensor w differs";
  if (reader->state().rng != rng_of(info.step) || reader->state().data.offset != info.step * 32)
    return where + "training state differs";
  auto v = store.verify_step(info.step);
  if (!v.ok()) return where + v.status().to_string();
  if (!v->ok()) return where + "verify_step found damage";
  return "";
}

}  // namespace

TEST_CASE("a writer killed with SIGKILL at random moments leaves the last acknowledged step or the next", "[sigkill]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  std::mt19937_64 rng(20261129);
  // How long one save takes here (fsync speed varies a lot between disks and with load); updated from
  // the children's acknowledgements as the test runs.
  std::chrono::microseconds per_save{};
  {
    PosixFs fs;
    auto store = Store::open(fs, dir.file("calibration"), Access::read_write, options(true));
    REQUIRE(store.ok());
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t step = 1; step <= 4; ++step) REQUIRE(save(**store, step).ok());
    per_save = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start) / 4;
  }

  std::optional<std::uint64_t> latest;  // after the previous trial's recovery
  int kills_with_progress = 0, in_flight_committed = 0, total_acked = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    INFO("trial " << trial);
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      writer_process(path, fds[1]);
    }
    ::close(fds[1]);
    // Kill at a random moment. Every fifth trial: while the child starts, opens and recovers the
    // store (so recovery itself is interrupted); otherwise up to a few saves after it reported ready.
    std::vector<std::uint64_t> acked;
    unsigned char buf[8];
    std::size_t have = 0;
    bool ready = false;
    auto read_reports = [&]() {
      const ssize_t n = ::read(fds[0], buf + have, sizeof buf - have);
      if (n <= 0) return false;
      have += static_cast<std::size_t>(n);
      if (have == sizeof buf) {
        std::uint64_t step = 0;
        for (int i = 0; i < 8; ++i) step |= std::uint64_t{buf[i]} << (8 * i);
        if (step == 0) ready = true;
        else acked.push_back(step);
        have = 0;
      }
      return true;
    };
    if (trial % 5 == 4) {
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    } else {
      // Wait for 0, 1 or 2 acknowledgements (so most trials make progress however slow the disk is
      // right now), then kill within the next save or so: a random moment inside the save protocol.
      const std::size_t wait_for = std::uniform_int_distribution<std::size_t>(0, 2)(rng);
      auto last = std::chrono::steady_clock::now();
      std::size_t seen = 0;
      while ((!ready || acked.size() < wait_for) && read_reports()) {
        if (acked.size() == seen) continue;
        const auto now = std::chrono::steady_clock::now();
        if (seen > 0)  // the time between two acknowledgements is one save: follow the disk
          per_save = (per_save + std::chrono::duration_cast<std::chrono::microseconds>(now - last)) / 2;
        seen = acked.size();
        last = now;
      }
      const auto max_delay = std::max<std::int64_t>(500, per_save.count() * 5 / 4);
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<std::int64_t>(0, max_delay)(rng)));
    }
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    // The child must have died by the signal, not by an error of its own.
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    while (read_reports()) {
    }
    ::close(fds[0]);
    total_acked += static_cast<int>(acked.size());
    if (!acked.empty()) ++kills_with_progress;
    // The child resumed after `latest` and saved consecutive steps.
    const std::uint64_t first = latest ? *latest + 1 : 1;
    for (std::size_t i = 0; i < acked.size(); ++i) REQUIRE(acked[i] == first + i);
    const std::optional<std::uint64_t> last_acked = acked.empty() ? latest : std::optional<std::uint64_t>(acked.back());
    const std::uint64_t in_flight = last_acked ? *last_acked + 1 : 1;

    PosixFs fs;
    auto store = Store::open(fs, path, Access::read_write, options(false));
    // Killed before the store's JOURNAL existed: nothing was acknowledged, the next child creates it.
    if (!store.ok() && !latest && acked.empty() && store.status().code() == Code::not_found) continue;
    REQUIRE(store.ok());
    REQUIRE_FALSE((*store)->recovery_report().corrupt());
    const auto now = (*store)->latest();
    if (!last_acked) {
      CHECK((!now || now->step == in_flight));
    } else {
      REQUIRE(now);
      INFO("last acknowledged " << *last_acked << ", latest " << now->step);
      CHECK((now->step == *last_acked || now->step == in_flight));
    }
    if (now && now->step == in_flight) ++in_flight_committed;
    // Every listed step is exact and verifies, in commit order. (Retention runs after each commit, so
    // a kill between a COMMIT and its RETIRE leaves an extra step until the next commit retires it.)
    const auto steps = (*store)->steps();
    for (std::size_t i = 1; i < steps.size(); ++i) CHECK(steps[i - 1].step < steps[i].step);
    for (const auto& s : steps) {
      const std::string problem = check_step(**store, s);
      CHECK(problem == "");
    }
    // Recovery leaves only the journal, the lock and the live step directories.
    std::vector<std::string> want{"JOURNAL", "LOCK"};
    for (const auto& s : steps) want.push_back(s.dir);
    std::sort(want.begin(), want.end());
    auto list = fs.list_dir(path);
    REQUIRE(list.ok());
    std::vector<std::string> have_entries = *list;
    std::sort(have_entries.begin(), have_entries.end());
    CHECK(have_entries == want);
    latest = now ? std::optional<std::uint64_t>(now->step) : std::nullopt;
  }
  std::printf("sigkill: %d trials (a save took about %lld us at the end), %d killed after at least one acknowledged save, "
              "%d acknowledged saves, %d recoveries found the in-flight step committed, final step %llu\n",
              kTrials, static_cast<long long>(per_save.count()), kills_with_progress, total_acked, in_flight_committed,
              static_cast<unsigned long long>(latest.value_or(0)));
  std::fflush(stdout);
  CHECK(kills_with_progress >= kTrials / 4);  // most kills land after some saves, so recovery has work to check
}
