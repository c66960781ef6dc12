// Tests for include/ckpt/testing/sim_fs.hpp: the Fs contract (against PosixFs), the persistence model,
// crash-state enumeration, and a standalone ShardWriter save crashed at every persistence point.
#include <catch2/catch.hpp>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/shard/verify.hpp>

#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "saved_shard.hpp"
#include "test_util.hpp"

using namespace ckpt;

namespace {

// --- The Fs contract as a table: each step runs on any Fs and prints its result ------------------
enum class Op { mkdir, rmdir, open, close, pwrite, pread, size, truncate, sync, sync_data, rename, unlink, sync_dir, list, stat, lock };
struct Step {
  Op op = Op::stat;
  std::string path, path2;  // relative to the base directory
  int slot = 0;             // handle slot for handle operations
  OpenMode mode = OpenMode::read;
  std::string bytes;        // pwrite: the bytes
  std::uint64_t offset = 0, n = 0;
};
// Path operations, open and lock into a slot, and operations on the handle in a slot.
Step P(Op op, std::string path, std::string path2 = "") {
  Step s;
  s.op = op;
  s.path = std::move(path);
  s.path2 = std::move(path2);
  return s;
}
Step O(std::string path, int slot, OpenMode mode) {
  Step s = P(Op::open, std::move(path));
  s.slot = slot;
  s.mode = mode;
  return s;
}
Step L(std::string path, int slot) {
  Step s = P(Op::lock, std::move(path));
  s.slot = slot;
  return s;
}
Step H(Op op, int slot, std::string bytes = "", std::uint64_t offset = 0, std::uint64_t n = 0) {
  Step s = P(op, "");
  s.slot = slot;
  s.bytes = std::move(bytes);
  s.offset = offset;
  s.n = n;
  return s;
}

const std::vector<Step>& contract_table() {
  using M = OpenMode;
  static const std::vector<Step> steps = {
      P(Op::mkdir, "d"),
      P(Op::mkdir, "d"),                   // EEXIST: conflict
      P(Op::mkdir, "x/y"),                 // parent missing: not_found
      O("d/a", 0, M::read),                // not_found
      O("d/a", 0, M::read_write),          // not_found
      O("d/a", 0, M::create_new),
      O("d/a", 1, M::create_new),          // conflict
      H(Op::pwrite, 0, "hello", 0),
      H(Op::pwrite, 0, "world", 10),       // the gap reads as zeros
      H(Op::size, 0),
      H(Op::pread, 0, "", 0, 20),          // short only at EOF
      H(Op::pread, 0, "", 13, 4),
      H(Op::pread, 0, "", 100, 4),
      H(Op::truncate, 0, "", 3),
      H(Op::size, 0),
      H(Op::truncate, 0, "", 6),           // extends with zeros
      H(Op::pread, 0, "", 0, 10),
      H(Op::sync, 0),
      H(Op::sync_data, 0),
      H(Op::close, 0),
      H(Op::close, 0),                     // EBADF: io
      H(Op::pwrite, 0, "x", 0),            // closed handle: io
      O("d/a", 1, M::read),
      H(Op::pwrite, 1, "x", 0),            // read-only handle: io
      H(Op::truncate, 1, "", 0),           // read-only handle: io
      H(Op::pread, 1, "", 0, 6),
      H(Op::sync, 1),                      // fsync of a read-only handle is allowed
      H(Op::close, 1),
      O("d/a", 2, M::read_write),
      H(Op::pwrite, 2, "HEL", 0),
      H(Op::pread, 2, "", 0, 6),
      H(Op::close, 2),
      P(Op::stat, "d/a"),
      P(Op::stat, "d"),
      P(Op::stat, "d/zz"),                 // not_found
      P(Op::stat, "d/a/b"),                // ENOTDIR: io
      O("d/a/b", 3, M::create_new),        // ENOTDIR: io
      O("d", 3, M::read_write),            // EISDIR: io
      O("d", 3, M::create_new),            // conflict
      P(Op::rename, "d/a", "d/b"),
      P(Op::rename, "d/a", "d/c"),         // not_found
      P(Op::stat, "d/a"),
      O("d/c", 3, M::create_new),
      H(Op::close, 3),
      P(Op::rename, "d/b", "d/c"),         // replaces
      P(Op::list, "d"),
      P(Op::rename, "d/c", "d/c"),         // the same file: nothing happens
      P(Op::mkdir, "d/e"),
      P(Op::rename, "d/c", "d/e"),         // file onto directory: EISDIR
      P(Op::rename, "d/e", "d/c"),         // directory onto file: ENOTDIR
      P(Op::rename, "d/c", "x/y"),         // target parent missing: not_found
      P(Op::rename, "d/c", "d/c/y"),       // ENOTDIR
      P(Op::unlink, "d/zz"),               // not_found
      P(Op::unlink, "d/e"),                // EISDIR
      P(Op::rmdir, "d"),                   // ENOTEMPTY
      P(Op::rmdir, "d/c"),                 // ENOTDIR
      P(Op::rmdir, "d/zz"),                // not_found
      P(Op::mkdir, "d/e/f"),
      P(Op::rename, "d/e", "d/g"),         // a directory moves with its contents
      P(Op::list, "d/g"),
      P(Op::rename, "d/g", "d/g/f/h"),     // into its own subtree: EINVAL
      P(Op::mkdir, "d/h"),
      P(Op::mkdir, "d/h/i"),
      P(Op::rename, "d/g/f", "d/h"),       // onto a non-empty directory: ENOTEMPTY
      P(Op::rmdir, "d/h/i"),
      P(Op::rename, "d/g/f", "d/h"),       // onto an empty directory: replaces it
      P(Op::list, "d/g"),
      P(Op::rmdir, "d/h"),
      P(Op::rmdir, "d/g"),
      P(Op::sync_dir, "d"),
      P(Op::sync_dir, "d/zz"),             // not_found
      P(Op::sync_dir, "d/c"),              // ENOTDIR
      P(Op::list, "d/zz"),                 // not_found
      P(Op::list, "d/c"),                  // ENOTDIR
      L("d/L", 4),
      L("d/L", 5),                         // held: conflict
      H(Op::pwrite, 4, "pid", 0),          // a lock handle writes
      H(Op::close, 4),
      L("d/L", 5),                         // released by close
      H(Op::close, 5),
      L("d", 6),                           // EISDIR
      L("x/L", 6),                         // not_found
      P(Op::list, "d"),
      O("d/c", 6, M::read),
      P(Op::unlink, "d/c"),                // an open file can be unlinked and still read
      H(Op::pread, 6, "", 0, 6),
      H(Op::close, 6),
      P(Op::unlink, "d/L"),
      P(Op::list, "d"),
      P(Op::rmdir, "d"),
      P(Op::stat, "d"),
  };
  return steps;
}

std::string code_of(const Status& s) { return code_name(s.code()); }

// Runs the table on fs under base; one line per step: the code and any value returned.
template <class Fs>
std::vector<std::string> run_contract(Fs& fs, const std::string& base) {
  std::vector<std::string> lines;
  FileHandle slots[8];
  for (const Step& st : contract_table()) {
    const std::string p = join_path(base, st.path), p2 = join_path(base, st.path2);
    std::string line;
    switch (st.op) {
      case Op::mkdir: line = code_of(fs.mkdir(p)); break;
      case Op::rmdir: line = code_of(fs.rmdir(p)); break;
      case Op::open: {
        auto f = fs.open(p, st.mode);
        line = code_of(f.status());
        if (f.ok()) slots[st.slot] = *f;
        break;
      }
      case Op::lock: {
        auto f = fs.lock(p);
        line = code_of(f.status());
        if (f.ok()) slots[st.slot] = *f;
        break;
      }
      case Op::close: line = code_of(fs.close(slots[st.slot])); break;
      case Op::pwrite: line = code_of(fs.pwrite(slots[st.slot], st.bytes.data(), st.bytes.size(), st.offset)); break;
      case Op::pread: {
        std::string buf(static_cast<std::size_t>(st.n), '?');
        auto got = fs.pread(slots[st.slot], buf.data(), buf.size(), st.offset);
        line = code_of(got.status());
        if (got.ok()) {
          buf.resize(*got);
          for (char& c : buf)
            if (c == '\0') c = '0';
          line += " '" + buf + "'";
        }
        break;
      }
      case Op::size: {
        auto n = fs.file_size(slots[st.slot]);
        line = code_of(n.status()) + (n.ok() ? " " + std::to_string(*n) : "");
        break;
      }
      case Op::truncate: line = code_of(fs.truncate(slots[st.slot], st.offset)); break;
      case Op::sync: line = code_of(fs.sync(slots[st.slot])); break;
      case Op::sync_data: line = code_of(fs.sync_data(slots[st.slot])); break;
      case Op::rename: line = code_of(fs.rename(p, p2)); break;
      case Op::unlink: line = code_of(fs.unlink(p)); break;
      case Op::sync_dir: line = code_of(fs.sync_dir(p)); break;
      case Op::list: {
        auto names = fs.list_dir(p);
        line = code_of(names.status());
        if (names.ok())
          for (const auto& n : *names) line += " " + n;
        break;
      }
      case Op::stat: {
        auto info = fs.stat(p);
        line = code_of(info.status());
        if (info.ok()) line += info->is_dir ? " dir" : " file " + std::to_string(info->size);
        break;
      }
    }
    lines.push_back(st.path + " " + st.path2 + ": " + line);
  }
  return lines;
}

// --- Helpers over SimFs -------------------------------------------------------------------------
std::vector<unsigned char> bytes_of(const std::string& s) { return std::vector<unsigned char>(s.begin(), s.end()); }

void write_file(SimFs& fs, const std::string& path, const std::vector<unsigned char>& data, bool sync_file, bool sync_parent) {
  auto f = fs.open(path, OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, data.data(), data.size(), 0).ok());
  if (sync_file) REQUIRE(fs.sync(*f).ok());
  REQUIRE(fs.close(*f).ok());
  if (sync_parent) REQUIRE(fs.sync_dir(parent_path(path)).ok());
}

