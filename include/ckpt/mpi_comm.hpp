// ckpt: the Comm concept (comm.hpp) over MPI (spec/SHARDING.md 2). Needs <mpi.h> and an MPI library
// (CMake: MPI::MPI_CXX); MPI_Init must have been called, and MPI_Finalize comes after the last use.
//
//   auto comm = ckpt::MpiComm::duplicate(MPI_COMM_WORLD);   // collective
//   auto store = ckpt::Store<>::open(fs, path, ckpt::Access::read_write, options, *comm);
//
// The library talks on its own duplicate of the caller's communicator, so its messages never match
// the application's, and with MPI_ERRORS_RETURN on it, so an MPI failure comes back as a Status
// (Code::io naming the call and MPI's error string) instead of aborting the job.
#pragma once

// Only MPI's C interface is used: skip the deprecated C++ bindings (and their warnings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coding.hpp"
#include "error.hpp"

namespace ckpt {

class MpiComm {
 public:
  // Collective over `parent`: every rank of it must call this.
  [[nodiscard]] static Result<MpiComm> duplicate(MPI_Comm parent);
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_), rank_(o.rank_), size_(o.size_) { o.comm_ = MPI_COMM_NULL; }
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

 private:
  MpiComm(MPI_Comm comm, int rank, int size) noexcept : comm_(comm), rank_(rank), size_(size) {}
  [[nodiscard]] static Status mpi_error(const char* call, int code);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
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
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

inline MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

inline Status MpiComm::barrier() {
  const int rc = MPI_Barrier(comm_);
  return rc == MPI_SUCCESS ? Status() : mpi_error("MPI_Barrier", rc);
}

inline Result<std::vector<std::string>> MpiComm::gather(std::string bytes, int root) {
  if (root < 0 || root >= size_)
    return make_error(Code::invalid_argument, "gather root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size_));
  // Sizes travel as u64 so a message over 2 GiB is refused on every rank alike, not truncated.
  unsigned char mine[8];
  put_u64(mine, bytes.size());
  std::vector<unsigned char> sizes(rank_ == root ? static_cast<std::size_t>(size_) * 8 : 0);
  int rc = MPI_Gather(mine, 8, MPI_BYTE, sizes.data(), 8, MPI_BYTE, root, comm_);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Gather", rc);
  // Every rank must know whether the root will accept the message sizes before the Gatherv.
  unsigned char verdict = 1;
  std::vector<int> counts, displs;
  std::uint64_t total = 0;
  if (rank_ == root) {
    counts.resize(static_cast<std::size_t>(size_));
    displs.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const std::uint64_t n = get_u64(sizes.data() + 8 * r);
      if (n > static_cast<std::uint64_t>(INT_MAX) || total > static_cast<std::uint64_t>(INT_MAX) - n) verdict = 0;
      counts[static_cast<std::size_t>(r)] = verdict ? static_cast<int>(n) : 0;
      displs[static_cast<std::size_t>(r)] = verdict ? static_cast<int>(total) : 0;
      if (verdict) total += n;
    }
  }
  rc = MPI_Bcast(&verdict, 1, MPI_BYTE, root, comm_);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
  if (verdict == 0) return make_error(Code::invalid_argument, "gather: the messages add up to 2 GiB or more (MPI counts are int)");
  std::string all(static_cast<std::size_t>(total), '\0');
  rc = MPI_Gatherv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, rank_ == root ? &all[0] : nullptr,
                   counts.data(), displs.data(), MPI_BYTE, root, comm_);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Gatherv", rc);
  std::vector<std::string> out;
  if (rank_ == root) {
    out.reserve(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                               static_cast<std::size_t>(counts[static_cast<std::size_t>(r)])));
  }
  return Result<std::vector<std::string>>(std::move(out));
}

inline Status MpiComm::broadcast(std::string& bytes, int root) {
  if (root < 0 || root >= size_)
    return make_error(Code::invalid_argument, "broadcast root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size_));
  unsigned char size_bytes[8];
  put_u64(size_bytes, bytes.size());
  int rc = MPI_Bcast(size_bytes, 8, MPI_BYTE, root, comm_);
  if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
  const std::uint64_t n = get_u64(size_bytes);
  if (rank_ != root) bytes.assign(static_cast<std::size_t>(n), '\0');
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
  for (std::uint64_t done = 0; done < n;) {
    const std::uint64_t len = std::min(kPiece, n - done);
    rc = MPI_Bcast(&bytes[static_cast<std::size_t>(done)], static_cast<int>(len), MPI_BYTE, root, comm_);
    if (rc != MPI_SUCCESS) return mpi_error("MPI_Bcast", rc);
    done += len;
  }
  return Status();
}

}  // namespace ckpt
