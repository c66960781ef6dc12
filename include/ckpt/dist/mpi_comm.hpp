// ckpt: the Comm concept (comm.hpp) over MPI (spec/SHARDING.md 2). Needs <mpi.h> and an MPI library
// (CMake: MPI::MPI_CXX); MPI_Init must have been called, and MPI_Finalize comes after the last use.
//
//   auto comm = ckpt::MpiComm::duplicate(MPI_COMM_WORLD);   // collective
//   auto store = ckpt::Store::open(fs, path, ckpt::Access::read_write, options, *comm);
//
// The library talks on its own duplicate of the caller's communicator, so its messages never match
// the application's, and with MPI_ERRORS_RETURN on it, so an MPI failure comes back as a Status
// (Code::io naming the call and MPI's error string) instead of aborting the job.
//
// Collectives are MPI's nonblocking ones, completed while watching for a leave message: a rank that drops
// an open transaction calls leave() (spec/SHARDING.md 3.4), and every other rank's waiting or later
// collective fails naming it instead of waiting forever. The communicator is then broken for good.
#pragma once

// Only MPI's C interface is used: skip the deprecated C++ bindings (and their warnings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/coding.hpp"
#include "comm.hpp"
#include "../core/error.hpp"

namespace ckpt {

class MpiComm {
 public:
  // Collective over `parent`: every rank of it must call this.
  [[nodiscard]] static Result<MpiComm> duplicate(MPI_Comm parent);
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& o) noexcept
      : comm_(o.comm_), rank_(o.rank_), size_(o.size_), broken_(std::move(o.broken_)), leave_text_(std::move(o.leave_text_)),
        leave_sends_(std::move(o.leave_sends_)) {
    o.comm_ = MPI_COMM_NULL;
  }
  MpiComm& operator=(MpiComm&& o) noexcept;
  ~MpiComm();  // MPI_Comm_free: collective in MPI's sense (every rank frees its handle)

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm native() const noexcept { return comm_; }

  [[nodiscard]] Status barrier();
  // Variable-sized gather in rank order; each rank's bytes must be under 2 GiB (MPI counts are int).
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root);
  // The root's bytes land on every rank; any size (sent in pieces under 1 GiB).
  [[nodiscard]] Status broadcast(std::string& bytes, int root);
  // This rank stops taking part: every other rank's waiting and later collectives fail with `why`.
  void leave(const Status& why);
  // Point-to-point (spec/TIERS.md 4): one message under 2 GiB; fails instead of waiting once a rank left.
  // A send abandoned that way is freed, not cancelled: its buffer is read only by a matching receive,
  // which the rank that left never posts.
  [[nodiscard]] Status send(std::string_view bytes, int dest, int tag);
  [[nodiscard]] Status recv(std::string& bytes, int source, int tag);
  // The next message at dst when it fits in capacity, else in bytes (comm.hpp): MPI copies it once, into place.
  [[nodiscard]] Result<Received> recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag);

 private:
  static constexpr int kLeaveTag = 0x6c76;  // point-to-point, so it never matches a collective
  MpiComm(MPI_Comm comm, int rank, int size) noexcept : comm_(comm), rank_(rank), size_(size) {}
  [[nodiscard]] static Status mpi_error(const char* call, int code);
  // The buffers of one collective: MPI owns them until it completes, which an abandoned one never does.
  struct Buffers {
    unsigned char head[8] = {};
    unsigned char verdict = 1;
    std::vector<unsigned char> sizes;
    std::vector<int> counts, displs;
    std::string data, all;
  };
  // Keeps what an abandoned collective may still be written into until the process exits (after
  // MPI_Finalize nothing is delivered); reachable, so not a leak.
  static void keep_until_exit(std::shared_ptr<void> buffers);
  // Completes a nonblocking collective; fails when a leave message arrives first (the request and its
  // buffers are then abandoned with the communicator).
  [[nodiscard]] Status complete(MPI_Request& request, const char* call, const std::shared_ptr<Buffers>& buffers);
  // A leave message waiting (not consumed: the collectives take it); ok when none. Thread-safe.
  [[nodiscard]] Status peek_leave() const;
  [[nodiscard]] Status check_peer(int peer, int tag, const char* call) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  Status broken_;                            // a rank left: every collective fails with this
  std::shared_ptr<std::string> leave_text_;  // what leave() sent; alive until its sends complete
  std::vector<MPI_Request> leave_sends_;
};

inline Status MpiComm::mpi_error(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return make_error(Code::io, std::string(call) + " failed: " + (len > 0 ? std::string(text, static_cast<std::size_t>(len)) : "MPI error " + std::to_string(code)));
}

inline Result<MpiComm> MpiComm::duplicate(MPI_Comm parent) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return make_error(Code::invalid_argument, "MpiComm: MPI_Init has not been called");
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(parent, &comm);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Comm_dup", rc);
  rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &size);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return mpi_error("MPI_Comm_set_errhandler/rank/size", rc);
  }
  return MpiComm(comm, rank, size);
}

