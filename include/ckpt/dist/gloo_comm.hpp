// ckpt: a communicator over gloo's TCP transport (Debian's libgloo-dev), so the tiers' bulk bytes and
// control messages move between ranks in C++ threads without an interpreter (spec/TIERS.md 4.7).
// It is bootstrapped once through any other Comm (a torch.distributed group, MPI, threads): every rank's
// pair addresses are gathered and broadcast on it, then every pair connects; nothing goes through the
// bootstrap afterwards. Users link gloo (CMake: find_package(Gloo), target gloo).
//
//   auto comm = ckpt::GlooComm::connect(bootstrap);   // collective on bootstrap
//   CKPT_TRY((*comm)->send(bytes, 1, /*tag=*/7));
//
// Collectives are gloo's own algorithms (barrier, allgather, gather, broadcast); a point-to-point message
// is a size and then its bytes on one slot per tag, so messages of one (source, dest, tag) arrive in order.
// A failed operation, a timeout or leave() breaks the communicator: it closes its connections, so every
// peer's waiting and later operations with this rank fail too, and they close theirs (spec/SHARDING.md 3.4).
#pragma once

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/gather.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "comm.hpp"
#include "wire.hpp"
#include "../core/coding.hpp"
#include "../core/error.hpp"

namespace ckpt {

struct GlooCommOptions {
  // Where peers reach this rank: a network interface, else a host name or address. Both empty: the
  // interface named by CKPT_GLOO_IFACE or GLOO_SOCKET_IFNAME (torch's variable), else this host's name.
  std::string iface;
  std::string hostname;
  // How long one operation waits for a peer before the communicator breaks (a capture's agreement waits
  // for the slowest rank's capture, so this is generous).
  std::chrono::milliseconds timeout = std::chrono::hours(1);
  // The largest point-to-point message a recv accepts (bounded memory against a broken peer).
  std::uint64_t max_message = std::uint64_t{2} << 30;
};

class GlooComm {
 public:
  // Collective on `bootstrap` (any Comm): every rank of it calls this with the same options.
  template <class Bootstrap>
  [[nodiscard]] static Result<std::unique_ptr<GlooComm>> connect(Bootstrap& bootstrap, GlooCommOptions options = {}) {
    CKPT_ASSIGN_OR_RETURN(auto comms, connect_through(CommRef(bootstrap), 1, std::move(options)));
    return std::move(comms.front());
  }
  // `count` communicators of the same ranks, connected through one exchange on `bootstrap` (the tiers from
  // Python need three: one bootstrap round instead of three).
  template <class Bootstrap>
  [[nodiscard]] static Result<std::vector<std::unique_ptr<GlooComm>>> connect_many(Bootstrap& bootstrap, std::size_t count,
                                                                                  GlooCommOptions options = {}) {
    return connect_through(CommRef(bootstrap), count, std::move(options));
  }
  GlooComm(const GlooComm&) = delete;
  GlooComm& operator=(const GlooComm&) = delete;
  ~GlooComm() = default;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] Status barrier();
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root);
  [[nodiscard]] Status broadcast(std::string& bytes, int root);
  [[nodiscard]] Status send(std::string_view bytes, int dest, int tag);
  [[nodiscard]] Status recv(std::string& bytes, int source, int tag);
  // The next message at dst when it fits in capacity, else in bytes (comm.hpp): no copy after gloo's own.
  [[nodiscard]] Result<Received> recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag);
  void leave(const Status& why);

 private:
  class Mesh;  // gloo::Context whose pairs connect through the bootstrap
  GlooComm(std::shared_ptr<Mesh> mesh, GlooCommOptions options, int rank, int size)
      : mesh_(std::move(mesh)), options_(std::move(options)), rank_(rank), size_(size) {}
  [[nodiscard]] static Result<std::vector<std::unique_ptr<GlooComm>>> connect_through(CommRef bootstrap, std::size_t count,
                                                                                     GlooCommOptions options);
  // Runs one gloo operation: a gloo exception or a broken communicator comes back as a Status, and the
  // first failure breaks it (closing every connection, so the peers fail too).
  template <class F>
  [[nodiscard]] Status run(const std::string& what, F&& f);
  [[nodiscard]] Status broken() const;
  [[nodiscard]] Status check_peer(int peer, const char* what) const;

  std::shared_ptr<Mesh> mesh_;
  GlooCommOptions options_;
  int rank_ = 0, size_ = 1;
  mutable std::mutex mutex_;  // broken_
  Status broken_;
};

