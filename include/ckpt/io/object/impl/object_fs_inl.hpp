// ckpt: definitions of object/object_fs.hpp (spec/OBJECT.md 3).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <iterator>
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

// One part of a file fetched ahead of its reader (spec/OBJECT.md 3.1): a ranged GET on its own thread.
struct ObjectFs::Window {
  std::uint64_t offset = 0;
  std::size_t length = 0;  // asked for
  std::unique_ptr<unsigned char[]> data;  // part_size bytes, recycled from window to window
  std::size_t got = 0;   // bytes the GET returned (fewer only where the object ends)
  Status status;
  bool done = false;     // under the reader's mutex
  std::thread thread;
  [[nodiscard]] std::uint64_t end() const noexcept { return offset + length; }
  ~Window() {
    if (thread.joinable()) thread.join();
  }
};

// A file open for reading, and its read-ahead: the windows fetched ahead, contiguous and in order.
struct ObjectFs::Reader {
  std::string key;
  std::uint64_t size = 0;
  std::mutex mutex;
  std::condition_variable fetched;
  std::uint64_t next = ~std::uint64_t{0};  // where the last read ended: a read starting there is in order
  unsigned streak = 0;                      // reads in order in a row
  std::deque<std::shared_ptr<Window>> windows;  // shared: a read waiting on one holds it
  ~Reader() { windows.clear(); }  // joins every GET still in flight
};

CKPT_INLINE ObjectFs::ObjectFs(ObjectClient& client, ObjectFsOptions options) : client_(client), options_(options) {
  options_.parallel_parts = std::max<std::size_t>(1, options_.parallel_parts);
  spare_buffers_.reserve(options_.parallel_parts);  // recycle() then never allocates
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
  auto reader = std::make_shared<Reader>();
  reader->key = key;
  reader->size = info.size;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::int64_t id = next_id_++;
  readers_.emplace(id, std::move(reader));
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
  std::shared_ptr<Reader> reader;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = readers_.find(f.id); it != readers_.end()) {
      reader = std::move(it->second);
      readers_.erase(it);
    } else if (auto up = uploads_.find(f.id); up != uploads_.end()) {
      upload = std::move(up->second);
      uploads_.erase(up);
    } else {
      return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open");
    }
  }
  if (reader) {
    // Its read-ahead GETs are joined outside the Fs lock; their buffers serve the next file read.
    std::vector<std::shared_ptr<Window>> windows;
    {
      std::lock_guard<std::mutex> lock(reader->mutex);
      windows.assign(std::make_move_iterator(reader->windows.begin()), std::make_move_iterator(reader->windows.end()));
      reader->windows.clear();
    }
    recycle(windows);
    return Status();
  }
  // Closed before sync(): the object must not appear, so the upload is aborted, never completed (spec 3.2).
  if (!upload->finished) abandon(*upload);
  return Status();
}

CKPT_INLINE Result<std::size_t> ObjectFs::pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off) {
  std::shared_ptr<Reader> reader;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = readers_.find(f.id);
    if (it == readers_.end()) return make_error(Code::invalid_argument, "object file handle " + std::to_string(f.id) + " is not open for reading");
    reader = it->second;
  }
  if (off >= reader->size || n == 0) return std::size_t{0};
  n = static_cast<std::size_t>(std::min<std::uint64_t>(n, reader->size - off));
  auto* out = static_cast<unsigned char*>(buf);
  // A large read: ranged GETs of at least a part each, several at once (spec 3.1).
  if (options_.parallel_parts > 1 && n >= 2 * options_.part_size) return read_split(reader->key, out, n, off);
  if (!options_.read_ahead || options_.parallel_parts <= 1) return client_.get(reader->key, off, out, n);
  return read_in_order(*reader, out, n, off);
}

CKPT_INLINE Result<std::size_t> ObjectFs::read_split(const std::string& key, unsigned char* buf, std::size_t n, std::uint64_t off) {
  // Ranges of whole parts (a multiple of part_size, at least one part) with their ends on part boundaries:
  // the object was uploaded in parts of part_size, and a GET that straddles two of them costs a server
  // that keeps each part apart (SeaweedFS) two reads.
  const std::size_t part = options_.part_size, parallel = options_.parallel_parts;
  const std::uint64_t stride = std::uint64_t{part} * std::max<std::size_t>(1, (n + parallel * part - 1) / (parallel * part));
  std::vector<std::pair<std::uint64_t, std::size_t>> ranges;  // (object offset, length)
  for (std::uint64_t at = off; at < off + n;) {
    const std::uint64_t end = std::min<std::uint64_t>(off + n, (at / stride + 1) * stride);
    ranges.emplace_back(at, static_cast<std::size_t>(end - at));
    at = end;
  }
  std::vector<Result<std::size_t>> got(ranges.size(), std::size_t{0});
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < ranges.size(); i = next++)
      got[i] = client_.get(key, ranges[i].first, buf + (ranges[i].first - off), ranges[i].second);
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < std::min(parallel, ranges.size()); ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer threads to be had: the others take more ranges each
    }
  }
  work();
  for (auto& t : threads) t.join();
  std::size_t total = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (!got[i].ok()) return got[i].status();
    total += *got[i];
    if (*got[i] < ranges[i].second) break;  // the object ended here (it changed since open): a short read
  }
  return total;
}

