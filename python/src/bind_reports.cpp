// ckpt._ckpt, reports (spec/REPORTS.md; spec/PYTHON.md 2.4): the library decides, Python presents. Each call
// returns (document, text): the document the tool's --json prints, as text for json.loads, and the text the
// tool prints without --json (ckpt/report/text.hpp). Only input that cannot be checked at all raises (a
// missing path, misuse, an I/O error); damage is the report's. Paths reach a store on objects through
// object_opener(), inside the library.
#include "bind_common.hpp"

#include <ckpt/core/sidecar_format.hpp>
#include <ckpt/report/diff.hpp>
#include <ckpt/report/exit.hpp>
#include <ckpt/report/inspect.hpp>
#include <ckpt/report/pins.hpp>
#include <ckpt/report/repair.hpp>
#include <ckpt/report/text.hpp>
#include <ckpt/report/verify.hpp>

namespace ckpt_bind {
namespace {

using namespace nb::literals;

// The text as bytes: a message may quote bytes of a damaged file that are no UTF-8 (report.py decodes with
// replacement, as the document's dump does).
nb::tuple report_pair(const nlohmann::json& doc, const std::string& text) {
  const std::string document = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nb::make_tuple(document, to_bytes(text));
}

nb::tuple verify_report(const std::string& path, std::optional<std::uint64_t> step, bool latest, std::optional<std::string> expect,
                        std::optional<std::string> expect_file, const std::string& persistent, unsigned threads) {
  ckpt::report::VerifyPathsOptions options;
  options.selection.step = step;
  options.selection.latest = latest;
  options.persistent = persistent;
  options.verify.threads = threads;
  options.open_objects = object_opener();
  if (expect) options.pins.push_back(take(ckpt::report::pin_from_digest(*expect)));
  if (expect_file) {
    auto pins = take(ckpt::report::read_pins(*expect_file));
    for (auto& p : pins) options.pins.push_back(std::move(p));
    options.pin_file = *expect_file;
  }
  const ckpt::report::VerifyPathsReport r = without_gil([&] { return ckpt::report::verify_paths(posix_fs(), {path}, options); });
  // Misuse raises, as the tool exits with its usage code; what the checks found is the report's.
  for (const auto& e : r.errors)
    if (ckpt::report::exit_for(e.status.code()) == ckpt::report::kUsage) check(e.status);
  for (const auto k : r.shard_files)
    if (!r.files[k].has_report && ckpt::report::exit_for(r.files[k].error.code()) == ckpt::report::kUsage) check(r.files[k].error);
  return report_pair(ckpt::report::verify_json(r), ckpt::report::verify_text(r));
}

ckpt::report::Inspection inspection_of(const std::string& path, const ckpt::report::InspectOptions& options) {
  return take(without_gil([&] { return ckpt::report::inspect_path(posix_fs(), path, options); }));
}

nb::tuple inspect_report(const std::string& path, std::optional<std::uint64_t> step, bool latest, bool chunks,
                         const std::string& persistent) {
  ckpt::report::InspectOptions options;
  options.selection.step = step;
  options.selection.latest = latest;
  options.chunks = chunks;
  options.persistent = persistent;
  options.open_objects = object_opener();
  const ckpt::report::Inspection inspection = inspection_of(path, options);
  return report_pair(inspection.doc, ckpt::report::inspect_text(inspection));
}

std::string root_digest_of(const std::string& path, std::optional<std::uint64_t> step) {
  ckpt::report::InspectOptions options;
  options.selection.step = step;
  options.open_objects = object_opener();
  return take(ckpt::report::root_digest(inspection_of(path, options)));
}

nb::tuple diff_report(const std::string& a, const std::string& b, std::optional<std::uint64_t> step_a,
                      std::optional<std::uint64_t> step_b, const std::vector<std::string>& tensors) {
  ckpt::report::DiffOptions options;
  options.step_a = step_a;
  options.step_b = step_b;
  options.tensors = tensors;
  options.open_objects = object_opener();
  const ckpt::report::DiffReport d = take(without_gil([&] { return ckpt::report::diff_paths(posix_fs(), a, b, options); }));
  return report_pair(d.doc, ckpt::report::diff_text(d));
}

nb::tuple write_sidecar_report(const std::string& path, std::uint64_t chunk_size) {
  int log2 = -1;
  for (std::uint32_t k = ckpt::sidecar::kMinChunkSizeLog2; k <= ckpt::sidecar::kMaxChunkSizeLog2; ++k)
    if (chunk_size == (std::uint64_t{1} << k)) log2 = static_cast<int>(k);
  if (log2 < 0) fail("chunk_size: a power of two from 4 KiB to 1 GiB");
  const nlohmann::json doc = take(without_gil([&] { return ckpt::report::write_sidecar_for(posix_fs(), path, static_cast<std::uint32_t>(log2)); }));
  return report_pair(doc, ckpt::report::sidecar_text(path, doc));
}

// ckpt-repair: raises where the tool exits with an error message before repairing anything; a failure part
// way through a store's repair is the report's ("error"), as damage is.
nb::tuple repair_report(const std::string& path, bool dry_run, bool purge) {
  ckpt::report::RepairOptions options;
  options.dry_run = dry_run;
  options.purge = purge;
  options.open_objects = object_opener();
  const ckpt::report::RepairReport r = take(without_gil([&] { return ckpt::report::repair_path(posix_fs(), path, options); }));
  return report_pair(r.doc, ckpt::report::repair_text(r));
}

}  // namespace

void bind_reports(nb::module_& m) {
  m.def("verify_report", &verify_report, "path"_a, "step"_a = nb::none(), "latest"_a = false, "expect"_a = nb::none(),
        "expect_file"_a = nb::none(), "persistent"_a = "", "threads"_a = 1u);
  m.def("inspect_report", &inspect_report, "path"_a, "step"_a = nb::none(), "latest"_a = false, "chunks"_a = false, "persistent"_a = "");
  m.def("root_digest", &root_digest_of, "path"_a, "step"_a = nb::none());
  m.def("diff_report", &diff_report, "a"_a, "b"_a, "step_a"_a = nb::none(), "step_b"_a = nb::none(),
        "tensors"_a = std::vector<std::string>{});
  m.def("write_sidecar_report", &write_sidecar_report, "path"_a, "chunk_size"_a = std::uint64_t{1} << 20);
  m.def("repair_report", &repair_report, "path"_a, "dry_run"_a = false, "purge"_a = false);
}

}  // namespace ckpt_bind
