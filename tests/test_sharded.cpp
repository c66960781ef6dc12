// Tests for include/ckpt/store/sharded.hpp and the multi-rank store protocol it drives (spec/SHARDING.md):
// split planning, block streaming, a save across 4 ranks (threads over ThreadComm, the same protocol
// as MPI) read back at 1 to 4 ranks, failures on one rank abandoning the step on all, reshard and
// merge round trips, and the ckpt-reshard / ckpt-merge programs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/identity/identity.hpp>
#include <ckpt/store/sharded.hpp>
#include <ckpt/dist/thread_comm.hpp>
#include <nlohmann/json.hpp>

#include "sharded_fixture.hpp"
#include "store_test_util.hpp"
#include "test_util.hpp"
#include "thread_ranks.hpp"

using namespace ckpt;
using namespace sharded_fixture;
namespace fsys = std::filesystem;

namespace {

StoreOptions small_options() { return ckpt_test::small_store_options(); }

// Writes one piece of tensor `name`, every byte `fill`.
Status write_piece(Transaction& tx, const std::string& name, DType dtype, const Shape& shape, const Shape& offsets,
                   const Shape& piece_shape, unsigned char fill = 1) {
  std::vector<unsigned char> bytes(elements(piece_shape) * element_size(dtype), fill);
  CKPT_TRY(tx.begin_piece(name, dtype, shape, offsets, piece_shape));
  CKPT_TRY(tx.write(bytes.data(), bytes.size()));
  return tx.end_piece();
}

using ckpt_test::run_ranks;

// Saves `step` with the fixture's tensors across `world` threads on fs; each rank's commit Status.
template <class Fs>
std::vector<Status> save_across(Fs& fs, const std::string& path, int world, std::uint64_t step) {
  return run_ranks(world, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, small_options(), comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
    Status s = save_rank(*tx, static_cast<std::uint32_t>(world), rank, step);
    if (!s.ok()) return s;  // the transaction's destructor aborts collectively
    return tx->commit().status();
  });
}

// save_across, each rank's commit REQUIREd to succeed.
template <class Fs>
void save_ok(Fs& fs, const std::string& path, int world, std::uint64_t step) {
  for (const auto& s : save_across(fs, path, world, step)) REQUIRE(s.ok());
}

// Every tensor of a step, read as `world` ranks each loading an even split along dimension 0.
void check_load_at(StepReader& reader, std::uint32_t world, std::uint64_t step) {
  for (const auto& t : specs()) {
    const auto expected = global_bytes(t, step);
    std::vector<unsigned char> assembled(expected.size(), 0xEE);
    for (std::uint32_t r = 0; r < world; ++r) {
      const Slice slice = load_box(t, world, r);
      std::vector<unsigned char> part(elements(slice.shape) * element_size(t.dtype));
      if (!t.shape.empty() && part.empty()) continue;
      INFO("tensor " << t.name << " world " << world << " rank " << r);
      REQUIRE(reader.read_slice(t.name, slice.offsets, slice.shape, part.data(), part.size()).ok());
      place(assembled, t, slice, part);
    }
    INFO("tensor " << t.name << " at world " << world);
    CHECK(assembled == expected);
  }
}

}  // namespace

TEST_CASE("a dimension splits evenly with the remainder on the first parts", "[sharded]") {
  struct Row {
    std::uint64_t extent;
    std::uint32_t parts;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> want;
  };
  const std::vector<Row> table = {
      {8, 4, {{0, 2}, {2, 2}, {4, 2}, {6, 2}}},
      {10, 4, {{0, 3}, {3, 3}, {6, 2}, {8, 2}}},
      {3, 4, {{0, 1}, {1, 1}, {2, 1}, {3, 0}}},
      {0, 2, {{0, 0}, {0, 0}}},
      {7, 1, {{0, 7}}},
  };
  for (const auto& row : table)
    for (std::uint32_t i = 0; i < row.parts; ++i) {
      INFO(row.extent << " into " << row.parts << ", part " << i);
      CHECK(split_range(row.extent, row.parts, i) == row.want[i]);
    }
}

TEST_CASE("glob patterns match tensor names", "[sharded]") {
  struct Row {
    const char* pattern;
    const char* name;
    bool match;
  };
  const Row table[] = {
      {"*", "anything.at/all", true},       {"layers.*.w", "layers.3.w", true},  {"layers.*.w", "layers.3.b", false},
      {"a?c", "abc", true},                 {"a?c", "ac", false},                {"*.bias", "fc.bias", true},
      {"*.bias", "fc.bias.x", false},       {"exact", "exact", true},            {"exact", "exactly", false},
      {"*a*b*c", "xxaxxbxxc", true},        {"*a*b*c", "xxaxxcxxb", false},      {"", "", true},
      {"", "x", false},
  };
  for (const auto& row : table) {
    INFO(row.pattern << " vs " << row.name);
    CHECK(glob_match(row.pattern, row.name) == row.match);
  }
}

