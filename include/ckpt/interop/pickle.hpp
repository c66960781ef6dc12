// ckpt: a restricted decoder of Python pickles (protocols 0-5, the opcodes spec/FOREIGN.md 4.3 lists)
// that never executes anything: it is a stack machine that builds a tree of values in which a global
// is just its (module, name) and REDUCE / NEWOBJ / BUILD make an "object" node (callable, args,
// state). PyTorch DCP's .metadata is such a pickle. Input is hostile: every length is checked
// against the bytes left, memory is bounded by the limits below, decoding is iterative (no recursion a
// crafted input can drive), and every error names the input, the opcode's byte offset, what was
// expected and what was found (Code::corrupt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"

namespace ckpt {

enum class PickleKind : std::uint8_t {
  none,
  boolean,
  integer,      // fits in 64 bits signed
  big_integer,  // LONG1/LONG4 wider than 64 bits: text holds the little-endian two's complement bytes
  floating,
  string,  // UTF-8 text (unicode, and the protocol 0-2 STRING forms)
  bytes,   // bytes and bytearray
  tuple,
  list,
  dict,  // items: key, value, key, value ... in insertion order; a repeated key is kept twice
  set,
  frozenset,
  global,  // text: module, name: the name; nothing is imported
  object,  // REDUCE / NEWOBJ / NEWOBJ_EX / BUILD: callable (usually a global), args, state, kwargs
};
[[nodiscard]] constexpr EnumBounds<PickleKind> enum_bounds(PickleKind) noexcept { return {PickleKind::none, PickleKind::object}; }
[[nodiscard]] const char* pickle_kind_name(PickleKind kind) noexcept;

// Decoder limits; inputs that exceed one are refused (Code::corrupt) before memory is spent on them.
struct PickleLimits {
  std::size_t max_nodes = std::size_t{1} << 25;  // values built (~50 bytes each)
  std::size_t max_marks = 4096;                  // MARKs open at once: the nesting of MARK-built containers
  std::size_t max_long_bytes = 4096;             // LONG1/LONG4 payload
};

// One value of the tree; PickleValue is the way to read it.
struct PickleNode {
  static constexpr std::uint32_t kAbsent = 0xFFFFFFFFu;
  PickleKind kind = PickleKind::none;
  std::int64_t integer = 0;  // integer; boolean as 0 / 1
  double real = 0;           // floating
  std::string text;          // string, bytes, big_integer; global: the module
  std::string name;          // global: the name
  // tuple, list, set, frozenset: elements; dict: key, value pairs;
  // object: [callable, args, state, kwargs], kAbsent where there is none.
  std::vector<std::uint32_t> items;
  std::uint64_t offset = 0;  // byte offset of the opcode that made it
};

// A read-only view of one node of a decoded pickle; cheap to copy (shares the decoded tree). A default
// or failed lookup gives an invalid view: valid() false, kind() none, every accessor empty.
class PickleValue {
 public:
  PickleValue() = default;
  PickleValue(std::shared_ptr<const std::vector<PickleNode>> nodes, std::uint32_t index) noexcept
      : nodes_(std::move(nodes)), index_(index) {}

  [[nodiscard]] bool valid() const noexcept { return nodes_ != nullptr && index_ < nodes_->size(); }
  [[nodiscard]] PickleKind kind() const noexcept { return valid() ? node().kind : PickleKind::none; }
  [[nodiscard]] bool is_none() const noexcept { return valid() && node().kind == PickleKind::none; }
  [[nodiscard]] std::uint64_t offset() const noexcept { return valid() ? node().offset : 0; }

  [[nodiscard]] std::optional<std::int64_t> as_int() const noexcept;  // integer only (not boolean)
  [[nodiscard]] std::optional<bool> as_bool() const noexcept;
  [[nodiscard]] std::optional<double> as_float() const noexcept;      // floating or integer
  [[nodiscard]] const std::string* as_string() const noexcept;       // string only
  [[nodiscard]] const std::string* as_bytes() const noexcept;        // bytes only

  // tuple, list, set, frozenset: the element count; dict: the pair count; 0 otherwise.
  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] PickleValue at(std::size_t i) const;     // element i of a tuple, list, set, frozenset
  [[nodiscard]] PickleValue key(std::size_t i) const;    // pair i of a dict
  [[nodiscard]] PickleValue value(std::size_t i) const;  // pair i of a dict
  // The value of the last pair of a dict whose key is the string `key` (as Python keeps the last).
  [[nodiscard]] PickleValue get(std::string_view key) const;

  // global
  [[nodiscard]] const std::string* module() const noexcept;
  [[nodiscard]] const std::string* name() const noexcept;
  [[nodiscard]] bool is_global(std::string_view module, std::string_view name) const noexcept;
  // object
  [[nodiscard]] PickleValue callable() const;
  [[nodiscard]] PickleValue args() const;
  [[nodiscard]] PickleValue state() const;
  [[nodiscard]] PickleValue kwargs() const;
  // An object whose callable is the global module.name.
  [[nodiscard]] bool is_object_of(std::string_view module, std::string_view name) const;

 private:
  [[nodiscard]] const PickleNode& node() const noexcept { return (*nodes_)[index_]; }
  [[nodiscard]] PickleValue child(std::uint32_t index) const;
  std::shared_ptr<const std::vector<PickleNode>> nodes_;
  std::uint32_t index_ = PickleNode::kAbsent;
};

// Decodes one pickle: the bytes must end at its STOP (trailing bytes are refused). `where` names the
// input in errors ("DIR/.metadata").
[[nodiscard]] Result<PickleValue> decode_pickle(const unsigned char* data, std::size_t size, const std::string& where,
                                                const PickleLimits& limits = PickleLimits{});

// A Python-like rendering for messages, cut at max_chars and at nesting depth 16: "('a', 1, torch.Size(...))".
[[nodiscard]] std::string pickle_repr(const PickleValue& value, std::size_t max_chars = 120);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/pickle_inl.hpp"
#endif
