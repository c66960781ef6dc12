// ckpt: what repairing a store needs beyond recovery (spec/JOURNAL.md 6.8, 11): its LOCK held for a
// span of work (a journal rebuild), the durable delete of a tree (quarantine/ under --purge), and
// quarantine/ listed. report/repair.hpp decides when; these do it. Header-only, like journal_rebuild.hpp.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../io/fs.hpp"
#include "journal.hpp"

namespace ckpt {

// The store's LOCK, held until release() or destruction (what a writable open takes, spec 6.1).
class StoreLock {
 public:
  StoreLock() = default;
  StoreLock(FsRef fs, FileHandle h) noexcept : fs_(fs), handle_(h), held_(true) {}
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  StoreLock(StoreLock&& o) noexcept : fs_(o.fs_), handle_(o.handle_), held_(o.held_) { o.held_ = false; }
  StoreLock& operator=(StoreLock&& o) noexcept {
    if (this != &o) {
      release();
      fs_ = o.fs_;
      handle_ = o.handle_;
      held_ = o.held_;
      o.held_ = false;
    }
    return *this;
  }
  ~StoreLock() { release(); }
  [[nodiscard]] bool held() const noexcept { return held_; }
  void release() noexcept {
    if (held_ && fs_) fs_->close(handle_).ignore_error();  // releasing a lock loses nothing
    held_ = false;
  }

 private:
  std::optional<FsRef> fs_;
  FileHandle handle_{};
  bool held_ = false;
};

// Takes STORE/LOCK without blocking; Code::conflict names the store when another writer holds it.
[[nodiscard]] inline Result<StoreLock> lock_store(FsRef fs, const std::string& store) {
  auto l = fs.lock(join_path(store, std::string(journal::kLockName)));
  if (!l.ok()) {
    if (l.status().code() == Code::conflict)
      return make_error(Code::conflict, store + ": another writer has the store open (LOCK is held)");
    return l.status();
  }
  return StoreLock(fs, *l);
}

// Deletes path and everything under it, appending each removed path to `removed` (children first).
// Never follows a symlink: one is removed itself (PosixFs's O_NOFOLLOW directory handles). Stops at
// the first failure; the caller makes the parent durable (sync_dir).
[[nodiscard]] inline Status remove_tree(FsRef fs, const std::string& path, std::vector<std::string>& removed) {
  auto info = fs.stat(path);
  if (!info.ok()) return Status();  // gone already: nothing to delete
  if (info->kind == EntryKind::directory) {
    auto entries = fs.list_dir(path);
    if (entries.ok())
      for (const auto& e : *entries) CKPT_TRY(remove_tree(fs, join_path(path, e), removed));
    CKPT_TRY(fs.rmdir(path));
  } else {
    CKPT_TRY(fs.unlink(path));
  }
  removed.push_back(path);
  return Status();
}

// The entries of STORE/quarantine/ (spec 6.8); empty when there is none.
[[nodiscard]] inline std::vector<std::string> quarantine_entries(FsRef fs, const std::string& store) {
  auto entries = fs.list_dir(join_path(store, std::string(journal::kQuarantineName)));
  return entries.ok() ? std::move(entries).value() : std::vector<std::string>{};
}

// What purge_quarantine did: each top-level entry it went through, and every path removed.
struct QuarantinePurge {
  bool present = false;              // quarantine/ existed
  std::vector<std::string> entries;  // STORE/quarantine/<entry>, in listing order
  std::vector<std::string> removed;  // every path deleted, children first
};

// Deletes STORE/quarantine/ durably (ckpt-repair --purge): each entry's tree, then the directory, each
// parent fsynced. Call it holding the store's lock (a writable open's). Fails at the first error, with
// what was done so far in `into`.
[[nodiscard]] inline Status purge_quarantine(FsRef fs, const std::string& store, QuarantinePurge& into) {
  const std::string q = join_path(store, std::string(journal::kQuarantineName));
  auto entries = fs.list_dir(q);
  if (!entries.ok()) return Status();  // nothing in quarantine
  into.present = true;
  Status first;
  for (const auto& e : *entries) {
    into.entries.push_back(join_path(q, e));
    Status s = remove_tree(fs, join_path(q, e), into.removed);  // every entry is tried; the first failure is reported
    if (first.ok()) first = s;
  }
  CKPT_TRY(first);
  CKPT_TRY(fs.sync_dir(q));
  CKPT_TRY(fs.rmdir(q));
  return fs.sync_dir(store);  // the removal of quarantine/ itself is durable only now (spec 4.2)
}

}  // namespace ckpt
