// Tests for include/ckpt/testing/fault_fs.hpp: each fault kind, the counting modes, and every operation of
// a ShardWriter save failed in turn.
#include <catch2/catch.hpp>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "saved_shard.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

bool mentions(const Status& s, int err) { return s.message().find(std::strerror(err)) != std::string::npos; }

const std::vector<unsigned char>& tensor_bytes() {
  static const auto bytes = ckpt_test::random_bytes(5 * 4096 + 300, 41);
  return bytes;
}

// A standalone save of two tensors in small writes (many operations), with a fixed uuid so the
// bytes of the file are the same on every run.
template <class Fs>
Status save(Fs& fs, const std::string& path) {
  WriterOptions o;
  o.chunk_size_log2 = 12;
  o.buffer_size = 4096;
  o.uuid = Uuid{9, 8, 7, 6, 5, 4, 0x43, 2, 0x81, 0, 1, 2, 3, 4, 5, 6};
  CKPT_ASSIGN_OR_RETURN(auto w, ShardWriter::create(fs, path, o));
  const auto& bytes = tensor_bytes();
  const Shape shape{bytes.size()};
  CKPT_TRY(w.begin_piece("t", DType::U8, shape, Shape{0}, shape));
  for (std::size_t at = 0; at < bytes.size(); at += 1500)
    CKPT_TRY(w.write(bytes.data() + at, std::min<std::size_t>(1500, bytes.size() - at)));
  CKPT_TRY(w.end_piece());
  CKPT_TRY(w.add_tensor("small", DType::U8, {64}, bytes.data(), 64));
  CKPT_TRY(w.set_metadata("step", Value(7)));
  auto summary = w.finish();
  return summary.ok() ? Status() : summary.status();
}

// "absent", "intact", or what is wrong with the file at path.
std::string check_saved(SimFs& fs, const std::string& path) { return ckpt_test::check_saved(fs, path, {{"t", &tensor_bytes()}}); }

SimFs fresh_store() {
  SimFs fs;
  REQUIRE(fs.mkdir("/ckpt").ok());
  REQUIRE(fs.sync_dir("/").ok());
  return fs;
}

const std::string kPath = "/ckpt/model.ckpt";

// How many operations a fault-free save makes (of the given kinds).
std::uint64_t save_op_count(FsOpSet ops = fs_ops::all) {
  SimFs inner = fresh_store();
  FaultFs<SimFs> fs(inner, FaultPlan::nth(0, Fault::none, ops));
  REQUIRE(save(fs, kPath).ok());
  return fs.count();
}

std::vector<unsigned char> saved_bytes_without_fault() {
  SimFs inner = fresh_store();
  REQUIRE(save(inner, kPath).ok());
  return *inner.file_content(kPath);
}

}  // namespace

// --- Counting ------------------------------------------------------------------------------------

TEST_CASE("FaultFs counts every operation, or only the chosen kinds", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner);
  REQUIRE(fs.mkdir("/d").ok());
  auto f = fs.open("/d/a", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, "abc", 3, 0).ok());
  REQUIRE(fs.sync(*f).ok());
  REQUIRE(fs.close(*f).ok());
  CHECK(fs.stat("/d/zz").status().code() == Code::not_found);  // failed inner operations count too
  CHECK(fs.count() == 6);
  CHECK(fs.total_count() == 6);
  CHECK(fs.faults() == 0);
  CHECK(fs.first_fault().empty());
  CHECK(inner.op_count() == 6);

  fs.set_plan(FaultPlan::nth(0, Fault::none, fs_ops::syncs));
  REQUIRE(fs.sync_dir("/d").ok());
  REQUIRE(fs.stat("/d/a").ok());
  CHECK(fs.count() == 1);
  CHECK(fs.total_count() == 2);
}

// --- Each fault kind ------------------------------------------------------------------------------