// Every crash state of fs, enumerated.
std::vector<SimFs> all_states(const SimFs& fs, const CrashModel& model = {}) {
  const std::uint64_t n = fs.crash_state_count(model);
  REQUIRE(n <= 100000);
  std::vector<SimFs> states;
  for (std::uint64_t i = 0; i < n; ++i) {
    auto s = fs.crash_state(i, model);
    REQUIRE(s.ok());
    states.push_back(std::move(s).value());
  }
  return states;
}

bool exists(SimFs& fs, const std::string& path) { return fs.stat(path).ok(); }

}  // namespace

// --- The Fs contract -------------------------------------------------------------------------------

TEST_CASE("SimFs answers the contract table exactly as PosixFs does", "[sim_fs]") {
  ckpt_test::TempDir dir;
  PosixFs posix;
  SimFs sim;
  REQUIRE(sim.mkdir("/base").ok());
  const auto expected = run_contract(posix, dir.path());
  const auto got = run_contract(sim, "/base");
  REQUIRE(expected.size() == got.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("step " << i);
    CHECK(got[i] == expected[i]);
  }
  // The table exercises every code the contract names.
  std::set<std::string> codes;
  for (const auto& l : got) codes.insert(l.substr(l.find(": ") + 2, l.find(' ', l.find(": ") + 2) - l.find(": ") - 2));
  CHECK(codes == std::set<std::string>{"ok", "io", "not_found", "conflict"});
}

