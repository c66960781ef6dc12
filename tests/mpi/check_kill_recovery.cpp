// Runs after test_mpi_kill (one process, no MPI): the store a 4-rank save left when rank 2 was killed
// mid-shard. A read-only look first (what the crash left), then a writable open, whose recovery must
// keep step 1 as the latest step, bit for bit, abort the transaction of step 2 and remove exactly the
// files its BEGIN named (and their directory), and nothing else (spec/SHARDING.md 8, spec/JOURNAL.md 6.4).
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <ckpt/store/store.hpp>

#include "../sharded_fixture.hpp"

using namespace ckpt;
namespace fsys = std::filesystem;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "check_kill_recovery: FAILED: %s\n", what.c_str());
}

// Every entry below dir, with the size of each file: what "nothing else changed" compares.
std::map<std::string, std::uintmax_t> tree(const std::string& dir) {
  std::map<std::string, std::uintmax_t> out;
  for (const auto& e : fsys::recursive_directory_iterator(dir))
    out[fsys::relative(e.path(), dir).string()] = e.is_regular_file() ? e.file_size() : 0;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s STORE\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  check(fsys::exists(path + ".marker"), "the kill run reached the kill point (" + path + ".marker)");
  PosixFs fs;

  // What the crash left: step 1 committed, step 2 open with the shards that reached the disk.
  auto before = check_store(fs, path);
  check(before.ok(), "check_store: " + before.status().to_string());
  if (!before.ok()) return 1;
  check(before->transactions.size() == 2, "two transactions in the journal");
  if (before->transactions.size() != 2) return 1;
  const TxnInfo step1 = before->transactions[0], step2 = before->transactions[1];
  check(step1.state == TxnState::committed && step1.step == 1 && step1.world_size == 4, "step 1 committed by 4 ranks");
  check(step2.state == TxnState::open && step2.step == 2 && step2.world_size == 4 && step2.files.size() == 4,
        "step 2 open, naming the 4 shards");
  const std::string dir2 = path + "/" + step2.dir();
  check(fsys::is_directory(dir2), "step 2's directory exists after the crash");
  std::set<std::string> named;
  for (const auto& f : step2.files) named.insert(f.name);
  std::size_t present = 0;
  if (fsys::is_directory(dir2))
    for (const auto& e : fsys::directory_iterator(dir2)) {
      check(named.count(e.path().filename().string()) != 0, "only named files in step 2's directory: " + e.path().string());
      ++present;
    }
  check(present >= 1, "at least one shard of step 2 reached the disk");
  auto whole = tree(path);
  std::map<std::string, std::uintmax_t> expected_after;
  for (const auto& [name, size] : whole)
    if (name.rfind(step2.dir(), 0) != 0 && name != "JOURNAL") expected_after[name] = size;

  // The writable open recovers.
  {
    auto store = Store::open(fs, path, Access::read_write);
    check(store.ok(), "writable open: " + store.status().to_string());
    if (!store.ok()) return 1;
    const RecoveryReport& report = (*store)->recovery_report();
    std::size_t removed_files = 0, removed_dirs = 0, aborts = 0;
    for (const auto& a : report.actions) {
      check(a.done, "recovery action done: " + a.describe());
      if (a.kind == RecoveryActionKind::append_abort) check(a.txn == step2.txn, "ABORT for step 2's txn only"), ++aborts;
      if (a.kind == RecoveryActionKind::remove_file) {
        check(a.txn == step2.txn && a.path.rfind(dir2 + "/", 0) == 0, "removes only step 2's files: " + a.path);
        ++removed_files;
      }
      if (a.kind == RecoveryActionKind::remove_dir) check(a.path == dir2, "removes only step 2's directory"), ++removed_dirs;
    }
    check(aborts == 1 && removed_files == present && removed_dirs == 1, "abort step 2, remove its " + std::to_string(present) +
                                                                           " files and its directory");
    check(report.unknown_entries == std::vector<std::string>{"README"}, "the user's README is reported, not removed");
    const auto latest = (*store)->latest();
    check(latest && latest->step == 1 && latest->txn == step1.txn, "step 1 is the latest step");
    const auto& txns = (*store)->transactions();
    check(txns.size() == 2 && txns[1].state == TxnState::aborted && txns[1].abort_reason == AbortReason::recovery,
          "step 2 aborted by recovery");
    auto reader = (*store)->open_latest();
    check(reader.ok(), "open step 1: " + reader.status().to_string());
    if (reader.ok())
      for (const auto& t : sharded_fixture::specs()) {
        const auto want = sharded_fixture::global_bytes(t, 1);
        std::vector<unsigned char> got(want.size());
        const Status s = reader->read_tensor(t.name, got.data(), got.size());
        check(s.ok() && got == want, "step 1 tensor '" + t.name + "' bit for bit: " + s.to_string());
      }
    auto verified = (*store)->verify_step(1);
    check(verified.ok() && verified->ok(), "step 1 verifies");
  }
  check(!fsys::exists(dir2), "step 2's directory is gone");
  auto after = tree(path);
  // The journal was written anew (spec/JOURNAL.md 6.4): clean, with step 1 committed and txn 2 aborted.
  {
    auto rescan = scan_journal(fs, path + "/JOURNAL");
    check(rescan.ok() && !rescan->corrupt() && !rescan->torn_tail && rescan->end == rescan->file_size,
          "the rewritten journal scans clean");
  }
  after.erase("JOURNAL");
  check(after == expected_after, "nothing but step 2's files changed in the store");

  // Recovery is done: a second writable open finds nothing to do.
  auto again = Store::open(fs, path, Access::read_write);
  check(again.ok() && (*again)->recovery_report().clean(), "recovery is idempotent");
  if (failures == 0) std::printf("check_kill_recovery: passed (%zu shard files of step 2 removed)\n", present);
  return failures == 0 ? 0 : 1;
}
