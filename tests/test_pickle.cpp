// Tests for include/ckpt/interop/pickle.hpp: the restricted pickle decoder on hand-written opcodes, and a
// corruption table (every truncation, unknown opcodes, underflow, bad memo, huge lengths, deep nesting).
#include <catch2/catch.hpp>

#include <ckpt/interop/pickle.hpp>

#include <string>
#include <vector>

using namespace ckpt;

namespace {

Result<PickleValue> decode(const std::string& bytes, const PickleLimits& limits = PickleLimits{}) {
  return decode_pickle(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "t.pkl", limits);
}

std::string le(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// PROTO 4, the body, STOP.
std::string p4(const std::string& body) { return std::string("\x80\x04", 2) + body + "."; }

// A small protocol 4 pickle like DCP's: Metadata-ish object, dict, memo, tuple, Size.
std::string sample() {
  std::string s("\x80\x04\x95", 3);
  std::string body;
  body += "\x8c\x03mod\x94";                   // 'mod' memo 0
  body += "\x8c\x03" "Cls\x94\x93\x94";          // 'Cls' memo 1, STACK_GLOBAL memo 2
  body += ")\x81\x94";                          // EMPTY_TUPLE NEWOBJ memo 3
  body += "}\x94(";                             // EMPTY_DICT memo 4 MARK
  body += "\x8c\x01" "a" "K\x07";               // 'a': 7
  body += std::string("\x8c\x01" "b" "h\x00" "M\x01\x02\x86", 9);  // 'b': ('mod', 513)
  body += "\x8c\x01" "c" "]\x94(\x88\x89N" "e";     // 'c': [True, False, None]
  body += "u" "b";                                // SETITEMS BUILD
  s += le(body.size() + 1, 8) + body + ".";
  return s;
}

}  // namespace

TEST_CASE("scalars of every family decode", "[pickle]") {
  struct Case {
    std::string body;
    PickleKind kind;
  };
  auto r = decode(p4("N"));
  REQUIRE(r.ok());
  CHECK(r->is_none());
  CHECK(*decode(p4("\x88")).value().as_bool());
  CHECK(!*decode(p4("\x89")).value().as_bool());
  CHECK(decode(p4("K\xff")).value().as_int() == 255);
  CHECK(decode(p4("M\x34\x12")).value().as_int() == 0x1234);
  CHECK(decode(p4("J\xfe\xff\xff\xff")).value().as_int() == -2);
  CHECK(decode(p4(std::string("\x8a\x00", 2))).value().as_int() == 0);
  CHECK(decode(p4("\x8a\x01\xff")).value().as_int() == -1);
  CHECK(decode(p4(std::string("\x8a\x02\x00\x80", 4))).value().as_int() == -32768);
  CHECK(decode(p4(std::string("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80", 10))).value().as_int() == INT64_MIN);
  CHECK(decode(p4(std::string("\x8b\x02\x00\x00\x00\xff\x7f", 7))).value().as_int() == 32767);
  auto big = decode(p4(std::string("\x8a\x09", 2) + std::string(9, '\x01')));
  REQUIRE(big.ok());
  CHECK(big->kind() == PickleKind::big_integer);
  CHECK(decode(p4("I42\n")).value().as_int() == 42);
  CHECK(decode(p4("I-7\n")).value().as_int() == -7);
  CHECK(*decode(p4("I01\n")).value().as_bool());
  CHECK(decode(p4("L123L\n")).value().as_int() == 123);
  CHECK(decode(p4(std::string("G\x3f\xf8\x00\x00\x00\x00\x00\x00", 9))).value().as_float() == 1.5);
  CHECK(decode(p4("F0.25\n")).value().as_float() == 0.25);
  CHECK(*decode(p4("\x8c\x02hi")).value().as_string() == "hi");
  CHECK(*decode(p4(std::string("X\x02\x00\x00\x00\xc3\xa9", 7))).value().as_string() == "\xc3\xa9");
  CHECK(*decode(p4("\x8d" + le(3, 8) + "abc")).value().as_string() == "abc");
  CHECK(*decode(p4("U\x03" "abc")).value().as_string() == "abc");
  CHECK(*decode(p4(std::string("T\x01\x00\x00\x00z", 6))).value().as_string() == "z");
  CHECK(*decode(p4(std::string("C\x02\x00\x01", 4))).value().as_bytes() == std::string("\x00\x01", 2));
  CHECK(*decode(p4(std::string("B\x01\x00\x00\x00q", 6))).value().as_bytes() == "q");
  CHECK(*decode(p4("\x8e" + le(2, 8) + "xy")).value().as_bytes() == "xy");
  CHECK(*decode(p4("\x96" + le(1, 8) + "w")).value().as_bytes() == "w");
}

TEST_CASE("containers, memo and objects decode into a tree", "[pickle]") {
  auto r = decode(sample());
  INFO(r.status().message());
  REQUIRE(r.ok());
  const PickleValue& v = *r;
  REQUIRE(v.kind() == PickleKind::object);
  CHECK(v.is_object_of("mod", "Cls"));
  CHECK(v.args().kind() == PickleKind::tuple);
  CHECK(v.args().size() == 0);
  const PickleValue state = v.state();
  REQUIRE(state.kind() == PickleKind::dict);
  CHECK(state.size() == 3);
  CHECK(state.get("a").as_int() == 7);
  const PickleValue b = state.get("b");
  REQUIRE(b.kind() == PickleKind::tuple);
  CHECK(*b.at(0).as_string() == "mod");  // from the memo
  CHECK(b.at(1).as_int() == 513);
  const PickleValue c = state.get("c");
  REQUIRE(c.kind() == PickleKind::list);
  REQUIRE(c.size() == 3);
  CHECK(*c.at(0).as_bool());
  CHECK(!*c.at(1).as_bool());
  CHECK(c.at(2).is_none());
  CHECK(!state.get("missing").valid());
  CHECK(pickle_repr(v) == "mod.Cls(state={'a': 7, 'b': ('mod', 513), 'c': [True, False, None]})");
  CHECK(v.offset() == 26);  // the NEWOBJ opcode
}

TEST_CASE("every container opcode", "[pickle]") {
  // TUPLE1..3, TUPLE, LIST, DICT, SETITEM, APPEND, EMPTY_SET + ADDITEMS, FROZENSET, REDUCE, NEWOBJ_EX, GLOBAL.
  auto t = decode(p4("K\x01K\x02K\x03\x87"));
  REQUIRE(t.ok());
  CHECK(t->size() == 3);
  CHECK(decode(p4("(K\x01K\x02t")).value().size() == 2);
  CHECK(decode(p4("(K\x01l")).value().kind() == PickleKind::list);
  auto d = decode(p4("(\x8c\x01kK\x05" "d"));
  REQUIRE(d.ok());
  CHECK(d->get("k").as_int() == 5);
  auto d2 = decode(p4("}\x8c\x01kK\x05s\x8c\x01kK\x06s"));  // a repeated key: the last wins on get
  REQUIRE(d2.ok());
  CHECK(d2->size() == 2);
  CHECK(d2->get("k").as_int() == 6);
  CHECK(decode(p4("]K\x01" "a")).value().size() == 1);
  auto s = decode(p4("\x8f(K\x01K\x02\x90"));
  REQUIRE(s.ok());
  CHECK(s->kind() == PickleKind::set);
  CHECK(s->size() == 2);
  CHECK(decode(p4("(K\x01\x91")).value().kind() == PickleKind::frozenset);
  auto g = decode(p4("ctorch\nSize\n(K\x02K\x03t\x85R"));
  REQUIRE(g.ok());
  CHECK(g->is_object_of("torch", "Size"));
  CHECK(g->args().at(0).at(1).as_int() == 3);
  CHECK(pickle_repr(*g) == "torch.Size((2, 3))");
  auto ex = decode(p4("cm\nC\n)}\x8c\x01xK\x01s\x92"));
  REQUIRE(ex.ok());
  CHECK(ex->kwargs().get("x").as_int() == 1);
  // POP, POP_MARK, DUP, PUT/GET text forms, LONG_BINPUT/LONG_BINGET.
  CHECK(decode(p4("K\x01K\x02" "0")).value().as_int() == 1);
  CHECK(decode(p4("K\x01(K\x02K\x03" "1")).value().as_int() == 1);
  CHECK(decode(p4("K\x09" "2\x86")).value().at(1).as_int() == 9);
  CHECK(decode(p4("K\x04p7\n0g7\n")).value().as_int() == 4);
  CHECK(decode(p4(std::string("K\x04r\x10\x00\x00\x00" "0j\x10\x00\x00\x00", 13))).value().as_int() == 4);
  // A list appended to itself: a cycle, held without recursion; repr is bounded.
  auto cyc = decode(p4(std::string("]\x94h\x00" "a", 5)));
  REQUIRE(cyc.ok());
  CHECK(cyc->at(0).at(0).at(0).kind() == PickleKind::list);
  CHECK(pickle_repr(*cyc, 1000).size() < 1000);
}

TEST_CASE("protocol 2 pickles from Python decode", "[pickle]") {
  // pickle.dumps({'a': [1, 2.5, 'x', b'y', None, True]}, protocol=2)
  const std::string bytes(
      "\x80\x02\x7d\x71\x00\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00"
      "\x00\x00\x58\x01\x00\x00\x00\x78\x71\x03\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a"
      "\x71\x04\x58\x01\x00\x00\x00\x79\x71\x05\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x06\x86\x71\x07"
      "\x52\x71\x08\x4e\x88\x65\x73\x2e",
      86);
  auto r = decode(bytes);
  REQUIRE(r.ok());
  const PickleValue list = r->get("a");
  REQUIRE(list.size() == 6);
  CHECK(list.at(1).as_float() == 2.5);
  CHECK(list.at(3).is_object_of("_codecs", "encode"));  // bytes in protocol 2: never executed, just described
}

TEST_CASE("every truncation of a valid pickle is an error, never a crash", "[pickle][corrupt]") {
  const std::string full = sample();
  REQUIRE(decode(full).ok());
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto r = decode(full.substr(0, n));
    INFO("truncated to " << n);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::corrupt);
    CHECK(r.status().message().find("t.pkl: offset ") == 0);
  }
  // Flipping each byte: decodes or fails cleanly (the sanitizers watch).
  for (std::size_t i = 0; i < full.size(); ++i)
    for (unsigned char bit : {0x01, 0x80, 0xFF}) {
      std::string bad = full;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ bit);
      (void)decode(bad).ok();
    }
}

