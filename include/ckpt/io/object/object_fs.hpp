// ckpt: the Fs of an object store (spec/OBJECT.md 3): shard writers, readers and manifests run over it
// unchanged, so an object store is written and read by the same code as a directory.
//
// What a file is on an object store, and the only uses it serves:
// - open(key, create_new): an upload. pwrite must append (offset == bytes written so far); full parts
//   go to the server while the next fill, up to `parallel_parts` in flight. sync() is the one point
//   where the object is made: a multipart upload is completed (or a small object PUT) with
//   `If-None-Match: *`, so an existing key is never replaced (Code::conflict). Anything that fails
//   aborts the upload explicitly; close() before sync() aborts it too. Nothing ever completes an upload
//   because a handle was closed or dropped (spec/OBJECT.md 3.2: the DCP/fsspec truncated-shard failure).
// - open(key, read): ranged GETs. A small read asks for exactly its bytes, until reads go on in order:
//   then the next parts are fetched ahead, up to `parallel_parts` GETs of `part_size` in flight (a verified
//   load reads 1 MiB chunk after chunk; one GET at a time would leave the connections idle). A large read
//   (2 parts or more) is split into ranged GETs of at least `part_size`, up to `parallel_parts` at once.
// - unlink: DELETE; list_dir: LIST of "dir/"; stat: HEAD, or a non-empty prefix for a directory.
// - mkdir, rmdir and sync_dir succeed and do nothing (prefixes are implicit; every object is durable once
//   its PUT or completion returned). rename, truncate and lock are refused: no protocol step needs them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../fs.hpp"
#include "client.hpp"

namespace ckpt::object {

namespace limits {
inline constexpr std::size_t kMinPartSize = std::size_t{5} << 20;  // S3's smallest part but the last
inline constexpr std::size_t kMaxPartSize = std::size_t{5} << 30;
inline constexpr int kMaxParts = 10000;
}  // namespace limits

class ObjectFs {
 public:
  explicit ObjectFs(ObjectClient& client, ObjectFsOptions options = {});
  ObjectFs(const ObjectFs&) = delete;
  ObjectFs& operator=(const ObjectFs&) = delete;
  ~ObjectFs();  // aborts every upload still open

  [[nodiscard]] ObjectClient& client() noexcept { return client_; }
  [[nodiscard]] const ObjectFsOptions& options() const noexcept { return options_; }

  [[nodiscard]] Result<FileHandle> open(const std::string& path, OpenMode mode);
  [[nodiscard]] Status close(FileHandle f);
  [[nodiscard]] Result<std::size_t> pread(FileHandle f, void* buf, std::size_t n, std::uint64_t off);
  [[nodiscard]] Status pwrite(FileHandle f, const void* buf, std::size_t n, std::uint64_t off);
  [[nodiscard]] Status sync(FileHandle f);
  [[nodiscard]] Status sync_data(FileHandle f) { return sync(f); }
  [[nodiscard]] Result<std::uint64_t> file_size(FileHandle f);
  [[nodiscard]] Status truncate(FileHandle f, std::uint64_t size);
  [[nodiscard]] Status rename(const std::string& from, const std::string& to);
  [[nodiscard]] Status unlink(const std::string& path);
  [[nodiscard]] Status mkdir(const std::string& path);
  [[nodiscard]] Status rmdir(const std::string& path);
  [[nodiscard]] Status sync_dir(const std::string& path);
  [[nodiscard]] Result<std::vector<std::string>> list_dir(const std::string& path);
  [[nodiscard]] Result<PathInfo> stat(const std::string& path);
  [[nodiscard]] Result<FileHandle> lock(const std::string& path);

  // The object key a path names: "./" and duplicate or trailing slashes removed ("" is the root).
  [[nodiscard]] static std::string key_of(const std::string& path);

 private:
  struct Upload;
  struct Part;
  struct Reader;
  struct Window;
  [[nodiscard]] Result<std::size_t> read_split(const std::string& key, unsigned char* buf, std::size_t n, std::uint64_t off);
  [[nodiscard]] Result<std::size_t> read_in_order(Reader& r, unsigned char* buf, std::size_t n, std::uint64_t off);
  // Read-ahead buffers of part_size bytes, shared by every file of this Fs: a step's next shard, or the
  // next load, reuses pages already faulted in (faulting in 64 MiB cost ~29 ms of CPU per load on the
  // 2-core test VM, several times copying them), and shards read one after another keep parallel_parts
  // idle, not that many each.
  [[nodiscard]] std::unique_ptr<unsigned char[]> take_buffer();
  void recycle(std::vector<std::shared_ptr<Window>>& windows) noexcept;  // joins their GETs, keeps up to parallel_parts buffers
  [[nodiscard]] Result<Upload*> upload_of(FileHandle f);
  [[nodiscard]] Status send_part(Upload& u);  // hands the filled buffer to a thread, waiting for a slot
  [[nodiscard]] Status finish_upload(Upload& u);
  void abandon(Upload& u) noexcept;  // waits for its parts, aborts the multipart upload
  void wait_parts(Upload& u) noexcept;

  ObjectClient& client_;
  ObjectFsOptions options_;
  std::mutex mutex_;
  std::condition_variable slots_;
  std::size_t in_flight_ = 0;
  std::int64_t next_id_ = 1;
  std::map<std::int64_t, std::unique_ptr<Upload>> uploads_;
  std::map<std::int64_t, std::shared_ptr<Reader>> readers_;  // shared: a pread holds its reader past a close
  std::vector<std::unique_ptr<unsigned char[]>> spare_buffers_;  // under mutex_
};

}  // namespace ckpt::object

#if !CKPT_DECLARATIONS_ONLY
#include "impl/object_fs_inl.hpp"
#endif