inline MpiComm& MpiComm::operator=(MpiComm&& o) noexcept {
  if (this != &o) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = o.comm_;
    rank_ = o.rank_;
    size_ = o.size_;
    broken_ = std::move(o.broken_);
    leave_text_ = std::move(o.leave_text_);
    leave_sends_ = std::move(o.leave_sends_);
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

inline MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (auto& r : leave_sends_) {
      int done = 0;
      if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
        // Still in flight: MPI keeps the buffer, so it must outlive this object (a few bytes, once).
        MPI_Request_free(&r);
        if (leave_text_) keep_until_exit(leave_text_);
      }
    }
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
}

inline void MpiComm::keep_until_exit(std::shared_ptr<void> buffers) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<void>> kept;
  std::lock_guard<std::mutex> lock(mutex);
  kept.push_back(std::move(buffers));
}

inline void MpiComm::leave(const Status& why) {
  if (!broken_.ok() || comm_ == MPI_COMM_NULL) return;
  broken_ = make_error(why.ok() ? Code::io : why.code(), "this rank left the communicator: " + why.message());
  leave_text_ = std::make_shared<std::string>(why.ok() ? std::string("no reason given") : why.message());
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(leave_text_->data(), static_cast<int>(leave_text_->size()), MPI_CHAR, r, kLeaveTag, comm_, &request) ==
        MPI_SUCCESS)
      leave_sends_.push_back(request);
  }
}

inline Status MpiComm::complete(MPI_Request& request, const char* call, const std::shared_ptr<Buffers>& buffers) {
  long pause_ns = 1000;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(call, rc);
    if (done) return Status();
    int arrived = 0;
    MPI_Status from;
    rc = MPI_Iprobe(MPI_ANY_SOURCE, kLeaveTag, comm_, &arrived, &from);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Iprobe", rc);
    if (arrived) {
      int n = 0;
      MPI_Get_count(&from, MPI_CHAR, &n);
      std::string why(static_cast<std::size_t>(std::max(n, 0)), '\0');
      rc = MPI_Recv(why.empty() ? nullptr : &why[0], n, MPI_CHAR, from.MPI_SOURCE, kLeaveTag, comm_, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_error("MPI_Recv", rc);
      broken_ = make_error(Code::io, "rank " + std::to_string(from.MPI_SOURCE) + " left the communicator: " + why);
      if (buffers) keep_until_exit(buffers);  // the pending collective may still write into them
      return broken_;
    }
    // Back off to 1 ms: a commit may wait seconds for the slowest rank's writes.
    const timespec pause{0, pause_ns};
    nanosleep(&pause, nullptr);
    pause_ns = std::min(pause_ns * 2, 1000000L);
  }
}

inline Status MpiComm::barrier() {
  if (!broken_.ok()) return broken_;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(comm_, &request);
  return rc == MPI_SUCCESS ? complete(request, "MPI_Ibarrier", nullptr) : mpi_error("MPI_Ibarrier", rc);
}

