// Tests for include/ckpt/shard/verify.hpp: a corruption table over every region of a shard file.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <thread>
#include <string>
#include <vector>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/io/sigbus_guard.hpp>
#include <ckpt/shard/verify.hpp>

#include "shard_test_util.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

constexpr std::uint64_t kPage = 4096;

struct Region {
  std::uint64_t offset = 0, length = 0;
};

// A shard with multi-chunk, multi-piece (written out of index order), zero-size and scalar tensors
// and metadata, 4 KiB chunks and alignment, plus the byte ranges of each of its regions.
struct Fixture {
  ckpt_test::TempDir dir;
  std::string path;
  std::string bytes;
  Index index;
  Footer footer;
  std::map<std::string, Region> regions;
  // Data regions name the chunk they fall in: tensor, piece, chunk.
  struct ChunkRef { std::string tensor; std::int64_t piece, chunk; };
  std::map<std::string, ChunkRef> chunk_of;

  Fixture() {
    path = dir.file("f.ckpt");
    PosixFs fs;
    auto w = ShardWriter::create(fs, path, ckpt_test::small_writer_options(12));
    REQUIRE(w.ok());
    const auto big = ckpt_test::random_bytes(3 * 2500 * 4, 11);
    REQUIRE(w->add_tensor("big", DType::F32, {3, 2500}, big.data(), big.size()).ok());
    const auto lower = ckpt_test::random_bytes(3 * 1000 * 2, 12), upper = ckpt_test::random_bytes(3 * 1000 * 2, 13);
    ckpt_test::write_piece(*w, "sharded", DType::I16, {6, 1000}, {3, 0}, {3, 1000}, upper.data(), upper.size());
    const double pi = 3.14159;
    REQUIRE(w->add_tensor("scalar", DType::F64, {}, &pi, sizeof pi).ok());
    ckpt_test::write_piece(*w, "sharded", DType::I16, {6, 1000}, {0, 0}, {3, 1000}, lower.data(), lower.size());
    REQUIRE(w->add_tensor("empty", DType::U8, {0, 7}, nullptr, 0).ok());
    ckpt_test::set_metadata(*w, {{"step", Value(std::int64_t{1234})}, {"lr", Value(0.25)}, {"done", Value(true)}, {"run", Value("resnet-7")},
                                 {"rng", Value(Bytes{std::string(40, '\x7f')})}});
    const ShardReader r = ckpt_test::finish_and_open(fs, *w, path);
    bytes = ckpt_test::read_file(path);
    index = r.index();
    footer = r.footer();

    const std::uint64_t size = bytes.size();
    regions["superblock"] = {0, format::kSuperblockSize};
    regions["padding after superblock"] = {format::kSuperblockSize, kPage - format::kSuperblockSize};
    auto chunk_region = [&](const std::string& name, const std::string& tensor, std::uint64_t piece, std::uint64_t chunk) {
      const TensorRecord* t = index.find_tensor(tensor);
      REQUIRE(t != nullptr);
      const auto& p = index.pieces[t->piece_first + piece];
      const auto& c = index.chunks[p.chunk_first + chunk];
      regions[name] = {c.offset, c.length};
      chunk_of[name] = {tensor, static_cast<std::int64_t>(piece), static_cast<std::int64_t>(chunk)};
    };
    chunk_region("data: first chunk", "big", 0, 0);
    chunk_region("data: middle chunk", "big", 0, 3);
    chunk_region("data: last partial chunk", "big", 0, 7);
    chunk_region("data: second piece", "sharded", 1, 1);
    chunk_region("data: piece written last", "sharded", 0, 0);
    chunk_region("data: scalar", "scalar", 0, 0);
    const auto& big_piece = index.pieces[index.find_tensor("big")->piece_first];
    const std::uint64_t big_end = big_piece.data_offset + big_piece.data_length;
    regions["padding between pieces"] = {big_end, align_up(big_end, kPage) - big_end};

    // Index tables, from the header counts (spec 5).
    const std::uint64_t io = footer.index_offset;
    const auto* h = reinterpret_cast<const unsigned char*>(bytes.data()) + io;
    const std::uint64_t nt = get_u64(h + 8), np = get_u64(h + 16), nc = get_u64(h + 24), nd = get_u64(h + 32),
                        nm = get_u64(h + 40), nb = get_u64(h + 48);
    std::uint64_t at = io;
    auto table = [&](const std::string& name, std::uint64_t len) {
      regions[name] = {at, len};
      at += len;
    };
    table("index header", format::kIndexHeaderSize);
    table("tensor table", nt * format::kTensorRecordSize);
    table("piece table", np * format::kPieceRecordSize);
    table("chunk table", nc * format::kChunkRecordSize);
    table("dims table", nd * format::kDimRecordSize);
    table("metadata table", nm * format::kMetaRecordSize);
    table("blob", nb);
    REQUIRE(at == size - format::kFooterSize);
    regions["footer"] = {size - format::kFooterSize, format::kFooterSize};
  }
};