// --- Definitions --------------------------------------------------------------------------------------

class GlooComm::Mesh final : public gloo::Context {
 public:
  Mesh(int r, int n) : gloo::Context(r, n) {}
  // Makes one pair per peer; returns their addresses (peer, address)* for the bootstrap's table.
  [[nodiscard]] Result<std::string> make_pairs(const std::shared_ptr<gloo::transport::Device>& device, std::chrono::milliseconds timeout) {
    device_ = device;
    setTimeout(timeout);
    Encoder mine;
    try {
      transportContext_ = device_->createContext(rank, size);
      transportContext_->setTimeout(timeout);
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        const std::vector<char> address = transportContext_->createPair(peer)->address().bytes();
        mine.u32(static_cast<std::uint32_t>(peer));
        wire::put_text(mine, std::string_view(address.data(), address.size()));
      }
    } catch (const std::exception& e) {
      return make_error(Code::io, std::string("gloo: making this rank's pairs: ") + e.what());
    }
    return std::move(mine.str());
  }
  // Connects the pair to rank `from` to the address `from` made for this rank (in `entries`, what its
  // make_pairs returned): what gloo's rendezvous does through a key-value store, here through the bootstrap.
  [[nodiscard]] Status connect_from(int from, const std::string& entries) {
    Decoder e = wire::decoder(entries);
    std::uint32_t peer = 0;
    std::string address;
    while (e.u32(peer) && wire::get_text(e, address, UINT32_MAX)) {
      if (peer != static_cast<std::uint32_t>(rank)) continue;
      try {
        transportContext_->getPair(from)->connect(std::vector<char>(address.begin(), address.end()));
      } catch (const std::exception& ex) {
        return make_error(Code::io, "gloo: connecting to rank " + std::to_string(from) + ": " + ex.what());
      }
      return Status();
    }
    return make_error(Code::corrupt, "gloo bootstrap: rank " + std::to_string(from) + " published no address for rank " + std::to_string(rank));
  }
};

inline Result<std::vector<std::unique_ptr<GlooComm>>> GlooComm::connect_through(CommRef bootstrap, std::size_t count, GlooCommOptions options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  gloo::transport::tcp::attr attr;
  if (options.iface.empty() && options.hostname.empty()) {
    const char* env = std::getenv("CKPT_GLOO_IFACE");
    if (env == nullptr || *env == '\0') env = std::getenv("GLOO_SOCKET_IFNAME");
    if (env != nullptr) options.iface = env;
  }
  attr.iface = options.iface, attr.hostname = options.hostname;
  // Every communicator's pairs in one exchange: one agreement, one gather, one broadcast, one agreement,
  // whatever `count` (a Python bootstrap's collective each cost a trip through the interpreter).
  Status made;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    made = make_error(Code::io, "gloo: no TCP device for interface '" + attr.iface + "', host '" + attr.hostname + "': " + e.what());
  }
  std::vector<std::shared_ptr<Mesh>> meshes;
  Encoder mine;
  for (std::size_t i = 0; i < count && made.ok(); ++i) {
    meshes.push_back(std::make_shared<Mesh>(rank, size));
    auto entries = meshes.back()->make_pairs(device, options.timeout);
    if (entries.ok()) wire::put_text(mine, *entries);
    else made = entries.status();
  }
  CKPT_TRY(wire::agree(bootstrap, made));
  CKPT_ASSIGN_OR_RETURN(auto all, bootstrap.gather(std::move(mine.str()), 0));
  Encoder table;
  for (const auto& a : all) wire::put_text(table, a);
  std::string table_bytes = std::move(table.str());
  CKPT_TRY(bootstrap.broadcast(table_bytes, 0));
  Status connected;
  Decoder d = wire::decoder(table_bytes);
  for (int from = 0; from < size && connected.ok(); ++from) {
    std::string published;
    if (!wire::get_text(d, published, UINT32_MAX)) connected = make_error(Code::corrupt, "gloo bootstrap: undecodable address table");
    Decoder each = wire::decoder(published);
    for (std::size_t i = 0; i < count && connected.ok(); ++i) {
      std::string entries;
      if (!wire::get_text(each, entries, UINT32_MAX)) connected = make_error(Code::corrupt, "gloo bootstrap: undecodable address table");
      else if (from != rank) connected = meshes[i]->connect_from(from, entries);
    }
  }
  CKPT_TRY(wire::agree(bootstrap, connected));
  std::vector<std::unique_ptr<GlooComm>> out;
  for (auto& mesh : meshes) out.push_back(std::unique_ptr<GlooComm>(new GlooComm(std::move(mesh), options, rank, size)));
  return out;
}