inline Result<std::vector<std::string>> MpiComm::gather(std::string bytes, int root) {
  if (root < 0 || root >= size_)
    return make_error(Code::invalid_argument, "gather root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size_));
  if (!broken_.ok()) return broken_;
  // Sizes travel as u64 so a message over 2 GiB is refused on every rank alike, not truncated.
  auto buf = std::make_shared<Buffers>();
  buf->data = std::move(bytes);
  put_u64(buf->head, buf->data.size());
  buf->sizes.resize(rank_ == root ? static_cast<std::size_t>(size_) * 8 : 0);
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Igather(buf->head, 8, MPI_BYTE, buf->sizes.data(), 8, MPI_BYTE, root, comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Igather", rc);
  CKPT_TRY(complete(request, "MPI_Igather", buf));
  // Every rank must know whether the root will accept the message sizes before the Gatherv.
  std::uint64_t total = 0;
  if (rank_ == root) {
    buf->counts.resize(static_cast<std::size_t>(size_));
    buf->displs.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const std::uint64_t n = get_u64(buf->sizes.data() + 8 * r);
      if (n > static_cast<std::uint64_t>(INT_MAX) || total > static_cast<std::uint64_t>(INT_MAX) - n) buf->verdict = 0;
      buf->counts[static_cast<std::size_t>(r)] = buf->verdict ? static_cast<int>(n) : 0;
      buf->displs[static_cast<std::size_t>(r)] = buf->verdict ? static_cast<int>(total) : 0;
      if (buf->verdict) total += n;
    }
  }
  rc = MPI_Ibcast(&buf->verdict, 1, MPI_BYTE, root, comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Ibcast", rc);
  CKPT_TRY(complete(request, "MPI_Ibcast", buf));
  if (buf->verdict == 0) return make_error(Code::invalid_argument, "gather: the messages add up to 2 GiB or more (MPI counts are int)");
  buf->all.assign(static_cast<std::size_t>(total), '\0');
  rc = MPI_Igatherv(buf->data.data(), static_cast<int>(buf->data.size()), MPI_BYTE, rank_ == root ? &buf->all[0] : nullptr,
                    buf->counts.data(), buf->displs.data(), MPI_BYTE, root, comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Igatherv", rc);
  CKPT_TRY(complete(request, "MPI_Igatherv", buf));
  std::vector<std::string> out;
  if (rank_ == root) {
    out.reserve(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r)
      out.push_back(buf->all.substr(static_cast<std::size_t>(buf->displs[static_cast<std::size_t>(r)]),
                                    static_cast<std::size_t>(buf->counts[static_cast<std::size_t>(r)])));
  }
  return Result<std::vector<std::string>>(std::move(out));
}

inline Status MpiComm::broadcast(std::string& bytes, int root) {
  if (root < 0 || root >= size_)
    return make_error(Code::invalid_argument, "broadcast root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size_));
  if (!broken_.ok()) return broken_;
  // The payload travels in buffers of its own: an abandoned broadcast may still write into them later.
  auto buf = std::make_shared<Buffers>();
  if (rank_ == root) buf->data = bytes;
  put_u64(buf->head, buf->data.size());
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Ibcast(buf->head, 8, MPI_BYTE, root, comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Ibcast", rc);
  CKPT_TRY(complete(request, "MPI_Ibcast", buf));
  const std::uint64_t n = get_u64(buf->head);
  if (rank_ != root) buf->data.assign(static_cast<std::size_t>(n), '\0');
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
  for (std::uint64_t done = 0; done < n;) {
    const std::uint64_t len = std::min(kPiece, n - done);
    rc = MPI_Ibcast(&buf->data[static_cast<std::size_t>(done)], static_cast<int>(len), MPI_BYTE, root, comm_, &request);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Ibcast", rc);
    CKPT_TRY(complete(request, "MPI_Ibcast", buf));
    done += len;
  }
  if (rank_ != root) bytes = std::move(buf->data);
  return Status();
}

inline Status MpiComm::peek_leave() const {
  int arrived = 0;
  MPI_Status from;
  const int rc = MPI_Iprobe(MPI_ANY_SOURCE, kLeaveTag, comm_, &arrived, &from);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Iprobe", rc);
  if (arrived) return make_error(Code::io, "rank " + std::to_string(from.MPI_SOURCE) + " left the communicator");
  return Status();
}

inline Status MpiComm::check_peer(int peer, int tag, const char* call) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || tag < 0 || tag > kMaxP2pTag)
    return make_error(Code::invalid_argument, std::string(call) + ": peer " + std::to_string(peer) + " or tag " +
                                                  std::to_string(tag) + " invalid in a world of " + std::to_string(size_) +
                                                  " (rank " + std::to_string(rank_) + ")");
  return Status();
}

inline Status MpiComm::send(std::string_view bytes, int dest, int tag) {
  CKPT_TRY(check_peer(dest, tag, "send"));
  if (!broken_.ok()) return broken_;
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    return make_error(Code::invalid_argument, "send: a message of " + std::to_string(bytes.size()) + " bytes (MPI counts are int)");
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Isend", rc);
  long pause_ns = 1000;
  for (;;) {
    int done = 0;
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Test", rc);
    if (done) return Status();
    Status left = peek_leave();
    if (!left.ok()) {
      MPI_Request_free(&request);
      return left.with_context("send to rank " + std::to_string(dest));
    }
    const timespec pause{0, pause_ns};
    nanosleep(&pause, nullptr);
    pause_ns = std::min(pause_ns * 2, 200000L);
  }
}

inline Status MpiComm::recv(std::string& bytes, int source, int tag) { return recv_into(nullptr, 0, bytes, source, tag).status(); }

inline Result<Received> MpiComm::recv_into(void* dst, std::size_t capacity, std::string& bytes, int source, int tag) {
  CKPT_TRY(check_peer(source, tag, "recv"));
  if (!broken_.ok()) return broken_;
  long pause_ns = 1000;
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    int rc = MPI_Iprobe(source, tag, comm_, &arrived, &status);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Iprobe", rc);
    if (arrived) {
      int n = 0;
      rc = MPI_Get_count(&status, MPI_BYTE, &n);
      if (rc != MPI_SUCCESS || n < 0) return mpi_error("MPI_Get_count", rc);
      const Received got{dst != nullptr && static_cast<std::size_t>(n) <= capacity, static_cast<std::size_t>(n)};
      if (!got.in_place) bytes.resize(static_cast<std::size_t>(n));
      void* into = got.in_place ? dst : bytes.empty() ? nullptr : &bytes[0];
      rc = MPI_Recv(into, n, MPI_BYTE, source, tag, comm_, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_error("MPI_Recv", rc);
      return got;
    }
    Status left = peek_leave();
    if (!left.ok()) return left.with_context("recv from rank " + std::to_string(source));
    const timespec pause{0, pause_ns};
    nanosleep(&pause, nullptr);
    pause_ns = std::min(pause_ns * 2, 200000L);
  }
}

}  // namespace ckpt