TEST_CASE("split rules parse, and choose the first matching rule", "[sharded]") {
  auto r = parse_split_rule("layers.*.w=1");
  REQUIRE(r.ok());
  CHECK(r->pattern == "layers.*.w");
  CHECK(r->dim == 1);
  CHECK_FALSE(r->replicate);
  auto rep = parse_split_rule("norm*=replicate");
  REQUIRE(rep.ok());
  CHECK(rep->replicate);
  for (const char* bad : {"nodim", "=1", "x=", "x=-1", "x=64", "x=1a", "x=replica"}) {
    INFO(bad);
    CHECK(parse_split_rule(bad).status().code() == Code::invalid_argument);
  }
  const std::vector<SplitRule> rules = {*r, *rep, *parse_split_rule("*=0")};
  auto c = choose_split("layers.2.w", {4, 8}, rules);
  REQUIRE(c.ok());
  CHECK(c->dim == 1);
  CHECK(choose_split("norm1", {8}, rules)->replicate);
  CHECK(choose_split("other", {8}, rules)->dim == 0);
  CHECK(choose_split("scalar", {}, rules)->replicate);     // scalars are never split
  CHECK(choose_split("empty", {0, 4}, rules)->replicate);  // nor tensors without elements
  auto bad = choose_split("layers.2.w", {4}, rules);       // the rule asks for a dimension it does not have
  CHECK(bad.status().code() == Code::invalid_argument);
  CHECK(bad.status().message().find("layers.2.w") != std::string::npos);
}

TEST_CASE("blocks cover a region in row-major order within the budget", "[sharded]") {
  const std::vector<Shape> shapes = {{10}, {4, 6}, {3, 5, 7}, {2, 1, 3, 4}, {}, {0, 5}, {1}};
  for (const auto& shape : shapes)
    for (const std::uint64_t budget : {1u, 3u, 7u, 24u, 1000u}) {
      INFO(shape_string(shape) << " budget " << budget);
      std::uint64_t next = 0;  // the row-major index the next block must start at
      Status s = for_each_block(shape, 1, budget, [&](const Shape& off, const Shape& ext) -> Status {
        std::uint64_t start = 0, n = 1;
        for (std::size_t d = 0; d < shape.size(); ++d) start = start * shape[d] + off[d], n *= ext[d];
        CHECK(start == next);
        CHECK((n <= budget || ext.back() == shape.back() || n == ext.back()));
        next += n;
        return Status();
      });
      CHECK(s.ok());
      CHECK(next == elements(shape));
    }
  // An error from the callback stops the walk.
  int calls = 0;
  Status s = for_each_block({8}, 1, 2, [&](const Shape&, const Shape&) {
    ++calls;
    return make_error(Code::io, "stop");
  });
  CHECK(s.code() == Code::io);
  CHECK(calls == 1);
}

TEST_CASE("a save across 4 ranks reads back bit-identical at 1, 2, 3 and 4 ranks", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  save_ok(fs, path, 4, 7);
  auto store = Store::open(fs, path, Access::read_only);
  REQUIRE(store.ok());
  auto latest = (*store)->latest();
  REQUIRE(latest);
  CHECK(latest->step == 7);
  CHECK(latest->world_size == 4);
  CHECK(latest->files.size() == 4);
  auto reader = (*store)->open_latest();
  REQUIRE(reader.ok());
  CHECK(reader->shard_count() == 4);
  // Rank 0's state, with the optimizer tensor that only rank 1 listed.
  CHECK(reader->state().rng == "rng of rank 0");
  CHECK(reader->state().optimizer_tensors == std::vector<std::string>{"adam.m/emb"});
  // The replicated tensor and the scalar were written once, by rank 0.
  CHECK(reader->shard(0).index().find_tensor("norm") != nullptr);
  for (std::size_t r = 1; r < 4; ++r) CHECK(reader->shard(r).index().find_tensor("norm") == nullptr);
  CHECK(reader->shard(3).index().find_tensor("tiny") == nullptr);  // rank 3 held none of it
  for (std::uint32_t world = 1; world <= 4; ++world) check_load_at(*reader, world, 7);
  CHECK((*store)->verify_step(7).value().ok());
}