TEST_CASE("FaultFs without a fault and with every transfer interrupted answers the table unchanged", "[sim_fs][fault_fs]") {
  SimFs plain;
  REQUIRE(plain.mkdir("/base").ok());
  const auto expected = run_contract(plain, "/base");
  for (const Fault fault : {Fault::none, Fault::interrupted}) {
    SimFs inner;
    REQUIRE(inner.mkdir("/base").ok());
    FaultFs<SimFs> fs(inner, FaultPlan::from(1, fault));
    CHECK(run_contract(fs, "/base") == expected);
    CHECK(fs.faults() == (fault == Fault::none ? 0 : fs.count()));
    CHECK(inner.fingerprint() == plain.fingerprint());
  }
}

TEST_CASE("SimFs errors carry the errno text PosixFs gives", "[sim_fs]") {
  SimFs fs;
  auto missing = fs.open("/nope/a", OpenMode::read);
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == Code::not_found);
  CHECK(missing.status().message() == "open /nope/a: " + std::string(std::strerror(ENOENT)));
  REQUIRE(fs.mkdir("/d").ok());
  CHECK(fs.mkdir("/d").message() == "mkdir /d: " + std::string(std::strerror(EEXIST)));
  CHECK(fs.rmdir("/").code() == Code::io);
  CHECK(fs.unlink("/").code() == Code::io);
}

TEST_CASE("relative and absolute paths name the same file", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("a").ok());
  write_file(fs, "/a/f", bytes_of("x"), false, false);
  CHECK(fs.stat("a/f").ok());
  CHECK(fs.stat("./a/../a/f").ok());
  CHECK(fs.stat("/a//f").ok());
  auto names = fs.list_dir(".");
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"a"});
}

TEST_CASE("list_dir is sorted by bytes", "[sim_fs]") {
  SimFs fs;
  for (const char* n : {"b", "a10", "a2", "B", "_"}) write_file(fs, std::string("/") + n, {}, false, false);
  auto names = fs.list_dir("/");
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"B", "_", "a10", "a2", "b"});
}

TEST_CASE("a file may not grow past kMaxFileSize", "[sim_fs]") {
  SimFs fs;
  auto f = fs.open("/big", OpenMode::create_new);
  REQUIRE(f.ok());
  const char x = 'x';
  CHECK(fs.pwrite(*f, &x, 1, SimFs::kMaxFileSize).code() == Code::io);
  CHECK(fs.truncate(*f, SimFs::kMaxFileSize + 1).code() == Code::io);
  CHECK(fs.pwrite(*f, &x, 1, UINT64_MAX).code() == Code::io);
  auto size = fs.file_size(*f);
  REQUIRE(size.ok());
  CHECK(*size == 0);
}

TEST_CASE("operations are counted, failed ones included", "[sim_fs]") {
  SimFs fs;
  CHECK(fs.op_count() == 0);
  REQUIRE(fs.mkdir("/d").ok());
  CHECK(fs.mkdir("/d").code() == Code::conflict);
  CHECK(fs.stat("/d").ok());
  CHECK(fs.op_count() == 3);
  CHECK(fs.op_count(FsOp::mkdir) == 2);
  CHECK(fs.op_count(FsOp::stat) == 1);
  CHECK(fs.op_count(FsOp::pwrite) == 0);
}

// --- Locks ---------------------------------------------------------------------------------------

TEST_CASE("a lock is exclusive until closed, and a crash releases it", "[sim_fs]") {
  SimFs fs;
  auto held = fs.lock("/LOCK");
  REQUIRE(held.ok());
  auto second = fs.lock("/LOCK");
  REQUIRE(!second.ok());
  CHECK(second.status().code() == Code::conflict);
  REQUIRE(fs.sync_dir("/").ok());
  SimFs crashed = fs.durable_state();
  auto after_crash = crashed.lock("/LOCK");
  CHECK(after_crash.ok());
  REQUIRE(fs.close(*held).ok());
  CHECK(fs.lock("/LOCK").ok());
}

// --- The persistence model -------------------------------------------------------------------------

