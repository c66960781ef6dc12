// Tests for include/ckpt/tiers/tiered.hpp on one machine: 4 ranks as threads (ThreadComm), each rank
// its own "node" with its own memory-tier directory, a shared persistent store. Each job runs a
// deterministic trainer (tests/tier_trainer.hpp), stops, and the next job resumes; the final state must
// be bit-identical to an uninterrupted run. Failures are made between jobs: directories deleted (a
// node lost), bytes flipped (a bad copy), a load that fails (a NaN after load). The persistent tier is a
// directory, or a store on object storage kept in memory (testing::MemoryObjects through an opener).
#include <catch2/catch.hpp>

#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <cstring>
#include <thread>

#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/memory_objects.hpp>
#include <ckpt/dist/thread_comm.hpp>
#if CKPT_TEST_GLOO
#include <ckpt/dist/gloo_comm.hpp>
#endif
#include <ckpt/tiers/memory_root.hpp>
#include <ckpt/tiers/tiered.hpp>

#include "test_util.hpp"
#include "thread_ranks.hpp"
#include "tier_trainer.hpp"

using namespace ckpt;
using namespace ckpt::tiers;
namespace fsys = std::filesystem;

namespace {

constexpr std::uint64_t kElems = 1 << 14;  // floats per tensor: 64 KiB, 16 KiB per rank of 4

struct Job {
  fsys::path dir;
  std::vector<std::string> nodes;  // node of each rank; its size is the world
  std::uint64_t run_to = 0;        // train through this step (0: resume only)
  std::function<Status(int rank, TierView&)> before_load;  // a failing load for some rank and step
  std::function<void(TierOptions&)> tune;
  std::function<void(int rank)> after_resume = {};  // each rank, once its resume() returned
  bool over_gloo = false;  // the tiers talk over a GlooComm the ThreadComm bootstraps (spec/TIERS.md 4.7)
  std::uint64_t elems = kElems;  // floats per tensor
  std::uint64_t norm = 0;        // floats of a replicated tensor every rank holds (the SDC canary's); 0: none
  std::function<void(int rank, std::uint64_t step, tier_trainer::Trainer&)> before_step = {};  // after train(step)
  std::function<void(int rank, std::uint64_t step, SaveRequest&)> also_fill = {};  // after the trainer's fill
};

struct JobResult {
  std::vector<Resumed> resumed;
  std::vector<std::string> slices;
  std::vector<Status> errors;
  std::vector<std::vector<TierRecord>> records;
  std::vector<std::vector<std::string>> notes;
  std::vector<std::uint64_t> written;  // bytes each rank handed to pwrite
  std::vector<std::uint64_t> landed;   // bytes each rank received straight at their destination (recv_into)
  std::vector<std::vector<float>> norms;  // each rank's replicated tensor at the end
  [[nodiscard]] bool ok() const {
    for (const auto& e : errors)
      if (!e.ok()) return false;
    return true;
  }
  [[nodiscard]] std::string first_error() const {
    for (std::size_t r = 0; r < errors.size(); ++r)
      if (!errors[r].ok()) return "rank " + std::to_string(r) + ": " + errors[r].to_string();
    return "";
  }
};

// The job's ThreadComm, with the recv_into of a transport that receives in place (MPI, gloo): counts the bytes
// the tiers had land straight at their destination (spec/TIERS.md 4.2).
class LandingComm {
 public:
  explicit LandingComm(ThreadComm& comm) : comm_(comm) {}
  [[nodiscard]] int rank() const { return comm_.rank(); }
  [[nodiscard]] int size() const { return comm_.size(); }
  [[nodiscard]] Status barrier() { return comm_.barrier(); }
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root) { return comm_.gather(std::move(bytes), root); }
  [[nodiscard]] Status broadcast(std::string& bytes, int root) { return comm_.broadcast(bytes, root); }
  void leave(const Status& why) { comm_.leave(why); }
  [[nodiscard]] Status send(std::string_view bytes, int dest, int tag) { return comm_.send(bytes, dest, tag); }
  [[nodiscard]] Status recv(std::string& bytes, int source, int tag) { return comm_.recv(bytes, source, tag); }
  [[nodiscard]] Result<Received> recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag) {
    CKPT_TRY(comm_.recv(bytes, source, tag));
    if (bytes.size() > capacity) return Received{false, bytes.size()};
    std::memcpy(dst, bytes.data(), bytes.size());
    landed_ += bytes.size();
    return Received{true, bytes.size()};
  }
  [[nodiscard]] std::uint64_t landed() const { return landed_; }

 private:
  ThreadComm& comm_;
  std::uint64_t landed_ = 0;
};

TierOptions options_for(const Job& job, int rank) {
  TierOptions o;
  o.memory_root = (job.dir / ("node-" + job.nodes[static_cast<std::size_t>(rank)])).string();
  o.persistent = (job.dir / "persistent").string();
  o.memory_every = 2;
  o.persist_every = 4;
  o.replicas = 1;
  o.memory_keep = 2;
  o.chunk_size_log2 = 12;
  o.transfer_block = 5000;  // several messages per piece, one not a multiple of a chunk
  o.when_busy = WhenBusy::wait;  // every capture taken, so a test knows which steps exist (skip: its own test)
  Topology t;
  t.node_of_rank = job.nodes;
  o.topology = t;
  if (job.tune) job.tune(o);
  return o;
}

JobResult run(const Job& job) {
  const int world = static_cast<int>(job.nodes.size());
  ThreadGroup group(world);
  JobResult out;
  out.resumed.resize(static_cast<std::size_t>(world));
  out.slices.resize(static_cast<std::size_t>(world));
  out.errors.resize(static_cast<std::size_t>(world));
  out.records.resize(static_cast<std::size_t>(world));
  out.notes.resize(static_cast<std::size_t>(world));
  out.written.resize(static_cast<std::size_t>(world));
  out.landed.resize(static_cast<std::size_t>(world));
  out.norms.resize(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      ThreadComm comm(group, r);
      LandingComm landing(comm);
      PosixFs posix;
      FaultFs<PosixFs> fs(posix, FaultPlan{Fault::none, 0, false, fs_op_bit(FsOp::pwrite)});  // counts, never fails
#if CKPT_TEST_GLOO
      std::unique_ptr<GlooComm> gloo;
#endif
      auto fail = [&](const Status& s) {
        out.errors[i] = s;
        comm.leave(s);
#if CKPT_TEST_GLOO
        if (gloo) gloo->leave(s);
#endif
      };
#if CKPT_TEST_GLOO
      if (job.over_gloo) {
        GlooCommOptions g;
        g.hostname = "127.0.0.1";
        g.timeout = std::chrono::seconds(60);  // a hang fails the test instead of waiting an hour
        auto connected = GlooComm::connect(comm, g);
        if (!connected.ok()) return fail(connected.status());
        gloo = std::move(*connected);
      }
      auto tiers = gloo ? TieredCheckpointer::create(fs, *gloo, options_for(job, r)) : TieredCheckpointer::create(fs, landing, options_for(job, r));
#else
      if (job.over_gloo) return fail(make_error(Code::unsupported, "built without gloo"));
      auto tiers = TieredCheckpointer::create(fs, landing, options_for(job, r));
#endif
      if (!tiers.ok()) return fail(tiers.status());
      tier_trainer::Trainer trainer(job.elems, world, r);
      if (job.norm != 0) trainer.with_norm(job.norm);
      auto resumed = (*tiers)->resume([&](TierView& v) {
        if (job.before_load) CKPT_TRY(job.before_load(r, v));
        return trainer.load(v);
      });
      if (!resumed.ok()) return fail(resumed.status());
      out.resumed[i] = *resumed;
      if (job.after_resume) job.after_resume(r);
      for (std::uint64_t s = resumed->next_step() == 0 ? 1 : resumed->next_step(); s <= job.run_to; ++s) {
        trainer.train(s);
        if (job.before_step) job.before_step(r, s, trainer);
        auto step = (*tiers)->step(s, [&](SaveRequest& req) {
          trainer.fill(req);
          if (job.also_fill) job.also_fill(r, s, req);
        });
        if (!step.ok()) return fail(step.status());
      }
      Status waited = (*tiers)->wait();
      out.records[i] = (*tiers)->records();
      if (!waited.ok()) return fail(waited);
      out.notes[i] = (*tiers)->notes();
      out.slices[i] = trainer.bytes();
      out.written[i] = fs.written_bytes();
      out.landed[i] = landing.landed();
      out.norms[i] = trainer.norm;
    });
  for (auto& t : threads) t.join();
  return out;
}

const std::vector<std::string> kFourNodes{"n0", "n1", "n2", "n3"};

fsys::path fresh_dir(const std::string& name) {
  const fsys::path dir = fsys::path(CKPT_BINARY_DIR) / "test-tiered" / name;
  fsys::remove_all(dir);
  fsys::create_directories(dir);
  return dir;
}

