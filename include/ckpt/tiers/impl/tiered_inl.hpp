// ckpt: definitions for tiers/tiered.hpp (spec/TIERS.md).
#pragma once

#include <sys/statvfs.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <variant>

#include "../../core/coding.hpp"
#include "../../core/enum_name.hpp"
#include "../../io/thread_priority.hpp"
#include "../../shard/verify.hpp"
#include "../tiered.hpp"

namespace ckpt::tiers {

// --- Layout and digests ---------------------------------------------------------------------------

namespace layout {
CKPT_INLINE std::string state_tensor(std::uint32_t rank) { return std::string(kStateTensorPrefix) + std::to_string(rank); }
}  // namespace layout

CKPT_INLINE Digest128 shard_digest(const ShardReader& shard) {
  Content c;
  add_index_content(c, shard.index(), shard.superblock().chunk_size(), shard.path());
  if (!seal_content(c).ok()) return Digest128{};  // a valid index has unique names; never reached
  return c.root;
}

CKPT_INLINE Digest128 step_digest(std::uint64_t step, const std::vector<Digest128>& shards) {
  static constexpr unsigned char kTag[8] = {'C', 'K', 'P', 'T', 'T', 'I', 'E', 'R'};
  Encoder out;
  out.raw(kTag, sizeof kTag);
  out.u64(step), out.u32(static_cast<std::uint32_t>(shards.size()));
  for (const auto& d : shards) out.u64(d.high), out.u64(d.low);
  return xxh3_128(out.str().data(), out.size());
}

CKPT_INLINE const char* tier_action_name(TierAction a) noexcept {
  return enum_name(a, {"none", "capture", "capture_and_persist"});
}

namespace detail {

inline constexpr int kReplicateTag = 0x101;  // replication of a fresh capture (spec/TIERS.md 4)
inline constexpr int kFetchTag = 0x102;      // a shard fetched at resume
inline constexpr int kRefillTag = 0x103;     // copies refilled after resume
inline constexpr int kShareTag = 0x104;      // a shard one rank verified, to the others that load it (data parallel)
inline constexpr int kReceivedTag = 0x107;   // where a rank put a shard it received, to its node's others (data parallel)

[[nodiscard]] CKPT_INLINE std::string_view as_view(Encoder& e) { return std::string_view(e.str()); }
// The first problem of a verify report, as an error.
[[nodiscard]] CKPT_INLINE Status verify_status(const Result<VerifyReport>& report) {
  if (!report.ok()) return report.status();
  if (report->ok()) return Status();
  return problem_error(report->problems.front());
}

// --- One shard over the wire (spec/TIERS.md 4.2) ------------------------------------------------------
// header: status, step u64, shard u32, world u32, step digest, shard digest, training state, pieces;
// then per piece: a status message, and when ok its bytes in messages of at most transfer_block.

// The sending half of a shard's body stream: statuses are never split across messages, bytes may be.
struct BodyOut {
  CommRef comm;
  int dest = 0, tag = 0;
  std::size_t block = 0;
  std::string pending;

  [[nodiscard]] Status flush() {
    if (pending.empty()) return Status();
    Status sent = comm.send(pending, dest, tag);
    pending.clear();
    return sent;
  }
  [[nodiscard]] Status status(const Status& st) {
    Encoder e;
    wire::put_status(e, st);
    if (!pending.empty() && pending.size() + e.size() > block) CKPT_TRY(flush());
    pending.append(e.str());
    return Status();
  }
  [[nodiscard]] Status bytes(const unsigned char* data, std::uint64_t length) {
    for (std::uint64_t done = 0; done < length;) {
      if (length - done >= block) {
        // Whole messages straight from the source, what is pending sent alone before them: a message of one
        // piece's bytes only, which the receiver takes straight into its slot (BodyIn::refill_into).
        CKPT_TRY(flush());
        CKPT_TRY(comm.send(std::string_view(reinterpret_cast<const char*>(data) + done, block), dest, tag));
        done += block;
        continue;
      }
      const std::size_t room = pending.size() < block ? block - pending.size() : 0;
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(room, length - done));
      pending.append(reinterpret_cast<const char*>(data) + done, n);
      done += n;
      if (pending.size() >= block) CKPT_TRY(flush());
    }
    return Status();
  }
};

// The receiving half: takes messages as the stream needs them.
struct BodyIn {
  CommRef comm;
  int source = 0, tag = 0;
  std::string msg;
  std::size_t pos = 0;

  [[nodiscard]] Status refill() {
    CKPT_TRY(comm.recv(msg, source, tag));
    pos = 0;
    if (msg.empty()) return make_error(Code::corrupt, "an empty message in a shard's body");
    return Status();
  }
  // With the stream drained inside a piece that still needs `room` bytes: a next message of at most that many
  // is only that piece's bytes and lands at dst (returns its size); a longer one is taken as refill() takes it
  // (returns 0) and read through bytes().
  [[nodiscard]] Result<std::size_t> refill_into(unsigned char* dst, std::uint64_t room) {
    CKPT_ASSIGN_OR_RETURN(const Received got, comm.recv_into(dst, static_cast<std::size_t>(std::min<std::uint64_t>(room, SIZE_MAX)), msg, source, tag));
    if (got.size == 0) return make_error(Code::corrupt, "an empty message in a shard's body");
    pos = 0;
    if (!got.in_place) return std::size_t{0};
    msg.clear();  // still drained: a transport without recv_into of its own took the message here first
    return got.size;
  }
  // Returns a transport failure; *decoded is false when the bytes are not a status.
  [[nodiscard]] Status status(Status& out, bool& decoded) {
    if (pos == msg.size()) CKPT_TRY(refill());
    Decoder d(reinterpret_cast<const unsigned char*>(msg.data()) + pos, msg.size() - pos);
    decoded = wire::get_status(d, out);
    pos += d.position();
    return Status();
  }
  // The next at most `max` bytes of the stream, in place.
  [[nodiscard]] Result<std::string_view> bytes(std::uint64_t max) {
    if (pos == msg.size()) CKPT_TRY(refill());
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(max, msg.size() - pos));
    std::string_view out(msg.data() + pos, n);
    pos += n;
    return out;
  }
  [[nodiscard]] bool drained() const noexcept { return pos == msg.size(); }
};

struct ShardSource {
  std::string where;  // for messages
  ShardReader* reader = nullptr;
  TrainingState state;
  // touched: a copy that does not verify is never sent as good (resume fetches, where the sender's own
  // verdict names the bad copy). none: a capture hashed as it was written; the receiver's digest check
  // covers every byte end to end (spec/TIERS.md 4.3), so a second hash would only slow replication.
  ReadCheck check = ReadCheck::touched;
  // With check none: the whole shard file as the store that wrote it in place keeps it mapped (empty: each
  // piece is mapped, or read, for the send).
  std::string_view mapped;
};

// Returns a transport failure (the stream is broken); a copy that cannot be read or does not verify is
// told to the receiver and left in *copy_failure, and the stream stays in step.
[[nodiscard]] CKPT_INLINE Status send_shard(CommRef comm, const ShardSource& src, std::uint64_t step, std::uint32_t shard,
                                            std::uint32_t world, const Digest128& step_d, const Digest128& shard_d, int dest,
                                            int tag, std::size_t block, Status* copy_failure) {
  Encoder h;
  if (src.reader == nullptr) {
    const Status unavailable = make_error(Code::not_found, src.where);
    wire::put_status(h, unavailable);
    if (copy_failure) *copy_failure = unavailable;
    return comm.send(as_view(h), dest, tag);
  }
  wire::put_status(h, Status());
  ShardReader& r = *src.reader;
  const Index& index = r.index();
  h.u64(step), h.u32(shard), h.u32(world);
  wire::put_digest(h, step_d), wire::put_digest(h, shard_d);
  Encoder state;
  encode_training_state(state, src.state);
  wire::put_text(h, state.str());
  h.u32(static_cast<std::uint32_t>(index.pieces.size()));
  for (const auto& p : index.pieces) {
    const TensorRecord& t = index.tensors[static_cast<std::size_t>(p.tensor)];
    wire::put_text(h, t.name);
    h.u32(static_cast<std::uint32_t>(t.dtype));
    wire::put_shape(h, t.shape), wire::put_shape(h, p.offsets), wire::put_shape(h, p.shape);
    h.u64(p.data_length);
  }
  CKPT_TRY(comm.send(as_view(h), dest, tag));
  // The body is one byte stream cut into messages of about `block` bytes (spec/TIERS.md 4.2): small
  // pieces share a message, so a shard of many tensors costs a few messages, not two per piece.
  BodyOut body{comm, dest, tag, block, {}};
  std::string buffer;
  for (std::size_t k = 0; k < index.pieces.size(); ++k) {
    const std::uint64_t length = index.pieces[k].data_length;
    // Verified before a byte leaves: a bad copy is never sent as good (spec/TIERS.md 4.3).
    const unsigned char* bytes = nullptr;
    std::optional<Mapping> mapping;
    Status got;
    const std::uint64_t at = index.pieces[k].data_offset;
    if (src.check == ReadCheck::none && at <= src.mapped.size() && length <= src.mapped.size() - at) {
      bytes = reinterpret_cast<const unsigned char*>(src.mapped.data()) + at;
    } else if (r.fs().can_map() && length > 0) {
      auto m = r.map_piece(k, src.check);
      if (m.ok()) mapping.emplace(std::move(*m)), bytes = mapping->data();
      else got = m.status();
    } else {
      buffer.resize(static_cast<std::size_t>(length));
      got = r.read_piece(k, buffer.empty() ? nullptr : &buffer[0], buffer.size(), src.check);
      bytes = reinterpret_cast<const unsigned char*>(buffer.data());
    }
    if (!got.ok()) got = got.with_context(src.where);
    CKPT_TRY(body.status(got));
    if (!got.ok()) {
      if (copy_failure) *copy_failure = got;
      return body.flush();  // the stream ends with the failed piece's status
    }
    CKPT_TRY(body.bytes(bytes, length));
  }
  return body.flush();
}

