// ckpt: the store a path or URL names (spec/OBJECT.md 4, spec/JOURNAL.md): the one place that tells an
// object store from a directory. Apart from store.hpp so that a program of directory stores parses no
// object-storage code (spec/LAYOUT.md 5.1).
#pragma once

#include <memory>
#include <string>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "journal_log.hpp"
#include "object_log.hpp"
#include "store.hpp"

namespace ckpt {

// The commit log a path or URL names, the one place that tells them apart: s3://bucket/prefix is the object
// log through options.open_objects (Code::unsupported when the build has none); anything else is the
// journal of a directory on this machine's file system.
// A directory is reached through `fs` (PosixFs when not given).
[[nodiscard]] Result<std::unique_ptr<CommitLog>> commit_log(FsRef fs, const std::string& location, const StoreOptions& options);
[[nodiscard]] Result<std::unique_ptr<CommitLog>> commit_log(const std::string& location, const StoreOptions& options);
// The store there (Store::open over commit_log).
[[nodiscard]] Result<std::unique_ptr<Store>> open_store(FsRef fs, const std::string& location, Access access, StoreOptions options = {});
[[nodiscard]] Result<std::unique_ptr<Store>> open_store(const std::string& location, Access access, StoreOptions options = {});

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/open_store_inl.hpp"
#endif
