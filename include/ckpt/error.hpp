// ckpt: one error type with a code, and Result<T> for functions that return a value or fail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "config.hpp"

namespace ckpt {

// Error codes; tools map them to exit status (spec/FORMAT.md section 9).
enum class Code : std::uint8_t {
  ok = 0,
  io,                // the OS refused an operation (EIO, ENOSPC, EACCES...)
  corrupt,           // bytes on disk do not match their digest or a structural rule
  incomplete,        // the file or log ends before it should (torn write, truncated copy)
  version,           // unknown format version or incompatible feature flag
  not_found,         // a named tensor, step, key or file does not exist
  invalid_argument,  // the caller asked for something impossible
  conflict,          // a lock is held, a name already exists
  unsupported,       // valid request this build cannot serve (no GPU, no mmap)
  cancelled,         // a save abandoned by a deadline-bounded flush, or not taken because one was requested
};
// The highest code: decoders of a Status sent between ranks accept codes up to it.
inline constexpr Code kLastCode = Code::cancelled;

[[nodiscard]] inline const char* code_name(Code c) noexcept {
  switch (c) {
    case Code::ok: return "ok";
    case Code::io: return "io";
    case Code::corrupt: return "corrupt";
    case Code::incomplete: return "incomplete";
    case Code::version: return "version";
    case Code::not_found: return "not_found";
    case Code::invalid_argument: return "invalid_argument";
    case Code::conflict: return "conflict";
    case Code::unsupported: return "unsupported";
    case Code::cancelled: return "cancelled";
  }
  return "unknown";
}

struct Problem;  // problem.hpp: where damage is, as a record (file, tensor, chunk, byte range)

// A Status is ok or carries a code and a message that names file, offset, expected and found; an error
// about damaged bytes also carries the Problem record, so that callers (the Python package) need not
// parse the message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  [[nodiscard]] static Status ok_status() { return Status(); }
  [[nodiscard]] bool ok() const noexcept { return code_ == Code::ok; }
  [[nodiscard]] explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] Code code() const noexcept { return code_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] std::string to_string() const {
    return ok() ? std::string("ok") : std::string(code_name(code_)) + ": " + message_;
  }
  // Discarding an error must be explicit and searchable (RocksDB PermitUncheckedError).
  void ignore_error() const noexcept {}
  // Adds context in front of the message, keeping the code and the problem.
  [[nodiscard]] Status with_context(const std::string& context) const {
    if (ok()) return *this;
    Status s(code_, context + ": " + message_);
    s.problem_ = problem_;
    return s;
  }
  // The damage record, when the error is about bytes found damaged; null otherwise.
  [[nodiscard]] const Problem* problem() const noexcept { return problem_.get(); }
  [[nodiscard]] Status with_problem(std::shared_ptr<const Problem> problem) const {
    Status s = *this;
    s.problem_ = std::move(problem);
    return s;
  }

 private:
  Code code_ = Code::ok;
  std::string message_;
  std::shared_ptr<const Problem> problem_;  // shared: a Status is copied along every return path
};

[[nodiscard]] inline Status make_error(Code code, std::string message) {
  return Status(code, std::move(message));
}

// Result<T>: a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT implicit
  Result(Status status) : state_(std::in_place_index<1>, std::move(status)) {}  // NOLINT implicit

  [[nodiscard]] bool ok() const noexcept { return state_.index() == 0; }
  [[nodiscard]] explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Status& status() const& {
    static const Status ok_value;
    return ok() ? ok_value : std::get<1>(state_);
  }
  [[nodiscard]] Status take_status() && { return ok() ? Status() : std::move(std::get<1>(state_)); }
  [[nodiscard]] T& value() & { return std::get<0>(state_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(state_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(state_)); }
  // The value, or `fallback` when this holds an error.
  template <class U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? std::get<0>(state_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  [[nodiscard]] T value_or(U&& fallback) && {
    return ok() ? std::get<0>(std::move(state_)) : static_cast<T>(std::forward<U>(fallback));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace ckpt

#define CKPT_CONCAT_INNER(a, b) a##b
#define CKPT_CONCAT(a, b) CKPT_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when expr fails.
#define CKPT_TRY(expr)                               \
  do {                                               \
    ::ckpt::Status ckpt_try_status_ = (expr);        \
    if (!ckpt_try_status_.ok()) return ckpt_try_status_; \
  } while (0)

#define CKPT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).take_status(); \
  lhs = std::move(tmp).value()

// `CKPT_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its Status.
#define CKPT_ASSIGN_OR_RETURN(lhs, expr) \
  CKPT_ASSIGN_OR_RETURN_IMPL(CKPT_CONCAT(ckpt_result_, __LINE__), lhs, expr)
