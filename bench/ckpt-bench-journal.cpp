// ckpt-bench-journal: how big the journal of a long run on many ranks gets and how long opening it
// takes (spec/JOURNAL.md 4.9, 5.7). It drives the coordinator's journal exactly as Store does for W
// ranks saving N times with keep-last K: BEGIN_SHARDS, COMMIT + SAVE_STATS, RETIRE, each its own
// fdatasynced group, and the same compaction rule and rewrite (journal::compaction_due,
// detail::rewrite_journal). No shard files are written: the journal is what every rank reads at open.
// Then it times a read-only Store::open of the result (the scan and transaction table every rank
// builds), best of --repeat.
//
// Exit status: 0 done, 2 usage or I/O error.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ckpt/store/store.hpp>

#include "cli.hpp"

namespace {
constexpr const char* kTool = "ckpt-bench-journal";
}  // namespace

// Reports a failed step of the run and exits 2.
#define CKPT_TRY_EXIT(expr)                                          \
  do {                                                               \
    const ckpt::Status ckpt_try_exit_ = (expr);                      \
    if (!ckpt_try_exit_.ok()) return ckpt::cli::report(kTool, ckpt_try_exit_); \
  } while (0)

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Measures the journal of W ranks x N saves with keep-last K: its size on disk and the time a
read-only open takes. The journal lives in DIR (default /dev/shm, where fdatasync costs nothing,
so the run measures the journal, not the disk).

