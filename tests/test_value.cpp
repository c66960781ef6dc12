// Tests for include/ckpt/core/value.hpp: typed metadata values (spec/FORMAT.md 5.6).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include <ckpt/shard/index.hpp>
#include <ckpt/core/value.hpp>

using namespace ckpt;
using format::ValueType;

TEST_CASE("each constructor gives the matching type code", "[value]") {
  CHECK(Value().type() == ValueType::int64);
  CHECK(Value().as_int() == 0);
  CHECK(Value(7).type() == ValueType::int64);  // int widens to int64
  CHECK(Value(std::int64_t{-7}).as_int() == -7);
  CHECK(Value(0.5).type() == ValueType::float64);
  CHECK(Value(true).type() == ValueType::boolean);
  CHECK(Value(std::string("s")).type() == ValueType::string);
  CHECK(Value(Bytes{"\x00\x01"}).type() == ValueType::bytes);
}

TEST_CASE("a string literal is a string, not a bool", "[value]") {
  // const char* converts to bool in plain C++; the dedicated constructor must win.
  const Value v("adam");
  CHECK(v.is_string());
  CHECK_FALSE(v.is_bool());
  CHECK(v.as_string() == "adam");
  CHECK(Value("").is_string());
}

TEST_CASE("predicates and accessors agree with the stored alternative", "[value]") {
  const Value i(std::numeric_limits<std::int64_t>::min());
  CHECK((i.is_int() && !i.is_float() && !i.is_bool() && !i.is_string() && !i.is_bytes()));
  CHECK(i.as_int() == std::numeric_limits<std::int64_t>::min());
  const Value f(-0.0);
  CHECK(f.is_float());
  CHECK(std::signbit(f.as_float()));
  const Value b(false);
  CHECK((b.is_bool() && !b.as_bool()));
  const std::string raw("\x00\xff\x7f", 3);
  const Value y(Bytes{raw});
  CHECK(y.is_bytes());
  CHECK(y.as_bytes() == raw);
  CHECK_THROWS(y.as_string());  // the wrong accessor is a programming error, never a silent answer
  CHECK_THROWS(i.as_float());
}

TEST_CASE("values compare by type and content", "[value]") {
  CHECK(Value(1) == Value(std::int64_t{1}));
  CHECK(Value(1) != Value(1.0));  // int64 1 and float64 1.0 are different metadata
  CHECK(Value(1) != Value(true));
  CHECK(Value("ab") != Value(Bytes{"ab"}));  // text and raw bytes stay distinct
  CHECK(Value(Bytes{"ab"}) == Value(Bytes{"ab"}));
  CHECK(Value("ab") == Value(std::string("ab")));
  CHECK(Value("ab") != Value("abc"));
  CHECK(Value(0.0) == Value(-0.0));  // as the stored variant compares: == on the double
  CHECK(Value(std::nan("")) != Value(std::nan("")));
}

TEST_CASE("type names are the spec's", "[value]") {
  CHECK(std::string(value_type_name(ValueType::int64)) == "int64");
  CHECK(std::string(value_type_name(ValueType::float64)) == "float64");
  CHECK(std::string(value_type_name(ValueType::boolean)) == "bool");
  CHECK(std::string(value_type_name(ValueType::string)) == "string");
  CHECK(std::string(value_type_name(ValueType::bytes)) == "bytes");
  CHECK(std::string(value_type_name(static_cast<ValueType>(9))) == "unknown");
}

TEST_CASE("every value type survives the index codec exactly", "[value]") {
  Index index;
  const Value values[] = {Value(std::numeric_limits<std::int64_t>::min()), Value(std::int64_t{-1}),
                          Value(std::numeric_limits<double>::quiet_NaN()), Value(-0.0), Value(1e-310),
                          Value(true), Value(false), Value("na\xc3\xafve"), Value(""),
                          Value(Bytes{std::string("\0\0\xff", 3)}), Value(Bytes{""})};
  for (std::size_t i = 0; i < std::size(values); ++i) index.metadata.push_back(MetaEntry{"k" + std::to_string(i), values[i]});
  const std::string bytes = encode_index(index);
  Superblock sb;
  sb.alignment_log2 = 6;
  sb.data_offset = 128;
  auto back = decode_index(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), sb, 128, "values");
  REQUIRE(back.ok());
  REQUIRE(back->metadata.size() == std::size(values));
  for (std::size_t i = 0; i < std::size(values); ++i) {
    INFO("value " << i);
    const Value& got = back->metadata[i].value;
    CHECK(got.type() == values[i].type());
    if (values[i].is_float())
      CHECK(f64_bits(got.as_float()) == f64_bits(values[i].as_float()));  // NaN != NaN, bits are equal
    else
      CHECK(got == values[i]);
    CHECK(back->find_metadata("k" + std::to_string(i)) == &back->metadata[i]);
  }
}