TEST_CASE("an unsynced write can be lost at a crash and a synced one is kept", "[sim_fs]") {
  SimFs fs;
  const auto a = ckpt_test::random_bytes(4096, 1), b = ckpt_test::random_bytes(4096, 2);
  auto f = fs.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.sync_dir("/").ok());
  REQUIRE(fs.pwrite(*f, a.data(), a.size(), 0).ok());
  REQUIRE(fs.sync(*f).ok());
  REQUIRE(fs.pwrite(*f, b.data(), b.size(), 4096).ok());
  CHECK(fs.unsynced_file_ops() == 1);
  CHECK(fs.unsynced_dir_ops() == 0);
  bool lost = false, kept = false;
  for (auto& s : all_states(fs)) {
    auto content = s.file_content("/f");
    REQUIRE(content.ok());
    REQUIRE(content->size() >= 4096);
    CHECK(std::equal(a.begin(), a.end(), content->begin()));  // synced: in every state
    lost = lost || content->size() == 4096;
    kept = kept || *content == [&] { auto all = a; all.insert(all.end(), b.begin(), b.end()); return all; }();
  }
  CHECK(lost);
  CHECK(kept);
  // After a sync nothing is left to choose.
  REQUIRE(fs.sync_data(*f).ok());
  CHECK(fs.crash_state_count() == 1);
}

TEST_CASE("fsync without sync_dir can lose a new file's name", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/d").ok());
  REQUIRE(fs.sync_dir("/").ok());
  const auto data = ckpt_test::random_bytes(1000, 3);
  write_file(fs, "/d/new", data, true, false);
  REQUIRE(fs.crash_state_count() == 2);
  std::set<bool> present;
  for (auto& s : all_states(fs)) {
    present.insert(exists(s, "/d/new"));
    if (exists(s, "/d/new")) CHECK(*s.file_content("/d/new") == data);  // its data was synced
  }
  CHECK(present == std::set<bool>{false, true});
  REQUIRE(fs.sync_dir("/d").ok());
  REQUIRE(fs.crash_state_count() == 1);
  SimFs s = fs.durable_state();
  CHECK(*s.file_content("/d/new") == data);
}

TEST_CASE("syncing a directory with nothing pending leaves other directories' pending names intact", "[sim_fs]") {
  // Two writers: one syncs a directory it did not change while the other's new name is still pending.
  SimFs fs;
  REQUIRE(fs.mkdir("/a").ok());
  REQUIRE(fs.mkdir("/b").ok());
  REQUIRE(fs.sync_dir("/").ok());
  write_file(fs, "/a/new", bytes_of("x"), true, false);
  REQUIRE(fs.sync_dir("/b").ok());
  REQUIRE(fs.crash_state_count() == 2);
  std::set<std::vector<std::string>> listings;
  for (auto& s : all_states(fs)) listings.insert(*s.list_dir("/a"));
  CHECK(listings == std::set<std::vector<std::string>>{{}, {"new"}});
  REQUIRE(fs.sync_dir("/a").ok());
  CHECK(*fs.durable_state().list_dir("/a") == std::vector<std::string>{"new"});
}

TEST_CASE("a new directory's contents vanish when its own name is lost", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/d").ok());
  write_file(fs, "/d/f", bytes_of("x"), true, false);
  // mkdir and the link of f are unsynced: the trees are {}, {d}, {d/f}; d/f without d is no tree.
  CHECK(fs.crash_state_count() == 3);
  REQUIRE(fs.sync_dir("/d").ok());  // f's name is durable inside d, but d's own name is not
  CHECK(fs.crash_state_count() == 2);
  std::set<bool> found;
  for (auto& s : all_states(fs)) {
    found.insert(exists(s, "/d/f"));
    CHECK(exists(s, "/d") == exists(s, "/d/f"));
  }
  CHECK(found == std::set<bool>{false, true});
}

TEST_CASE("a rename without sync_dir may revert, but is never half done", "[sim_fs]") {
  SimFs fs;
  const auto old_data = bytes_of("old checkpoint"), new_data = bytes_of("new checkpoint!");
  write_file(fs, "/ckpt", old_data, true, true);
  write_file(fs, "/ckpt.tmp", new_data, true, true);
  REQUIRE(fs.rename("/ckpt.tmp", "/ckpt").ok());
  REQUIRE(fs.crash_state_count() == 2);
  std::set<std::string> outcomes;
  for (auto& s : all_states(fs)) {
    const bool tmp = exists(s, "/ckpt.tmp");
    REQUIRE(exists(s, "/ckpt"));
    const auto at_name = *s.file_content("/ckpt");
    // Atomic: the new bytes are at exactly one of the two names.
    CHECK(tmp == (at_name == old_data));
    if (tmp) CHECK(*s.file_content("/ckpt.tmp") == new_data);
    outcomes.insert(tmp ? "reverted" : "renamed");
  }
  CHECK(outcomes == std::set<std::string>{"renamed", "reverted"});
}

TEST_CASE("a renamed file holds only what was synced", "[sim_fs]") {
  SimFs fs;
  const auto data = ckpt_test::random_bytes(2048, 4);
  write_file(fs, "/a.tmp", data, false, true);  // data never synced
  REQUIRE(fs.rename("/a.tmp", "/a").ok());
  REQUIRE(fs.sync_dir("/").ok());               // the name is durable, the data is not
  bool empty_at_name = false;
  for (auto& s : all_states(fs)) {
    REQUIRE(exists(s, "/a"));
    empty_at_name = empty_at_name || s.file_content("/a")->empty();
  }
  CHECK(empty_at_name);
}

