// ckpt: definitions of dist/wire.hpp.
#pragma once

#include "../wire.hpp"

namespace ckpt::wire {

CKPT_INLINE void put_text(Encoder& out, std::string_view text) {
  out.u32(static_cast<std::uint32_t>(text.size()));
  out.bytes(text);
}

CKPT_INLINE bool get_text(Decoder& in, std::string& out, std::uint32_t limit) {
  std::uint32_t n = 0;
  if (!in.u32(n) || n > limit || !in.has(n)) return false;
  out.assign(reinterpret_cast<const char*>(in.cursor()), n);
  return in.skip(n);
}

CKPT_INLINE void put_status(Encoder& out, const Status& s) {
  out.u8(static_cast<std::uint8_t>(s.code()));
  put_text(out, s.message());
}

CKPT_INLINE bool get_u8(Decoder& in, std::uint8_t& v) {
  if (!in.has(1)) return false;
  v = *in.cursor();
  return in.skip(1);
}

CKPT_INLINE bool get_status(Decoder& in, Status& s) {
  std::uint8_t code = 0;
  std::string message;
  if (!get_u8(in, code) || code > static_cast<std::uint8_t>(kLastCode) || !get_text(in, message, kMaxStatusText)) return false;
  s = code == 0 ? Status() : Status(static_cast<Code>(code), std::move(message));
  return true;
}

CKPT_INLINE void put_dims(Encoder& out, const std::vector<std::uint64_t>& dims) {
  for (const auto d : dims) out.u64(d);
}

CKPT_INLINE bool get_dims(Decoder& in, std::size_t n, std::vector<std::uint64_t>& dims) {
  if (n > in.remaining() / 8) return false;
  dims.resize(n);
  for (auto& d : dims)
    if (!in.u64(d)) return false;
  return true;
}

CKPT_INLINE void put_shape(Encoder& out, const std::vector<std::uint64_t>& shape) {
  out.u32(static_cast<std::uint32_t>(shape.size()));
  put_dims(out, shape);
}

CKPT_INLINE bool get_shape(Decoder& in, std::vector<std::uint64_t>& shape) {
  std::uint32_t n = 0;
  return in.u32(n) && n <= format::kMaxRank && get_dims(in, n, shape);
}

CKPT_INLINE void put_digest(Encoder& out, const Digest128& d) {
  out.u64(d.high);
  out.u64(d.low);
}

CKPT_INLINE bool get_digest(Decoder& in, Digest128& d) { return in.u64(d.high) && in.u64(d.low); }

CKPT_INLINE std::string rank_name(int rank) { return "rank " + std::to_string(rank); }

CKPT_INLINE Status from_rank(const Status& s, int rank, int world) { return world > 1 ? s.with_context(rank_name(rank)) : s; }

CKPT_INLINE Status agree(CommRef comm, const Status& local, const std::function<Status(Status)>& on_root) {
  Encoder mine;
  mine.u8(kStatusMessage);
  put_status(mine, local);
  auto gathered = comm.gather(std::move(mine.str()), 0);
  std::string verdict;
  if (comm.rank() == 0) {
    Status combined = gathered.ok() ? from_rank(local, 0, comm.size()) : gathered.status();
    if (combined.ok() && gathered->size() != static_cast<std::size_t>(comm.size()))
      combined = make_error(Code::invalid_argument, "gathered " + std::to_string(gathered->size()) + " statuses from a world of " +
                                                        std::to_string(comm.size()));
    for (std::size_t r = 0; combined.ok() && r < gathered->size(); ++r) {
      Decoder in = decoder((*gathered)[r]);
      std::uint8_t kind = 0;
      Status theirs;
      if (!get_u8(in, kind)) combined = make_error(Code::corrupt, rank_name(static_cast<int>(r)) + " sent an empty message");
      else if (kind != kStatusMessage)
        combined = make_error(Code::invalid_argument, rank_name(static_cast<int>(r)) + " is in another collective call (message kind " +
                                                          std::to_string(kind) + ", expected " + std::to_string(kStatusMessage) +
                                                          "): every rank must call open, begin, commit and abort in the same order");
      else if (!get_status(in, theirs)) combined = make_error(Code::corrupt, rank_name(static_cast<int>(r)) + " sent a malformed status");
      else if (!theirs.ok()) combined = from_rank(theirs, static_cast<int>(r), comm.size());
    }
    if (on_root) combined = on_root(combined);
    Encoder out;
    put_status(out, combined);
    verdict = std::move(out.str());
  } else if (!gathered.ok()) {
    return gathered.status();
  }
  CKPT_TRY(comm.broadcast(verdict, 0));
  Decoder in = decoder(verdict);
  Status result;
  if (!get_status(in, result)) return make_error(Code::corrupt, "rank 0 broadcast a malformed status");
  return result;
}

}  // namespace ckpt::wire
