// ckpt: definitions of object/object_store.hpp (spec/OBJECT.md 4).
#pragma once

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "../object_store.hpp"

namespace ckpt::object {

namespace detail {

[[nodiscard]] inline std::string padded(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(v));
  return buf;
}

// Parses exactly 20 decimal digits.
[[nodiscard]] inline bool parse_padded(std::string_view s, std::uint64_t& v) noexcept {
  if (s.size() != layout::kNumberDigits) return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  return true;
}

[[nodiscard]] inline bool ends_with(std::string_view s, std::string_view suffix) noexcept {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A transaction id no other writer will pick: 63 random bits, never 0 (spec/OBJECT.md 4.1).
[[nodiscard]] inline std::uint64_t random_txn() {
  const Uuid u = random_uuid();
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | u[static_cast<std::size_t>(i)];
  v &= 0x7fffffffffffffffULL;
  return v == 0 ? 1 : v;
}

// Whether `key` holds exactly `bytes`: how a create-only PUT whose answer was lost (or refused with 412 on
// a retry of a PUT that had acted) is told from another writer's object (spec/OBJECT.md 4.4).
[[nodiscard]] inline Result<bool> holds_exactly(ObjectClient& client, const std::string& key, const std::string& bytes) {
  std::string found(bytes.size() + 1, '\0');
  CKPT_ASSIGN_OR_RETURN(std::size_t n, client.get(key, 0, found.data(), found.size()));
  return n == bytes.size() && found.compare(0, n, bytes) == 0;
}

// Outcome of a commit, as rank 0 broadcasts it.
struct ObjectOutcome {
  Status decision;
  bool committed = false;
  StepInfo step;
  std::vector<std::uint64_t> retired;  // steps retention retired
  Status retention;
};

[[nodiscard]] inline std::string encode_object_outcome(const ObjectOutcome& o) {
  Encoder out;
  wire::put_status(out, o.decision);
  out.u8(o.committed ? 1 : 0);
  out.u64(o.step.step);
  out.u64(o.step.txn);
  out.u32(o.step.world_size);
  out.u64(o.step.manifest_size);
  out.u64(o.step.manifest_digest);
  out.u32(static_cast<std::uint32_t>(o.retired.size()));
  for (auto s : o.retired) out.u64(s);
  wire::put_status(out, o.retention);
  return std::move(out.str());
}

[[nodiscard]] inline Status decode_object_outcome(const std::string& bytes, ObjectOutcome& o) {
  Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  std::uint8_t committed = 0;
  std::uint32_t n = 0;
  bool ok = wire::get_status(in, o.decision) && wire::get_u8(in, committed) && in.u64(o.step.step) &&
            in.u64(o.step.txn) && in.u32(o.step.world_size) && in.u64(o.step.manifest_size) && in.u64(o.step.manifest_digest) &&
            in.u32(n) && n <= in.remaining() / 8;
  for (std::uint32_t i = 0; ok && i < n; ++i) {
    std::uint64_t s = 0;
    ok = in.u64(s);
    o.retired.push_back(s);
  }
  ok = ok && wire::get_status(in, o.retention) && in.remaining() == 0;
  if (!ok) return make_error(Code::corrupt, "rank 0 broadcast a malformed outcome");
  o.committed = committed != 0;
  o.step.dir = step_dir_name(o.step.step, o.step.txn);
  o.step.files = standard_shard_files(o.step.world_size);
  return Status();
}

}  // namespace detail

CKPT_INLINE std::string commit_key(std::uint64_t step) {
  return std::string(layout::kLogPrefix) + detail::padded(step) + std::string(layout::kCommitSuffix);
}
CKPT_INLINE std::string retire_key(std::uint64_t step, std::uint64_t txn) {
  return std::string(layout::kLogPrefix) + detail::padded(step) + "-" + detail::padded(txn) + std::string(layout::kRetireSuffix);
}
CKPT_INLINE std::string abort_key(std::uint64_t step, std::uint64_t txn) {
  return std::string(layout::kLogPrefix) + detail::padded(step) + "-" + detail::padded(txn) + std::string(layout::kAbortSuffix);
}

CKPT_INLINE ObjectLog decode_log(const std::vector<std::pair<std::string, std::string>>& objects, const Uuid& store_uuid,
                                 const std::string& url_prefix) {
  ObjectLog log;
  std::set<std::pair<std::uint64_t, std::uint64_t>> retired;
  std::vector<StepInfo> committed;
  for (const auto& [key, bytes] : objects) {
    const std::string where = url_prefix + key;
    std::string_view name(key);
    name.remove_prefix(std::min(name.size(), layout::kLogPrefix.size()));
    std::uint64_t step = 0, txn = 0;
    enum class Kind { commit, retire, abort } kind;
    if (detail::ends_with(name, layout::kCommitSuffix) &&
        detail::parse_padded(name.substr(0, name.size() - layout::kCommitSuffix.size()), step)) {
      kind = Kind::commit;
    } else if (const std::size_t suffix = detail::ends_with(name, layout::kRetireSuffix)  ? layout::kRetireSuffix.size()
                                          : detail::ends_with(name, layout::kAbortSuffix) ? layout::kAbortSuffix.size()
                                                                                          : 0;
               suffix > 0 && name.size() == 2 * layout::kNumberDigits + 1 + suffix && name[layout::kNumberDigits] == '-' &&
               detail::parse_padded(name.substr(0, layout::kNumberDigits), step) &&
               detail::parse_padded(name.substr(layout::kNumberDigits + 1, layout::kNumberDigits), txn)) {
      kind = detail::ends_with(name, layout::kRetireSuffix) ? Kind::retire : Kind::abort;
    } else {
      log.unknown.push_back(key);
      continue;
    }
    // Each log object is a journal of one group after its HEADER (spec 4.2): scanned by the journal's own reader.
    auto scan = scan_journal_bytes(bytes, where);
    if (!scan.ok()) {
      log.problems.push_back(scan.status().message());
      continue;
    }
    if (scan->corrupt() || scan->torn_tail) {
      log.problems.push_back(where + ": damaged log object: " +
                             (scan->torn_tail ? scan->torn_tail->reason : scan->corruption_summary()));
      continue;
    }
    if (scan->header.store_uuid != store_uuid) {
      log.problems.push_back(where + ": store uuid " + uuid_string(scan->header.store_uuid) + " is not this store's " +
                             uuid_string(store_uuid));
      continue;
    }
    const auto& recs = scan->records;
    auto body = [&](std::size_t i) -> const JournalRecord* { return i < recs.size() ? &recs[i] : nullptr; };
    if (kind == Kind::commit) {
      // HEADER, then BEGIN_SHARDS, COMMIT and SAVE_STATS of one transaction of this step.
      const auto* begin = body(1) != nullptr ? std::get_if<BeginRecord>(&body(1)->body) : nullptr;
      const auto* commit = body(2) != nullptr ? std::get_if<CommitRecord>(&body(2)->body) : nullptr;
      if (begin == nullptr || commit == nullptr || begin->txn != commit->txn || begin->step != step || commit->step != step ||
          begin->files != standard_shard_files(begin->world_size)) {
        log.problems.push_back(where + ": expected BEGIN_SHARDS and COMMIT of step " + std::to_string(step) +
                               " after its HEADER, found " + std::to_string(recs.size()) + " records that do not match");
        continue;
      }
      StepInfo info;
      info.step = step;
      info.txn = commit->txn;
      info.world_size = begin->world_size;
      info.dir = step_dir_name(step, commit->txn);
      info.files = begin->files;
      info.manifest_size = commit->manifest_size;
      info.manifest_digest = commit->manifest_digest;
      committed.push_back(std::move(info));
      if (const auto* stats = body(3) != nullptr ? std::get_if<SaveRecord>(&body(3)->body) : nullptr; stats && stats->txn == commit->txn)
        log.saves.push_back(*stats);
    } else {
      const JournalRecord* r = body(1);
      const bool ok = r != nullptr && recs.size() == 2 &&
                      (kind == Kind::retire ? (std::get_if<RetireRecord>(&r->body) != nullptr &&
                                               std::get<RetireRecord>(r->body).step == step && std::get<RetireRecord>(r->body).txn == txn)
                                            : (std::get_if<AbortRecord>(&r->body) != nullptr &&
                                               std::get<AbortRecord>(r->body).step == step && std::get<AbortRecord>(r->body).txn == txn));
      if (!ok) {
        log.problems.push_back(where + ": expected one " + (kind == Kind::retire ? "RETIRE" : "ABORT") + " record of step " +
                               std::to_string(step) + " txn " + std::to_string(txn) + " after its HEADER");
        continue;
      }
      if (kind == Kind::retire) retired.insert({step, txn});
      else log.aborted.emplace_back(step, txn);
    }
  }
  for (auto& info : committed) {
    if (retired.count({info.step, info.txn}) > 0) log.retired.push_back(std::move(info));
    else log.steps.push_back(std::move(info));
  }
  auto by_step = [](const StepInfo& a, const StepInfo& b) { return a.step < b.step; };
  std::sort(log.steps.begin(), log.steps.end(), by_step);
  std::sort(log.retired.begin(), log.retired.end(), by_step);
  std::sort(log.saves.begin(), log.saves.end(), [](const SaveRecord& a, const SaveRecord& b) { return a.step < b.step; });
  return log;
}

// --- ObjectStore ----------------------------------------------------------------------------------------

CKPT_INLINE ObjectStore::ObjectStore(ObjectClient& client, Access access, ObjectStoreOptions options, CommRef comm)
    : client_(client), fs_(client, options.io), access_(access), options_(options), comm_(comm) {}

CKPT_INLINE ObjectStore::~ObjectStore() = default;

CKPT_INLINE Result<std::unique_ptr<ObjectStore>> ObjectStore::open(ObjectClient& client, Access access, ObjectStoreOptions options) {
  static LocalComm local;  // stateless: one process is a world of one
  return open_with(client, access, options, CommRef(local));
}

CKPT_INLINE std::string ObjectStore::log_object(const std::vector<PendingRecord>& records) const {
  JournalHeader header;
  header.store_uuid = uuid_;
  std::string bytes = encode_group({header_record(header)}, 0);
  bytes += encode_group(records, bytes.size());
  return bytes;
}

CKPT_INLINE Status ObjectStore::probe() {
  // Two create-only PUTs of one fresh key: the second must be refused (412). A server that lets it through
  // would let two writers both "commit" a step, so it is refused here, never used silently (spec 4.6).
  const std::string key = std::string(layout::kProbePrefix) + uuid_string(random_uuid());
  CKPT_TRY(client_.put(key, "1", 1, Condition::create_only).status().with_context("probing conditional writes"));
  auto second = client_.put(key, "2", 1, Condition::create_only);
  const Status removed = client_.remove(key);
  if (second.ok())
    return make_error(Code::unsupported, client_.url(key) + ": the server accepted a second PUT with If-None-Match: * "
                                                            "(it ignores conditional writes), so it cannot hold a crash-"
                                                            "consistent store (spec/OBJECT.md 4.6)");
  if (second.status().code() != Code::conflict) return second.status().with_context("probing conditional writes");
  return removed.with_context("removing the probe object");
}

CKPT_INLINE Status ObjectStore::load_identity(bool create) {
  const std::string key(layout::kIdentityKey);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string bytes(static_cast<std::size_t>(layout::kMaxLogObject), '\0');
    auto got = client_.get(key, 0, bytes.data(), bytes.size());
    if (got.ok()) {
      bytes.resize(*got);
      CKPT_ASSIGN_OR_RETURN(JournalScan scan, scan_journal_bytes(bytes, client_.url(key)));
      if (!scan.has_header || scan.corrupt() || scan.torn_tail || scan.records.size() != 1)
        return make_error(Code::corrupt, client_.url(key) + ": not a ckpt store identity (a journal HEADER and nothing else)");
      uuid_ = scan.header.store_uuid;
      return Status();
    }
    if (got.status().code() != Code::not_found) return got.status();
    if (!create)
      return make_error(Code::not_found, client_.url("") + ": no ckpt store here (no " + key + " object; create it writable)");
    JournalHeader header;
    header.store_uuid = random_uuid();
    const std::string identity = encode_group({header_record(header)}, 0);
    auto put = client_.put(key, identity.data(), identity.size(), Condition::create_only);
    if (put.ok()) {
      uuid_ = header.store_uuid;
      return Status();
    }
    if (put.status().code() != Code::conflict) return put.status();
    // Another writer created the store first: read its identity.
  }
  return make_error(Code::conflict, client_.url(key) + ": the store's identity changed while it was opened");
}