TEST_CASE("the n-th operation fails with ENOSPC or EIO and does not reach the inner fs", "[fault_fs]") {
  struct Row {
    Fault fault;
    int err;
  };
  for (const Row row : {Row{Fault::no_space, ENOSPC}, Row{Fault::io_error, EIO}, Row{Fault::short_write, EIO}}) {
    INFO(fault_name(row.fault));
    SimFs inner;
    FaultFs<SimFs> fs(inner, FaultPlan::nth(2, row.fault));
    REQUIRE(fs.mkdir("/d").ok());                           // operation 1
    auto f = fs.open("/d/a", OpenMode::create_new);         // operation 2 fails
    REQUIRE(!f.ok());
    CHECK(f.status().code() == Code::io);
    CHECK(mentions(f.status(), row.err));
    CHECK(f.status().message().find("/d/a") != std::string::npos);
    CHECK(f.status().message().find("operation 2") != std::string::npos);
    CHECK(!inner.stat("/d/a").ok());                        // nothing was created
    CHECK(fs.faults() == 1);
    CHECK(fs.first_fault() == std::string("open #2 /d/a: ") + fault_name(row.fault));
    auto g = fs.open("/d/a", OpenMode::create_new);         // operation 3 works again
    CHECK(g.ok());
  }
}

TEST_CASE("a fault on any handle operation names the file it was opened under", "[fault_fs]") {
  const std::vector<FsOp> ops = {FsOp::pwrite, FsOp::pread, FsOp::sync, FsOp::sync_data, FsOp::file_size, FsOp::truncate, FsOp::close};
  for (const FsOp op : ops) {
    INFO(fs_op_name(op));
    SimFs inner;
    FaultFs<SimFs> fs(inner, FaultPlan::nth(1, Fault::io_error, fs_op_bit(op)));
    auto f = fs.open("/file", OpenMode::create_new);
    REQUIRE(f.ok());
    char buf[4] = {'a', 'b', 'c', 'd'};
    Status s;
    switch (op) {
      case FsOp::pwrite: s = fs.pwrite(*f, buf, 4, 0); break;
      case FsOp::pread: s = fs.pread(*f, buf, 4, 0).status(); break;
      case FsOp::sync: s = fs.sync(*f); break;
      case FsOp::sync_data: s = fs.sync_data(*f); break;
      case FsOp::file_size: s = fs.file_size(*f).status(); break;
      case FsOp::truncate: s = fs.truncate(*f, 9); break;
      default: s = fs.close(*f); break;
    }
    CHECK(s.code() == Code::io);
    CHECK(s.message().find("/file") != std::string::npos);
    CHECK(mentions(s, EIO));
    CHECK(fs.faults() == 1);
  }
}

TEST_CASE("a failed close still releases the handle", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner, FaultPlan::nth(2, Fault::io_error));
  auto f = fs.lock("/LOCK");  // operation 1
  REQUIRE(f.ok());
  CHECK(fs.close(*f).code() == Code::io);  // operation 2 fails...
  CHECK(inner.lock("/LOCK").ok());         // ...but the lock is gone: the handle was closed
  CHECK(inner.close(*f).code() == Code::io);
}

TEST_CASE("a short write lands a prefix, then reports ENOSPC", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner, FaultPlan::nth(1, Fault::short_write, fs_op_bit(FsOp::pwrite)));
  auto f = fs.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  const auto data = ckpt_test::random_bytes(1001, 42);
  const Status s = fs.pwrite(*f, data.data(), data.size(), 10);
  CHECK(s.code() == Code::io);
  CHECK(mentions(s, ENOSPC));
  CHECK(s.message().find("500 of 1001") != std::string::npos);
  const auto content = *inner.file_content("/f");
  REQUIRE(content.size() == 510);
  CHECK(std::equal(data.begin(), data.begin() + 500, content.begin() + 10));
}

