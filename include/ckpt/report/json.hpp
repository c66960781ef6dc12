// ckpt: the JSON form of every report the library makes (shard indexes, verify reports, journals,
// steps, memory roots, identities, foreign checkpoints). The tools' --json and the Python package's
// report objects are both this, so the two front ends cannot disagree (spec/REPORTS.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../interop/foreign.hpp"
#include "../identity/identity.hpp"
#include "../shard/index.hpp"
#include "../store/journal.hpp"
#include "../store/manifest.hpp"
#include "../store/path_kind.hpp"
#include "../interop/safetensors.hpp"
#include "../shard/shard_reader.hpp"
#include "../store/store.hpp"
#include "../tiers/memory_root.hpp"
#include "../shard/verify.hpp"
#include "exit.hpp"

namespace ckpt::report {

using nlohmann::json;

// Lower-case hex of raw bytes; at most max_bytes are shown.
[[nodiscard]] inline std::string hex_bytes(std::string_view s, std::size_t max_bytes = std::string_view::npos) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  const std::size_t n = std::min(s.size(), max_bytes);
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Text safe for one terminal line: control bytes become \xNN, so a hostile name cannot break a table.
[[nodiscard]] inline std::string printable(std::string_view s) { return detail::escape_controls(s); }

// --- Shard index (ckpt-inspect) ----------------------------------------------------------------

[[nodiscard]] inline json metadata_value_json(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  if (v.is_string()) return v.as_string();
  if (v.is_bytes()) return hex_bytes(v.as_bytes());
  // JSON has no NaN or infinity: those are spelled as strings so the document stays valid.
  const double d = v.as_float();
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

[[nodiscard]] inline json shape_json(const Shape& s) {
  json a = json::array();
  for (const auto d : s) a.push_back(d);
  return a;
}

// Everything the superblock, footer and index say about a shard; chunks only when asked (they can be millions).
[[nodiscard]] inline json shard_json(const ShardReader& reader, bool with_chunks) {
  const Superblock& sb = reader.superblock();
  const Index& index = reader.index();
  std::uint64_t data_bytes = 0;
  for (const auto& p : index.pieces) data_bytes += p.data_length;
  json doc;
  doc["path"] = reader.path();
  doc["format_version"] = sb.version;
  doc["uuid"] = uuid_string(sb.uuid);
  doc["alignment"] = sb.alignment();
  doc["chunk_size"] = sb.chunk_size();
  doc["hash"] = "xxh3-64";
  doc["file_size"] = reader.file_size();
  doc["data_offset"] = sb.data_offset;
  doc["data_bytes"] = data_bytes;
  doc["index_offset"] = reader.footer().index_offset;
  doc["index_bytes"] = reader.footer().index_length;
  doc["index_digest"] = hex64(reader.footer().index_digest);
  doc["tensor_count"] = index.tensors.size();
  doc["piece_count"] = index.pieces.size();
  doc["chunk_count"] = index.chunks.size();
  doc["metadata_count"] = index.metadata.size();
  json tensors = json::array();
  for (const auto& t : index.tensors) {
    std::uint64_t bytes = 0;
    for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) bytes += index.pieces[k].data_length;
    std::uint64_t global_bytes = 0;
    (void)shape_bytes(t.shape, t.dtype, global_bytes);  // cannot fail: the decoder checked it
    json pieces = json::array();
    for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) {
      const auto& p = index.pieces[k];
      pieces.push_back({{"piece", k - t.piece_first},
                        {"offsets", shape_json(p.offsets)},
                        {"shape", shape_json(p.shape)},
                        {"data_offset", p.data_offset},
                        {"bytes", p.data_length},
                        {"chunk_count", p.chunk_count}});
    }
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(format::dtype_info(t.dtype)->name)},
                       {"shape", shape_json(t.shape)},
                       {"piece_count", t.piece_count},
                       {"bytes", bytes},
                       {"global_bytes", global_bytes},
                       {"pieces", std::move(pieces)}});
  }
  doc["tensors"] = std::move(tensors);
  json metadata = json::array();
  for (const auto& m : index.metadata) {
    json e = {{"key", m.key}, {"type", value_type_name(m.value.type())}, {"value", metadata_value_json(m.value)}};
    if (m.value.is_bytes() || m.value.is_string())
      e["length"] = m.value.is_bytes() ? m.value.as_bytes().size() : m.value.as_string().size();
    metadata.push_back(std::move(e));
  }
  doc["metadata"] = std::move(metadata);
  if (with_chunks) {
    json chunks = json::array();
    for (const auto& t : index.tensors) {
      for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) {
        const auto& p = index.pieces[k];
        for (std::uint64_t c = 0; c < p.chunk_count; ++c) {
          const auto& rec = index.chunks[p.chunk_first + c];
          chunks.push_back({{"tensor", t.name},
                            {"piece", k - t.piece_first},
                            {"chunk", c},
                            {"offset", rec.offset},
                            {"length", rec.length},
                            {"digest", hex64(rec.digest)}});
        }
      }
    }
    doc["chunks"] = std::move(chunks);
  }
  return doc;
}