CKPT_INLINE Result<std::string> ObjectStore::read_log_objects() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, client_.list(std::string(layout::kLogPrefix)));
  Encoder out;
  out.raw(uuid_.data(), uuid_.size());
  out.u32(static_cast<std::uint32_t>(listed.size()));
  for (const auto& o : listed) {
    std::string bytes;
    if (o.size <= layout::kMaxLogObject) {
      bytes.resize(static_cast<std::size_t>(o.size));
      auto got = client_.get(o.key, 0, bytes.data(), bytes.size());
      if (!got.ok() && got.status().code() == Code::not_found) continue;  // retired and removed since the listing
      if (!got.ok()) return got.status();
      bytes.resize(*got);
    } else {
      bytes = "oversized";  // decodes as damage, named by the scan
    }
    wire::put_text(out, o.key);
    wire::put_text(out, bytes);
  }
  return std::move(out.str());
}

CKPT_INLINE Status ObjectStore::adopt_log(const std::string& encoded) {
  Decoder in(reinterpret_cast<const unsigned char*>(encoded.data()), encoded.size());
  std::uint32_t n = 0;
  if (encoded.size() < uuid_.size()) return make_error(Code::corrupt, "rank 0 broadcast a malformed log listing");
  std::copy(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(uuid_.size()), uuid_.begin());
  in = Decoder(reinterpret_cast<const unsigned char*>(encoded.data()) + uuid_.size(), encoded.size() - uuid_.size());
  std::vector<std::pair<std::string, std::string>> objects;
  bool ok = in.u32(n);
  for (std::uint32_t i = 0; ok && i < n; ++i) {
    std::string key, bytes;
    ok = wire::get_text(in, key, 1024) &&
         wire::get_text(in, bytes, static_cast<std::uint32_t>(layout::kMaxLogObject));
    objects.emplace_back(std::move(key), std::move(bytes));
  }
  if (!ok) return make_error(Code::corrupt, "rank 0 broadcast a malformed log listing");
  log_ = decode_log(objects, uuid_, client_.url(""));
  return Status();
}

