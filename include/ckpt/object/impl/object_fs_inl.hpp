// ckpt: definitions of object/object_fs.hpp (spec/OBJECT.md 3).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include "../object_fs.hpp"

namespace ckpt::object {

struct ObjectFs::Part {
  int number = 0;
  std::string data;
  std::thread thread;  // not joinable when the part was sent on the caller's thread
  Status status;
  UploadPart uploaded;
};

struct ObjectFs::Upload {
  std::string key;
  std::string buffer;  // the part being filled
  std::uint64_t written = 0;
  std::string upload_id;  // empty until the first full part: a small object is one PUT
  std::vector<std::unique_ptr<Part>> parts;
  Status failure;  // the first error: every later call returns it
  std::atomic<bool> part_failed{false};  // set by a part's thread after it stored its error
  bool finished = false;
};

CKPT_INLINE ObjectFs::ObjectFs(ObjectClient& client, ObjectFsOptions options) : client_(client), options_(options) {
  options_.parallel_parts = std::max<std::size_t>(1, options_.parallel_parts);
}

CKPT_INLINE ObjectFs::~ObjectFs() {
  for (auto& [id, upload] : uploads_)
    if (!upload->finished) abandon(*upload);
}

CKPT_INLINE std::string ObjectFs::key_of(const std::string& path) {
  std::string key;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string_view part(path.data() + start, slash - start);
    if (!part.empty() && part != ".") {
      if (!key.empty()) key += '/';
      key.append(part.data(), part.size());
    }
    start = slash + 1;
  }
  return key;
}

CKPT_INLINE Result<FileHandle> ObjectFs::open(const std::string& path, OpenMode mode) {
  const std::string key = key_of(path);
  if (key.empty()) return make_error(Code::io, client_.url(key) + ": not a regular file (the store's root)");
  if (mode == OpenMode::read_write)
    return make_error(Code::unsupported, client_.url(key) + ": objects are written once and never changed (spec/OBJECT.md 3)");
  if (mode == OpenMode::create_new) {
    auto upload = std::make_unique<Upload>();
    upload->key = key;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::int64_t id = next_id_++;
    uploads_.emplace(id, std::move(upload));
    return FileHandle{id};
  }
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, client_.head(key));
  std::lock_guard<std::mutex> lock(mutex_);
  const std::int64_t id = next_id_++;
  readers_.emplace(id, Reader{key, info.size});
  return FileHandle{id};
}

CKPT_INLINE Result<ObjectFs::Upload*> ObjectFs::upload_of(FileHandle f) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = uploads_.find(f.id);
  if (it == uploads_.end()) return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open for writing");
  return it->second.get();
}

CKPT_INLINE Status ObjectFs::close(FileHandle f) {
  std::unique_ptr<Upload> upload;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (readers_.erase(f.id) > 0) return Status();
    auto it = uploads_.find(f.id);
    if (it == uploads_.end()) return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open");
    upload = std::move(it->second);
    uploads_.erase(it);
  }
  // Closed before sync(): the object must not appear, so the upload is aborted, never completed (spec 3.2).
  if (!upload->finished) abandon(*upload);
  return Status();
}

CKPT_INLINE Result<std::size_t> ObjectFs::pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
  std::string key;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = readers_.find(f.id);
    if (it == readers_.end()) return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open for reading");
    if (off >= it->second.size || n == 0) return std::size_t{0};
    n = static_cast<std::size_t>(std::min<std::uint64_t>(n, it->second.size - off));
    key = it->second.key;
  }
  return client_.get(key, off, buf, n);
}

