// ckpt: one error type with a code, and Result<T> for functions that return a value or fail.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "config.hpp"
#include "enum_name.hpp"

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
[[nodiscard]] constexpr EnumBounds<Code> enum_bounds(Code) noexcept { return {Code::ok, kLastCode}; }

[[nodiscard]] inline const char* code_name(Code c) noexcept {
  return enum_name(c, {"ok", "io", "corrupt", "incomplete", "version", "not_found", "invalid_argument", "conflict",
                       "unsupported", "cancelled"});
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

namespace detail {

// The copy and move operations of a Result<T> are those std::variant<T, Status> has: copy and move
// construction where T has them, assignment where T is also assignable. Result's own are defaulted,
// so a base that deletes one deletes it in Result (and a deleted move falls back to copy).
template <bool Copy, bool Move>
struct ResultConstruct {};
template <>
struct ResultConstruct<false, true> {
  ResultConstruct() = default;
  ResultConstruct(const ResultConstruct&) = delete;
  ResultConstruct(ResultConstruct&&) = default;
  ResultConstruct& operator=(const ResultConstruct&) = default;
  ResultConstruct& operator=(ResultConstruct&&) = default;
};
template <>
struct ResultConstruct<true, false> {
  ResultConstruct() = default;
  ResultConstruct(const ResultConstruct&) = default;
  ResultConstruct(ResultConstruct&&) = delete;
  ResultConstruct& operator=(const ResultConstruct&) = default;
  ResultConstruct& operator=(ResultConstruct&&) = default;
};
template <>
struct ResultConstruct<false, false> {
  ResultConstruct() = default;
  ResultConstruct(const ResultConstruct&) = delete;
  ResultConstruct(ResultConstruct&&) = delete;
  ResultConstruct& operator=(const ResultConstruct&) = default;
  ResultConstruct& operator=(ResultConstruct&&) = default;
};
template <bool Copy, bool Move>
struct ResultAssign {};
template <>
struct ResultAssign<false, true> {
  ResultAssign() = default;
  ResultAssign(const ResultAssign&) = default;
  ResultAssign(ResultAssign&&) = default;
  ResultAssign& operator=(const ResultAssign&) = delete;
  ResultAssign& operator=(ResultAssign&&) = default;
};
template <>
struct ResultAssign<true, false> {
  ResultAssign() = default;
  ResultAssign(const ResultAssign&) = default;
  ResultAssign(ResultAssign&&) = default;
  ResultAssign& operator=(const ResultAssign&) = default;
  ResultAssign& operator=(ResultAssign&&) = delete;
};
template <>
struct ResultAssign<false, false> {
  ResultAssign() = default;
  ResultAssign(const ResultAssign&) = default;
  ResultAssign(ResultAssign&&) = default;
  ResultAssign& operator=(const ResultAssign&) = delete;
  ResultAssign& operator=(ResultAssign&&) = delete;
};

// A T or a Status in one union (no std::variant: its instantiation per T was a large part of the
// header-only parse time, spec/LAYOUT.md 5). Copies and moves are instantiated only where used.
template <class T>
class ResultStorage {
 public:
  explicit ResultStorage(T&& value) : ok_(true) { ::new (static_cast<void*>(&value_)) T(std::move(value)); }
  explicit ResultStorage(Status&& status) : ok_(false) { ::new (static_cast<void*>(&status_)) Status(std::move(status)); }
  ResultStorage(const ResultStorage& other) : ok_(other.ok_) {
    if (ok_) ::new (static_cast<void*>(&value_)) T(other.value_);
    else ::new (static_cast<void*>(&status_)) Status(other.status_);
  }
  ResultStorage(ResultStorage&& other) noexcept(std::is_nothrow_move_constructible<T>::value) : ok_(other.ok_) {
    if (ok_) ::new (static_cast<void*>(&value_)) T(std::move(other.value_));
    else ::new (static_cast<void*>(&status_)) Status(std::move(other.status_));
  }
  ResultStorage& operator=(const ResultStorage& other) {
    if (ok_ && other.ok_) value_ = other.value_;
    else if (!ok_ && !other.ok_) status_ = other.status_;
    else if (this != &other) replace(ResultStorage(other));
    return *this;
  }
  ResultStorage& operator=(ResultStorage&& other) noexcept(std::is_nothrow_move_constructible<T>::value &&
                                                          std::is_nothrow_move_assignable<T>::value) {
    if (ok_ && other.ok_) value_ = std::move(other.value_);
    else if (!ok_ && !other.ok_) status_ = std::move(other.status_);
    else replace(std::move(other));
    return *this;
  }
  ~ResultStorage() { destroy(); }

  [[nodiscard]] bool ok() const noexcept { return ok_; }
  [[nodiscard]] T& value() noexcept { return value_; }
  [[nodiscard]] const T& value() const noexcept { return value_; }
  [[nodiscard]] Status& status() noexcept { return status_; }
  [[nodiscard]] const Status& status() const noexcept { return status_; }

 private:
  void destroy() noexcept {
    if (ok_) value_.~T();
    else status_.~Status();
  }
  // Holds what other holds, of the other kind than this holds now. A T whose move throws leaves an
  // error (where std::variant was left valueless), never a destroyed member.
  void replace(ResultStorage&& other) {
    destroy();
    ok_ = other.ok_;
    if (!ok_) {
      ::new (static_cast<void*>(&status_)) Status(std::move(other.status_));
      return;
    }
    try {
      ::new (static_cast<void*>(&value_)) T(std::move(other.value_));
    } catch (...) {
      ok_ = false;
      ::new (static_cast<void*>(&status_)) Status(Code::invalid_argument, "a result's value threw while it was moved in");
      throw;
    }
  }

  union {
    T value_;
    Status status_;
  };
  bool ok_;
};

}  // namespace detail

// Result<T>: a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result
    : detail::ResultConstruct<std::is_copy_constructible<T>::value, std::is_move_constructible<T>::value>,
      detail::ResultAssign<std::is_copy_constructible<T>::value && std::is_copy_assignable<T>::value,
                           std::is_move_constructible<T>::value && std::is_move_assignable<T>::value> {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT implicit
  Result(Status status) : state_(std::move(status)) {}  // NOLINT implicit

  [[nodiscard]] bool ok() const noexcept { return state_.ok(); }
  [[nodiscard]] explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Status& status() const& {
    static const Status ok_value;
    return ok() ? ok_value : state_.status();
  }
  [[nodiscard]] Status take_status() && { return ok() ? Status() : std::move(state_.status()); }
  [[nodiscard]] T& value() & { return checked(), state_.value(); }
  [[nodiscard]] const T& value() const& { return checked(), state_.value(); }
  [[nodiscard]] T&& value() && { return checked(), std::move(state_.value()); }
  // The value, or `fallback` when this holds an error.
  template <class U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? state_.value() : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  [[nodiscard]] T value_or(U&& fallback) && {
    return ok() ? std::move(state_.value()) : static_cast<T>(std::forward<U>(fallback));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  // The value of an error is a bug; std::get threw this when Result held a std::variant.
  void checked() const {
    if (!ok()) throw std::bad_variant_access();
  }

  detail::ResultStorage<T> state_;
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