CKPT_INLINE std::unique_ptr<unsigned char[]> ObjectFs::take_buffer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_buffers_.empty()) {
      auto buffer = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
      return buffer;
    }
  }
  return std::unique_ptr<unsigned char[]>(new unsigned char[options_.part_size]);
}

CKPT_INLINE void ObjectFs::recycle(std::vector<std::shared_ptr<Window>>& windows) noexcept {
  if (windows.empty()) return;
  for (auto& w : windows)
    if (w->thread.joinable()) w->thread.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& w : windows)  // a window a read still holds keeps its buffer (freed with it)
    if (w.use_count() == 1 && w->data && spare_buffers_.size() < options_.parallel_parts)
      spare_buffers_.push_back(std::move(w->data));
  windows.clear();
}

CKPT_INLINE Result<std::size_t> ObjectFs::read_in_order(Reader& r, unsigned char* buf, std::size_t n, std::uint64_t off) {
  std::vector<std::shared_ptr<Window>> dropped;  // joined after the lock is released (a GET's thread takes it)
  std::size_t done = 0;
  Status failure;
  {
    std::unique_lock<std::mutex> lock(r.mutex);
    // In order: where the last read ended, or a little further on inside what is fetched already (the
    // padding between two tensors' data is skipped, not read).
    const bool in_order = off == r.next || (!r.windows.empty() && r.next < off && off < r.windows.back()->end() &&
                                            r.next >= r.windows.front()->offset);
    r.streak = in_order ? r.streak + 1 : 0;
    r.next = off + n;
    auto drop_before = [&](std::uint64_t at) {
      while (!r.windows.empty() && r.windows.front()->end() <= at) {
        dropped.push_back(std::move(r.windows.front()));
        r.windows.pop_front();
      }
    };
    // A read outside what was fetched ahead ends the read-ahead; one inside it consumes what lies before.
    if (!r.windows.empty() && (off < r.windows.front()->offset || off >= r.windows.back()->end())) {
      for (auto& w : r.windows) dropped.push_back(std::move(w));
      r.windows.clear();
    }
    drop_before(off);
    // Fetch ahead from the second read in order on, doubling the windows with each such read up to
    // parallel_parts, so a reader that only reads a little in order is not sent much it never asked for.
    if (r.streak >= 1) {
      const std::size_t want = std::min<std::size_t>(options_.parallel_parts, std::size_t{1} << std::min(r.streak, 16u));
      std::uint64_t start = r.windows.empty() ? off : r.windows.back()->end();
      while (r.windows.size() < want && start < r.size) {
        auto w = std::make_shared<Window>();
        w->offset = start;
        // Whole parts, as the object was uploaded (see read_split); the first from `off` to its part's end.
        w->length = static_cast<std::size_t>(std::min<std::uint64_t>(options_.part_size - start % options_.part_size, r.size - start));
        w->data = take_buffer();
        Window* wp = w.get();
        const std::string key = r.key;
        auto fetch = [this, &r, wp, key] {
          auto got = client_.get(key, wp->offset, wp->data.get(), wp->length);
          std::lock_guard<std::mutex> guard(r.mutex);
          if (got.ok()) {
            wp->got = *got;
          } else {
            wp->status = got.status();
          }
          wp->done = true;
          r.fetched.notify_all();
        };
        try {
          w->thread = std::thread(fetch);
        } catch (const std::system_error&) {
          break;  // no thread to be had: read without fetching ahead
        }
        start = w->end();
        r.windows.push_back(std::move(w));
      }
    }
    // Serve what the windows hold, in order; the rest is a GET of its own.
    while (done < n && failure.ok()) {
      const std::uint64_t at = off + done;
      auto it = std::find_if(r.windows.begin(), r.windows.end(), [&](const auto& w) { return w->offset <= at && at < w->end(); });
      if (it == r.windows.end()) break;
      const std::shared_ptr<Window> held = *it;  // another reader of this handle may drop it meanwhile
      Window& w = *held;
      r.fetched.wait(lock, [&] { return w.done; });
      if (!w.status.ok()) {
        failure = w.status;
        break;
      }
      const std::uint64_t in = at - w.offset;
      if (in >= w.got) break;  // the object ended before this window's end
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, w.got - in));
      std::memcpy(buf + done, w.data.get() + in, take);
      done += take;
      if (w.got < w.length) break;
    }
    if (!failure.ok()) {  // a failed fetch ends the read-ahead; the read fails as its own GET would have
      for (auto& w : r.windows) dropped.push_back(std::move(w));
      r.windows.clear();
      r.streak = 0;
    } else {
      drop_before(off + done);
    }
  }
  recycle(dropped);
  if (!failure.ok()) return failure;
  if (done == n) return done;
  CKPT_ASSIGN_OR_RETURN(std::size_t rest, client_.get(r.key, off + done, buf + done, n - done));
  return done + rest;
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
  if (!done.ok() && (done.status().code() == Code::conflict || done.status().code() == Code::not_found)) {
    // 412 or NoSuchUpload: an earlier attempt whose answer was lost may have completed it (a retry of the
    // client's, or curl's own resend on a reused connection, which the client cannot see). The key is this
    // writer's alone (the store names it by transaction, spec/OBJECT.md 3.3): an object there of exactly the
    // bytes written is this upload, completed.
    auto head = client_.head(u.key);
    if (head.ok() && head->size == u.written) {
      u.upload_id.clear();
      u.parts.clear();
      return Status();
    }
  }
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
  if (auto it = readers_.find(f.id); it != readers_.end()) return it->second->size;
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
