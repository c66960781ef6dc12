// ckpt: the wire codec of rank messages (spec/SHARDING.md 3.5): how strings, statuses, shapes and
// digests travel between ranks, and the one agreement on a Status. The store's rank commit, the object
// log and the tiers all speak it; explicit little-endian through Encoder and Decoder (core/coding.hpp),
// every count and length read from another rank checked against the bytes left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/coding.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/format.hpp"
#include "../core/hash.hpp"
#include "comm.hpp"

namespace ckpt::wire {

// The kind byte of agree()'s message: rank messages start with their kind (spec/SHARDING.md 3.5).
inline constexpr std::uint8_t kStatusMessage = 1;
// Longest message text a decoder accepts.
inline constexpr std::uint32_t kMaxStatusText = std::uint32_t{64} << 20;

[[nodiscard]] inline Decoder decoder(const std::string& bytes) noexcept {
  return Decoder(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

// u32 length, bytes.
void put_text(Encoder& out, std::string_view text);
[[nodiscard]] bool get_text(Decoder& in, std::string& out, std::uint32_t limit);
// u8 code, text: ok is code 0 with an empty text.
void put_status(Encoder& out, const Status& s);
[[nodiscard]] bool get_status(Decoder& in, Status& s);
[[nodiscard]] bool get_u8(Decoder& in, std::uint8_t& v);
// n u64 dimensions (n known to the reader), or a u32 count then the dimensions.
void put_dims(Encoder& out, const std::vector<std::uint64_t>& dims);
[[nodiscard]] bool get_dims(Decoder& in, std::size_t n, std::vector<std::uint64_t>& dims);
void put_shape(Encoder& out, const std::vector<std::uint64_t>& shape);  // at most format::kMaxRank
[[nodiscard]] bool get_shape(Decoder& in, std::vector<std::uint64_t>& shape);
// high then low, each u64.
void put_digest(Encoder& out, const Digest128& d);
[[nodiscard]] bool get_digest(Decoder& in, Digest128& d);

[[nodiscard]] std::string rank_name(int rank);
// A rank's Status as the others see it: named by its rank when there are others to tell it from.
[[nodiscard]] Status from_rank(const Status& s, int rank, int world);
// Every rank's Status goes to rank 0, which picks the lowest failing rank's ("rank r: ...") and may act
// on it (on_root, e.g. abandon a transaction); the verdict is broadcast, so every rank returns it.
[[nodiscard]] Status agree(CommRef comm, const Status& local, const std::function<Status(Status)>& on_root = {});

}  // namespace ckpt::wire

#if !CKPT_DECLARATIONS_ONLY
#include "impl/wire_inl.hpp"
#endif