// --- Verify reports (ckpt-verify) --------------------------------------------------------------

[[nodiscard]] inline json problem_json(const Problem& p) {
  json j = {{"code", code_name(p.code)}, {"region", p.region}, {"offset", p.offset}, {"length", p.length}};
  j["tensor"] = p.tensor.empty() ? json(nullptr) : json(p.tensor);
  j["piece"] = p.piece < 0 ? json(nullptr) : json(p.piece);
  j["chunk"] = p.chunk < 0 ? json(nullptr) : json(p.chunk);
  j["expected"] = p.expected.empty() ? json(nullptr) : json(p.expected);
  j["found"] = p.found.empty() ? json(nullptr) : json(p.found);
  if (!p.file.empty()) j["file"] = p.file;
  j["message"] = p.message;
  return j;
}

// The outcome of checking one path: a report (intact or damaged), or an error that stopped the check.
struct FileOutcome {
  std::string path;
  bool has_report = false;
  VerifyReport report;
  Status error;         // set when has_report is false
  double seconds = 0;   // wall time, for the JUnit file only
  std::string engine;   // "cpu" or "gpu"
  // The file vanished because its step was retired while being read (the error says not_found): not damage.
  bool retired = false;
};

// Exit status of one outcome: 0 intact, 1 damage, 2 error.
[[nodiscard]] inline int outcome_exit(const FileOutcome& o) noexcept {
  if (o.retired) return 0;
  if (!o.has_report) return exit_for(o.error.code());
  int worst = 0;
  for (const auto& p : o.report.problems) worst = std::max(worst, exit_for(p.code));
  return worst;
}

// "intact", "damaged", "error" (could not be checked) or "retired" (removed with its retired step).
[[nodiscard]] inline const char* outcome_status(const FileOutcome& o) noexcept {
  if (o.retired) return "retired";
  if (!o.has_report) return "error";
  return o.report.ok() ? "intact" : "damaged";
}

[[nodiscard]] inline json outcome_json(const FileOutcome& o) {
  json j = {{"path", o.path}, {"status", outcome_status(o)}, {"ok", o.retired || (o.has_report && o.report.ok())}};
  if (o.retired) {
    j["message"] = o.error.message();
    return j;
  }
  if (!o.has_report) {
    j["error"] = {{"code", code_name(o.error.code())}, {"message", o.error.message()}};
    return j;
  }
  const VerifyReport& r = o.report;
  j["engine"] = o.engine;
  j["file_size"] = r.file_size;
  j["chunks_total"] = r.chunks_total;
  j["chunks_checked"] = r.chunks_checked;
  j["bytes_checked"] = r.bytes_checked;
  json problems = json::array();
  for (const auto& p : r.problems) problems.push_back(problem_json(p));
  j["problems"] = std::move(problems);
  return j;
}

[[nodiscard]] inline json outcomes_json(const std::vector<FileOutcome>& outcomes) {
  json files = json::array();
  std::size_t intact = 0, damaged = 0, errors = 0, problems = 0, retired = 0;
  for (const auto& o : outcomes) {
    files.push_back(outcome_json(o));
    if (o.retired) ++retired;
    else if (!o.has_report) ++errors;
    else if (o.report.ok()) ++intact;
    else ++damaged;
    if (o.has_report) problems += o.report.problems.size();
  }
  return {{"ok", damaged == 0 && errors == 0},
          {"files", std::move(files)},
          {"summary", {{"files", outcomes.size()}, {"intact", intact}, {"damaged", damaged}, {"errors", errors},
                       {"retired", retired}, {"problems", problems}}}};
}