enum class Mutation { flip, zero, truncate };

const char* mutation_name(Mutation m) {
  switch (m) {
    case Mutation::flip: return "flip one bit";
    case Mutation::zero: return "zero a page";
    case Mutation::truncate: return "truncate";
  }
  return "?";
}

std::string mutate(const std::string& good, Region r, Mutation m) {
  std::string b = good;
  switch (m) {
    case Mutation::flip: b[r.offset + r.length / 2] ^= 0x10; break;
    case Mutation::zero: std::memset(&b[r.offset], 0, std::min(r.length, kPage)); break;
    case Mutation::truncate: b.resize(r.offset + r.length / 2); break;
  }
  return b;
}

Result<VerifyReport> verify(const std::string& path, unsigned threads = 1, bool use_mmap = false) {
  PosixFs fs;
  VerifyOptions o;
  o.threads = threads;
  o.use_mmap = use_mmap;
  return verify_file(fs, path, o);
}

void require_same(const VerifyReport& a, const VerifyReport& b) {
  CHECK(a.file_size == b.file_size);
  CHECK(a.chunks_total == b.chunks_total);
  CHECK(a.chunks_checked == b.chunks_checked);
  CHECK(a.bytes_checked == b.bytes_checked);
  REQUIRE(a.problems.size() == b.problems.size());
  for (std::size_t i = 0; i < a.problems.size(); ++i) {
    const Problem& x = a.problems[i];
    const Problem& y = b.problems[i];
    CHECK(x.code == y.code);
    CHECK(x.region == y.region);
    CHECK(x.tensor == y.tensor);
    CHECK(x.piece == y.piece);
    CHECK(x.chunk == y.chunk);
    CHECK(x.offset == y.offset);
    CHECK(x.length == y.length);
    CHECK(x.expected == y.expected);
    CHECK(x.found == y.found);
    CHECK(x.message == y.message);
  }
}

// What a row of the table expects: intact, or a first problem with this code and region.
struct Verdict {
  bool intact;
  Code code;
  const char* region;
};
constexpr Verdict kIntact{true, Code::ok, ""};
constexpr Verdict kCorrupt(const char* region) { return {false, Code::corrupt, region}; }
constexpr Verdict kIncomplete(const char* region) { return {false, Code::incomplete, region}; }
constexpr Verdict kNotRun{false, Code::ok, nullptr};  // a mutation the table does not try on that region

}  // namespace

TEST_CASE("an intact file verifies with zero problems and every chunk checked", "[verify]") {
  Fixture f;
  std::uint64_t data_bytes = 0;
  for (const auto& p : f.index.pieces) data_bytes += p.data_length;
  for (unsigned threads : {1u, 3u}) {
    for (bool use_mmap : {false, true}) {
      auto r = verify(f.path, threads, use_mmap);
      REQUIRE(r.ok());
      CHECK(r->ok());
      CHECK(r->problems.empty());
      CHECK(r->path == f.path);
      CHECK(r->file_size == f.bytes.size());
      CHECK(r->chunks_total == f.index.chunks.size());
      CHECK(r->chunks_checked == f.index.chunks.size());
      CHECK(r->bytes_checked == data_bytes);
    }
  }
}