CKPT_INLINE Result<std::unique_ptr<ObjectStore>> ObjectStore::open_with(ObjectClient& client, Access access,
                                                                        ObjectStoreOptions options, CommRef comm) {
  std::unique_ptr<ObjectStore> store(new ObjectStore(client, access, options, comm));
  CKPT_TRY(store->list_log(true));
  return Result<std::unique_ptr<ObjectStore>>(std::move(store));
}

CKPT_INLINE Status ObjectStore::list_log(bool opening) {
  // Rank 0 (probes and reads the identity when opening, then) lists log/; the others decode the bytes
  // it broadcasts, so every rank agrees on the steps (spec 4.3).
  Status local;
  std::string listing;
  if (comm_.rank() == 0) {
    if (opening && access_ == Access::read_write) local = probe();
    if (opening && local.ok()) local = load_identity(access_ == Access::read_write && options_.create_if_missing);
    if (local.ok()) {
      auto read = read_log_objects();
      if (read.ok()) listing = std::move(*read);
      else local = read.status();
    }
  }
  CKPT_TRY(wire::agree(comm_, local));
  if (comm_.size() > 1) CKPT_TRY(comm_.broadcast(listing, 0));
  return adopt_log(listing);
}

CKPT_INLINE Status ObjectStore::refresh() { return list_log(false); }

CKPT_INLINE std::optional<StepInfo> ObjectStore::latest() const {
  if (log_.steps.empty()) return std::nullopt;
  return log_.steps.back();
}

CKPT_INLINE Result<StepInfo> ObjectStore::find(std::uint64_t step) const {
  for (const auto& s : log_.steps)
    if (s.step == step) return s;
  return make_error(Code::not_found, client_.url("") + ": no committed step " + std::to_string(step));
}

CKPT_INLINE Result<StepReader> ObjectStore::open_step(const StepInfo& info) {
  return StepReader::open(fs(), "", info, uuid_);
}

CKPT_INLINE Result<StepReader> ObjectStore::open_step(std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return open_step(info);
}