inline Status GlooComm::broken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

inline void GlooComm::leave(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) return;
    broken_ = make_error(why.ok() ? Code::io : why.code(), "this rank left the communicator: " + (why.ok() ? std::string("no reason given") : why.message()));
  }
  try {
    mesh_->closeConnections();  // every peer's operation with this rank fails instead of waiting (3.4)
  } catch (const std::exception&) {
  }
}

template <class F>
Status GlooComm::run(const std::string& what, F&& f) {
  CKPT_TRY(broken());
  Status failed;
  try {
    failed = f();
  } catch (const std::exception& e) {
    failed = make_error(Code::io, "gloo " + what + ": " + e.what());
  }
  if (!failed.ok()) leave(failed);
  return failed;
}

inline Status GlooComm::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) return make_error(Code::invalid_argument, std::string(what) + " rank " + std::to_string(peer) + " is not a rank of a world of " + std::to_string(size_));
  return Status();
}

namespace detail {
// Point-to-point slots: a prefix none of gloo's algorithms uses, and the caller's tag (spec/TIERS.md 4.7).
inline constexpr std::uint8_t kGlooP2pSlotPrefix = 0xc7;
}  // namespace detail

inline Status GlooComm::barrier() {
  return run("barrier", [&] {
    gloo::BarrierOptions o(mesh_);
    o.setTimeout(options_.timeout);
    gloo::barrier(o);
    return Status();
  });
}

inline Result<std::vector<std::string>> GlooComm::gather(std::string bytes, int root) {
  CKPT_TRY(check_peer(root, "gather root"));
  std::vector<std::string> out;
  CKPT_TRY(run("gather to rank " + std::to_string(root), [&] {
    // gloo gathers equal sizes: every size first, then every part padded to the longest.
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(size_));
    std::uint64_t mine = bytes.size();
    gloo::AllgatherOptions a(mesh_);
    a.setInput(&mine, 1), a.setOutput(sizes.data(), sizes.size()), a.setTimeout(options_.timeout);
    gloo::allgather(a);
    std::uint64_t longest = 1;
    for (std::uint64_t s : sizes) longest = std::max(longest, s);
    if (longest > options_.max_message)
      return make_error(Code::corrupt, "gather: a part of " + std::to_string(longest) + " bytes, more than " + std::to_string(options_.max_message));
    bytes.resize(static_cast<std::size_t>(longest));
    std::string all(rank_ == root ? static_cast<std::size_t>(longest) * sizes.size() : 0, '\0');
    gloo::GatherOptions g(mesh_);
    g.setInput(&bytes[0], bytes.size()), g.setRoot(root), g.setTimeout(options_.timeout);
    if (rank_ == root) g.setOutput(&all[0], all.size());
    gloo::gather(g);
    if (rank_ == root)
      for (std::size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(r * static_cast<std::size_t>(longest), static_cast<std::size_t>(sizes[r])));
    return Status();
  }));
  return out;
}

