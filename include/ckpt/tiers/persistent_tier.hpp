// ckpt: the persistent tier (spec/TIERS.md 4.4, 7.1, 10): a store directory, or a store on object
// storage named "s3://bucket/prefix" (spec/OBJECT.md), behind the few calls that promotion, resume and
// the memory-root tools make. One Store serves both (its commit log tells them apart): a step is written
// through its Transaction and read back through the Fs the store lives on (the job's, or the object
// store's ObjectFs), every chunk verified. The S3 client (libcurl) comes from the caller's ObjectOpener.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../dist/comm.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "../store/object_log.hpp"
#include "../store/step_reader.hpp"
#include "../store/store.hpp"

namespace ckpt::tiers {

// One save into the persistent tier.
using PersistentTransaction = std::unique_ptr<Transaction>;

struct PersistentWriteOptions {
  std::uint32_t chunk_size_log2 = format::kDefaultChunkSizeLog2;  // the memory tier's: content digests compare
  std::size_t keep = 0;                                           // steps kept (retention keep_last); 0: all
};

class PersistentTier {
 public:
  // Read-only, by this process alone (a resume's scan and fetches, the tools); writes nothing.
  // allow_damage: a store whose journal (or a log object) is damaged still opens; damage() reports it.
  // An "s3://" path with an empty open_objects is Code::unsupported.
  [[nodiscard]] static Result<std::unique_ptr<PersistentTier>> open_read(FsRef fs, const std::string& where,
                                                                         const object::ObjectOpener& open_objects,
                                                                         bool allow_damage = false);
  // Writable, collective over comm (every rank calls it; promotion): created when missing. On object
  // storage each rank opens its own client and rank 0 probes and lists (spec/OBJECT.md 4.6, 4.7).
  [[nodiscard]] static Result<std::unique_ptr<PersistentTier>> open_write(FsRef fs, const std::string& where,
                                                                          const object::ObjectOpener& open_objects,
                                                                          const PersistentWriteOptions& options, CommRef comm);
  PersistentTier(const PersistentTier&) = delete;
  PersistentTier& operator=(const PersistentTier&) = delete;
  ~PersistentTier() = default;

  [[nodiscard]] bool on_objects() const noexcept { return object::is_object_url(store_->path()); }
  // The directory or the URL: messages, and the PATH of SET_ASIDE records (spec/TIERS.md 5.2).
  [[nodiscard]] std::string path() const { return store_->path(); }
  // What its steps are read through: the job's Fs, or the object store's ObjectFs.
  [[nodiscard]] FsRef fs() { return store_->fs(); }
  // The store's path inside fs(): the directory, or "" (an object store's root).
  [[nodiscard]] std::string root() const { return store_->step_root(); }
  [[nodiscard]] const Uuid& uuid() const noexcept { return store_->uuid(); }
  [[nodiscard]] std::vector<StepInfo> steps() const { return store_->steps(); }
  [[nodiscard]] std::optional<StepInfo> latest() const { return store_->latest(); }
  [[nodiscard]] Result<StepInfo> find(std::uint64_t step) const { return store_->find(step); }
  [[nodiscard]] Result<StepReader> open_step(const StepInfo& info) { return store_->open_step(info); }
  // Damage found at open, each with the file it is in (Problem::file): a corrupt journal (region
  // "journal"), log objects that do not decode (region "log object").
  [[nodiscard]] std::vector<Problem> damage() const;
  // Whether `step` can still be committed: a step number is live at most once (spec/JOURNAL.md 10), so a
  // number the store holds is not promoted again. Every rank's answer is the same.
  [[nodiscard]] Status can_commit(std::uint64_t step) const;
  // Collective (the communicator of open_write).
  [[nodiscard]] Result<PersistentTransaction> begin(std::uint64_t step) { return store_->begin(step); }

 private:
  PersistentTier() = default;
  std::unique_ptr<Store> store_;
};

}  // namespace ckpt::tiers

#if !CKPT_DECLARATIONS_ONLY
#include "impl/persistent_tier_inl.hpp"
#endif
