// ckpt: the communicator concept that multi-rank saves use to agree on one transaction
// (spec/JOURNAL.md 8). The single-process LocalComm is the default; an MPI one is a separate header.
//
// A Comm is any class with these members:
//   int rank() const;                       // 0 .. size()-1; rank 0 is the coordinator
//   int size() const;                       // the world size, >= 1
//   Status barrier();
//   Result<std::vector<std::string>> gather(std::string bytes, int root);  // root: size() entries, rank order;
//                                                                          // other ranks: empty
//   Status broadcast(std::string& bytes, int root);                        // root's bytes land on every rank
// and may have
//   Status send(std::string_view bytes, int dest, int tag);   // point-to-point bulk transfer (spec/TIERS.md 4), which
//                                                             // may wait for its receiver (as MPI_Send may):
//   Status recv(std::string& bytes, int source, int tag);     // messages of one (source, dest, tag) arrive in
//                                                             // order; tag in [0, kMaxP2pTag]
//   Result<Received> recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag);
//                      // the next message straight at dst when it fits in capacity (bytes then unspecified),
//                      // else in bytes (as recv);
//                      // CommRef falls back to recv and a copy (a replica lands in its slot: spec/TIERS.md 4.2)
//   void leave(const Status& why);  // this rank stops: the collectives of every other rank, waiting or
//                                   // later, fail instead of waiting for it (ThreadComm, MpiComm)
// A rank that drops an open transaction calls leave() instead of waiting for the others (spec/SHARDING.md 3.4):
// without it, the other ranks wait in their next collective for as long as the communicator lets them.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace ckpt {

// Point-to-point tags a Comm must carry (MPI guarantees 32767; the MPI adapter keeps one above for leave).
inline constexpr int kMaxP2pTag = 0x3fff;

// Where recv_into put a message: at dst (in_place) or in the string, and its size.
struct Received {
  bool in_place = false;
  std::size_t size = 0;
};

// One process, one rank: every collective is a no-op or a copy.
class LocalComm {
 public:
  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] Status barrier() { return Status(); }
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root) {
    if (root != 0) return make_error(Code::invalid_argument, "gather root " + std::to_string(root) + " is not a rank of a world of 1");
    std::vector<std::string> all;
    all.push_back(std::move(bytes));
    return Result<std::vector<std::string>>(std::move(all));
  }
  [[nodiscard]] Status broadcast(std::string& bytes, int root) {
    (void)bytes;
    if (root != 0) return make_error(Code::invalid_argument, "broadcast root " + std::to_string(root) + " is not a rank of a world of 1");
    return Status();
  }
  void leave(const Status& why) noexcept { (void)why; }  // no other rank waits
};

// The rank and world of a save whose messages the caller carries itself (spec/SHARDING.md 3.6), e.g.
// inside PyTorch DCP's plans: it has no collectives, so a collective call on its store names the phases to use.
class CallerComm {
 public:
  CallerComm(int rank, int size) noexcept : rank_(rank), size_(size) {}
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] Status barrier() { return refusal(); }
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root) {
    (void)bytes, (void)root;
    return refusal();
  }
  [[nodiscard]] Status broadcast(std::string& bytes, int root) {
    (void)bytes, (void)root;
    return refusal();
  }

  [[nodiscard]] static Status refusal() {
    return make_error(Code::invalid_argument,
                      "this store's ranks are coordinated by the caller (Store::open_rank): a save runs through "
                      "begin_request, decide_begin, join, report and commit_reports (spec/SHARDING.md 3.6)");
  }

 private:
  int rank_, size_;
};

namespace detail {
template <class Comm, class = void>
struct has_leave : std::false_type {};
template <class Comm>
struct has_leave<Comm, std::void_t<decltype(std::declval<Comm&>().leave(std::declval<const Status&>()))>> : std::true_type {};
template <class Comm, class = void>
struct has_p2p : std::false_type {};
template <class Comm>
struct has_p2p<Comm, std::void_t<decltype(std::declval<Comm&>().send(std::string_view(), 0, 0)),
                                 decltype(std::declval<Comm&>().recv(std::declval<std::string&>(), 0, 0))>> : std::true_type {};
template <class Comm, class = void>
struct has_recv_into : std::false_type {};
template <class Comm>
struct has_recv_into<Comm, std::void_t<decltype(std::declval<Comm&>().recv_into(std::declval<void*>(), std::size_t{0},
                                                                               std::declval<std::string&>(), 0, 0))>> : std::true_type {};
[[nodiscard]] inline Status no_p2p() {
  return make_error(Code::unsupported, "this communicator has no point-to-point transfer (send/recv; spec/TIERS.md 4)");
}
}  // namespace detail

