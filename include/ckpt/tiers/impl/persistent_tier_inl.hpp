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

CKPT_INLINE Result<std::unique_ptr<PersistentTier>> PersistentTier::open_read(FsRef fs, const std::string& where,
                                                                           const object::ObjectOpener& open_objects, bool allow_damage) {
  std::unique_ptr<PersistentTier> tier(new PersistentTier());
  if (object::is_object_url(where)) {
    // A read-only open never writes; log objects that do not decode are reported, not fatal (spec/OBJECT.md 4.2).
    CKPT_ASSIGN_OR_RETURN(tier->client_, detail::open_persistent_client(open_objects, where));
    CKPT_ASSIGN_OR_RETURN(tier->objects_, object::ObjectStore::open(*tier->client_, Access::read_only));
    return tier;
  }
  StoreOptions o;
  o.allow_corrupt_journal = allow_damage;
  CKPT_ASSIGN_OR_RETURN(tier->store_, Store::open(fs, where, Access::read_only, o));
  return tier;
}

CKPT_INLINE Result<std::unique_ptr<PersistentTier>> PersistentTier::open_write(FsRef fs, const std::string& where,
                                                                            const object::ObjectOpener& open_objects,
                                                                            const PersistentWriteOptions& options, CommRef comm) {
  std::unique_ptr<PersistentTier> tier(new PersistentTier());
  if (object::is_object_url(where)) {
    // Each rank its own client (its own connections, spec/OBJECT.md 4.7); every rank must have one before
    // the collective open, or rank 0 would wait for a rank that is not coming.
    auto client = detail::open_persistent_client(open_objects, where);
    CKPT_TRY(wire::agree(comm, client.status()));
    tier->client_ = std::move(*client);
    object::ObjectStoreOptions o;
    o.create_if_missing = true;
    o.chunk_size_log2 = options.chunk_size_log2;
    o.retention.keep_last = options.keep;
    CKPT_ASSIGN_OR_RETURN(tier->objects_, object::ObjectStore::open(*tier->client_, Access::read_write, o, comm));
    return tier;
  }
  StoreOptions o;
  o.create_if_missing = true;
  o.chunk_size_log2 = options.chunk_size_log2;
  o.retention.keep_last = options.keep;
  CKPT_ASSIGN_OR_RETURN(tier->store_, Store::open(fs, where, Access::read_write, o, comm));
  return tier;
}

CKPT_INLINE std::string PersistentTier::path() const { return objects_ ? objects_->url() : store_->path(); }

CKPT_INLINE FsRef PersistentTier::fs() { return objects_ ? objects_->fs() : store_->fs(); }

CKPT_INLINE std::string PersistentTier::root() const { return objects_ ? std::string() : store_->path(); }

CKPT_INLINE const Uuid& PersistentTier::uuid() const noexcept { return objects_ ? objects_->uuid() : store_->uuid(); }

CKPT_INLINE std::vector<StepInfo> PersistentTier::steps() const { return objects_ ? objects_->steps() : store_->steps(); }

CKPT_INLINE std::optional<StepInfo> PersistentTier::latest() const { return objects_ ? objects_->latest() : store_->latest(); }

CKPT_INLINE Result<StepInfo> PersistentTier::find(std::uint64_t step) const { return objects_ ? objects_->find(step) : store_->find(step); }

CKPT_INLINE Result<StepReader> PersistentTier::open_step(const StepInfo& info) {
  return objects_ ? objects_->open_step(info) : store_->open_step(info);
}

CKPT_INLINE std::vector<std::pair<Status, std::string>> PersistentTier::damage() const {
  std::vector<std::pair<Status, std::string>> out;
  if (objects_) {
    for (const auto& p : objects_->log().problems)
      out.emplace_back(make_error(Code::corrupt, p), objects_->client().url(std::string(object::layout::kLogPrefix)));
  } else if (store_->recovery_report().corrupt()) {
    out.emplace_back(store_->recovery_report().corruption_status(), join_path(store_->path(), std::string(journal::kJournalName)));
  }
  return out;
}

CKPT_INLINE Status PersistentTier::can_commit(std::uint64_t step) const {
  if (!objects_) return Status();
  const auto last = objects_->latest();
  if (last && step <= last->step)
    return make_error(Code::conflict, objects_->url() + ": step " + std::to_string(step) + " is not above the latest committed step " +
                                          std::to_string(last->step) + " (a step number is committed once, spec/OBJECT.md 4.4)");
  return Status();
}

CKPT_INLINE Result<PersistentTransaction> PersistentTier::begin(std::uint64_t step) {
  if (objects_) {
    CKPT_ASSIGN_OR_RETURN(auto tx, objects_->begin(step));
    return PersistentTransaction(std::move(tx));
  }
  CKPT_ASSIGN_OR_RETURN(auto tx, store_->begin(step));
  return PersistentTransaction(std::move(tx));
}

}  // namespace ckpt::tiers
