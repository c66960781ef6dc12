// ckpt: the verdict on a store on object storage (spec/REPORTS.md 3, spec/OBJECT.md 4): its log objects,
// then every committed step or the selected ones, each shard's chunks read by ranged GETs and checked.
// The same StoreOutcome, StepOutcome and FileOutcome as a directory's, so exit_code and verify_json
// judge and print it the same way.
#pragma once

#include "../object/object_store.hpp"
#include "verify.hpp"

namespace ckpt::report {

// Verifies an open object store and appends its outcomes to `into`. Fails only when the steps cannot
// be listed or selected (a missing --step); damage goes into the report.
[[nodiscard]] Status verify_object_store(object::ObjectStore& store, const VerifyPathsOptions& options, VerifyPathsReport& into);

}  // namespace ckpt::report

#if !CKPT_DECLARATIONS_ONLY
#include "impl/verify_objects_inl.hpp"
#endif