TEST_CASE("an I/O error on one rank abandons the step on every rank with that rank's error", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs posix;
  save_ok(posix, path, 4, 1);
  // Rank 2 runs over a disk that fails; the others over a good one. A failed write is kept until commit.
  struct Row {
    const char* what;
    FaultPlan plan;
    const char* expect;
  };
  const Row table[] = {
      {"a write fails mid-piece", FaultPlan::nth(1, Fault::no_space, fs_op_bit(FsOp::pwrite)), "No space left on device"},
      {"the shard's fsync fails", FaultPlan::syncs(Fault::io_error), "Input/output error"},
  };
  std::uint64_t step = 2;
  for (const auto& row : table) {
    INFO(row.what);
    std::vector<std::unique_ptr<FaultFs<PosixFs>>> owned;
    std::vector<FaultFs<PosixFs>*> each;
    for (int r = 0; r < 4; ++r) {
      owned.push_back(std::make_unique<FaultFs<PosixFs>>(posix, r == 2 ? row.plan : FaultPlan{}));
      each.push_back(owned.back().get());
    }
    const auto results = run_ranks(4, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
      CKPT_ASSIGN_OR_RETURN(auto store, Store::open(*each[rank], path, Access::read_write, small_options(), comm));
      CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
      // 64 KiB per rank goes straight from the caller's buffer to pwrite, inside write().
      std::vector<unsigned char> row_bytes(64 << 10, static_cast<unsigned char>(rank));
      Status s = tx->begin_piece("big", DType::U8, {4, 64 << 10}, {rank, 0}, {1, 64 << 10});
      if (s.ok()) s = tx->write(row_bytes.data(), row_bytes.size());
      if (s.ok()) s = tx->end_piece();
      if (s.ok()) s = save_rank(*tx, 4, rank, step);
      if (!s.ok() && s.code() != Code::io) return s;
      return tx->commit().status();  // every rank commits; the failing one too
    });
    for (const auto& s : results) {
      INFO(s.to_string());
      CHECK(s.code() == Code::io);
      CHECK(s.message() == results[0].message());  // the same Status on every rank
      CHECK(s.message().find("abandoned on every rank, the previous step is untouched: rank 2: ") != std::string::npos);
      CHECK(s.message().find(row.expect) != std::string::npos);
    }
    auto store = Store::open(posix, path, Access::read_only);
    REQUIRE(store.ok());
    REQUIRE((*store)->latest());
    CHECK((*store)->latest()->step == 1);  // the previous step is untouched
    const auto& txns = (*store)->transactions();
    REQUIRE(txns.size() == step);
    CHECK(txns.back().state == TxnState::aborted);
    CHECK(txns.back().abort_reason == AbortReason::writer_error);
    CHECK_FALSE(fsys::exists(path + "/" + txns.back().dir()));  // every rank's file removed, and the directory
    CHECK(fsys::exists(path + "/" + txns[0].dir()));
    CHECK((*store)->recovery_report().clean());
    ++step;
  }
}

TEST_CASE("a rank's own failure passed to abort() fails commit on every other rank", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  std::vector<Status> aborted(4);
  const auto results = run_ranks(4, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, small_options(), comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(3));
    CKPT_TRY(save_rank(*tx, 4, rank, 3));
    if (rank == 1) {
      aborted[1] = tx->abort(make_error(Code::io, "device lost"));
      return aborted[1];
    }
    return tx->commit().status();
  });
  CHECK(aborted[1].ok());  // the abort itself (ABORT record, removal) worked
  for (const std::uint32_t r : {0u, 2u, 3u}) {
    INFO(results[r].to_string());
    CHECK(results[r].code() == Code::io);
    CHECK(results[r].message().find("rank 1: device lost") != std::string::npos);
  }
  auto store = Store::open(fs, path, Access::read_only);
  REQUIRE(store.ok());
  CHECK_FALSE((*store)->latest());
}

TEST_CASE("pieces that overlap across ranks are refused before commit, naming tensor and region", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  struct Case {
    const char* what;
    std::function<Status(Transaction&, std::uint32_t)> write;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"overlap",
       [](Transaction& tx, std::uint32_t rank) {
         // Rank 0 rows [0, 3), rank 1 rows [2, 4): row 2 is written twice.
         const std::uint64_t first = rank == 0 ? 0 : 2, rows = rank == 0 ? 3 : 2;
         return write_piece(tx, "w", DType::U8, {4, 4}, {first, 0}, {rows, 4}, static_cast<unsigned char>(rank));
       },
       "tensor 'w': the piece of rank 0 at offsets [0, 0] shape [3, 4] and the piece of rank 1 at offsets [2, 0] shape [2, 4] overlap in offsets [2, 0] shape [1, 4]"},
      {"gap",
       [](Transaction& tx, std::uint32_t rank) {
         // Rank 0 rows [0, 1), rank 1 rows [2, 4): row 1 is missing.
         const std::uint64_t first = rank == 0 ? 0 : 2, rows = rank == 0 ? 1 : 2;
         return write_piece(tx, "w", DType::U8, {4, 4}, {first, 0}, {rows, 4});
       },
       "tensor 'w': its pieces hold 12 of 16 elements; no piece holds offsets [1, 0] shape [1, 4]"},
      {"dtype",
       [](Transaction& tx, std::uint32_t rank) { return write_piece(tx, "w", rank == 0 ? DType::U8 : DType::I16, {4}, {rank * 2}, {2}); },
       "tensor 'w': dtype I16 on rank 1, U8 on rank 0"},
      {"shape",
       [](Transaction& tx, std::uint32_t rank) { return write_piece(tx, "w", DType::U8, {rank == 0 ? 4u : 5u}, {rank * 2}, {2}); },
       "tensor 'w': global shape [5] on rank 1, [4] on rank 0"},
      {"replica",
       [](Transaction& tx, std::uint32_t rank) {
         std::vector<unsigned char> bytes(4, static_cast<unsigned char>(rank == 1 ? 9 : 1));  // rank 1 diverged
         return tx.add_replicated_tensor("r", DType::U8, {4}, bytes.data(), bytes.size(), 0);
       },
       "replicated tensor 'r': rank 1 declared content digest"},
  };
  std::uint64_t step = 10;
  for (const auto& c : cases) {
    SECTION(c.what) {
      const auto results = run_ranks(2, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
        CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, small_options(), comm));
        CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
        CKPT_TRY(c.write(*tx, rank));
        return tx->commit().status();
      });
      for (const auto& s : results) {
        INFO(s.to_string());
        CHECK(s.code() == Code::invalid_argument);
        CHECK(s.message().find(c.expect) != std::string::npos);
        CHECK(s.message() == results[0].message());
      }
      auto store = Store::open(fs, path, Access::read_only);
      REQUIRE(store.ok());
      CHECK_FALSE((*store)->latest());
      for (const auto& t : (*store)->transactions()) CHECK_FALSE(fsys::exists(path + "/" + t.dir()));
    }
    ++step;
  }
}