CKPT_INLINE Status ObjectStore::check_begin(std::uint64_t step) const {
  if (access_ != Access::read_write) return make_error(Code::invalid_argument, url() + ": opened read-only");
  if (open_txn_ != nullptr) return make_error(Code::conflict, url() + ": a transaction is already open");
  // A step at or below the latest commit can never commit (its key exists or is passed).
  const auto last = latest();
  if (last && step <= last->step)
    return make_error(Code::conflict, url() + ": step " + std::to_string(step) + " is not above the latest committed step " +
                                          std::to_string(last->step) + " (a step is committed once, spec/OBJECT.md 4.4)");
  return Status();
}

CKPT_INLINE Result<std::unique_ptr<ObjectTransaction>> ObjectStore::begin(std::uint64_t step) {
  if (caller_coordinated()) return CallerComm::refusal().with_context(url());
  // Rank 0 checks and picks the txn; every rank starts its shard upload under it.
  Status local;
  std::string decision;
  if (comm_.rank() == 0) {
    local = check_begin(step);
    Encoder out;
    out.u64(detail::random_txn());
    decision = std::move(out.str());
  } else if (access_ != Access::read_write) {
    local = make_error(Code::invalid_argument, url() + ": opened read-only");
  }
  CKPT_TRY(wire::agree(comm_, local));
  if (comm_.size() > 1) CKPT_TRY(comm_.broadcast(decision, 0));
  Decoder in(reinterpret_cast<const unsigned char*>(decision.data()), decision.size());
  std::uint64_t txn = 0;
  if (!in.u64(txn) || in.remaining() != 0) return make_error(Code::corrupt, "rank 0 broadcast a malformed begin decision");
  auto started = start(txn, step);
  Status created = started.ok() ? Status() : started.status();
  CKPT_TRY(wire::agree(comm_, created));
  return started;
}

CKPT_INLINE Result<std::unique_ptr<ObjectTransaction>> ObjectStore::start(std::uint64_t txn, std::uint64_t step) {
  const auto world = static_cast<std::uint32_t>(comm_.size());
  const std::string dir = step_dir_name(step, txn);
  const std::string shard_name = shard_file_name(static_cast<std::uint32_t>(comm_.rank()), world);
  WriterOptions wo;
  wo.alignment_log2 = options_.alignment_log2;
  wo.chunk_size_log2 = options_.chunk_size_log2;
  wo.buffer_size = options_.buffer_size;
  wo.atomic_rename = false;  // the name is unique to this transaction; the upload completes at finish (sync)
  wo.durable = true;
  CKPT_ASSIGN_OR_RETURN(ShardWriter writer, ShardWriter::create(fs(), join_path(dir, shard_name), wo));
  std::unique_ptr<ObjectTransaction> tx(new ObjectTransaction(this, txn, step, dir, shard_name, std::move(writer)));
  tx->rank_ = comm_.rank();
  tx->world_ = comm_.size();
  open_txn_ = tx.get();
  return Result<std::unique_ptr<ObjectTransaction>>(std::move(tx));
}

CKPT_INLINE Result<std::unique_ptr<ObjectStore>> ObjectStore::open_rank(ObjectClient& client, int rank, int world,
                                                                        ObjectStoreOptions options) {
  if (world < 1 || rank < 0 || rank >= world)
    return make_error(Code::invalid_argument, client.url("") + ": rank " + std::to_string(rank) + " is not a rank of a world of " +
                                                  std::to_string(world));
  static LocalComm local;  // replaced below, before anything uses it
  std::unique_ptr<ObjectStore> store(new ObjectStore(client, Access::read_write, options, CommRef(local)));
  store->caller_comm_.emplace(rank, world);
  store->comm_ = CommRef(*store->caller_comm_);
  // Rank 0 opens as open() does: probe, identity, log. Another rank writes only its shard, under the name
  // rank 0's decision gives it, so it reads nothing here and its open may come in any order.
  if (rank == 0) {
    CKPT_TRY(store->probe());
    CKPT_TRY(store->load_identity(options.create_if_missing));
    CKPT_ASSIGN_OR_RETURN(std::string listing, store->read_log_objects());
    CKPT_TRY(store->adopt_log(listing));
  }
  return Result<std::unique_ptr<ObjectStore>>(std::move(store));
}

CKPT_INLINE std::string ObjectStore::begin_request(std::uint64_t step) const {
  Encoder out;
  Status local;
  if (open_txn_ != nullptr) local = make_error(Code::conflict, url() + ": rank " + std::to_string(comm_.rank()) + " has a transaction open");
  wire::put_status(out, local);
  out.u64(step);
  out.u32(static_cast<std::uint32_t>(comm_.size()));
  return std::move(out.str());
}