CKPT_INLINE Status ObjectFs::pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off) {
  CKPT_ASSIGN_OR_RETURN(Upload * u, upload_of(f));
  if (!u->failure.ok()) return u->failure;
  if (u->finished) return make_error(Code::invalid_argument, client_.url(u->key) + ": written after it was made (sync)");
  if (off != u->written)
    return make_error(Code::unsupported, client_.url(u->key) + ": objects are written in order: write at offset " + std::to_string(off) +
                                             ", expected " + std::to_string(u->written) + " (spec/OBJECT.md 3.2)");
  const auto* bytes = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    if (u->buffer.capacity() < options_.part_size) u->buffer.reserve(options_.part_size);
    const std::size_t take = std::min(n, options_.part_size - u->buffer.size());
    u->buffer.append(reinterpret_cast<const char*>(bytes), take);
    bytes += take;
    n -= take;
    u->written += take;
    if (u->buffer.size() == options_.part_size) CKPT_TRY(send_part(*u));
  }
  return Status();
}

CKPT_INLINE Status ObjectFs::send_part(Upload& u) {
  auto fail = [&](Status s) {
    if (u.failure.ok()) u.failure = s;
    abandon(u);
    return u.failure;
  };
  if (u.part_failed.load(std::memory_order_acquire)) {  // a failed part fails the upload now, not at sync (spec 3.3)
    wait_parts(u);
    for (const auto& p : u.parts)
      if (!p->status.ok()) return fail(p->status);
  }
  if (u.upload_id.empty()) {
    auto id = client_.create_upload(u.key);
    if (!id.ok()) return fail(id.status());
    u.upload_id = std::move(*id);
  }
  if (u.parts.size() >= static_cast<std::size_t>(limits::kMaxParts))
    return fail(make_error(Code::invalid_argument, client_.url(u.key) + ": more than " + std::to_string(limits::kMaxParts) +
                                                       " parts of " + std::to_string(options_.part_size) +
                                                       " bytes: raise the part size (spec/OBJECT.md 3.2)"));
  auto part = std::make_unique<Part>();
  part->number = static_cast<int>(u.parts.size()) + 1;
  part->data.swap(u.buffer);
  Part* p = part.get();
  u.parts.push_back(std::move(part));
  {
    std::unique_lock<std::mutex> lock(mutex_);
    slots_.wait(lock, [&] { return in_flight_ < options_.parallel_parts; });
    ++in_flight_;
  }
  const std::string key = u.key, upload_id = u.upload_id;
  auto run = [this, &u, p, key, upload_id] {
    auto r = client_.upload_part(key, upload_id, p->number, p->data.data(), p->data.size());
    if (r.ok()) {
      p->uploaded = std::move(*r);
    } else {
      p->status = r.status();
      u.part_failed.store(true, std::memory_order_release);
    }
    std::string().swap(p->data);  // the part's memory goes back as soon as it is sent
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    slots_.notify_all();
  };
  try {
    p->thread = std::thread(run);
  } catch (const std::system_error&) {
    run();  // no thread to be had: send it here
  }
  return Status();
}

CKPT_INLINE void ObjectFs::wait_parts(Upload& u) noexcept {
  for (auto& p : u.parts)
    if (p->thread.joinable()) p->thread.join();
}

CKPT_INLINE void ObjectFs::abandon(Upload& u) noexcept {
  wait_parts(u);
  if (!u.upload_id.empty()) {
    // Best effort: an abort that fails leaves parts a lifecycle rule or ckpt-repair removes; the object itself
    // was never completed, so it does not exist (spec 3.2).
    client_.abort_upload(u.key, u.upload_id).ignore_error();
    u.upload_id.clear();
  }
  std::string().swap(u.buffer);
  u.parts.clear();
}