TEST_CASE("a single-process save with a gap in a tensor is refused", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto store = Store::open(fs, dir.file("s"), Access::read_write, small_options());
  REQUIRE(store.ok());
  auto tx = (*store)->begin(1);
  REQUIRE(tx.ok());
  std::vector<unsigned char> half(8, 1);
  REQUIRE((*tx)->begin_piece("w", DType::U8, {16}, {0}, {8}).ok());
  REQUIRE((*tx)->write(half.data(), half.size()).ok());
  REQUIRE((*tx)->end_piece().ok());
  auto r = (*tx)->commit();
  CHECK(r.status().code() == Code::invalid_argument);
  CHECK(r.status().message().find("no piece holds offsets [8] shape [8]") != std::string::npos);
  CHECK_FALSE((*store)->latest());
}

TEST_CASE("collective begin refuses ranks that disagree on the step", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  const auto results = run_ranks(3, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, small_options(), comm));
    // Catch2 assertions are not thread safe: report through the Status instead.
    if (store->coordinator() != (rank == 0) || store->participant() != (rank != 0))
      return make_error(Code::corrupt, "rank " + std::to_string(rank) + " has the wrong role");
    if (store->retire(1).code() != (rank == 0 ? Code::not_found : Code::invalid_argument))
      return make_error(Code::corrupt, "rank " + std::to_string(rank) + ": retire() is only rank 0's");
    return store->begin(rank == 2 ? 6 : 5).status();
  });
  for (const auto& s : results) {
    CHECK(s.code() == Code::invalid_argument);
    CHECK(s.message().find("rank 2 begins step 6") != std::string::npos);
  }
  auto store = Store::open(fs, path, Access::read_only);
  REQUIRE(store.ok());
  CHECK((*store)->transactions().empty());  // nothing was written
}

TEST_CASE("participants follow commits and retention without reading the journal again", "[sharded]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("store");
  PosixFs fs;
  const auto results = run_ranks(2, [&](std::uint32_t rank, ThreadComm& comm) -> Status {
    StoreOptions o = small_options();
    o.retention.keep_last = 2;
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs, path, Access::read_write, o, comm));
    for (std::uint64_t step = 1; step <= 4; ++step) {
      CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
      CKPT_TRY(save_rank(*tx, 2, rank, step));
      CKPT_ASSIGN_OR_RETURN(auto committed, tx->commit());
      if (committed.step.step != step) return make_error(Code::corrupt, "rank " + std::to_string(rank) + ": wrong step");
      if (step >= 3 && committed.retired.size() != 1) return make_error(Code::corrupt, "no retirement reported");
    }
    std::vector<std::uint64_t> live;
    for (const auto& s : store->steps()) live.push_back(s.step);
    if (live != std::vector<std::uint64_t>{3, 4}) return make_error(Code::corrupt, "rank " + std::to_string(rank) + " sees other steps");
    auto reader = store->open_latest();  // a participant reads like anyone else
    if (!reader.ok()) return reader.status();
    return Status();
  });
  for (const auto& s : results) CHECK(s.to_string() == "ok");
}