// A non-owning, type-erased reference to any Comm, so a transaction can keep one without becoming a
// template on it. The referenced communicator must outlive the CommRef.
class CommRef {
 public:
  // Constrained so that copying a CommRef copies it instead of wrapping it.
  template <class Comm, class = std::enable_if_t<!std::is_same_v<std::remove_cv_t<Comm>, CommRef>>>
  explicit CommRef(Comm& comm) noexcept
      : comm_(&comm),
        rank_([](void* c) { return static_cast<Comm*>(c)->rank(); }),
        size_([](void* c) { return static_cast<Comm*>(c)->size(); }),
        barrier_([](void* c) { return static_cast<Comm*>(c)->barrier(); }),
        gather_([](void* c, std::string b, int root) { return static_cast<Comm*>(c)->gather(std::move(b), root); }),
        broadcast_([](void* c, std::string& b, int root) { return static_cast<Comm*>(c)->broadcast(b, root); }),
        leave_([](void* c, const Status& why) {
          if constexpr (detail::has_leave<Comm>::value) static_cast<Comm*>(c)->leave(why);
          else (void)c, (void)why;
        }),
        send_([](void* c, std::string_view b, int dest, int tag) -> Status {
          if constexpr (detail::has_p2p<Comm>::value) return static_cast<Comm*>(c)->send(b, dest, tag);
          else return (void)c, (void)b, (void)dest, (void)tag, detail::no_p2p();
        }),
        recv_([](void* c, std::string& b, int source, int tag) -> Status {
          if constexpr (detail::has_p2p<Comm>::value) return static_cast<Comm*>(c)->recv(b, source, tag);
          else return (void)c, (void)b, (void)source, (void)tag, detail::no_p2p();
        }),
        recv_into_([](void* c, void* dst, std::size_t capacity, std::string& b, int source, int tag) -> Result<Received> {
          if constexpr (detail::has_recv_into<Comm>::value) {
            return static_cast<Comm*>(c)->recv_into(dst, capacity, b, source, tag);
          } else if constexpr (detail::has_p2p<Comm>::value) {
            CKPT_TRY(static_cast<Comm*>(c)->recv(b, source, tag));
            Received got{b.size() <= capacity, b.size()};
            if (got.in_place && !b.empty()) std::memcpy(dst, b.data(), b.size());
            return got;
          } else {
            return (void)c, (void)dst, (void)capacity, (void)b, (void)source, (void)tag, detail::no_p2p();
          }
        }) {}

  [[nodiscard]] int rank() const { return rank_(comm_); }
  [[nodiscard]] int size() const { return size_(comm_); }
  [[nodiscard]] Status barrier() const { return barrier_(comm_); }
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root) const {
    return gather_(comm_, std::move(bytes), root);
  }
  [[nodiscard]] Status broadcast(std::string& bytes, int root) const { return broadcast_(comm_, bytes, root); }
  void leave(const Status& why) const { leave_(comm_, why); }
  [[nodiscard]] Status send(std::string_view bytes, int dest, int tag) const { return send_(comm_, bytes, dest, tag); }
  [[nodiscard]] Status recv(std::string& bytes, int source, int tag) const { return recv_(comm_, bytes, source, tag); }
  [[nodiscard]] Result<Received> recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag) const {
    return recv_into_(comm_, dst, capacity, bytes, source, tag);
  }

 private:
  void* comm_;
  int (*rank_)(void*);
  int (*size_)(void*);
  Status (*barrier_)(void*);
  Result<std::vector<std::string>> (*gather_)(void*, std::string, int);
  Status (*broadcast_)(void*, std::string&, int);
  void (*leave_)(void*, const Status&);
  Status (*send_)(void*, std::string_view, int, int);
  Status (*recv_)(void*, std::string&, int, int);
  Result<Received> (*recv_into_)(void*, void*, std::size_t, std::string&, int, int);
};

}  // namespace ckpt