// One line per problem: file, code, region, byte range, then tensor/piece/chunk and digests when known.
[[nodiscard]] inline std::string problem_line(const std::string& path, const Problem& p) {
  std::string line = printable(path) + ": " + code_name(p.code) + " " + p.region + " bytes [" + std::to_string(p.offset) +
                     ", " + std::to_string(p.offset + p.length) + ")";
  if (!p.tensor.empty()) line += " tensor '" + printable(p.tensor) + "'";
  if (p.piece >= 0) line += " piece " + std::to_string(p.piece);
  if (p.chunk >= 0) line += " chunk " + std::to_string(p.chunk);
  if (!p.expected.empty() || !p.found.empty()) line += ": expected " + p.expected + ", found " + p.found;
  // Structural problems carry their explanation only in the message; a digest mismatch is said in full above.
  if (p.region != "data" || p.expected.empty()) {
    std::string detail = p.message;
    if (detail.rfind(path + ": ", 0) == 0) detail = detail.substr(path.size() + 2);
    line += " (" + printable(detail) + ")";
  }
  return line;
}

// --- JUnit XML -----------------------------------------------------------------------------------

// Escapes text for XML 1.0 attributes and content: markup characters become entities, control
// characters and invalid UTF-8 become U+FFFD (XML 1.0 cannot carry them at all).
[[nodiscard]] inline std::string xml_escape(std::string_view s) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        case '\t': out += "&#9;"; break;
        case '\n': out += "&#10;"; break;
        case '\r': out += "&#13;"; break;
        default:
          if (c < 0x20 || c == 0x7F) out += kReplacement;
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const std::size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || n > s.size() - i || !valid_utf8(s.substr(i, n))) {
      out += kReplacement;
      ++i;
      continue;
    }
    // U+FFFE and U+FFFF are not XML characters either.
    if (n == 3 && c == 0xEF && static_cast<unsigned char>(s[i + 1]) == 0xBF &&
        static_cast<unsigned char>(s[i + 2]) >= 0xBE) {
      out += kReplacement;
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

// One testsuite, one testcase per file, a <failure> per problem, an <error> for a file that could not be
// read, and <skipped> for a file whose step was retired while being read.
[[nodiscard]] inline std::string junit_xml(const std::vector<FileOutcome>& outcomes, const std::string& suite) {
  std::size_t failures = 0, errors = 0, skipped = 0;
  double total_seconds = 0;
  for (const auto& o : outcomes) {
    if (o.retired) ++skipped;
    else if (!o.has_report) ++errors;
    else if (!o.report.ok()) ++failures;
    total_seconds += o.seconds;
  }
  auto seconds = [](double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", s);
    return std::string(buf);
  };
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites name=\"" + xml_escape(suite) + "\" tests=\"" + std::to_string(outcomes.size()) + "\" failures=\"" +
       std::to_string(failures) + "\" errors=\"" + std::to_string(errors) + "\" time=\"" + seconds(total_seconds) + "\">\n";
  x += "  <testsuite name=\"" + xml_escape(suite) + "\" tests=\"" + std::to_string(outcomes.size()) + "\" failures=\"" +
       std::to_string(failures) + "\" errors=\"" + std::to_string(errors) + "\" skipped=\"" + std::to_string(skipped) + "\" time=\"" +
       seconds(total_seconds) + "\">\n";
  for (const auto& o : outcomes) {
    x += "    <testcase classname=\"" + xml_escape(suite) + "\" name=\"" + xml_escape(o.path) + "\" time=\"" +
         seconds(o.seconds) + "\"";
    if (o.has_report && o.report.ok()) {
      x += "/>\n";
      continue;
    }
    x += ">\n";
    if (o.retired) {
      x += "      <skipped message=\"retired while being read: " + xml_escape(o.error.message()) + "\"/>\n";
    } else if (!o.has_report) {
      x += "      <error type=\"" + std::string(code_name(o.error.code())) + "\" message=\"" +
           xml_escape(o.error.message()) + "\"/>\n";
    } else {
      for (const auto& p : o.report.problems) {
        x += "      <failure type=\"" + std::string(code_name(p.code)) + "\" message=\"" + xml_escape(p.message) +
             "\">" + xml_escape(problem_line(o.path, p)) + "</failure>\n";
      }
    }
    x += "    </testcase>\n";
  }
  x += "  </testsuite>\n</testsuites>\n";
  return x;
}

// --- Stores, steps and journals (spec/JOURNAL.md) ----------------------------------------------

// A typed value as {"type", "value"}: the same spelling shard metadata gets.
[[nodiscard]] inline json value_json(const Value& v) {
  return {{"type", value_type_name(v.type())}, {"value", metadata_value_json(v)}};
}

[[nodiscard]] inline json training_state_json(const TrainingState& s) {
  json values = json::object();
  for (const auto& [key, value] : s.values) values[key] = value_json(value);
  return {{"step", s.step},
          {"rng_bytes", s.rng.size()},
          {"rng", hex_bytes(s.rng, 64)},
          {"data", {{"epoch", s.data.epoch}, {"offset", s.data.offset}, {"state_bytes", s.data.state.size()}}},
          {"optimizer_tensors", s.optimizer_tensors},
          {"values", std::move(values)}};
}

[[nodiscard]] inline json step_info_json(const StepInfo& s) {
  json files = json::array();
  for (const auto& f : s.files) files.push_back({{"rank", f.rank}, {"name", f.name}});
  return {{"step", s.step},           {"txn", s.txn},
          {"dir", s.dir},             {"world_size", s.world_size},
          {"files", std::move(files)}, {"manifest_size", s.manifest_size},
          {"manifest_digest", hex64(s.manifest_digest)}, {"commit_offset", s.commit_offset}};
}

[[nodiscard]] inline json manifest_shards_json(const Manifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"rank", s.rank},
                      {"name", s.name},
                      {"file_size", s.file_size},
                      {"uuid", uuid_string(s.uuid)},
                      {"index_digest", hex64(s.index_digest)},
                      {"data_bytes", s.data_bytes},
                      {"tensor_count", s.tensor_count},
                      {"chunk_count", s.chunk_count}});
  return shards;
}