// Flips one byte inside tensor `tensor` of `step` in the store at `store`.
void flip_tensor_byte(const fsys::path& store, std::uint64_t step, const std::string& tensor) {
  PosixFs fs;
  auto s = Store::open(fs, store.string(), Access::read_only);
  REQUIRE(s.ok());
  auto info = (*s)->find(step);
  REQUIRE(info.ok());
  auto reader = StepReader::open(fs, store.string(), *info, (*s)->uuid());
  REQUIRE(reader.ok());
  const Index& index = reader->shard(0).index();
  for (const auto& p : index.pieces) {
    if (index.tensors[static_cast<std::size_t>(p.tensor)].name != tensor) continue;
    REQUIRE(p.data_length > 100);
    std::fstream file(reader->shard(0).path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(p.data_offset + p.data_length / 2);
    file.seekg(at);
    const char c = static_cast<char>(file.get());
    file.seekp(at);
    file.put(static_cast<char>(c ^ 0x01));
    return;
  }
  FAIL("no tensor " << tensor << " in step " << step << " of " << store);
}

// Flips one byte in the middle of the data of the shard file of `step` in a store directory (in a store of several
// shards a step, the one whose name starts with `shard`).
void flip_shard_byte(const fsys::path& store, std::uint64_t step, const std::string& shard = "") {
  for (const auto& e : fsys::directory_iterator(store)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-" + std::to_string(step) + "-", 0) != 0) continue;
    for (const auto& f : fsys::directory_iterator(e.path())) {
      if (f.path().extension() != ".ckpt" || f.path().filename().string().rfind(shard, 0) != 0) continue;
      std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(8192);
      const char c = static_cast<char>(file.get());
      file.seekp(8192);
      file.put(static_cast<char>(c ^ 0x10));
      return;
    }
  }
  FAIL("no shard of step " << step << " in " << store);
}

// Whether a shard file of `step` is anywhere under store: in its step directory or quarantine/.
bool holds_shard_of(const fsys::path& store, std::uint64_t step) {
  for (const auto& e : fsys::recursive_directory_iterator(store))
    if (e.path().extension() == ".ckpt" && e.path().parent_path().filename().string().rfind("step-" + std::to_string(step) + "-", 0) == 0)
      return true;
  return false;
}

// The steps a job's directory persistent store has committed, in order.
std::vector<std::uint64_t> persisted_steps(const fsys::path& dir) {
  PosixFs fs;
  auto p = Store::open(fs, (dir / "persistent").string(), Access::read_only);
  REQUIRE(p.ok());
  std::vector<std::uint64_t> steps;
  for (const auto& info : (*p)->steps()) steps.push_back(info.step);
  return steps;
}

std::size_t count(const std::vector<TierRecord>& records, TierEvent e) {
  std::size_t n = 0;
  for (const auto& r : records) n += r.event == e ? 1 : 0;
  return n;
}

// Checks that every rank resumed `step`; returns the copies set aside over the ranks.
std::size_t set_aside_resuming(const JobResult& r, std::uint64_t step) {
  std::size_t aside = 0;
  for (std::size_t rank = 0; rank < r.resumed.size(); ++rank) {
    CHECK(r.resumed[rank].step == step);
    aside += count(r.records[rank], TierEvent::set_aside);
  }
  return aside;
}

// Runs the first job to step 7 (or `steps`): memory steps 4 and 6 kept, step 4 persisted, step 6 replicated.
fsys::path trained_to_7(const std::string& name, std::uint64_t steps = 7, std::function<void(TierOptions&)> tune = {}) {
  Job first{fresh_dir(name), kFourNodes, steps, {}, std::move(tune)};
  auto r = run(first);
  INFO(r.first_error());
  REQUIRE(r.ok());
  return first.dir;
}

// The persistent tier on an object store: every rank's client a view of the same objects (spec/OBJECT.md 4.7).
constexpr const char* kObjectUrl = "s3://bucket/tiers";
struct ObjectTier {
  testing::MemoryObjects objects{kObjectUrl};
  [[nodiscard]] object::ObjectOpener opener() {
    return [this](const std::string& url) -> Result<std::unique_ptr<object::ObjectClient>> {
      (void)url;
      return std::unique_ptr<object::ObjectClient>(new testing::MemoryObjects(objects.view()));
    };
  }
  [[nodiscard]] std::function<void(TierOptions&)> tune() {
    return [this](TierOptions& o) { o.persistent = kObjectUrl, o.open_objects = opener(); };
  }
  // The key of a committed step's shard file.
  [[nodiscard]] std::string shard_key(std::uint64_t step, int rank) const {
    const std::string head = "step-" + std::to_string(step) + "-", tail = "/" + shard_file_name(static_cast<std::uint32_t>(rank), 4);
    for (const auto& [key, bytes] : objects.objects())
      if (key.rfind(head, 0) == 0 && key.size() > tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0) return key;
    return "";
  }
};

void check_final(const JobResult& r, std::uint64_t steps, std::uint64_t elems = kElems) {
  INFO(r.first_error());
  REQUIRE(r.ok());
  CHECK(tier_trainer::assemble(r.slices, elems) == tier_trainer::reference(elems, steps));
}

}  // namespace

// A job of one rank without replicas, for what create() decides on its own.
struct SoloJob {
  fsys::path dir;
  ThreadGroup group{1};
  ThreadComm comm{group, 0};
  PosixFs fs;
  explicit SoloJob(const std::string& name) : dir(fresh_dir(name)) {}
  [[nodiscard]] TierOptions options(const std::string& persistent) const {
    TierOptions o;
    o.memory_root = (dir / "mem").string();
    o.persistent = persistent;
    o.replicas = 0;
    o.when_busy = WhenBusy::wait;  // every capture taken
    return o;
  }
  [[nodiscard]] Result<std::unique_ptr<TieredCheckpointer>> create(const TierOptions& o) { return TieredCheckpointer::create(fs, comm, o); }
};

TEST_CASE("the policy captures every memory_every steps and persists every persist_every", "[tiered]") {
  SoloJob solo("policy");
  TierOptions o = solo.options((solo.dir / "p").string());
  o.memory_every = 5, o.persist_every = 20;
  auto t = solo.create(o);
  REQUIRE(t.ok());
  CHECK((*t)->action(3) == TierAction::none);
  CHECK((*t)->action(5) == TierAction::capture);
  CHECK((*t)->action(40) == TierAction::capture_and_persist);
  o.persist_every = 12;
  auto bad = solo.create(o);
  CHECK(bad.status().code() == Code::invalid_argument);
  CHECK_THAT(bad.status().message(), Catch::Contains("not a multiple of memory_every"));
}

TEST_CASE("an uninterrupted run records every tier transition and ends as the reference", "[tiered]") {
  Job job{fresh_dir("uninterrupted"), kFourNodes, 10, {}, {}};
  auto r = run(job);
  check_final(r, 10);
  for (const auto& records : r.records) {
    CHECK(count(records, TierEvent::captured) == 5);      // 2, 4, 6, 8, 10
    CHECK(count(records, TierEvent::held) == 5);          // one shard held per capture
    CHECK(count(records, TierEvent::replicated) == 5);
    CHECK(count(records, TierEvent::persisted) == 2);     // 4, 8
    CHECK(count(records, TierEvent::evicted) == 6);       // own and held copies beyond the last 2
  }
  // Every rank agrees on each step's digest.
  for (const auto& records : r.records)
    for (const auto& rec : records)
      if (rec.event == TierEvent::captured)
        for (const auto& other : r.records[0])
          if (other.event == TierEvent::captured && other.step == rec.step) CHECK(other.step_digest == rec.step_digest);
  // The persistent store holds steps 4 and 8, committed by its own journal.
  PosixFs fs;
  auto p = Store::open(fs, (job.dir / "persistent").string(), Access::read_only);
  REQUIRE(p.ok());
  REQUIRE((*p)->steps().size() == 2);
  CHECK((*p)->steps()[1].step == 8);
  auto verified = (*p)->verify_step(8);
  REQUIRE(verified.ok());
  CHECK(verified->ok());
}

TEST_CASE("each capture's phases come in order: captured, replicating, replicated; a promoted one's then promoting, persisted",
          "[tiered]") {
  std::mutex mutex;
  std::map<std::string, std::map<std::uint64_t, std::vector<std::string>>> seen;  // memory root (one rank each) -> step -> phases
  Job job{fresh_dir("phases"), kFourNodes, 10, {}, [&](TierOptions& o) {
            o.on_phase = [&, root = o.memory_root](const char* phase, std::uint64_t step) {
              std::lock_guard<std::mutex> lock(mutex);
              seen[root][step].push_back(phase);
            };
          }};
  check_final(run(job), 10);
  REQUIRE(seen.size() == 4);
  const std::vector<std::string> captured{"captured", "replicating", "replicated"};
  std::vector<std::string> promoted = captured;
  promoted.insert(promoted.end(), {"promoting", "persisted"});
  for (const auto& [root, steps] : seen) {
    INFO(root);
    REQUIRE(steps.size() == 5);  // 2, 4, 6, 8, 10
    for (const auto& [step, phases] : steps) {
      INFO("step " << step);
      CHECK(phases == (step % 4 == 0 ? promoted : captured));
    }
  }
}

TEST_CASE("a capture is copied into its memory store's ring of files: each store holds memory_keep shard files, no more",
          "[tiered][in_place]") {
  // spec/TIERS.md 2.1: the capture goes straight into the own store's next file (no staging pool) and a replica
  // into the held store's; each retires its oldest step first once memory_keep are kept, so in steady state
  // a store holds its memory_keep steps' files and nothing in slots/ (before: one more file per store).
  Job job{fresh_dir("ring"), kFourNodes, 10, {}, {}};
  auto r = run(job);
  check_final(r, 10);
  std::size_t stores = 0;
  for (const auto& e : fsys::recursive_directory_iterator(job.dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || (name != "own" && name.rfind("held-", 0) != 0)) continue;
    ++stores;
    std::size_t files = 0;
    for (const auto& f : fsys::recursive_directory_iterator(e.path())) {
      const std::string n = f.path().filename().string();
      if (f.is_regular_file() && n != "JOURNAL" && n != "LOCK" && n != "MANIFEST") ++files;
    }
    INFO(e.path().string());
    CHECK(files == 2);
  }
  CHECK(stores == 8);  // 4 ranks: own and one held store each
}

TEST_CASE("a replica is copied from the message into its held store's mapped file: the holder writes none of its bytes",
          "[tiered][in_place]") {
  // spec/TIERS.md 4.3: a holder copies each received message into the ring file the replica's transaction
  // writes over and hashes it there; its pwrite calls carry superblocks, indexes, footers and logs only.
  Job job{fresh_dir("replica-in-place"), kFourNodes, 10, {}, [](TierOptions& o) { o.persist_every = 0; }};
  job.elems = 1 << 18;
  auto r = run(job);
  check_final(r, 10, job.elems);
  const std::uint64_t shard_bytes = 2 * job.elems / 4 * sizeof(float);  // each rank's quarter of 2 tensors
  for (std::size_t rank = 0; rank < r.written.size(); ++rank) {
    INFO("rank " << rank << " wrote " << r.written[rank] << " bytes by pwrite over 5 captures of a " << shard_bytes << "-byte shard");
    CHECK(r.written[rank] < shard_bytes);  // the 5 replicas it received, written, would be 5 shards' bytes
  }
}

TEST_CASE("a replica's whole messages land in its slot as they are received: the holder copies none of them", "[tiered][in_place]") {
  // spec/TIERS.md 4.2: the sender sends what is pending alone before a piece's whole messages, so each of them
  // holds that piece's bytes only and the receiver's transport puts it in the slot (recv_into).
  Job job{fresh_dir("replica-lands"), kFourNodes, 10, {}, [](TierOptions& o) { o.persist_every = 0; }};
  job.elems = 1 << 18;
  auto r = run(job);
  check_final(r, 10, job.elems);
  const std::uint64_t piece = job.elems / 4 * sizeof(float);             // each rank's quarter of a tensor
  const std::uint64_t whole = piece / 5000 * 5000;                       // its whole messages (transfer_block 5000)
  for (std::size_t rank = 0; rank < r.landed.size(); ++rank) {
    INFO("rank " << rank << ": " << r.landed[rank] << " bytes landed in place over 5 replicas of 2 pieces of " << piece << " bytes");
    CHECK(r.landed[rank] >= 5 * 2 * whole);  // a last message that is a piece's tail alone lands too
    CHECK(r.landed[rank] <= 5 * 2 * piece);
  }
}