TEST_CASE("corruption table: every region x flip, zero, truncate gets the right verdict", "[verify]") {
  Fixture f;
  // One row a region: its verdict after each mutation, flip, zero and truncate.
  struct Row {
    const char* region;
    Verdict flip, zero, truncate;
  };
  // Truncation anywhere loses the footer: the file is incomplete. Zeroing padding changes nothing.
  const std::vector<Row> rows = {
      {"superblock", kCorrupt("superblock"), kCorrupt("superblock"), kIncomplete("file")},
      {"padding after superblock", kCorrupt("padding"), kIntact, kIncomplete("footer")},
      {"data: first chunk", kCorrupt("data"), kCorrupt("data"), kIncomplete("footer")},
      {"data: middle chunk", kCorrupt("data"), kCorrupt("data"), kIncomplete("footer")},
      {"data: last partial chunk", kCorrupt("data"), kCorrupt("data"), kIncomplete("footer")},
      {"data: second piece", kCorrupt("data"), kCorrupt("data"), kNotRun},
      {"data: piece written last", kCorrupt("data"), kCorrupt("data"), kIncomplete("footer")},
      {"data: scalar", kCorrupt("data"), kCorrupt("data"), kNotRun},
      {"padding between pieces", kCorrupt("padding"), kIntact, kIncomplete("footer")},
      {"index header", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"tensor table", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"piece table", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"chunk table", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"dims table", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"metadata table", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      {"blob", kCorrupt("index"), kCorrupt("index"), kIncomplete("footer")},
      // A flip hits index_length (a footer digest mismatch); zeros leave no footer magic, which looks like a torn write.
      {"footer", kCorrupt("footer"), kIncomplete("footer"), kIncomplete("footer")},
  };
  const std::string damaged = f.dir.file("damaged.ckpt");
  std::size_t cases = 0, cases_run = 0;
  for (const auto& row : rows) {
    const std::pair<Mutation, Verdict> cells[] = {{Mutation::flip, row.flip}, {Mutation::zero, row.zero}, {Mutation::truncate, row.truncate}};
    for (const auto& [mutation, verdict] : cells) {
      if (verdict.region == nullptr) continue;  // kNotRun
      ++cases;
      INFO("region " << row.region << ", " << mutation_name(mutation));
      REQUIRE(f.regions.count(row.region) == 1);
      const Region region = f.regions.at(row.region);
      REQUIRE(region.length > 0);
      const std::string bytes = mutate(f.bytes, region, mutation);
      ckpt_test::write_file(damaged, bytes);
      auto r = verify(damaged);
      REQUIRE(r.ok());
      ++cases_run;
      if (verdict.intact) {
        CHECK(bytes == f.bytes);  // zeroing padding is a no-op: proves the verifier has no false positives
        CHECK(r->ok());
        continue;
      }
      REQUIRE_FALSE(r->ok());
      const Problem& p = r->problems.front();
      INFO("first problem: " << p.message);
      CHECK(p.code == verdict.code);
      CHECK(p.region == verdict.region);
      CHECK(p.message.find(damaged) != std::string::npos);
      // Everything the verifier reports lies inside the damaged file.
      for (const auto& q : r->problems) CHECK(range_within(q.offset, q.length, f.bytes.size()));

      const std::string region_name = row.region;
      if (p.region == std::string("data")) {
        const auto& ref = f.chunk_of.at(region_name);
        // A damaged chunk is the only problem, named by tensor, piece and chunk, with both digests.
        CHECK(r->problems.size() == 1);
        CHECK(p.tensor == ref.tensor);
        CHECK(p.piece == ref.piece);
        CHECK(p.chunk == ref.chunk);
        CHECK(p.offset == region.offset);
        CHECK(p.length == region.length);
        const TensorRecord* t = f.index.find_tensor(ref.tensor);
        const auto& rec = f.index.chunks[f.index.pieces[t->piece_first + ref.piece].chunk_first + ref.chunk];
        CHECK(p.expected == hex64(rec.digest));
        CHECK(p.found == hex64(xxh3_64(bytes.data() + rec.offset, rec.length)));
        CHECK(p.expected != p.found);
        CHECK(r->chunks_checked == f.index.chunks.size());
      } else if (p.region == std::string("padding")) {
        CHECK(r->problems.size() == 1);
        CHECK(p.offset == region.offset + region.length / 2);  // the first non-zero byte
        CHECK(p.expected == "00");
        CHECK(p.found == "10");
        CHECK(r->chunks_checked == f.index.chunks.size());
      } else if (p.region == std::string("index")) {
        CHECK(r->problems.size() == 1);
        CHECK(p.offset == f.footer.index_offset);
        CHECK(p.length == f.footer.index_length);
        CHECK(p.expected == hex64(f.footer.index_digest));
        CHECK(p.found == hex64(xxh3_64(bytes.data() + f.footer.index_offset, f.footer.index_length)));
      } else if (region_name == "superblock" && mutation == Mutation::flip) {
        // The damaged field (hash id) is not needed to check the rest: every chunk is still checked.
        CHECK(r->problems.size() == 1);
        CHECK(p.expected == hex64(get_u64(reinterpret_cast<const unsigned char*>(f.bytes.data()) + format::sb::kDigest)));
        CHECK(p.found == hex64(xxh3_64(bytes.data(), format::sb::kDigest)));
        CHECK(r->chunks_checked == f.index.chunks.size());
      } else if (verdict.code == Code::incomplete) {
        CHECK(r->problems.size() == 1);
        CHECK(r->chunks_checked == 0);
      }

      // The same report from several threads and from a mapping.
      auto threaded = verify(damaged, 4);
      REQUIRE(threaded.ok());
      require_same(*r, *threaded);
      auto mapped = verify(damaged, 2, true);
      REQUIRE(mapped.ok());
      require_same(*r, *mapped);
    }
  }
  CHECK(cases_run == cases);
}

TEST_CASE("bytes appended after the footer are reported as trailing data", "[verify]") {
  Fixture f;
  const std::string damaged = f.dir.file("appended.ckpt");
  for (std::size_t extra : {std::size_t{1}, std::size_t{100}, std::size_t{5000}}) {
    INFO(extra << " bytes appended");
    auto garbage = ckpt_test::random_bytes(extra, extra);
    ckpt_test::write_file(damaged, f.bytes + std::string(garbage.begin(), garbage.end()));
    auto r = verify(damaged);
    REQUIRE(r.ok());
    REQUIRE(r->problems.size() == 1);
    const Problem& p = r->problems.front();
    CHECK(p.code == Code::corrupt);
    CHECK(p.region == "file");
    CHECK(p.offset == f.bytes.size());
    CHECK(p.length == extra);
    // Everything before the garbage is still checked.
    CHECK(r->chunks_checked == f.index.chunks.size());
    auto threaded = verify(damaged, 4, true);
    REQUIRE(threaded.ok());
    require_same(*r, *threaded);
  }
  // Past the 1 MiB look-back window the footer is simply missing.
  ckpt_test::write_file(damaged, f.bytes + std::string((std::size_t{1} << 20) + 1, 'x'));
  auto r = verify(damaged);
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->ok());
  CHECK(r->problems.front().code == Code::incomplete);
  CHECK(r->problems.front().region == "footer");
}

