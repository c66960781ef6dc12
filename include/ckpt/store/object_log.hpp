// ckpt: the commit log of a store on an object store (spec/OBJECT.md 4), without rename, append or
// overwrite:
//
//   ckpt-store                         the store's identity: a journal HEADER (uuid), created once
//   log/<step>.commit                  the commit point of a step, created with If-None-Match: *
//   log/<step>-<txn>.retire            the step left the store; its objects may be deleted
//   log/<step>-<txn>.abort             the transaction was abandoned before its commit was sent
//   step-<step>-<txn>/shard-*.ckpt     shard files, one per rank, uploaded and completed once
//   step-<step>-<txn>/MANIFEST         written by rank 0 after every shard is complete
//
// (<step> and <txn> are 20 decimal digits in log/ names, so keys sort by step.) Each log object is a
// tiny journal (spec/JOURNAL.md 3): a HEADER group naming the store, then one group of records.
// A step exists iff its commit object is valid and no retire object names its transaction. Two writers
// of one step race for one key: exactly one commit is created (412 for the other). A retired step's
// commit object stays until its number is saved again (spec/OBJECT.md 4.4). Data objects are
// deleted only for a transaction proven dead: an abort object, or a commit object naming another txn.
// Shards and manifests are read through ObjectFs by the same StepReader as a directory's, every chunk
// verified against its digest.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/config.hpp"
#include "../dist/wire.hpp"
#include "../io/object/client.hpp"
#include "../io/object/object_fs.hpp"
#include "commit_log.hpp"
#include "journal.hpp"
#include "step_reader.hpp"

namespace ckpt::object {

namespace layout {
inline constexpr std::string_view kIdentityKey = "ckpt-store";
inline constexpr std::string_view kLogPrefix = "log/";
inline constexpr std::string_view kProbePrefix = "probe/";
inline constexpr std::string_view kCommitSuffix = ".commit";
inline constexpr std::string_view kRetireSuffix = ".retire";
inline constexpr std::string_view kAbortSuffix = ".abort";
inline constexpr std::size_t kNumberDigits = 20;  // every u64 fits, and keys sort as numbers
// Decoder limit: a log object is two small groups; anything larger is refused unread (spec 4.2).
inline constexpr std::uint64_t kMaxLogObject = std::uint64_t{64} << 10;
}  // namespace layout

[[nodiscard]] std::string commit_key(std::uint64_t step);
[[nodiscard]] std::string retire_key(std::uint64_t step, std::uint64_t txn);
[[nodiscard]] std::string abort_key(std::uint64_t step, std::uint64_t txn);

// What listing log/ found (spec/OBJECT.md 4.3).
struct LogListing {
  std::vector<StepInfo> steps;               // committed, not retired, by step
  std::vector<StepInfo> retired;             // committed, then retired
  std::vector<std::pair<std::uint64_t, std::uint64_t>> aborted;  // (step, txn) with an abort object
  std::vector<Problem> problems;             // log objects that do not decode or do not belong: damage (file: the object)
  std::vector<std::string> unknown;          // keys under log/ no rule names: reported, never deleted
  std::vector<SaveRecord> saves;             // the SAVE_STATS of every commit object, by step (spec/JOURNAL.md 4.8)
};

// Decodes the log objects listed under log/ (key, bytes), as rank 0 read them; damage goes to problems.
[[nodiscard]] LogListing decode_log(const std::vector<std::pair<std::string, std::string>>& objects, const Uuid& store_uuid,
                                    const std::string& url_prefix);
// The transaction table a listing describes, as a Store holds it.
[[nodiscard]] RecoveryReport listing_report(const LogListing& listing, const Uuid& store_uuid, const std::string& url);

}  // namespace ckpt::object

namespace ckpt {

// The commit log of a store on object storage (spec/OBJECT.md 4).
class ObjectLog final : public CommitLog {
 public:
  explicit ObjectLog(object::ObjectClient& client);
  explicit ObjectLog(std::unique_ptr<object::ObjectClient> client);
  ObjectLog(const ObjectLog&) = delete;
  ObjectLog& operator=(const ObjectLog&) = delete;

  [[nodiscard]] const std::string& location() const noexcept override { return url_; }
  [[nodiscard]] FsRef fs() noexcept override { return FsRef(*fs_); }
  void configure(const StoreOptions& options) override { fs_.emplace(client_, options.io); }
  [[nodiscard]] const std::string& step_root() const noexcept override { return root_; }
  [[nodiscard]] bool exclusive() const noexcept override { return false; }
  [[nodiscard]] Result<RecoveryReport> open_writer(const StoreOptions& options) override;
  [[nodiscard]] Result<std::string> read(const StoreOptions& options) override;
  [[nodiscard]] Result<RecoveryReport> decode(const std::string& bytes, const StoreOptions& options) override;
  [[nodiscard]] Status failure() const override { return Status(); }
  [[nodiscard]] std::uint64_t new_txn(std::uint64_t next) override;
  [[nodiscard]] Status begin(TxnInfo& t, const std::vector<TxnInfo>& table) override;
  [[nodiscard]] Status write_manifest(const TxnInfo& t, const std::string& bytes) override;
  [[nodiscard]] Status commit(TxnInfo& t, const CommitRecord& c, const SaveRecord& stats, CommitDoubt& doubt) override;
  [[nodiscard]] Status abort(TxnInfo& t, AbortReason reason) override;
  [[nodiscard]] Status retire(const std::vector<TxnInfo*>& txns) override;
  [[nodiscard]] Status set_aside(TxnInfo& t) override;
  [[nodiscard]] Status maintain(std::vector<TxnInfo>&, std::uint64_t, bool) override { return Status(); }
  [[nodiscard]] Result<GarbageReport> collect_garbage(const std::vector<TxnInfo>& table, bool dry_run) override;

  [[nodiscard]] object::ObjectClient& client() noexcept { return client_; }
  // What the last listing found (spec/OBJECT.md 4.3).
  [[nodiscard]] const object::LogListing& listing() const noexcept { return listing_; }

 private:
  [[nodiscard]] Status probe();
  [[nodiscard]] Status load_identity(bool create);
  [[nodiscard]] std::string log_object(const std::vector<PendingRecord>& records) const;
  [[nodiscard]] Status remove_prefix(const std::string& prefix, GarbageReport* report);

  std::unique_ptr<object::ObjectClient> owned_;
  object::ObjectClient& client_;
  std::optional<object::ObjectFs> fs_;
  std::string url_;
  std::string root_;  // step directories are keys at the client's root
  Uuid uuid_{};
  object::LogListing listing_;
};

// The commit log at the root of an object store, read and written through `client` (spec/OBJECT.md 4),
// which must outlive it; or through a client it owns. Its uploads take StoreOptions::io.
[[nodiscard]] std::unique_ptr<CommitLog> object_log(object::ObjectClient& client);
[[nodiscard]] std::unique_ptr<CommitLog> object_log(std::unique_ptr<object::ObjectClient> client);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/object_log_inl.hpp"
#endif
