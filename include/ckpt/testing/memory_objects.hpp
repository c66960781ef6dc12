// ckpt testing: an object store in memory (the ObjectClient of object/client.hpp), with the faults the
// object-store protocol must survive (spec/OBJECT.md 7): a writer killed before any request, a request
// that fails before it acts, a response lost after the request acted, and a server that ignores
// conditional writes. Like SimFs for the POSIX store: crash tests enumerate every request boundary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../core/hash.hpp"
#include "../io/object/client.hpp"

namespace ckpt::testing {

class MemoryObjects final : public object::ObjectClient {
 public:
  enum class Op : std::uint8_t { put, get, head, list, remove, create_upload, upload_part, complete_upload, abort_upload, list_uploads };
  // What a fault hook does to one request.
  enum class Fault : std::uint8_t {
    none,
    fail,           // the request fails before it acts (a 503 that outlived the retries, a reset)
    lose_response,  // the request acts, then its response is lost: the caller sees an error
    crash,          // the writer is dead: this request and every later one fail without acting
  };
  struct Request {
    std::uint64_t number = 0;  // 0-based count of requests this client has served
    Op op = Op::put;
    std::string key;
  };
  using Hook = std::function<Fault(const Request&)>;

  explicit MemoryObjects(std::string name = "mem://objects") : name_(std::move(name)) {}

  // A second client over the same objects (another process, a restarted writer): faults and counters are its own.
  [[nodiscard]] MemoryObjects view() const {
    MemoryObjects other(name_);
    other.shared_ = shared_;
    other.honor_conditions_ = honor_conditions_;
    return other;
  }
  void set_hook(Hook hook) { hook_ = std::move(hook); }
  // A server that ignores If-None-Match (moto before 5, some emulators): create-only writes replace.
  void ignore_conditions(bool ignore) noexcept { honor_conditions_ = !ignore; }
  [[nodiscard]] std::uint64_t requests() const noexcept { return requests_; }
  [[nodiscard]] bool crashed() const noexcept { return crashed_; }

