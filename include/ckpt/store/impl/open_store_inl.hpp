// ckpt: definitions of store/open_store.hpp.
#pragma once

#include "../open_store.hpp"

namespace ckpt {

CKPT_INLINE Result<std::unique_ptr<CommitLog>> commit_log(const std::string& location, const StoreOptions& options) {
  if (object::is_object_url(location)) {
    if (!options.open_objects)
      return make_error(Code::unsupported, location + ": this build has no object-store client (ckpt::s3: libcurl, pugixml)");
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<object::ObjectClient> client, options.open_objects(location));
    return object_log(std::move(client));
  }
  static PosixFs posix;  // stateless
  return journal_log(FsRef(posix), location);
}

CKPT_INLINE Result<std::unique_ptr<Store>> open_store(const std::string& location, Access access, StoreOptions options) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CommitLog> log, commit_log(location, options));
  return Store::open(std::move(log), access, std::move(options));
}

}  // namespace ckpt