TEST_CASE("a cross-directory rename is atomic and made durable by syncing either directory", "[sim_fs]") {
  for (const char* synced : {"/src", "/dst"}) {
    SimFs fs;
    REQUIRE(fs.mkdir("/src").ok());
    REQUIRE(fs.mkdir("/dst").ok());
    REQUIRE(fs.sync_dir("/").ok());
    write_file(fs, "/src/f", bytes_of("payload"), true, true);
    REQUIRE(fs.rename("/src/f", "/dst/f").ok());
    CHECK(fs.crash_state_count() == 2);
    for (auto& s : all_states(fs)) CHECK(exists(s, "/src/f") != exists(s, "/dst/f"));
    REQUIRE(fs.sync_dir(synced).ok());
    INFO("synced " << synced);
    CHECK(fs.crash_state_count() == 1);
    SimFs s = fs.durable_state();
    CHECK(!exists(s, "/src/f"));
    CHECK(exists(s, "/dst/f"));
  }
}

TEST_CASE("an unlinked file may come back until its directory is synced", "[sim_fs]") {
  SimFs fs;
  write_file(fs, "/victim", bytes_of("still here"), true, true);
  auto f = fs.open("/victim", OpenMode::read);
  REQUIRE(f.ok());
  REQUIRE(fs.unlink("/victim").ok());
  CHECK(!exists(fs, "/victim"));
  std::set<bool> present;
  for (auto& s : all_states(fs)) {
    present.insert(exists(s, "/victim"));
    if (exists(s, "/victim")) CHECK(*s.file_content("/victim") == bytes_of("still here"));
  }
  CHECK(present == std::set<bool>{false, true});
  REQUIRE(fs.sync_dir("/").ok());
  SimFs synced = *fs.crash_state(0);
  CHECK(!exists(synced, "/victim"));
  char buf[10];
  auto got = fs.pread(*f, buf, sizeof buf, 0);  // still readable through the open handle
  REQUIRE(got.ok());
  CHECK(*got == 10);
  REQUIRE(fs.close(*f).ok());
}

TEST_CASE("torn writes are cut at 512 B and 4 KiB boundaries of the file offset", "[sim_fs]") {
  SimFs fs;
  auto f = fs.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.sync_dir("/").ok());
  const auto data = ckpt_test::random_bytes(10000, 5);
  REQUIRE(fs.pwrite(*f, data.data(), data.size(), 100).ok());  // [100, 10100)
  CrashModel model;
  model.garble = false;
  // lost, kept, and cuts at the first and last 512 B (512, 9728) and 4 KiB (4096, 8192) boundaries.
  REQUIRE(fs.crash_state_count(model) == 6);
  std::set<std::uint64_t> sizes;
  for (auto& s : all_states(fs, model)) {
    const auto content = *s.file_content("/f");
    sizes.insert(content.size());
    if (content.empty()) continue;
    for (std::size_t i = 0; i < 100; ++i) CHECK(content[i] == 0);
    CHECK(std::equal(content.begin() + 100, content.end(), data.begin()));  // a prefix of the write
  }
  CHECK(sizes == std::set<std::uint64_t>{0, 512, 4096, 8192, 9728, 10100});
  // Sampling cuts at any boundary, still a multiple of 512.
  std::set<std::uint64_t> sampled;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    SimFs s = fs.sample_crash_state(seed, model);
    const auto size = s.file_content("/f")->size();
    if (size != 0 && size != 10100) {
      CHECK(size % 512 == 0);
      sampled.insert(size);
    }
  }
  CHECK(sampled.size() > 4);
  // A write inside one 512 B sector never tears.
  SimFs small;
  auto g = small.open("/g", OpenMode::create_new);
  REQUIRE(g.ok());
  REQUIRE(small.sync_dir("/").ok());
  REQUIRE(small.pwrite(*g, data.data(), 400, 512).ok());
  CHECK(small.crash_state_count(model) == 2);
}

TEST_CASE("a garbled write leaves garbage in its range and nothing else changed", "[sim_fs]") {
  SimFs fs;
  const auto base = ckpt_test::random_bytes(8192, 6), update = ckpt_test::random_bytes(1000, 7);
  write_file(fs, "/f", base, true, true);
  auto f = fs.open("/f", OpenMode::read_write);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, update.data(), update.size(), 3000).ok());
  CrashModel model;
  model.tear = false;
  REQUIRE(fs.crash_state_count(model) == 3);  // lost, kept, garbled
  int garbled = 0;
  for (auto& s : all_states(fs, model)) {
    const auto content = *s.file_content("/f");
    REQUIRE(content.size() == 8192);
    CHECK(std::equal(base.begin(), base.begin() + 3000, content.begin()));
    CHECK(std::equal(base.begin() + 4000, base.end(), content.begin() + 4000));
    const bool is_old = std::equal(base.begin() + 3000, base.begin() + 4000, content.begin() + 3000);
    const bool is_new = std::equal(update.begin(), update.end(), content.begin() + 3000);
    if (!is_old && !is_new) ++garbled;
  }
  CHECK(garbled == 1);
  // The garbage is the same every time the state is built.
  CHECK(fs.crash_state(2, model)->fingerprint() == fs.crash_state(2, model)->fingerprint());
}

TEST_CASE("an unsynced truncate is lost or kept", "[sim_fs]") {
  SimFs fs;
  write_file(fs, "/f", ckpt_test::random_bytes(5000, 8), true, true);
  auto f = fs.open("/f", OpenMode::read_write);
  REQUIRE(f.ok());
  REQUIRE(fs.truncate(*f, 1000).ok());
  std::set<std::size_t> sizes;
  for (auto& s : all_states(fs)) sizes.insert(s.file_content("/f")->size());
  CHECK(sizes == std::set<std::size_t>{1000, 5000});
}