CKPT_INLINE std::string ObjectStore::decide_begin(std::uint64_t step, const std::vector<std::string>& requests) {
  // Rank 0: every rank asks for this step in a world of this size, and the step can commit (spec 4.8).
  Status decision;
  if (!caller_coordinated() || comm_.rank() != 0)
    decision = make_error(Code::invalid_argument, url() + ": decide_begin() is for rank 0 of a store opened with open_rank");
  else if (requests.size() != static_cast<std::size_t>(comm_.size()))
    decision = make_error(Code::invalid_argument, url() + ": " + std::to_string(requests.size()) + " begin requests from a world of " +
                                                      std::to_string(comm_.size()));
  for (std::size_t r = 0; decision.ok() && r < requests.size(); ++r) {
    Decoder in(reinterpret_cast<const unsigned char*>(requests[r].data()), requests[r].size());
    Status theirs;
    std::uint64_t their_step = 0;
    std::uint32_t their_world = 0;
    if (!wire::get_status(in, theirs) || !in.u64(their_step) || !in.u32(their_world) || in.remaining() != 0)
      decision = make_error(Code::corrupt, url() + ": rank " + std::to_string(r) + " sent a malformed begin request");
    else if (!theirs.ok())
      decision = wire::from_rank(theirs, static_cast<int>(r), comm_.size());
    else if (their_step != step || their_world != static_cast<std::uint32_t>(comm_.size()))
      decision = make_error(Code::invalid_argument, url() + ": rank " + std::to_string(r) + " asked to begin step " +
                                                        std::to_string(their_step) + " of a world of " + std::to_string(their_world) +
                                                        ", rank 0 step " + std::to_string(step) + " of " + std::to_string(comm_.size()));
  }
  if (decision.ok()) decision = check_begin(step);
  Encoder out;
  wire::put_status(out, decision);
  out.u64(step);
  out.u64(decision.ok() ? detail::random_txn() : 0);
  return std::move(out.str());
}

CKPT_INLINE Result<std::unique_ptr<ObjectTransaction>> ObjectStore::join(const std::string& decision) {
  if (!caller_coordinated()) return make_error(Code::invalid_argument, url() + ": join() is for a store opened with open_rank");
  Decoder in(reinterpret_cast<const unsigned char*>(decision.data()), decision.size());
  Status decided;
  std::uint64_t step = 0, txn = 0;
  if (!wire::get_status(in, decided) || !in.u64(step) || !in.u64(txn) || in.remaining() != 0)
    return make_error(Code::corrupt, url() + ": a malformed begin decision");
  CKPT_TRY(decided);
  if (open_txn_ != nullptr) return make_error(Code::conflict, url() + ": a transaction is already open");
  return start(txn, step);
}

CKPT_INLINE Status ObjectStore::remove_prefix(const std::string& prefix, ObjectCleanup* report) {
  CKPT_ASSIGN_OR_RETURN(std::vector<UploadInfo> uploads, client_.list_uploads(prefix));
  for (const auto& u : uploads) {
    if (report != nullptr) report->aborted_uploads.push_back(u.key);
    if (report == nullptr || !report->dry_run) CKPT_TRY(client_.abort_upload(u.key, u.upload_id));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, client_.list(prefix));
  for (const auto& o : objects) {
    if (report != nullptr) report->removed.push_back(o.key);
    if (report == nullptr || !report->dry_run) CKPT_TRY(client_.remove(o.key));
  }
  return Status();
}

CKPT_INLINE Status ObjectStore::retire(const StepInfo& info) {
  if (access_ != Access::read_write) return make_error(Code::invalid_argument, url() + ": opened read-only");
  // The retire object first: once it exists the step is gone for every reader, so deleting its objects
  // can never leave a committed step without its data (spec 4.5).
  const std::string bytes = log_object({retire_record(RetireRecord{info.txn, info.step})});
  auto put = client_.put(retire_key(info.step, info.txn), bytes.data(), bytes.size(), Condition::create_only);
  if (!put.ok() && put.status().code() != Code::conflict) return put.status();  // conflict: retired already
  CKPT_TRY(remove_prefix(info.dir + "/", nullptr));
  // The log objects stay (a few KiB a step): the step number can never be committed again (spec 4.4).
  auto it = std::find_if(log_.steps.begin(), log_.steps.end(), [&](const StepInfo& s) { return s.txn == info.txn; });
  if (it != log_.steps.end()) {
    log_.retired.push_back(*it);
    log_.steps.erase(it);
  }
  return Status();
}

CKPT_INLINE Status ObjectStore::retire(std::uint64_t step) {
  CKPT_ASSIGN_OR_RETURN(StepInfo info, find(step));
  return retire(info);
}

CKPT_INLINE Result<std::vector<StepInfo>> ObjectStore::apply_retention(const RetentionPolicy& policy) {
  if (access_ != Access::read_write || comm_.rank() != 0)
    return make_error(Code::invalid_argument, url() + ": retention is rank 0's, on a store opened read_write");
  Status status;
  std::vector<StepInfo> retired = retire_beyond(policy, status);
  if (!status.ok()) return status;
  return retired;
}

CKPT_INLINE std::vector<StepInfo> ObjectStore::retire_beyond(const RetentionPolicy& p, Status& status) {
  std::vector<StepInfo> retired;
  if (!p.enabled() || log_.steps.size() <= p.keep_last) return retired;
  const std::vector<StepInfo> steps = log_.steps;
  for (std::size_t i = 0; i + p.keep_last < steps.size(); ++i) {
    if (p.keep_every > 0 && steps[i].step % p.keep_every == 0) continue;
    status = retire(steps[i]);
    if (!status.ok()) break;
    retired.push_back(steps[i]);
  }
  return retired;
}

