// ckpt: definitions for pickle.hpp: the restricted pickle decoder (spec/FOREIGN.md 4.3).
#pragma once

#include "../pickle.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "../../shard/index.hpp"  // valid_utf8

namespace ckpt {

CKPT_INLINE const char* pickle_kind_name(PickleKind kind) noexcept {
  // Names complete a message's "found ...", so the fallback is a phrase too.
  return enum_name(kind,
                   {"None", "a bool", "an int", "an int wider than 64 bits", "a float", "a str", "bytes", "a tuple", "a list",
                    "a dict", "a set", "a frozenset", "a global", "an object"},
                   "an unknown value");
}

// --- PickleValue accessors.

CKPT_INLINE PickleValue PickleValue::child(std::uint32_t index) const {
  if (index == PickleNode::kAbsent) return PickleValue();
  return PickleValue(nodes_, index);
}
CKPT_INLINE std::optional<std::int64_t> PickleValue::as_int() const noexcept {
  if (kind() != PickleKind::integer) return std::nullopt;
  return node().integer;
}
CKPT_INLINE std::optional<bool> PickleValue::as_bool() const noexcept {
  if (kind() != PickleKind::boolean) return std::nullopt;
  return node().integer != 0;
}
CKPT_INLINE std::optional<double> PickleValue::as_float() const noexcept {
  if (kind() == PickleKind::floating) return node().real;
  if (kind() == PickleKind::integer) return static_cast<double>(node().integer);
  return std::nullopt;
}
CKPT_INLINE const std::string* PickleValue::as_string() const noexcept {
  return kind() == PickleKind::string ? &node().text : nullptr;
}
CKPT_INLINE const std::string* PickleValue::as_bytes() const noexcept {
  return kind() == PickleKind::bytes ? &node().text : nullptr;
}
CKPT_INLINE std::size_t PickleValue::size() const noexcept {
  switch (kind()) {
    case PickleKind::tuple:
    case PickleKind::list:
    case PickleKind::set:
    case PickleKind::frozenset: return node().items.size();
    case PickleKind::dict: return node().items.size() / 2;
    default: return 0;
  }
}
CKPT_INLINE PickleValue PickleValue::at(std::size_t i) const {
  const PickleKind k = kind();
  if (k != PickleKind::tuple && k != PickleKind::list && k != PickleKind::set && k != PickleKind::frozenset) return {};
  return i < node().items.size() ? child(node().items[i]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::key(std::size_t i) const {
  return i < size() && kind() == PickleKind::dict ? child(node().items[2 * i]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::value(std::size_t i) const {
  return i < size() && kind() == PickleKind::dict ? child(node().items[2 * i + 1]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::get(std::string_view wanted) const {
  for (std::size_t i = size(); i-- > 0;) {
    if (kind() != PickleKind::dict) break;
    const std::string* k = key(i).as_string();
    if (k != nullptr && *k == wanted) return value(i);
  }
  return {};
}
CKPT_INLINE const std::string* PickleValue::module() const noexcept {
  return kind() == PickleKind::global ? &node().text : nullptr;
}
CKPT_INLINE const std::string* PickleValue::name() const noexcept {
  return kind() == PickleKind::global ? &node().name : nullptr;
}
CKPT_INLINE bool PickleValue::is_global(std::string_view module, std::string_view name) const noexcept {
  return kind() == PickleKind::global && node().text == module && node().name == name;
}
CKPT_INLINE PickleValue PickleValue::callable() const {
  return kind() == PickleKind::object ? child(node().items[0]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::args() const {
  return kind() == PickleKind::object ? child(node().items[1]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::state() const {
  return kind() == PickleKind::object ? child(node().items[2]) : PickleValue();
}
CKPT_INLINE PickleValue PickleValue::kwargs() const {
  return kind() == PickleKind::object ? child(node().items[3]) : PickleValue();
}
CKPT_INLINE bool PickleValue::is_object_of(std::string_view module, std::string_view name) const {
  return callable().is_global(module, name);
}

// --- The decoder.

namespace detail {

// The opcodes of pickle protocols 0-5 that the decoder accepts (CPython Lib/pickle.py names).
enum PickleOp : unsigned char {
  kOpMark = '(', kOpStop = '.', kOpPop = '0', kOpPopMark = '1', kOpDup = '2', kOpFloat = 'F', kOpInt = 'I',
  kOpBinInt = 'J', kOpBinInt1 = 'K', kOpLong = 'L', kOpBinInt2 = 'M', kOpNone = 'N', kOpReduce = 'R',
  kOpBinString = 'T', kOpShortBinString = 'U', kOpBinUnicode = 'X', kOpAppend = 'a', kOpBuild = 'b',
  kOpGlobal = 'c', kOpDict = 'd', kOpEmptyDict = '}', kOpAppends = 'e', kOpGet = 'g', kOpBinGet = 'h',
  kOpLongBinGet = 'j', kOpList = 'l', kOpEmptyList = ']', kOpPut = 'p', kOpBinPut = 'q', kOpLongBinPut = 'r',
  kOpSetItem = 's', kOpTuple = 't', kOpEmptyTuple = ')', kOpSetItems = 'u', kOpBinFloat = 'G',
  kOpBinBytes = 'B', kOpShortBinBytes = 'C',
  kOpProto = 0x80, kOpNewObj = 0x81, kOpTuple1 = 0x85, kOpTuple2 = 0x86, kOpTuple3 = 0x87, kOpNewTrue = 0x88,
  kOpNewFalse = 0x89, kOpLong1 = 0x8a, kOpLong4 = 0x8b, kOpShortBinUnicode = 0x8c, kOpBinUnicode8 = 0x8d,
  kOpBinBytes8 = 0x8e, kOpEmptySet = 0x8f, kOpAddItems = 0x90, kOpFrozenSet = 0x91, kOpNewObjEx = 0x92,
  kOpStackGlobal = 0x93, kOpMemoize = 0x94, kOpFrame = 0x95, kOpByteArray8 = 0x96,
};

[[nodiscard]] CKPT_INLINE std::string pickle_opcode_text(unsigned char op) {
  char buf[16];
  if (op >= 0x21 && op < 0x7F && op != '\'')
    std::snprintf(buf, sizeof buf, "'%c' (0x%02x)", op, op);
  else
    std::snprintf(buf, sizeof buf, "0x%02x", op);
  return buf;
}

class PickleDecoder {
 public:
  PickleDecoder(const unsigned char* data, std::size_t size, const std::string& where, const PickleLimits& limits)
      : data_(data), size_(size), where_(where), limits_(limits), nodes_(std::make_shared<std::vector<PickleNode>>()) {}

  [[nodiscard]] Result<PickleValue> run() {
    // None, False, True are immutable and shared: nodes 0, 1, 2.
    nodes().resize(3);
    nodes()[0].kind = PickleKind::none;
    nodes()[1].kind = PickleKind::boolean;
    nodes()[2].kind = PickleKind::boolean;
    nodes()[2].integer = 1;
    while (pos_ < size_) {
      op_at_ = pos_;
      op_ = data_[pos_++];
      bool stop = false;
      CKPT_TRY(step(stop));
      if (stop) {
        if (pos_ != size_)
          return make_error(Code::corrupt, where_ + ": offset " + std::to_string(pos_) + ": expected the end of the pickle after STOP at offset " +
                                               std::to_string(op_at_) + ", found " + std::to_string(size_ - pos_) + " more bytes");
        return PickleValue(nodes_, result_);
      }
    }
    return make_error(Code::corrupt, where_ + ": offset " + std::to_string(size_) + ": expected an opcode (the pickle ends without STOP), found the end of the input");
  }

 private:
  std::vector<PickleNode>& nodes() { return *nodes_; }

  [[nodiscard]] Status fail(const std::string& expected, const std::string& found) const {
    return make_error(Code::corrupt, where_ + ": offset " + std::to_string(op_at_) + ": opcode " + pickle_opcode_text(op_) + ": expected " +
                                         expected + ", found " + found);
  }
  [[nodiscard]] Status need(std::uint64_t n, const char* what) const {
    if (n > size_ - pos_)
      return fail(std::to_string(n) + " bytes of " + what, "only " + std::to_string(size_ - pos_) + " left in the input");
    return Status();
  }
  [[nodiscard]] std::uint64_t take_le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | data_[pos_ + i];
    pos_ += n;
    return v;
  }
  // A protocol 0 argument: the bytes up to the next '\n', which is consumed.
  [[nodiscard]] Status take_line(std::string_view& line) {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (nl == nullptr) return fail("a line ending in a newline", "the end of the input");
    const auto end = static_cast<std::size_t>(static_cast<const unsigned char*>(nl) - data_);
    line = std::string_view(reinterpret_cast<const char*>(data_ + pos_), end - pos_);
    pos_ = end + 1;
    return Status();
  }

  [[nodiscard]] Result<std::uint32_t> new_node(PickleKind kind) {
    if (nodes().size() >= limits_.max_nodes + 3)
      return fail("at most " + std::to_string(limits_.max_nodes) + " values (decoder limit)", "more");
    PickleNode n;
    n.kind = kind;
    n.offset = op_at_;
    nodes().push_back(std::move(n));
    return static_cast<std::uint32_t>(nodes().size() - 1);
  }
  [[nodiscard]] Status push_new(PickleKind kind, std::uint32_t* made = nullptr) {
    auto n = new_node(kind);
    if (!n.ok()) return n.status();
    stack_.push_back(*n);
    if (made != nullptr) *made = *n;
    return Status();
  }
  [[nodiscard]] Status push_int(std::int64_t v) {
    std::uint32_t n = 0;
    CKPT_TRY(push_new(PickleKind::integer, &n));
    nodes()[n].integer = v;
    return Status();
  }
  [[nodiscard]] Status push_text(PickleKind kind, std::uint64_t length, const char* what) {
    CKPT_TRY(need(length, what));
    std::string text(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    if (kind == PickleKind::string && !valid_utf8(text)) return fail("UTF-8 text", "invalid UTF-8");
    std::uint32_t n = 0;
    CKPT_TRY(push_new(kind, &n));
    nodes()[n].text = std::move(text);
    return Status();
  }

  [[nodiscard]] std::size_t floor() const noexcept { return marks_.empty() ? 0 : marks_.back(); }
  // Pops the top value above the current MARK.
  [[nodiscard]] Status pop(std::uint32_t& out) {
    if (stack_.size() <= floor()) return fail("a value on the stack", "an empty stack" + std::string(marks_.empty() ? "" : " above the MARK"));
    out = stack_.back();
    stack_.pop_back();
    return Status();
  }
  [[nodiscard]] Status top(std::uint32_t& out) const {
    if (stack_.size() <= floor()) return fail("a value on the stack", "an empty stack" + std::string(marks_.empty() ? "" : " above the MARK"));
    out = stack_.back();
    return Status();
  }
  // Pops everything above the last MARK and the MARK.
  [[nodiscard]] Status pop_mark(std::vector<std::uint32_t>& items) {
    if (marks_.empty()) return fail("a MARK on the stack", "none");
    const std::size_t at = marks_.back();
    marks_.pop_back();
    items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return Status();
  }
  [[nodiscard]] Status expect_kind(std::uint32_t n, PickleKind kind, const char* role) const {
    const PickleKind found = (*nodes_)[n].kind;
    if (found != kind)
      return fail(std::string(role) + " to be " + pickle_kind_name(kind), pickle_kind_name(found));
    return Status();
  }
  [[nodiscard]] Status make_container(PickleKind kind, std::vector<std::uint32_t> items) {
    std::uint32_t n = 0;
    CKPT_TRY(push_new(kind, &n));
    nodes()[n].items = std::move(items);
    return Status();
  }
  [[nodiscard]] Status make_object(std::uint32_t callable, std::uint32_t args, std::uint32_t kwargs) {
    std::uint32_t n = 0;
    CKPT_TRY(push_new(PickleKind::object, &n));
    nodes()[n].items = {callable, args, PickleNode::kAbsent, kwargs};
    return Status();
  }
  [[nodiscard]] Status memo_put(std::uint64_t index) {
    std::uint32_t v = 0;
    CKPT_TRY(top(v));
    if (index > 0xFFFFFFFEull) return fail("a memo index below 2^32 - 1", std::to_string(index));
    memo_[static_cast<std::uint32_t>(index)] = v;
    return Status();
  }
  [[nodiscard]] Status memo_get(std::uint64_t index) {
    const auto it = index > 0xFFFFFFFEull ? memo_.end() : memo_.find(static_cast<std::uint32_t>(index));
    if (it == memo_.end())
      return fail("a memo index that was stored (" + std::to_string(memo_.size()) + " stored)", "index " + std::to_string(index));
    stack_.push_back(it->second);
    return Status();
  }
  [[nodiscard]] Status parse_decimal(std::string_view line, std::int64_t& out) const {
    std::string text(line);
    if (!text.empty() && (text.back() == 'L')) text.pop_back();  // protocol 0 LONG: "123L"
    if (text.empty() || text.size() > 20) return fail("a decimal integer within 64 bits", "'" + std::string(line.substr(0, 24)) + "'");
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end != text.c_str() + text.size() || text[0] == ' ' || text[0] == '+')
      return fail("a decimal integer within 64 bits", "'" + text + "'");
    out = v;
    return Status();
  }
  [[nodiscard]] Status push_long(std::uint64_t length) {
    if (length > limits_.max_long_bytes)
      return fail("an integer of at most " + std::to_string(limits_.max_long_bytes) + " bytes (decoder limit)", std::to_string(length) + " bytes");
    CKPT_TRY(need(length, "integer"));
    if (length <= 8) {
      std::uint64_t v = take_le(static_cast<std::size_t>(length));
      if (length > 0 && length < 8 && (v >> (8 * length - 1)) != 0) v |= ~std::uint64_t{0} << (8 * length);  // sign-extend
      return push_int(static_cast<std::int64_t>(v));
    }
    return push_text(PickleKind::big_integer, length, "integer");
  }

  // One opcode (op_), read past; stop is set at STOP. Protocol, framing and stack opcodes here, the
  // rest in step_scalar, step_container and step_reference, each handing on what it does not know.
  [[nodiscard]] Status step(bool& stop) {
    switch (op_) {
      case kOpProto: {
        CKPT_TRY(need(1, "protocol number"));
        const unsigned proto = data_[pos_++];
        if (proto > 5) return fail("protocol 0 to 5", "protocol " + std::to_string(proto));
        return Status();
      }
      case kOpFrame: {  // framing only groups opcodes; its length must still lie within the input
        CKPT_TRY(need(8, "frame length"));
        const std::uint64_t length = take_le(8);
        if (length > size_ - pos_)
          return fail("a frame of at most the " + std::to_string(size_ - pos_) + " bytes left", std::to_string(length) + " bytes");
        return Status();
      }
      case kOpStop: {
        std::uint32_t v = 0;
        CKPT_TRY(pop(v));
        result_ = v;
        stop = true;
        return Status();
      }
      case kOpMark:
        if (marks_.size() >= limits_.max_marks)
          return fail("at most " + std::to_string(limits_.max_marks) + " open MARKs (decoder limit)", "more");
        marks_.push_back(stack_.size());
        return Status();
      case kOpPop: {
        if (stack_.size() > floor()) {
          stack_.pop_back();
          return Status();
        }
        std::vector<std::uint32_t> ignored;
        return pop_mark(ignored);
      }
      case kOpPopMark: {
        std::vector<std::uint32_t> ignored;
        return pop_mark(ignored);
      }
      case kOpDup: {
        std::uint32_t v = 0;
        CKPT_TRY(top(v));
        stack_.push_back(v);
        return Status();
      }
      default:
        return step_scalar();
    }
  }

  // Opcodes that push one scalar: None, booleans, integers, floats, strings and bytes.
  [[nodiscard]] Status step_scalar() {
    switch (op_) {
      case kOpNone: stack_.push_back(0); return Status();
      case kOpNewFalse: stack_.push_back(1); return Status();
      case kOpNewTrue: stack_.push_back(2); return Status();
      case kOpBinInt1: CKPT_TRY(need(1, "integer")); return push_int(static_cast<std::int64_t>(take_le(1)));
      case kOpBinInt2: CKPT_TRY(need(2, "integer")); return push_int(static_cast<std::int64_t>(take_le(2)));
      case kOpBinInt:
        CKPT_TRY(need(4, "integer"));
        return push_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(take_le(4))));
      case kOpLong1: CKPT_TRY(need(1, "length")); return push_long(take_le(1));
      case kOpLong4: {
        CKPT_TRY(need(4, "length"));
        const auto length = static_cast<std::int32_t>(static_cast<std::uint32_t>(take_le(4)));
        if (length < 0) return fail("a non-negative length", std::to_string(length));
        return push_long(static_cast<std::uint64_t>(length));
      }
      case kOpInt:
      case kOpLong: {
        std::string_view line;
        CKPT_TRY(take_line(line));
        if (op_ == kOpInt && line == "00") { stack_.push_back(1); return Status(); }
        if (op_ == kOpInt && line == "01") { stack_.push_back(2); return Status(); }
        std::int64_t v = 0;
        CKPT_TRY(parse_decimal(line, v));
        return push_int(v);
      }
      case kOpFloat: {
        std::string_view line;
        CKPT_TRY(take_line(line));
        const std::string text(line);
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return fail("a decimal float", "'" + text.substr(0, 24) + "'");
        std::uint32_t n = 0;
        CKPT_TRY(push_new(PickleKind::floating, &n));
        nodes()[n].real = v;
        return Status();
      }
      case kOpBinFloat: {
        CKPT_TRY(need(8, "float"));
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | data_[pos_ + static_cast<std::size_t>(i)];  // big-endian
        pos_ += 8;
        double v = 0;
        std::memcpy(&v, &bits, sizeof v);
        std::uint32_t n = 0;
        CKPT_TRY(push_new(PickleKind::floating, &n));
        nodes()[n].real = v;
        return Status();
      }
      case kOpShortBinUnicode: CKPT_TRY(need(1, "length")); return push_text(PickleKind::string, take_le(1), "text");
      case kOpBinUnicode: CKPT_TRY(need(4, "length")); return push_text(PickleKind::string, take_le(4), "text");
      case kOpBinUnicode8: CKPT_TRY(need(8, "length")); return push_text(PickleKind::string, take_le(8), "text");
      case kOpShortBinString: CKPT_TRY(need(1, "length")); return push_text(PickleKind::string, take_le(1), "text");
      case kOpBinString: {
        CKPT_TRY(need(4, "length"));
        const auto length = static_cast<std::int32_t>(static_cast<std::uint32_t>(take_le(4)));
        if (length < 0) return fail("a non-negative length", std::to_string(length));
        return push_text(PickleKind::string, static_cast<std::uint64_t>(length), "text");
      }
      case kOpShortBinBytes: CKPT_TRY(need(1, "length")); return push_text(PickleKind::bytes, take_le(1), "bytes");
      case kOpBinBytes: CKPT_TRY(need(4, "length")); return push_text(PickleKind::bytes, take_le(4), "bytes");
      case kOpBinBytes8:
      case kOpByteArray8: CKPT_TRY(need(8, "length")); return push_text(PickleKind::bytes, take_le(8), "bytes");
      default:
        return step_container();
    }
  }

  // Opcodes that build or fill a container: tuples, lists, dicts, sets.
  [[nodiscard]] Status step_container() {
    switch (op_) {
      case kOpEmptyTuple: return make_container(PickleKind::tuple, {});
      case kOpEmptyList: return make_container(PickleKind::list, {});
      case kOpEmptyDict: return make_container(PickleKind::dict, {});
      case kOpEmptySet: return make_container(PickleKind::set, {});
      case kOpTuple1:
      case kOpTuple2:
      case kOpTuple3: {
        const std::size_t n = static_cast<std::size_t>(op_ - kOpTuple1) + 1;
        if (stack_.size() - floor() < n)
          return fail(std::to_string(n) + " values on the stack", std::to_string(stack_.size() - floor()));
        std::vector<std::uint32_t> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        return make_container(PickleKind::tuple, std::move(items));
      }
      case kOpTuple:
      case kOpList:
      case kOpFrozenSet: {
        std::vector<std::uint32_t> items;
        CKPT_TRY(pop_mark(items));
        return make_container(op_ == kOpTuple ? PickleKind::tuple : op_ == kOpList ? PickleKind::list : PickleKind::frozenset,
                              std::move(items));
      }
      case kOpDict: {
        std::vector<std::uint32_t> items;
        CKPT_TRY(pop_mark(items));
        if (items.size() % 2 != 0) return fail("key, value pairs after the MARK", std::to_string(items.size()) + " values");
        return make_container(PickleKind::dict, std::move(items));
      }
      case kOpAppend: {
        std::uint32_t v = 0, list = 0;
        CKPT_TRY(pop(v));
        CKPT_TRY(top(list));
        CKPT_TRY(expect_kind(list, PickleKind::list, "the target"));
        nodes()[list].items.push_back(v);
        return Status();
      }
      case kOpAppends:
      case kOpSetItems:
      case kOpAddItems: {
        std::vector<std::uint32_t> items;
        CKPT_TRY(pop_mark(items));
        std::uint32_t target = 0;
        CKPT_TRY(top(target));
        const PickleKind want = op_ == kOpAppends ? PickleKind::list : op_ == kOpSetItems ? PickleKind::dict : PickleKind::set;
        CKPT_TRY(expect_kind(target, want, "the target"));
        if (op_ == kOpSetItems && items.size() % 2 != 0)
          return fail("key, value pairs after the MARK", std::to_string(items.size()) + " values");
        auto& dst = nodes()[target].items;
        dst.insert(dst.end(), items.begin(), items.end());
        return Status();
      }
      case kOpSetItem: {
        std::uint32_t v = 0, k = 0, dict = 0;
        CKPT_TRY(pop(v));
        CKPT_TRY(pop(k));
        CKPT_TRY(top(dict));
        CKPT_TRY(expect_kind(dict, PickleKind::dict, "the target"));
        nodes()[dict].items.push_back(k);
        nodes()[dict].items.push_back(v);
        return Status();
      }
      default:
        return step_reference();
    }
  }

  // Opcodes of the memo, globals and objects; anything else is refused.
  [[nodiscard]] Status step_reference() {
    switch (op_) {
      case kOpMemoize: return memo_put(memo_.size());
      case kOpBinPut: CKPT_TRY(need(1, "memo index")); return memo_put(take_le(1));
      case kOpLongBinPut: CKPT_TRY(need(4, "memo index")); return memo_put(take_le(4));
      case kOpBinGet: CKPT_TRY(need(1, "memo index")); return memo_get(take_le(1));
      case kOpLongBinGet: CKPT_TRY(need(4, "memo index")); return memo_get(take_le(4));
      case kOpPut:
      case kOpGet: {
        std::string_view line;
        CKPT_TRY(take_line(line));
        std::int64_t index = 0;
        CKPT_TRY(parse_decimal(line, index));
        if (index < 0) return fail("a non-negative memo index", std::to_string(index));
        return op_ == kOpPut ? memo_put(static_cast<std::uint64_t>(index)) : memo_get(static_cast<std::uint64_t>(index));
      }
      case kOpGlobal: {
        std::string_view module, name;
        CKPT_TRY(take_line(module));
        CKPT_TRY(take_line(name));
        if (!valid_utf8(module) || !valid_utf8(name)) return fail("a module and name in UTF-8", "invalid UTF-8");
        std::uint32_t n = 0;
        CKPT_TRY(push_new(PickleKind::global, &n));
        nodes()[n].text = std::string(module);
        nodes()[n].name = std::string(name);
        return Status();
      }
      case kOpStackGlobal: {
        std::uint32_t name = 0, module = 0;
        CKPT_TRY(pop(name));
        CKPT_TRY(pop(module));
        CKPT_TRY(expect_kind(module, PickleKind::string, "the module"));
        CKPT_TRY(expect_kind(name, PickleKind::string, "the name"));
        // Each copies its strings: charged to the input, or a memoized long string named again and
        // again grows the tree thousands of times past its input (spec/FOREIGN.md 4.3).
        global_text_ += nodes()[module].text.size() + nodes()[name].text.size();
        if (global_text_ > size_)
          return fail("globals whose module and name total at most the input's " + std::to_string(size_) + " bytes (decoder limit)",
                      std::to_string(global_text_) + " bytes");
        std::uint32_t n = 0;
        CKPT_TRY(push_new(PickleKind::global, &n));
        nodes()[n].text = nodes()[module].text;
        nodes()[n].name = nodes()[name].text;
        return Status();
      }
      case kOpReduce:
      case kOpNewObj: {
        std::uint32_t args = 0, callable = 0;
        CKPT_TRY(pop(args));
        CKPT_TRY(pop(callable));
        CKPT_TRY(expect_kind(args, PickleKind::tuple, "the arguments"));
        return make_object(callable, args, PickleNode::kAbsent);
      }
      case kOpNewObjEx: {
        std::uint32_t kwargs = 0, args = 0, cls = 0;
        CKPT_TRY(pop(kwargs));
        CKPT_TRY(pop(args));
        CKPT_TRY(pop(cls));
        CKPT_TRY(expect_kind(args, PickleKind::tuple, "the arguments"));
        CKPT_TRY(expect_kind(kwargs, PickleKind::dict, "the keyword arguments"));
        return make_object(cls, args, kwargs);
      }
      case kOpBuild: {
        std::uint32_t state = 0, object = 0;
        CKPT_TRY(pop(state));
        CKPT_TRY(top(object));
        CKPT_TRY(expect_kind(object, PickleKind::object, "the target of BUILD"));
        nodes()[object].items[2] = state;  // a second BUILD replaces the state (Python would merge it)
        return Status();
      }
      default:
        return fail("an opcode of the restricted subset (spec/FOREIGN.md 4.3)", "an unknown or refused opcode");
    }
  }

  const unsigned char* data_;
  std::size_t size_;
  const std::string& where_;
  PickleLimits limits_;
  std::shared_ptr<std::vector<PickleNode>> nodes_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;  // stack heights at each open MARK
  std::unordered_map<std::uint32_t, std::uint32_t> memo_;
  std::size_t pos_ = 0, op_at_ = 0;
  std::uint64_t global_text_ = 0;  // bytes STACK_GLOBAL copied
  unsigned char op_ = 0;
  std::uint32_t result_ = 0;
};

// Appends a rendering of v, at most `budget` more characters, `depth` levels deep.
CKPT_INLINE void pickle_repr_into(const PickleValue& v, std::string& out, std::size_t limit, int depth) {
  if (out.size() >= limit) return;
  if (depth > 16) {
    out += "...";
    return;
  }
  auto quoted = [&](const std::string& s, const char* prefix) {
    out += prefix;
    out += '\'';
    for (const char ch : s) {
      if (out.size() >= limit) return;
      const auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\') {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += ch;
      }
    }
    out += '\'';
  };
  auto sequence = [&](const char* open, const char* close) {
    out += open;
    for (std::size_t i = 0; i < v.size() && out.size() < limit; ++i) {
      if (i > 0) out += ", ";
      pickle_repr_into(v.at(i), out, limit, depth + 1);
    }
    if (v.kind() == PickleKind::tuple && v.size() == 1) out += ",";
    out += close;
  };
  switch (v.kind()) {
    case PickleKind::none: out += v.valid() ? "None" : "<missing>"; return;
    case PickleKind::boolean: out += *v.as_bool() ? "True" : "False"; return;
    case PickleKind::integer: out += std::to_string(*v.as_int()); return;
    case PickleKind::big_integer: out += "<int wider than 64 bits>"; return;
    case PickleKind::floating: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", *v.as_float());
      out += buf;
      return;
    }
    case PickleKind::string: quoted(*v.as_string(), ""); return;
    case PickleKind::bytes: quoted(*v.as_bytes(), "b"); return;
    case PickleKind::tuple: sequence("(", ")"); return;
    case PickleKind::list: sequence("[", "]"); return;
    case PickleKind::set: sequence("{", "}"); return;
    case PickleKind::frozenset: sequence("frozenset({", "})"); return;
    case PickleKind::dict:
      out += "{";
      for (std::size_t i = 0; i < v.size() && out.size() < limit; ++i) {
        if (i > 0) out += ", ";
        pickle_repr_into(v.key(i), out, limit, depth + 1);
        out += ": ";
        pickle_repr_into(v.value(i), out, limit, depth + 1);
      }
      out += "}";
      return;
    case PickleKind::global: out += *v.module() + "." + *v.name(); return;
    case PickleKind::object: {
      pickle_repr_into(v.callable(), out, limit, depth + 1);
      out += "(";
      const PickleValue args = v.args();
      for (std::size_t i = 0; i < args.size() && out.size() < limit; ++i) {
        if (i > 0) out += ", ";
        pickle_repr_into(args.at(i), out, limit, depth + 1);
      }
      if (v.state().valid()) {
        out += args.size() > 0 ? ", " : "";
        out += "state=";
        pickle_repr_into(v.state(), out, limit, depth + 1);
      }
      out += ")";
      return;
    }
  }
}

}  // namespace detail

[[nodiscard]] CKPT_INLINE Result<PickleValue> decode_pickle(const unsigned char* data, std::size_t size, const std::string& where,
                                                            const PickleLimits& limits) {
  if (data == nullptr && size > 0) return make_error(Code::invalid_argument, where + ": no bytes to decode");
  detail::PickleDecoder decoder(data, size, where, limits);
  return decoder.run();
}

CKPT_INLINE std::string pickle_repr(const PickleValue& value, std::size_t max_chars) {
  std::string out;
  detail::pickle_repr_into(value, out, max_chars, 0);
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

}  // namespace ckpt