TEST_CASE("reshard 4 to 3 to 4 and merge back are bit-identical, with the training state", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string a = dir.file("a"), b = dir.file("b"), c = dir.file("c");
  save_ok(fs, a, 4, 9);
  auto src = Checkpoint::open(fs, a);
  REQUIRE(src.ok());
  CHECK(src->kind() == Checkpoint::Kind::step);
  CHECK(src->world_size() == 4);
  ReshardOptions options;
  options.world_size = 3;
  options.block_size = 4096;
  options.store = small_options();
  options.rules = {*parse_split_rule("attn.*=2"), *parse_split_rule("tiny=replicate")};
  auto to3 = reshard_to_store(fs, *src, b, options);
  REQUIRE(to3.ok());
  CHECK(to3->step.step == 9);
  CHECK(to3->world_size == 3);
  auto mid = Checkpoint::open(fs, b + "/" + to3->step.dir);  // a step directory
  REQUIRE(mid.ok());
  CHECK(mid->world_size() == 3);
  options.world_size = 4;
  options.rules.clear();
  auto to4 = reshard_to_store(fs, *mid, c, options);
  REQUIRE(to4.ok());
  const std::string merged = dir.file("merged.ckpt");
  auto last = Checkpoint::open(fs, c);
  REQUIRE(last.ok());
  auto m = merge_to_file(fs, {&*last}, {}, merged, MergeOptions{});
  REQUIRE(m.ok());
  CHECK(m->tensors == specs().size());
  auto single = Checkpoint::open(fs, merged);
  REQUIRE(single.ok());
  CHECK(single->kind() == Checkpoint::Kind::file);
  // Every tensor, whole, from every stage equals the original.
  for (auto* s : {&*src, &*mid, &*last, &*single}) {
    for (const auto& t : specs()) {
      INFO(s->description() << " tensor " << t.name);
      const auto expected = global_bytes(t, 9);
      std::vector<unsigned char> got(expected.size());
      REQUIRE(s->read_slice(t.name, Shape(t.shape.size(), 0), t.shape, got.data(), got.size()).ok());
      CHECK(got == expected);
    }
    REQUIRE(s->state());
    CHECK(s->state()->step == 9);
    CHECK(s->state()->rng == "rng of rank 0");
    CHECK(s->state()->optimizer_tensors == std::vector<std::string>{"adam.m/emb"});
  }
  // The split rules took effect: 3 shards, attn.w split along dimension 2, tiny whole on rank 0.
  auto b_store = Store::open(fs, b, Access::read_only);
  REQUIRE(b_store.ok());
  auto b_reader = (*b_store)->open_latest();
  REQUIRE(b_reader.ok());
  const auto& shard1 = b_reader->shard(1).index();
  const TensorRecord* attn = shard1.find_tensor("attn.w");
  REQUIRE(attn != nullptr);
  CHECK(shard1.pieces[attn->piece_first].offsets == Shape{0, 0, 1});
  CHECK(shard1.pieces[attn->piece_first].shape == Shape{5, 7, 1});
  CHECK(shard1.find_tensor("tiny") == nullptr);
  CHECK(b_reader->shard(0).index().find_tensor("tiny") != nullptr);
}

TEST_CASE("a source without training state stays without one through reshard and merge", "[sharded][state]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string file = dir.file("weights.ckpt");
  {
    auto w = ShardWriter::create(fs, file);
    REQUIRE(w.ok());
    const std::vector<unsigned char> bytes = {1, 2, 3, 4, 5, 6};
    REQUIRE(w->add_tensor("w", DType::U8, {6}, bytes.data(), bytes.size()).ok());
    REQUIRE(w->set_metadata("format", Value("pt")).ok());
    REQUIRE(w->finish().ok());
  }
  using Pairs = std::vector<std::pair<std::string, Value>>;
  const auto pairs = [](const Result<std::vector<MetaEntry>>& entries) {
    Pairs out;
    for (const auto& m : *entries) out.emplace_back(m.key, m.value);
    return out;
  };
  const Pairs metadata = {{"format", Value("pt")}};
  auto source = Checkpoint::open(fs, file);
  REQUIRE(source.ok());
  REQUIRE_FALSE(source->state());
  ReshardOptions options;
  options.world_size = 2;
  options.store = small_options();
  auto resharded = reshard_to_store(fs, *source, dir.file("store"), options);
  INFO(resharded.status().to_string());
  REQUIRE(resharded.ok());
  CHECK(resharded->step.step == 0);  // a store step needs a number: 0, not a training step
  auto step = Checkpoint::open(fs, dir.file("store"));
  REQUIRE(step.ok());
  CHECK(step->step() == std::optional<std::uint64_t>(0));
  CHECK_FALSE(step->state());
  CHECK(pairs(step->metadata(ConflictPolicy::error)) == metadata);  // the source's, nothing added
  {
    auto store = Store::open(fs, dir.file("store"), Access::read_only);
    REQUIRE(store.ok());
    auto reader = (*store)->open_latest();
    REQUIRE(reader.ok());
    CHECK(reader->state() == no_training_state(0));
  }
  // Again through a step, then merged: still none, and no ckpt.training_state in the file.
  options.world_size = 1;
  auto again = reshard_to_store(fs, *step, dir.file("again"), options);
  REQUIRE(again.ok());
  auto again_step = Checkpoint::open(fs, dir.file("again"));
  REQUIRE(again_step.ok());
  CHECK_FALSE(again_step->state());
  auto merged = merge_to_file(fs, {&*again_step}, {}, dir.file("merged.ckpt"), MergeOptions{});
  INFO(merged.status().to_string());
  REQUIRE(merged.ok());
  auto merged_file = Checkpoint::open(fs, dir.file("merged.ckpt"));
  REQUIRE(merged_file.ok());
  CHECK_FALSE(merged_file->state());
  CHECK(pairs(merged_file->metadata(ConflictPolicy::error)) == metadata);
  auto merged_reader = ShardReader::open(fs, dir.file("merged.ckpt"));
  REQUIRE(merged_reader.ok());
  CHECK(merged_reader->index().find_metadata(kTrainingStateKey) == nullptr);
  // The step and the file merged from it have the same metadata identity: no state on either side.
  auto step_content = content_of_path(fs, dir.file("store"));
  auto file_content = content_of_path(fs, dir.file("merged.ckpt"));
  REQUIRE(step_content.ok());
  REQUIRE(file_content.ok());
  CHECK(step_content->metadata_digest == file_content->metadata_digest);

  SECTION("--step gives it a training state of that step, and nothing else") {
    options.step = 5;
    auto numbered = reshard_to_store(fs, *source, dir.file("numbered"), options);
    REQUIRE(numbered.ok());
    auto numbered_step = Checkpoint::open(fs, dir.file("numbered"));
    REQUIRE(numbered_step.ok());
    TrainingState five;
    five.step = 5;
    REQUIRE(numbered_step->state());
    CHECK(*numbered_step->state() == five);
  }
  SECTION("the marker counts only alone: with anything else it is a value of a real state") {
    CHECK_FALSE(step_training_state(no_training_state(3)));
    TrainingState bare;
    bare.step = 3;
    CHECK(step_training_state(bare) == std::optional<TrainingState>(bare));
    TrainingState with_rng = no_training_state(3);
    with_rng.rng = "seed";
    CHECK(step_training_state(with_rng) == std::optional<TrainingState>(with_rng));
    TrainingState other_value = no_training_state(3);
    other_value.values[std::string(kNoTrainingStateKey)] = Value(false);
    CHECK(step_training_state(other_value) == std::optional<TrainingState>(other_value));
  }
}