CKPT_INLINE Status ObjectFs::finish_upload(Upload& u) {
  if (u.upload_id.empty()) {
    // A small object: one create-only PUT.
    auto put = client_.put(u.key, u.buffer.data(), u.buffer.size(), Condition::create_only);
    std::string().swap(u.buffer);
    if (!put.ok()) return put.status();
    return Status();
  }
  if (!u.buffer.empty()) CKPT_TRY(send_part(u));
  wait_parts(u);
  std::vector<UploadPart> parts;
  parts.reserve(u.parts.size());
  for (const auto& p : u.parts) {
    if (!p->status.ok()) {
      const Status s = p->status;
      abandon(u);
      return s;
    }
    parts.push_back(p->uploaded);
  }
  auto done = client_.complete_upload(u.key, u.upload_id, parts, Condition::create_only);
  if (!done.ok()) {
    abandon(u);
    return done.status();
  }
  u.upload_id.clear();
  u.parts.clear();
  return Status();
}

CKPT_INLINE Status ObjectFs::sync(FileHandle f) {
  CKPT_ASSIGN_OR_RETURN(Upload * u, upload_of(f));
  if (!u->failure.ok()) return u->failure;
  if (u->finished) return Status();
  Status s = finish_upload(*u);
  if (!s.ok()) {
    u->failure = s;
    return s;
  }
  u->finished = true;
  return Status();
}

CKPT_INLINE Result<std::uint64_t> ObjectFs::file_size(FileHandle f) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = readers_.find(f.id); it != readers_.end()) return it->second.size;
  if (auto it = uploads_.find(f.id); it != uploads_.end()) return it->second->written;
  return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open");
}

CKPT_INLINE Status ObjectFs::truncate(FileHandle f, std::uint64_t size) {
  (void)f, (void)size;
  return make_error(Code::unsupported, "objects are written once: no truncate (spec/OBJECT.md 3)");
}

CKPT_INLINE Status ObjectFs::rename(const std::string& from, const std::string& to) {
  (void)to;
  return make_error(Code::unsupported, client_.url(key_of(from)) + ": an object store has no rename (spec/OBJECT.md 3)");
}

CKPT_INLINE Status ObjectFs::unlink(const std::string& path) { return client_.remove(key_of(path)); }

CKPT_INLINE Status ObjectFs::mkdir(const std::string& path) {
  (void)path;
  return Status();
}

CKPT_INLINE Status ObjectFs::rmdir(const std::string& path) {
  (void)path;
  return Status();
}

CKPT_INLINE Status ObjectFs::sync_dir(const std::string& path) {
  (void)path;  // an object is durable once its PUT or completion returned
  return Status();
}

CKPT_INLINE Result<std::vector<std::string>> ObjectFs::list_dir(const std::string& path) {
  const std::string key = key_of(path);
  const std::string prefix = key.empty() ? key : key + "/";
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, client_.list(prefix));
  std::vector<std::string> names;
  for (const auto& o : objects) {
    if (o.key.size() <= prefix.size()) continue;
    const std::string rest = o.key.substr(prefix.size());
    const std::string name = rest.substr(0, rest.find('/'));
    if (!name.empty() && (names.empty() || names.back() != name)) names.push_back(name);
  }
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.empty() && !key.empty()) return make_error(Code::not_found, client_.url(prefix) + ": no objects under this prefix");
  return names;
}

CKPT_INLINE Result<PathInfo> ObjectFs::stat(const std::string& path) {
  const std::string key = key_of(path);
  PathInfo dir;
  dir.is_dir = true;
  dir.kind = EntryKind::directory;
  if (key.empty()) return dir;
  auto head = client_.head(key);
  if (head.ok()) {
    PathInfo file;
    file.size = head->size;
    return file;
  }
  if (head.status().code() != Code::not_found) return head.status();
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> under, client_.list(key + "/"));
  if (!under.empty()) return dir;
  return make_error(Code::not_found, client_.url(key) + ": no such object or prefix");
}

CKPT_INLINE Result<FileHandle> ObjectFs::lock(const std::string& path) {
  return make_error(Code::unsupported, client_.url(key_of(path)) +
                                           ": an object store has no locks: writers exclude each other by create-only "
                                           "commit objects (spec/OBJECT.md 4)");
}

}  // namespace ckpt::object