struct Received {
  StepInfo info;
  Digest128 step_digest, shard_digest;
  std::uint32_t world = 0;
};

// Receives one shard into `into` (a store of one rank) and checks its content digest against `expected`
// before it counts (spec/TIERS.md 4.3). Returns a transport failure; otherwise every promised message is
// taken (so the stream stays in step) and either `out` is set or *copy_failure says why not: the sender
// could not produce a verified copy, the bytes do not add up to `expected` (the copy is retired at
// once), or this rank could not store it. `replaceable` names a copy of the step already in `into` that
// may simply be retired for the new one (a verified copy this process received earlier in the same resume).
[[nodiscard]] CKPT_INLINE Status receive_shard(FsRef fs, CommRef comm, Result<Store*> into, int source, int tag, std::uint64_t step,
                                               std::uint32_t shard, const Digest128& expected, std::optional<Received>& out,
                                               Status& copy_failure,
                                               const std::function<bool(const StepInfo&)>& replaceable = nullptr) {
  const std::string from = "shard " + std::to_string(shard) + " of step " + std::to_string(step) + " from rank " + std::to_string(source);
  out.reset();
  copy_failure = Status();
  std::string msg;
  CKPT_TRY(comm.recv(msg, source, tag));
  Decoder h = wire::decoder(msg);
  Status sender;
  if (!wire::get_status(h, sender)) return make_error(Code::corrupt, from + ": undecodable header");
  if (!sender.ok()) {
    copy_failure = make_error(Code::corrupt, from + ": the sender has no verified copy: " + sender.message());
    return Status();
  }
  Received got;
  std::uint64_t got_step = 0;
  std::uint32_t got_shard = 0, pieces = 0;
  std::string state_bytes;
  if (!h.u64(got_step) || !h.u32(got_shard) || !h.u32(got.world) || !wire::get_digest(h, got.step_digest) ||
      !wire::get_digest(h, got.shard_digest) || !wire::get_text(h, state_bytes, journal::kMaxPayload) || !h.u32(pieces))
    return make_error(Code::corrupt, from + ": truncated header");
  struct PieceHead {
    std::string name;
    std::uint32_t dtype = 0;
    Shape global, offsets, local;
    std::uint64_t length = 0;
  };
  std::vector<PieceHead> heads;
  for (std::uint32_t k = 0; k < pieces; ++k) {
    PieceHead p;
    if (!wire::get_text(h, p.name, journal::kMaxPayload) || !h.u32(p.dtype) || !wire::get_shape(h, p.global) || !wire::get_shape(h, p.offsets) || !wire::get_shape(h, p.local) ||
        !h.u64(p.length))
      return make_error(Code::corrupt, from + ": undecodable piece " + std::to_string(k));
    heads.push_back(std::move(p));
  }
  Status s;  // the first failure of this copy; messages are still taken after it
  if (got_step != step || got_shard != shard || got.shard_digest != expected)
    s = make_error(Code::corrupt, from + ": expected step " + std::to_string(step) + " shard " + std::to_string(shard) + " digest " +
                                      expected.hex() + ", the sender offers step " + std::to_string(got_step) + " shard " +
                                      std::to_string(got_shard) + " digest " + got.shard_digest.hex());
  TrainingState state;
  Decoder sd = wire::decoder(state_bytes);
  if (s.ok()) s = decode_training_state(sd, state, from);
  if (s.ok() && !into.ok()) s = into.status();
  // A copy of this step already there was set aside or belongs to an abandoned run: a step number is live
  // once (spec/JOURNAL.md 10), so it leaves the store, its bytes kept in quarantine/ (spec/TIERS.md 5.2);
  // one this resume fetched and verified itself is only a duplicate, retired.
  if (s.ok()) {
    auto there = (*into)->find(step);
    if (there.ok()) s = replaceable && replaceable(*there) ? (*into)->retire(step) : (*into)->set_aside(step);
  }
  // Where a memory store maps its files, each piece is copied from the message into the file the
  // transaction writes over and hashed there, in cache: no pwrite (spec/TIERS.md 4.3).
  std::vector<unsigned char*> in_place;
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  bool fits = s.ok() && (*into)->fs().can_map();
  for (const auto& p : heads) {
    fits = fits && p.length <= UINT64_MAX - total;
    total += fits ? p.length : 0;
    sizes.push_back(p.length);
  }
  // The lengths are the sender's word: a slot grows (and is populated) only within the free space of the
  // memory tier's file system; otherwise the pieces are written, and a write past it fails with ENOSPC.
  struct statvfs sv {};
  fits = fits && ::statvfs((*into)->path().c_str(), &sv) == 0 && total <= static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  if (fits) {
    auto slot = (*into)->reserve_slot(sizes);
    if (slot.ok()) in_place = std::move(*slot);
    else if (slot.status().code() != Code::invalid_argument && slot.status().code() != Code::unsupported) s = slot.status();
  }
  std::unique_ptr<Transaction> tx;
  if (s.ok()) {
    auto begun = (*into)->begin(step);
    if (begun.ok()) tx = std::move(*begun), state.step = step, tx->state() = state;
    else s = begun.status();
  }
  BodyIn body{comm, source, tag, {}, 0};
  for (std::uint32_t k = 0; k < pieces; ++k) {
    const PieceHead& p = heads[k];
    Status piece_ok;
    bool decoded = false;
    CKPT_TRY(body.status(piece_ok, decoded));
    if (!decoded) return make_error(Code::corrupt, from + ": undecodable status of piece " + std::to_string(k));
    if (!piece_ok.ok()) {
      if (s.ok()) s = make_error(Code::corrupt, from + ": the sender's copy does not verify: " + piece_ok.message());
      break;  // the sender stops after a failed piece
    }
    if (s.ok() && (p.dtype > 0xffff || format::dtype_info(static_cast<std::uint16_t>(p.dtype)) == nullptr))
      s = make_error(Code::corrupt, from + ": piece " + std::to_string(k) + " has unknown dtype " + std::to_string(p.dtype));
    if (s.ok()) s = tx->begin_piece(p.name, static_cast<DType>(p.dtype), p.global, p.offsets, p.local);
    // Hashes n bytes at the piece's `done` in the slot a cache-sized window at a time, each window first copied
    // from `copy_from` unless the bytes already lie there: the writer hashes them while they are in cache.
    const auto in_slot = [&](std::uint64_t done, const char* copy_from, std::size_t n) {
      for (std::size_t off = 0; s.ok() && off < n; off += ckpt::detail::kHashWindow) {
        const std::size_t w = std::min(ckpt::detail::kHashWindow, n - off);
        unsigned char* at = in_place[k] + done + off;
        if (copy_from != nullptr) std::memcpy(at, copy_from + off, w);
        s = tx->write(at, w);
      }
    };
    for (std::uint64_t done = 0; done < p.length;) {
      if (s.ok() && !in_place.empty() && body.drained()) {
        // A message of this piece's bytes only lands in the slot as it is received: no copy of ours (4.2).
        CKPT_ASSIGN_OR_RETURN(const std::size_t landed, body.refill_into(in_place[k] + done, p.length - done));
        in_slot(done, nullptr, landed);
        done += landed;
        if (landed != 0) continue;
      }
      CKPT_ASSIGN_OR_RETURN(std::string_view got_bytes, body.bytes(p.length - done));
      if (s.ok() && !in_place.empty()) {
        in_slot(done, got_bytes.data(), got_bytes.size());
      } else if (s.ok()) {
        s = tx->write(got_bytes.data(), got_bytes.size());
      }
      done += got_bytes.size();
    }
    if (s.ok()) s = tx->end_piece();
  }
  // The sender's last message ends with the last piece: anything after it is a broken stream.
  if (!body.drained())
    return make_error(Code::corrupt, from + ": " + std::to_string(body.msg.size() - body.pos) + " bytes after the last piece");
  if (!s.ok()) {
    if (tx) (void)tx->abort();
    copy_failure = s.with_context(from);
    return Status();
  }
  auto committed = tx->commit();
  if (!committed.ok()) {
    copy_failure = committed.status().with_context(from);
    return Status();
  }
  got.info = committed->step;
  // Every chunk the writer hashed while receiving is in the digest: a match verifies every byte.
  auto reader = StepReader::open(fs, (*into)->path(), got.info, (*into)->uuid());
  Status verdict = reader.ok() ? Status() : reader.status();
  if (verdict.ok()) {
    const Digest128 found = shard_digest(reader->shard(0));
    if (found != expected)
      verdict = make_error(Code::corrupt, from + ": received bytes have digest " + found.hex() + ", expected " + expected.hex());
  }
  if (!verdict.ok()) {
    (void)(*into)->retire(step);
    copy_failure = verdict;
    return Status();
  }
  out = std::move(got);
  return Status();
}