TEST_CASE("corrupt pickles name offset, expected and found", "[pickle][corrupt]") {
  struct Case {
    const char* what;
    std::string bytes;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"empty input", "", "offset 0: expected an opcode"},
      {"unknown opcode", p4("\xff"), "offset 2: opcode 0xff: expected an opcode of the restricted subset"},
      {"persistent id refused", p4("K\x01Q"), "opcode 'Q' (0x51)"},
      {"ext refused", p4("\x82\x01"), "opcode 0x82"},
      {"protocol 6", "\x80\x06N.", "expected protocol 0 to 5, found protocol 6"},
      {"stack underflow on STOP", p4(""), "expected a value on the stack, found an empty stack"},
      {"underflow below a MARK", p4("K\x01(" "a"), "found an empty stack above the MARK"},
      {"APPEND onto a dict", p4("}K\x01" "a"), "expected the target to be a list, found a dict"},
      {"SETITEMS odd", p4("}(K\x01u"), "expected key, value pairs after the MARK, found 1 values"},
      {"TUPLE without MARK", p4("K\x01t"), "expected a MARK on the stack, found none"},
      {"TUPLE2 short", p4("K\x01\x86"), "expected 2 values on the stack, found 1"},
      {"bad memo index", p4("K\x01\x94h\x05"), "expected a memo index that was stored (1 stored), found index 5"},
      {"GET before any PUT", p4("g0\n"), "found index 0"},
      {"huge unicode length", p4("\x8d" + le(~std::uint64_t{0}, 8)), "expected 18446744073709551615 bytes of text, found only"},
      {"huge bytes length", p4("B\xff\xff\xff\xff"), "expected 4294967295 bytes of bytes"},
      {"negative BINSTRING", p4("T\xff\xff\xff\xff"), "expected a non-negative length, found -1"},
      {"huge LONG4", p4("\x8b\xff\xff\xff\x7f"), "expected an integer of at most 4096 bytes (decoder limit)"},
      {"huge frame", std::string("\x80\x04\x95", 3) + le(1000, 8) + "N.", "expected a frame of at most the 2 bytes left, found 1000 bytes"},
      {"invalid UTF-8", p4("\x8c\x01\xff"), "expected UTF-8 text, found invalid UTF-8"},
      {"STACK_GLOBAL of ints", p4("K\x01K\x02\x93"), "expected the module to be a str, found an int"},
      {"REDUCE without tuple", p4("cm\nf\nK\x01R"), "expected the arguments to be a tuple, found an int"},
      {"BUILD on a list", p4("]}b"), "expected the target of BUILD to be an object, found a list"},
      {"text INT garbage", p4("I12x\n"), "expected a decimal integer within 64 bits, found '12x'"},
      {"GLOBAL without newline", p4("cmodule"), "expected a line ending in a newline"},
      {"trailing bytes", std::string("\x80\x04N.N", 5), "offset 4: expected the end of the pickle after STOP at offset 3, found 1 more bytes"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto r = decode(c.bytes);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::corrupt);
    INFO(r.status().message());
    CHECK(r.status().message().find(c.message_part) != std::string::npos);
  }
}

