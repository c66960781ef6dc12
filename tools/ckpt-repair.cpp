// ckpt-repair: explains what is wrong with a checkpoint store and fixes what can be fixed without
// losing a committed step (spec/JOURNAL.md 6.4, 11):
//   - the recovery of a writable open (spec/JOURNAL.md 6.4): digest-valid records of a damaged tail are
//     applied when what they name checks out, a transaction whose MANIFEST and shards verify is rolled
//     forward, one that never reached its MANIFEST is aborted and only the files its BEGIN named are
//     removed, and ambiguous ones go to STORE/quarantine/ (deleted only with --purge); the journal is
//     then written anew;
//   - a missing or corrupt journal is rebuilt from the step directories whose manifest and every shard
//     verify; the new journal is written under a temporary name, fsynced and renamed into place, and
//     the old one is kept renamed, never deleted;
//   - every committed step is verified chunk by chunk; damage is named down to tensor and chunk;
//   - files nothing accounts for are listed and never deleted, and a committed step is never deleted.
// Exit status: 0 the store is consistent afterwards, 1 damage remains that it could not repair,
// 2 usage or I/O error.
//
// A memory tier's root (or one rank directory) has each of its stores recovered the same way and each
// tier log's torn tail cut; damage in a log is reported and left as it is (ckpt/tiers/memory_root.hpp).
//
// The rebuild rules are the library's (include/ckpt/store/journal_rebuild.hpp); this tool presents them.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ckpt/store/journal_rebuild.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/store/store.hpp>

#include "cli.hpp"
#include "memory_root_cli.hpp"

namespace {

using ckpt::tools::json;
namespace tools = ckpt::tools;
constexpr const char* kTool = "ckpt-repair";

// Prints progressively for people, or gathers everything into one JSON document.
class Output {
 public:
  explicit Output(bool as_json) : as_json_(as_json) {}
  void line(const std::string& text) {
    if (!as_json_) std::printf("%s\n", tools::printable(text).c_str());
  }
  void heading(const std::string& text) {
    if (!as_json_) std::printf("\n%s\n", text.c_str());
  }
  void flush() {
    if (!as_json_) std::fflush(stdout);
  }
  json doc = json::object();

 private:
  bool as_json_;
};

// --- Verification of committed steps --------------------------------------------------------------

struct StepResult {
  ckpt::StepInfo info;
  bool ok = true;
  std::uint64_t chunks = 0, bytes = 0;
  std::vector<std::string> lines;  // one per problem
  json problems = json::array();
};

std::vector<StepResult> verify_committed(ckpt::Store& store) {
  std::vector<StepResult> out;
  for (const auto& info : store.steps()) {
    StepResult r;
    r.info = info;
    auto v = store.verify_step(info.step);
    if (!v.ok()) {
      r.ok = false;
      r.lines.push_back(v.status().to_string());
      r.problems.push_back({{"message", r.lines.back()}});
    } else {
      // The library reports each problem once: step-level ones, then each shard's own.
      for (const auto& p : v->problems) {
        r.lines.push_back(std::string(ckpt::code_name(p.code)) + ": " + p.message);
        json j = tools::problem_json(p);
        j["message"] = r.lines.back();  // the spelling this tool always printed
        r.problems.push_back(std::move(j));
      }
      for (const auto& shard : v->shards) {
        r.chunks += shard.chunks_checked;
        r.bytes += shard.bytes_checked;
        for (const auto& p : shard.problems) {
          r.lines.push_back(tools::problem_line(shard.path, p));
          json j = tools::problem_json(p);
          j["file"] = shard.path;
          r.problems.push_back(std::move(j));
        }
      }
      r.ok = v->ok();
    }
    out.push_back(std::move(r));
  }
  return out;
}

json step_result_json(const StepResult& r) {
  json j = tools::step_info_json(r.info);
  j["ok"] = r.ok;
  j["chunks_checked"] = r.chunks;
  j["bytes_checked"] = r.bytes;
  j["problems"] = r.problems;
  return j;
}

// --- The repair ---------------------------------------------------------------------------------

class Repair {
 public:
  Repair(ckpt::PosixFs& fs, std::string store, bool dry_run, bool purge, Output& out)
      : fs_(fs), store_(std::move(store)), dry_run_(dry_run), purge_(purge), out_(out) {}