  // Direct access for tests: what is stored, and damage to it.
  [[nodiscard]] std::map<std::string, std::string> objects() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->objects;
  }
  void set_object(const std::string& key, std::string bytes) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->objects[key] = std::move(bytes);
  }
  void erase_object(const std::string& key) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->objects.erase(key);
  }
  [[nodiscard]] std::size_t open_uploads() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->uploads.size();
  }

  [[nodiscard]] std::string url(const std::string& key) const override { return name_ + "/" + key; }

  [[nodiscard]] Result<object::ObjectInfo> put(const std::string& key, const void* data, std::size_t size,
                                               object::Condition condition) override {
    std::string bytes(static_cast<const char*>(data), size);
    return act(Op::put, key, [&]() -> Result<object::ObjectInfo> {
      if (condition == object::Condition::create_only && honor_conditions_ && shared_->objects.count(key) > 0)
        return precondition_failed(key);
      shared_->objects[key] = std::move(bytes);
      return info(key);
    });
  }
  [[nodiscard]] Result<std::size_t> get(const std::string& key, std::uint64_t offset, void* buf, std::size_t size) override {
    return act(Op::get, key, [&]() -> Result<std::size_t> {
      auto it = shared_->objects.find(key);
      if (it == shared_->objects.end()) return missing(key);
      if (offset >= it->second.size()) return std::size_t{0};
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(size, it->second.size() - offset));
      std::memcpy(buf, it->second.data() + offset, n);
      return n;
    });
  }
  [[nodiscard]] Result<object::ObjectInfo> head(const std::string& key) override {
    return act(Op::head, key, [&]() -> Result<object::ObjectInfo> {
      if (shared_->objects.count(key) == 0) return missing(key);
      return info(key);
    });
  }
  [[nodiscard]] Result<std::vector<object::ObjectInfo>> list(const std::string& prefix) override {
    return act(Op::list, prefix, [&]() -> Result<std::vector<object::ObjectInfo>> {
      std::vector<object::ObjectInfo> out;
      for (auto it = shared_->objects.lower_bound(prefix); it != shared_->objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        out.push_back(info(it->first));
      return out;
    });
  }
  [[nodiscard]] Status remove(const std::string& key) override {
    return act(Op::remove, key, [&]() -> Result<bool> {
      shared_->objects.erase(key);
      return true;
    }).status();
  }
  [[nodiscard]] Result<std::string> create_upload(const std::string& key) override {
    return act(Op::create_upload, key, [&]() -> Result<std::string> {
      const std::string id = "upload-" + std::to_string(++shared_->next_upload);
      shared_->uploads[id].key = key;
      return id;
    });
  }
  [[nodiscard]] Result<object::UploadPart> upload_part(const std::string& key, const std::string& upload_id, int number,
                                                       const void* data, std::size_t size) override {
    std::string bytes(static_cast<const char*>(data), size);
    return act(Op::upload_part, key, [&]() -> Result<object::UploadPart> {
      auto it = shared_->uploads.find(upload_id);
      if (it == shared_->uploads.end() || it->second.key != key) return no_upload(key, upload_id);
      object::UploadPart part;
      part.number = number;
      part.etag = etag_of(bytes);
      it->second.parts[number] = std::move(bytes);
      return part;
    });
  }
  [[nodiscard]] Result<object::ObjectInfo> complete_upload(const std::string& key, const std::string& upload_id,
                                                           const std::vector<object::UploadPart>& parts,
                                                           object::Condition condition) override {
    return act(Op::complete_upload, key, [&]() -> Result<object::ObjectInfo> {
      auto it = shared_->uploads.find(upload_id);
      if (it == shared_->uploads.end() || it->second.key != key) return no_upload(key, upload_id);
      std::string whole;
      for (const auto& p : parts) {
        auto part = it->second.parts.find(p.number);
        if (part == it->second.parts.end() || etag_of(part->second) != p.etag)
          return make_error(Code::io, url(key) + ": CompleteMultipartUpload: InvalidPart " + std::to_string(p.number));
        whole += part->second;
      }
      if (condition == object::Condition::create_only && honor_conditions_ && shared_->objects.count(key) > 0)
        return precondition_failed(key);
      shared_->uploads.erase(it);
      shared_->objects[key] = std::move(whole);
      return info(key);
    });
  }
  [[nodiscard]] Status abort_upload(const std::string& key, const std::string& upload_id) override {
    return act(Op::abort_upload, key, [&]() -> Result<bool> {
      shared_->uploads.erase(upload_id);
      return true;
    }).status();
  }
  [[nodiscard]] Result<std::vector<object::UploadInfo>> list_uploads(const std::string& prefix) override {
    return act(Op::list_uploads, prefix, [&]() -> Result<std::vector<object::UploadInfo>> {
      std::vector<object::UploadInfo> out;
      for (const auto& [id, u] : shared_->uploads)
        if (u.key.compare(0, prefix.size(), prefix) == 0) out.push_back(object::UploadInfo{u.key, id});
      return out;
    });
  }

 private:
  struct PendingUpload {
    std::string key;
    std::map<int, std::string> parts;
  };
  struct Shared {
    mutable std::mutex mutex;
    std::map<std::string, std::string> objects;
    std::map<std::string, PendingUpload> uploads;
    std::uint64_t next_upload = 0;
  };

  // One request: the hook decides, then the action runs under the lock (each request is atomic, as S3's are).
  template <class F>
  auto act(Op op, const std::string& key, F&& action) -> decltype(action()) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    const Request request{requests_++, op, key};
    const Fault fault = crashed_ ? Fault::crash : (hook_ ? hook_(request) : Fault::none);
    if (fault == Fault::crash) crashed_ = true;
    if (fault == Fault::crash || fault == Fault::fail)
      return make_error(Code::io, url(key) + ": request " + std::to_string(request.number) + " failed (simulated " +
                                      (fault == Fault::crash ? "crash" : "fault") + ")");
    auto result = action();
    if (fault == Fault::lose_response)
      return make_error(Code::io, url(key) + ": request " + std::to_string(request.number) + ": response lost (simulated)");
    return result;
  }
  [[nodiscard]] object::ObjectInfo info(const std::string& key) const {
    const std::string& bytes = shared_->objects.at(key);
    return object::ObjectInfo{key, bytes.size(), etag_of(bytes)};
  }
  [[nodiscard]] static std::string etag_of(const std::string& bytes) {
    const std::uint64_t d = xxh3_64(bytes.data(), bytes.size());
    static const char* hex = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[static_cast<std::size_t>(i)] = hex[(d >> (60 - 4 * i)) & 0xf];
    return out;
  }
  [[nodiscard]] Status missing(const std::string& key) const {
    return make_error(Code::not_found, url(key) + ": NoSuchKey (HTTP 404)");
  }
  [[nodiscard]] Status precondition_failed(const std::string& key) const {
    return make_error(Code::conflict, url(key) + ": PreconditionFailed (HTTP 412): the object exists");
  }
  [[nodiscard]] Status no_upload(const std::string& key, const std::string& id) const {
    return make_error(Code::io, url(key) + ": NoSuchUpload " + id + " (HTTP 404)");
  }

  std::string name_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  Hook hook_;
  bool honor_conditions_ = true;
  std::uint64_t requests_ = 0;
  bool crashed_ = false;
};

}  // namespace ckpt::testing