CKPT_INLINE Result<ObjectCleanup> ObjectStore::collect_garbage(bool dry_run) {
  if (!dry_run && access_ != Access::read_write) return make_error(Code::invalid_argument, url() + ": opened read-only");
  CKPT_TRY(refresh());
  ObjectCleanup report;
  report.dry_run = dry_run;
  // Which txn holds each step's commit key, and which transactions are provably dead (spec 4.5).
  std::map<std::uint64_t, std::uint64_t> committed_txn;
  for (const auto& s : log_.steps) committed_txn[s.step] = s.txn;
  std::set<std::pair<std::uint64_t, std::uint64_t>> dead(log_.aborted.begin(), log_.aborted.end());
  for (const auto& s : log_.retired) {
    committed_txn[s.step] = s.txn;
    dead.insert({s.step, s.txn});
  }
  // Every step-<s>-<t>/ prefix that objects or uploads sit under.
  std::set<std::pair<std::uint64_t, std::uint64_t>> present;
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, client_.list(std::string(journal::kStepDirPrefix)));
  CKPT_ASSIGN_OR_RETURN(std::vector<UploadInfo> uploads, client_.list_uploads(std::string(journal::kStepDirPrefix)));
  auto note = [&](const std::string& key) {
    std::uint64_t s = 0, t = 0;
    if (parse_step_dir_name(key.substr(0, key.find('/')), s, t)) present.insert({s, t});
  };
  for (const auto& o : objects) note(o.key);
  for (const auto& u : uploads) note(u.key);
  for (const auto& [s, t] : present) {
    auto c = committed_txn.find(s);
    const bool other_committed = c != committed_txn.end() && c->second != t;  // the step's one commit names another txn
    if (dead.count({s, t}) > 0 || other_committed) {
      CKPT_TRY(remove_prefix(step_dir_name(s, t) + "/", &report));
    } else if (c == committed_txn.end()) {
      report.kept.push_back(step_dir_name(s, t) + ": no commit or abort object: in progress, or in doubt");
    }
  }
  return report;
}

// --- ObjectTransaction ----------------------------------------------------------------------------------

CKPT_INLINE ObjectTransaction::ObjectTransaction(ObjectStore* store, std::uint64_t txn, std::uint64_t step, std::string dir,
                                                 std::string shard_name, ShardWriter writer)
    : store_(store), txn_(txn), step_(step), dir_(std::move(dir)), shard_name_(std::move(shard_name)), writer_(std::move(writer)) {}

CKPT_INLINE ObjectTransaction::~ObjectTransaction() {
  if (!finished_) {
    writer_.reset();  // an unfinished upload is aborted, never completed (spec/OBJECT.md 3.2)
    if (rank_ == 0) {
      // Only rank 0 sends a commit, and it never will now: the transaction is provably dead. Best effort:
      // what stays is removed by garbage collection on the abort object's proof (spec 4.5).
      ObjectStore& store = *store_;
      const std::string bytes = store.log_object({abort_record(AbortRecord{txn_, step_, AbortReason::user})});
      if (store.client_.put(abort_key(step_, txn_), bytes.data(), bytes.size(), Condition::create_only).ok())
        store.remove_prefix(dir_ + "/", nullptr).ignore_error();
    }
    if (world_ > 1) store_->comm_.leave(make_error(Code::cancelled, "rank " + std::to_string(rank_) + " dropped step " +
                                                                         std::to_string(step_) + " without commit or abort"));
  }
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
}

CKPT_INLINE Status ObjectTransaction::check_active() const {
  if (finished_ || !writer_) return make_error(Code::invalid_argument, "step " + std::to_string(step_) + ": the transaction is over");
  return Status();
}

CKPT_INLINE Status ObjectTransaction::keep(Status s) {
  if (!s.ok() && failure_.ok() && s.code() != Code::invalid_argument) failure_ = s;
  return s;
}

CKPT_INLINE Status ObjectTransaction::add_tensor(std::string_view name, DType dtype, const Shape& shape, const void* data,
                                                 std::size_t size) {
  CKPT_TRY(check_active());
  return keep(writer_->add_tensor(name, dtype, shape, data, size));
}

CKPT_INLINE Status ObjectTransaction::add_optimizer_tensor(std::string_view name, DType dtype, const Shape& shape,
                                                           const void* data, std::size_t size) {
  CKPT_TRY(add_tensor(name, dtype, shape, data, size));
  state_.optimizer_tensors.emplace_back(name);
  return Status();
}

CKPT_INLINE Status ObjectTransaction::begin_piece(std::string_view name, DType dtype, const Shape& global_shape,
                                                  const Shape& offsets, const Shape& local_shape) {
  CKPT_TRY(check_active());
  return keep(writer_->begin_piece(name, dtype, global_shape, offsets, local_shape));
}

CKPT_INLINE Status ObjectTransaction::write(const void* data, std::size_t size) {
  CKPT_TRY(check_active());
  return keep(writer_->write(data, size));
}

CKPT_INLINE Status ObjectTransaction::end_piece() {
  CKPT_TRY(check_active());
  return keep(writer_->end_piece());
}

CKPT_INLINE std::string ObjectTransaction::make_report(bool commit, Status* local_out) {
  // This rank's shard report (spec/SHARDING.md 3.5): its error, or its completed shard and pieces.
  Status local = failure_;
  std::string body;
  if (commit && local.ok()) local = check_training_state(state_);
  if (commit && local.ok()) {
    auto summary = writer_->finish();  // completes the upload: the shard object exists from here on
    if (!summary.ok()) {
      local = summary.status();
    } else {
      body = ckpt::detail::report_body(*writer_, static_cast<std::uint32_t>(rank_), shard_name_, *summary, state_.optimizer_tensors, {});
    }
  }
  writer_.reset();  // an unfinished upload is aborted here
  if (local_out != nullptr) *local_out = local;
  Encoder report;
  report.u8(commit && local.ok() ? 1 : 0);
  wire::put_status(report, local);
  report.bytes(body);
  return std::move(report.str());
}