[[nodiscard]] inline json damage_json(const JournalDamage& d) {
  json unapplied = json::array();
  for (const auto& r : d.unapplied) unapplied.push_back(r.describe());
  return {{"offset", d.offset}, {"length", d.length}, {"bad_offset", d.bad_offset}, {"reason", d.reason},
          {"clean_tear", d.clean_tear}, {"unapplied", std::move(unapplied)}};
}

[[nodiscard]] inline json journal_json(const JournalScan& j) {
  json doc = {{"path", j.path},          {"file_size", j.file_size}, {"end", j.end},
              {"has_header", j.has_header}, {"groups", j.groups},      {"records", j.records.size()}};
  doc["store_uuid"] = j.has_header ? json(uuid_string(j.header.store_uuid)) : json(nullptr);
  doc["torn_tail"] = j.torn_tail ? damage_json(*j.torn_tail) : json(nullptr);
  json corruption = json::array();
  for (const auto& d : j.corruption) corruption.push_back(damage_json(d));
  doc["corruption"] = std::move(corruption);
  return doc;
}

[[nodiscard]] inline json transactions_json(const std::vector<TxnInfo>& txns) {
  json out = json::array();
  for (const auto& t : txns)
    out.push_back({{"txn", t.txn}, {"step", t.step}, {"state", txn_state_name(t.state)}, {"dir", t.dir()}});
  return out;
}

// One line about the journal: size, groups, and what is wrong with it.
[[nodiscard]] inline std::string journal_line(const JournalScan& j) {
  std::string s = std::to_string(j.file_size) + " bytes, " + std::to_string(j.groups) + " complete groups, " +
                  std::to_string(j.records.size()) + " records";
  if (j.torn_tail && j.torn_tail->clean_tear)
    s += "; torn tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (" + std::to_string(j.torn_tail->length) + " bytes, left by a crash during an append)";
  else if (j.torn_tail)
    s += "; DAMAGED tail [" + std::to_string(j.torn_tail->offset) + ", " + std::to_string(j.torn_tail->offset + j.torn_tail->length) +
         ") (not a torn append: " + j.torn_tail->reason + ")";
  if (!j.has_header) s += "; no valid HEADER at offset 0";
  for (const auto& d : j.corruption)
    s += "; CORRUPT bytes [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.length) + "): " + d.reason;
  return s;
}