// Sends and receives at once: sends run on a second thread in list order, receives here in list
// order, so two ranks sending to each other never wait on each other (spec/TIERS.md 4.1).
template <class SendAll, class ReceiveAll>
[[nodiscard]] Status exchange(SendAll&& send_all, ReceiveAll&& receive_all) {
  Status sent;
  std::thread sender([&] { sent = send_all(); });
  Status received = receive_all();
  sender.join();
  return sent.ok() ? received : sent;
}

// The promotion's verification (spec/TIERS.md 4.4): the chunk digests the persistent writer computed in its
// write pass against the capture's, before the commit; the memory bytes were read without a hash of their own.
[[nodiscard]] inline Status same_as_captured(const ShardReader& shard, const PieceRecord& p, const std::string& tensor,
                                             const std::vector<ChunkRecord>& written, std::uint64_t step) {
  const std::vector<ChunkRecord>& captured = shard.index().chunks;
  for (std::size_t i = 0; i < written.size() || i < p.chunk_count; ++i) {
    const bool same = i < written.size() && i < p.chunk_count && captured[p.chunk_first + i].length == written[i].length &&
                      captured[p.chunk_first + i].digest == written[i].digest;
    if (!same)
      return make_error(Code::corrupt, shard.path() + ": step " + std::to_string(step) + ", tensor '" + tensor + "', chunk " +
                                           std::to_string(i) + ": the bytes promoted are not the bytes captured (" +
                                           std::to_string(p.chunk_count) + " chunks captured, " + std::to_string(written.size()) +
                                           " written; the memory copy changed since its capture)");
  }
  return Status();
}

// Copies a sealed memory shard into a persistent transaction, of a store directory or an object store alike
// (spec/TIERS.md 4.4): each piece read once, unhashed, with no second staging, and hashed by the persistent
// writer, whose digests must be the capture's. A piece that cannot be read or differs abandons the step on
// every rank: this rank aborts, the others' commit fails.
template <class Tx>
[[nodiscard]] Result<CommitResult> promote_shard(Tx& tx, ShardReader& shard, const TrainingState& state, std::uint64_t step,
                                                const std::set<std::string>& owners_write) {
  tx.state() = state;
  tx.state().values.erase(std::string(kPartialStepKey));  // the persistent step is whole
  Status copied;
  for (std::size_t k = 0; k < shard.index().pieces.size() && copied.ok(); ++k) {
    const PieceRecord& p = shard.index().pieces[k];
    const TensorRecord& t = shard.index().tensors[static_cast<std::size_t>(p.tensor)];
    if (owners_write.count(t.name) != 0) continue;  // a replicated tensor: its owner's shard holds it
    copied = tx.begin_piece(t.name, t.dtype, t.shape, p.offsets, p.shape);
    if (!copied.ok()) break;
    if (p.data_length > 0) {
      if (shard.fs().can_map()) {
        auto m = shard.map_piece(k, ReadCheck::none);
        copied = m.ok() ? tx.write(m->data(), m->size()) : m.status();
      } else {
        std::string buffer(static_cast<std::size_t>(p.data_length), '\0');
        copied = shard.read_piece(k, &buffer[0], buffer.size(), ReadCheck::none);
        if (copied.ok()) copied = tx.write(buffer.data(), buffer.size());
      }
    }
    if (copied.ok()) copied = tx.end_piece();
    if (copied.ok()) copied = same_as_captured(shard, p, t.name, tx.shard_writer().last_piece_chunks(), step);
  }
  if (!copied.ok()) {
    // Either kind of transaction names this rank's reason to the others (spec/SHARDING.md 3.4, spec/OBJECT.md 4.9).
    Status aborted = tx.abort(copied);
    (void)aborted;  // the copy's failure is the error to report; the step is abandoned either way
    return copied.with_context("promoting step " + std::to_string(step));
  }
  return tx.commit();
}

}  // namespace detail

// --- Creation ---------------------------------------------------------------------------------------