CKPT_INLINE std::string ObjectTransaction::coordinate(bool commit, Result<std::vector<std::string>> reports) {
  ObjectStore& store = *store_;
  ObjectClient& client = store.client_;
  const std::string where = store.url() + " step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ")";
  detail::ObjectOutcome outcome;
  Status decision = reports.ok() ? Status() : reports.status();
  Manifest m;
  std::vector<std::string> optimizer;
  std::vector<ReplicaDecl> replicas;
  std::vector<GlobalPiece> pieces;
  bool wants_commit = commit;
  if (decision.ok() && reports->size() != static_cast<std::size_t>(world_))
    decision = make_error(Code::invalid_argument, where + ": " + std::to_string(reports->size()) + " shard reports from a world of " +
                                                      std::to_string(world_));
  for (std::size_t r = 0; decision.ok() && r < reports->size(); ++r) {
    const std::string& bytes = (*reports)[r];
    Decoder in(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    std::uint8_t yes = 0;
    Status theirs;
    if (!wire::get_u8(in, yes) || !wire::get_status(in, theirs)) {
      decision = make_error(Code::corrupt, "rank " + std::to_string(r) + " sent a malformed shard report");
      break;
    }
    if (!theirs.ok()) decision = wire::from_rank(theirs, static_cast<int>(r), world_);
    if (!decision.ok() || yes == 0) {
      if (decision.ok()) wants_commit = false;
      continue;
    }
    ManifestShard entry;
    decision = ckpt::detail::decode_report_body(in, static_cast<std::uint32_t>(r), entry, optimizer, replicas, pieces);
    m.shards.push_back(std::move(entry));
  }
  if (decision.ok() && commit && !wants_commit) decision = make_error(Code::conflict, where + ": a rank abandoned the transaction");
  if (decision.ok() && commit) {
    auto problems = check_coverage(pieces);
    if (state_.values.count(std::string(kPartialStepKey))) problems = without_gaps(std::move(problems));
    decision = coverage_status(problems, Code::invalid_argument, where);
  }
  bool commit_sent = false;
  if (decision.ok() && commit) {
    decision = ckpt::detail::complete_manifest(m, txn_, step_, world_, store.uuid_, state_, optimizer);
    std::string manifest_bytes;
    if (decision.ok()) {
      // Every shard object is complete (each rank's finish returned before it reported): the MANIFEST may name them.
      manifest_bytes = encode_manifest(m);
      auto put = client.put(join_path(dir_, std::string(journal::kManifestName)), manifest_bytes.data(), manifest_bytes.size(),
                            Condition::create_only);
      if (!put.ok()) {
        // A lost answer, or a 412 to the retry of a PUT that had acted: the MANIFEST there is ours if it is
        // byte for byte what was sent (the key is unique to this transaction, spec 4.4).
        auto same = detail::holds_exactly(client, join_path(dir_, std::string(journal::kManifestName)), manifest_bytes);
        if (!same.ok() || !*same) decision = put.status().with_context(where);
      }
    }
    if (decision.ok()) {
      // The commit point: one create-only PUT (spec 4.4).
      const CommitRecord c{txn_, step_, manifest_bytes.size(),
                           manifest_digest(reinterpret_cast<const unsigned char*>(manifest_bytes.data()), manifest_bytes.size())};
      BeginRecord b{txn_, step_, static_cast<std::uint32_t>(world_), standard_shard_files(static_cast<std::uint32_t>(world_))};
      auto begin_rec = begin_record(b);
      std::uint64_t shard_bytes = 0;
      for (const auto& s : m.shards) shard_bytes += s.file_size;
      const SaveRecord stats = timed_save_record(c, shard_bytes, started_, stall_, async_);
      decision = begin_rec.status();
      if (decision.ok()) {
        const std::string bytes = store.log_object({*begin_rec, commit_record(c), save_stats_record(stats)});
        commit_sent = true;
        auto put = client.put(commit_key(step_), bytes.data(), bytes.size(), Condition::create_only);
        if (!put.ok()) {
          // 412, or an error after which the PUT may have acted (a lost response): the commit object says
          // which transaction owns the step (spec 4.4).
          auto same = detail::holds_exactly(client, commit_key(step_), bytes);
          if (same.ok() && *same) {
            put = ObjectInfo{commit_key(step_), bytes.size(), ""};  // ours: committed
          } else if (same.ok()) {
            decision = make_error(Code::conflict, where + ": another writer committed step " + std::to_string(step_) +
                                                      " first (" + client.url(commit_key(step_)) + "); this save is abandoned");
            commit_sent = false;  // the step's commit names another transaction: this one is provably dead
          } else if (put.status().code() == Code::conflict) {
            decision = put.status().with_context(where);
          } else {
            decision = put.status().with_context(where + ": the commit is in doubt (kept, never deleted; spec 4.4)");
          }
        }
        if (put.ok()) {
          store.log_.saves.push_back(stats);
          outcome.committed = true;
          outcome.step.step = step_;
          outcome.step.txn = txn_;
          outcome.step.world_size = static_cast<std::uint32_t>(world_);
          outcome.step.manifest_size = c.manifest_size;
          outcome.step.manifest_digest = c.manifest_digest;
          outcome.step.dir = dir_;
          outcome.step.files = b.files;
        }
      }
    }
  }
  if (!outcome.committed) {
    if (!commit_sent) {
      // Never sent (or another txn owns the step): provably dead. The abort object first, then its objects.
      const std::string bytes = store.log_object({abort_record(AbortRecord{txn_, step_, commit ? AbortReason::writer_error : AbortReason::user})});
      auto put = client.put(abort_key(step_, txn_), bytes.data(), bytes.size(), Condition::create_only);
      Status cleanup = put.status();
      if (cleanup.ok()) cleanup = store.remove_prefix(dir_ + "/", nullptr);
      if (!commit && decision.ok()) decision = cleanup;
    }
    outcome.decision = decision.ok() && commit ? make_error(Code::io, where + ": not committed") : decision;
    if (!commit && decision.ok()) outcome.decision = Status();
  } else {
    store.log_.steps.push_back(outcome.step);
    std::sort(store.log_.steps.begin(), store.log_.steps.end(), [](const StepInfo& a, const StepInfo& b) { return a.step < b.step; });
    for (const auto& s : store.retire_beyond(store.options_.retention, outcome.retention)) outcome.retired.push_back(s.step);
  }
  return detail::encode_object_outcome(outcome);
}