TEST_CASE("decoder limits bound deep nesting and value counts", "[pickle][corrupt]") {
  // 100000 open MARKs: refused at the limit, not by running out of stack.
  auto marks = decode(p4(std::string(100000, '(')));
  REQUIRE(!marks.ok());
  CHECK(marks.status().message().find("at most 4096 open MARKs (decoder limit)") != std::string::npos);
  // Lists nested 200000 deep through the memo (no MARK): decoded iteratively; repr stops at depth 16.
  std::string deep;
  for (int i = 0; i < 200000; ++i) deep += "]";
  for (int i = 0; i < 199999; ++i) deep += "a";
  auto nested = decode(p4(deep));
  REQUIRE(nested.ok());
  CHECK(pickle_repr(*nested, 4096).find("...") != std::string::npos);
  // The value limit.
  PickleLimits small;
  small.max_nodes = 10;
  std::string many;
  for (int i = 0; i < 11; ++i) many += "K\x01";
  auto r = decode(p4(many), small);
  REQUIRE(!r.ok());
  CHECK(r.status().message().find("at most 10 values (decoder limit)") != std::string::npos);
  // None / True / False are shared and cost nothing: 100000 of them pass a limit of 10.
  std::string nones = "(" + std::string(100000, 'N') + "l";
  CHECK(decode(p4(nones), small).ok());
}