TEST_CASE("the SDC canary: a bit flipped in one rank's replicated tensor is named by rank, tensor and chunk; that step is in no "
          "tier and the job resumes from the last agreeing one, bit-identical",
          "[tiered][sdc]") {
  // spec/TIERS.md 11: every rank holds "norm" (3000 floats: three 4 KiB chunks, the last shorter); rank 0 writes
  // it, every other rank's digests of it come from step(). Rank 2's copy gets a bit flipped before capture 6.
  std::mutex mutex;
  std::vector<SdcFinding> found;
  Job job{fresh_dir("sdc"), kFourNodes, 6, {}, [&](TierOptions& o) {
            o.on_sdc = [&](const SdcFinding& f) {
              std::lock_guard<std::mutex> lock(mutex);
              found.push_back(f);
            };
          }};
  job.norm = 3000;
  job.before_step = [](int rank, std::uint64_t step, tier_trainer::Trainer& t) {
    if (rank == 2 && step == 6) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &t.norm[1500], 4);  // byte 6000: chunk 1
      bits ^= 1u << 7;
      std::memcpy(&t.norm[1500], &bits, 4);
    }
  };
  auto r = run(job);
  for (std::size_t rank = 0; rank < r.errors.size(); ++rank) {
    INFO("rank " << rank << ": " << r.errors[rank].to_string());
    CHECK(r.errors[rank].code() == Code::corrupt);
    CHECK_THAT(r.errors[rank].message(), Catch::Contains("silent data corruption at step 6") && Catch::Contains("rank 2 differs"));
  }
  REQUIRE(found.size() == 4);  // every rank was told
  for (const auto& f : found) {
    CHECK(f.step == 6);
    CHECK(f.tensor == "norm");
    CHECK(f.chunk == 1);
    CHECK(f.chunks_differing == 1);
    CHECK(f.odd_rank == 2);
    REQUIRE(f.digests.size() == 4);
    CHECK(f.digests[0].second == f.digests[1].second);
    CHECK(f.digests[2].second != f.digests[0].second);
  }
  // Step 6 is in no tier: every log says SDC and none CAPTURED; the own stores hold step 4 only as the newest.
  for (const auto& records : r.records) {
    std::size_t sdc = 0, captured = 0;
    for (const auto& rec : records) {
      sdc += rec.event == TierEvent::sdc && rec.step == 6 ? 1 : 0;
      captured += rec.event == TierEvent::captured && rec.step == 6 ? 1 : 0;
    }
    CHECK(sdc == 1);
    CHECK(captured == 0);
  }
  // The relaunched job resumes from step 4, the newest every holder agreed on, and ends as an uninterrupted run.
  Job next{job.dir, kFourNodes, 10, {}, {}};
  next.norm = 3000;
  auto resumed = run(next);
  check_final(resumed, 10);
  for (const auto& res : resumed.resumed) CHECK(res.step == 4);
  tier_trainer::Trainer reference(kElems, 1, 0);
  reference.with_norm(3000);
  for (std::uint64_t s = 1; s <= 10; ++s) reference.train(s);
  for (const auto& n : resumed.norms) CHECK(n == reference.norm);
}

TEST_CASE("a replicated tensor goes to the persistent store from its owner alone; a resume from there reads it from the owner's shard",
          "[tiered][sdc]") {
  // spec/TIERS.md 11.1: every holder keeps "norm" in its memory shard; the persistent step's pieces never overlap.
  Job first{fresh_dir("replicated-persistent"), kFourNodes, 8, {}, {}};
  first.norm = 3000;
  auto r = run(first);
  INFO(r.first_error());
  REQUIRE(r.ok());
  {
    PosixFs fs;
    auto p = Store::open(fs, (first.dir / "persistent").string(), Access::read_only);
    REQUIRE(p.ok());
    auto step8 = (*p)->open_step(8);
    REQUIRE(step8.ok());
    REQUIRE(step8->shard_count() == 4);
    CHECK(step8->shard(0).index().find_tensor("norm") != nullptr);
    for (std::size_t k = 1; k < 4; ++k) CHECK(step8->shard(k).index().find_tensor("norm") == nullptr);
    auto verified = (*p)->verify_step(8);
    REQUIRE(verified.ok());
    CHECK(verified->ok());
  }
  for (const auto& n : kFourNodes) fsys::remove_all(first.dir / ("node-" + n));  // every memory root lost
  Job next{first.dir, kFourNodes, 10, {}, {}};
  next.norm = 3000;
  auto resumed = run(next);
  check_final(resumed, 10);
  for (const auto& res : resumed.resumed) {
    CHECK(res.step == 8);
    REQUIRE_FALSE(res.sources.empty());
    CHECK_THAT(res.sources[0], Catch::Contains("persistent"));
  }
  tier_trainer::Trainer reference(kElems, 1, 0);
  reference.with_norm(3000);
  for (std::uint64_t s = 1; s <= 10; ++s) reference.train(s);
  for (const auto& n : resumed.norms) CHECK(n == reference.norm);
}

TEST_CASE("a restarted job resumes from its own memory and ends bit-identical", "[tiered]") {
  const auto dir = trained_to_7("restart");
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK_FALSE(res.fresh);
    CHECK(res.step == 6);
    REQUIRE(res.sources.size() == 1);
    CHECK_THAT(res.sources[0], Catch::Contains("own memory"));
    CHECK(res.setbacks.empty());
  }
  CHECK(r.resumed[0].state.data.offset == 6 * 32);
  CHECK_FALSE(r.resumed[0].read_persistent);  // memory served: storage was not touched
}

TEST_CASE("a promotion a failure cut short is owed: the first capture after the resume is promoted", "[tiered][promotion]") {
  // spec/TIERS.md 4.6. The first job captures 2, 4, 6, 8; the second resumes from 8 and captures 10 and 12
  // (persist_every 4). A first job whose promotions never became durable (here it had none: what a crash during
  // each promotion leaves in the logs) owes step 8's, so 10 is promoted (and 12, only 2 after it, is not); one
  // that persisted 4 and 8 owes nothing, and 12 is promoted.
  struct Row {
    const char* what;
    std::uint64_t first_persist_every;
    std::vector<std::uint64_t> persisted;
  };
  for (const Row& row : {Row{"nothing persisted: step 8's promotion is owed", 0, {10}},
                         Row{"steps 4 and 8 persisted: nothing is owed", 4, {4, 8, 12}}}) {
    INFO(row.what);
    const fsys::path dir = fresh_dir(std::string("owed-") + std::to_string(row.first_persist_every));
    auto first = run(Job{dir, kFourNodes, 9, {}, [&](TierOptions& o) { o.persist_every = row.first_persist_every; }});
    INFO(first.first_error());
    REQUIRE(first.ok());
    auto r = run(Job{dir, kFourNodes, 12, {}, {}});
    check_final(r, 12);
    CHECK(r.resumed[0].step == 8);
    CHECK(persisted_steps(dir) == row.persisted);
  }
}

#if CKPT_TEST_GLOO
TEST_CASE("over gloo: a job replicates, loses a node and a replica's byte, resumes from copies and ends bit-identical", "[tiered][gloo]") {
  // The same protocol over gloo's TCP transport (rendezvous sends: a send waits for its receiver), so
  // no step of it relies on a buffered send (spec/TIERS.md 4.7).
  Job first{fresh_dir("over-gloo"), kFourNodes, 7, {}, {}};
  first.over_gloo = true;
  auto trained = run(first);
  INFO(trained.first_error());
  REQUIRE(trained.ok());
  CHECK(count(trained.records[0], TierEvent::replicated) >= 3);
  fsys::remove_all(first.dir / "node-n2");
  flip_shard_byte(first.dir / "node-n0" / "rank-0" / "own", 6);  // rank 0 fetches its own shard from its holder
  Job second{first.dir, kFourNodes, 10, {}, {}};
  second.over_gloo = true;
  auto r = run(second);
  check_final(r, 10);
  CHECK(r.resumed[2].step == 6);
  CHECK_THAT(r.resumed[2].sources.at(0), Catch::Contains("replica"));
  CHECK_THAT(r.resumed[0].sources.at(0), Catch::Contains("replica"));
}
#endif

TEST_CASE("a capture no rank recorded leaves memory at a fresh start, so its step number can be captured again", "[tiered]") {
  // A crash between rank 2's commit of step 2 to its own memory and the ranks' agreement: no log records
  // step 2, the job starts fresh and captures step 2 again (it failed: 'step 2 is committed').
  const auto dir = fresh_dir("unrecorded-capture");
  {
    PosixFs fs;
    StoreOptions so;
    so.create_if_missing = true;
    so.chunk_size_log2 = 12;
    fsys::create_directories(dir / "node-n2" / "rank-2");
    auto own = Store::open(fs, layout::own_store((dir / "node-n2").string(), 2), Access::read_write, so);
    REQUIRE(own.ok());
    auto tx = (*own)->begin(2);
    REQUIRE(tx.ok());
    const std::vector<float> w(64, 1.0f);
    REQUIRE((*tx)->add_tensor("w", DType::F32, {64}, w.data(), w.size() * sizeof(float)).ok());
    REQUIRE((*tx)->commit().ok());
  }
  auto r = run(Job{dir, kFourNodes, 6, {}, {}});
  check_final(r, 6);
  CHECK(r.resumed[2].fresh);
  bool evicted = false;
  for (const auto& rec : r.records[2])
    evicted = evicted || (rec.event == TierEvent::evicted && rec.step == 2 && rec.detail.find("recorded by no rank") != std::string::npos);
  CHECK(evicted);
}

TEST_CASE("a lost node resumes from its replica and the replacement is refilled", "[tiered]") {
  const auto dir = trained_to_7("lost-node");
  fsys::remove_all(dir / "node-n2");
  auto r = run(Job{dir, kFourNodes, 0, {}, {}});
  REQUIRE(r.ok());
  CHECK(r.resumed[2].step == 6);
  CHECK_THAT(r.resumed[2].sources.at(0), Catch::Contains("replica"));
  // The replacement holds its peers' replicas again: rank 2 keeps rank 1's shard.
  PosixFs fs;
  auto held = Store::open(fs, layout::held_store((dir / "node-n2").string(), 2, 1), Access::read_only);
  REQUIRE(held.ok());
  REQUIRE_FALSE((*held)->steps().empty());
  CHECK((*held)->steps().back().step == 6);
  // And training goes on to the reference.
  check_final(run(Job{dir, kFourNodes, 10, {}, {}}), 10);
}