CKPT_INLINE Result<detail::ObjectOutcome> ObjectTransaction::finish(bool commit) {
  CKPT_TRY(check_active());
  if (store_->caller_coordinated()) return CallerComm::refusal().with_context(dir_);
  // One gather of shard reports, rank 0's decision, one broadcast of the outcome (spec/OBJECT.md 4.4).
  ObjectStore& store = *store_;
  auto gathered = store.comm_.gather(make_report(commit), 0);
  std::string outcome_bytes;
  if (rank_ == 0) outcome_bytes = coordinate(commit, std::move(gathered));
  finished_ = true;
  store.open_txn_ = nullptr;
  if (rank_ != 0 && !gathered.ok()) return gathered.status();
  if (world_ > 1) CKPT_TRY(store.comm_.broadcast(outcome_bytes, 0));
  detail::ObjectOutcome outcome;
  CKPT_TRY(detail::decode_object_outcome(outcome_bytes, outcome));
  return outcome;
}

CKPT_INLINE Result<CommitResult> ObjectTransaction::commit_result(const std::string& outcome_bytes) {
  detail::ObjectOutcome outcome;
  CKPT_TRY(detail::decode_object_outcome(outcome_bytes, outcome));
  if (!outcome.committed) return outcome.decision;
  std::vector<StepInfo>& steps = store_->log_.steps;
  if (rank_ != 0) {
    steps.push_back(outcome.step);
    for (auto s : outcome.retired)
      steps.erase(std::remove_if(steps.begin(), steps.end(), [&](const StepInfo& i) { return i.step == s; }), steps.end());
  }
  CommitResult result;
  result.step = outcome.step;
  for (auto s : outcome.retired) {
    StepInfo info;
    info.step = s;
    result.retired.push_back(std::move(info));
  }
  result.retention = outcome.retention;
  return result;
}

CKPT_INLINE Result<CommitResult> ObjectTransaction::commit() {
  CKPT_ASSIGN_OR_RETURN(detail::ObjectOutcome outcome, finish(true));
  return commit_result(detail::encode_object_outcome(outcome));
}

CKPT_INLINE Status ObjectTransaction::abort() {
  CKPT_ASSIGN_OR_RETURN(detail::ObjectOutcome outcome, finish(false));
  return outcome.decision;
}

CKPT_INLINE Status ObjectTransaction::abort(const Status& reason) {
  // This rank's report carries the reason, so rank 0's outcome names it to every rank (spec/SHARDING.md 3.4).
  if (failure_.ok() && !reason.ok()) failure_ = reason;
  CKPT_ASSIGN_OR_RETURN(detail::ObjectOutcome outcome, finish(false));
  return outcome.decision.ok() || (!reason.ok() && outcome.decision.code() == reason.code()) ? Status() : outcome.decision;
}

CKPT_INLINE Result<std::string> ObjectTransaction::report() {
  CKPT_TRY(check_active());
  if (!store_->caller_coordinated())
    return make_error(Code::invalid_argument, dir_ + ": report() is for a store opened with ObjectStore::open_rank; use commit()");
  if (reported_) return make_error(Code::invalid_argument, dir_ + "/" + shard_name_ + ": already reported");
  if (writer_->piece_open())  // the caller can still fix it: the transaction stays open
    return make_error(Code::invalid_argument, dir_ + "/" + shard_name_ + ": a piece is still open at report()");
  Status mine;
  std::string bytes = make_report(true, &mine);  // completes this rank's shard object, or aborts its upload
  reported_ = true;
  if (rank_ != 0) {  // a participant's part is over: rank 0 decides alone
    finished_ = true;
    if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  }
  if (!mine.ok())
    return mine.with_context("step " + std::to_string(step_) + " (txn " + std::to_string(txn_) + ") rank " + std::to_string(rank_) +
                             ": the shard was not completed, rank 0 must not commit");
  return bytes;
}

CKPT_INLINE Result<CommitResult> ObjectTransaction::commit_reports(const std::vector<std::string>& reports) {
  if (finished_ || !store_->caller_coordinated() || rank_ != 0 || !reported_)
    return make_error(Code::invalid_argument, dir_ + ": commit_reports() is for rank 0 of a store opened with "
                                                      "ObjectStore::open_rank, after its own report(), once");
  std::string outcome_bytes = coordinate(true, Result<std::vector<std::string>>(reports));
  finished_ = true;
  if (store_->open_txn_ == this) store_->open_txn_ = nullptr;
  return commit_result(outcome_bytes);
}

CKPT_INLINE Result<OpenedObjectStore> open_store_url(const ObjectOpener& open_objects, const std::string& url, Access access,
                                                  ObjectStoreOptions options) {
  if (!open_objects)
    return make_error(Code::unsupported, url + ": this build has no object-store client (ckpt::s3: libcurl, pugixml)");
  OpenedObjectStore opened;
  CKPT_ASSIGN_OR_RETURN(opened.client, open_objects(url));
  CKPT_ASSIGN_OR_RETURN(opened.store, ObjectStore::open(*opened.client, access, options));
  return opened;
}

}  // namespace ckpt::object