TEST_CASE("the crash state count is exact and exhaustive enumeration yields distinct states", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/d").ok());
  write_file(fs, "/d/old", bytes_of("old"), true, true);
  REQUIRE(fs.sync_dir("/").ok());
  // Unsynced: link of /d/a, a 4 KiB-aligned 8 KiB write to it, a rename of old, a 100-byte write to old.
  auto a = fs.open("/d/a", OpenMode::create_new);
  REQUIRE(a.ok());
  const auto data = ckpt_test::random_bytes(8192, 9);
  REQUIRE(fs.pwrite(*a, data.data(), data.size(), 0).ok());
  auto old = fs.open("/d/old", OpenMode::read_write);
  REQUIRE(old.ok());
  REQUIRE(fs.pwrite(*old, data.data(), 100, 3).ok());
  REQUIRE(fs.rename("/d/old", "/d/renamed").ok());
  // Write to a: lost, kept, torn at 512, 4096, 7680, garbled = 6 choices; a is reachable only when
  // its link is kept. The write to old: lost, kept, garbled = 3 (no boundary inside), reachable always.
  // Trees: {a lost} x {rename lost, kept} = 2 trees without a, 2 with a: (2 + 2 * 6) * 3 = 42.
  REQUIRE(fs.crash_state_count() == 42);
  const auto states = all_states(fs);
  std::set<std::uint64_t> prints;
  for (const auto& s : states) prints.insert(s.fingerprint());
  CHECK(prints.size() == 42);
  CHECK(fs.crash_state(42).status().code() == Code::invalid_argument);
  // Index 0 is the durable state.
  CHECK(states[0].fingerprint() == fs.durable_state().fingerprint());
  CHECK(states[0].crash_note().find("kept") == std::string::npos);
}

TEST_CASE("enumeration over nested directory changes is exact and covers every sampled state", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/a").ok());
  REQUIRE(fs.mkdir("/a/b").ok());
  REQUIRE(fs.sync_dir("/").ok());
  REQUIRE(fs.sync_dir("/a").ok());
  write_file(fs, "/x", bytes_of("old x"), true, true);
  // Seven unsynced directory operations across four directories, three of them creating files
  // with one unsynced write each.
  write_file(fs, "/a/b/f", bytes_of("f data"), false, false);
  REQUIRE(fs.rename("/a/b/f", "/a/g").ok());
  REQUIRE(fs.unlink("/x").ok());
  write_file(fs, "/x", bytes_of("new x!"), false, false);
  REQUIRE(fs.mkdir("/c").ok());
  write_file(fs, "/c/h", bytes_of("h data"), false, false);
  REQUIRE(fs.rename("/a/b", "/c/b2").ok());
  REQUIRE(fs.unsynced_dir_ops() == 7);
  CrashModel model;
  model.tear = false;  // sampling then draws from the same choices as enumeration
  const std::uint64_t count = fs.crash_state_count(model);
  std::set<std::uint64_t> enumerated;
  for (const auto& s : all_states(fs, model)) enumerated.insert(s.fingerprint());
  CHECK(enumerated.size() == count);
  CHECK(count > 100);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const SimFs s = fs.sample_crash_state(seed, model);
    INFO("seed " << seed << "\n" << s.crash_note());
    CHECK(enumerated.count(s.fingerprint()) == 1);
  }
}

TEST_CASE("an unsynced file nobody can reach adds no crash states", "[sim_fs]") {
  SimFs fs;
  auto f = fs.open("/t", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.unlink("/t").ok());
  REQUIRE(fs.sync_dir("/").ok());
  const auto data = ckpt_test::random_bytes(8192, 10);
  REQUIRE(fs.pwrite(*f, data.data(), data.size(), 0).ok());  // to an inode with no name, durable or not
  CHECK(fs.crash_state_count() == 1);
}

TEST_CASE("many unsynced directory operations fall back to the full product", "[sim_fs]") {
  SimFs fs;
  for (int i = 0; i < 14; ++i) REQUIRE(fs.mkdir("/d" + std::to_string(i)).ok());
  CHECK(fs.crash_state_count() == (std::uint64_t{1} << 14));
  auto last = fs.crash_state((std::uint64_t{1} << 14) - 1);
  REQUIRE(last.ok());
  CHECK(last->list_dir("/")->size() == 14);
  // Counts saturate instead of wrapping.
  SimFs big;
  auto f = big.open("/f", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(big.sync_dir("/").ok());
  const auto page = ckpt_test::random_bytes(8192, 11);
  for (int i = 0; i < 40; ++i) REQUIRE(big.pwrite(*f, page.data(), page.size(), 8192u * i).ok());
  CHECK(big.crash_state_count() == UINT64_MAX);
  CHECK(big.crash_state(UINT64_MAX - 1).ok());
}

TEST_CASE("seeded sampling is deterministic", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/d").ok());
  REQUIRE(fs.sync_dir("/").ok());
  for (int i = 0; i < 6; ++i) {
    auto f = fs.open("/d/f" + std::to_string(i), OpenMode::create_new);
    REQUIRE(f.ok());
    const auto data = ckpt_test::random_bytes(20000, 20 + i);
    REQUIRE(fs.pwrite(*f, data.data(), data.size(), 0).ok());
    REQUIRE(fs.pwrite(*f, data.data(), 5000, 20000).ok());
  }
  std::set<std::uint64_t> prints;
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    const SimFs a = fs.sample_crash_state(seed), b = fs.sample_crash_state(seed);
    CHECK(a.fingerprint() == b.fingerprint());
    CHECK(a.crash_note() == b.crash_note());
    prints.insert(a.fingerprint());
  }
  CHECK(prints.size() > 25);
  // A snapshot has the same crash states as the original.
  const SimFs snapshot = fs;
  CHECK(snapshot.sample_crash_state(7).fingerprint() == fs.sample_crash_state(7).fingerprint());
}

