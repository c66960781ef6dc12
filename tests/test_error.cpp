// Tests for include/ckpt/error.hpp: Status, Result, and the early-return macros.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <type_traits>

#include <ckpt/error.hpp>

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