Exit status: 0 done, 2 usage or I/O error.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) -> int {
    std::uint32_t ranks = 10000;
    std::uint64_t saves = 10000, keep = 3;
    unsigned repeat = 5;
    std::string dir = "/dev/shm";
    bool as_json = false;
    app.add_option("--ranks", ranks, "world size W")->check(CLI::Range(1u, ckpt::journal::kMaxWorldSize));
    app.add_option("--saves", saves, "saves N")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
    app.add_option("--keep", keep, "keep-last K")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
    app.add_option("--repeat", repeat, "opens to time, best reported")->check(CLI::Range(1u, 1000u));
    app.add_option("--dir", dir, "directory for the scratch store");
    app.add_flag("--json", as_json, "print one JSON object");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::PosixFs fs;
    const std::string store = ckpt::join_path(dir, "ckpt-bench-journal-" + ckpt::uuid_string(ckpt::random_uuid()));
    const std::string path = ckpt::join_path(store, std::string(ckpt::journal::kJournalName));
    CKPT_TRY_EXIT(fs.mkdir(store));
    ckpt::JournalHeader header;
    header.store_uuid = ckpt::random_uuid();
    CKPT_TRY_EXIT(ckpt::JournalWriter::create(fs, path, header));
    auto opened = ckpt::JournalWriter::open(fs, path, ckpt::journal::kPageSize);
    if (!opened.ok()) return ckpt::cli::report(kTool, opened.status());
    ckpt::JournalWriter journal = std::move(opened).value();

    std::vector<ckpt::TxnInfo> txns;
    std::uint64_t next_txn = 1, compacted_end = journal.end(), rewrites = 0, max_size = journal.end();
    const auto started = std::chrono::steady_clock::now();
    for (std::uint64_t n = 0; n < saves; ++n) {
      ckpt::TxnInfo t;
      t.txn = next_txn++;
      t.step = (n + 1) * 100;
      t.world_size = ranks;
      ckpt::BeginRecord b{t.txn, t.step, ranks, ckpt::standard_shard_files(ranks)};
      auto begin = ckpt::begin_record(b);
      if (!begin.ok()) return ckpt::cli::report(kTool, begin.status());
      CKPT_TRY_EXIT(journal.append_group({*begin}));
      t.files = std::move(b.files);
      t.begin_offset = journal.last_offsets().front();
      t.commit = ckpt::CommitRecord{t.txn, t.step, 4096, t.txn * 0x9E3779B97F4A7C15ULL};
      t.save = ckpt::SaveRecord{t.txn, t.step, std::uint64_t{ranks} << 30, 1000, 2000000, true};
      CKPT_TRY_EXIT(journal.append_group({ckpt::commit_record(t.commit), ckpt::save_stats_record(*t.save)}));
      t.state = ckpt::TxnState::committed;
      t.end_offset = journal.last_offsets().front();
      t.dir_present = false;  // no files: retention has nothing to remove
      txns.push_back(std::move(t));
      // Retention: keep the last K committed steps.
      std::vector<ckpt::PendingRecord> retire;
      std::size_t live = 0;
      for (auto it = txns.rbegin(); it != txns.rend(); ++it) {
        if (it->state != ckpt::TxnState::committed) continue;
        if (++live > keep) {
          retire.push_back(ckpt::retire_record(ckpt::RetireRecord{it->txn, it->step}));
          it->state = ckpt::TxnState::retired;
        }
      }
      if (!retire.empty()) CKPT_TRY_EXIT(journal.append_group(retire));
      max_size = std::max(max_size, journal.end());
      if (ckpt::journal::compaction_due(journal.end(), compacted_end)) {
        CKPT_TRY_EXIT(ckpt::detail::rewrite_journal(fs, journal, header.store_uuid, next_txn, txns));
        compacted_end = journal.end();
        ++rewrites;
      }
    }
    const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const std::uint64_t final_size = journal.end();

    double best_ms = 1e300;
    std::size_t live_steps = 0;
    for (unsigned r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto ro = ckpt::Store::open(fs, store, ckpt::Access::read_only);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!ro.ok()) return ckpt::cli::report(kTool, ro.status());
      live_steps = (*ro)->steps().size();
      best_ms = std::min(best_ms, ms);
    }
    // What version 1 would have written per save: every shard name in every BEGIN, and no compaction.
    const std::uint64_t v1_begin = ckpt::journal::kFrameOverhead + ckpt::journal::kBeginFixedSize +
                                   std::uint64_t{ranks} * (ckpt::journal::kBeginFileFixedSize + ckpt::shard_file_name(0, ranks).size());
    const std::uint64_t v1_per_save = ckpt::align_up(v1_begin, ckpt::journal::kPageSize) + 2 * ckpt::journal::kPageSize;

    (void)fs.unlink(path).ok();
    (void)fs.unlink(ckpt::join_path(store, std::string(ckpt::journal::kLockName))).ok();
    (void)fs.rmdir(store).ok();
    if (as_json) {
      std::printf("{\"ranks\": %u, \"saves\": %llu, \"keep\": %llu, \"journal_bytes\": %llu, \"journal_max_bytes\": %llu, "
                  "\"rewrites\": %llu, \"live_steps\": %zu, \"open_ms\": %.3f, \"run_s\": %.3f, \"v1_bytes_estimate\": %llu}\n",
                  ranks, static_cast<unsigned long long>(saves), static_cast<unsigned long long>(keep),
                  static_cast<unsigned long long>(final_size), static_cast<unsigned long long>(max_size),
                  static_cast<unsigned long long>(rewrites), live_steps, best_ms, run_s,
                  static_cast<unsigned long long>(v1_per_save * saves));
    } else {
      std::printf("%u ranks x %llu saves, keep-last %llu, journal in %s\n", ranks, static_cast<unsigned long long>(saves),
                  static_cast<unsigned long long>(keep), dir.c_str());
      std::printf("  journal at the end     %llu bytes (largest between rewrites %llu; %llu rewrites)\n",
                  static_cast<unsigned long long>(final_size), static_cast<unsigned long long>(max_size),
                  static_cast<unsigned long long>(rewrites));
      std::printf("  read-only open         %.3f ms (best of %u), %zu live steps\n", best_ms, repeat, live_steps);
      std::printf("  version 1 would hold   %llu bytes (every name in every BEGIN, no compaction)\n",
                  static_cast<unsigned long long>(v1_per_save * saves));
      std::printf("  run                    %.1f s\n", run_s);
    }
    return static_cast<int>(ckpt::cli::kOk);
  });
}