CKPT_INLINE Result<std::unique_ptr<TieredCheckpointer>> TieredCheckpointer::create_with(FsRef fs, CommRef comm,
                                                                                     std::optional<CommRef> control,
                                                                                     std::optional<CommRef> promotion,
                                                                                     TierOptions options) {
  Status local;
  if (options.memory_root.empty()) local = make_error(Code::invalid_argument, "TierOptions: memory_root is empty");
  else if (options.memory_every == 0) local = make_error(Code::invalid_argument, "TierOptions: memory_every must be >= 1");
  else if (options.persist_every % options.memory_every != 0)
    local = make_error(Code::invalid_argument, "TierOptions: persist_every " + std::to_string(options.persist_every) +
                                                   " is not a multiple of memory_every " + std::to_string(options.memory_every) +
                                                   ": a step is promoted from the memory tier");
  else if (options.memory_keep == 0) local = make_error(Code::invalid_argument, "TierOptions: memory_keep must be >= 1");
  else if (options.transfer_block == 0 || options.transfer_block > (std::size_t{1} << 30))
    local = make_error(Code::invalid_argument, "TierOptions: transfer_block must be in [1, 1 GiB]");
  else if (options.persist_every > 0 && options.persistent.empty())
    local = make_error(Code::invalid_argument, "TierOptions: persist_every is set but no persistent store is named");
  else if (object::is_object_url(options.persistent) && !options.open_objects)
    // Said now, on every rank, not at the first promotion or at a resume that needs storage.
    local = make_error(Code::unsupported, "TierOptions: the persistent tier " + options.persistent +
                                              " is on object storage and open_objects is empty (a build with ckpt::s3 "
                                              "passes object::open_s3_url)");
  else if (control && control->size() != comm.size())
    local = make_error(Code::invalid_argument, "the control communicator has " + std::to_string(control->size()) +
                                                   " ranks, the tiers' communicator " + std::to_string(comm.size()));
  else if (promotion && promotion->size() != comm.size())
    local = make_error(Code::invalid_argument, "the promotion communicator has " + std::to_string(promotion->size()) +
                                                   " ranks, the tiers' communicator " + std::to_string(comm.size()));
  else if (options.parity_group != 0 && options.replicas != 0)
    local = make_error(Code::invalid_argument, "TierOptions: parity groups replace replicas: set replicas to 0 with parity_group " +
                                                   std::to_string(options.parity_group) + " (spec/TIERS.md 12)");
  else if (options.parity_group != 0 && !ErasureCode::create(std::max(options.parity_group, options.parity_losses + 1), std::max(options.parity_losses, 1)).ok())
    local = ErasureCode::create(std::max(options.parity_group, options.parity_losses + 1), std::max(options.parity_losses, 1)).status();
  else if (options.when_busy == WhenBusy::skip && comm.size() > 1 && !control)
    local = make_error(Code::invalid_argument,
                       "TierOptions: when_busy skip across ranks needs a control communicator (create(fs, comm, control, "
                       "options)) so every rank skips the same captures; or set when_busy to wait (spec/TIERS.md 4.6)");
  CKPT_TRY(wire::agree(comm, local));
  std::unique_ptr<TieredCheckpointer> t(new TieredCheckpointer(fs, comm, control, promotion, std::move(options)));
  if (t->options_.topology) {
    t->topology_ = *t->options_.topology;
    if (t->topology_.size() != comm.size())
      local = make_error(Code::invalid_argument, "topology names " + std::to_string(t->topology_.size()) + " ranks; the job has " +
                                                     std::to_string(comm.size()));
  } else {
    CKPT_ASSIGN_OR_RETURN(t->topology_, topology_from_hostnames(comm));
  }
  if (local.ok()) {
    auto placement = place_replicas(t->topology_, t->options_.replicas);
    if (placement.ok()) t->placement_ = std::move(*placement);
    else local = placement.status();
  }
  if (local.ok() && t->options_.parity_group != 0) {
    auto parity = place_parity(t->topology_, t->options_.parity_group, t->options_.parity_losses);
    if (parity.ok()) t->parity_ = std::move(*parity);
    else local = parity.status();
  }
  const auto me = static_cast<std::uint32_t>(comm.rank());
  t->rank_dir_ = layout::rank_dir(t->options_.memory_root, me);
  if (local.ok()) {
    // mkdir -p of the root and the rank's directory, each made durable in its parent (spec/JOURNAL.md 5.1).
    std::vector<std::string> dirs{t->rank_dir_};
    for (std::string d = t->options_.memory_root; !d.empty() && d != "/" && d != "."; d = parent_path(d)) {
      dirs.insert(dirs.begin(), d);
      if (parent_path(d) == d) break;
    }
    for (const std::string& dir : dirs) {
      auto st = fs.stat(dir);
      if (st.ok()) continue;
      Status made = fs.mkdir(dir);
      if (!made.ok() && made.code() != Code::conflict) {
        local = made.with_context("memory tier");
        break;
      }
      (void)fs.sync_dir(parent_path(dir));
    }
  }
  if (local.ok()) {
    StoreOptions so;
    so.create_if_missing = true;
    so.chunk_size_log2 = t->options_.chunk_size_log2;
    so.reuse_files = true;  // a capture writes over a retired step's pages (spec/TIERS.md 2.1)
    if (SnapshotCopier* device = t->options_.device) {
      // Device snapshots land in the slot itself, pinned once per mapping (spec/ASYNC.md 6.1). Memory that cannot
      // be pinned still takes the copies, more slowly: noted, not refused.
      TieredCheckpointer* tiers = t.get();
      so.pin_slot = [device, tiers](void* at, std::size_t bytes) {
        Status pinned = device->pin(at, bytes);
        if (!pinned.ok()) tiers->note("device snapshots copy into an unpinned memory-tier slot (slower): " + pinned.message());
        return Status();
      };
      so.unpin_slot = [device](void* at) { device->unpin(at); };
    }
    auto own = Store::open(fs, layout::own_store(t->options_.memory_root, me), Access::read_write, so);
    if (own.ok()) t->own_ = std::move(*own);
    else local = own.status().with_context("memory tier");
  }
  if (local.ok()) {
    auto log = TierLog::open(fs, t->rank_dir_);
    if (!log.ok() && log.status().code() == Code::corrupt) {
      // A damaged log must not keep the job from starting: it is set aside under a new name (never
      // deleted) and a fresh one begun; the other ranks' logs still claim the steps (spec/TIERS.md 5.1).
      const std::string from = join_path(t->rank_dir_, std::string(memory_layout::kTierLog));
      std::string to;
      for (std::uint32_t n = 0; to.empty() || fs.stat(to).ok(); ++n) to = join_path(t->rank_dir_, memory_layout::set_aside_log_name(n));
      Status moved = fs.rename(from, to);
      if (moved.ok()) moved = fs.sync_dir(t->rank_dir_);
      if (moved.ok()) {
        t->log_replaced_ = true;
        t->notes_.push_back(log.status().message() + ": set aside as " + to + ", a new log begun");
        log = TierLog::open(fs, t->rank_dir_);
      }
    }
    if (log.ok()) t->log_ = std::make_unique<TierLog>(std::move(*log));
    else local = log.status();
  }
  CKPT_TRY(wire::agree(comm, local));
  return t;
}

CKPT_INLINE TieredCheckpointer::~TieredCheckpointer() {
  finish_refill().ignore_error();  // its failure is in the tier log and notes; a destructor reports nothing
  if (saver_) (void)saver_->wait();
  saver_.reset();  // no promotion is queued after this
  {
    std::lock_guard<std::mutex> lock(promote_mutex_);
    promoter_stop_ = true;
  }
  promote_cv_.notify_all();
  if (promoter_.joinable()) promoter_.join();  // the queued promotions end first
}

// --- The promoter (spec/TIERS.md 4.4) --------------------------------------------------------------------

CKPT_INLINE void TieredCheckpointer::run_promotions() {
  for (;;) {
    QueuedPromotion job;
    {
      std::unique_lock<std::mutex> lock(promote_mutex_);
      promote_cv_.wait(lock, [&] { return promoter_stop_ || !promotions_.empty(); });
      if (promotions_.empty()) return;
      job = promotions_.front();  // stays queued, so its step stays pinned, until it ends
    }
    Status s = promote(job.step, *job.mine, job.my_digest, job.digest, job.owners_write);
    if (!s.ok()) {
      promotion_->leave(s);  // the other ranks' promotions fail instead of waiting for this rank
      std::lock_guard<std::mutex> lock(failure_mutex_);
      if (background_failure_.ok()) background_failure_ = s.with_context("step " + std::to_string(job.step));
    }
    {
      std::lock_guard<std::mutex> lock(promote_mutex_);
      promotions_.pop_front();
    }
    promote_cv_.notify_all();
  }
}

CKPT_INLINE bool TieredCheckpointer::promoting_locked(std::uint64_t step) const {
  return std::any_of(promotions_.begin(), promotions_.end(), [&](const QueuedPromotion& p) { return p.step == step; });
}

CKPT_INLINE bool TieredCheckpointer::promoting(std::uint64_t step) const {
  std::lock_guard<std::mutex> lock(promote_mutex_);
  return promoting_locked(step);
}

CKPT_INLINE bool TieredCheckpointer::promotion_pins_next_slot() const {
  std::lock_guard<std::mutex> lock(promote_mutex_);
  for (const auto& p : promotions_)
    if (std::find(recent_.begin(), recent_.end(), p.step) == recent_.end()) return true;
  return false;
}

CKPT_INLINE Status TieredCheckpointer::make_room() {
  const std::vector<StepInfo> live = own_->steps();
  for (std::size_t i = 0; i + (ring_steps() - 1) < live.size(); ++i) {
    std::unique_lock<std::mutex> lock(promote_mutex_);
    promote_cv_.wait(lock, [&] { return !promoting_locked(live[i].step); });
  }
  return retire_memory(placement_.held_by(rank()), ring_steps() - 1);
}

CKPT_INLINE void TieredCheckpointer::finish_promotions() {
  std::unique_lock<std::mutex> lock(promote_mutex_);
  promote_cv_.wait(lock, [&] { return promotions_.empty(); });
}

CKPT_INLINE Status TieredCheckpointer::finish_refill() {
  if (!refill_.joinable()) return Status();
  refill_.join();
  return std::exchange(refill_result_, Status()).with_context("refilling replicas after the resume");
}

CKPT_INLINE Status TieredCheckpointer::owe_cut_short_promotion() {
  const std::uint64_t resumed = *std::exchange(resumed_step_, std::nullopt);
  // The newest step persisted: PERSISTED in this rank's log (a lost node's was wiped) or in the persistent store as
  // rank 0's resume found it; the newest over the ranks.
  std::optional<std::uint64_t> newest = scanned_persisted_;
  for (const auto& r : records())
    if (r.event == TierEvent::persisted && (!newest || r.step > *newest)) newest = r.step;
  Encoder mine;
  mine.u8(newest ? 1 : 0), mine.u64(newest.value_or(0));
  CKPT_ASSIGN_OR_RETURN(auto all, comm_.gather(std::move(mine.str()), 0));
  Encoder verdict;
  if (rank() == 0) {
    std::optional<std::uint64_t> best;
    for (const auto& m : all) {
      Decoder d = wire::decoder(m);
      std::uint8_t has = 0;
      std::uint64_t step = 0;
      if (d.u8(has) && d.u64(step) && has != 0 && (!best || step > *best)) best = step;
    }
    // Owed: the last multiple of persist_every at or before the step resumed from, above the job's start, is newer.
    const std::uint64_t due = resumed / options_.persist_every * options_.persist_every;
    verdict.u8(due > 0 && (!best || *best < due) ? 1 : 0), verdict.u8(best ? 1 : 0), verdict.u64(best.value_or(0));
  }
  std::string bytes = std::move(verdict.str());
  CKPT_TRY(comm_.broadcast(bytes, 0));
  Decoder d = wire::decoder(bytes);
  std::uint8_t owed = 0, has = 0;
  std::uint64_t best = 0;
  if (!d.u8(owed) || !d.u8(has) || !d.u64(best)) return make_error(Code::corrupt, "undecodable promotion verdict");
  promotion_owed_ = owed != 0;
  if (has != 0) last_promoted_ = best;
  return Status();
}

