// Tests for include/ckpt/store/training_state.hpp: the typed state codec and its hostile inputs.
#include <catch2/catch.hpp>

#include <ckpt/store/training_state.hpp>

using namespace ckpt;

namespace {

TrainingState sample_state() {
  TrainingState s;
  s.step = 77;
  s.rng = std::string("\0\xff rng", 6);
  s.data = DataPosition{2, 4096, std::string("\0state", 6)};
  s.optimizer_tensors = {"opt/m", "opt/v"};
  s.values["a.int"] = std::int64_t{-1};
  s.values["b.float"] = 0.5;
  s.values["c.bool"] = false;
  s.values["d.text"] = "naïve";
  s.values["e.bytes"] = Bytes{std::string("\x80\x81", 2)};
  return s;
}

std::string encode(const TrainingState& s) {
  Encoder e;
  encode_training_state(e, s);
  return e.str();
}

Status decode(const std::string& bytes, TrainingState& out) {
  Decoder d(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  Status s = decode_training_state(d, out, "state");
  if (s.ok() && d.remaining() != 0) return make_error(Code::corrupt, "trailing bytes");
  return s;
}

}  // namespace

TEST_CASE("training state round-trips every value type", "[training_state]") {
  const TrainingState s = sample_state();
  REQUIRE(check_training_state(s).ok());
  TrainingState back;
  back.step = 77;  // the manifest header carries the step
  REQUIRE(decode(encode(s), back).ok());
  CHECK(back == s);
  CHECK(back.values.at("d.text").as_string() == "naïve");
  CHECK(back.values.at("e.bytes").is_bytes());
}

TEST_CASE("an empty training state is 48 bytes", "[training_state]") {
  const std::string bytes = encode(TrainingState{});
  CHECK(bytes.size() == 8 + 16 + 8 + 8 + 8);
  TrainingState back;
  CHECK(decode(bytes, back).ok());
}

TEST_CASE("every truncation of a training state is refused", "[training_state]") {
  const std::string bytes = encode(sample_state());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    TrainingState back;
    INFO("cut at " << n);
    CHECK(decode(bytes.substr(0, n), back).code() == Code::corrupt);
  }
}

TEST_CASE("hostile training state encodings are refused before allocating", "[training_state]") {
  auto with = [](auto build) {
    Encoder e;
    build(e);
    return e.str();
  };
  auto prefix = [](Encoder& e) {  // empty rng and data position
    e.u64(0);
    e.u64(0);
    e.u64(0);
    e.u64(0);
  };
  struct Row {
    const char* what;
    std::string bytes;
  };
  const std::vector<Row> rows = {
      {"rng length 2^64-1", with([&](Encoder& e) { e.u64(~std::uint64_t{0}); })},
      {"data state length 2^63", with([&](Encoder& e) { e.u64(0); e.u64(0); e.u64(0); e.u64(std::uint64_t{1} << 63); })},
      {"optimizer count 2^32-1", with([&](Encoder& e) { prefix(e); e.u32(0xffffffff); e.u32(0); })},
      {"optimizer count over the bytes", with([&](Encoder& e) { prefix(e); e.u32(1000); e.u32(0); e.u32(1); e.bytes("x"); })},
      {"optimizer reserved", with([&](Encoder& e) { prefix(e); e.u32(0); e.u32(1); e.u32(0); e.u32(0); })},
      {"empty optimizer name", with([&](Encoder& e) { prefix(e); e.u32(1); e.u32(0); e.u32(0); e.u32(0); e.u32(0); })},
      {"optimizer name twice", with([&](Encoder& e) {
         prefix(e); e.u32(2); e.u32(0); e.u32(1); e.bytes("a"); e.u32(1); e.bytes("a"); e.u32(0); e.u32(0);
       })},
      {"value count 2^32-1", with([&](Encoder& e) { prefix(e); e.u32(0); e.u32(0); e.u32(0xffffffff); e.u32(0); })},
      {"unknown value type", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(9); e.u16(0); e.bytes("k"); e.u64(0);
       })},
      {"bool value 2", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(3); e.u16(0); e.bytes("k"); e.u64(2);
       })},
      {"keys out of order", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(2); e.u32(0);
         e.u32(1); e.u16(1); e.u16(0); e.bytes("b"); e.u64(0);
         e.u32(1); e.u16(1); e.u16(0); e.bytes("a"); e.u64(0);
       })},
      {"key twice", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(2); e.u32(0);
         e.u32(1); e.u16(1); e.u16(0); e.bytes("a"); e.u64(0);
         e.u32(1); e.u16(1); e.u16(0); e.bytes("a"); e.u64(0);
       })},
      {"invalid UTF-8 key", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(1); e.u16(0); e.bytes("\xff"); e.u64(0);
       })},
      {"invalid UTF-8 string value", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(4); e.u16(0); e.bytes("k"); e.u64(1); e.bytes("\xc3");
       })},
      {"string length past the end", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(5); e.u16(0); e.bytes("k"); e.u64(99);
       })},
      {"value reserved field", with([&](Encoder& e) {
         prefix(e); e.u32(0); e.u32(0); e.u32(1); e.u32(0); e.u32(1); e.u16(1); e.u16(7); e.bytes("k"); e.u64(0);
       })},
  };
  for (const auto& row : rows) {
    TrainingState back;
    INFO(row.what);
    CHECK(decode(row.bytes, back).code() == Code::corrupt);
  }
}

TEST_CASE("check_training_state refuses what decode would refuse", "[training_state]") {
  TrainingState s = sample_state();
  s.optimizer_tensors.push_back("opt/m");
  CHECK(check_training_state(s).code() == Code::invalid_argument);
  s = sample_state();
  s.values[""] = 1;
  CHECK(check_training_state(s).code() == Code::invalid_argument);
  s = sample_state();
  s.values["bad"] = std::string("\xff");
  CHECK(check_training_state(s).code() == Code::invalid_argument);
  s = sample_state();
  s.values[std::string("\xfe")] = 1;
  CHECK(check_training_state(s).code() == Code::invalid_argument);
}