TEST_CASE("a resume returns once the state is loaded and the replacement is refilled in the background", "[tiered]") {
  // Each rank's refill waits until every rank's resume() has returned: a resume that refilled before
  // returning would wait for itself until the deadline.
  const auto dir = trained_to_7("refill-background");
  fsys::remove_all(dir / "node-n2");
  std::mutex m;
  std::condition_variable cv;
  int returned = 0;
  bool timed_out = false;
  Job job{dir, kFourNodes, 0, {}, [&](TierOptions& o) {
            o.on_phase = [&](const char* phase, std::uint64_t) {
              if (std::string(phase) != "refilling") return;
              std::unique_lock<std::mutex> lock(m);
              if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return returned == 4; })) timed_out = true;
            };
          }};
  job.after_resume = [&](int) {
    std::lock_guard<std::mutex> lock(m);
    ++returned;
    cv.notify_all();
  };
  auto r = run(job);
  REQUIRE(r.ok());
  CHECK_FALSE(timed_out);
  for (const auto& resumed : r.resumed) CHECK(resumed.refilling);
  bool noted = false;
  for (const auto& n : r.notes[2]) noted = noted || n.find("refilled a replica of shard 1 of step 6") != std::string::npos;
  CHECK(noted);
  CHECK(count(r.records[2], TierEvent::held) >= 1);  // recorded in the tier log
  PosixFs fs;
  auto held = Store::open(fs, layout::held_store((dir / "node-n2").string(), 2, 1), Access::read_only);
  REQUIRE(held.ok());
  REQUIRE_FALSE((*held)->steps().empty());
  CHECK((*held)->steps().back().step == 6);
}

TEST_CASE("a memory copy changed between its capture and its promotion is never committed to the persistent store",
          "[tiered]") {
  // The promotion reads memory without hashing it; the persistent writer's digests must be the capture's.
  const auto dir = fresh_dir("promote-changed");
  auto r = run(Job{dir, kFourNodes, 4, {}, [&](TierOptions& o) {
                     const bool rank_1 = o.memory_root.find("node-n1") != std::string::npos;
                     o.on_phase = [&dir, rank_1](const char* phase, std::uint64_t step) {
                       if (rank_1 && std::string(phase) == "promoting" && step == 4)
                         flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 4);
                     };
                   }});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.errors[1].message(), Catch::Contains("not the bytes captured"));
  PosixFs fs;
  auto persistent = Store::open(fs, (dir / "persistent").string(), Access::read_only);
  REQUIRE(persistent.ok());
  for (const auto& s : (*persistent)->steps()) CHECK(s.step != 4);
}

TEST_CASE("a node and the holder of its replica lost: the persistent tier serves", "[tiered]") {
  const auto dir = trained_to_7("lost-two");
  fsys::remove_all(dir / "node-n2");
  fsys::remove_all(dir / "node-n3");  // holds rank 2's replica
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  CHECK(r.resumed[0].step == 4);  // step 6 of shard 2 survives nowhere; step 4 is persisted
  CHECK(r.resumed[0].read_persistent);
  CHECK_THAT(r.resumed[2].sources.at(0), Catch::Contains("persistent store"));
}

TEST_CASE("a byte flipped in a memory copy is caught and the next source is used", "[tiered]") {
  const auto dir = trained_to_7("flip-own");
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  auto r = run(Job{dir, kFourNodes, 0, {}, {}});
  REQUIRE(r.ok());
  for (const auto& res : r.resumed) CHECK(res.step == 6);
  CHECK_THAT(r.resumed[1].sources.at(0), Catch::Contains("replica"));
  bool noted = false;
  for (const auto& s : r.resumed[1].setbacks) noted = noted || s.find("set aside") != std::string::npos;
  CHECK(noted);
  CHECK(count(r.records[1], TierEvent::set_aside) == 1);
  // A later resume never uses the set-aside copy again, and the files are still there after memory
  // retention has passed step 6 (captures 8 and 10 with memory_keep 2): set-aside copies are never deleted.
  auto again = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(again, 10);
  CHECK_THAT(again.resumed[1].sources.at(0), Catch::Contains("replica"));
  CHECK(again.resumed[1].setbacks.empty());
  CHECK(holds_shard_of(dir / "node-n1" / "rank-1" / "own", 6));
}

TEST_CASE("a memory copy only its rank reads is verified as the load copies it: a flipped byte fails that read and the "
          "round repeats from the replica", "[tiered][verify_on_load]") {
  // spec/TIERS.md 7.2 (revision 10): the load's own read hashes the bytes it copies, so the bad chunk is found
  // by the load (its error names the chunk) instead of by a pass over the copy before it.
  const auto dir = trained_to_7("verify-on-load");
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  auto r = run(Job{dir, kFourNodes, 0, {}, {}});
  REQUIRE(r.ok());
  for (const auto& res : r.resumed) CHECK(res.step == 6);
  CHECK_THAT(r.resumed[1].sources.at(0), Catch::Contains("replica"));
  bool failed_read = false;
  for (const auto& s : r.resumed[1].setbacks) failed_read = failed_read || (s.find("did not load: rank 1") != std::string::npos &&
                                                                              s.find("digest expected") != std::string::npos);
  INFO(r.resumed[1].setbacks.size() << " setbacks, the first: " << (r.resumed[1].setbacks.empty() ? "" : r.resumed[1].setbacks[0]));
  CHECK(failed_read);
  CHECK(count(r.records[1], TierEvent::set_aside) == 1);
  auto again = run(Job{dir, kFourNodes, 10, {}, {}});  // bit-identical from the replica, and after it
  check_final(again, 10);
}

TEST_CASE("a memory copy verified as it is loaded is still verified whole: a flipped byte in a tensor the load never reads sets "
          "it aside", "[tiered][verify_on_load]") {
  // The load reads only the trainer's tensors; the bad byte is in one it skips. The resume hashes what the
  // load did not read before it accepts the copy (7.2), so the copy is set aside and the replica serves.
  static const std::vector<float> extra(3000, 0.5f);
  Job first{fresh_dir("verify-after-load"), kFourNodes, 7, {}, {}};
  first.also_fill = [](int rank, std::uint64_t, SaveRequest& req) {
    req.add_tensor("unread-" + std::to_string(rank), DType::F32, {extra.size()}, extra.data(), extra.size() * sizeof(float));
  };
  auto trained = run(first);
  REQUIRE(trained.ok());
  flip_tensor_byte(first.dir / "node-n1" / "rank-1" / "own", 6, "unread-1");
  auto r = run(Job{first.dir, kFourNodes, 0, {}, {}});
  REQUIRE(r.ok());
  for (const auto& res : r.resumed) CHECK(res.step == 6);
  CHECK_THAT(r.resumed[1].sources.at(0), Catch::Contains("replica"));
  bool named = false;
  for (const auto& s : r.resumed[1].setbacks) named = named || s.find("tensor 'unread-1'") != std::string::npos;
  CHECK(named);
  CHECK(count(r.records[1], TierEvent::set_aside) == 1);
  for (std::size_t rank : {0, 2, 3}) CHECK(r.resumed[rank].verified_bytes > 0);  // their own copies, verified as loaded
  CHECK(r.resumed[1].verified_bytes == 0);  // the replica it received was hashed on receipt (4.3), the bad copy not counted
}

TEST_CASE("a directory named rank-01 is no rank directory: resume neither reads it nor counts rank-1 twice", "[tiered]") {
  // spec/TIERS.md 2.1: <r> is decimal without a leading zero. An intact copy of rank 1's directory under
  // a name the layout forbids is no source, and it does not make rank 1's own (flipped) copy count twice.
  const auto dir = trained_to_7("misnamed-rank-dir");
  fsys::copy(dir / "node-n1" / "rank-1", dir / "node-n1" / "rank-01", fsys::copy_options::recursive);
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK(res.step == 6);
    for (const auto& s : res.sources) CHECK_THAT(s, !Catch::Contains("rank-01"));
    for (const auto& s : res.setbacks) CHECK_THAT(s, !Catch::Contains("rank-01"));
  }
  CHECK_THAT(r.resumed[1].sources.at(0), Catch::Contains("replica"));
  std::size_t set_aside = 0;
  for (const auto& s : r.resumed[1].setbacks) set_aside += s.find("set aside") != std::string::npos ? 1 : 0;
  CHECK(set_aside == 1);  // the flipped copy, once
  CHECK(count(r.records[1], TierEvent::set_aside) == 1);
  CHECK(fsys::exists(dir / "node-n1" / "rank-01" / "own" / "JOURNAL"));  // read by no one, left as it is
}

TEST_CASE("a byte flipped in a replica is caught on fetch and the next source is used", "[tiered]") {
  const auto dir = trained_to_7("flip-replica");
  fsys::remove_all(dir / "node-n2");
  flip_shard_byte(dir / "node-n3" / "rank-3" / "held-2", 6);
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  CHECK(r.resumed[0].step == 4);  // no verified copy of shard 2 at step 6 remains
  bool caught = false;
  for (const auto& s : r.resumed[2].setbacks) caught = caught || s.find("does not verify") != std::string::npos;
  CHECK(caught);
}

TEST_CASE("one rank whose copies do not verify: every rank falls back with it", "[tiered]") {
  const auto dir = trained_to_7("fall-back-together");
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  flip_shard_byte(dir / "node-n2" / "rank-2" / "held-1", 6);
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  for (const auto& res : r.resumed) CHECK(res.step == 4);
}