CKPT_INLINE void TieredCheckpointer::note(std::string text) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  notes_.push_back(std::move(text));
}

CKPT_INLINE void TieredCheckpointer::phase(const char* name, std::uint64_t step) const {
  if (options_.on_phase) options_.on_phase(name, step);
}

CKPT_INLINE Status TieredCheckpointer::log(std::vector<TierRecord> records) {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return log_->append(std::move(records));
}

CKPT_INLINE Status TieredCheckpointer::compact_log() {
  std::lock_guard<std::mutex> lock(log_mutex_);
  const std::size_t limit = 64 + 16 * options_.memory_keep * (1 + held_.size());
  if (log_->records().size() <= limit) return Status();
  // What a resume can still use: the records of steps some memory store of this rank holds, and every
  // verdict that must outlive the copies (a step that failed to load, a copy set aside), the newest first.
  std::uint64_t oldest = UINT64_MAX;
  for (const auto& info : own_->steps()) oldest = std::min(oldest, info.step);
  for (const auto& [s, store] : held_)
    for (const auto& info : store->steps()) oldest = std::min(oldest, info.step);
  std::size_t verdicts = 0;
  const auto verdict = [](const TierRecord& r) {
    return r.event == TierEvent::load_failed || r.event == TierEvent::set_aside || r.event == TierEvent::sdc;
  };
  for (const auto& r : log_->records()) verdicts += verdict(r) ? 1 : 0;
  std::size_t skip_verdicts = verdicts > 256 ? verdicts - 256 : 0;
  return log_->compact([&](const TierRecord& r) {
    if (verdict(r)) return skip_verdicts == 0 || (--skip_verdicts, false);
    return oldest != UINT64_MAX && r.step >= oldest;
  });
}

CKPT_INLINE std::vector<std::string> TieredCheckpointer::notes() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return notes_;
}

CKPT_INLINE std::vector<TierRecord> TieredCheckpointer::records() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return log_->records();
}

CKPT_INLINE Result<Store*> TieredCheckpointer::held(std::uint32_t shard) {
  auto it = held_.find(shard);
  if (it != held_.end()) return it->second.get();
  StoreOptions so;
  so.create_if_missing = true;
  so.chunk_size_log2 = options_.chunk_size_log2;
  so.reuse_files = true;  // a replica writes over a retired one's pages (spec/TIERS.md 2.1)
  CKPT_ASSIGN_OR_RETURN(auto store, Store::open(fs_, layout::held_store(options_.memory_root, static_cast<std::uint32_t>(rank()), shard),
                                                Access::read_write, so));
  Store* raw = store.get();
  held_[shard] = std::move(store);
  return raw;
}

CKPT_INLINE TierAction TieredCheckpointer::action(std::uint64_t step) const noexcept {
  if (step % options_.memory_every != 0) return TierAction::none;
  if (options_.persist_every > 0 && step % options_.persist_every == 0) return TierAction::capture_and_persist;
  return TierAction::capture;
}

// --- Capacity (spec/TIERS.md 2.2) -------------------------------------------------------------------

CKPT_INLINE Status TieredCheckpointer::check_capacity(std::uint64_t bytes) {
  struct statvfs sv {};
  if (::statvfs(options_.memory_root.c_str(), &sv) != 0)
    return make_error(Code::io, options_.memory_root + ": statvfs failed: cannot tell the memory tier's free space");
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  int on_node = 0;
  for (int r = 0; r < topology_.size(); ++r) on_node += topology_.node(r) == topology_.node(rank()) ? 1 : 0;
  // Each rank keeps a ring of files of its own shard and of each shard it holds (spec/TIERS.md 2.1).
  std::uint64_t copies = 1 + placement_.held_by(rank()).size();
  std::uint64_t per_rank = ring_steps() * copies * (bytes + bytes / 64 + (std::uint64_t{1} << 20));
  // Parity (spec/TIERS.md 12.1): k segments of a shard's 1/(n-k) each, over the largest shard of the group.
  if (const ParityGroup* g = parity_ ? parity_->group(rank()) : nullptr) {
    const std::uint64_t parity_bytes = (bytes + bytes / 64 + (std::uint64_t{1} << 20)) * static_cast<std::uint64_t>(g->losses) /
                                       static_cast<std::uint64_t>(g->data());
    per_rank += ring_steps() * (parity_bytes + (std::uint64_t{1} << 20));
    copies += 1;
  }
  const std::uint64_t needed = per_rank * static_cast<std::uint64_t>(std::max(on_node, 1));
  if (needed > free_bytes)
    return make_error(Code::io, "memory tier " + options_.memory_root + " on node " + topology_.node(rank()) + ": needs " +
                                    std::to_string(needed) + " bytes (" + std::to_string(on_node) + " ranks x " +
                                    std::to_string(ring_steps()) + " steps x " + std::to_string(copies) +
                                    " copies x " + std::to_string(bytes) + " bytes per shard), " + std::to_string(free_bytes) +
                                    " bytes are free");
  return Status();
}

CKPT_INLINE Status TieredCheckpointer::start_saver(std::size_t bytes) {
  AsyncSaveOptions o;
  o.staging_bytes = options_.staging_bytes != 0 ? options_.staging_bytes : std::max<std::size_t>(bytes + (std::size_t{1} << 20), std::size_t{16} << 20);
  o.slab_bytes = std::min<std::size_t>(std::size_t{8} << 20, std::max<std::size_t>(o.staging_bytes / 4, 4096));
  // The capture is the memory tier: copied straight into the own store's next file, mapped once and written
  // over in a ring whose oldest step is retired first (spec/TIERS.md 2.1), device snapshots too (the slot is
  // pinned); without a file system that maps, through the staging pool into the same ring. Its file is the
  // slot: a capture due while the last one is in the background waits for it to end (wait) or is not taken
  // (skip, 4.6).
  o.max_in_flight = 1;
  o.in_place = fs_.can_map();
  o.before_stage = [this](std::uint64_t) { return make_room(); };
  if (promotion_) o.busy = [this] { return promotion_pins_next_slot(); };
  o.when_busy = options_.when_busy;
  o.obey_flush_requests = false;
  o.worker_nice = options_.background_nice;
  o.device = options_.device;
  o.memory = options_.staging_memory;
  o.on_complete = [this](const SaveOutcome& outcome) { after_capture(outcome); };
  auto saver = control_ ? AsyncSaver::create(*own_, std::move(o), *control_) : AsyncSaver::create(*own_, std::move(o));
  CKPT_ASSIGN_OR_RETURN(saver_, std::move(saver));
  return Status();
}

// --- The step -----------------------------------------------------------------------------------------

