// ckpt: definitions for training_state.hpp (spec/JOURNAL.md 7.3).
#pragma once

#include "../training_state.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <string_view>
#include <vector>

#include "../../shard/index.hpp"

namespace ckpt {

namespace detail {
[[nodiscard]] CKPT_INLINE Status check_state_name(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > training_state::kMaxKeyLength)
    return make_error(Code::invalid_argument, std::string(what) + " must be 1 to 65535 bytes, got " + std::to_string(name.size()));
  if (!valid_utf8(name)) return make_error(Code::invalid_argument, std::string(what) + " is not valid UTF-8");
  return Status();
}

// Reads a u64 length and that many bytes, checked against the bytes left.
[[nodiscard]] CKPT_INLINE bool read_counted(Decoder& in, std::string& out) {
  std::uint64_t n = 0;
  if (!in.u64(n) || !in.has(n)) return false;
  out.assign(reinterpret_cast<const char*>(in.cursor()), static_cast<std::size_t>(n));
  return in.skip(static_cast<std::size_t>(n));
}
}  // namespace detail

CKPT_INLINE Status check_training_state(const TrainingState& state) {
  if (state.optimizer_tensors.size() > training_state::kMaxOptimizerTensors)
    return make_error(Code::invalid_argument, "training state: more than 2^24 optimizer tensors");
  if (state.values.size() > training_state::kMaxValues)
    return make_error(Code::invalid_argument, "training state: more than 2^24 values");
  std::vector<std::string_view> sorted;  // views, not copies: see decode_training_state
  sorted.reserve(state.optimizer_tensors.size());
  for (const auto& name : state.optimizer_tensors) {
    CKPT_TRY(detail::check_state_name("optimizer tensor name", name));
    sorted.push_back(name);
  }
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end())
    return make_error(Code::invalid_argument, "training state: optimizer tensor '" + std::string(*twice) + "' listed twice");
  for (const auto& [key, value] : state.values) {
    CKPT_TRY(detail::check_state_name("training state key", key));
    if (value.is_string() && !valid_utf8(value.as_string()))
      return make_error(Code::invalid_argument, "training state '" + key + "': string value is not valid UTF-8 (store it as bytes)");
  }
  return Status();
}

CKPT_INLINE void encode_training_state(Encoder& out, const TrainingState& state) {
  out.u64(state.rng.size());
  out.bytes(state.rng);
  out.u64(state.data.epoch);
  out.u64(state.data.offset);
  out.u64(state.data.state.size());
  out.bytes(state.data.state);
  out.u32(static_cast<std::uint32_t>(state.optimizer_tensors.size()));
  out.u32(0);
  for (const auto& name : state.optimizer_tensors) {
    out.u32(static_cast<std::uint32_t>(name.size()));
    out.bytes(name);
  }
  out.u32(static_cast<std::uint32_t>(state.values.size()));
  out.u32(0);
  for (const auto& [key, value] : state.values) {
    out.u32(static_cast<std::uint32_t>(key.size()));
    out.u16(static_cast<std::uint16_t>(value.type()));
    out.u16(0);
    out.bytes(key);
    if (value.is_int()) out.u64(static_cast<std::uint64_t>(value.as_int()));
    else if (value.is_float()) out.u64(f64_bits(value.as_float()));
    else if (value.is_bool()) out.u64(value.as_bool() ? 1 : 0);
    else {
      const std::string& s = value.is_string() ? value.as_string() : value.as_bytes();
      out.u64(s.size());
      out.bytes(s);
    }
  }
}

