// Tests for include/ckpt/core/error.hpp: Status, Result, and the early-return macros.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>

#include <ckpt/core/error.hpp>

using namespace ckpt;

namespace {

Status fails_when(bool fail) { return fail ? make_error(Code::corrupt, "f: offset 8: bad") : Status(); }

int calls_after_try = 0;
Status try_twice(bool first_fails) {
  CKPT_TRY(fails_when(first_fails));
  ++calls_after_try;
  CKPT_TRY(fails_when(false));
  return Status();
}

Result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return make_error(Code::invalid_argument, std::string("not a digit: ") + c);
  return c - '0';
}

Result<int> sum_digits(char a, char b) {
  CKPT_ASSIGN_OR_RETURN(const int x, parse_digit(a));
  CKPT_ASSIGN_OR_RETURN(const int y, parse_digit(b));  // two on nearby lines: distinct temporaries
  return x + y;
}

Result<std::unique_ptr<int>> make_owned(bool ok) {
  if (!ok) return make_error(Code::not_found, "nothing");
  return std::make_unique<int>(7);
}

Result<int> owned_plus_one(bool ok) {
  CKPT_ASSIGN_OR_RETURN(auto p, make_owned(ok));
  return *p + 1;
}

}  // namespace

TEST_CASE("every code has a stable name", "[error]") {
  const std::pair<Code, const char*> names[] = {
      {Code::ok, "ok"},
      {Code::io, "io"},
      {Code::corrupt, "corrupt"},
      {Code::incomplete, "incomplete"},
      {Code::version, "version"},
      {Code::not_found, "not_found"},
      {Code::invalid_argument, "invalid_argument"},
      {Code::conflict, "conflict"},
      {Code::unsupported, "unsupported"},
      {Code::cancelled, "cancelled"},
  };
  for (const auto& [code, name] : names) CHECK(std::string(code_name(code)) == name);
  CHECK(std::string(code_name(static_cast<Code>(200))) == "unknown");
}

TEST_CASE("a default status is ok and an error keeps its code and message", "[error]") {
  const Status ok;
  CHECK(ok.ok());
  CHECK(ok.code() == Code::ok);
  CHECK(ok.message().empty());
  CHECK(ok.to_string() == "ok");
  CHECK(Status::ok_status().ok());

  const Status bad = make_error(Code::incomplete, "a.ckpt: offset 100: no footer");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == Code::incomplete);
  CHECK(bad.message() == "a.ckpt: offset 100: no footer");
  CHECK(bad.to_string() == "incomplete: a.ckpt: offset 100: no footer");
  bad.ignore_error();  // explicit, searchable discard
}

TEST_CASE("context goes in front of an error and leaves ok alone", "[error]") {
  const Status bad = make_error(Code::io, "EIO");
  const Status wrapped = bad.with_context("step-7/shard-0.ckpt");
  CHECK(wrapped.code() == Code::io);
  CHECK(wrapped.message() == "step-7/shard-0.ckpt: EIO");
  CHECK(wrapped.with_context("store").message() == "store: step-7/shard-0.ckpt: EIO");
  const Status ok;
  CHECK(ok.with_context("ignored").ok());
  CHECK(ok.with_context("ignored").message().empty());
}

TEST_CASE("a result holds a value or a non-ok status", "[error]") {
  Result<int> good = 42;
  REQUIRE(good.ok());
  CHECK(good.value() == 42);
  CHECK(*good == 42);
  CHECK(good.status().ok());
  Result<int> bad = make_error(Code::version, "format version 2");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::version);
  const Status taken = std::move(bad).take_status();
  CHECK(taken.code() == Code::version);
  CHECK(taken.message() == "format version 2");
  Result<std::string> text = std::string("abc");
  CHECK(text->size() == 3);
  CHECK(std::move(text).take_status().ok());
}

TEST_CASE("a result can hold a move-only value", "[error]") {
  auto r = make_owned(true);
  REQUIRE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  REQUIRE(p != nullptr);
  CHECK(*p == 7);
  CHECK(make_owned(false).status().code() == Code::not_found);
}

TEST_CASE("CKPT_TRY returns the first error and runs nothing after it", "[error]") {
  calls_after_try = 0;
  CHECK(try_twice(false).ok());
  CHECK(calls_after_try == 1);
  const Status s = try_twice(true);
  CHECK(s.code() == Code::corrupt);
  CHECK(s.message() == "f: offset 8: bad");
  CHECK(calls_after_try == 1);
}

