// ckpt: definitions of store/object_log.hpp (spec/OBJECT.md 4).
#pragma once

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "../object_log.hpp"

#include <map>

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

// A log object that does not decode or does not belong (spec/OBJECT.md 4.3): the object, the byte range
// in it where known (a damaged group), and the message as decode_log has always written it.
CKPT_INLINE Problem log_object_problem(const std::string& where, std::uint64_t offset, std::uint64_t length, std::string message) {
  Problem p;
  p.region = "log object";
  p.file = where;
  p.offset = offset;
  p.length = length;
  p.message = std::move(message);
  return p;
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

CKPT_INLINE LogListing decode_log(const std::vector<std::pair<std::string, std::string>>& objects, const Uuid& store_uuid,
                                 const std::string& url_prefix) {
  LogListing log;
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
      log.problems.push_back(detail::log_object_problem(where, 0, 0, scan.status().message()));
      continue;
    }
    if (scan->corrupt() || scan->torn_tail) {
      const JournalDamage& damage = scan->torn_tail ? *scan->torn_tail : scan->corruption.empty() ? JournalDamage{} : scan->corruption.front();
      log.problems.push_back(detail::log_object_problem(where, damage.offset, damage.length, where + ": damaged log object: " +
                             (scan->torn_tail ? scan->torn_tail->reason : scan->corruption_summary())));
      continue;
    }
    if (scan->header.store_uuid != store_uuid) {
      log.problems.push_back(detail::log_object_problem(where, 0, 0, where + ": store uuid " + uuid_string(scan->header.store_uuid) +
                                                                         " is not this store's " + uuid_string(store_uuid)));
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
        log.problems.push_back(detail::log_object_problem(where, 0, 0, where + ": expected BEGIN_SHARDS and COMMIT of step " + std::to_string(step) +
                                                                           " after its HEADER, found " + std::to_string(recs.size()) + " records that do not match"));
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
        log.problems.push_back(detail::log_object_problem(where, 0, 0, where + ": expected one " + (kind == Kind::retire ? "RETIRE" : "ABORT") +
                                                                           " record of step " + std::to_string(step) + " txn " + std::to_string(txn) + " after its HEADER"));
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

CKPT_INLINE RecoveryReport listing_report(const LogListing& listing, const Uuid& store_uuid, const std::string& url) {
  RecoveryReport r;
  r.store = url;
  r.journal.has_header = true;
  r.journal.header.store_uuid = store_uuid;
  auto txn_of = [](const StepInfo& s, TxnState state) {
    TxnInfo t;
    t.txn = s.txn;
    t.step = s.step;
    t.world_size = s.world_size;
    t.files = s.files;
    t.state = state;
    t.commit = CommitRecord{s.txn, s.step, s.manifest_size, s.manifest_digest};
    return t;
  };
  for (const auto& s : listing.steps) r.transactions.push_back(txn_of(s, TxnState::committed));
  for (const auto& s : listing.retired) r.transactions.push_back(txn_of(s, TxnState::retired));
  for (const auto& [step, txn] : listing.aborted) {
    TxnInfo t;
    t.txn = txn;
    t.step = step;
    t.state = TxnState::aborted;
    r.transactions.push_back(std::move(t));
  }
  for (auto& t : r.transactions)
    for (const auto& s : listing.saves)
      if (s.txn == t.txn && s.step == t.step) t.save = s;
  // Keys sort by step, so commit order is step order (ids are random: spec 4.1); the table is kept by step.
  std::stable_sort(r.transactions.begin(), r.transactions.end(),
                   [](const TxnInfo& a, const TxnInfo& b) { return a.step != b.step ? a.step < b.step : a.txn < b.txn; });
  r.log_damage = listing.problems;
  r.unknown_entries = listing.unknown;
  r.dry_run = true;
  return r;
}

}  // namespace ckpt::object

namespace ckpt {

CKPT_INLINE ObjectLog::ObjectLog(object::ObjectClient& client) : client_(client), url_(client.url("")) { fs_.emplace(client_); }

CKPT_INLINE ObjectLog::ObjectLog(std::unique_ptr<object::ObjectClient> client)
    : owned_(std::move(client)), client_(*owned_), url_(owned_->url("")) {
  fs_.emplace(client_);
}

CKPT_INLINE std::string ObjectLog::log_object(const std::vector<PendingRecord>& records) const {
  JournalHeader header;
  header.store_uuid = uuid_;
  std::string bytes = encode_group({header_record(header)}, 0);
  bytes += encode_group(records, bytes.size());
  return bytes;
}

CKPT_INLINE Status ObjectLog::probe() {
  // Two create-only PUTs of one fresh key: the second must be refused (412). A server that lets it through
  // would let two writers both "commit" a step, so it is refused here, never used silently (spec 4.6).
  const std::string key = std::string(object::layout::kProbePrefix) + uuid_string(random_uuid());
  CKPT_TRY(client_.put(key, "1", 1, object::Condition::create_only).status().with_context("probing conditional writes"));
  auto second = client_.put(key, "2", 1, object::Condition::create_only);
  const Status removed = client_.remove(key);
  if (second.ok())
    return make_error(Code::unsupported, client_.url(key) + ": the server accepted a second PUT with If-None-Match: * "
                                                            "(it ignores conditional writes), so it cannot hold a crash-"
                                                            "consistent store (spec/OBJECT.md 4.6)");
  if (second.status().code() != Code::conflict) return second.status().with_context("probing conditional writes");
  return removed.with_context("removing the probe object");
}

CKPT_INLINE Status ObjectLog::load_identity(bool create) {
  const std::string key(object::layout::kIdentityKey);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string bytes(static_cast<std::size_t>(object::layout::kMaxLogObject), '\0');
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
    auto put = client_.put(key, identity.data(), identity.size(), object::Condition::create_only);
    if (put.ok()) {
      uuid_ = header.store_uuid;
      return Status();
    }
    if (put.status().code() != Code::conflict) return put.status();
    // Another writer created the store first: read its identity.
  }
  return make_error(Code::conflict, client_.url(key) + ": the store's identity changed while it was opened");
}

CKPT_INLINE Result<RecoveryReport> ObjectLog::open_writer(const StoreOptions& options) {
  CKPT_TRY(probe());
  CKPT_TRY(load_identity(options.create_if_missing));
  CKPT_ASSIGN_OR_RETURN(std::string listing, read(options));
  return decode(listing, options);
}

CKPT_INLINE Result<std::string> ObjectLog::read(const StoreOptions&) {
  // Rank 0 lists log/ and reads every log object; the other ranks decode what it broadcasts, so every
  // rank agrees on the steps and the server sees one listing, not one per rank (spec 4.3; field notes: dlio#347).
  bool zero = true;
  for (auto b : uuid_) zero = zero && b == 0;
  if (zero) CKPT_TRY(load_identity(false));
  CKPT_ASSIGN_OR_RETURN(std::vector<object::ObjectInfo> listed, client_.list(std::string(object::layout::kLogPrefix)));
  Encoder out;
  out.raw(uuid_.data(), uuid_.size());
  out.u32(static_cast<std::uint32_t>(listed.size()));
  for (const auto& o : listed) {
    std::string bytes;
    if (o.size <= object::layout::kMaxLogObject) {
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

CKPT_INLINE Result<RecoveryReport> ObjectLog::decode(const std::string& encoded, const StoreOptions&) {
  if (encoded.size() < uuid_.size()) return make_error(Code::corrupt, "rank 0 broadcast a malformed log listing");
  std::copy(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(uuid_.size()), uuid_.begin());
  Decoder in(reinterpret_cast<const unsigned char*>(encoded.data()) + uuid_.size(), encoded.size() - uuid_.size());
  std::vector<std::pair<std::string, std::string>> objects;
  std::uint32_t n = 0;
  bool ok = in.u32(n);
  for (std::uint32_t i = 0; ok && i < n; ++i) {
    std::string key, bytes;
    ok = wire::get_text(in, key, 1024) && wire::get_text(in, bytes, static_cast<std::uint32_t>(object::layout::kMaxLogObject));
    objects.emplace_back(std::move(key), std::move(bytes));
  }
  if (!ok) return make_error(Code::corrupt, "rank 0 broadcast a malformed log listing");
  listing_ = object::decode_log(objects, uuid_, client_.url(""));
  return object::listing_report(listing_, uuid_, url_);
}

CKPT_INLINE std::uint64_t ObjectLog::new_txn(std::uint64_t) { return object::detail::random_txn(); }

CKPT_INLINE Status ObjectLog::begin(TxnInfo& t, const std::vector<TxnInfo>& table) {
  // Nothing lasts until the commit object, which records BEGIN itself (spec 4.4). A retired commit of
  // this step number holds its key: it is removed first, so that the number can be committed again
  // (spec/JOURNAL.md 10); its retire object stays and proves it dead.
  for (const auto& old : table)
    if (old.step == t.step && old.state == TxnState::retired) {
      Status s = client_.remove(object::commit_key(t.step));
      if (!s.ok() && s.code() != Code::not_found) return s.with_context("freeing the commit key of retired step " + std::to_string(t.step));
    }
  return Status();
}

CKPT_INLINE Status ObjectLog::write_manifest(const TxnInfo& t, const std::string& bytes) {
  // Every shard object is complete (each rank's finish returned before it reported): the MANIFEST may name them.
  const std::string key = join_path(t.dir(), std::string(journal::kManifestName));
  auto put = client_.put(key, bytes.data(), bytes.size(), object::Condition::create_only);
  if (put.ok()) return Status();
  // A lost answer, or a 412 to the retry of a PUT that had acted: the MANIFEST there is ours if it is
  // byte for byte what was sent (the key is unique to this transaction, spec 4.4).
  auto same = object::detail::holds_exactly(client_, key, bytes);
  if (same.ok() && *same) return Status();
  return put.status();
}

CKPT_INLINE Status ObjectLog::commit(TxnInfo& t, const CommitRecord& c, const SaveRecord& stats, CommitDoubt& doubt) {
  // The commit point: one create-only PUT of BEGIN_SHARDS, COMMIT and SAVE_STATS (spec 4.4).
  BeginRecord b{t.txn, t.step, t.world_size, t.files};
  CKPT_ASSIGN_OR_RETURN(PendingRecord begin_rec, begin_record(b));
  const std::string bytes = log_object({begin_rec, commit_record(c), save_stats_record(stats)});
  const std::string key = object::commit_key(t.step);
  auto put = client_.put(key, bytes.data(), bytes.size(), object::Condition::create_only);
  if (put.ok()) return Status();
  // 412, or an error after which the PUT may have acted (a lost response): the commit object says which
  // transaction owns the step (spec 4.4).
  auto same = object::detail::holds_exactly(client_, key, bytes);
  if (same.ok() && *same) return Status();  // ours: committed
  if (same.ok())  // the step's commit names another transaction: this one is provably dead
    return make_error(Code::conflict, "another writer committed step " + std::to_string(t.step) + " first (" + client_.url(key) +
                                          "); this save is abandoned");
  if (put.status().code() == Code::conflict) return put.status();
  doubt = CommitDoubt::in_doubt;
  return put.status().with_context("the commit is in doubt (kept, never deleted; spec/OBJECT.md 4.4)");
}

CKPT_INLINE Status ObjectLog::remove_prefix(const std::string& prefix, GarbageReport* report) {
  CKPT_ASSIGN_OR_RETURN(std::vector<object::UploadInfo> uploads, client_.list_uploads(prefix));
  for (const auto& u : uploads) {
    if (report != nullptr) report->aborted_uploads.push_back(u.key);
    if (report == nullptr || !report->dry_run) CKPT_TRY(client_.abort_upload(u.key, u.upload_id));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<object::ObjectInfo> objects, client_.list(prefix));
  for (const auto& o : objects) {
    if (report != nullptr) report->removed.push_back(o.key);
    if (report == nullptr || !report->dry_run) CKPT_TRY(client_.remove(o.key));
  }
  return Status();
}

CKPT_INLINE Status ObjectLog::abort(TxnInfo& t, AbortReason reason) {
  // Never sent (or another txn owns the step): provably dead. The abort object first, then its objects.
  const std::string bytes = log_object({abort_record(AbortRecord{t.txn, t.step, reason})});
  CKPT_TRY(client_.put(object::abort_key(t.step, t.txn), bytes.data(), bytes.size(), object::Condition::create_only).status());
  t.state = TxnState::aborted;
  t.abort_reason = reason;
  return remove_prefix(t.dir() + "/", nullptr);
}

CKPT_INLINE Status ObjectLog::retire(const std::vector<TxnInfo*>& txns) {
  for (TxnInfo* t : txns) {
    // The retire object first: once it exists the step is gone for every reader, so deleting its objects
    // can never leave a committed step without its data (spec 4.5).
    const std::string bytes = log_object({retire_record(RetireRecord{t->txn, t->step})});
    auto put = client_.put(object::retire_key(t->step, t->txn), bytes.data(), bytes.size(), object::Condition::create_only);
    if (!put.ok() && put.status().code() != Code::conflict) return put.status();  // conflict: retired already
    t->state = TxnState::retired;
    CKPT_TRY(remove_prefix(t->dir() + "/", nullptr));
  }
  return Status();
}

CKPT_INLINE Status ObjectLog::set_aside(TxnInfo& t) {
  // The retire object alone: the step's objects stay until garbage collection, which a retire proves dead (4.5).
  const std::string bytes = log_object({retire_record(RetireRecord{t.txn, t.step})});
  auto put = client_.put(object::retire_key(t.step, t.txn), bytes.data(), bytes.size(), object::Condition::create_only);
  if (!put.ok() && put.status().code() != Code::conflict) return put.status();
  t.state = TxnState::retired;
  return Status();
}

CKPT_INLINE Result<GarbageReport> ObjectLog::collect_garbage(const std::vector<TxnInfo>& table, bool dry_run) {
  GarbageReport report;
  report.dry_run = dry_run;
  // Which txn holds each step's commit key, and which transactions are provably dead (spec 4.5).
  std::map<std::uint64_t, std::uint64_t> committed_txn;
  std::set<std::pair<std::uint64_t, std::uint64_t>> dead;
  for (const auto& t : table) {
    if (t.state == TxnState::committed || t.state == TxnState::retired) committed_txn[t.step] = t.txn;
    if (t.state == TxnState::retired || t.state == TxnState::aborted) dead.insert({t.step, t.txn});
  }
  // Every step-<s>-<t>/ prefix that objects or uploads sit under.
  std::set<std::pair<std::uint64_t, std::uint64_t>> present;
  CKPT_ASSIGN_OR_RETURN(std::vector<object::ObjectInfo> objects, client_.list(std::string(journal::kStepDirPrefix)));
  CKPT_ASSIGN_OR_RETURN(std::vector<object::UploadInfo> uploads, client_.list_uploads(std::string(journal::kStepDirPrefix)));
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

CKPT_INLINE std::unique_ptr<CommitLog> object_log(object::ObjectClient& client) { return std::make_unique<ObjectLog>(client); }

CKPT_INLINE std::unique_ptr<CommitLog> object_log(std::unique_ptr<object::ObjectClient> client) {
  return std::make_unique<ObjectLog>(std::move(client));
}

}  // namespace ckpt