TEST_CASE("a resume of two rounds fetches each shard once, and later captures retire what it fetched", "[tiered]") {
  // Every rank loads every shard; rank 1's own copy and rank 0's replica of shard 3 are bad, so the
  // first round fails and a second one fetches the agreed step again. Captures after it run retention of
  // the shards fetched for the resume (12 steps: 5 captures) and must find what they retire.
  const auto dir = trained_to_7("two-rounds");
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  flip_shard_byte(dir / "node-n0" / "rank-0" / "held-3", 6);
  auto r = run(Job{dir, kFourNodes, 16, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 16);
  for (const auto& res : r.resumed) CHECK(res.step == 6);
  // A good copy is never set aside: only the two flipped ones are in any quarantine/.
  std::size_t quarantined = 0;
  for (const auto& e : fsys::recursive_directory_iterator(dir))
    if (e.path().extension() == ".ckpt" && e.path().parent_path().parent_path().filename() == "quarantine") ++quarantined;
  CHECK(quarantined == 2);
}

TEST_CASE("a step that failed to load is recorded and never chosen again", "[tiered]") {
  // Step 8 is in memory and persisted; rank 1 finds it bad after loading (Megatron-LM #5281).
  const auto dir = trained_to_7("load-failed", 9);
  auto nan = [](int rank, TierView& v) {
    return rank == 1 && v.step() == 8 ? make_error(Code::corrupt, "loss is NaN three steps after load") : Status();
  };
  auto r = run(Job{dir, kFourNodes, 0, nan, {}});
  REQUIRE(r.ok());
  for (const auto& res : r.resumed) CHECK(res.step == 6);
  for (const auto& records : r.records) CHECK(count(records, TierEvent::load_failed) == 1);
  // No failing load now, and the persisted step 8 is intact: still never chosen again.
  auto again = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(again, 10);
  for (const auto& res : again.resumed) CHECK(res.step == 6);
}

TEST_CASE("4 nodes shrunk to 3 load the agreed step resharded", "[tiered]") {
  const auto dir = trained_to_7("shrink");
  fsys::remove_all(dir / "node-n3");
  auto r = run(Job{dir, {"n0", "n1", "n2"}, 10, {}, {}});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK(res.step == 6);
    CHECK(res.world == 4);
    CHECK(res.sources.size() == 4);
  }
}

TEST_CASE("the memory tier's free space is checked before the first capture", "[tiered]") {
  Job job{fresh_dir("capacity"), kFourNodes, 2, {}, [](TierOptions& o) { o.memory_keep = std::size_t{1} << 40; }};
  auto r = run(job);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors[0].code() == Code::io);
  CHECK_THAT(r.errors[0].message(), Catch::Contains("needs") && Catch::Contains("bytes are free") && Catch::Contains("node-n0"));
}

TEST_CASE("a job with no recorded step starts fresh; recorded steps that cannot load are refused", "[tiered]") {
  const auto dir = fresh_dir("fresh");
  auto r = run(Job{dir, kFourNodes, 0, {}, {}});
  REQUIRE(r.ok());
  CHECK(r.resumed[0].fresh);
  const auto trained = trained_to_7("nothing-left");
  fsys::remove_all(trained / "persistent");
  for (const char* n : {"node-n2", "node-n3"}) fsys::remove_all(trained / n);
  auto refused = run(Job{trained, kFourNodes, 0, {}, {}});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.errors[0].code() == Code::corrupt);
  CHECK_THAT(refused.errors[0].message(), Catch::Contains("refusing to start over"));
}