  int run(ckpt::PathKind kind) {
    out_.doc["store"] = store_;
    out_.doc["dry_run"] = dry_run_;
    out_.line(std::string(kTool) + ": store " + store_ + (dry_run_ ? " (dry run: nothing is changed)" : ""));
    std::optional<ckpt::RecoveryReport> scanned;
    bool need_rebuild = kind == ckpt::PathKind::broken_store;
    if (kind == ckpt::PathKind::store) {
      auto report = ckpt::check_store(fs_, store_);
      if (!report.ok()) {
        if (report.status().code() == ckpt::Code::version)
          return fatal(report.status().with_context("the journal was written by a newer version; not touching it"));
        return fatal(report.status());
      }
      scanned = std::move(report).value();
      out_.doc["journal"] = tools::journal_json(scanned->journal);
      out_.line("journal: " + tools::journal_line(scanned->journal));
      need_rebuild = scanned->corrupt();
    } else {
      out_.doc["journal"] = nullptr;
      out_.line("journal: MISSING (the store holds step directories but no JOURNAL)");
    }
    return need_rebuild ? run_rebuild(scanned ? &*scanned : nullptr) : run_recovery(*scanned);
  }

 private:
  int fatal(const ckpt::Status& s) {
    error_ = s;
    return finish(ckpt::cli::exit_for(s.code()) == ckpt::cli::kIntegrity ? ckpt::cli::kIntegrity : ckpt::cli::kUsage);
  }

  void add_found(const std::string& what) {
    found_.push_back(what);
    out_.line("  - " + what);
  }

  void list_found(const ckpt::RecoveryReport& r) {
    out_.heading("found:");
    if (r.journal.torn_tail) {
      const auto& t = *r.journal.torn_tail;
      if (t.clean_tear)
        add_found("torn journal tail at offset " + std::to_string(t.offset) + " (" + std::to_string(t.length) +
                  " bytes; a crash during an append left it)");
      else
        add_found("DAMAGED journal tail at offset " + std::to_string(t.offset) + " (" + std::to_string(t.length) +
                  " bytes): every byte is there and still does not check out, so this is damage to durable data, "
                  "not a torn append: " + t.reason);
    }
    for (const auto& rec : r.salvaged) add_found("applied from the damaged tail (digest-valid, what it names checks out): " + rec);
    for (const auto& a : r.actions) {
      if (a.kind == ckpt::RecoveryActionKind::append_commit)
        add_found("transaction " + std::to_string(a.txn) + " (step " + std::to_string(a.commit.step) +
                  ") has no durable COMMIT, but its MANIFEST and every chunk of its shards verify: it is rolled forward (committed)");
      if (a.kind == ckpt::RecoveryActionKind::quarantine)
        add_found("transaction " + std::to_string(a.txn) + ": its files cannot be proven committed or uncommitted, so " + a.path +
                  " moves to " + a.to + " (kept; ckpt-repair --purge deletes quarantine)");
    }
    for (const auto& t : r.transactions) {
      if (t.state == ckpt::TxnState::open) {
        bool decided = false;
        for (const auto& a : r.actions)
          decided = decided || (a.txn == t.txn && (a.kind == ckpt::RecoveryActionKind::append_commit ||
                                                   a.kind == ckpt::RecoveryActionKind::quarantine));
        if (!decided)
          add_found("transaction " + std::to_string(t.txn) + " (step " + std::to_string(t.step) + ", " + t.dir() +
                    ") began and never reached its MANIFEST: it is rolled back and only the files its BEGIN named are removed");
      }
      else if ((t.state == ckpt::TxnState::aborted || t.state == ckpt::TxnState::retired))
        for (const auto& a : r.actions)
          if (a.txn == t.txn && a.kind == ckpt::RecoveryActionKind::remove_dir) {
            add_found(std::string(t.state == ckpt::TxnState::aborted ? "aborted" : "retired") + " transaction " + std::to_string(t.txn) +
                      " (step " + std::to_string(t.step) + ") still has files in " + t.dir());
            break;
          }
    }
    for (const auto& n : r.notes) add_found(n);
    for (const auto& u : r.unknown_entries) add_found("unknown entry '" + u + "': no journal record accounts for it; listed, never deleted");
    if (found_.empty()) out_.line("  nothing wrong with the journal");
  }

  void list_plan(const std::vector<ckpt::RecoveryAction>& actions) {
    out_.heading(dry_run_ ? "would do:" : "will do:");
    if (actions.empty()) out_.line("  nothing");
    for (std::size_t i = 0; i < actions.size(); ++i) out_.line("  " + std::to_string(i + 1) + ". " + actions[i].describe());
    json plan = json::array();
    for (const auto& a : actions) plan.push_back(a.describe());
    out_.doc["plan"] = std::move(plan);
    out_.flush();
  }