CKPT_INLINE Result<StepOutcome> TieredCheckpointer::step(std::uint64_t step, const std::function<void(SaveRequest&)>& fill) {
  StepOutcome out;
  out.action = action(step);
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!background_failure_.ok()) return std::exchange(background_failure_, Status());
  }
  if (out.action == TierAction::none) return out;
  if (!saver_ && resumed_step_ && options_.persist_every > 0) {
    CKPT_TRY(finish_refill());  // the refill uses the communicator the agreement needs
    CKPT_TRY(owe_cut_short_promotion());
  }
  // A promotion skipped or cut short by a failure passes to the next capture taken persist_every or more after the
  // last one begun (spec/TIERS.md 4.6): every rank skipped the same captures and agreed on what was persisted.
  const bool candidate = out.action == TierAction::capture_and_persist || promotion_owed_;
  const bool promoted = candidate && (!last_promoted_ || step >= *last_promoted_ + options_.persist_every);
  out.action = promoted ? TierAction::capture_and_persist : TierAction::capture;
  const auto started = std::chrono::steady_clock::now();
  SaveRequest request(step);
  fill(request);
  request.state().step = step;
  const auto me = static_cast<std::uint32_t>(rank());
  // The canary's replicated tensors (spec/TIERS.md 11.1): every holder keeps its copy in its own memory shard,
  // so each holder's digests of it are the ones its writer computes as it hashes the capture.
  std::vector<CanaryTensor> canary;
  for (const auto& t : request.tensors())
    if (t.replica_owner >= 0) canary.push_back(CanaryTensor{t.name, static_cast<std::uint32_t>(t.replica_owner), {}, false, t.name, t.offsets});
  // A data-parallel job's live copies (11.1): this rank's own pieces give their digests from the capture's index;
  // the live copies of the pieces whose replicas this rank keeps are hashed now, before the training changes them.
  if (!request.live_copies().empty()) {
    const std::vector<int> sources = placement_.held_by(static_cast<int>(me));
    for (const auto& t : request.tensors())
      if (t.replica_owner < 0 && !t.on_device)
        canary.push_back(CanaryTensor{live_piece_key(t.name, t.offsets), me, {}, false, t.name, t.offsets});
    const std::size_t chunk = std::size_t{1} << options_.chunk_size_log2;
    for (const auto& c : request.live_copies()) {
      if (std::find(sources.begin(), sources.end(), c.owner) == sources.end()) continue;
      CanaryTensor live{live_piece_key(c.name, c.offsets), static_cast<std::uint32_t>(c.owner), {}, true, c.name, c.offsets};
      const auto* bytes = static_cast<const unsigned char*>(c.data);
      for (std::size_t off = 0; off < c.size; off += chunk) live.digests.push_back(xxh3_64(bytes + off, std::min(chunk, c.size - off)));
      canary.push_back(std::move(live));
    }
  }
  {
    std::lock_guard<std::mutex> lock(canary_mutex_);  // before the save: its worker may look for them at once
    if (!canary.empty()) canary_[step] = std::move(canary);
    if (promoted) to_promote_.insert(step);
  }
  Encoder state;
  encode_training_state(state, request.state());
  std::string state_bytes = std::move(state.str());
  request.add_tensor(layout::state_tensor(me), DType::U8, {state_bytes.size()}, state_bytes.data(), state_bytes.size());
  // The memory store holds this rank's shard only: its step says so (spec/TIERS.md 2.1).
  request.state().values[std::string(kPartialStepKey)] = Value(std::to_string(me) + "/" + std::to_string(world()));
  if (!saver_) {
    // The resume's refill uses the communicator: it ends before this agreement and the background's (7.4).
    CKPT_TRY(finish_refill());
    // The first capture: every rank checks its node's free space against what the policy keeps (collective).
    Status local = options_.check_free_space ? check_capacity(request.bytes()) : Status();
    if (local.ok()) local = start_saver(static_cast<std::size_t>(request.bytes()));
    CKPT_TRY(wire::agree(comm_, local));
  }
  auto ticket = saver_->save(std::move(request));
  if (!ticket.ok() || ticket->skipped) {
    std::lock_guard<std::mutex> lock(canary_mutex_);
    canary_.erase(step);
    to_promote_.erase(step);
  }
  if (!ticket.ok()) {
    // The other ranks' workers would wait for this rank's part of the step: tell them (spec/SHARDING.md 3.4).
    comm_.leave(ticket.status());
    if (promotion_) promotion_->leave(ticket.status());
    return ticket.status();
  }
  out.stall = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started);
  promotion_owed_ = candidate && (ticket->skipped || !promoted);
  if (promoted && !ticket->skipped) last_promoted_ = step;
  if (ticket->skipped) {
    // Every rank skipped this capture (the saver agreed on control): recorded, never waited for (4.6).
    out.skipped = true;
    ++skipped_;
    TierRecord r;
    r.event = TierEvent::skipped, r.step = step, r.world = static_cast<std::uint32_t>(world()), r.shard = me;
    CKPT_TRY(log({r}));
  }
  return out;
}

CKPT_INLINE Status TieredCheckpointer::wait() {
  CKPT_TRY(finish_refill());
  if (saver_) CKPT_TRY(saver_->wait());
  finish_promotions();
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return std::exchange(background_failure_, Status());
}

CKPT_INLINE void TieredCheckpointer::after_capture(const SaveOutcome& outcome) {
  Status s = replicate_and_promote(outcome);
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (background_failure_.ok()) background_failure_ = s.with_context("step " + std::to_string(outcome.step));
  }
}

// The worker's part of a capture (spec/TIERS.md 4): agree on the step's digest, send this rank's shard
// to its holders while receiving the shards it holds, record the copies, promote when due.
CKPT_INLINE Status TieredCheckpointer::replicate_and_promote(const SaveOutcome& outcome) {
  const std::uint64_t step = outcome.step;
  const auto me = static_cast<std::uint32_t>(rank());
  const auto world = static_cast<std::uint32_t>(this->world());
  // 1. This rank's shard digest, from the memory step just committed.
  Status local = outcome.status;
  std::optional<StepReader> mine;
  Digest128 my_digest;
  if (local.ok()) {
    auto reader = StepReader::open(fs_, own_->path(), outcome.commit->step, own_->uuid());
    if (reader.ok()) mine.emplace(std::move(*reader)), my_digest = shard_digest(mine->shard(0));
    else local = reader.status();
  }
  if (local.ok()) phase("captured", step);
  std::vector<SdcFinding> findings;
  const std::vector<CanaryTensor> canary = canary_of(step, mine ? &*mine : nullptr);
  CKPT_ASSIGN_OR_RETURN(const std::vector<Digest128> shards, agree_on_capture(step, local, my_digest, canary, findings));
  if (!findings.empty()) return report_sdc(step, shards, findings);
  // A replicated tensor goes to the persistent store from its owner only (spec/SHARDING.md 3.3: no overlap).
  std::set<std::string> owners_write;
  for (const auto& c : canary)
    if (c.owner != me && !c.live) owners_write.insert(c.tensor);
  const Digest128 digest = step_digest(step, shards);
  {
    std::lock_guard<std::mutex> lock(promote_mutex_);
    recent_.push_back(step);
    while (recent_.size() > ring_steps() - 1) recent_.pop_front();
  }
  TierRecord rec;
  rec.event = TierEvent::captured, rec.step = step, rec.world = world, rec.shard = me, rec.step_digest = digest;
  rec.shard_digest = my_digest, rec.txn = mine->info().txn, rec.detail = encode_shard_digests(shards);
  CKPT_TRY(log({rec}));

  // 2a. Parity groups (spec/TIERS.md 12.3): this rank's segments to its stripes' parity holders, the parity it holds built.
  Status parity_failure;
  if (parity_) {
    std::vector<TierRecord> parity_records;
    std::uint32_t built = 0;
    phase("encoding", step);
    CKPT_TRY(encode_parity(step, digest, shards, nullptr, parity_records, built, parity_failure));
    if (!parity_records.empty()) CKPT_TRY(log(parity_records));
    Encoder ack;
    ack.u32(built);
    CKPT_ASSIGN_OR_RETURN(auto acks, comm_.gather(std::move(ack.str()), 0));
    std::string complete(1, '\0');
    if (me == 0) {
      std::uint64_t expected = 0, got = 0;
      for (const auto& g : parity_->groups) expected += static_cast<std::uint64_t>(g.size()) * static_cast<std::uint64_t>(g.losses);
      for (const auto& a : acks) {
        Decoder d = wire::decoder(a);
        std::uint32_t n = 0;
        if (d.u32(n)) got += n;
      }
      complete[0] = static_cast<char>(expected > 0 && got == expected ? 1 : 0);
    }
    CKPT_TRY(comm_.broadcast(complete, 0));
    if (complete.size() == 1 && complete[0] == 1) {
      // Every stripe's parity is held: any parity_losses nodes of each group may now be lost (12.3).
      TierRecord r;
      r.event = TierEvent::replicated, r.step = step, r.world = world, r.shard = me, r.step_digest = digest;
      r.copies = static_cast<std::uint32_t>(options_.parity_losses);
      CKPT_TRY(log({r}));
      replicated_ = step;
      phase("replicated", step);
    }
  }
  // 2. Replicas: this rank's shard to its holders; the shards it holds from their sources.
  std::vector<int> holders = placement_.holders[me];
  std::vector<int> sources = placement_.held_by(static_cast<int>(me));
  detail::ShardSource src{own_->path() + " step " + std::to_string(step), &mine->shard(0), mine->state(), ReadCheck::none, {}};
  if (mine) src.mapped = own_->kept_mapping(mine->shard(0).path());  // the capture's own pages, already mapped
  std::vector<TierRecord> held_records;
  Status receive_failure;
  phase("replicating", step);
  Status exchanged = detail::exchange(
      [&] {
        Status copy_failure;  // this rank's fresh shard does not verify: the step stays unreplicated
        for (int h : holders) {
          // After a failure every other holder is still told, so no receiver waits for a stream that never comes.
          if (!copy_failure.ok()) src.reader = nullptr, src.where = copy_failure.message();
          CKPT_TRY(detail::send_shard(comm_, src, step, me, world, digest, my_digest, h, detail::kReplicateTag, options_.transfer_block,
                                      &copy_failure));
        }
        return copy_failure;
      },
      [&] {
        for (int s : sources) {
          const auto shard = static_cast<std::uint32_t>(s);
          auto store = held(shard);
          std::optional<detail::Received> got;
          Status copy_failure;
          // The replica writes over the oldest held step's file instead of a new one (spec/TIERS.md 2.1).
          if (store.ok()) evict_held(**store, shard, ring_steps() - 1, held_records);
          CKPT_TRY(detail::receive_shard(fs_, comm_, store, s, detail::kReplicateTag, step, shard, shards[shard], got, copy_failure));
          if (!got) {
            // A copy that does not verify is not acknowledged (spec/TIERS.md 4.3).
            if (receive_failure.ok()) receive_failure = copy_failure;
            continue;
          }
          TierRecord h;
          h.event = TierEvent::held, h.step = step, h.world = world, h.shard = shard, h.step_digest = digest;
          h.shard_digest = shards[shard], h.txn = got->info.txn;
          held_records.push_back(h);
          evict_held(**store, shard, options_.memory_keep, held_records);
        }
        return Status();
      });
  if (!held_records.empty()) CKPT_TRY(log(held_records));
  // 3. Acknowledgements: the step is replicated when every shard has its copies, verified by the holders.
  Encoder ack;
  ack.u32(static_cast<std::uint32_t>(held_records.size()));
  for (const auto& h : held_records)
    if (h.event == TierEvent::held) ack.u32(h.shard);
  CKPT_ASSIGN_OR_RETURN(auto acks, comm_.gather(std::move(ack.str()), 0));
  Encoder copies_msg;
  if (me == 0) {
    std::vector<std::uint32_t> copies(world, 0);
    for (const auto& a : acks) {
      Decoder d = wire::decoder(a);
      std::uint32_t n = 0, s = 0;
      if (!d.u32(n)) continue;
      while (d.u32(s))
        if (s < world) ++copies[s];
    }
    copies_msg.u32(world == 0 ? 0 : *std::min_element(copies.begin(), copies.end()));
  }
  std::string copies_bytes = std::move(copies_msg.str());
  CKPT_TRY(comm_.broadcast(copies_bytes, 0));
  std::uint32_t fewest = 0;
  Decoder cd = wire::decoder(copies_bytes);
  if (!cd.u32(fewest)) return make_error(Code::corrupt, "undecodable replication verdict");
  if (placement_.achievable > 0 && fewest >= static_cast<std::uint32_t>(placement_.achievable)) {
    TierRecord r;
    r.event = TierEvent::replicated, r.step = step, r.world = world, r.shard = me, r.step_digest = digest, r.copies = fewest;
    CKPT_TRY(log({r}));
    replicated_ = step;
    phase("replicated", step);
  }
  // 4. Promotion: the sealed memory shard copied into the persistent store, verified as it is read (spec/TIERS.md 4.4),
  // for the captures step() marked (a multiple of persist_every, or one a promotion skipped or cut short passed to: 4.6).
  bool marked = false;
  {
    std::lock_guard<std::mutex> lock(canary_mutex_);
    marked = to_promote_.count(step) > 0;
    to_promote_.erase(to_promote_.begin(), to_promote_.upper_bound(step));  // and any a failed sequence left
  }
  if (marked) {
    if (!promotion_) {
      CKPT_TRY(promote(step, *mine, my_digest, digest, owners_write));
    } else {
      // To the promoter, in step order: the next capture replicates meanwhile; the step's file is pinned.
      {
        std::lock_guard<std::mutex> lock(promote_mutex_);
        promotions_.push_back(QueuedPromotion{step, std::make_shared<StepReader>(std::move(*mine)), my_digest, digest, owners_write});
        if (!promoter_.joinable())
          promoter_ = std::thread([this] {
            (void)lower_this_thread_priority(options_.background_nice);
            run_promotions();
          });
      }
      promote_cv_.notify_all();
    }
  }
  // 5. Retention of this rank's own memory steps.
  CKPT_TRY(retire_memory(sources, options_.memory_keep));
  CKPT_TRY(compact_log());
  if (!exchanged.ok()) return exchanged;
  if (!receive_failure.ok()) return receive_failure;
  return parity_failure;
}

