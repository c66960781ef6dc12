// ckpt: definitions of report/verify_objects.hpp.
#pragma once

#include <utility>

#include "../verify_objects.hpp"

namespace ckpt::report {

CKPT_INLINE Status verify_object_store(object::ObjectStore& store, const VerifyPathsOptions& options, VerifyPathsReport& into) {
  StoreOutcome out;
  out.path = store.url();
  // A log object that does not decode is damage to durable data (spec/OBJECT.md 4.2).
  for (const auto& p : store.log().problems) out.problems.push_back(make_error(Code::corrupt, p));
  for (const auto& key : store.log().unknown)
    out.notes.push_back("unknown object '" + key + "' under log/: no rule of spec/OBJECT.md 4.2 names it (left alone)");
  CKPT_ASSIGN_OR_RETURN(auto selected, select_steps(store, options.selection));
  FsRef fs = store.fs();
  for (const auto& info : selected) {
    StepOutcome step;
    step.info = info;
    step.dir = store.url() + info.dir;
    step.label = "step " + std::to_string(info.step) + " (txn " + std::to_string(info.txn) + ", " + step.dir + ")";
    const std::size_t first = into.files.size();
    detail::take_step_report(step, verify_step(fs, "", info, store.uuid(), detail::recording_verifier(fs, options, into.files)),
                             first, into.files);
    detail::finish_step(step, into.files);
    into.steps.push_back(std::move(step));
    out.steps.push_back(into.steps.size() - 1);
  }
  out.ok = out.problems.empty();
  for (const auto k : out.steps) out.ok = out.ok && into.steps[k].ok;
  into.stores.push_back(std::move(out));
  return Status();
}

}  // namespace ckpt::report
