// ckpt: a communicator whose ranks are threads of one process (spec/SHARDING.md 2). ckpt-reshard
// writes the M shard files of a step through it, so a single process runs the same multi-rank
// transaction protocol as an MPI job, and tests exercise that protocol without MPI.
//
//   ThreadGroup group(4);                 // shared by the 4 threads
//   ThreadComm comm(group, rank);          // one per thread; a Comm (comm.hpp)
//
// Every collective must be entered by every rank, in the same order, as with MPI. A rank that cannot
// go on calls leave(): the collectives in progress and every later one fail on all ranks instead of
// waiting forever.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "comm.hpp"
#include "../core/error.hpp"

namespace ckpt {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size < 1 ? 1 : size), slots_(static_cast<std::size_t>(size_)) {}
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  [[nodiscard]] int size() const noexcept { return size_; }
  // Marks the group broken: waiting and later collectives return `why` on every rank.
  void leave(int rank, const Status& why);

  // The collectives ThreadComm forwards to.
  [[nodiscard]] Status barrier();
  [[nodiscard]] Result<std::vector<std::string>> gather(int rank, std::string bytes, int root);
  [[nodiscard]] Status broadcast(int rank, std::string& bytes, int root);
  // Point-to-point: a mailbox per (source, dest, tag); send never waits, recv waits for the next message.
  [[nodiscard]] Status send(int rank, std::string_view bytes, int dest, int tag);
  [[nodiscard]] Status recv(int rank, std::string& bytes, int source, int tag);

 private:
  // Waits until all ranks arrived at this phase; false when the group broke meanwhile.
  [[nodiscard]] bool arrive(std::unique_lock<std::mutex>& lock);
  [[nodiscard]] Status broken_status() const;

  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<std::string> slots_;  // one per rank: gather inputs; slot root: the broadcast payload
  std::map<std::tuple<int, int, int>, std::deque<std::string>> mailboxes_;  // (source, dest, tag)
  Status broken_;
};

class ThreadComm {
 public:
  ThreadComm(ThreadGroup& group, int rank) noexcept : group_(&group), rank_(rank) {}
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return group_->size(); }
  [[nodiscard]] Status barrier() { return group_->barrier(); }
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string bytes, int root) {
    return group_->gather(rank_, std::move(bytes), root);
  }
  [[nodiscard]] Status broadcast(std::string& bytes, int root) { return group_->broadcast(rank_, bytes, root); }
  void leave(const Status& why) { group_->leave(rank_, why); }
  [[nodiscard]] Status send(std::string_view bytes, int dest, int tag) { return group_->send(rank_, bytes, dest, tag); }
  [[nodiscard]] Status recv(std::string& bytes, int source, int tag) { return group_->recv(rank_, bytes, source, tag); }

 private:
  ThreadGroup* group_;
  int rank_;
};

inline void ThreadGroup::leave(int rank, const Status& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok())
    broken_ = make_error(why.ok() ? Code::io : why.code(),
                         "rank " + std::to_string(rank) + " left the thread group: " + (why.ok() ? "no reason given" : why.message()));
  changed_.notify_all();
}

inline Status ThreadGroup::broken_status() const { return broken_; }

inline bool ThreadGroup::arrive(std::unique_lock<std::mutex>& lock) {
  if (!broken_.ok()) return false;
  const std::uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return true;
  }
  changed_.wait(lock, [&] { return generation_ != generation || !broken_.ok(); });
  return generation_ != generation;
}

inline Status ThreadGroup::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  return arrive(lock) ? Status() : broken_status();
}

inline Result<std::vector<std::string>> ThreadGroup::gather(int rank, std::string bytes, int root) {
  if (root < 0 || root >= size_ || rank < 0 || rank >= size_)
    return make_error(Code::invalid_argument, "gather: root " + std::to_string(root) + " or rank " + std::to_string(rank) +
                                                  " outside a group of " + std::to_string(size_));
  std::unique_lock<std::mutex> lock(mutex_);
  slots_[static_cast<std::size_t>(rank)] = std::move(bytes);
  // Phase 1: every slot is filled. Phase 2: the root has taken them, so the slots may be reused.
  if (!arrive(lock)) return broken_status();
  std::vector<std::string> all;
  if (rank == root) all.swap(slots_), slots_.resize(static_cast<std::size_t>(size_));
  if (!arrive(lock)) return broken_status();
  return Result<std::vector<std::string>>(std::move(all));
}

inline Status ThreadGroup::broadcast(int rank, std::string& bytes, int root) {
  if (root < 0 || root >= size_ || rank < 0 || rank >= size_)
    return make_error(Code::invalid_argument, "broadcast: root " + std::to_string(root) + " or rank " + std::to_string(rank) +
                                                  " outside a group of " + std::to_string(size_));
  std::unique_lock<std::mutex> lock(mutex_);
  if (rank == root) slots_[static_cast<std::size_t>(root)] = bytes;
  if (!arrive(lock)) return broken_status();
  if (rank != root) bytes = slots_[static_cast<std::size_t>(root)];
  if (!arrive(lock)) return broken_status();
  if (rank == root) slots_[static_cast<std::size_t>(root)].clear();
  return Status();
}

inline Status ThreadGroup::send(int rank, std::string_view bytes, int dest, int tag) {
  if (dest < 0 || dest >= size_ || rank < 0 || rank >= size_ || tag < 0 || tag > kMaxP2pTag)
    return make_error(Code::invalid_argument, "send: rank " + std::to_string(rank) + " to " + std::to_string(dest) + " tag " +
                                                  std::to_string(tag) + " outside a group of " + std::to_string(size_));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.ok()) return broken_status();
  mailboxes_[std::make_tuple(rank, dest, tag)].emplace_back(bytes);
  changed_.notify_all();
  return Status();
}

inline Status ThreadGroup::recv(int rank, std::string& bytes, int source, int tag) {
  if (source < 0 || source >= size_ || rank < 0 || rank >= size_ || tag < 0 || tag > kMaxP2pTag)
    return make_error(Code::invalid_argument, "recv: rank " + std::to_string(rank) + " from " + std::to_string(source) +
                                                  " tag " + std::to_string(tag) + " outside a group of " + std::to_string(size_));
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_[std::make_tuple(source, rank, tag)];
  changed_.wait(lock, [&] { return !box.empty() || !broken_.ok(); });
  if (box.empty()) return broken_status();
  bytes = std::move(box.front());
  box.pop_front();
  return Status();
}

}  // namespace ckpt