TEST_CASE("reshard of a damaged source commits nothing", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string file = dir.file("in.ckpt");
  {
    WriterOptions wo;
    wo.chunk_size_log2 = 12;
    auto w = ShardWriter::create(fs, file, wo);
    REQUIRE(w.ok());
    const auto bytes = ckpt_test::random_bytes(64 << 10, 5);
    REQUIRE(w->add_tensor("big", DType::U8, {64, 1024}, bytes.data(), bytes.size()).ok());
    REQUIRE(w->finish().ok());
  }
  {
    std::string content = ckpt_test::read_file(file);
    content[4096 + 40000] ^= 0x10;  // one bit of one chunk in the middle of the data
    ckpt_test::write_file(file, content);
  }
  auto src = Checkpoint::open(fs, file);
  REQUIRE(src.ok());
  ReshardOptions options;
  options.world_size = 4;
  options.store = small_options();
  auto r = reshard_to_store(fs, *src, dir.file("out"), options);
  CHECK(r.status().code() == Code::corrupt);
  CHECK(r.status().message().find("tensor 'big'") != std::string::npos);
  auto store = Store::open(fs, dir.file("out"), Access::read_only);
  REQUIRE(store.ok());
  CHECK_FALSE((*store)->latest());
  REQUIRE((*store)->transactions().size() == 1);
  CHECK((*store)->transactions()[0].state == TxnState::aborted);
}

TEST_CASE("a source opens a file, a store or a step directory, and refuses anything else", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  save_ok(fs, dir.file("s"), 2, 4);
  auto store = Checkpoint::open(fs, dir.file("s") + "/");
  REQUIRE(store.ok());
  CHECK(store->description().find("step 4 (txn 1, 2 shards)") != std::string::npos);
  // One shard file of that step holds only part of its tensors: not a checkpoint on its own.
  const std::string shard = dir.file("s") + "/step-4-1/shard-00000-of-00002.ckpt";
  auto part = Checkpoint::open(fs, shard);
  CHECK(part.status().code() == Code::invalid_argument);
  CHECK(part.status().message().find("tensor 'emb': its pieces hold 30 of 60 elements; no piece holds offsets [5, 0] shape [5, 6]") !=
        std::string::npos);
  fsys::create_directories(dir.file("plain"));
  CHECK(Checkpoint::open(fs, dir.file("plain")).status().code() == Code::invalid_argument);
  CHECK(Checkpoint::open(fs, dir.file("absent")).status().code() == Code::not_found);
  // A step directory that is not a committed step: an aborted transaction.
  {
    auto s = Store::open(fs, dir.file("s"), Access::read_write, small_options());
    REQUIRE(s.ok());
    auto tx = (*s)->begin(5);
    REQUIRE(tx.ok());
    REQUIRE((*tx)->abort().ok());
  }
  fsys::create_directories(dir.file("s") + "/step-5-2");  // as if its removal had not happened
  auto aborted = Checkpoint::open(fs, dir.file("s") + "/step-5-2");
  CHECK(aborted.status().code() == Code::not_found);
  CHECK(aborted.status().message().find("transaction 2 is not a committed step (aborted)") != std::string::npos);
}

