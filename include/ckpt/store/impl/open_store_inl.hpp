// ckpt: definitions of store/open_store.hpp.
#pragma once

#include "../open_store.hpp"

namespace ckpt {

CKPT_INLINE Result<std::unique_ptr<CommitLog>> commit_log(FsRef fs, const std::string& location, const StoreOptions& options) {
  if (object::is_object_url(location)) {
    if (!options.open_objects)
      return make_error(Code::unsupported, location + ": this build has no object-store client (ckpt::s3: libcurl, pugixml)");
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<object::ObjectClient> client, options.open_objects(location));
    return object_log(std::move(client));
  }
  return journal_log(fs, location);
}

namespace detail {
[[nodiscard]] inline FsRef default_fs() {
  static PosixFs posix;  // stateless
  return FsRef(posix);
}
}  // namespace detail

CKPT_INLINE Result<std::unique_ptr<CommitLog>> commit_log(const std::string& location, const StoreOptions& options) {
  return commit_log(detail::default_fs(), location, options);
}

CKPT_INLINE Result<std::unique_ptr<Store>> open_store(FsRef fs, const std::string& location, Access access, StoreOptions options) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CommitLog> log, commit_log(fs, location, options));
  return Store::open(std::move(log), access, std::move(options));
}

CKPT_INLINE Result<std::unique_ptr<Store>> open_store(const std::string& location, Access access, StoreOptions options) {
  return open_store(detail::default_fs(), location, access, std::move(options));
}

}  // namespace ckpt
