// ckpt: which steps of a store a report covers (all, one, the latest), and opening a store for
// reading beside a live writer without mistaking an append in progress for damage (spec/JOURNAL.md 6.9).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../io/posix_fs.hpp"
#include "../store/store.hpp"

namespace ckpt::report {

// Which steps of a store a command acts on.
struct StepSelection {
  std::optional<std::uint64_t> step;  // --step N
  bool latest = false;                // --latest
  [[nodiscard]] bool all() const noexcept { return !step && !latest; }
};

[[nodiscard]] inline Result<std::vector<StepInfo>> select_steps(const Store& store, const StepSelection& sel) {
  std::vector<StepInfo> out;
  if (sel.step) {
    CKPT_ASSIGN_OR_RETURN(StepInfo info, store.find(*sel.step));
    out.push_back(std::move(info));
  } else if (sel.latest) {
    auto latest = store.latest();
    if (!latest) return make_error(Code::not_found, store.path() + ": no committed step");
    out.push_back(*latest);
  } else {
    out = store.steps();
  }
  return out;
}

// Opens a store for reading: never writes, takes no lock, and shows what the applied records prove
// even when the journal has mid-log damage (which the caller reports).
// A reader beside a live writer can catch a group mid-append: bytes past the old end that are there
// but not yet all copied look like a damaged tail. So a damaged tail is re-read a few times, 50 ms
// apart, and reported only once the journal stopped changing (spec/JOURNAL.md 6.9).
[[nodiscard]] inline Result<std::unique_ptr<Store>> open_store_for_reading(FsRef fs, const std::string& path) {
  StoreOptions o;
  o.allow_corrupt_journal = true;
  auto store = Store::open(fs, path, Access::read_only, o);
  for (int attempt = 0; attempt < 4 && store.ok() && (*store)->recovery_report().tail_damaged(); ++attempt) {
    const JournalScan& before = (*store)->recovery_report().journal;
    const std::uint64_t size = before.file_size, end = before.end;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto again = Store::open(fs, path, Access::read_only, o);
    if (!again.ok()) return again;
    const JournalScan& now = (*again)->recovery_report().journal;
    const bool changed = now.file_size != size || now.end != end;
    store = std::move(again);
    if (!changed) break;  // the same bytes twice: damage, not an append in progress
  }
  return store;
}

}  // namespace ckpt::report
