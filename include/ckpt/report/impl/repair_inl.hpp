// ckpt: definitions of report/repair.hpp (spec/LAYOUT.md 4). What ckpt-repair decided before issue 31
// part 3, moved here unchanged in what it does and says.
#pragma once

#include "../repair.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../../store/journal_rebuild.hpp"
#include "../../store/maintenance.hpp"
#include "../../store/open_store.hpp"
#include "../../store/store.hpp"
#include "../../store/path_kind.hpp"
#include "../../store/store.hpp"
#include "../../tiers/memory_root.hpp"
#include "../steps.hpp"
#include "../text.hpp"
#include "../verify.hpp"

namespace ckpt::report {
namespace detail {

constexpr const char* kRepairTool = "ckpt-repair";

// The report's text as it is decided: a line (control bytes escaped) or a heading after a blank line;
// each piece also goes to on_text at once.
class RepairText {
 public:
  RepairText(std::string& text, const std::function<void(const std::string&)>& on_text) : text_(text), on_text_(on_text) {}
  void line(const std::string& s) { emit(printable(s) + "\n"); }
  void heading(const std::string& s) { emit("\n" + s + "\n"); }

 private:
  void emit(const std::string& piece) {
    text_ += piece;
    if (on_text_) on_text_(piece);
  }
  std::string& text_;
  const std::function<void(const std::string&)>& on_text_;
};

// One committed step verified: each problem once as a line and as JSON.
struct RepairStepResult {
  StepInfo info;
  bool ok = true;
  std::uint64_t chunks = 0, bytes = 0;
  std::vector<std::string> lines;
  json problems = json::array();
};

[[nodiscard]] CKPT_INLINE std::vector<RepairStepResult> verify_committed(Store& store) {
  std::vector<RepairStepResult> out;
  for (const auto& info : store.steps()) {
    RepairStepResult r;
    r.info = info;
    auto v = store.verify_step(info.step);
    if (!v.ok()) {
      r.ok = false;
      r.lines.push_back(v.status().to_string());
      r.problems.push_back({{"message", r.lines.back()}});
    } else {
      // The library reports each problem once: step-level ones, then each shard's own.
      for (const auto& p : v->problems) {
        r.lines.push_back(std::string(code_name(p.code)) + ": " + p.message);
        json j = problem_json(p);
        j["message"] = r.lines.back();  // the spelling ckpt-repair always printed
        r.problems.push_back(std::move(j));
      }
      for (const auto& shard : v->shards) {
        r.chunks += shard.chunks_checked;
        r.bytes += shard.bytes_checked;
        for (const auto& p : shard.problems) {
          r.lines.push_back(problem_line(shard.path, p));
          json j = problem_json(p);
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

[[nodiscard]] inline json status_json(const Status& s) {
  return s.ok() ? json(nullptr) : json({{"code", code_name(s.code())}, {"message", s.message()}});
}

// The repair of one store directory.
class StoreRepairRun {
 public:
  StoreRepairRun(FsRef fs, std::string store, const RepairOptions& options, RepairReport& out)
      : fs_(fs), store_(std::move(store)), dry_run_(options.dry_run), purge_(options.purge), report_(out),
        out_(out.text, options.on_text) {}

  int run(PathKind kind) {
    doc()["store"] = store_;
    doc()["dry_run"] = dry_run_;
    out_.line(std::string(kRepairTool) + ": store " + store_ + (dry_run_ ? " (dry run: nothing is changed)" : ""));
    std::optional<RecoveryReport> scanned;
    bool need_rebuild = kind == PathKind::broken_store;
    if (kind == PathKind::store) {
      auto report = check_store(fs_, store_);
      if (!report.ok()) {
        if (report.status().code() == Code::version)
          return fatal(report.status().with_context("the journal was written by a newer version; not touching it"));
        return fatal(report.status());
      }
      scanned = std::move(report).value();
      doc()["journal"] = journal_json(scanned->journal);
      out_.line("journal: " + journal_line(scanned->journal));
      need_rebuild = scanned->corrupt();
    } else {
      doc()["journal"] = nullptr;
      out_.line("journal: MISSING (the store holds step directories but no JOURNAL)");
    }
    return need_rebuild ? run_rebuild(scanned ? &*scanned : nullptr) : run_recovery(*scanned);
  }

 private:
  json& doc() { return report_.doc; }

  int fatal(const Status& s) {
    error_ = s;
    return finish(exit_for(s.code()) == kIntegrity ? kIntegrity : kUsage);
  }

  void add_found(const std::string& what) {
    found_.push_back(what);
    out_.line("  - " + what);
  }

  void list_found(const RecoveryReport& r) {
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
      if (a.kind == RecoveryActionKind::append_commit)
        add_found("transaction " + std::to_string(a.txn) + " (step " + std::to_string(a.commit.step) +
                  ") has no durable COMMIT, but its MANIFEST and every chunk of its shards verify: it is rolled forward (committed)");
      if (a.kind == RecoveryActionKind::quarantine)
        add_found("transaction " + std::to_string(a.txn) + ": its files cannot be proven committed or uncommitted, so " + a.path +
                  " moves to " + a.to + " (kept; ckpt-repair --purge deletes quarantine)");
    }
    for (const auto& t : r.transactions) {
      if (t.state == TxnState::open) {
        bool decided = false;
        for (const auto& a : r.actions)
          decided = decided || (a.txn == t.txn && (a.kind == RecoveryActionKind::append_commit || a.kind == RecoveryActionKind::quarantine));
        if (!decided)
          add_found("transaction " + std::to_string(t.txn) + " (step " + std::to_string(t.step) + ", " + t.dir() +
                    ") began and never reached its MANIFEST: it is rolled back and only the files its BEGIN named are removed");
      } else if (t.state == TxnState::aborted || t.state == TxnState::retired) {
        for (const auto& a : r.actions)
          if (a.txn == t.txn && a.kind == RecoveryActionKind::remove_dir) {
            add_found(std::string(t.state == TxnState::aborted ? "aborted" : "retired") + " transaction " + std::to_string(t.txn) +
                      " (step " + std::to_string(t.step) + ") still has files in " + t.dir());
            break;
          }
      }
    }
    for (const auto& n : r.notes) add_found(n);
    for (const auto& u : r.unknown_entries) add_found("unknown entry '" + u + "': no journal record accounts for it; listed, never deleted");
    if (found_.empty()) out_.line("  nothing wrong with the journal");
  }

  void list_plan(const std::vector<RecoveryAction>& actions) {
    out_.heading(dry_run_ ? "would do:" : "will do:");
    if (actions.empty()) out_.line("  nothing");
    for (std::size_t i = 0; i < actions.size(); ++i) out_.line("  " + std::to_string(i + 1) + ". " + actions[i].describe());
    json plan = json::array();
    for (const auto& a : actions) plan.push_back(a.describe());
    doc()["plan"] = std::move(plan);
  }

  void record_actions(const std::vector<RecoveryAction>& actions) {
    json done = json::array();
    out_.heading("done:");
    if (actions.empty()) out_.line("  nothing");
    for (const auto& a : actions) {
      done.push_back({{"action", recovery_action_name(a.kind)},
                      {"path", a.path},
                      {"txn", a.txn},
                      {"offset", a.offset},
                      {"length", a.length},
                      {"done", a.done},
                      {"error", a.error.empty() ? json(nullptr) : json(a.error)}});
      out_.line(std::string("  ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
      if (!a.done) action_failed_ = true;
    }
    doc()["actions"] = std::move(done);
  }

  int run_recovery(const RecoveryReport& scanned) {
    list_found(scanned);
    list_plan(scanned.actions);
    RecoveryReport final_report = scanned;
    std::unique_ptr<Store> store;
    if (dry_run_) {
      doc()["actions"] = json::array();
      auto ro = open_store_for_reading(fs_, store_);
      if (!ro.ok()) return fatal(ro.status());
      store = std::move(ro).value();
      pending_ = !scanned.clean();
    } else {
      // A writable open takes the lock and runs exactly this recovery (spec 6.4), re-planned under the lock.
      auto rw = Store::open(fs_, store_, Access::read_write, StoreOptions{});
      if (!rw.ok()) return fatal(rw.status());
      store = std::move(rw).value();
      final_report = store->recovery_report();
      record_actions(final_report.actions);
      if (purge_) purge();  // under the lock the writable open holds
    }
    unknown_ = final_report.unknown_entries;
    notes_ = final_report.notes;
    return verify_and_finish(*store);
  }

  int run_rebuild(const RecoveryReport* scanned) {
    out_.heading("found:");
    if (scanned == nullptr) {
      add_found("the JOURNAL is missing: it is rebuilt from the step directories that verify");
    } else {
      const auto& j = scanned->journal;
      if (!j.has_header) add_found("the journal has no valid HEADER at offset 0");
      for (const auto& d : j.corruption)
        add_found("journal bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + ") are corrupt (" +
                  std::to_string(d.length) + " bytes, first bad record at offset " + std::to_string(d.bad_offset) + "): " + d.reason +
                  (d.unapplied.empty() ? "" : "; " + std::to_string(d.unapplied.size()) + " valid records inside were not applied"));
      for (const auto& p : scanned->problems) add_found("protocol problem: " + p.message);
      add_found("the journal cannot be trusted as it is: it is rebuilt from the step directories that verify, and the old one is kept renamed");
    }
    // Under the lock, so no writer changes the store between the plan and the swap.
    StoreLock lock;
    if (!dry_run_) {
      auto l = lock_store(fs_, store_);
      if (!l.ok()) return fatal(l.status());
      lock = std::move(l).value();
    }
    auto plan = plan_journal_rebuild(fs_, store_, scanned ? &scanned->journal : nullptr);
    if (!plan.ok()) return fatal(plan.status());
    json candidates = json::array();
    out_.heading(std::string(dry_run_ ? "would rebuild" : "rebuilding") + " the journal (store uuid " + uuid_string(plan->uuid) + " from " +
                 plan->uuid_source + "):");
    std::size_t included = 0;
    for (const auto& c : plan->candidates) {
      const char* verdict = c.verdict == RebuildCandidate::Verdict::include ? "commit"
                            : c.verdict == RebuildCandidate::Verdict::abort ? "abort"
                            : c.verdict == RebuildCandidate::Verdict::damaged ? "damaged"
                                                                              : "foreign";
      if (c.verdict == RebuildCandidate::Verdict::include) ++included;
      out_.line("  " + c.dir + ": " + verdict + " (" + c.reason + ")");
      json damage = json::array();
      for (const auto& d : c.damage) {
        const std::string line = problem_line(d.file, d);
        out_.line("      " + line);
        damage.push_back(line);
      }
      candidates.push_back({{"dir", c.dir}, {"step", c.step}, {"txn", c.txn}, {"verdict", verdict}, {"reason", c.reason}, {"damage", std::move(damage)}});
      if (c.verdict == RebuildCandidate::Verdict::damaged || !c.damage.empty()) rebuild_damage_.push_back(c.dir);
    }
    if (plan->candidates.empty()) out_.line("  no step directories: the new journal holds no step");
    if (plan->high_water)
      out_.line("  txn ids up to " + std::to_string(plan->high_water->txn) + " stay spent (an aborted placeholder transaction records it)");
    doc()["rebuild"] = {{"store_uuid", uuid_string(plan->uuid)},
                        {"uuid_source", plan->uuid_source},
                        {"steps_committed", included},
                        {"directories", std::move(candidates)},
                        {"journal_bytes", plan->journal_bytes.size()},
                        {"kept_as", nullptr}};
    if (dry_run_) {
      doc()["plan"] = json::array({"rebuild the journal"});
      doc()["actions"] = json::array();
      pending_ = true;
      return finish(kIntegrity);
    }
    auto kept = write_rebuilt_journal(fs_, store_, *plan, scanned != nullptr);
    if (!kept.ok()) return fatal(kept.status().with_context("writing the rebuilt journal"));
    out_.heading("done:");
    out_.line("  ok      wrote the new JOURNAL (" + std::to_string(plan->journal_bytes.size()) + " bytes, fsynced, renamed into place, directory fsynced)");
    if (!kept->empty()) out_.line("  ok      kept the old journal as " + *kept + " (never deleted)");
    doc()["rebuild"]["kept_as"] = kept->empty() ? json(nullptr) : json(*kept);
    lock.release();  // before the writable open below takes it again

    // The recovery of a writable open then removes what aborted transactions left (only files they named).
    auto rw = Store::open(fs_, store_, Access::read_write, StoreOptions{});
    if (!rw.ok()) return fatal(rw.status().with_context("reopening after the rebuild"));
    const auto& report = (*rw)->recovery_report();
    for (const auto& a : report.actions) out_.line(std::string("  ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
    json done = json::array({"rebuild the journal"});
    for (const auto& a : report.actions) {
      done.push_back(a.describe());
      if (!a.done) action_failed_ = true;
    }
    doc()["actions"] = std::move(done);
    unknown_ = report.unknown_entries;
    notes_ = report.notes;
    return verify_and_finish(**rw);
  }

  int verify_and_finish(Store& store) {
    out_.heading("committed steps:");
    auto results = verify_committed(store);
    json steps = json::array();
    if (results.empty()) out_.line("  none");
    for (const auto& r : results) {
      const std::string head = "  step " + std::to_string(r.info.step) + " (txn " + std::to_string(r.info.txn) + ", " + r.info.dir + "): ";
      if (r.ok) {
        out_.line(head + "ok (" + std::to_string(r.chunks) + " chunks, " + human_bytes(static_cast<double>(r.bytes)) + " verified)");
      } else {
        out_.line(head + "DAMAGED (kept: a committed step is never deleted; restore it from a copy or retire it)");
        for (const auto& l : r.lines) out_.line("      " + l);
        damaged_.push_back(r.info.dir);
      }
      json j = step_info_json(r.info);
      j["ok"] = r.ok;
      j["chunks_checked"] = r.chunks;
      j["bytes_checked"] = r.bytes;
      j["problems"] = r.problems;
      steps.push_back(std::move(j));
    }
    doc()["steps"] = std::move(steps);
    return finish(kOk);
  }

  // quarantine/ deleted durably (spec/JOURNAL.md 6.8), never through a symlink (store/maintenance.hpp).
  void purge() {
    QuarantinePurge purged;
    const Status s = purge_quarantine(fs_, store_, purged);
    if (purged.present) {
      out_.heading("purging quarantine:");
      for (const auto& e : purged.entries) out_.line("  removed " + e);
      doc()["purged"] = purged.removed;
    } else {
      doc()["purged"] = json::array();
    }
    if (!s.ok()) error_ = s;
  }

  void list_quarantine() {
    const std::vector<std::string> held = quarantine_entries(fs_, store_);
    doc()["quarantine"] = held;
    if (held.empty()) return;
    quarantined_ = true;
    const std::string q = join_path(store_, std::string(journal::kQuarantineName));
    out_.heading("in quarantine (kept for a person to decide; ckpt-repair --purge deletes them):");
    for (const auto& h : held) out_.line("  " + join_path(q, h));
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
      if (code == kOk) code = kUsage;
    } else if (action_failed_) {
      code = kUsage;
    } else if (!damaged_.empty() || !rebuild_damage_.empty() || pending_ || quarantined_) {
      code = std::max(code, static_cast<int>(kIntegrity));
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
    doc()["unknown_entries"] = unknown_;
    doc()["notes"] = notes_;
    doc()["found"] = found_;
    json damaged = damaged_;
    for (const auto& d : rebuild_damage_)
      if (std::find(damaged_.begin(), damaged_.end(), d) == damaged_.end()) damaged.push_back(d);
    doc()["damaged"] = std::move(damaged);
    doc()["consistent"] = code == kOk;
    doc()["result"] = verdict;
    doc()["exit"] = code;
    if (!error_.ok()) doc()["error"] = status_json(error_);
    report_.error = error_;
    out_.heading("result: " + verdict);
    return code;
  }

  FsRef fs_;
  std::string store_;
  bool dry_run_, purge_;
  RepairReport& report_;
  RepairText out_;
  Status error_;
  bool action_failed_ = false, pending_ = false, quarantined_ = false;
  std::vector<std::string> found_, unknown_, notes_, damaged_, rebuild_damage_;
};

// A memory root: every store recovered (recover_store, under its lock), every tier log's torn tail cut,
// then every copy verified (tiers/memory_root.hpp). Nothing outside the root is touched.
[[nodiscard]] CKPT_INLINE Result<int> repair_memory_root_into(FsRef fs, const std::string& path, const RepairOptions& options,
                                                             RepairReport& out) {
  const bool dry_run = options.dry_run;
  auto repaired = tiers::repair_memory_root(fs, path, dry_run);
  if (!repaired.ok()) return repaired.status();
  const tiers::MemoryRootRepair& r = *repaired;
  RepairText text(out.text, options.on_text);
  json& doc = out.doc;
  doc["memory_root"] = r.root;
  doc["path"] = path;
  doc["dry_run"] = dry_run;
  text.line(std::string(kRepairTool) + ": memory root " + r.root + (dry_run ? " (dry run: nothing is changed)" : ""));
  int code = kOk;
  auto worse = [&code](int c) { code = std::max(code, c); };
  text.heading("stores:");
  if (r.stores.empty()) text.line("  none");
  json stores = json::array();
  for (const auto& s : r.stores) {
    const std::string where = s.rank_dir + "/" + base_name(s.store);
    json j = {{"rank_dir", s.rank_dir}, {"store", s.store}, {"pending", s.pending()}, {"consistent", s.consistent()}, {"quarantine", s.quarantine}};
    j["error"] = status_json(s.error);
    json plan = json::array(), done = json::array();
    if (s.report) {
      j["journal"] = journal_json(s.report->journal);
      for (const auto& a : s.report->actions) {
        plan.push_back(a.describe());
        if (s.report->applied)
          done.push_back({{"action", recovery_action_name(a.kind)}, {"path", a.path}, {"txn", a.txn}, {"done", a.done},
                          {"error", a.error.empty() ? json(nullptr) : json(a.error)}});
      }
    }
    if (!s.error.ok()) {
      text.line("  " + where + ": " + (s.error.code() == Code::conflict ? "NOT REPAIRED: " : "DAMAGED: ") + s.error.message());
      worse(exit_for(s.error.code()));
    } else if (s.pending()) {
      text.line("  " + where + ": would do:");
      for (const auto& a : s.report->actions) text.line("      " + a.describe());
      worse(kIntegrity);
    } else if (s.report && s.report->applied && !s.report->clean()) {
      text.line("  " + where + ": recovered:");
      for (const auto& a : s.report->actions) text.line(std::string("      ") + (a.done ? "ok      " : "FAILED  ") + a.describe());
      if (s.failed()) worse(kUsage);
    } else {
      text.line("  " + where + ": consistent, nothing to do");
    }
    if (!s.quarantine.empty()) {
      text.line("      in quarantine (kept for a person to decide; ckpt-repair --purge " + s.store + " deletes them): " +
                std::to_string(s.quarantine.size()) + " entries");
      worse(kIntegrity);
    }
    j["plan"] = std::move(plan);
    j["actions"] = std::move(done);
    stores.push_back(std::move(j));
  }
  doc["stores"] = std::move(stores);
  text.heading("tier logs:");
  json logs = json::array();
  for (const auto& l : r.logs) {
    const std::string where = l.rank_dir + "/" + base_name(l.path);
    std::string line = !l.present ? "missing (nothing to do)" : std::to_string(l.records) + " records";
    if (l.torn_tail)
      line += ", torn tail at offset " + std::to_string(l.torn_tail->offset) + " (" + std::to_string(l.torn_tail->length) + " bytes)" +
              (l.truncated ? ": cut (the end of the log)" : dry_run && l.error.ok() ? ": would be cut" : "");
    if (!l.error.ok()) {
      line += ": " + std::string(l.error.code() == Code::corrupt ? "DAMAGED: " : "NOT REPAIRED: ") + l.error.message();
      worse(exit_for(l.error.code()));
    } else if (l.torn_tail && !l.truncated) {
      worse(kIntegrity);
    }
    text.line("  " + where + ": " + line);
    json j = {{"rank_dir", l.rank_dir}, {"path", l.path}, {"present", l.present}, {"records", l.records}, {"truncated", l.truncated}};
    j["torn_tail"] = l.torn_tail ? damage_json(*l.torn_tail) : json(nullptr);
    j["error"] = status_json(l.error);
    logs.push_back(std::move(j));
  }
  doc["tier_logs"] = std::move(logs);
  text.heading(dry_run ? "every copy, verified as it is:" : "every copy, verified afterwards:");
  const auto& after = r.after;
  text.line("  " + std::to_string(after.copies_checked) + " copies, " + std::to_string(after.chunks_checked) + " chunks, " +
            human_bytes(static_cast<double>(after.bytes_checked)) + " checked");
  for (const auto& p : after.problems) {
    text.line(std::string("  ") + code_name(p.code) + ": " + p.message);
    worse(exit_for(p.code));
  }
  for (const auto& n : after.notes) text.line("  note: " + n);
  json verified = memory_root_json(after.root, true);
  verified["ok"] = after.ok();
  verified["copies_checked"] = after.copies_checked;
  verified["chunks_checked"] = after.chunks_checked;
  verified["bytes_checked"] = after.bytes_checked;
  doc["after"] = std::move(verified);
  std::string verdict;
  if (r.consistent()) verdict = dry_run ? "consistent: nothing to repair" : "consistent";
  else if (code >= kUsage) verdict = "some stores or logs could not be repaired (see above); run ckpt-repair again once the cause is fixed";
  else if (dry_run && after.ok()) verdict = "repairs needed (dry run: nothing was changed)";
  else verdict = "DAMAGE REMAINS (see above): a copy, journal or log was left as it is";
  if (!r.consistent()) worse(kIntegrity);
  doc["consistent"] = r.consistent();
  doc["result"] = verdict;
  doc["exit"] = code;
  text.heading("result: " + verdict);
  return code;
}

// A store on objects: repair is its garbage collection (spec/OBJECT.md 4.5, 7). The objects and unfinished
// uploads of transactions proven dead are deleted; one with neither commit nor abort is kept and listed. Log
// objects are never touched. Then every committed step is verified as ckpt-verify does.
[[nodiscard]] CKPT_INLINE Result<int> repair_object_store_into(const std::string& url, const RepairOptions& options, RepairReport& out) {
  const bool dry_run = options.dry_run;
  StoreOptions store_options;
  store_options.open_objects = options.open_objects;
  auto opened = open_store(url, dry_run ? Access::read_only : Access::read_write, store_options);
  if (!opened.ok()) return opened.status();
  Store& store = **opened;
  RepairText text(out.text, options.on_text);
  json& doc = out.doc;
  doc["store"] = store.path();
  doc["object_store"] = true;
  doc["dry_run"] = dry_run;
  text.line(std::string(kRepairTool) + ": store " + store.path() + (dry_run ? " (dry run: nothing is changed)" : ""));
  auto cleanup = store.collect_garbage(dry_run);
  if (!cleanup.ok()) return cleanup.status();
  text.heading(dry_run ? "would remove (transactions proven dead):" : "removed (transactions proven dead):");
  if (cleanup->removed.empty() && cleanup->aborted_uploads.empty()) text.line("  nothing");
  for (const auto& key : cleanup->removed) text.line("  object " + key);
  for (const auto& u : cleanup->aborted_uploads) text.line("  unfinished upload " + u);
  if (!cleanup->kept.empty()) {
    text.heading("kept (no commit or abort object: in progress, or in doubt; never deleted):");
    for (const auto& k : cleanup->kept) text.line("  " + k);
  }
  doc["removed"] = cleanup->removed;
  doc["aborted_uploads"] = cleanup->aborted_uploads;
  doc["kept"] = cleanup->kept;
  VerifyPathsReport verified;
  CKPT_TRY(verify_open_store(store, VerifyPathsOptions{}, verified));
  text.heading(dry_run ? "every committed step, verified as it is:" : "every committed step, verified afterwards:");
  std::vector<std::string> damaged;
  for (const auto& step : verified.steps) {
    text.line("  " + step.label + ": " + (step.ok ? "ok" : "DAMAGED"));
    if (!step.ok) damaged.push_back(step.dir);
  }
  if (verified.steps.empty()) text.line("  no committed step");
  for (const auto& st : verified.stores)
    for (const auto& p : st.problems) text.line("  problem: " + p.message);
  for (const auto& st : verified.stores)
    for (const auto& n : st.notes) text.line("  note: " + n);
  doc["verify"] = verify_json(verified);
  const bool pending = dry_run && (!cleanup->removed.empty() || !cleanup->aborted_uploads.empty());
  const int verify_code = exit_code(verified);
  const int code = std::max(verify_code, pending ? static_cast<int>(kIntegrity) : static_cast<int>(kOk));
  std::string verdict;
  if (verify_code == kUsage) verdict = "some steps could not be checked (see above)";
  else if (verify_code == kIntegrity) verdict = "DAMAGE REMAINS: a log object or a committed step is damaged (repair deletes only dead transactions' objects)";
  else if (pending) verdict = "repairs needed (dry run: nothing was changed)";
  else verdict = dry_run ? "consistent: nothing to repair" : "consistent";
  doc["damaged"] = damaged;
  doc["consistent"] = code == kOk;
  doc["result"] = verdict;
  doc["exit"] = code;
  text.heading("result: " + verdict);
  return code;
}

// Every repair document names its report, its subject and its exit status (spec/REPORTS.md 6).
inline void conclude_repair(RepairReport& out, const char* kind, int code) {
  out.kind = kind;
  out.exit_code = code;
  out.doc["report"] = "repair";
  out.doc["subject"] = kind;
  out.doc["exit_code"] = code;
}

}  // namespace detail

CKPT_INLINE Result<RepairReport> repair_path(FsRef fs, const std::string& given, const RepairOptions& options) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  RepairReport out;
  out.doc = json::object();
  if (object::is_object_url(path)) {
    if (options.purge)
      return make_error(Code::invalid_argument, "--purge applies to a store directory's quarantine/; a store on objects has none");
    CKPT_ASSIGN_OR_RETURN(const int code, detail::repair_object_store_into(path, options, out));
    detail::conclude_repair(out, "object store", code);
    return out;
  }
  CKPT_ASSIGN_OR_RETURN(const PathKind kind, classify_path(fs, path));
  switch (kind) {
    case PathKind::file:
      return make_error(Code::invalid_argument, path + ": not a directory; ckpt-repair takes a store directory (ckpt-verify checks single files)");
    case PathKind::step_dir:
      return make_error(Code::invalid_argument, path + ": a step directory; run ckpt-repair on the store that holds it");
    case PathKind::other_dir: return not_a_store_error(path, kind);
    case PathKind::memory_root:
    case PathKind::rank_dir: {
      if (options.purge)
        return make_error(Code::invalid_argument,
                          path + ": --purge applies to one store; run ckpt-repair --purge STORE on the store whose quarantine/ is to go");
      CKPT_ASSIGN_OR_RETURN(const int code, detail::repair_memory_root_into(fs, path, options, out));
      detail::conclude_repair(out, "memory root", code);
      return out;
    }
    default: break;
  }
  if (options.purge && options.dry_run) return make_error(Code::invalid_argument, "--purge and --dry-run exclude each other");
  detail::StoreRepairRun run(fs, path, options, out);
  const int code = run.run(kind);
  detail::conclude_repair(out, "store", code);
  return out;
}

}  // namespace ckpt::report
