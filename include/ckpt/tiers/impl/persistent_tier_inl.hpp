// ckpt: definitions for tiers/persistent_tier.hpp (spec/TIERS.md 4.4, 7.1).
#pragma once

#include "../persistent_tier.hpp"  // store.hpp brings detail::agree (impl/store_ranks_inl.hpp)

namespace ckpt::tiers {

namespace detail {

// The client an "s3://" persistent tier names, or why there is none: an empty opener is a build (or a
// caller) without an object-store client, said at once rather than as a missing directory "s3:".
[[nodiscard]] CKPT_INLINE Result<std::unique_ptr<object::ObjectClient>> open_persistent_client(const object::ObjectOpener& open_objects,
                                                                                              const std::string& url) {
  if (!open_objects)
    return make_error(Code::unsupported, url + ": the persistent tier is on object storage and no ObjectOpener was given "
                                               "(TierOptions::open_objects; a build with ckpt::s3 passes object::open_s3_url)");
  CKPT_ASSIGN_OR_RETURN(auto client, open_objects(url));
  if (!client) return make_error(Code::invalid_argument, url + ": the ObjectOpener returned no client");
  return client;
}

}  // namespace detail

// The commit log `where` names: the journal of a directory on fs, or the log of an object store.
[[nodiscard]] CKPT_INLINE Result<std::unique_ptr<CommitLog>> persistent_log(FsRef fs, const std::string& where,
                                                                          const object::ObjectOpener& open_objects) {
  if (!object::is_object_url(where)) return journal_log(fs, where);
  CKPT_ASSIGN_OR_RETURN(auto client, detail::open_persistent_client(open_objects, where));
  return object_log(std::move(client));
}

CKPT_INLINE Result<std::unique_ptr<PersistentTier>> PersistentTier::open_read(FsRef fs, const std::string& where,
                                                                           const object::ObjectOpener& open_objects, bool allow_damage) {
  std::unique_ptr<PersistentTier> tier(new PersistentTier());
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CommitLog> log, persistent_log(fs, where, open_objects));
  // A read-only open never writes; log objects that do not decode are reported, not fatal (spec/OBJECT.md 4.2).
  StoreOptions o;
  o.allow_corrupt_journal = allow_damage;
  CKPT_ASSIGN_OR_RETURN(tier->store_, Store::open(std::move(log), Access::read_only, o));
  return tier;
}

CKPT_INLINE Result<std::unique_ptr<PersistentTier>> PersistentTier::open_write(FsRef fs, const std::string& where,
                                                                            const object::ObjectOpener& open_objects,
                                                                            const PersistentWriteOptions& options, CommRef comm) {
  std::unique_ptr<PersistentTier> tier(new PersistentTier());
  // Each rank its own log (on object storage its own client and connections, spec/OBJECT.md 4.7); every
  // rank must have one before the collective open, or rank 0 would wait for a rank that is not coming.
  auto log = persistent_log(fs, where, open_objects);
  CKPT_TRY(wire::agree(comm, log.status()));
  StoreOptions o;
  o.create_if_missing = true;
  o.chunk_size_log2 = options.chunk_size_log2;
  o.retention.keep_last = options.keep;
  CKPT_ASSIGN_OR_RETURN(tier->store_, Store::open(std::move(*log), Access::read_write, o, comm));
  return tier;
}

CKPT_INLINE std::vector<Problem> PersistentTier::damage() const {
  const RecoveryReport& r = store_->recovery_report();
  std::vector<Problem> out = r.log_damage;  // each names its log object (Problem::file)
  if (r.corrupt()) {
    Problem p = ::ckpt::detail::step_problem(r.corruption_status(), on_objects() ? "log object" : "journal",
                                             join_path(store_->path(), std::string(journal::kJournalName)));
    if (!r.journal.corruption.empty()) {
      p.offset = r.journal.corruption.front().offset;
      p.length = r.journal.corruption.front().length;
    }
    out.push_back(std::move(p));
  }
  return out;
}

CKPT_INLINE Status PersistentTier::can_commit(std::uint64_t step) const {
  if (auto live = store_->find(step); live.ok())
    return make_error(Code::conflict, path() + ": step " + std::to_string(step) + " is committed there (txn " + std::to_string(live->txn) +
                                          "; a step number is live once, spec/JOURNAL.md 10)");
  return Status();
}

}  // namespace ckpt::tiers