// --- Memory roots (spec/TIERS.md 2, 5) -----------------------------------------------------------

[[nodiscard]] inline json digest_json(const Digest128& d) { return d == Digest128{} ? json(nullptr) : json(d.hex()); }

[[nodiscard]] inline json root_problem_json(const tiers::RootProblem& p) {
  json j = problem_json(p);
  j["rank_dir"] = p.rank_dir.empty() ? json(nullptr) : json(p.rank_dir);
  j["store"] = p.store;
  j["step"] = p.step ? json(*p.step) : json(nullptr);
  j["shard"] = p.shard ? json(*p.shard) : json(nullptr);
  j["txn"] = p.txn;
  j["message"] = p.message;
  return j;
}

[[nodiscard]] inline json root_problems_json(const std::vector<tiers::RootProblem>& problems) {
  json out = json::array();
  for (const auto& p : problems) out.push_back(root_problem_json(p));
  return out;
}

[[nodiscard]] inline json copy_json(const tiers::ShardCopy& c) {
  json j = {{"rank_dir", "rank-" + std::to_string(c.rank_dir)},
            {"store", c.store},
            {"where", c.where},
            {"own", c.own},
            {"parity", c.parity},
            {"step", c.step},
            {"shard", c.shard},
            {"txn", c.info.txn},
            {"dir", c.info.dir},
            {"digest", digest_json(c.digest)},
            {"expected", digest_json(c.expected)},
            {"recorded", c.recorded},
            {"matches", c.matches()},
            {"set_aside", c.set_aside},
            {"error", c.error.empty() ? json(nullptr) : json(c.error)}};
  j["verified"] = c.verified ? json(*c.verified) : json(nullptr);
  return j;
}

// An SDC record's finding (spec/TIERS.md 11.2), or the reason it does not decode.
[[nodiscard]] inline json sdc_json(const tiers::TierRecord& r) {
  auto f = tiers::decode_sdc(r, "");
  if (!f.ok()) return json{{"error", f.status().message()}};
  json holders = json::array();
  for (const auto& [rank, digest] : f->digests) holders.push_back({{"rank", rank}, {"digest", hex64(digest)}});
  return {{"tensor", f->tensor},
          {"chunk", f->chunk},
          {"chunks_differing", f->chunks_differing},
          {"odd_rank", f->odd_rank == tiers::SdcFinding::kNoRank ? json(nullptr) : json(f->odd_rank)},
          {"holders", std::move(holders)}};
}

[[nodiscard]] inline json memory_step_json(const tiers::MemoryRoot& root, const tiers::MemoryStep& s, bool verified) {
  json shards = json::array();
  for (const auto& sh : s.shards) {
    json held = json::array();
    for (const auto i : sh.copies) held.push_back(copy_json(root.copies[i]));
    json j = {{"shard", sh.shard}, {"digest", digest_json(sh.digest)}, {"copies", sh.matching}, {"held", std::move(held)}};
    if (verified) j["verified"] = sh.verified;
    shards.push_back(std::move(j));
  }
  json events = json::array();
  for (const auto& e : s.events)
    events.push_back({{"rank_dir", "rank-" + std::to_string(e.rank_dir)},
                      {"event", tiers::tier_event_name(e.record.event)},
                      {"shard", e.record.shard},
                      {"txn", e.record.txn},
                      {"copies", e.record.copies},
                      {"detail", e.record.event == tiers::TierEvent::captured ? json(nullptr)
                                 : e.record.event == tiers::TierEvent::sdc     ? sdc_json(e.record)
                                                                               : json(e.record.detail)},
                      {"text", e.record.describe()}});
  return {{"step", s.step},
          {"digest", digest_json(s.digest)},
          {"world", s.world == 0 ? json(nullptr) : json(s.world)},
          {"captured", s.captured},
          {"replicated", s.replicated},
          {"replicated_copies", s.replicated_copies},
          {"persisted", s.persisted},
          {"load_failed", s.load_failed},
          {"sdc", s.sdc},
          {"resumed", s.resumed},
          {"set_aside", s.set_aside},
          {"shards_here", s.shards_here()},
          {"fewest_copies", s.fewest_copies()},
          {"persistent",
           {{"state", tiers::persistent_state_name(s.persistent)},
            {"txn", s.persistent_txn == 0 ? json(nullptr) : json(s.persistent_txn)},
            {"detail", s.persistent_detail.empty() ? json(nullptr) : json(s.persistent_detail)}}},
          {"shards", std::move(shards)},
          {"events", std::move(events)}};
}

