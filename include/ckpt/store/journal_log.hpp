// ckpt: the commit log of a directory store (spec/JOURNAL.md): the JOURNAL file, appended in fsynced
// groups by the one writer that holds LOCK, recovered at every writable open, compacted as it grows.
//
//   STORE/JOURNAL                   write-ahead log: BEGIN, COMMIT, ABORT, RETIRE records
//   STORE/LOCK                      held (Fs::lock) by the one writer
//   STORE/step-<step>-<txn>/        shard files + MANIFEST of one transaction
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "commit_log.hpp"
#include "journal.hpp"
#include "step_reader.hpp"

namespace ckpt {

class JournalLog final : public CommitLog {
 public:
  JournalLog(FsRef fs, std::string path);
  JournalLog(const JournalLog&) = delete;
  JournalLog& operator=(const JournalLog&) = delete;
  ~JournalLog() override;  // releases the LOCK

  [[nodiscard]] const std::string& location() const noexcept override { return path_; }
  [[nodiscard]] FsRef fs() noexcept override { return fs_; }
  [[nodiscard]] const std::string& step_root() const noexcept override { return path_; }
  [[nodiscard]] bool exclusive() const noexcept override { return true; }
  [[nodiscard]] Result<RecoveryReport> open_writer(const StoreOptions& options) override;
  [[nodiscard]] Result<std::string> read(const StoreOptions& options) override;
  [[nodiscard]] Result<RecoveryReport> decode(const std::string& bytes, const StoreOptions& options) override;
  [[nodiscard]] Status failure() const override;
  [[nodiscard]] std::uint64_t new_txn(std::uint64_t next) override { return next; }
  [[nodiscard]] Status begin(TxnInfo& t, const std::vector<TxnInfo>& table) override;
  [[nodiscard]] Status write_manifest(const TxnInfo& t, const std::string& bytes) override;
  [[nodiscard]] Status commit(TxnInfo& t, const CommitRecord& c, const SaveRecord& stats, CommitDoubt& doubt) override;
  [[nodiscard]] Status abort(TxnInfo& t, AbortReason reason) override;
  [[nodiscard]] Status retire(const std::vector<TxnInfo*>& txns) override;
  [[nodiscard]] Status set_aside(TxnInfo& t) override;
  [[nodiscard]] Status maintain(std::vector<TxnInfo>& table, std::uint64_t next_txn, bool force) override;
  [[nodiscard]] Result<GarbageReport> collect_garbage(const std::vector<TxnInfo>& table, bool dry_run) override;

 private:
  // Removes the files of an aborted or retired transaction that exist; errors are collected, not fatal.
  [[nodiscard]] Status remove_files(TxnInfo& t);
  // reuse_files: moves a retired step's shard files into slots/ (spec 10.1); what stays is removed after.
  void keep_slots(const TxnInfo& t);

  FsRef fs_;
  std::string path_;
  std::optional<JournalWriter> journal_;  // the writer's, once open_writer succeeded
  FileHandle lock_;
  std::uint64_t compacted_end_ = 0;  // journal size after its last rewrite
  bool reuse_files_ = false;         // StoreOptions::reuse_files, from open_writer
  Uuid uuid_{};
};

// The commit log of a directory store: the JOURNAL at `path` on `fs` (spec/JOURNAL.md).
[[nodiscard]] std::unique_ptr<CommitLog> journal_log(FsRef fs, std::string path);

namespace detail {
// Rewrites the journal from the transaction table (spec/JOURNAL.md 5.7) and reopens the writer on the
// new file (compaction's step; ckpt-bench-journal drives it directly).
[[nodiscard]] Status rewrite_journal(FsRef fs, JournalWriter& journal, const Uuid& uuid, std::uint64_t next_txn,
                                     std::vector<TxnInfo>& txns);
}  // namespace detail

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/recovery_inl.hpp"
#include "impl/journal_log_inl.hpp"
#endif