TEST_CASE("a checkpoint opens the step a selector names, and refuses a step its path does not hold", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  save_ok(fs, dir.file("s"), 2, 4);
  save_ok(fs, dir.file("s"), 2, 6);
  auto latest = Checkpoint::open(fs, dir.file("s"));
  REQUIRE(latest.ok());
  CHECK(latest->step() == std::optional<std::uint64_t>(6));
  StepSelector four;
  four.step = 4;
  auto older = Checkpoint::open(fs, dir.file("s"), four);
  REQUIRE(older.ok());
  CHECK(older->step() == std::optional<std::uint64_t>(4));
  CHECK(older->kind() == Checkpoint::Kind::step);
  StepSelector five;
  five.step = 5;
  CHECK(Checkpoint::open(fs, dir.file("s"), five).status().code() == Code::not_found);
  // A step directory holds one step: asking it for another is a usage error.
  auto dir_ok = Checkpoint::open(fs, dir.file("s") + "/step-4-1", four);
  REQUIRE(dir_ok.ok());
  CHECK(dir_ok->step() == std::optional<std::uint64_t>(4));
  auto dir_other = Checkpoint::open(fs, dir.file("s") + "/step-4-1", five);
  CHECK(dir_other.status().code() == Code::invalid_argument);
  CHECK(dir_other.status().message().find("holds step 4") != std::string::npos);
}