TEST_CASE("a footer flipped in its magic reads as incomplete, elsewhere as corrupt", "[verify]") {
  Fixture f;
  const std::string damaged = f.dir.file("footer.ckpt");
  const std::uint64_t at = f.bytes.size() - format::kFooterSize;
  struct Row { std::size_t field; Code code; };
  const Row rows[] = {{format::ft::kIndexOffset, Code::corrupt}, {format::ft::kIndexDigest, Code::corrupt},
                      {format::ft::kUuid, Code::corrupt},        {format::ft::kVersion, Code::corrupt},
                      {format::ft::kDigest, Code::corrupt},      {format::ft::kMagic, Code::incomplete},
                      {format::ft::kMagic + 7, Code::incomplete}};
  for (const auto& row : rows) {
    INFO("footer byte " << row.field);
    std::string b = f.bytes;
    b[at + row.field] ^= 0x01;
    ckpt_test::write_file(damaged, b);
    auto r = verify(damaged);
    REQUIRE(r.ok());
    REQUIRE(r->problems.size() == 1);
    CHECK(r->problems.front().region == "footer");
    CHECK(r->problems.front().code == row.code);
  }
}

TEST_CASE("every damaged chunk is reported once, in file order, by any number of threads", "[verify]") {
  // 64 KiB chunks are hashed several per read; 1 MiB chunks are streamed through a smaller buffer.
  const std::uint32_t chunk_log2 = GENERATE(16u, 20u);
  INFO("chunk size 2^" << chunk_log2);
  ckpt_test::TempDir dir;
  PosixFs fs;
  const std::string path = dir.file("big.ckpt");
  // 9 MiB in one piece: three 4 MiB work items, so threads really share the file.
  const auto data = ckpt_test::random_bytes(std::size_t{9} << 20, 5);
  {
    WriterOptions o;
    o.chunk_size_log2 = chunk_log2;
    auto w = ShardWriter::create(fs, path, o);
    REQUIRE(w.ok());
    REQUIRE(w->add_tensor("w", DType::U8, {data.size()}, data.data(), data.size()).ok());
    REQUIRE(w->finish().ok());
  }
  std::string bytes = ckpt_test::read_file(path);
  const std::uint64_t chunks = data.size() >> chunk_log2;
  std::vector<std::uint64_t> damaged_chunks;
  for (std::uint64_t c = 1; c < chunks; c += chunks > 20 ? 13 : 3) {
    // Late in the chunk: past the first read of a chunk that is read in several.
    bytes[4096 + (c << chunk_log2) + (std::uint64_t{1} << chunk_log2) - 77] ^= 0x01;
    damaged_chunks.push_back(c);
  }
  ckpt_test::write_file(path, bytes);
  auto one = verify(path, 1);
  REQUIRE(one.ok());
  REQUIRE(one->problems.size() == damaged_chunks.size());
  for (std::size_t i = 0; i < damaged_chunks.size(); ++i) {
    CHECK(one->problems[i].region == "data");
    CHECK(one->problems[i].tensor == "w");
    CHECK(one->problems[i].chunk == static_cast<std::int64_t>(damaged_chunks[i]));
    CHECK(one->problems[i].offset == 4096 + (damaged_chunks[i] << chunk_log2));
    CHECK(one->problems[i].length == (std::uint64_t{1} << chunk_log2));
  }
  CHECK(one->chunks_checked == chunks);
  for (unsigned threads : {2u, 3u, 8u}) {
    auto many = verify(path, threads);
    REQUIRE(many.ok());
    require_same(*one, *many);
    auto mapped = verify(path, threads, true);
    REQUIRE(mapped.ok());
    require_same(*one, *mapped);
  }
}

