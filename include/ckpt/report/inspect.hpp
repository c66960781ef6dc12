// ckpt: the description of whatever a path names (spec/REPORTS.md 4): a shard file's index, a step
// (training state, manifest, shards), a store's journal (or log objects, on s3://) and steps, a foreign checkpoint's own header,
// a memory tier's root; each with its root digest (spec/IDENTITY.md) where one is known. ckpt-inspect
// and the Python package both call inspect_path and present its document.
#pragma once

#include <optional>
#include <string>

#include "../io/fs.hpp"
#include "../io/object/client.hpp"
#include "../tiers/memory_root.hpp"
#include "json.hpp"
#include "steps.hpp"

namespace ckpt::report {

struct InspectOptions {
  StepSelection selection;  // for a store: list every step (all), or describe one
  bool chunks = false;      // also list every chunk of every shard
  std::string persistent;   // for a memory root: compare each step with this persistent store
  // Opens the client of an s3:// path (a store on objects, described as a store directory is); empty:
  // such a path is Code::unsupported (VerifyPathsOptions::open_objects).
  object::ObjectOpener open_objects;
};

struct Inspection {
  // What the document describes: "shard", "step", "store", "foreign" or "memory_root".
  std::string kind;
  json doc;  // what ckpt-inspect --json prints
  std::optional<tiers::MemoryRoot> memory_root;  // kind "memory_root": the description itself
  int exit_code = kOk;  // 1 when what was described is damaged (a store's journal, a step, a foreign header, a memory root)
};

// Fails only when nothing can be described: the path is missing, misused (a step of a non-store), or
// the checkpoint cannot be opened at all.
[[nodiscard]] Result<Inspection> inspect_path(FsRef fs, const std::string& path, const InspectOptions& options = {});

// The root digest an inspection shows (ckpt-inspect --pin): a store's is its latest step's, as a pin of
// a store applies to its latest step; a foreign checkpoint without a sidecar has none (an integrity error).
[[nodiscard]] Result<std::string> root_digest(const Inspection& inspection);

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/inspect_inl.hpp"
#endif