TEST_CASE("with load_all_shards every rank loads every shard of the agreed step", "[tiered]") {
  const auto dir = trained_to_7("load-all");
  fsys::remove_all(dir / "node-n1");
  auto r = run(Job{dir, kFourNodes, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK(res.step == 6);
    CHECK(res.sources.size() >= 4);
  }
  // Shards fetched only for the resume do not stay in memory once the own store has moved on, and
  // what recorded that reads back.
  PosixFs fs;
  for (int rank = 0; rank < 4; ++rank) {
    if (rank == 1) continue;
    auto log = read_tier_log(fs, layout::rank_dir((dir / ("node-n" + std::to_string(rank))).string(), static_cast<std::uint32_t>(rank)));
    INFO(log.status().to_string());
    CHECK(log.ok());
  }
  for (std::uint32_t s : {1u, 2u}) {
    auto fetched = Store::open(fs, layout::held_store((dir / "node-n0").string(), 0, s), Access::read_only);
    REQUIRE(fetched.ok());
    CHECK((*fetched)->steps().empty());
  }
}

TEST_CASE("a data-parallel resume verifies each shard on one rank and the others receive it", "[tiered]") {
  // 4 ranks each need all 4 shards, each byte hashed once per rank: a rank verifies the copies its memory
  // holds (its own shard, the replica it keeps), and receives the other two from their verifiers, which send
  // them unhashed, hashing them on receipt. Over the ranks the bytes read back to verify add up to twice the
  // step (own + replica), not 7.5 times (the plan before: each fetched shard verified by its sender as it was
  // read, and every copy verified again in the second round). One owner's copy does not verify: in the next round
  // rank 2 verifies shard 1 from its replica (verified already in round 1: not again) and sends it.
  const auto dir = trained_to_7("verify-once");
  flip_shard_byte(dir / "node-n1" / "rank-1" / "own", 6);
  auto r = run(Job{dir, kFourNodes, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  std::uint64_t verified = 0;
  for (const auto& res : r.resumed) {
    CHECK(res.step == 6);
    REQUIRE(res.sources.size() == 4);
    verified += res.verified_bytes;
  }
  // The step's shard bytes: each rank's slice of every tensor and its training state, as the trainer fills.
  PosixFs fs;
  std::uint64_t step_bytes = 0;
  for (int rank = 0; rank < 4; ++rank) {
    auto own = Store::open(fs, layout::own_store((dir / ("node-n" + std::to_string(rank))).string(), static_cast<std::uint32_t>(rank)),
                           Access::read_only);
    REQUIRE(own.ok());
    auto info = (*own)->find(10);
    REQUIRE(info.ok());
    auto step = StepReader::open(fs, (*own)->path(), *info, (*own)->uuid());
    REQUIRE(step.ok());
    for (const auto& p : step->shard(0).index().pieces) step_bytes += p.data_length;
  }
  CHECK(verified > step_bytes);       // every shard verified somewhere
  CHECK(verified < 2 * step_bytes);   // own and replica, but not rank 1's flipped one, and nothing twice
  CHECK_THAT(r.resumed[2].sources[0], Catch::Contains("shard 0 from own memory via rank 0, which verified it"));
  CHECK_THAT(r.resumed[2].sources[1], Catch::StartsWith("shard 1 from replica in memory ("));
  CHECK_THAT(r.resumed[0].sources[1], Catch::Contains("shard 1 from replica in memory via rank 2, which verified it"));
  CHECK_THAT(r.resumed[1].sources[1], Catch::Contains("shard 1 from replica in memory via rank 2, which verified it"));
  bool set_aside = false;
  for (const auto& s : r.resumed[1].setbacks) set_aside = set_aside || s.find("rank-1/own") != std::string::npos;
  CHECK(set_aside);
}

TEST_CASE("a data-parallel resume of a shard only the persistent store holds: one rank reads it and shares it", "[tiered]") {
  const auto dir = trained_to_7("verify-once-persistent");
  fsys::remove_all(dir / "node-n2");
  fsys::remove_all(dir / "node-n3");  // shard 2 of steps 4 and 6 is in no memory; step 4 is persisted
  auto r = run(Job{dir, kFourNodes, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK(res.step == 4);
    REQUIRE(res.sources.size() == 4);
  }
  CHECK_THAT(r.resumed[2].sources[2], Catch::StartsWith("shard 2 from persistent store ("));
  CHECK_THAT(r.resumed[0].sources[2], Catch::Contains("shard 2 from persistent store via rank 2, which verified it"));
}

// The bytes of the shard files of `step` under one node's memory root (every rank's own store).
std::uint64_t step_data_bytes(const fsys::path& dir, const std::vector<std::string>& nodes, std::uint64_t step) {
  PosixFs fs;
  std::uint64_t n = 0;
  for (std::size_t rank = 0; rank < nodes.size(); ++rank) {
    auto own = Store::open(fs, layout::own_store((dir / ("node-" + nodes[rank])).string(), static_cast<std::uint32_t>(rank)), Access::read_only);
    REQUIRE(own.ok());
    auto info = (*own)->find(step);
    REQUIRE(info.ok());
    auto reader = StepReader::open(fs, (*own)->path(), *info, (*own)->uuid());
    REQUIRE(reader.ok());
    for (const auto& p : reader->shard(0).index().pieces) n += p.data_length;
  }
  return n;
}

TEST_CASE("a data-parallel resume hashes each file of a node once: the node's other ranks read it where it lies", "[tiered]") {
  // Two nodes of two ranks; each node's memory holds all four shards (two own, two replicas of the other node's).
  // Each file is verified by one rank of its node; the sibling reads it once told so: over the ranks the bytes
  // hashed are the step twice (once per node), where each rank used to verify every shard (four times).
  const std::vector<std::string> two_by_two{"n0", "n0", "n1", "n1"};
  Job first{fresh_dir("verify-once-per-node"), two_by_two, 7, {}, {}};
  REQUIRE(run(first).ok());
  auto r = run(Job{first.dir, two_by_two, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  const std::uint64_t step_bytes = step_data_bytes(first.dir, two_by_two, 10);
  std::uint64_t verified = 0;
  std::size_t siblings = 0;
  for (const auto& res : r.resumed) {
    CHECK(res.step == 6);
    REQUIRE(res.sources.size() == 4);
    verified += res.verified_bytes;
    for (const auto& s : res.sources) siblings += s.find("of this node verified") != std::string::npos ? 1 : 0;
  }
  CHECK(verified > step_bytes);
  CHECK(verified <= 2 * step_bytes);
  CHECK(siblings == 8);  // each rank reads two of the four shards as its sibling verified them

  // A file that does not verify is set aside for both ranks of its node at once: the next round sends that shard
  // from the other node, once, and no good copy is blamed.
  Job again{fresh_dir("verify-once-per-node-bad"), two_by_two, 7, {}, {}};
  REQUIRE(run(again).ok());
  flip_shard_byte(again.dir / "node-n0" / "rank-0" / "own", 6);
  auto bad = run(Job{again.dir, two_by_two, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(bad, 10);
  CHECK(set_aside_resuming(bad, 6) == 1);
  // Shard 0 crosses from n1 once: rank 0 receives it, rank 1 reads what rank 0 received.
  CHECK_THAT(bad.resumed[0].sources[0], Catch::Contains("shard 0 from replica in memory via rank"));
  CHECK_THAT(bad.resumed[1].sources[0], Catch::Contains("shard 0 from what rank 0 of this node received"));
}

TEST_CASE("a data-parallel resume sends each shard to a node once: one rank receives it, the others read it", "[tiered]") {
  // Node n0 lost: its two ranks hold no copy; n1 holds all four shards (two own, two replicas). Each shard crosses
  // to n0 once, received by one of its ranks (each two), and the other reads what it received.
  const std::vector<std::string> two_by_two{"n0", "n0", "n1", "n1"};
  Job first{fresh_dir("receive-once-per-node"), two_by_two, 7, {}, {}};
  REQUIRE(run(first).ok());
  fsys::remove_all(first.dir / "node-n0");
  auto r = run(Job{first.dir, two_by_two, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  for (int rank : {0, 1}) {
    const auto& res = r.resumed[static_cast<std::size_t>(rank)];
    CHECK(res.step == 6);
    for (const auto& s : res.sources) UNSCOPED_INFO(s);
    REQUIRE(res.sources.size() == 4);
    std::size_t received = 0, read = 0;
    for (const auto& s : res.sources) {
      received += s.find("which verified it (received into") != std::string::npos ? 1 : 0;
      read += s.find("of this node received") != std::string::npos ? 1 : 0;
    }
    CHECK(received == 2);
    CHECK(read == 2);
  }
  // What the two ranks of n0 received: four shards in all, one HELD record each.
  std::size_t held = 0;
  for (int rank : {0, 1})
    for (const auto& rec : r.records[static_cast<std::size_t>(rank)]) held += rec.event == TierEvent::held && rec.step == 6 ? 1 : 0;
  CHECK(held >= 4);  // plus the refill's replicas of n1's shards
}

TEST_CASE("a data-parallel resume from the persistent store: the verifier's node reads the file where the verifier did", "[tiered]") {
  // Both nodes lost their memory (a power loss): every shard comes from the persistent store. Its owner reads and
  // verifies it; the owner's node's other rank reads the same file once told it verified (the node's page cache
  // holds it), not over the network; the shard crosses to the other node once, received by one rank and read by
  // the other. Each shard is hashed once in all: by its owner, or on receipt.
  const std::vector<std::string> two_by_two{"n0", "n0", "n1", "n1"};
  Job first{fresh_dir("persistent-once-per-node"), two_by_two, 7, {}, {}};
  REQUIRE(run(first).ok());
  fsys::remove_all(first.dir / "node-n0");
  fsys::remove_all(first.dir / "node-n1");
  auto r = run(Job{first.dir, two_by_two, 10, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(r, 10);
  for (std::size_t rank = 0; rank < r.resumed.size(); ++rank) {
    const auto& res = r.resumed[rank];
    for (const auto& s : res.sources) UNSCOPED_INFO(s);
    REQUIRE(res.sources.size() == 4);
    CHECK_THAT(res.sources[rank], Catch::StartsWith("shard " + std::to_string(rank) + " from persistent store ("));
    const std::size_t sibling = rank ^ 1u;  // the other rank of its node
    CHECK_THAT(res.sources[sibling], Catch::StartsWith("shard " + std::to_string(sibling) + " from persistent store (") &&
                                         Catch::EndsWith("which rank " + std::to_string(sibling) + " of this node verified"));
    std::size_t received = 0, read = 0;
    for (const auto& s : res.sources) {
      received += s.find("which verified it (received into") != std::string::npos ? 1 : 0;
      read += s.find("of this node received") != std::string::npos ? 1 : 0;
    }
    CHECK(received + read == 2);  // the other node's two shards
  }
  std::uint64_t verified = 0;
  for (const auto& res : r.resumed) verified += res.verified_bytes;
  CHECK(verified == step_data_bytes(first.dir, two_by_two, 10));  // each shard by its owner alone (every step's shards alike)

  // Shard 0 of the newest persisted step flipped: its verifier (rank 0) finds it bad and tells its sibling, which
  // reads none of it; the copy is set aside once and every rank loads the step before, bit-identical in the end.
  Job again{fresh_dir("persistent-once-per-node-bad"), two_by_two, 9, {}, {}};
  REQUIRE(run(again).ok());
  fsys::remove_all(again.dir / "node-n0");
  fsys::remove_all(again.dir / "node-n1");
  flip_shard_byte(again.dir / "persistent", 8, "shard-00000-");
  auto bad = run(Job{again.dir, two_by_two, 12, {}, [](TierOptions& o) { o.load_all_shards = true; }});
  check_final(bad, 12);
  CHECK(set_aside_resuming(bad, 4) == 1);
  CHECK_THAT(bad.resumed[1].sources[0], Catch::EndsWith("which rank 0 of this node verified"));
}

TEST_CASE("the tier log stays bounded over a long run", "[tiered]") {
  Job job{fresh_dir("long-run"), kFourNodes, 120, {}, [](TierOptions& o) { o.memory_every = 1, o.persist_every = 0, o.persistent.clear(); }};
  auto r = run(job);
  check_final(r, 120);
  for (std::size_t rank = 0; rank < r.records.size(); ++rank) {
    CHECK(r.records[rank].size() <= 64 + 16 * 2 * 2 + 8);
    CHECK(fsys::file_size(job.dir / ("node-n" + std::to_string(rank)) / ("rank-" + std::to_string(rank)) / "TIERS") < (1u << 20));
  }
  // A restart after compaction still finds the newest step.
  auto again = run(Job{job.dir, kFourNodes, 0, {}, [](TierOptions& o) { o.memory_every = 1, o.persist_every = 0, o.persistent.clear(); }});
  REQUIRE(again.ok());
  CHECK(again.resumed[0].step == 120);
}

TEST_CASE("a damaged tier log is set aside, never deleted, and the job still resumes", "[tiered]") {
  const auto dir = trained_to_7("corrupt-log");
  const auto log = dir / "node-n1" / "rank-1" / "TIERS";
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 20);  // inside the first record after the header group
    f.put('\x5a');
  }
  auto r = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(r, 10);
  CHECK(r.resumed[1].step == 6);  // the other ranks' CAPTURED records still claim step 6
  CHECK(fsys::exists(dir / "node-n1" / "rank-1" / "TIERS.corrupt-0"));
  bool noted = false;
  for (const auto& s : r.resumed[1].setbacks) noted = noted || s.find("set aside as") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("promotion to an object store uploads every shard and the store reads back verified", "[tiered][object]") {
  ObjectTier tier;
  Job job{fresh_dir("s3-promote"), kFourNodes, 10, {}, tier.tune()};
  auto r = run(job);
  check_final(r, 10);
  for (const auto& records : r.records) CHECK(count(records, TierEvent::persisted) == 2);  // 4, 8
  CHECK_FALSE(fsys::exists(job.dir / "persistent"));  // nothing of the persistent tier went to a directory
  const auto objects = tier.objects.objects();
  CHECK(objects.count(object::commit_key(4)) == 1);
  CHECK(objects.count(object::commit_key(8)) == 1);
  for (int rank = 0; rank < 4; ++rank) CHECK_FALSE(tier.shard_key(8, rank).empty());
  CHECK(tier.objects.open_uploads() == 0);
  // The store as any reader opens it: steps 4 and 8, every chunk of every shard verified by ranged GETs.
  testing::MemoryObjects reader = tier.objects.view();
  auto store = Store::open(object_log(reader), Access::read_only);
  REQUIRE(store.ok());
  REQUIRE((*store)->steps().size() == 2);
  CHECK((*store)->steps()[1].step == 8);
  CHECK((*store)->steps()[1].world_size == 4);
  report::VerifyPathsReport verified;
  REQUIRE(report::verify_open_store(**store, {}, verified).ok());
  REQUIRE(verified.stores.size() == 1);
  CHECK(verified.stores[0].ok);
  CHECK(verified.steps.size() == 2);
  // The persistent step is whole: no partial-step marker, rank 0's training state.
  auto step8 = (*store)->open_step(8);
  REQUIRE(step8.ok());
  CHECK(step8->state().values.count(std::string(kPartialStepKey)) == 0);
  CHECK(step8->state().data.offset == 8 * 32);
  // The memory-root tools compare and verify against the object store as against a directory.
  PosixFs fs;
  MemoryRootOptions mo;
  mo.persistent = kObjectUrl, mo.open_objects = tier.opener();
  auto described = verify_memory_root(fs, (job.dir / "node-n0").string(), mo);
  REQUIRE(described.ok());
  INFO((described->problems.empty() ? std::string() : described->problems.front().message));
  CHECK(described->ok());
  bool compared = false;
  for (const auto& s : described->root.steps)
    if (s.step == 8) compared = s.persistent == PersistentState::same;
  CHECK(compared);
  mo.open_objects = nullptr;
  CHECK(describe_memory_root(fs, (job.dir / "node-n0").string(), mo).status().code() == Code::unsupported);
}

TEST_CASE("a job whose memory tier is wiped resumes from the object store bit for bit", "[tiered][object]") {
  ObjectTier tier;
  const auto dir = trained_to_7("s3-wiped", 7, tier.tune());
  for (const auto& n : kFourNodes) fsys::remove_all(dir / ("node-" + n));  // every node lost: a power cut
  auto r = run(Job{dir, kFourNodes, 10, {}, tier.tune()});
  check_final(r, 10);
  for (const auto& res : r.resumed) {
    CHECK(res.step == 4);
    REQUIRE(res.sources.size() == 1);
    CHECK_THAT(res.sources[0], Catch::Contains("persistent store") && Catch::Contains(kObjectUrl));
  }
  CHECK(r.resumed[0].read_persistent);
  CHECK(r.resumed[2].state.data.offset == 4 * 32);
  // Training went on and promoted step 8 above the resumed step.
  for (const auto& records : r.records) CHECK(count(records, TierEvent::persisted) == 1);
  CHECK(tier.objects.objects().count(object::commit_key(8)) == 1);
}

TEST_CASE("a damaged object of the persistent tier is set aside, never loaded, and never deleted", "[tiered][object]") {
  ObjectTier tier;
  const auto dir = trained_to_7("s3-damaged", 9, tier.tune());  // steps 4 and 8 persisted
  for (const auto& n : kFourNodes) fsys::remove_all(dir / ("node-" + n));
  const std::string key = tier.shard_key(8, 1);
  REQUIRE_FALSE(key.empty());
  std::string bytes = tier.objects.objects().at(key);
  REQUIRE(bytes.size() > 8192);
  bytes[8192] = static_cast<char>(bytes[8192] ^ 0x10);  // a data chunk of rank 1's shard: its index still reads
  tier.objects.set_object(key, bytes);
  auto r = run(Job{dir, kFourNodes, 12, {}, tier.tune()});
  check_final(r, 12);
  for (const auto& res : r.resumed) CHECK(res.step == 4);  // step 8's shard 1 exists nowhere else
  bool caught = false;
  for (const auto& s : r.resumed[1].setbacks) caught = caught || s.find(key) != std::string::npos;
  CHECK(caught);
  // Rank 0 scanned the store for everyone: it records the copy set aside, named PATH#SHARD (spec/TIERS.md 5.2).
  CHECK(count(r.records[0], TierEvent::set_aside) == 1);
  for (const auto& rec : r.records[0])
    if (rec.event == TierEvent::set_aside) CHECK(rec.detail == std::string(kObjectUrl) + "/#1");
  // The damaged object stays as it was; step 8 is committed there once, so the retrained step 8 stays in
  // memory (a note says so) and step 12 is promoted.
  CHECK(tier.objects.objects().at(key) == bytes);
  bool skipped = false;
  for (const auto& n : r.notes[0]) skipped = skipped || n.find("not promoted") != std::string::npos;
  CHECK(skipped);
  for (const auto& records : r.records) CHECK(count(records, TierEvent::persisted) == 1);
  CHECK(tier.objects.objects().count(object::commit_key(12)) == 1);
  // A later job resumes from memory, past the damage.
  auto again = run(Job{dir, kFourNodes, 14, {}, tier.tune()});
  check_final(again, 14);
  for (const auto& res : again.resumed) CHECK(res.step == 12);
}

TEST_CASE("an s3:// persistent tier without an object opener is refused at create", "[tiered][object]") {
  SoloJob solo("s3-no-opener");
  TierOptions o = solo.options(kObjectUrl);
  o.persist_every = 2;
  auto t = solo.create(o);
  CHECK(t.status().code() == Code::unsupported);
  CHECK_THAT(t.status().message(), Catch::Contains(kObjectUrl) && Catch::Contains("open_objects"));
}

// --- A capture while the previous one is in the background (spec/TIERS.md 4.6) ----------------------------

// Two ranks (threads) with skip across ranks, training steps 1..`steps`; each rank's background is held at
// (`hold_phase`, `hold_step`) until both training threads returned from step `release_after` (and `hold_also`
// holds), a hold over a minute counting as timed out; after `release_after` each rank waits for its
// background, so the next capture finds it idle. With `promoter` the tiers get a promotion communicator.
struct HeldJob {
  fsys::path dir;
  std::uint64_t steps = 0;
  std::string hold_phase;
  std::uint64_t hold_step = 0, release_after = 0;
  bool promoter = false;
  std::function<bool(TieredCheckpointer&)> hold_also = [](TieredCheckpointer&) { return true; };
  std::function<void(TieredCheckpointer&, std::uint64_t step)> after_step = [](TieredCheckpointer&, std::uint64_t) {};
  std::function<void(TierOptions&)> tune = [](TierOptions&) {};
  std::function<void(int rank, std::uint64_t step, const StepOutcome&)> on_outcome = [](int, std::uint64_t, const StepOutcome&) {};
};
struct HeldResult {
  bool timed_out = false;
  std::vector<Status> errors;
  std::vector<std::vector<bool>> skipped;  // per rank: each capture's
  std::vector<std::uint64_t> counted;      // steps_skipped()
  std::vector<std::vector<TierRecord>> records;
};

HeldResult run_held(const HeldJob& job) {
  constexpr int kWorld = 2;
  ThreadGroup group(kWorld), control_group(kWorld), promotion_group(kWorld);
  std::mutex m;
  std::condition_variable cv;
  int returned = 0;
  HeldResult out;
  out.errors.resize(kWorld), out.skipped.resize(kWorld), out.counted.resize(kWorld), out.records.resize(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      ThreadComm comm(group, r), control(control_group, r), promotion(promotion_group, r);
      PosixFs fs;
      TierOptions o = options_for(Job{job.dir, {"n0", "n1"}, 0, {}, {}}, r);
      o.when_busy = WhenBusy::skip, o.memory_every = 2;
      job.tune(o);
      std::atomic<TieredCheckpointer*> self{nullptr};
      o.on_phase = [&](const char* phase, std::uint64_t step) {
        if (phase != job.hold_phase || step != job.hold_step) return;
        std::unique_lock<std::mutex> lock(m);
        if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return returned == kWorld && job.hold_also(*self.load()); }))
          out.timed_out = true;
      };
      auto fail = [&](const Status& s) {
        out.errors[i] = s;
        comm.leave(s);
        promotion.leave(s);
      };
      auto tiers = job.promoter ? TieredCheckpointer::create(fs, comm, control, promotion, o) : TieredCheckpointer::create(fs, comm, control, o);
      if (!tiers.ok()) return fail(tiers.status());
      self = tiers->get();
      tier_trainer::Trainer trainer(kElems, kWorld, r);
      for (std::uint64_t s = 1; s <= job.steps; ++s) {
        trainer.train(s);
        auto step = (*tiers)->step(s, [&](SaveRequest& req) { trainer.fill(req); });
        if (!step.ok()) return fail(step.status());
        if (s % 2 == 0) out.skipped[i].push_back(step->skipped);
        job.on_outcome(r, s, *step);
        job.after_step(**tiers, s);
        if (s == job.release_after) {
          {
            std::lock_guard<std::mutex> lock(m);
            ++returned;
          }
          cv.notify_all();
          Status idle = (*tiers)->wait();
          if (!idle.ok()) return fail(idle);
        }
      }
      Status waited = (*tiers)->wait();
      if (!waited.ok()) return fail(waited);
      out.counted[i] = (*tiers)->steps_skipped();
      out.records[i] = (*tiers)->records();
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST_CASE("a capture due while the previous one replicates is skipped on every rank and recorded, never waited for",
          "[tiered][skip]") {
  // Rank workers block in step 2's replication until both training threads have returned from step 4: with
  // when_busy wait, step(4) would wait for that replication and the job would never get there.
  HeldJob job{fresh_dir("skip"), 6, "replicating", 2, 4};
  job.tune = [](TierOptions& o) { o.persist_every = 0, o.persistent.clear(); };
  const HeldResult r = run_held(job);
  CHECK_FALSE(r.timed_out);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    INFO("rank " << i);
    REQUIRE(r.errors[i].ok());
    CHECK(r.skipped[i] == std::vector<bool>{false, true, false});  // steps 2 and 6 taken, 4 skipped
    CHECK(r.counted[i] == 1);
    CHECK(count(r.records[i], TierEvent::skipped) == 1);
    CHECK(count(r.records[i], TierEvent::captured) == 2);
    for (const auto& rec : r.records[i])
      if (rec.event == TierEvent::skipped) CHECK(rec.step == 4);
    const fsys::path own = job.dir / ("node-n" + std::to_string(i)) / ("rank-" + std::to_string(i)) / "own";
    CHECK(holds_shard_of(own, 2));
    CHECK_FALSE(holds_shard_of(own, 4));
    CHECK(holds_shard_of(own, 6));
  }
}

TEST_CASE("a promotion runs beside replication: the next capture replicates meanwhile, and one that would write over the "
          "step being promoted is skipped", "[tiered][skip][promotion]") {
  // spec/TIERS.md 4.4, 4.6: each rank's promotion of step 2 is held until step 4 is replicated on that rank and
  // both training threads have returned from step 6. With one worker for both, step 4 would be skipped and
  // never replicated, and the hold would time out. With a promoter of its own: 4 is taken and replicated; 6
  // is skipped (its file would be step 2's, still read by the promotion); 8 is taken.
  HeldJob job{fresh_dir("promoter"), 8, "promoting", 2, 6, true};
  job.tune = [](TierOptions& o) { o.persist_every = 2; };
  job.hold_also = [](TieredCheckpointer& t) { return t.steps_replicated() >= 4; };
  job.after_step = [](TieredCheckpointer& t, std::uint64_t s) {
    if (s != 3 && s != 5) return;  // the worker is done with the last capture: only a promotion can make the next busy
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (t.captures_in_background() > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  const HeldResult r = run_held(job);
  CHECK_FALSE(r.timed_out);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    INFO("rank " << i);
    REQUIRE(r.errors[i].ok());
    CHECK(r.skipped[i] == std::vector<bool>{false, false, true, false});  // 2, 4 and 8 taken; 6 skipped
    CHECK(count(r.records[i], TierEvent::replicated) == 3);
    CHECK(count(r.records[i], TierEvent::persisted) == 3);
  }
  CHECK(persisted_steps(job.dir) == std::vector<std::uint64_t>{2, 4, 8});
}

TEST_CASE("a promoted capture that is skipped hands its promotion to the next capture taken", "[tiered][skip][promotion]") {
  // spec/TIERS.md 4.6: step 4 (a multiple of persist_every) is skipped while step 2 replicates, so step 6, the next
  // capture taken, is promoted in its place; step 8, a multiple but only 2 after it, passes its promotion on to 10.
  // Without the rule the persistent tier would hold step 8 alone, and a power loss before it would go back to the
  // job's start.
  HeldJob job{fresh_dir("owed"), 10, "replicating", 2, 4};
  job.tune = [](TierOptions& o) { o.persist_every = 4; };
  std::mutex m;
  std::vector<std::pair<std::uint64_t, TierAction>> actions;  // rank 0's outcomes of the captures taken
  job.after_step = [&](TieredCheckpointer& t, std::uint64_t s) {
    if (s % 2 == 1 && s > 5) {  // the worker idle before each capture from 8 on: only step 4 is skipped
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (t.captures_in_background() > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  job.on_outcome = [&](int rank, std::uint64_t s, const StepOutcome& out) {
    std::lock_guard<std::mutex> lock(m);
    if (rank == 0 && !out.skipped && out.action != TierAction::none) actions.emplace_back(s, out.action);
  };
  const HeldResult r = run_held(job);
  CHECK_FALSE(r.timed_out);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    INFO("rank " << i);
    REQUIRE(r.errors[i].ok());
    CHECK(r.skipped[i] == std::vector<bool>{false, true, false, false, false});  // 4 skipped
    CHECK(count(r.records[i], TierEvent::persisted) == 2);
  }
  using A = TierAction;
  CHECK(actions == std::vector<std::pair<std::uint64_t, TierAction>>{{2, A::capture}, {6, A::capture_and_persist},
                                                                     {8, A::capture}, {10, A::capture_and_persist}});
  CHECK(persisted_steps(job.dir) == std::vector<std::uint64_t>{6, 10});
}

TEST_CASE("skipping across ranks without a control communicator is refused at create", "[tiered][skip]") {
  const fsys::path dir = fresh_dir("skip-no-control");
  const auto created = ckpt_test::run_ranks(2, [&](std::uint32_t r, ThreadComm& comm) {
    PosixFs fs;
    TierOptions o = options_for(Job{dir, {"n0", "n1"}, 0, {}, {}}, static_cast<int>(r));
    o.when_busy = WhenBusy::skip;
    return TieredCheckpointer::create(fs, comm, o).status();
  });
  for (const Status& s : created) {
    CHECK(s.code() == Code::invalid_argument);
    CHECK_THAT(s.message(), Catch::Contains("control communicator"));
  }
}

// --- Parity groups (spec/TIERS.md 12) -----------------------------------------------------------------

namespace {

std::function<void(TierOptions&)> with_parity(int group, int losses) {
  return [=](TierOptions& o) { o.replicas = 0, o.parity_group = group, o.parity_losses = losses; };
}

std::vector<std::string> nodes_named(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("n" + std::to_string(i));
  return out;
}


}  // namespace

TEST_CASE("parity groups: a capture's parity is committed on every rank and the step recorded as surviving k losses", "[tiered][parity]") {
  const auto dir = fresh_dir("parity-capture");
  auto r = run(Job{dir, nodes_named(4), 7, {}, with_parity(4, 1)});
  INFO(r.first_error());
  REQUIRE(r.ok());
  PosixFs fs;
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(count(r.records[static_cast<std::size_t>(rank)], TierEvent::parity) == 3);  // steps 2, 4, 6
    CHECK(count(r.records[static_cast<std::size_t>(rank)], TierEvent::replicated) == 3);
    CHECK(count(r.records[static_cast<std::size_t>(rank)], TierEvent::held) == 0);  // no replicas
    // memory_keep 2: the parity store holds steps 4 and 6, each with one stripe's parity and the layout.
    const std::string root = (dir / ("node-n" + std::to_string(rank))).string();
    auto store = Store::open(fs, memory_layout::parity_store(root, static_cast<std::uint32_t>(rank)), Access::read_only);
    REQUIRE(store.ok());
    REQUIRE((*store)->steps().size() == 2);
    CHECK((*store)->steps().back().step == 6);
  }
}

TEST_CASE("parity groups: every loss of up to k nodes of a 4- and a 6-node group is rebuilt and resumes bit-identical",
          "[tiered][parity]") {
  for (auto [n, k] : std::vector<std::pair<int, int>>{{4, 1}, {4, 2}, {6, 1}, {6, 2}}) {
    const std::string name = "parity-" + std::to_string(n) + "-" + std::to_string(k);
    const auto base = fresh_dir(name + "-base");
    {
      auto first = run(Job{base, nodes_named(n), 7, {}, with_parity(n, k)});
      INFO(first.first_error());
      REQUIRE(first.ok());
    }
    for (const auto& lost : ckpt_test::subsets_of(n, 1, k)) {
      std::string which;
      for (int i : lost) which += "-" + std::to_string(i);
      INFO("group of " << n << ", k " << k << ", nodes lost" << which);
      const auto dir = fresh_dir(name + "-lost" + which);
      fsys::copy(base, dir, fsys::copy_options::recursive);
      for (int i : lost) fsys::remove_all(dir / ("node-n" + std::to_string(i)));
      auto r = run(Job{dir, nodes_named(n), 10, {}, with_parity(n, k)});
      check_final(r, 10);
      for (int rank = 0; rank < n; ++rank) {
        CHECK(r.resumed[static_cast<std::size_t>(rank)].step == 6);
        CHECK_FALSE(r.resumed[static_cast<std::size_t>(rank)].read_persistent);
        const bool was_lost = std::find(lost.begin(), lost.end(), rank) != lost.end();
        CHECK(count(r.records[static_cast<std::size_t>(rank)], TierEvent::rebuilt) == (was_lost ? 1u : 0u));
      }
      fsys::remove_all(dir);
    }
  }
}

TEST_CASE("parity groups: a lost node's replacement is refilled with the parity it held", "[tiered][parity]") {
  const auto dir = fresh_dir("parity-refill");
  REQUIRE(run(Job{dir, nodes_named(4), 7, {}, with_parity(4, 1)}).ok());
  fsys::remove_all(dir / "node-n2");
  auto r = run(Job{dir, nodes_named(4), 0, {}, with_parity(4, 1)});
  INFO(r.first_error());
  REQUIRE(r.ok());
  CHECK(r.resumed[2].step == 6);
  bool rebuilt = false, refilled = false;
  for (const auto& s : r.resumed[2].setbacks) rebuilt = rebuilt || s.find("rebuilt from its parity group") != std::string::npos;
  for (const auto& s : r.notes[2]) refilled = refilled || s.find("parity segments refilled") != std::string::npos;
  CHECK(rebuilt);
  CHECK(refilled);
  // Rank 2 holds step 6's parity again, and a second loss (another node) is survived from it.
  PosixFs fs;
  auto store = Store::open(fs, memory_layout::parity_store((dir / "node-n2").string(), 2), Access::read_only);
  REQUIRE(store.ok());
  REQUIRE_FALSE((*store)->steps().empty());
  CHECK((*store)->steps().back().step == 6);
  fsys::remove_all(dir / "node-n1");
  auto again = run(Job{dir, nodes_named(4), 10, {}, with_parity(4, 1)});
  check_final(again, 10);
  CHECK(again.resumed[1].step == 6);
  CHECK(count(again.records[1], TierEvent::rebuilt) == 1);
}

TEST_CASE("parity groups: a damaged parity chunk on top of a node loss is set aside and the persistent tier serves, saying why",
          "[tiered][parity]") {
  const auto dir = fresh_dir("parity-damaged");
  REQUIRE(run(Job{dir, nodes_named(4), 7, {}, with_parity(4, 1)}).ok());
  fsys::remove_all(dir / "node-n2");
  // Rank 2's segment 0 lies in stripe 1, whose parity rank 1 holds (spec/TIERS.md 12.2): damaged for steps 4 and 6.
  for (std::uint64_t step : {4, 6}) flip_tensor_byte(dir / "node-n1" / "rank-1" / "parity", step, parity_tensor(1));
  auto r = run(Job{dir, nodes_named(4), 10, {}, with_parity(4, 1)});
  check_final(r, 10);
  CHECK(r.resumed[0].step == 4);  // step 6 of shard 2 survives nowhere; step 4 is persisted
  CHECK(r.resumed[0].read_persistent);
  CHECK_THAT(r.resumed[2].sources.at(0), Catch::Contains("persistent store"));
  CHECK_THAT(r.resumed[0].sources.at(0), Catch::Contains("own memory"));
  CHECK(count(r.records[1], TierEvent::set_aside) == 2);
  CHECK(count(r.records[2], TierEvent::rebuilt) == 0);
  bool said = false;
  for (const auto& s : r.resumed[0].setbacks) said = said || s.find("cannot be rebuilt from parity") != std::string::npos;
  CHECK(said);
  // The damaged parity is kept for inspection, never deleted.
  CHECK(holds_shard_of(dir / "node-n1" / "rank-1" / "parity", 6));
}

TEST_CASE("parity groups are refused with replicas, and a group too small keeps no parity", "[tiered][parity]") {
  const auto dir = fresh_dir("parity-refused");
  auto both = run(Job{dir, nodes_named(4), 2, {}, [](TierOptions& o) { o.parity_group = 4; }});
  CHECK(both.errors[0].code() == Code::invalid_argument);
  CHECK_THAT(both.errors[0].message(), Catch::Contains("set replicas to 0"));
}

TEST_CASE("parity groups: a survivor's flipped byte makes a rebuild that does not verify; it is never loaded and an older step is rebuilt",
          "[tiered][parity]") {
  const auto dir = fresh_dir("parity-bad-source");
  REQUIRE(run(Job{dir, nodes_named(4), 7, {}, with_parity(4, 1)}).ok());
  fsys::remove_all(dir / "node-n2");
  flip_shard_byte(dir / "node-n0" / "rank-0" / "own", 6);  // its index still claims step 6's digest
  auto r = run(Job{dir, nodes_named(4), 10, {}, with_parity(4, 1)});
  check_final(r, 10);
  CHECK(r.resumed[0].step == 4);
  CHECK(count(r.records[2], TierEvent::rebuilt) == 1);  // step 4's shard; step 6's rebuild did not verify
  bool said = false;
  for (const auto& s : r.resumed[2].setbacks) said = said || s.find("step 4: this rank's shard was rebuilt") != std::string::npos;
  CHECK(said);
}

TEST_CASE("the SDC canary on a data-parallel layout: a replica holder's live copy of its peer's range is compared with what the "
          "peer saves", "[tiered][sdc]") {
  // Every rank saves its range of "w" and holds every other range live (computed by a trainer of that rank); the
  // holder of rank 1's replica (rank 2) hashes its live copy of rank 1's range at each capture. A bit flipped in
  // that live copy before capture 6: the canary names the range, chunk and both ranks; step 6 is in no tier.
  const auto dir = fresh_dir("sdc-live");
  std::vector<std::vector<tier_trainer::Trainer>> peers(4);
  std::vector<std::uint64_t> trained(4, 0);
  std::vector<std::vector<SdcFinding>> told(4);
  std::mutex told_mutex;
  Job job{dir, kFourNodes, 6, {}, [&](TierOptions& o) {
            o.on_sdc = [&](const SdcFinding& f) {
              std::lock_guard<std::mutex> lock(told_mutex);
              told[0].push_back(f);
            };
          }};
  job.also_fill = [&](int rank, std::uint64_t step, SaveRequest& req) {
    auto& mine = peers[static_cast<std::size_t>(rank)];
    if (mine.empty())
      for (int owner = 0; owner < 4; ++owner) mine.emplace_back(kElems, 4, owner);
    for (auto& t : mine)
      for (std::uint64_t s = trained[static_cast<std::size_t>(rank)] + 1; s <= step; ++s) t.train(s);
    trained[static_cast<std::size_t>(rank)] = step;
    if (rank == 2 && step == 6) mine[1].w[100] = std::nextafter(mine[1].w[100], 2.0f);  // the live copy goes wrong
    for (int owner = 0; owner < 4; ++owner)
      if (owner != rank) {
        const auto& t = mine[static_cast<std::size_t>(owner)];
        req.add_live_copy("w", {t.begin}, t.w.data(), t.w.size() * sizeof(float), owner);
      }
  };
  auto r = run(job);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    REQUIRE_FALSE(r.errors[static_cast<std::size_t>(rank)].ok());
    CHECK_THAT(r.errors[static_cast<std::size_t>(rank)].message(), Catch::Contains("silent data corruption at step 6"));
  }
  REQUIRE(told[0].size() == 4);  // one finding, told on each rank
  const SdcFinding& f = told[0][0];
  CHECK(f.tensor == live_piece_key("w", {tier_trainer::Trainer(kElems, 4, 1).begin}));
  CHECK(f.chunk == 100 * sizeof(float) / 4096);
  CHECK(f.chunks_differing == 1);
  REQUIRE(f.digests.size() == 2);
  CHECK(f.digests[0].first == 1);
  CHECK(f.digests[1].first == 2);
  // Captures 2 and 4 agreed: the relaunch resumes step 4 and goes on as an uninterrupted run.
  auto again = run(Job{dir, kFourNodes, 10, {}, {}});
  check_final(again, 10);
  CHECK(again.resumed[0].step == 4);
}