CKPT_INLINE Status decode_training_state(Decoder& in, TrainingState& state, const std::string& where) {
  auto corrupt = [&](const std::string& what) {
    return make_error(Code::corrupt, where + ": training state at byte " + std::to_string(in.position()) + ": " + what);
  };
  if (!detail::read_counted(in, state.rng)) return corrupt("RNG bytes run past the end");
  if (!in.u64(state.data.epoch) || !in.u64(state.data.offset)) return corrupt("data position is cut short");
  if (!detail::read_counted(in, state.data.state)) return corrupt("data-loader state runs past the end");

  std::uint32_t count = 0, reserved = 0;
  if (!in.u32(count) || !in.u32(reserved)) return corrupt("optimizer tensor count is cut short");
  if (reserved != 0) return corrupt("reserved field is " + std::to_string(reserved) + ", expected 0");
  // Each entry takes at least 5 bytes: bound the count by what is left before reserving (spec 9).
  if (count > training_state::kMaxOptimizerTensors || count > in.remaining() / 5)
    return corrupt("optimizer tensor count " + std::to_string(count) + " exceeds the limit or the bytes left");
  state.optimizer_tensors.clear();
  state.optimizer_tensors.reserve(count);
  // Duplicates are found by sorting views of the input, not by a second copy of every name: a name
  // may be one byte, and a set node per name would multiply the input many times over (issue 9).
  std::vector<std::string_view> sorted;
  sorted.reserve(count);
  const char* base = reinterpret_cast<const char*>(in.cursor()) - in.position();
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    if (!in.u32(len) || !in.has(len)) return corrupt("optimizer tensor name " + std::to_string(i) + " runs past the end");
    const std::string_view name(reinterpret_cast<const char*>(in.cursor()), len);
    (void)in.skip(len);
    Status s = detail::check_state_name("optimizer tensor name", name);
    if (!s.ok()) return corrupt(s.message());
    sorted.push_back(name);
    state.optimizer_tensors.emplace_back(name);
  }
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) {
    const char* later = std::max(twice->data(), (twice + 1)->data());  // the second copy, at its length field
    return make_error(Code::corrupt, where + ": training state at byte " + std::to_string(later - base - 4) +
                                         ": optimizer tensor '" + std::string(*twice) + "' listed twice");
  }

  if (!in.u32(count) || !in.u32(reserved)) return corrupt("value count is cut short");
  if (reserved != 0) return corrupt("reserved field is " + std::to_string(reserved) + ", expected 0");
  // Each value takes at least 17 bytes (key length, type, reserved, one key byte, u64).
  if (count > training_state::kMaxValues || count > in.remaining() / 17)
    return corrupt("value count " + std::to_string(count) + " exceeds the limit or the bytes left");
  state.values.clear();
  const std::string* previous = nullptr;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    std::uint16_t type = 0, pad = 0;
    if (!in.u32(len) || !in.u16(type) || !in.u16(pad)) return corrupt("value " + std::to_string(i) + " is cut short");
    if (pad != 0) return corrupt("value " + std::to_string(i) + ": reserved field is not zero");
    if (!in.has(len)) return corrupt("value " + std::to_string(i) + ": key runs past the end");
    std::string key(reinterpret_cast<const char*>(in.cursor()), len);
    (void)in.skip(len);
    Status s = detail::check_state_name("training state key", key);
    if (!s.ok()) return corrupt(s.message());
    // Keys are strictly increasing: one canonical encoding, no duplicates (spec 7.3).
    if (previous != nullptr && !(*previous < key)) return corrupt("key '" + key + "' is not after '" + *previous + "'");
    Value value;
    std::uint64_t raw = 0;
    switch (static_cast<format::ValueType>(type)) {
      case format::ValueType::int64:
        if (!in.u64(raw)) return corrupt("value '" + key + "' is cut short");
        value = Value(static_cast<std::int64_t>(raw));
        break;
      case format::ValueType::float64:
        if (!in.u64(raw)) return corrupt("value '" + key + "' is cut short");
        value = Value(bits_f64(raw));
        break;
      case format::ValueType::boolean:
        if (!in.u64(raw)) return corrupt("value '" + key + "' is cut short");
        if (raw > 1) return corrupt("bool value '" + key + "' is " + std::to_string(raw) + ", expected 0 or 1");
        value = Value(raw == 1);
        break;
      case format::ValueType::string: {
        std::string text;
        if (!detail::read_counted(in, text)) return corrupt("string value '" + key + "' runs past the end");
        if (!valid_utf8(text)) return corrupt("string value '" + key + "' is not valid UTF-8");
        value = Value(std::move(text));
        break;
      }
      case format::ValueType::bytes: {
        Bytes bytes;
        if (!detail::read_counted(in, bytes.data)) return corrupt("bytes value '" + key + "' runs past the end");
        value = Value(std::move(bytes));
        break;
      }
      default:
        return corrupt("value '" + key + "' has unknown type " + std::to_string(type));
    }
    auto it = state.values.emplace(std::move(key), std::move(value)).first;
    previous = &it->first;
  }
  return Status();
}

}  // namespace ckpt