// The whole description: rank directories and their logs, steps, copies, problems and notes.
[[nodiscard]] inline json memory_root_json(const tiers::MemoryRoot& root, bool verified = false) {
  json dirs = json::array();
  for (const auto& d : root.rank_dirs)
    dirs.push_back({{"rank", d.rank},
                    {"path", d.path},
                    {"stores", d.stores},
                    {"tier_log",
                     {{"present", d.log_present},
                      {"records", d.records.size()},
                      {"torn_tail", d.torn_tail ? damage_json(*d.torn_tail) : json(nullptr)},
                      {"error", d.log_error.ok() ? json(nullptr)
                                                 : json({{"code", code_name(d.log_error.code())}, {"message", d.log_error.message()}})}}}});
  json steps = json::array();
  for (const auto& s : root.steps) steps.push_back(memory_step_json(root, s, verified));
  json copies = json::array();
  for (const auto& c : root.copies) copies.push_back(copy_json(c));
  return {{"path", root.path},
          {"memory_root", root.root},
          {"kind", path_kind_name(root.kind)},
          {"persistent", root.persistent.empty() ? json(nullptr) : json(root.persistent)},
          {"ok", root.ok()},
          {"rank_dirs", std::move(dirs)},
          {"steps", std::move(steps)},
          {"copies", std::move(copies)},
          {"problems", root_problems_json(root.problems)},
          {"notes", root.notes}};
}

// --- Identities and foreign checkpoints (spec/IDENTITY.md, spec/FOREIGN.md) -----------------------

// Root, metadata digest and every tensor's digest: what a pin file records (spec/IDENTITY.md 5.1).
[[nodiscard]] inline json identity_json(const Content& c) {
  json tensors = json::array();
  for (const auto& t : c.tensors)
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", shape_json(t.shape)}, {"bytes", t.bytes()}, {"digest", t.digest.hex()}});
  return {{"root", c.root.hex()}, {"metadata_digest", c.metadata_digest.hex()}, {"tensors", std::move(tensors)}};
}

[[nodiscard]] inline json foreign_json(const ForeignCheckpoint& c, const std::optional<Digest128>& root, const std::string& sidecar) {
  json files = json::array();
  for (const auto& f : c.files) files.push_back({{"name", f.name}, {"size", f.size}, {"present", f.present}});
  json tensors = json::array();
  for (const auto& t : c.tensors) {
    json pieces = json::array();
    std::uint64_t bytes = 0;
    for (const auto& p : t.pieces) {
      bytes += p.length;
      pieces.push_back({{"file", c.files.at(p.file).name},
                        {"offset", p.offset},
                        {"length", p.length},
                        {"offsets", shape_json(p.offsets)},
                        {"shape", shape_json(p.shape)}});
    }
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", shape_json(t.shape)}, {"bytes", bytes}, {"pieces", std::move(pieces)}});
  }
  json metadata = json::object();
  for (const auto& [k, v] : c.metadata) metadata[k] = valid_utf8(v) ? json(v) : json(hex_bytes(v));
  json problems = json::array();
  for (const auto& p : c.problems) problems.push_back(problem_json(p));
  return {{"path", c.path},
          {"kind", "foreign"},
          {"format", foreign_format_name(c.format)},
          {"dir", c.dir},
          {"files", std::move(files)},
          {"tensor_count", c.tensors.size()},
          {"data_bytes", c.data_bytes()},
          {"tensors", std::move(tensors)},
          {"metadata", std::move(metadata)},
          {"root_digest", root ? json(root->hex()) : json(nullptr)},
          {"sidecar", sidecar.empty() ? json(nullptr) : json(sidecar)},
          {"problems", std::move(problems)}};
}

}  // namespace ckpt::report
