// ckpt: the checkpoint readers and writers of sharded.hpp on a store on objects (spec/OBJECT.md 7): a step of
// an "s3://bucket/prefix" store read as a Checkpoint (convert, merge, reshard and diff take it as a source),
// and reshard writing its new step through the object store's multi-rank transaction. Paths that are not
// s3:// URLs go to the directory code unchanged, so a tool calls one function whatever it was given.
#pragma once

#include <string>

#include "sharded.hpp"
#include "../io/object/client.hpp"
#include "open_store.hpp"
#include "store.hpp"

namespace ckpt::object {

// What Checkpoint::open reads, and also a committed step of a store on objects: its latest, or selector.step.
// The store is opened read-only (nothing is written) and stays open, with its client, as long as the
// Checkpoint. An s3:// URL with an empty open_objects is Code::unsupported.
[[nodiscard]] Result<Checkpoint> open_checkpoint(FsRef fs, const std::string& path, const StepSelector& selector,
                                                 const ObjectOpener& open_objects);

// reshard_to_store, and for an s3:// destination the step written by M ranks each with its own Store over
// the object log of one client, committed once by rank 0 (spec/OBJECT.md 4.4, 4.7): whole or not at all.
// options.store's layout (chunk size, alignment, buffer) applies to either.
[[nodiscard]] Result<ReshardSummary> reshard_to_path(FsRef fs, Checkpoint& source, const std::string& destination,
                                                     const ReshardOptions& options, const ObjectOpener& open_objects);

}  // namespace ckpt::object

#if !CKPT_DECLARATIONS_ONLY
#include "impl/object_checkpoint_inl.hpp"
#endif