TEST_CASE("CKPT_ASSIGN_OR_RETURN unwraps values and forwards errors", "[error]") {
  auto sum = sum_digits('3', '4');
  REQUIRE(sum.ok());
  CHECK(*sum == 7);
  auto first_bad = sum_digits('x', '4');
  CHECK(first_bad.status().code() == Code::invalid_argument);
  CHECK(first_bad.status().message() == "not a digit: x");
  CHECK(sum_digits('1', 'y').status().message() == "not a digit: y");
  CHECK(*owned_plus_one(true) == 8);
  CHECK(owned_plus_one(false).status().code() == Code::not_found);
}

TEST_CASE("Result and Status test as booleans and give a fallback value", "[error]") {
  Result<int> good(3), bad(make_error(Code::not_found, "no"));
  CHECK(static_cast<bool>(good));
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(good.value_or(9) == 3);
  CHECK(bad.value_or(9) == 9);
  CHECK(Result<std::string>(make_error(Code::io, "x")).value_or("fallback") == "fallback");
  CHECK(static_cast<bool>(Status()));
  CHECK_FALSE(static_cast<bool>(make_error(Code::io, "x")));
  static_assert(!std::is_convertible_v<Result<int>, bool>, "explicit: a Result never turns into an int by accident");
}

namespace {
struct NoMoveAssign {  // like ShardWriter: movable, never move-assigned (spec/LAYOUT.md 3.4)
  NoMoveAssign() = default;
  NoMoveAssign(NoMoveAssign&&) = default;
  NoMoveAssign& operator=(NoMoveAssign&&) = delete;
};
}  // namespace

TEST_CASE("a result copies, moves and assigns exactly where std::variant<T, Status> would", "[error]") {
  using Owned = Result<std::unique_ptr<int>>;
  using Variant = std::variant<std::unique_ptr<int>, Status>;
  static_assert(!std::is_copy_constructible_v<Owned> && !std::is_copy_assignable_v<Owned>);
  static_assert(std::is_move_constructible_v<Owned> && std::is_move_assignable_v<Owned>);
  static_assert(std::is_nothrow_move_constructible_v<Owned> == std::is_nothrow_move_constructible_v<Variant>);
  static_assert(std::is_copy_constructible_v<Result<std::string>> && std::is_copy_assignable_v<Result<std::string>>);
  static_assert(std::is_move_constructible_v<Result<NoMoveAssign>> && !std::is_move_assignable_v<Result<NoMoveAssign>>);
  static_assert(!std::is_default_constructible_v<Result<int>>);

  // Every pair of states, by copy and by move: a value over an error, an error over a value, and alike.
  const Result<std::string> value = std::string("v"), error = make_error(Code::io, "e");
  for (const auto* from : {&value, &error}) {
    for (const auto* to : {&value, &error}) {
      Result<std::string> copied = *to;
      copied = *from;
      Result<std::string> moved = *to, source = *from;
      moved = std::move(source);
      for (const auto* r : {&copied, &moved}) {
        REQUIRE(r->ok() == from->ok());
        if (r->ok()) CHECK(r->value() == "v");
        else CHECK(r->status().message() == "e");
      }
    }
  }
  Result<std::string> self = std::string("kept");
  const Result<std::string>& alias = self;
  self = alias;
  CHECK(*self == "kept");
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(1);
  owned = make_owned(true);
  CHECK(**owned == 7);
  owned = make_error(Code::conflict, "held");
  CHECK(owned.status().code() == Code::conflict);
}

TEST_CASE("the value of an error result is a bug that throws", "[error]") {
  Result<int> bad = make_error(Code::io, "x");
  CHECK_THROWS_AS(bad.value(), std::bad_variant_access);
  CHECK_THROWS_AS(*bad, std::bad_variant_access);
  CHECK(bad.value_or(5) == 5);
}

namespace {
struct MoveThrowsWhenArmed {
  static inline bool armed = false;
  MoveThrowsWhenArmed() = default;
  MoveThrowsWhenArmed(const MoveThrowsWhenArmed&) = default;
  MoveThrowsWhenArmed(MoveThrowsWhenArmed&&) {
    if (armed) throw std::runtime_error("move");
  }
  MoveThrowsWhenArmed& operator=(const MoveThrowsWhenArmed&) = default;
  MoveThrowsWhenArmed& operator=(MoveThrowsWhenArmed&&) = default;
};
}  // namespace

TEST_CASE("a value whose move throws leaves an error result, never a destroyed one", "[error]") {
  const Result<MoveThrowsWhenArmed> value = MoveThrowsWhenArmed();
  Result<MoveThrowsWhenArmed> r = make_error(Code::io, "x");
  MoveThrowsWhenArmed::armed = true;
  CHECK_THROWS_AS(r = value, std::runtime_error);  // copied first, then moved in over the error
  MoveThrowsWhenArmed::armed = false;
  CHECK_FALSE(r.ok());
  CHECK(r.status().code() == Code::invalid_argument);
}