CKPT_INLINE std::vector<TieredCheckpointer::CanaryTensor> TieredCheckpointer::canary_of(std::uint64_t step, const StepReader* mine) {
  std::vector<CanaryTensor> canary;
  {
    std::lock_guard<std::mutex> lock(canary_mutex_);
    auto it = canary_.find(step);
    if (it == canary_.end()) return canary;
    canary = std::move(it->second);
    canary_.erase(it);
  }
  if (mine == nullptr) return {};
  const Index& index = mine->shard(0).index();
  for (auto& c : canary) {
    if (c.live) continue;  // hashed at the capture
    // The digests the writer computed as it hashed the capture's bytes: no second pass (spec/TIERS.md 11.1).
    const TensorRecord* t = index.find_tensor(c.tensor);
    if (t == nullptr) continue;  // not in the shard: nothing of this rank to compare
    for (std::uint64_t i = 0; i < t->piece_count; ++i) {
      const PieceRecord& p = index.pieces[static_cast<std::size_t>(t->piece_first + i)];
      if (p.offsets != c.offsets) continue;
      for (std::uint64_t k = 0; k < p.chunk_count; ++k) c.digests.push_back(index.chunks[static_cast<std::size_t>(p.chunk_first + k)].digest);
    }
  }
  return canary;
}

// Every rank's capture of `step` (its status, shard digest and replicated tensors' chunk digests) to rank 0,
// and back the shard digests of every rank, or the first rank's failure: a step not captured on every rank
// is no step of the tier. Rank 0 compares the replicated tensors' digests across their holders (11.1).
CKPT_INLINE Result<std::vector<Digest128>> TieredCheckpointer::agree_on_capture(std::uint64_t step, const Status& local,
                                                                              const Digest128& my_digest,
                                                                              const std::vector<CanaryTensor>& canary,
                                                                              std::vector<SdcFinding>& findings) {
  const auto world = static_cast<std::uint32_t>(this->world());
  Encoder report;
  wire::put_status(report, local);
  wire::put_digest(report, my_digest);
  report.u32(static_cast<std::uint32_t>(canary.size()));
  for (const auto& c : canary) {
    wire::put_text(report, c.name);
    report.u32(static_cast<std::uint32_t>(c.digests.size()));
    for (const std::uint64_t d : c.digests) report.u64(d);
  }
  CKPT_ASSIGN_OR_RETURN(auto gathered, comm_.gather(std::move(report.str()), 0));
  Encoder verdict;
  if (rank() == 0) {
    Status first;
    std::vector<Digest128> digests(world);
    std::vector<std::tuple<std::string, std::uint32_t, std::vector<std::uint64_t>>> held;
    for (std::uint32_t r = 0; r < world; ++r) {
      Decoder d = wire::decoder(gathered[r]);
      Status s;
      std::uint32_t tensors = 0;
      bool ok = wire::get_status(d, s) && wire::get_digest(d, digests[r]) && d.u32(tensors);
      for (std::uint32_t i = 0; ok && i < tensors; ++i) {
        std::string name;
        std::uint32_t n = 0;
        ok = wire::get_text(d, name, journal::kMaxPayload) && d.u32(n) && n <= d.remaining() / 8;
        std::vector<std::uint64_t> chunk_digests(ok ? n : 0);
        for (auto& c : chunk_digests) ok = ok && d.u64(c);
        if (ok) held.emplace_back(std::move(name), r, std::move(chunk_digests));
      }
      if (!ok) s = make_error(Code::corrupt, "undecodable capture report");
      if (!s.ok() && first.ok()) first = s.with_context("rank " + std::to_string(r) + " did not capture step " + std::to_string(step));
    }
    wire::put_status(verdict, first);
    for (const auto& d : digests) wire::put_digest(verdict, d);
    const std::vector<SdcFinding> found = first.ok() ? compare_replicas(step, held) : std::vector<SdcFinding>{};
    verdict.u32(static_cast<std::uint32_t>(found.size()));
    for (const auto& f : found) wire::put_text(verdict, encode_sdc(f));
  }
  std::string verdict_bytes = std::move(verdict.str());
  CKPT_TRY(comm_.broadcast(verdict_bytes, 0));
  Decoder vd = wire::decoder(verdict_bytes);
  Status captured;
  std::vector<Digest128> shards(world);
  bool decoded = wire::get_status(vd, captured);
  for (auto& d : shards) decoded = decoded && wire::get_digest(vd, d);
  std::uint32_t found = 0;
  decoded = decoded && vd.u32(found);
  for (std::uint32_t i = 0; decoded && i < found; ++i) {
    TierRecord r;
    r.step = step;
    decoded = wire::get_text(vd, r.detail, journal::kMaxPayload);
    auto f = decoded ? decode_sdc(r, "capture verdict") : Result<SdcFinding>(make_error(Code::corrupt, ""));
    decoded = decoded && f.ok();
    if (decoded) findings.push_back(std::move(*f));
  }
  if (!decoded) return make_error(Code::corrupt, "undecodable capture verdict");
  if (!captured.ok()) return captured;  // not captured on every rank: not a step of the memory tier
  return shards;
}