TEST_CASE("an interrupted transfer is resumed, and the caller sees no fault", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner, FaultPlan::from(1, Fault::interrupted));
  auto f = fs.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  const auto data = ckpt_test::random_bytes(777, 43);
  REQUIRE(fs.pwrite(*f, data.data(), data.size(), 3).ok());
  CHECK(inner.op_count(FsOp::pwrite) == 2);  // the kernel moved half, the retry the rest
  std::vector<unsigned char> back(800, 0xEE);
  auto got = fs.pread(*f, back.data(), back.size(), 3);
  REQUIRE(got.ok());
  CHECK(*got == 777);                        // short only at the end of the file
  CHECK(std::equal(data.begin(), data.end(), back.begin()));
  CHECK(inner.op_count(FsOp::pread) == 2);
  auto one = fs.pread(*f, back.data(), 1, 0);  // a one-byte transfer cannot be split
  REQUIRE(one.ok());
  CHECK(*one == 1);
  REQUIRE(fs.sync(*f).ok());
  REQUIRE(fs.close(*f).ok());
  CHECK(fs.faults() == fs.count());
  auto content = inner.file_content("/f");
  REQUIRE(content.ok());
  CHECK(std::equal(data.begin(), data.end(), content->begin() + 3));
}

TEST_CASE("a dead disk fails every operation from the n-th on", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner, FaultPlan::from(3, Fault::io_error));
  CHECK(fs.mkdir("/a").ok());
  CHECK(fs.mkdir("/b").ok());
  CHECK(fs.mkdir("/c").code() == Code::io);
  CHECK(fs.stat("/a").status().code() == Code::io);
  CHECK(fs.list_dir("/").status().code() == Code::io);
  CHECK(fs.faults() == 3);
  CHECK(fs.first_fault() == "mkdir #3 /c: io_error");
}

TEST_CASE("in sync-only mode every sync fails and everything else works", "[fault_fs]") {
  SimFs inner;
  FaultFs<SimFs> fs(inner, FaultPlan::syncs());
  auto f = fs.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, "data", 4, 0).ok());
  CHECK(fs.sync(*f).code() == Code::io);
  CHECK(fs.sync_data(*f).code() == Code::io);
  CHECK(fs.sync_dir("/").code() == Code::io);
  REQUIRE(fs.close(*f).ok());
  CHECK(fs.count() == 3);
  CHECK(fs.faults() == 3);
  // A failed sync never reached the disk: the data and the name are still only unsynced.
  CHECK(inner.unsynced_file_ops() == 1);
  CHECK(inner.unsynced_dir_ops() == 1);
  CHECK(!inner.durable_state().stat("/f").ok());
}

TEST_CASE("FaultFs wraps PosixFs, mmap included", "[fault_fs]") {
  ckpt_test::TempDir dir;
  PosixFs posix;
  {
    FaultFs<PosixFs> fs(posix);
    REQUIRE(save(fs, dir.file("a.ckpt")).ok());
    auto reader = ShardReader::open(fs, dir.file("a.ckpt"));
    REQUIRE(reader.ok());
    auto mapped = reader->map_piece(0);
    REQUIRE(mapped.ok());
    CHECK(std::memcmp(mapped->data(), tensor_bytes().data(), tensor_bytes().size()) == 0);
    fs.set_plan(FaultPlan::nth(1, Fault::io_error, fs_op_bit(FsOp::map)));
    CHECK(reader->map_piece(0).status().code() == Code::io);
  }
  FaultFs<PosixFs> fs(posix, FaultPlan::nth(3, Fault::no_space, fs_op_bit(FsOp::pwrite)));
  const Status s = save(fs, dir.file("b.ckpt"));
  CHECK(s.code() == Code::io);
  CHECK(mentions(s, ENOSPC));
  auto names = posix.list_dir(dir.path());
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"a.ckpt"});  // the failed save left nothing behind
}

// --- Every operation of a save, failed in turn -------------------------------------------------------