inline Status GlooComm::broadcast(std::string& bytes, int root) {
  CKPT_TRY(check_peer(root, "broadcast root"));
  return run("broadcast from rank " + std::to_string(root), [&] {
    std::uint64_t n = bytes.size();
    gloo::BroadcastOptions s(mesh_);
    s.setOutput(&n, 1), s.setRoot(root), s.setTimeout(options_.timeout);
    gloo::broadcast(s);
    if (n > options_.max_message)
      return make_error(Code::corrupt, "broadcast of " + std::to_string(n) + " bytes, more than " + std::to_string(options_.max_message));
    bytes.resize(static_cast<std::size_t>(n));
    if (n == 0) return Status();
    gloo::BroadcastOptions b(mesh_);
    b.setOutput(&bytes[0], bytes.size()), b.setRoot(root), b.setTimeout(options_.timeout);
    gloo::broadcast(b);
    return Status();
  });
}

inline Status GlooComm::send(std::string_view bytes, int dest, int tag) {
  CKPT_TRY(check_peer(dest, "send to"));
  if (dest == rank_ || tag < 0 || tag > kMaxP2pTag)
    return make_error(Code::invalid_argument, "send to rank " + std::to_string(dest) + " tag " + std::to_string(tag) + ": not a peer, or the tag is outside [0, " + std::to_string(kMaxP2pTag) + "]");
  return run("send to rank " + std::to_string(dest), [&] {
    const auto slot = gloo::Slot::build(detail::kGlooP2pSlotPrefix, static_cast<std::uint32_t>(tag));
    std::uint64_t n = bytes.size();
    auto head = mesh_->createUnboundBuffer(&n, sizeof n);
    head->send(dest, slot);
    // gloo only reads a send's buffer: the const_cast never writes.
    auto body = n == 0 ? nullptr : mesh_->createUnboundBuffer(const_cast<char*>(bytes.data()), bytes.size());
    if (body) body->send(dest, slot);
    if (!head->waitSend(options_.timeout) || (body && !body->waitSend(options_.timeout)))
      return make_error(Code::io, "send to rank " + std::to_string(dest) + ": aborted or timed out");
    return Status();
  });
}

inline Status GlooComm::recv(std::string& bytes, int source, int tag) { return recv_into(nullptr, 0, bytes, source, tag).status(); }

inline Result<Received> GlooComm::recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag) {
  CKPT_TRY(check_peer(source, "recv from"));
  if (source == rank_ || tag < 0 || tag > kMaxP2pTag)
    return make_error(Code::invalid_argument, "recv from rank " + std::to_string(source) + " tag " + std::to_string(tag) + ": not a peer, or the tag is outside [0, " + std::to_string(kMaxP2pTag) + "]");
  Received got;
  CKPT_TRY(run("recv from rank " + std::to_string(source), [&] {
    const auto slot = gloo::Slot::build(detail::kGlooP2pSlotPrefix, static_cast<std::uint32_t>(tag));
    std::uint64_t n = 0;
    auto head = mesh_->createUnboundBuffer(&n, sizeof n);
    head->recv(source, slot);
    if (!head->waitRecv(options_.timeout)) return make_error(Code::io, "recv from rank " + std::to_string(source) + ": aborted or timed out");
    if (n > options_.max_message)
      return make_error(Code::corrupt, "recv from rank " + std::to_string(source) + " tag " + std::to_string(tag) + ": a message of " + std::to_string(n) + " bytes, more than " + std::to_string(options_.max_message));
    got = Received{dst != nullptr && n <= capacity, static_cast<std::size_t>(n)};
    if (!got.in_place) bytes.resize(static_cast<std::size_t>(n));  // a reused string of the same size is not filled again
    if (n == 0) return Status();
    auto body = mesh_->createUnboundBuffer(got.in_place ? dst : &bytes[0], static_cast<std::size_t>(n));
    body->recv(source, slot);
    if (!body->waitRecv(options_.timeout)) return make_error(Code::io, "recv from rank " + std::to_string(source) + ": aborted or timed out");
    return Status();
  }));
  return got;
}

}  // namespace ckpt