// A step whose replicated tensors' holders disagree is no step of any tier (spec/TIERS.md 11.3): recorded,
// never replicated or promoted, its own copy retired at once; the job is told and resumes from an older one.
CKPT_INLINE Status TieredCheckpointer::report_sdc(std::uint64_t step, const std::vector<Digest128>& shards,
                                                  const std::vector<SdcFinding>& findings) {
  std::vector<TierRecord> records;
  for (const auto& f : findings) {
    TierRecord r;
    r.event = TierEvent::sdc, r.step = step, r.world = static_cast<std::uint32_t>(world()), r.shard = static_cast<std::uint32_t>(rank());
    r.step_digest = step_digest(step, shards), r.detail = encode_sdc(f);
    records.push_back(std::move(r));
  }
  CKPT_TRY(log(std::move(records)));
  Status retired = own_->retire(step);
  if (!retired.ok()) note("step " + std::to_string(step) + " (SDC) stays in the own memory store until retention: " + retired.message());
  if (options_.on_sdc)
    for (const auto& f : findings) options_.on_sdc(f);
  std::string what = findings.front().describe();
  if (findings.size() > 1) what += "; and " + std::to_string(findings.size() - 1) + " more replicated tensors";
  return make_error(Code::corrupt, "silent data corruption at step " + std::to_string(step) + ": " + what +
                                       " (the step is in no tier; resume from an older one)");
}

CKPT_INLINE void TieredCheckpointer::evict_held(Store& store, std::uint32_t shard, std::size_t keep, std::vector<TierRecord>& records) {
  auto retired = retain_memory(store, keep);
  if (!retired.ok()) return;  // kept longer: retention runs again at the next replica
  for (const auto& old : *retired) {
    TierRecord e;
    e.event = TierEvent::evicted, e.step = old.step, e.world = static_cast<std::uint32_t>(world()), e.shard = shard, e.txn = old.txn;
    records.push_back(e);
  }
}

// Retention of this rank's own memory steps (the newest `keep`), and of the shards it fetched at a resume
// that the placement does not give it (`sources` are the shards it holds by placement).
CKPT_INLINE Status TieredCheckpointer::retire_memory(const std::vector<int>& sources, std::size_t keep) {
  const auto me = static_cast<std::uint32_t>(rank());
  const auto world = static_cast<std::uint32_t>(this->world());
  CKPT_ASSIGN_OR_RETURN(auto retired, retain_memory(*own_, keep));
  std::vector<TierRecord> evicted;
  for (const auto& old : retired) {
    TierRecord e;
    e.event = TierEvent::evicted, e.step = old.step, e.world = world, e.shard = me, e.txn = old.txn;
    evicted.push_back(e);
  }
  // Fetched shards are kept only while older than nothing the own store keeps, so a resume costs no
  // memory for longer than memory_keep captures.
  const auto own_steps = own_->steps();
  if (own_steps.size() >= options_.memory_keep) {
    const std::uint64_t oldest = own_steps.front().step;
    for (auto& [shard, store] : held_) {
      if (std::find(sources.begin(), sources.end(), static_cast<int>(shard)) != sources.end()) continue;
      for (const StepInfo& info : store->steps()) {
        if (info.step >= oldest) continue;
        CKPT_TRY(leave_memory(*store, info));
        TierRecord e;
        e.event = TierEvent::evicted, e.step = info.step, e.world = std::max(world, shard + 1), e.shard = shard, e.txn = info.txn;
        e.detail = "fetched at resume, older than every step kept";
        evicted.push_back(e);
      }
    }
  }
  if (!evicted.empty()) CKPT_TRY(log(evicted));
  return Status();
}

CKPT_INLINE Result<std::vector<StepInfo>> TieredCheckpointer::retain_memory(Store& store, std::size_t keep) {
  const std::vector<StepInfo> live = store.steps();
  std::vector<StepInfo> retired;
  for (std::size_t i = 0; i + keep < live.size(); ++i) {
    // A step the promoter still reads stays until its promotion ends (spec/TIERS.md 4.4); retention catches up.
    if (&store == own_.get() && promoting(live[i].step)) continue;
    const bool aside = recorded_set_aside(store, live[i]);
    CKPT_TRY(leave_memory(store, live[i]));
    if (!aside) retired.push_back(live[i]);
  }
  return retired;
}

CKPT_INLINE Status TieredCheckpointer::leave_memory(Store& store, const StepInfo& info) {
  return recorded_set_aside(store, info) ? store.set_aside(info.step) : store.retire(info.step);
}

// A SET_ASIDE record names the copy by its store path as the resuming rank spelled it (spec/TIERS.md 5.2).
CKPT_INLINE bool TieredCheckpointer::recorded_set_aside(const Store& store, const StepInfo& info) const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  for (const auto& r : log_->records())
    if (r.event == TierEvent::set_aside && r.step == info.step && r.txn == info.txn && memory_layout::names_store(r.detail, store.path()))
      return true;
  return false;
}

// Promotion (spec/TIERS.md 4.4), on every rank: its sealed memory shard into one collective transaction of
// the persistent store, then its shard digest read back from there and compared with the memory shard's.
CKPT_INLINE Status TieredCheckpointer::promote(std::uint64_t step, StepReader& mine, const Digest128& my_digest,
                                               const Digest128& digest, const std::set<std::string>& owners_write) {
  const auto me = static_cast<std::uint32_t>(rank());
  if (!persistent_) {
    PersistentWriteOptions o;
    o.chunk_size_log2 = options_.chunk_size_log2;
    o.keep = options_.persistent_keep;
    auto p = PersistentTier::open_write(fs_, options_.persistent, options_.open_objects, o, promotion_ ? *promotion_ : comm_);
    if (!p.ok()) return p.status().with_context("persistent tier");
    persistent_ = std::move(*p);
  }
  // On object storage a step number is committed once: a job resumed below the store's latest step (that
  // step set aside, or failed to load) goes on under numbers already taken there. Those steps stay in
  // memory; the first step above is promoted. Every rank reads the same log, so all skip together.
  if (Status room = persistent_->can_commit(step); !room.ok()) {
    note(room.message() + ": not promoted");
    return Status();
  }
  phase("promoting", step);
  CKPT_ASSIGN_OR_RETURN(PersistentTransaction tx, persistent_->begin(step));
  auto committed = detail::promote_shard(*tx, mine.shard(0), mine.state(), step, owners_write);
  CKPT_TRY(committed.status());
  // The persistent copy must be the same content: its shard digest against the memory shard's. Without the
  // replicated tensors another rank writes, each piece's chunks were compared with the capture's instead.
  Status same;
  Digest128 persisted_digest = my_digest;
  auto reader = persistent_->open_step(committed->step);
  if (!reader.ok()) same = reader.status();
  else if (!owners_write.empty()) persisted_digest = shard_digest(reader->shard(me));
  else if (shard_digest(reader->shard(me)) != my_digest)
    same = make_error(Code::corrupt, persistent_->path() + ": step " + std::to_string(step) + " shard " + std::to_string(me) +
                                         " has digest " + shard_digest(reader->shard(me)).hex() + ", the memory shard " + my_digest.hex());
  CKPT_TRY(wire::agree(promotion_ ? *promotion_ : comm_, same));
  TierRecord r;
  r.event = TierEvent::persisted, r.step = step, r.world = static_cast<std::uint32_t>(world()), r.shard = me, r.step_digest = digest;
  r.shard_digest = persisted_digest, r.txn = committed->step.txn;  // the persistent shard's content (11.1)
  CKPT_TRY(log({r}));
  persisted_ = step;
  phase("persisted", step);
  return Status();
}

}  // namespace ckpt::tiers

#include "parity_tier_inl.hpp"

#include "resume_inl.hpp"