TEST_CASE("merge combines checkpoints and resolves conflicts by policy", "[sharded]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  // Two single-file checkpoints: both hold 'w' and an optimizer tensor; a metadata key differs.
  auto make = [&](const std::string& path, unsigned char fill, std::uint64_t step) {
    auto w = ShardWriter::create(fs, path, WriterOptions{});
    REQUIRE(w.ok());
    std::vector<unsigned char> bytes(16, fill);
    REQUIRE(w->add_tensor("w", DType::U8, {16}, bytes.data(), bytes.size()).ok());
    REQUIRE(w->add_tensor("adam.m/w", DType::U8, {16}, bytes.data(), bytes.size()).ok());
    REQUIRE(w->set_metadata("run", Value(std::string(1, static_cast<char>('a' + fill)))).ok());
    TrainingState st;
    st.step = step;
    st.optimizer_tensors = {"adam.m/w"};
    REQUIRE(w->set_metadata(std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(st)})).ok());
    REQUIRE(w->finish().ok());
  };
  make(dir.file("a.ckpt"), 1, 100);
  make(dir.file("b.ckpt"), 2, 200);
  auto a = Checkpoint::open(fs, dir.file("a.ckpt"));
  auto b = Checkpoint::open(fs, dir.file("b.ckpt"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<Checkpoint*> both = {&*a, &*b};
  auto read_all = [&](const std::string& path, const std::string& name) {
    auto s = Checkpoint::open(fs, path);
    REQUIRE(s.ok());
    std::vector<unsigned char> v(16);
    REQUIRE(s->read_slice(name, {0}, {16}, v.data(), v.size()).ok());
    return v[0];
  };

  SECTION("error is the default") {
    auto r = merge_to_file(fs, both, {}, dir.file("out.ckpt"), MergeOptions{});
    CHECK(r.status().code() == Code::conflict);
    CHECK(r.status().message().find("tensor 'w'") != std::string::npos);
    CHECK_FALSE(fsys::exists(dir.file("out.ckpt")));
  }
  SECTION("first and last") {
    for (const auto policy : {ConflictPolicy::first, ConflictPolicy::last}) {
      MergeOptions o;
      o.on_conflict = policy;
      o.overwrite = true;
      auto r = merge_to_file(fs, both, {}, dir.file("out.ckpt"), o);
      REQUIRE(r.ok());
      CHECK(r->resolved.size() == 4);  // w, adam.m/w, metadata 'run', the training state
      const unsigned char want = policy == ConflictPolicy::first ? 1 : 2;
      CHECK(read_all(dir.file("out.ckpt"), "w") == want);
      auto out = Checkpoint::open(fs, dir.file("out.ckpt"));
      REQUIRE(out.ok());
      CHECK(out->state()->step == (policy == ConflictPolicy::first ? 100u : 200u));
      CHECK(out->metadata(ConflictPolicy::error)->at(0).value.as_string() == std::string(1, static_cast<char>('a' + want)));
    }
  }
  SECTION("weights from one, optimizer state from the other") {
    MergeOptions o;
    o.on_conflict = ConflictPolicy::first;  // for the metadata key and the training state
    auto r = merge_to_file(fs, both, {SourceSelection{{"@model"}}, SourceSelection{{"@optimizer"}}}, dir.file("mix.ckpt"), o);
    REQUIRE(r.ok());
    CHECK(r->tensors == 2);
    CHECK(read_all(dir.file("mix.ckpt"), "w") == 1);
    CHECK(read_all(dir.file("mix.ckpt"), "adam.m/w") == 2);
    auto out = Checkpoint::open(fs, dir.file("mix.ckpt"));
    REQUIRE(out.ok());
    CHECK(out->state()->optimizer_tensors == std::vector<std::string>{"adam.m/w"});
  }
  SECTION("an existing output is kept unless overwrite is asked") {
    ckpt_test::write_file(dir.file("keep.ckpt"), "precious");
    MergeOptions o;
    o.on_conflict = ConflictPolicy::first;
    CHECK(merge_to_file(fs, both, {}, dir.file("keep.ckpt"), o).status().code() == Code::conflict);
    CHECK(ckpt_test::read_file(dir.file("keep.ckpt")) == "precious");
  }
}

#ifdef CKPT_TEST_TOOLS
namespace {
const std::string kReshard = std::string(CKPT_BINARY_DIR) + "/ckpt-reshard";
const std::string kMerge = std::string(CKPT_BINARY_DIR) + "/ckpt-merge";
}  // namespace

TEST_CASE("ckpt-reshard and ckpt-merge round trip a store through the command line", "[sharded][tools]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  save_ok(fs, dir.file("a"), 4, 5);
  const std::string out = dir.file("out.json");
  REQUIRE(ckpt_test::run_command(kReshard + " " + dir.file("a") + " -o " + dir.file("b") +
                                 " --world-size 3 --split 'attn.*=1' --block-size 4096 --chunk-size 4096 --json > " + out) == 0);
  const auto j = nlohmann::json::parse(ckpt_test::read_file(out));
  CHECK(j["step"] == 5);
  CHECK(j["world_size"] == 3);
  CHECK(j["shards"].size() == 3);
  CHECK(j["source_world_size"] == 4);
  REQUIRE(ckpt_test::run_command(kMerge + " " + dir.file("b") + " -o " + dir.file("m.ckpt") + " --json > " + out) == 0);
  CHECK(nlohmann::json::parse(ckpt_test::read_file(out))["tensors"] == specs().size());
  REQUIRE(ckpt_test::run_command(kReshard + " " + dir.file("m.ckpt") + " -o " + dir.file("c") + " --world-size 4 --json > " + out) == 0);
  auto c = Checkpoint::open(fs, dir.file("c"));
  REQUIRE(c.ok());
  CHECK(c->world_size() == 4);
  for (const auto& t : specs()) {
    const auto expected = global_bytes(t, 5);
    std::vector<unsigned char> got(expected.size());
    REQUIRE(c->read_slice(t.name, Shape(t.shape.size(), 0), t.shape, got.data(), got.size()).ok());
    CHECK(got == expected);
  }
}

TEST_CASE("ckpt-reshard and ckpt-merge answer bad input with exit 2 and damage with exit 1", "[sharded][tools]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string in = dir.file("in.ckpt");
  {
    auto w = ShardWriter::create(fs, in, WriterOptions{});
    REQUIRE(w.ok());
    const auto bytes = ckpt_test::random_bytes(8192, 3);
    REQUIRE(w->add_tensor("t", DType::U8, {8192}, bytes.data(), bytes.size()).ok());
    REQUIRE(w->finish().ok());
  }
  const std::string quiet = " > /dev/null 2>&1";
  struct Row {
    std::string args;
    int exit;
  };
  const std::vector<Row> table = {
      {kReshard + " --help", 0},
      {kMerge + " --help", 0},
      {kReshard + " " + in + " -o " + dir.file("s"), 2},                          // no --world-size
      {kReshard + " " + in + " -o " + dir.file("s") + " --world-size 0", 2},
      {kReshard + " " + in + " -o " + dir.file("s") + " --world-size 2 --split t=1", 2},  // t has one dimension
      {kReshard + " " + in + " -o " + dir.file("s") + " --world-size 2 --split nonsense", 2},
      {kReshard + " " + dir.file("missing") + " -o " + dir.file("s") + " --world-size 2", 2},
      {kMerge + " " + in + " " + in + " -o " + dir.file("m.ckpt"), 2},            // conflict
      {kMerge + " " + in + " -o " + dir.file("m.ckpt") + " --take 2=x", 2},
      {kMerge + " " + in + " -o " + dir.file("m.ckpt") + " --on-conflict maybe", 2},
      {kReshard + " " + in + " -o " + dir.file("s") + " --world-size 2", 0},
  };
  for (const auto& row : table) {
    INFO(row.args);
    CHECK(ckpt_test::run_command(row.args + quiet) == row.exit);
  }
  std::string content = ckpt_test::read_file(in);
  content[4096 + 100] ^= 1;
  ckpt_test::write_file(in, content);
  CHECK(ckpt_test::run_command(kReshard + " " + in + " -o " + dir.file("s2") + " --world-size 2" + quiet) == 1);
  CHECK(ckpt_test::run_command(kMerge + " " + in + " -o " + dir.file("m2.ckpt") + quiet) == 1);
  CHECK_FALSE(fsys::exists(dir.file("m2.ckpt")));
}
#endif