TEST_CASE("a save whose n-th operation fails returns the error and leaves nothing under the final name", "[fault_fs][shard_writer]") {
  const std::uint64_t count = save_op_count();
  REQUIRE(count > 10);
  std::uint64_t runs = 0, crash_states = 0, left_after_dir_sync = 0;
  for (const Fault fault : {Fault::no_space, Fault::io_error, Fault::short_write}) {
    for (std::uint64_t n = 1; n <= count; ++n) {
      INFO(fault_name(fault) << " at operation " << n << " of " << count);
      SimFs inner = fresh_store();
      FaultFs<SimFs> fs(inner, FaultPlan::nth(n, fault));
      const Status saved = save(fs, kPath);
      ++runs;
      INFO(fs.first_fault());
      REQUIRE(fs.faults() == 1);
      CHECK(!saved.ok());
      CHECK(saved.code() == Code::io);
      const std::string live = check_saved(inner, kPath);
      if (live != "absent") {
        // The one exception: the directory sync after the rename failed, so the complete file is at
        // its final name but its name is not durable. The save reports the error.
        CHECK(fs.first_fault().rfind("sync_dir", 0) == 0);
        CHECK(live == "intact");
        ++left_after_dir_sync;
      } else {
        // The temporary file was removed too.
        auto names = inner.list_dir("/ckpt");
        REQUIRE(names.ok());
        CHECK(names->empty());
      }
      // And a crash right after the failure leaves no damaged file under the final name.
      for (std::uint64_t seed = 0; seed < 4; ++seed) {
        SimFs state = inner.sample_crash_state(n * 131 + seed);
        const std::string verdict = check_saved(state, kPath);
        CHECK((verdict == "absent" || verdict == "intact"));
        ++crash_states;
      }
    }
  }
  std::cout << "[fault_fs] " << count << " operations per save, " << runs << " failed saves, " << crash_states
            << " crash states after them; complete file left under the final name after a failed directory sync: "
            << left_after_dir_sync << "\n";
}

TEST_CASE("a save on a disk that dies at operation n fails cleanly for every n", "[fault_fs][shard_writer]") {
  const std::uint64_t count = save_op_count();
  for (std::uint64_t n = 1; n <= count; ++n) {
    INFO("dead from operation " << n);
    SimFs inner = fresh_store();
    FaultFs<SimFs> fs(inner, FaultPlan::from(n, Fault::io_error));
    const Status saved = save(fs, kPath);
    CHECK(!saved.ok());
    const std::string live = check_saved(inner, kPath);
    CHECK((live == "absent" || (live == "intact" && fs.first_fault().rfind("sync_dir", 0) == 0)));
  }
}

TEST_CASE("a save whose syncs fail never publishes the file", "[fault_fs][shard_writer]") {
  const std::uint64_t syncs = save_op_count(fs_ops::syncs);
  REQUIRE(syncs == 2);  // the file, then its directory
  for (std::uint64_t n = 1; n <= syncs; ++n) {
    SimFs inner = fresh_store();
    FaultFs<SimFs> fs(inner, FaultPlan::syncs(Fault::io_error, n));
    CHECK(save(fs, kPath).code() == Code::io);
    // The file's fsync failed: the rename never happened. The directory's: the name may be there
    // live, but no crash state can hold a damaged file under it.
    if (n == 1) CHECK(check_saved(inner, kPath) == "absent");
    const std::uint64_t states = inner.crash_state_count();
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(states, 64); ++i) {
      SimFs state = *inner.crash_state(i);
      const std::string verdict = check_saved(state, kPath);
      CHECK((verdict == "absent" || verdict == "intact"));
    }
  }
}

TEST_CASE("with EINTR at any operation the saved file is identical", "[fault_fs][shard_writer]") {
  const std::uint64_t count = save_op_count();
  const auto expected = saved_bytes_without_fault();
  REQUIRE(!expected.empty());
  for (std::uint64_t n = 1; n <= count + 1; ++n) {
    INFO("interrupted " << (n <= count ? "at operation " + std::to_string(n) : std::string("everywhere")));
    SimFs inner = fresh_store();
    FaultFs<SimFs> fs(inner, n <= count ? FaultPlan::nth(n, Fault::interrupted) : FaultPlan::from(1, Fault::interrupted));
    REQUIRE(save(fs, kPath).ok());
    CHECK(fs.faults() == (n <= count ? 1 : count));
    CHECK(*inner.file_content(kPath) == expected);
    CHECK(*inner.list_dir("/ckpt") == std::vector<std::string>{"model.ckpt"});
    CHECK(inner.crash_state_count() == 1);  // and it is durable
  }
}
