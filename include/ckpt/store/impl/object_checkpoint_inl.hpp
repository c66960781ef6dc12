// ckpt: definitions of object/object_checkpoint.hpp.
#pragma once

#include "../object_checkpoint.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <memory>
#include <utility>

namespace ckpt::object {

CKPT_INLINE Result<Checkpoint> open_checkpoint(FsRef fs, const std::string& path, const StepSelector& selector,
                                             const ObjectOpener& open_objects) {
  if (!is_object_url(path)) return Checkpoint::open(fs, path, selector);
  StoreOptions o;
  o.open_objects = open_objects;
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Store> opened, open_store(path, Access::read_only, o));
  Store& store = *opened;
  std::optional<StepInfo> chosen;
  if (selector.step) {
    CKPT_ASSIGN_OR_RETURN(chosen, store.find(*selector.step));
  } else {
    chosen = store.latest();
    if (!chosen) return make_error(Code::not_found, store.path() + ": the store has no committed step");
  }
  CKPT_ASSIGN_OR_RETURN(StepReader reader, store.open_step(*chosen));
  const std::string name = store.path();
  return Result<Checkpoint>(Checkpoint::from_step(std::move(reader), *chosen, name, opened));
}

CKPT_INLINE Result<ReshardSummary> reshard_to_path(FsRef fs, Checkpoint& source, const std::string& destination,
                                                 const ReshardOptions& options, const ObjectOpener& open_objects) {
  if (!is_object_url(destination)) return reshard_to_store(fs, source, destination, options);
  if (!open_objects)
    return make_error(Code::unsupported, destination + ": this build has no object-store client (ckpt::s3: libcurl, pugixml)");
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ObjectClient> client, open_objects(destination));
  StoreOptions store_options = options.store;
  store_options.create_if_missing = true;
  return reshard_with(source, options, [&](ThreadComm& comm, std::uint64_t step) -> Result<std::unique_ptr<RankSave>> {
    CKPT_ASSIGN_OR_RETURN(auto store, Store::open(object_log(*client), Access::read_write, store_options, comm));
    CKPT_ASSIGN_OR_RETURN(auto tx, store->begin(step));
    return std::unique_ptr<RankSave>(std::make_unique<StoreRankSave>(std::move(store), std::move(tx)));
  });
}

}  // namespace ckpt::object