TEST_CASE("a snapshot is independent of the original", "[sim_fs]") {
  SimFs fs;
  write_file(fs, "/f", bytes_of("original"), true, true);
  SimFs copy = fs;
  auto f = copy.open("/f", OpenMode::read_write);
  REQUIRE(f.ok());
  REQUIRE(copy.pwrite(*f, "CHANGED!", 8, 0).ok());
  REQUIRE(copy.unlink("/f").ok());
  CHECK(*fs.file_content("/f") == bytes_of("original"));
  CHECK(fs.crash_state_count() == 1);
  CHECK(copy.crash_state_count() > 1);
  SimFs moved = std::move(copy);
  CHECK(!exists(moved, "/f"));
  CHECK(exists(copy, "/"));  // the moved-from SimFs is empty but usable
}

TEST_CASE("the persistence hook runs after each barrier, or after every change when asked", "[sim_fs]") {
  for (const bool every : {false, true}) {
    SimFs fs;
    std::vector<std::string> points;
    fs.set_persistence_hook([&](const SimFs& at, const PersistencePoint& p) {
      points.push_back(std::string(fs_op_name(p.op)) + " " + p.path);
      CHECK(p.sequence == points.size());
      CHECK(at.crash_state_count() >= 1);  // const members work inside the hook
    }, every);
    REQUIRE(fs.mkdir("/d").ok());
    auto f = fs.open("/d/a", OpenMode::create_new);
    REQUIRE(f.ok());
    REQUIRE(fs.pwrite(*f, "x", 1, 0).ok());
    REQUIRE(fs.truncate(*f, 1).ok());
    REQUIRE(fs.sync(*f).ok());
    REQUIRE(fs.sync_data(*f).ok());
    REQUIRE(fs.close(*f).ok());
    REQUIRE(fs.rename("/d/a", "/d/b").ok());
    REQUIRE(fs.sync_dir("/d").ok());
    REQUIRE(fs.unlink("/d/b").ok());
    REQUIRE(fs.rmdir("/d").ok());
    CHECK(fs.mkdir("/d/x/y").code() == Code::not_found);  // failures are no persistence points
    const std::vector<std::string> barriers = {"sync /d/a", "sync_data /d/a", "rename /d/b", "sync_dir /d", "unlink /d/b", "rmdir /d"};
    const std::vector<std::string> all = {"mkdir /d", "open /d/a", "pwrite /d/a", "truncate /d/a", "sync /d/a", "sync_data /d/a",
                                          "rename /d/b", "sync_dir /d", "unlink /d/b", "rmdir /d"};
    CHECK(points == (every ? all : barriers));
  }
}

TEST_CASE("dump lists the tree, handles and every unsynced item", "[sim_fs]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/d").ok());
  auto f = fs.open("/d/a", OpenMode::create_new);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, "abc", 3, 0).ok());
  const std::string dump = fs.dump();
  CHECK(dump.find("/d/a") != std::string::npos);
  CHECK(dump.find("link /d/a") != std::string::npos);
  CHECK(dump.find("write /d/a [0, 3)") != std::string::npos);
  CHECK(dump.find("handle") != std::string::npos);
  const SimFs s = *fs.crash_state(fs.crash_state_count() - 1);
  CHECK(!s.crash_note().empty());
}

// --- A standalone ShardWriter save, crashed at every persistence point --------------------------------