  void record_actions(const std::vector<ckpt::RecoveryAction>& actions) {
    json done = json::array();
    out_.heading("done:");
    if (actions.empty()) out_.line("  nothing");
    for (const auto& a : actions) {
      done.push_back({{"action", ckpt::recovery_action_name(a.kind)},
                      {"path", a.path},
                      {"txn", a.txn},
                      {"offset", a.offset},
                      {"length", a.length},
                      {"done", a.done},
                      {"error", a.error.empty() ? json(nullptr) : json(a.error)}});
      out_.line(std::string("  ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
      if (!a.done) action_failed_ = true;
    }
    out_.doc["actions"] = std::move(done);
  }

  int run_recovery(const ckpt::RecoveryReport& scanned) {
    list_found(scanned);
    list_plan(scanned.actions);
    ckpt::RecoveryReport final_report = scanned;
    std::unique_ptr<ckpt::Store> store;
    if (dry_run_) {
      out_.doc["actions"] = json::array();
      auto ro = tools::open_store_for_reading(fs_, store_);
      if (!ro.ok()) return fatal(ro.status());
      store = std::move(ro).value();
      pending_ = !scanned.clean();
    } else {
      // A writable open takes the lock and runs exactly this recovery (spec 6.4), re-planned under the lock.
      ckpt::StoreOptions o;
      auto rw = ckpt::Store::open(fs_, store_, ckpt::Access::read_write, o);
      if (!rw.ok()) return fatal(rw.status());
      store = std::move(rw).value();
      final_report = store->recovery_report();
      record_actions(final_report.actions);
      if (purge_) purge_quarantine();  // under the lock the writable open holds
    }
    unknown_ = final_report.unknown_entries;
    notes_ = final_report.notes;
    return verify_and_finish(*store);
  }

  int run_rebuild(const ckpt::RecoveryReport* scanned) {
    out_.heading("found:");
    if (scanned == nullptr) {
      add_found("the JOURNAL is missing: it is rebuilt from the step directories that verify");
    } else {
      const auto& j = scanned->journal;
      if (!j.has_header) add_found("the journal has no valid HEADER at offset 0");
      for (const auto& d : j.corruption)
        add_found("journal bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + ") are corrupt (" +
                  std::to_string(d.length) + " bytes, first bad record at offset " + std::to_string(d.bad_offset) + "): " +
                  d.reason + (d.unapplied.empty() ? "" : "; " + std::to_string(d.unapplied.size()) + " valid records inside were not applied"));
      for (const auto& p : scanned->problems) add_found("protocol problem: " + p);
      add_found("the journal cannot be trusted as it is: it is rebuilt from the step directories that verify, and the "
                "old one is kept renamed");
    }
    // Under the lock, so no writer changes the store between the plan and the swap.
    ckpt::FileHandle lock;
    if (!dry_run_) {
      auto l = fs_.lock(ckpt::join_path(store_, std::string(ckpt::journal::kLockName)));
      if (!l.ok()) {
        if (l.status().code() == ckpt::Code::conflict)
          return fatal(ckpt::make_error(ckpt::Code::conflict, store_ + ": another writer has the store open (LOCK is held)"));
        return fatal(l.status());
      }
      lock = *l;
    }
    struct Unlock {
      ckpt::PosixFs& fs;
      ckpt::FileHandle& h;
      ~Unlock() {
        if (h.valid()) fs.close(h).ignore_error();  // releasing a lock loses nothing
      }
    } unlock{fs_, lock};

    auto plan = ckpt::plan_journal_rebuild(fs_, store_, scanned ? &scanned->journal : nullptr);
    if (!plan.ok()) return fatal(plan.status());
    json candidates = json::array();
    out_.heading(std::string(dry_run_ ? "would rebuild" : "rebuilding") + " the journal (store uuid " + ckpt::uuid_string(plan->uuid) +
                 " from " + plan->uuid_source + "):");
    std::size_t included = 0;
    for (const auto& c : plan->candidates) {
      const char* verdict = c.verdict == ckpt::RebuildCandidate::Verdict::include ? "commit"
                            : c.verdict == ckpt::RebuildCandidate::Verdict::abort ? "abort"
                            : c.verdict == ckpt::RebuildCandidate::Verdict::damaged ? "damaged"
                                                                        : "foreign";
      if (c.verdict == ckpt::RebuildCandidate::Verdict::include) ++included;
      out_.line("  " + c.dir + ": " + verdict + " (" + c.reason + ")");
      json damage = json::array();
      for (const auto& d : c.damage) {
        const std::string line = tools::problem_line(d.file, d);
        out_.line("      " + line);
        damage.push_back(line);
      }
      candidates.push_back({{"dir", c.dir}, {"step", c.step}, {"txn", c.txn}, {"verdict", verdict}, {"reason", c.reason}, {"damage", std::move(damage)}});
      if (c.verdict == ckpt::RebuildCandidate::Verdict::damaged || !c.damage.empty()) rebuild_damage_.push_back(c.dir);
    }
    if (plan->candidates.empty()) out_.line("  no step directories: the new journal holds no step");
    if (plan->high_water)
      out_.line("  txn ids up to " + std::to_string(plan->high_water->txn) + " stay spent (an aborted placeholder transaction records it)");
    out_.doc["rebuild"] = {{"store_uuid", ckpt::uuid_string(plan->uuid)},
                           {"uuid_source", plan->uuid_source},
                           {"steps_committed", included},
                           {"directories", std::move(candidates)},
                           {"journal_bytes", plan->journal_bytes.size()},
                           {"kept_as", nullptr}};
    out_.flush();
    if (dry_run_) {
      out_.doc["plan"] = json::array({"rebuild the journal"});
      out_.doc["actions"] = json::array();
      pending_ = true;
      return finish(ckpt::cli::kIntegrity);
    }
    auto kept = ckpt::write_rebuilt_journal(fs_, store_, *plan, scanned != nullptr);
    if (!kept.ok()) return fatal(kept.status().with_context("writing the rebuilt journal"));
    out_.heading("done:");
    out_.line("  ok      wrote the new JOURNAL (" + std::to_string(plan->journal_bytes.size()) + " bytes, fsynced, renamed into place, directory fsynced)");
    if (!kept->empty()) out_.line("  ok      kept the old journal as " + *kept + " (never deleted)");
    out_.doc["rebuild"]["kept_as"] = kept->empty() ? json(nullptr) : json(*kept);
    // The lock is released before the writable open below takes it again.
    fs_.close(lock).ignore_error();
    lock = ckpt::FileHandle{};

    // The recovery of a writable open then removes what aborted transactions left (only files they named).
    auto rw = ckpt::Store::open(fs_, store_, ckpt::Access::read_write, ckpt::StoreOptions{});
    if (!rw.ok()) return fatal(rw.status().with_context("reopening after the rebuild"));
    const auto& report = (*rw)->recovery_report();
    for (const auto& a : report.actions) out_.line(std::string("  ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
    json done = json::array({"rebuild the journal"});
    for (const auto& a : report.actions) {
      done.push_back(a.describe());
      if (!a.done) action_failed_ = true;
    }
    out_.doc["actions"] = std::move(done);
    unknown_ = report.unknown_entries;
    notes_ = report.notes;
    return verify_and_finish(**rw);
  }

  int verify_and_finish(ckpt::Store& store) {
    out_.heading("committed steps:");
    auto results = verify_committed(store);
    json steps = json::array();
    if (results.empty()) out_.line("  none");
    for (const auto& r : results) {
      const std::string head = "  step " + std::to_string(r.info.step) + " (txn " + std::to_string(r.info.txn) + ", " + r.info.dir + "): ";
      if (r.ok) {
        out_.line(head + "ok (" + std::to_string(r.chunks) + " chunks, " + ckpt::cli::human_bytes(static_cast<double>(r.bytes)) + " verified)");
      } else {
        out_.line(head + "DAMAGED (kept: a committed step is never deleted; restore it from a copy or retire it)");
        for (const auto& l : r.lines) out_.line("      " + l);
        damaged_.push_back(r.info.dir);
      }
      steps.push_back(step_result_json(r));
    }
    out_.doc["steps"] = std::move(steps);
    return finish(ckpt::cli::kOk);
  }

  // Deletes everything under STORE/quarantine/ (spec/JOURNAL.md 6.8): never followed through a symlink,
  // since every removal goes through PosixFs's O_NOFOLLOW directory handles.
  void remove_tree(const std::string& path, json& removed) {
    auto info = fs_.stat(path);
    if (!info.ok()) return;
    if (info->kind == ckpt::EntryKind::directory) {
      auto entries = fs_.list_dir(path);
      if (entries.ok())
        for (const auto& e : *entries) remove_tree(ckpt::join_path(path, e), removed);
      ckpt::Status s = fs_.rmdir(path);
      if (!s.ok()) {
        error_ = s;
        return;
      }
    } else {
      ckpt::Status s = fs_.unlink(path);  // a symlink is removed itself, never what it points at
      if (!s.ok()) {
        error_ = s;
        return;
      }
    }
    removed.push_back(path);
  }

  void purge_quarantine() {
    const std::string q = ckpt::join_path(store_, std::string(ckpt::journal::kQuarantineName));
    json removed = json::array();
    auto entries = fs_.list_dir(q);
    if (entries.ok()) {
      out_.heading("purging quarantine:");
      for (const auto& e : *entries) {
        remove_tree(ckpt::join_path(q, e), removed);
        out_.line("  removed " + ckpt::join_path(q, e));
      }
      if (error_.ok()) {
        ckpt::Status s = fs_.sync_dir(q);
        if (s.ok()) s = fs_.rmdir(q);
        if (s.ok()) s = fs_.sync_dir(store_);
        if (!s.ok()) error_ = s;
      }
    }
    out_.doc["purged"] = std::move(removed);
  }

  void list_quarantine() {
    const std::string q = ckpt::join_path(store_, std::string(ckpt::journal::kQuarantineName));
    auto entries = fs_.list_dir(q);
    std::vector<std::string> held;
    if (entries.ok()) held = *entries;
    out_.doc["quarantine"] = held;
    if (held.empty()) return;
    quarantined_ = true;
    out_.heading("in quarantine (kept for a person to decide; ckpt-repair --purge deletes them):");
    for (const auto& h : held) out_.line("  " + ckpt::join_path(q, h));
  }

  int finish(int code) {
    list_quarantine();
    if (!unknown_.empty()) {
      out_.heading("not accounted for (listed, never deleted):");
      for (const auto& u : unknown_) out_.line("  " + u);
    }
    for (const auto& n : notes_)
      if (std::find(found_.begin(), found_.end(), n) == found_.end()) out_.line("note: " + n);
    if (!error_.ok()) {
      if (code == ckpt::cli::kOk) code = ckpt::cli::kUsage;
    } else if (action_failed_) {
      code = ckpt::cli::kUsage;
    } else if (!damaged_.empty() || !rebuild_damage_.empty() || pending_ || quarantined_) {
      code = std::max(code, static_cast<int>(ckpt::cli::kIntegrity));
    }
    std::string verdict;
    if (!error_.ok()) verdict = "error: " + error_.message();
    else if (action_failed_) verdict = "some actions failed (see above); run ckpt-repair again once the cause is fixed";
    else if (dry_run_ && pending_) verdict = "repairs needed (dry run: nothing was changed)";
    else if (!damaged_.empty() || !rebuild_damage_.empty()) {
      std::set<std::string> all(damaged_.begin(), damaged_.end());
      all.insert(rebuild_damage_.begin(), rebuild_damage_.end());
      verdict = "DAMAGE REMAINS: " + std::to_string(all.size()) + " step director" + (all.size() == 1 ? "y" : "ies") + " damaged:";
      for (const auto& d : all) verdict += " " + d;
    } else if (quarantined_) {
      verdict = "consistent, but quarantine/ holds files whose fate recovery could not prove: inspect them, then ckpt-repair --purge";
    } else {
      verdict = dry_run_ ? "consistent: nothing to repair" : "consistent";
    }
    json u = unknown_;
    out_.doc["unknown_entries"] = u;
    out_.doc["notes"] = notes_;
    out_.doc["found"] = found_;
    json damaged = damaged_;
    for (const auto& d : rebuild_damage_)
      if (std::find(damaged_.begin(), damaged_.end(), d) == damaged_.end()) damaged.push_back(d);
    out_.doc["damaged"] = std::move(damaged);
    out_.doc["consistent"] = code == ckpt::cli::kOk;
    out_.doc["result"] = verdict;
    out_.doc["exit"] = code;
    if (!error_.ok()) out_.doc["error"] = {{"code", ckpt::code_name(error_.code())}, {"message", error_.message()}};
    if (!error_.ok()) std::fprintf(stderr, "%s: %s\n", kTool, tools::printable(error_.message()).c_str());
    out_.heading("result: " + verdict);
    return code;
  }

  ckpt::PosixFs& fs_;
  std::string store_;
  bool dry_run_, purge_;
  Output& out_;
  ckpt::Status error_;
  bool action_failed_ = false, pending_ = false, quarantined_ = false;
  std::vector<std::string> found_, unknown_, notes_, damaged_, rebuild_damage_;
};

// --- Memory roots (spec/TIERS.md 2, 5) -----------------------------------------------------------

// Every store of the root recovered (recover_store, under its lock), every tier log's torn tail cut, then
// every copy verified. Nothing is deleted but what store recovery removes (only files an uncommitted
// transaction's BEGIN named), and nothing outside the root is touched.
int repair_memory_root(ckpt::PosixFs& fs, const std::string& path, bool dry_run, bool as_json) {
  Output out(as_json);
  auto repaired = ckpt::tiers::repair_memory_root(fs, path, dry_run);
  if (!repaired.ok()) return ckpt::cli::report(kTool, repaired.status());
  const ckpt::tiers::MemoryRootRepair& r = *repaired;
  out.doc["memory_root"] = r.root;
  out.doc["path"] = path;
  out.doc["dry_run"] = dry_run;
  out.line(std::string(kTool) + ": memory root " + r.root + (dry_run ? " (dry run: nothing is changed)" : ""));
  int code = ckpt::cli::kOk;
  auto worse = [&code](int c) { code = std::max(code, c); };
  out.heading("stores:");
  if (r.stores.empty()) out.line("  none");
  json stores = json::array();
  for (const auto& s : r.stores) {
    const std::string where = s.rank_dir + "/" + ckpt::base_name(s.store);
    json j = {{"rank_dir", s.rank_dir}, {"store", s.store}, {"pending", s.pending()}, {"consistent", s.consistent()}, {"quarantine", s.quarantine}};
    j["error"] = s.error.ok() ? json(nullptr) : json({{"code", ckpt::code_name(s.error.code())}, {"message", s.error.message()}});
    json plan = json::array(), done = json::array();
    if (s.report) {
      j["journal"] = tools::journal_json(s.report->journal);
      for (const auto& a : s.report->actions) {
        plan.push_back(a.describe());
        if (s.report->applied)
          done.push_back({{"action", ckpt::recovery_action_name(a.kind)}, {"path", a.path}, {"txn", a.txn}, {"done", a.done},
                          {"error", a.error.empty() ? json(nullptr) : json(a.error)}});
      }
    }
    if (!s.error.ok()) {
      out.line("  " + where + ": " + (s.error.code() == ckpt::Code::conflict ? "NOT REPAIRED: " : "DAMAGED: ") + s.error.message());
      worse(ckpt::cli::exit_for(s.error.code()));
    } else if (s.pending()) {
      out.line("  " + where + ": would do:");
      for (const auto& a : s.report->actions) out.line("      " + a.describe());
      worse(ckpt::cli::kIntegrity);
    } else if (s.report && s.report->applied && !s.report->clean()) {
      out.line("  " + where + ": recovered:");
      for (const auto& a : s.report->actions) out.line(std::string("      ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
      if (s.failed()) worse(ckpt::cli::kUsage);
    } else {
      out.line("  " + where + ": consistent, nothing to do");
    }
    if (!s.quarantine.empty()) {
      out.line("      in quarantine (kept for a person to decide; ckpt-repair --purge " + s.store + " deletes them): " +
               std::to_string(s.quarantine.size()) + " entries");
      worse(ckpt::cli::kIntegrity);
    }
    j["plan"] = std::move(plan);
    j["actions"] = std::move(done);
    stores.push_back(std::move(j));
  }
  out.doc["stores"] = std::move(stores);
  out.heading("tier logs:");
  json logs = json::array();
  for (const auto& l : r.logs) {
    const std::string where = l.rank_dir + "/" + ckpt::base_name(l.path);
    std::string text = !l.present ? "missing (nothing to do)" : std::to_string(l.records) + " records";
    if (l.torn_tail)
      text += ", torn tail at offset " + std::to_string(l.torn_tail->offset) + " (" + std::to_string(l.torn_tail->length) + " bytes)" +
              (l.truncated ? ": cut (the end of the log)" : dry_run && l.error.ok() ? ": would be cut" : "");
    if (!l.error.ok()) {
      text += ": " + std::string(l.error.code() == ckpt::Code::corrupt ? "DAMAGED: " : "NOT REPAIRED: ") + l.error.message();
      worse(ckpt::cli::exit_for(l.error.code()));
    } else if (l.torn_tail && !l.truncated) {
      worse(ckpt::cli::kIntegrity);
    }
    out.line("  " + where + ": " + text);
    json j = {{"rank_dir", l.rank_dir}, {"path", l.path}, {"present", l.present}, {"records", l.records}, {"truncated", l.truncated}};
    j["torn_tail"] = l.torn_tail ? tools::damage_json(*l.torn_tail) : json(nullptr);
    j["error"] = l.error.ok() ? json(nullptr) : json({{"code", ckpt::code_name(l.error.code())}, {"message", l.error.message()}});
    logs.push_back(std::move(j));
  }
  out.doc["tier_logs"] = std::move(logs);
  out.heading(dry_run ? "every copy, verified as it is:" : "every copy, verified afterwards:");
  const auto& after = r.after;
  out.line("  " + std::to_string(after.copies_checked) + " copies, " + std::to_string(after.chunks_checked) + " chunks, " +
           ckpt::cli::human_bytes(static_cast<double>(after.bytes_checked)) + " checked");
  for (const auto& p : after.problems) {
    out.line(std::string("  ") + ckpt::code_name(p.code) + ": " + p.message);
    worse(ckpt::cli::exit_for(p.code));
  }
  for (const auto& n : after.notes) out.line("  note: " + n);
  json verified = tools::memory_root_json(after.root, true);
  verified["ok"] = after.ok();
  verified["copies_checked"] = after.copies_checked;
  verified["chunks_checked"] = after.chunks_checked;
  verified["bytes_checked"] = after.bytes_checked;
  out.doc["after"] = std::move(verified);
  std::string verdict;
  if (r.consistent()) verdict = dry_run ? "consistent: nothing to repair" : "consistent";
  else if (code >= ckpt::cli::kUsage) verdict = "some stores or logs could not be repaired (see above); run ckpt-repair again once the cause is fixed";
  else if (dry_run && after.ok()) verdict = "repairs needed (dry run: nothing was changed)";
  else verdict = "DAMAGE REMAINS (see above): a copy, journal or log was left as it is";
  if (!r.consistent()) worse(ckpt::cli::kIntegrity);
  out.doc["consistent"] = r.consistent();
  out.doc["result"] = verdict;
  out.doc["exit"] = code;
  out.heading("result: " + verdict);
  if (as_json) ckpt::cli::print_json(out.doc);
  return code;
}

// --- Stores on objects (spec/OBJECT.md 4.5, 7) ---------------------------------------------------

// Repair of a store on objects is its garbage collection: the objects and unfinished uploads of transactions
// proven dead (an abort object, a retire object, or a commit of the step naming another transaction) are
// deleted; a transaction with neither commit nor abort is kept and listed (in progress, or in doubt). Log
// objects are never touched. Then every committed step is verified as ckpt-verify does.
int repair_object_store(const std::string& url, bool dry_run, bool as_json) {
  Output out(as_json);
  ckpt::StoreOptions options;
  options.open_objects = ckpt::cli::object_opener();
  auto opened = ckpt::open_store(url, dry_run ? ckpt::Access::read_only : ckpt::Access::read_write, options);
  if (!opened.ok()) return ckpt::cli::report(kTool, opened.status());
  ckpt::Store& store = **opened;
  out.doc["store"] = store.path();
  out.doc["object_store"] = true;
  out.doc["dry_run"] = dry_run;
  out.line(std::string(kTool) + ": store " + store.path() + (dry_run ? " (dry run: nothing is changed)" : ""));
  auto cleanup = store.collect_garbage(dry_run);
  if (!cleanup.ok()) return ckpt::cli::report(kTool, cleanup.status());
  out.heading(dry_run ? "would remove (transactions proven dead):" : "removed (transactions proven dead):");
  if (cleanup->removed.empty() && cleanup->aborted_uploads.empty()) out.line("  nothing");
  for (const auto& key : cleanup->removed) out.line("  object " + key);
  for (const auto& u : cleanup->aborted_uploads) out.line("  unfinished upload " + u);
  if (!cleanup->kept.empty()) {
    out.heading("kept (no commit or abort object: in progress, or in doubt; never deleted):");
    for (const auto& k : cleanup->kept) out.line("  " + k);
  }
  out.doc["removed"] = cleanup->removed;
  out.doc["aborted_uploads"] = cleanup->aborted_uploads;
  out.doc["kept"] = cleanup->kept;
  // Every committed step, every chunk, as ckpt-verify s3://... judges it.
  ckpt::report::VerifyPathsOptions verify_options;
  ckpt::report::VerifyPathsReport verified;
  if (ckpt::Status s = ckpt::report::verify_open_store(store, verify_options, verified); !s.ok()) return ckpt::cli::report(kTool, s);
  out.heading(dry_run ? "every committed step, verified as it is:" : "every committed step, verified afterwards:");
  std::vector<std::string> damaged;
  for (const auto& step : verified.steps) {
    out.line("  " + step.label + ": " + (step.ok ? "ok" : "DAMAGED"));
    if (!step.ok) damaged.push_back(step.dir);
  }
  if (verified.steps.empty()) out.line("  no committed step");
  for (const auto& st : verified.stores)
    for (const auto& p : st.problems) out.line("  problem: " + p.message());
  for (const auto& st : verified.stores)
    for (const auto& n : st.notes) out.line("  note: " + n);
  out.doc["verify"] = ckpt::report::verify_json(verified);
  const bool pending = dry_run && (!cleanup->removed.empty() || !cleanup->aborted_uploads.empty());
  const int verify_code = ckpt::report::exit_code(verified);
  int code = std::max(verify_code, pending ? static_cast<int>(ckpt::cli::kIntegrity) : static_cast<int>(ckpt::cli::kOk));
  std::string verdict;
  if (verify_code == ckpt::cli::kUsage) verdict = "some steps could not be checked (see above)";
  else if (verify_code == ckpt::cli::kIntegrity) verdict = "DAMAGE REMAINS: a log object or a committed step is damaged (repair deletes only dead transactions' objects)";
  else if (pending) verdict = "repairs needed (dry run: nothing was changed)";
  else verdict = dry_run ? "consistent: nothing to repair" : "consistent";
  out.doc["damaged"] = damaged;
  out.doc["consistent"] = code == ckpt::cli::kOk;
  out.doc["result"] = verdict;
  out.doc["exit"] = code;
  out.heading("result: " + verdict);
  if (as_json) ckpt::cli::print_json(out.doc);
  return code;
}

}  // namespace

// --help: what the tool does and its exit status (docs/tools.md "Exit codes").
constexpr const char* kAbout = R"(Repairs a ckpt checkpoint store. Prints what it found and what it will do, then does it:
truncates a torn journal tail, rolls back transactions a crash left uncommitted (removing
only the files they named), rebuilds a missing or corrupt journal from the step directories
whose manifest and shards verify (the old journal is kept renamed), verifies every committed
step and names damage down to tensor and chunk. It never deletes a committed step, and lists
but never deletes files it cannot account for. Files whose fate recovery cannot prove are moved
to STORE/quarantine/ and kept until --purge.

A memory tier's root (MEMROOT, holding rank-<r>/ directories: own/, held-<s>/ and the tier log
TIERS; spec/TIERS.md 2) or one rank directory: each store in it is recovered as above, under its
lock (a store a live rank holds is reported, not touched), a tier log's torn tail is cut (under
the rank's own/LOCK), and every copy is verified afterwards. A store whose journal is corrupt or
missing, and damage inside a tier log, are reported and left as they are: run ckpt-repair on
that store to rebuild its journal. --purge applies to a single store.

Exit status: 0 the store is consistent afterwards (with --dry-run: already consistent),
1 damage remains that it could not repair, or quarantine/ is not empty (with --dry-run: repairs
are needed),
2 usage or I/O error.

A store on objects, s3://bucket/prefix (spec/OBJECT.md 4.5): the objects and unfinished multipart
uploads of transactions proven dead (an abort or retire object names them, or their step committed
another transaction) are deleted (--dry-run: listed); a transaction with neither commit nor abort
is listed as kept (in progress, or in doubt) and never deleted; then every committed step is
verified. Exit 1 with --dry-run when something would be removed, or when damage remains.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string path;
    bool dry_run = false, as_json = false, purge = false;
    app.add_option("STORE", path, "store directory (holds JOURNAL and step-<step>-<txn>/ directories), s3://bucket/prefix, or a "
                                  "memory root or rank directory")->required();
    app.add_flag("--dry-run", dry_run, "report what would be done and change nothing (takes no lock)");
    app.add_flag("--json", as_json, "print one JSON document instead of text");
    app.add_flag("--purge", purge, "after repairing, delete everything in STORE/quarantine/ (files recovery could not prove "
                                   "committed or uncommitted); without it they are kept and the exit status is 1");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    if (ckpt::object::is_object_url(path)) {
      if (purge) return ckpt::cli::usage_error(kTool, "--purge applies to a store directory's quarantine/; a store on objects has none");
      return repair_object_store(path, dry_run, as_json);
    }

    ckpt::PosixFs fs;
    auto kind = ckpt::classify_path(fs, path);
    if (!kind.ok()) return ckpt::cli::report(kTool, kind.status());
    switch (*kind) {
      case ckpt::PathKind::file:
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": not a directory; ckpt-repair takes a store directory (ckpt-verify checks single files)"));
      case ckpt::PathKind::step_dir:
        return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": a step directory; run ckpt-repair on the store that holds it"));
      case ckpt::PathKind::other_dir:
        return ckpt::cli::report(kTool, ckpt::not_a_store_error(path, *kind));
      case ckpt::PathKind::memory_root:
      case ckpt::PathKind::rank_dir:
        if (purge)
          return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, path + ": --purge applies to one store; run "
                                                                                                "ckpt-repair --purge STORE on the store whose quarantine/ is to go"));
        return repair_memory_root(fs, path, dry_run, as_json);
      default: break;
    }
    Output out(as_json);
    if (purge && dry_run) return ckpt::cli::report(kTool, ckpt::make_error(ckpt::Code::invalid_argument, "--purge and --dry-run exclude each other"));
    Repair repair(fs, path, dry_run, purge, out);
    const int code = repair.run(*kind);
    if (as_json) ckpt::cli::print_json(out.doc);
    return code;
  });
}