TEST_CASE("progress reaches the total with one thread and never exceeds it", "[verify]") {
  Fixture f;
  PosixFs fs;
  VerifyOptions o;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  o.progress = [&](std::uint64_t done, std::uint64_t total) { calls.emplace_back(done, total); };
  auto r = verify_file(fs, f.path, o);
  REQUIRE(r.ok());
  REQUIRE_FALSE(calls.empty());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].first <= calls[i].second);
    if (i > 0) CHECK(calls[i].first >= calls[i - 1].first);
  }
  CHECK(calls.back().first == calls.back().second);
  CHECK(calls.back().second == r->bytes_checked);
}

TEST_CASE("files too small or not ckpt at all are reported, not thrown", "[verify]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  struct Row { const char* name; std::string bytes; Code code; const char* region; };
  const auto noise = ckpt_test::random_bytes(10000, 9);
  const std::vector<Row> rows = {
      {"empty", "", Code::incomplete, "file"},
      {"one byte", "x", Code::incomplete, "file"},
      {"191 bytes", std::string(191, '\0'), Code::incomplete, "file"},
      {"192 zero bytes", std::string(192, '\0'), Code::corrupt, "superblock"},
      {"random noise", std::string(noise.begin(), noise.end()), Code::corrupt, "superblock"},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    const std::string path = dir.file("x.ckpt");
    ckpt_test::write_file(path, row.bytes);
    auto r = verify_file(fs, path);
    REQUIRE(r.ok());
    REQUIRE(r->problems.size() == 1);
    CHECK(r->problems.front().code == row.code);
    CHECK(r->problems.front().region == row.region);
  }
  auto missing = verify_file(fs, dir.file("missing.ckpt"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::not_found);
}

// --- --mmap and a file truncated while it is being hashed (issue 5) -------------------------------

namespace {

// A shard with 12 MiB of data in 1 MiB chunks: three 4 MiB work items, so hashing takes a while.
std::string write_big_shard(const std::string& path) {
  PosixFs fs;
  WriterOptions o;
  o.chunk_size_log2 = 20;
  o.alignment_log2 = 12;
  auto w = ShardWriter::create(fs, path, o);
  REQUIRE(w.ok());
  const auto data = ckpt_test::random_bytes(std::size_t{12} << 20, 99);
  REQUIRE(w->add_tensor("big", DType::U8, {data.size()}, data.data(), data.size()).ok());
  REQUIRE(w->finish().ok());
  return ckpt_test::read_file(path);
}

}  // namespace

TEST_CASE("--mmap: a file truncated after the first work item is an error naming file and offset, not SIGBUS", "[verify][mmap]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("big.ckpt");
  write_big_shard(path);
  PosixFs fs;
  VerifyOptions o;
  o.use_mmap = true;
  o.threads = 1;
  bool truncated = false;
  // The progress callback runs on the verifying thread after each item: cut the file to 8 KiB there.
  o.progress = [&](std::uint64_t, std::uint64_t) {
    if (truncated) return;
    truncated = true;
    CHECK(::truncate(path.c_str(), 8192) == 0);
  };
  auto r = verify_file(fs, path, o);
  REQUIRE(r.ok());
  REQUIRE(truncated);
  REQUIRE(r->problems.size() == 1);  // one report: every later item would fault the same way
  const Problem& p = r->problems.front();
  INFO(p.message);
  CHECK(p.code == Code::io);
  CHECK(p.region == "data");
  CHECK(p.message.rfind(path + ": ", 0) == 0);
  CHECK(p.message.find("file changed during verification") != std::string::npos);
  CHECK(p.message.find("offset ") != std::string::npos);
  CHECK(p.message.find("8192 bytes now") != std::string::npos);
  CHECK_FALSE(r->ok());
}

TEST_CASE("--mmap: a file truncated by another thread at any moment gives a verdict or an error, never a crash", "[verify][mmap]") {
  ckpt_test::TempDir dir;
  const std::string path = dir.file("big.ckpt");
  const std::string bytes = write_big_shard(path);
  PosixFs fs;
  int changed = 0, other = 0, intact = 0;
  for (int attempt = 0; attempt < 24; ++attempt) {
    ckpt_test::write_file(path, bytes);
    std::atomic<bool> go{false};
    std::thread cutter([&] {
      while (!go.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds(200 * attempt));
      (void)::truncate(path.c_str(), 4096 * (attempt % 4));
    });
    VerifyOptions o;
    o.use_mmap = true;
    o.threads = 1 + attempt % 3;
    go = true;
    auto r = verify_file(fs, path, o);
    cutter.join();
    if (!r.ok()) {
      ++other;  // truncated before the open's size was read: an ordinary error
      continue;
    }
    if (r->ok()) ++intact;
    for (const auto& p : r->problems) {
      if (p.message.find("file changed during verification") != std::string::npos) {
        CHECK(p.code == Code::io);
        ++changed;
      }
    }
    if (!r->ok()) ++other;
  }
  WARN(std::to_string(changed) + " changed-during-verification errors, " + std::to_string(intact) + " intact, " +
       std::to_string(other) + " other verdicts in 24 attempts");
}

TEST_CASE("a SIGBUS outside run_catching_sigbus still kills the process", "[verify][mmap]") {
  // The guard is installed in the child, then a SIGBUS arrives with nothing armed.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const bool finished = run_catching_sigbus([] {});
    if (!finished) ::_exit(3);
    ::raise(SIGBUS);
    ::_exit(0);  // not reached: the default action (or a sanitizer's handler) ends the process
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 3));
}