namespace {

struct Payload {
  std::vector<unsigned char> w, b, e;
};

const Payload& payload() {
  static const Payload p{ckpt_test::random_bytes(6 * 1024 * 4, 31), ckpt_test::random_bytes(1000 * 4, 32),
                         ckpt_test::random_bytes(3 * 4096 + 100, 33)};
  return p;
}

template <class Fs>
Status save(Fs& fs, const std::string& path, WriterOptions o) {
  o.chunk_size_log2 = 12;
  o.buffer_size = 4096;  // small buffers: many writes, many persistence points
  o.uuid = Uuid{1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16};
  CKPT_ASSIGN_OR_RETURN(auto w, ShardWriter::create(fs, path, o));
  // Streamed in 1500-byte calls, so the 4 KiB buffer makes one write per flush.
  const auto stream = [&](const char* name, DType dtype, const Shape& shape, const std::vector<unsigned char>& bytes) {
    CKPT_TRY(w.begin_piece(name, dtype, shape, Shape(shape.size(), 0), shape));
    for (std::size_t at = 0; at < bytes.size(); at += 1500)
      CKPT_TRY(w.write(bytes.data() + at, std::min<std::size_t>(1500, bytes.size() - at)));
    return w.end_piece();
  };
  CKPT_TRY(stream("w", DType::F32, {6, 1024}, payload().w));
  CKPT_TRY(w.add_tensor("b", DType::F32, {1000}, payload().b.data(), payload().b.size()));
  CKPT_TRY(stream("e", DType::U8, {3 * 4096 + 100}, payload().e));
  CKPT_TRY(w.set_metadata("step", Value(std::int64_t{42})));
  auto summary = w.finish();
  return summary.ok() ? Status() : summary.status();
}

// What a reader finds at path: "absent", "intact", or why it is not.
std::string check_saved(SimFs& fs, const std::string& path) {
  return ckpt_test::check_saved(fs, path, {{"w", &payload().w}, {"b", &payload().b}, {"e", &payload().e}});
}

struct CrashTally {
  std::uint64_t points = 0, states = 0, enumerated_points = 0, absent = 0, intact = 0, bad = 0;
  std::string first_bad;
};

// Runs a save with a hook that checks crash states at every persistence point: all of them when
// there are at most `exhaustive_limit`, else `samples` seeded ones.
CrashTally crash_every_point(const WriterOptions& options, std::uint64_t exhaustive_limit, std::uint64_t samples) {
  SimFs fs;
  REQUIRE(fs.mkdir("/ckpt").ok());
  REQUIRE(fs.sync_dir("/").ok());
  CrashTally tally;
  const std::string path = "/ckpt/model.ckpt";
  auto check = [&](SimFs& state) {
    ++tally.states;
    const std::string verdict = check_saved(state, path);
    if (verdict == "absent") {
      ++tally.absent;
    } else if (verdict == "intact") {
      ++tally.intact;
    } else {
      if (tally.bad++ == 0) tally.first_bad = verdict + "\n" + state.crash_note();
    }
  };
  fs.set_persistence_hook([&](const SimFs& at, const PersistencePoint&) {
    ++tally.points;
    const std::uint64_t n = at.crash_state_count();
    if (n <= exhaustive_limit) {
      ++tally.enumerated_points;
      for (std::uint64_t i = 0; i < n; ++i) {
        auto state = at.crash_state(i);
        REQUIRE(state.ok());
        check(*state);
      }
    } else {
      for (std::uint64_t seed = 0; seed < samples; ++seed) {
        SimFs state = at.sample_crash_state(tally.points * 1000003 + seed);
        check(state);
      }
    }
  }, /*every_mutation=*/true);
  const Status saved = save(fs, path, options);
  REQUIRE(saved.ok());
  fs.set_persistence_hook(nullptr);
  // Once finish() returned, nothing is left to chance: every crash state holds the file.
  REQUIRE(fs.crash_state_count() == 1);
  SimFs after = fs.durable_state();
  CHECK(check_saved(after, path) == "intact");
  return tally;
}

}  // namespace

TEST_CASE("a standalone save crashed at every persistence point leaves no file or an intact one", "[sim_fs][shard_writer]") {
  const CrashTally t = crash_every_point(WriterOptions{}, 512, 128);
  INFO(t.first_bad);
  CHECK(t.bad == 0);
  CHECK(t.absent > 0);
  CHECK(t.intact > 0);  // between the rename and the directory sync, the file may already be there
  CHECK(t.points > 10);
  std::cout << "[sim_fs] standalone save: " << t.points << " persistence points (" << t.enumerated_points
            << " enumerated exhaustively), " << t.states << " crash states checked: " << t.absent << " absent, "
            << t.intact << " intact, " << t.bad << " bad\n";
}

TEST_CASE("verify_file reads a SimFs from several threads and finds a damaged chunk", "[sim_fs][verify]") {
  SimFs fs;
  REQUIRE(fs.mkdir("/ckpt").ok());
  REQUIRE(save(fs, "/ckpt/model.ckpt", WriterOptions{}).ok());
  VerifyOptions o;
  o.threads = 4;
  auto report = verify_file(fs, "/ckpt/model.ckpt", o);
  REQUIRE(report.ok());
  CHECK(report->ok());
  CHECK(report->chunks_checked == report->chunks_total);
  auto f = fs.open("/ckpt/model.ckpt", OpenMode::read_write);
  REQUIRE(f.ok());
  REQUIRE(fs.pwrite(*f, "\xFF", 1, 4096 + 5000).ok());  // inside the first tensor's second chunk
  REQUIRE(fs.close(*f).ok());
  report = verify_file(fs, "/ckpt/model.ckpt", o);
  REQUIRE(report.ok());
  REQUIRE(report->problems.size() == 1);
  CHECK(report->problems[0].tensor == "w");
  CHECK(report->problems[0].chunk == 1);
}

TEST_CASE("the crash check catches a save that skips fsync", "[sim_fs][shard_writer]") {
  // The control: without fsync the rename can reach disk before the data, and the check must see it.
  WriterOptions o;
  o.durable = false;
  SimFs fs;
  REQUIRE(fs.mkdir("/ckpt").ok());
  REQUIRE(fs.sync_dir("/").ok());
  REQUIRE(save(fs, "/ckpt/model.ckpt", o).ok());
  std::uint64_t bad = 0, checked = 0;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    SimFs state = fs.sample_crash_state(seed);
    ++checked;
    const std::string verdict = check_saved(state, "/ckpt/model.ckpt");
    if (verdict != "absent" && verdict != "intact") ++bad;
  }
  CHECK(bad > 0);
  std::cout << "[sim_fs] save without fsync: " << bad << " of " << checked << " sampled crash states hold a damaged file\n";
}
