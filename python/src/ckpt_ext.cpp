// ckpt._ckpt: the Python extension over the C++ library (spec/PYTHON.md). It binds the library's own
// types and calls; every policy (what is written, checked, committed) stays in the headers. Tensors
// cross as C-contiguous uint8 buffers: the Python layer (ckpt/_tensors.py) views numpy and torch
// tensors of any dtype as bytes, so bfloat16 and fp8 need nothing from DLPack. The GIL is released
// around every call that does I/O or hashing; the buffers stay referenced by the call meanwhile.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <ckpt/ckpt.hpp>
#include <ckpt/store/object_checkpoint.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/planner.hpp>
#include <ckpt/report/diff.hpp>
#include <ckpt/report/inspect.hpp>
#include <ckpt/report/repair.hpp>
#include <ckpt/report/text.hpp>
#include <ckpt/report/verify.hpp>
#include <ckpt/tiers/tiered.hpp>
#if CKPT_HAVE_S3
#include <ckpt/io/object/s3_client.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;
using ckpt::Code;
using ckpt::Status;

namespace {

// One PosixFs for every call: it holds no state, and FsRef refers to it.
ckpt::PosixFs& posix_fs() {
  static ckpt::PosixFs fs;
  return fs;
}

// How an "s3://bucket/prefix" path is reached (spec/OBJECT.md 2): the S3 client where the extension was
// built with it (python/CMakeLists.txt), else none, and such a path is Code::unsupported.
ckpt::object::ObjectOpener object_opener() {
#if CKPT_HAVE_S3
  return [](const std::string& url) { return ckpt::object::open_s3_url(url); };
#else
  return {};
#endif
}

// A Status that failed, carried to the exception translator (ckpt/errors.py makes the Python exception).
struct StatusError {
  Status status;
};

void check(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <class T>
T take(ckpt::Result<T>&& r) {
  if (!r.ok()) throw StatusError{std::move(r).take_status()};
  return std::move(r).value();
}

// f() with the GIL released, for a call that does I/O or hashing and touches no Python object.
template <class F>
decltype(auto) without_gil(F&& f) {
  nb::gil_scoped_release released;
  return f();
}

nb::dict problem_dict(const ckpt::Problem& p) {
  nb::dict d;
  d["code"] = ckpt::code_name(p.code);
  d["region"] = p.region;
  d["file"] = p.file;
  d["tensor"] = p.tensor;
  d["piece"] = p.piece;
  d["chunk"] = p.chunk;
  d["offset"] = p.offset;
  d["length"] = p.length;
  d["expected"] = p.expected;
  d["found"] = p.found;
  d["message"] = p.message;
  return d;
}

using Bytes1D = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out1D = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

ckpt::DType dtype_of(const std::string& name) {
  const auto* info = ckpt::format::dtype_by_name(name);
  if (info == nullptr) throw StatusError{ckpt::make_error(Code::invalid_argument, "unknown dtype '" + name + "'")};
  return info->dtype;
}
std::string dtype_name(ckpt::DType d) { return std::string(ckpt::format::dtype_info(d)->name); }

// Python values <-> typed values (spec/FORMAT.md 5.6): int, float, bool, str, bytes.
ckpt::Value to_value(const nb::handle& h, const std::string& key) {
  if (nb::isinstance<nb::bool_>(h)) return ckpt::Value(nb::cast<bool>(h));
  if (nb::isinstance<nb::int_>(h)) return ckpt::Value(nb::cast<std::int64_t>(h));
  if (nb::isinstance<nb::float_>(h)) return ckpt::Value(nb::cast<double>(h));
  if (nb::isinstance<nb::str>(h)) return ckpt::Value(nb::cast<std::string>(h));
  if (nb::isinstance<nb::bytes>(h)) {
    nb::bytes b = nb::borrow<nb::bytes>(h);
    return ckpt::Value(ckpt::Bytes{std::string(b.c_str(), b.size())});
  }
  throw StatusError{ckpt::make_error(Code::invalid_argument, "metadata '" + key + "': a value must be int, float, bool, str or bytes, not " +
                                                                 std::string(nb::type_name(h.type()).c_str()))};
}
nb::object from_value(const ckpt::Value& v) {
  if (v.is_int()) return nb::int_(v.as_int());
  if (v.is_float()) return nb::float_(v.as_float());
  if (v.is_bool()) return nb::bool_(v.as_bool());
  if (v.is_string()) return nb::str(v.as_string().c_str(), v.as_string().size());
  return nb::bytes(v.as_bytes().data(), v.as_bytes().size());
}

nb::dict state_dict(const ckpt::TrainingState& s) {
  nb::dict d;
  d["step"] = s.step;
  d["rng"] = nb::bytes(s.rng.data(), s.rng.size());
  d["data_epoch"] = s.data.epoch;
  d["data_offset"] = s.data.offset;
  d["data_state"] = nb::bytes(s.data.state.data(), s.data.state.size());
  d["optimizer_tensors"] = s.optimizer_tensors;
  nb::dict values;
  for (const auto& [k, v] : s.values) values[nb::str(k.c_str(), k.size())] = from_value(v);
  d["values"] = values;
  return d;
}
void set_state(ckpt::TrainingState& s, const nb::dict& d) {
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "rng") {
      nb::bytes b = nb::cast<nb::bytes>(v);
      s.rng.assign(b.c_str(), b.size());
    } else if (key == "data_epoch") {
      s.data.epoch = nb::cast<std::uint64_t>(v);
    } else if (key == "data_offset") {
      s.data.offset = nb::cast<std::uint64_t>(v);
    } else if (key == "data_state") {
      nb::bytes b = nb::cast<nb::bytes>(v);
      s.data.state.assign(b.c_str(), b.size());
    } else if (key == "values") {
      for (auto [vk, vv] : nb::cast<nb::dict>(v)) {
        const std::string name = nb::cast<std::string>(vk);
        s.values[name] = to_value(vv, name);
      }
    } else if (key != "step" && key != "optimizer_tensors") {
      throw StatusError{ckpt::make_error(Code::invalid_argument, "training state has no field '" + key + "'")};
    }
  }
}

nb::dict step_dict(const ckpt::StepInfo& s) {
  nb::dict d;
  d["step"] = s.step;
  d["txn"] = s.txn;
  d["world_size"] = s.world_size;
  d["dir"] = s.dir;
  return d;
}

// --- Reports: the library decides, Python presents (ckpt/report/, spec/REPORTS.md) ----------------
// Each returns (document, text): the document the tool's --json prints, as text for json.loads, and the
// text the tool prints without --json (ckpt/report/text.hpp). Only input that cannot be checked at all
// raises (a missing path, misuse, an I/O error); damage is the report's.

std::string report_text(const nlohmann::json& doc) { return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The text as bytes: a message may quote bytes of a damaged file that are no UTF-8 (report.py decodes with
// replacement, as the document's dump does).
nb::tuple report_pair(const nlohmann::json& doc, const std::string& text) {
  return nb::make_tuple(report_text(doc), nb::bytes(text.data(), text.size()));
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
  for (const auto& e : r.errors)
    if (ckpt::report::exit_for(e.status.code()) == ckpt::report::kUsage) check(e.status);
  for (const auto k : r.shard_files)
    if (!r.files[k].has_report && ckpt::report::exit_for(r.files[k].error.code()) == ckpt::report::kUsage) check(r.files[k].error);
  return report_pair(ckpt::report::verify_json(r), ckpt::report::verify_text(r));
}

nb::tuple inspect_report(const std::string& path, std::optional<std::uint64_t> step, bool latest, bool chunks,
                         const std::string& persistent) {
  ckpt::report::InspectOptions options;
  options.selection.step = step;
  options.selection.latest = latest;
  options.chunks = chunks;
  options.persistent = persistent;
  options.open_objects = object_opener();
  const ckpt::report::Inspection inspection = take(without_gil([&] { return ckpt::report::inspect_path(posix_fs(), path, options); }));
  return report_pair(inspection.doc, ckpt::report::inspect_text(inspection));
}

std::string root_digest_of(const std::string& path, std::optional<std::uint64_t> step) {
  ckpt::report::InspectOptions options;
  options.selection.step = step;
  options.open_objects = object_opener();
  return take(ckpt::report::root_digest(take(without_gil([&] { return ckpt::report::inspect_path(posix_fs(), path, options); }))));
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
  if (log2 < 0) throw StatusError{ckpt::make_error(Code::invalid_argument, "chunk_size: a power of two from 4 KiB to 1 GiB")};
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

// --- Writing a standalone file -----------------------------------------------------------------

class FileWriter {
 public:
  // Written as "<path>.tmp-<uuid>" and renamed over path at finish: an existing file is replaced whole or
  // not at all, as safetensors' save_file replaces it (spec/FORMAT.md 7.1).
  FileWriter(const std::string& path, std::uint32_t alignment_log2, std::uint32_t chunk_size_log2) {
    ckpt::WriterOptions o;
    o.alignment_log2 = alignment_log2;
    o.chunk_size_log2 = chunk_size_log2;
    o.atomic_rename = true;  // the file appears under its name whole, or not at all
    o.durable = true;
    writer_.emplace(take(without_gil([&] { return ckpt::ShardWriter::create(posix_fs(), path, o); })));
  }
  void add_tensor(const std::string& name, const std::string& dtype, const ckpt::Shape& shape, Bytes1D data) {
    const ckpt::DType d = dtype_of(dtype);
    ckpt::ShardWriter& w = live();
    check(without_gil([&] { return w.add_tensor(name, d, shape, data.data(), data.size()); }));
  }
  void set_metadata(const std::string& key, const nb::handle& value) { check(live().set_metadata(key, to_value(value, key))); }
  nb::dict finish() {
    ckpt::ShardWriter& w = live();
    const ckpt::ShardSummary s = take(without_gil([&] { return w.finish(); }));
    writer_.reset();
    nb::dict d;
    d["path"] = s.path;
    d["file_size"] = s.file_size;
    return d;
  }
  void close() { writer_.reset(); }  // unfinished: the temporary file is removed

 private:
  ckpt::ShardWriter& live() {
    if (!writer_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the writer is finished or closed")};
    return *writer_;
  }
  std::optional<ckpt::ShardWriter> writer_;
};

// --- Reading any checkpoint: a file, a step directory, a store's step ----------------------------

// A zero-copy view's owner: the mapping lives as long as an array refers to it.
struct View {
  ckpt::Mapping mapping;
};

class Reader {
 public:
  Reader(const std::string& path, std::optional<std::uint64_t> step) {
    ckpt::StepSelector sel;
    sel.step = step;
    cp_.emplace(take(without_gil([&] { return ckpt::object::open_checkpoint(posix_fs(), path, sel, object_opener()); })));
  }
  nb::list tensors() const {
    nb::list out;
    for (const auto& t : cp().tensors()) out.append(nb::make_tuple(t.name, dtype_name(t.dtype), t.shape, t.bytes));
    return out;
  }
  nb::dict metadata(const std::string& policy) const {
    auto p = take(ckpt::parse_conflict_policy(policy));
    auto entries = take(cp().metadata(p));
    nb::dict d;
    for (const auto& e : entries) d[nb::str(e.key.c_str(), e.key.size())] = from_value(e.value);
    return d;
  }
  nb::object state() const {
    if (!cp().state()) return nb::none();
    return state_dict(*cp().state());
  }
  std::optional<std::uint64_t> step() const { return cp().step(); }
  std::uint32_t world_size() const { return cp().world_size(); }
  std::string description() const { return cp().description(); }
  void read_into(const std::string& name, const ckpt::Shape& offsets, const ckpt::Shape& shape, Out1D out) {
    ckpt::Checkpoint& c = cp();
    check(without_gil([&] { return c.read_slice(name, offsets, shape, out.data(), out.size()); }));
  }
  // A writable uint8 view of the whole tensor's bytes over a copy-on-write mapping (writes never reach
  // the file), every chunk verified, or None where it is stored in pieces.
  nb::object view(const std::string& name) {
    ckpt::Checkpoint& c = cp();
    ckpt::Result<ckpt::Mapping> m = without_gil([&] { return c.map_tensor(name, ckpt::MapMode::copy_on_write); });
    if (!m.ok() && m.status().code() == Code::unsupported) return nb::none();
    auto* owner = new View{take(std::move(m))};
    nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<View*>(p); });
    const std::size_t n = owner->mapping.size();
    return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(owner->mapping.writable_data(), {n}, keep));
  }
  void close() { cp_.reset(); }

 private:
  ckpt::Checkpoint& cp() {
    if (!cp_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the checkpoint is closed")};
    return *cp_;
  }
  const ckpt::Checkpoint& cp() const { return const_cast<Reader*>(this)->cp(); }
  std::optional<ckpt::Checkpoint> cp_;
};

// --- The store -----------------------------------------------------------------------------------

class PyStore;

// One transaction of a store (on a file system or on object storage: its commit log decides). It holds its
// store, declared first so that it is destroyed after the transaction.
class PyTransaction {
  ckpt::Transaction& live() {
    if (!tx_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the transaction is closed")};
    return *tx_;
  }
  template <class F>
  decltype(auto) released(F&& f) {
    ckpt::Transaction& tx = live();
    return without_gil([&] { return f(tx); });
  }
 public:
  PyTransaction(std::shared_ptr<ckpt::Store> store, std::unique_ptr<ckpt::Transaction> tx)
      : store_(std::move(store)), tx_(std::move(tx)) {}
  std::uint64_t step() { return live().step(); }
  std::uint64_t txn() { return live().txn(); }
  int rank() { return live().rank(); }
  std::string directory() { return live().directory(); }
  bool active() const { return tx_ && tx_->active(); }
  void add_tensor(const std::string& name, const std::string& dtype, const ckpt::Shape& shape, Bytes1D data, bool optimizer) {
    const ckpt::DType d = dtype_of(dtype);
    check(released([&](ckpt::Transaction& tx) {
      return optimizer ? tx.add_optimizer_tensor(name, d, shape, data.data(), data.size()) : tx.add_tensor(name, d, shape, data.data(), data.size());
    }));
  }
  void add_piece(const std::string& name, const std::string& dtype, const ckpt::Shape& global_shape, const ckpt::Shape& offsets,
                 const ckpt::Shape& shape, Bytes1D data) {
    const ckpt::DType d = dtype_of(dtype);
    check(released([&](ckpt::Transaction& tx) {
      CKPT_TRY(tx.begin_piece(name, d, global_shape, offsets, shape));
      CKPT_TRY(tx.write(data.data(), data.size()));
      return tx.end_piece();
    }));
  }
  void set_state(const nb::dict& d) { ::set_state(live().state(), d); }
  nb::dict state() { return state_dict(live().state()); }
  nb::dict commit() {
    return commit_dict(take(released([](ckpt::Transaction& tx) { return tx.commit(); })));
  }
  void abort() {
    check(released([](ckpt::Transaction& tx) { return tx.abort(); }));
  }
  nb::bytes report() {
    const std::string r = take(released([](ckpt::Transaction& tx) { return tx.report(); }));
    return nb::bytes(r.data(), r.size());
  }
  nb::dict commit_reports(const std::vector<nb::bytes>& reports) {
    std::vector<std::string> rs;
    for (const auto& b : reports) rs.emplace_back(b.c_str(), b.size());
    return commit_dict(take(released([&](ckpt::Transaction& tx) { return tx.commit_reports(rs); })));
  }
  // Drops an unfinished transaction as its destructor does (rank 0: the abort recorded, its files removed).
  void close() {
    nb::gil_scoped_release released;
    tx_.reset();
  }

 private:
  static nb::dict commit_dict(const ckpt::CommitResult& r) {
    nb::dict d = step_dict(r.step);
    nb::list retired;
    for (const auto& s : r.retired) retired.append(s.step);
    d["retired"] = retired;
    d["retention_error"] = r.retention.ok() ? std::string() : r.retention.to_string();
    return d;
  }
  std::shared_ptr<ckpt::Store> store_;
  std::unique_ptr<ckpt::Transaction> tx_;
};

// An async save's tensors: the request points into these buffers, kept referenced until save() returns.
class PySaveRequest {
 public:
  explicit PySaveRequest(std::uint64_t step) : request_(step) {}
  void add_tensor(const std::string& name, const std::string& dtype, const ckpt::Shape& shape, nb::object buffer, bool optimizer) {
    Bytes1D data = nb::cast<Bytes1D>(buffer);
    if (optimizer) request_.add_optimizer_tensor(name, dtype_of(dtype), shape, data.data(), data.size());
    else request_.add_tensor(name, dtype_of(dtype), shape, data.data(), data.size());
    keep_.push_back(std::move(buffer));
  }
  void set_state(const nb::dict& d) { ::set_state(request_.state(), d); }
  ckpt::SaveRequest request_;
  std::vector<nb::object> keep_;
};

class PyAsyncSaver;

// A store of steps: a directory (spec/JOURNAL.md) or an "s3://bucket/prefix" on object storage (spec/OBJECT.md 4);
// ckpt::open_store tells them apart.
class PyStore {
  // (Defined before their uses: their return types are deduced.)
  ckpt::Store& live() {
    if (!store_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the store is closed")};
    return *store_;
  }
  template <class F>
  decltype(auto) released(F&& f) {
    ckpt::Store& s = live();
    return without_gil([&] { return f(s); });
  }
 public:
  static std::unique_ptr<PyStore> open(const std::string& path, bool read_only, bool create, std::uint64_t keep_last,
                                       std::uint64_t keep_every, std::uint32_t chunk_size_log2, bool verify_written) {
    const ckpt::Access access = read_only ? ckpt::Access::read_only : ckpt::Access::read_write;
    ckpt::StoreOptions o = options(create, keep_last, keep_every, chunk_size_log2, verify_written);
    return std::unique_ptr<PyStore>(new PyStore(take(without_gil([&] { return ckpt::open_store(path, access, o); }))));
  }
  static std::unique_ptr<PyStore> open_rank(const std::string& path, int rank, int world, bool create, std::uint32_t chunk_size_log2) {
    ckpt::StoreOptions o = options(create, 0, 0, chunk_size_log2, false);
    return std::unique_ptr<PyStore>(new PyStore(take(without_gil([&]() -> ckpt::Result<std::unique_ptr<ckpt::Store>> {
      CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CommitLog> log, ckpt::commit_log(path, o));
      return ckpt::Store::open_rank(std::move(log), rank, world, o);
    }))));
  }
  std::string path() { return live().path(); }
  nb::list steps() {
    nb::list out;
    for (const auto& s : live().steps()) out.append(step_dict(s));
    return out;
  }
  nb::object latest() {
    auto s = live().latest();
    if (!s) return nb::none();
    return step_dict(*s);
  }
  void refresh() {
    check(released([](ckpt::Store& s) { return s.refresh(); }));
  }
  std::unique_ptr<PyTransaction> begin(std::uint64_t step) {
    return std::make_unique<PyTransaction>(store_, take(released([&](ckpt::Store& s) { return s.begin(step); })));
  }
  nb::bytes begin_request(std::uint64_t step) {
    const std::string r = live().begin_request(step);
    return nb::bytes(r.data(), r.size());
  }
  nb::bytes decide_begin(std::uint64_t step, const std::vector<nb::bytes>& requests) {
    std::vector<std::string> rs;
    for (const auto& b : requests) rs.emplace_back(b.c_str(), b.size());
    const std::string d = released([&](ckpt::Store& s) { return s.decide_begin(step, rs); });
    return nb::bytes(d.data(), d.size());
  }
  std::unique_ptr<PyTransaction> join(nb::bytes decision) {
    const std::string d(decision.c_str(), decision.size());
    return std::make_unique<PyTransaction>(store_, take(released([&](ckpt::Store& s) { return s.join(d); })));
  }
  nb::list retire(std::uint64_t step) {
    check(released([&](ckpt::Store& s) { return s.retire(step); }));
    return steps();
  }
  nb::list apply_retention(std::uint64_t keep_last, std::uint64_t keep_every) {
    const std::vector<ckpt::StepInfo> retired =
        take(released([&](ckpt::Store& s) { return s.apply_retention(ckpt::RetentionPolicy{keep_last, keep_every}); }));
    nb::list out;
    for (const auto& r : retired) out.append(r.step);
    return out;
  }
  // What open found: the log's recovery (spec/JOURNAL.md 6), log objects that do not decode, and entries no
  // record names (spec/OBJECT.md 4.3); garbage collection is ckpt-repair's.
  nb::dict recovery() {
    nb::dict d;
    nb::list actions, unknown;
    const auto& r = live().recovery_report();
    for (const auto& a : r.actions) actions.append(a.describe());
    for (const auto& p : r.log_damage) actions.append("damaged log object: " + p);
    for (const auto& u : r.unknown_entries) unknown.append(u);
    d["clean"] = r.clean() && r.log_damage.empty() && r.unknown_entries.empty();
    d["actions"] = actions;
    d["unknown_entries"] = unknown;
    return d;
  }
  void close() {
    nb::gil_scoped_release released;
    store_.reset();  // transactions keep their store alive; the lock goes with the last reference
  }
  // An AsyncSaver over the open store (spec/ASYNC.md), which it keeps alive.
  std::unique_ptr<ckpt::AsyncSaver> saver(const ckpt::AsyncSaveOptions& o, std::shared_ptr<ckpt::Store>& keep) {
    keep = store_;
    return take(released([&](ckpt::Store& s) { return ckpt::AsyncSaver::create(s, o); }));
  }

 private:
  explicit PyStore(std::unique_ptr<ckpt::Store> s) : store_(std::move(s)) {}
  static ckpt::StoreOptions options(bool create, std::uint64_t keep_last, std::uint64_t keep_every, std::uint32_t chunk_size_log2,
                                    bool verify_written) {
    ckpt::StoreOptions o;
    o.create_if_missing = create;
    o.retention = ckpt::RetentionPolicy{keep_last, keep_every};
    o.chunk_size_log2 = chunk_size_log2;
    o.verify_written = verify_written;
    o.open_objects = object_opener();
    return o;
  }
  std::shared_ptr<ckpt::Store> store_;
};

class PyAsyncSaver {
 public:
  PyAsyncSaver(PyStore& store, std::size_t staging_bytes, std::size_t max_in_flight, bool skip_when_busy) {
    ckpt::AsyncSaveOptions o;
    o.staging_bytes = staging_bytes;
    o.max_in_flight = max_in_flight;
    o.when_busy = skip_when_busy ? ckpt::WhenBusy::skip : ckpt::WhenBusy::wait;
    o.obey_flush_requests = false;  // Python owns its signal handlers
    saver_ = store.saver(o, store_);
  }
  // Blocks only while the tensors are copied into staging memory; the write and commit go on behind.
  nb::dict save(PySaveRequest& request) {
    ckpt::AsyncSaver& s = live();
    const ckpt::SaveTicket t = take(without_gil([&] { return s.save(std::move(request.request_)); }));
    request.keep_.clear();  // staged: the caller's tensors may change now
    nb::dict d;
    d["step"] = t.step;
    d["skipped"] = t.skipped;
    d["stall_seconds"] = std::chrono::duration<double>(t.stall).count();
    return d;
  }
  void wait() {
    ckpt::AsyncSaver& s = live();
    check(without_gil([&] { return s.wait(); }));
  }
  std::size_t in_flight() { return live().in_flight(); }
  nb::object last_committed() {
    auto s = live().last_committed();
    if (!s) return nb::none();
    return step_dict(*s);
  }
  void close() {
    nb::gil_scoped_release released;
    saver_.reset();  // finishes what is in flight
  }

 private:
  ckpt::AsyncSaver& live() {
    if (!saver_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the saver is closed")};
    return *saver_;
  }
  std::shared_ptr<ckpt::Store> store_;  // declared first: the store outlives the saver
  std::unique_ptr<ckpt::AsyncSaver> saver_;
};


// --- The tiers (spec/TIERS.md; spec/PYTHON.md 6.4) ----------------------------------------------------
// The library calls the communicator, the device copier and the phase hook from its saver's worker
// thread, from the sender thread it spawns for an exchange, and from the caller's thread. Each call
// takes the GIL for its Python part only, and every library call that may wait runs with the GIL
// released, so those threads and the training loop never wait on each other through it. A Python
// exception inside a callback becomes a Status: nothing is thrown through the library.

// A Python exception as a Status: a ckpt error keeps its code, any other is Code::io naming its type.
Status status_of(const std::string& what, nb::python_error& e) {
  Code code = Code::io;
  nb::handle value = e.value();
  if (nb::hasattr(value, "code")) {
    const std::string name = nb::cast<std::string>(nb::str(value.attr("code")));
    for (auto c = static_cast<std::uint8_t>(Code::io); c <= static_cast<std::uint8_t>(ckpt::kLastCode); ++c)
      if (name == ckpt::code_name(static_cast<Code>(c))) code = static_cast<Code>(c);
  }
  return ckpt::make_error(code, what + ": " + nb::type_name(e.type()).c_str() + ": " + nb::str(value).c_str());
}

// Runs f (which calls into Python) holding the GIL; its failure comes back as a Status.
template <class F>
Status with_python(const std::string& what, F&& f) noexcept {
  nb::gil_scoped_acquire held;
  try {
    f();
    return Status();
  } catch (nb::python_error& e) {
    return status_of(what, e);
  } catch (const StatusError& e) {
    return e.status;
  } catch (const std::exception& e) {
    return ckpt::make_error(Code::io, what + ": " + e.what());
  }
}

// Bytes the library hands to Python: a uint8 array that owns them (torch.from_numpy takes it as is).
nb::object owned_bytes(std::string bytes) {
  auto* owner = new std::string(std::move(bytes));
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::string*>(p); });
  const std::size_t n = owner->size();
  return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(n == 0 ? nullptr : &(*owner)[0], {n}, keep));
}

// Bytes Python hands back: bytes, or any C-contiguous uint8 CPU array (numpy, a torch CPU tensor).
std::string bytes_of(const nb::handle& h) {
  if (nb::isinstance<nb::bytes>(h)) {
    nb::bytes b = nb::borrow<nb::bytes>(h);
    return std::string(b.c_str(), b.size());
  }
  Bytes1D a = nb::cast<Bytes1D>(h);
  return std::string(reinterpret_cast<const char*>(a.data()), a.size());
}

// The Comm concept (comm.hpp) over a Python object: barrier(), gather(bytes, root) -> list (root) or
// [], broadcast(bytes or None, root) -> bytes, send(bytes, dest, tag), recv(source, tag) -> bytes,
// leave(message). ckpt/torch/tiers.py implements it over a torch.distributed gloo group. Rank and
// size are fixed at creation, so the library asks for them without the GIL.
class PyComm {
 public:
  PyComm(nb::object impl, int rank, int size) : impl_(std::move(impl)), rank_(rank), size_(size) {}
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  Status barrier() {
    return with_python("communicator barrier", [&] { impl_.attr("barrier")(); });
  }
  ckpt::Result<std::vector<std::string>> gather(std::string bytes, int root) {
    std::vector<std::string> all;
    CKPT_TRY(with_python("communicator gather", [&] {
      nb::object got = impl_.attr("gather")(owned_bytes(std::move(bytes)), root);
      if (rank_ == root)
        for (nb::handle h : got) all.push_back(bytes_of(h));
    }));
    if (rank_ == root && all.size() != static_cast<std::size_t>(size_))
      return ckpt::make_error(Code::invalid_argument, "communicator gather returned " + std::to_string(all.size()) + " entries for " +
                                                          std::to_string(size_) + " ranks");
    return all;
  }
  Status broadcast(std::string& bytes, int root) {
    return with_python("communicator broadcast", [&] {
      nb::object mine = rank_ == root ? owned_bytes(bytes) : nb::none();
      bytes = bytes_of(impl_.attr("broadcast")(mine, root));
    });
  }
  Status send(std::string_view bytes, int dest, int tag) {
    return with_python("communicator send to rank " + std::to_string(dest),
                       [&] { impl_.attr("send")(owned_bytes(std::string(bytes)), dest, tag); });
  }
  Status recv(std::string& bytes, int source, int tag) {
    return with_python("communicator recv from rank " + std::to_string(source),
                       [&] { bytes = bytes_of(impl_.attr("recv")(source, tag)); });
  }
  void leave(const Status& why) {
    (void)with_python("communicator leave", [&] { impl_.attr("leave")(why.to_string()); });
  }

 private:
  nb::object impl_;
  int rank_, size_;
};

// Device snapshots (spec/ASYNC.md 6) through a Python object: copy(staging_address, device_address,
// bytes) issues a device-to-host copy on a side stream, fence() waits for every copy issued, and
// allocate(bytes) -> address / release(address) make the pinned staging pool. The library calls copy
// and fence from the caller's thread inside step(), allocate and release when the saver starts and ends.
class PySnapshotCopier final : public ckpt::SnapshotCopier {
 public:
  explicit PySnapshotCopier(nb::object impl) : impl_(std::move(impl)) {}
  Status copy(void* staging, const void* source, std::size_t bytes) override {
    return with_python("device snapshot copy", [&] {
      impl_.attr("copy")(reinterpret_cast<std::uintptr_t>(staging), reinterpret_cast<std::uintptr_t>(source), bytes);
    });
  }
  Status fence() override {
    return with_python("device snapshot fence", [&] { impl_.attr("fence")(); });
  }
  ckpt::StagingMemory staging_memory() {
    ckpt::StagingMemory m;
    m.allocate = [this](void*& block, std::size_t bytes) {
      return with_python("staging allocation", [&] {
        block = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(impl_.attr("allocate")(bytes)));
        if (block == nullptr) throw StatusError{ckpt::make_error(Code::io, "allocate returned no memory")};
      });
    };
    m.release = [this](void* block) {
      (void)with_python("staging release", [&] { impl_.attr("release")(reinterpret_cast<std::uintptr_t>(block)); });
    };
    return m;
  }

 private:
  nb::object impl_;
};

// The agreed step as the load callback sees it; valid only during the callback (the library owns it).
class PyTierView {
 public:
  explicit PyTierView(ckpt::tiers::TierView* view) : view_(view) {}
  std::uint64_t step() { return live().step(); }
  std::uint32_t world() { return live().world(); }
  nb::dict state() { return state_dict(live().state()); }
  std::vector<std::string> tensor_names() { return live().tensor_names(); }
  // (dtype, shape) of a tensor of the step, or None.
  nb::object tensor(const std::string& name) {
    const ckpt::TensorRecord* t = live().find_tensor(name);
    if (t == nullptr) return nb::none();
    return nb::make_tuple(dtype_name(t->dtype), t->shape);
  }
  void read_tensor(const std::string& name, Out1D out) {
    ckpt::tiers::TierView& v = live();
    check(without_gil([&] { return v.read_tensor(name, out.data(), out.size()); }));
  }
  void read_slice(const std::string& name, const ckpt::Shape& offsets, const ckpt::Shape& shape, Out1D out) {
    ckpt::tiers::TierView& v = live();
    check(without_gil([&] { return v.read_slice(name, offsets, shape, out.data(), out.size()); }));
  }
  void invalidate() { view_ = nullptr; }

 private:
  ckpt::tiers::TierView& live() {
    if (view_ == nullptr) throw StatusError{ckpt::make_error(Code::invalid_argument, "a tier view is valid only inside the load callback")};
    return *view_;
  }
  ckpt::tiers::TierView* view_;
};

class PyTiers {
 public:
  // Collective over comm (TieredCheckpointer::create). topology: "RANK NODE [RACK]" lines (parse_topology);
  // empty: every rank's hostname is its node.
  PyTiers(nb::object comm, int rank, int world, const std::string& memory_root, const std::string& persistent,
          std::uint64_t memory_every, std::uint64_t persist_every, int replicas, std::size_t memory_keep, std::size_t persistent_keep,
          const std::string& topology, std::uint32_t chunk_size_log2, std::size_t staging_bytes, std::size_t transfer_block,
          bool check_free_space, bool load_all_shards, nb::object copier, nb::object on_phase)
      : comm_(std::move(comm), rank, world), on_phase_(std::move(on_phase)) {
    ckpt::tiers::TierOptions o;
    o.memory_root = memory_root;
    o.persistent = persistent;
    o.open_objects = object_opener();  // an s3:// persistent tier (spec/TIERS.md 4.5)
    o.memory_every = memory_every;
    o.persist_every = persist_every;
    o.replicas = replicas;
    o.memory_keep = memory_keep;
    o.persistent_keep = persistent_keep;
    if (!topology.empty()) o.topology = take(ckpt::tiers::parse_topology(topology, world, "topology"));
    o.chunk_size_log2 = chunk_size_log2;
    o.staging_bytes = staging_bytes;
    o.transfer_block = transfer_block;
    o.check_free_space = check_free_space;
    o.load_all_shards = load_all_shards;
    if (!copier.is_none()) {
      copier_ = std::make_unique<PySnapshotCopier>(std::move(copier));
      o.device = copier_.get();
      o.staging_memory = copier_->staging_memory();
    }
    if (!on_phase_.is_none()) {
      // Captures this object, not the callable: the library's copies of the hook then hold no Python reference.
      o.on_phase = [this](const char* phase, std::uint64_t step) {
        nb::gil_scoped_acquire held;
        try {
          on_phase_(phase, step);
        } catch (nb::python_error& e) {
          e.discard_as_unraisable("ckpt tiers on_phase hook");
        }
      };
    }
    tiers_ = take(without_gil([&] { return ckpt::tiers::TieredCheckpointer::create(posix_fs(), comm_, std::move(o)); }));
  }
  ~PyTiers() { close(); }

  std::string action(std::uint64_t step) { return ckpt::tiers::tier_action_name(live().action(step)); }

  // pieces: (name, dtype, global_shape, offsets, local_shape, data, optimizer) where data is a uint8
  // CPU buffer, or (device_address, bytes) for the copier. The buffers are read before this returns.
  nb::dict step(std::uint64_t step, const nb::list& pieces, const nb::dict& state) {
    ckpt::tiers::TieredCheckpointer& t = live();
    std::vector<ckpt::SaveTensor> tensors;
    std::vector<nb::object> keep;  // the buffers, referenced until the staging copy is done
    for (nb::handle item : pieces) {
      nb::tuple p = nb::cast<nb::tuple>(item);
      if (p.size() != 7) throw StatusError{ckpt::make_error(Code::invalid_argument, "a piece is (name, dtype, global_shape, offsets, local_shape, data, optimizer)")};
      ckpt::SaveTensor s;
      s.name = nb::cast<std::string>(p[0]);
      s.dtype = dtype_of(nb::cast<std::string>(p[1]));
      s.global_shape = nb::cast<ckpt::Shape>(p[2]);
      s.offsets = nb::cast<ckpt::Shape>(p[3]);
      s.local_shape = nb::cast<ckpt::Shape>(p[4]);
      s.optimizer = nb::cast<bool>(p[6]);
      if (nb::isinstance<nb::tuple>(p[5])) {
        nb::tuple device = nb::cast<nb::tuple>(p[5]);
        s.data = reinterpret_cast<const void*>(nb::cast<std::uintptr_t>(device[0]));
        s.size = nb::cast<std::size_t>(device[1]);
        s.on_device = true;
      } else {
        Bytes1D data = nb::cast<Bytes1D>(p[5]);
        s.data = data.data();
        s.size = data.size();
        keep.push_back(nb::borrow(p[5]));
      }
      tensors.push_back(std::move(s));
    }
    ckpt::TrainingState training;
    ::set_state(training, state);
    const ckpt::tiers::StepOutcome outcome = take(without_gil([&] {
      return t.step(step, [&](ckpt::SaveRequest& r) {
        for (auto& s : tensors) r.add(std::move(s));
        r.state() = std::move(training);
      });
    }));
    nb::dict d;
    d["action"] = ckpt::tiers::tier_action_name(outcome.action);
    d["stall_seconds"] = std::chrono::duration<double>(outcome.stall).count();
    return d;
  }

  void wait() {
    ckpt::tiers::TieredCheckpointer& t = live();
    check(without_gil([&] { return t.wait(); }));
  }

  // Collective. load(view) is called on this thread for each step the job tries, until one loads on every rank.
  nb::dict resume(nb::object load) {
    ckpt::tiers::TieredCheckpointer& t = live();
    const ckpt::tiers::Resumed r = take(without_gil([&] {
      return t.resume([&](ckpt::tiers::TierView& view) -> Status {
        nb::gil_scoped_acquire held;
        auto* wrapper = new PyTierView(&view);
        nb::object handle = nb::cast(wrapper, nb::rv_policy::take_ownership);
        Status s = with_python("load callback", [&] { load(handle); });
        wrapper->invalidate();
        return s;
      });
    }));
    nb::dict d;
    d["fresh"] = r.fresh;
    d["step"] = r.step;
    d["next_step"] = r.next_step();
    d["digest"] = r.digest.hex();
    d["world"] = r.world;
    d["state"] = state_dict(r.state);
    d["sources"] = r.sources;
    d["setbacks"] = r.setbacks;
    return d;
  }

  nb::dict placement() {
    const ckpt::tiers::Placement& p = live().placement();
    nb::dict d;
    d["replicas"] = p.replicas;
    d["achievable"] = p.achievable;
    d["holders"] = p.holders;
    d["notes"] = p.notes;
    return d;
  }
  std::string topology() { return ckpt::tiers::format_topology(live().topology()); }
  std::vector<std::string> records() {
    std::vector<std::string> out;
    for (const auto& r : live().records()) out.push_back(r.describe());
    return out;
  }
  std::uint64_t steps_replicated() { return live().steps_replicated(); }
  std::uint64_t steps_persisted() { return live().steps_persisted(); }
  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }

  // Finishes the work taken (as wait()) and stops the worker; the communicator is not used after.
  void close() {
    if (!tiers_) return;
    nb::gil_scoped_release released;
    tiers_.reset();
  }

 private:
  ckpt::tiers::TieredCheckpointer& live() {
    if (!tiers_) throw StatusError{ckpt::make_error(Code::invalid_argument, "the tiered checkpointer is closed")};
    return *tiers_;
  }
  // Declared before tiers_, so they outlive it.
  PyComm comm_;
  nb::object on_phase_;
  std::unique_ptr<PySnapshotCopier> copier_;
  std::unique_ptr<ckpt::tiers::TieredCheckpointer> tiers_;
};

// --- ckpt.plan: the interval planner (spec/PLAN.md, spec/PYTHON.md 7); every number comes from planner.hpp ---

// One policy at `interval`, or at the model's optimum (spec/PLAN.md 3.2, 3.4).
nb::dict plan_single(double stall, double background, double mtbf, double restart, std::optional<double> interval) {
  const ckpt::plan::SaveCost cost{stall, background};
  const ckpt::plan::FailureModel failures{mtbf, restart};
  const ckpt::plan::PolicyPlan p = take(ckpt::plan::plan_policy(cost, failures, 1.0, interval));
  const double tau = interval ? p.interval_seconds : p.optimum_seconds;
  nb::dict d;
  d["young_seconds"] = p.young_seconds;
  d["daly_seconds"] = p.daly_seconds;
  d["optimum_seconds"] = p.optimum_seconds;
  d["interval_seconds"] = tau;
  d["waste"] = interval ? p.waste : p.waste_at_optimum;
  d["overhead_ratio"] = ckpt::plan::overhead_ratio(cost, failures, tau);
  return d;
}

// Expected wall seconds of a job of `intervals` intervals (spec/PLAN.md 3.3).
double plan_job_seconds(double stall, double background, double mtbf, double restart, double interval, std::int64_t intervals) {
  const ckpt::plan::SaveCost cost{stall, background};
  const ckpt::plan::FailureModel failures{mtbf, restart};
  check(ckpt::plan::check_inputs(cost, failures));
  check(ckpt::plan::check_interval(interval));
  if (intervals < 1)
    check(ckpt::make_error(Code::invalid_argument, "a job needs at least 1 interval, got " + std::to_string(intervals)));
  return ckpt::plan::expected_job_seconds(cost, failures, interval, static_cast<std::uint64_t>(intervals));
}

// The tiered plan (spec/PLAN.md 10), and its Monte Carlo when `simulate` histories are asked for.
nb::dict plan_tiered(double capture_stall, double replicate_seconds, double persist_stall, double persist_seconds, double mtbf,
                     double memory_restart, double persistent_restart, double crash_share, double node_loss_share,
                     double power_loss_share, bool replicated, std::optional<double> memory_interval,
                     std::optional<std::int64_t> persist_every, std::int64_t simulate, std::int64_t seed) {
  // Python ints may be negative: refused here as the library refuses 0, not as a TypeError.
  if (persist_every && *persist_every < 1)
    check(ckpt::make_error(Code::invalid_argument, "persist_every must be at least 1, got " + std::to_string(*persist_every)));
  if (simulate < 0) check(ckpt::make_error(Code::invalid_argument, "simulate must be 0 or more histories, got " + std::to_string(simulate)));
  if (seed < 0) check(ckpt::make_error(Code::invalid_argument, "seed must be 0 or more, got " + std::to_string(seed)));
  const ckpt::plan::TierCost cost{capture_stall, replicate_seconds, persist_stall, persist_seconds};
  const ckpt::plan::TierFailures failures{mtbf, crash_share, node_loss_share, power_loss_share, memory_restart, persistent_restart, replicated};
  std::optional<std::uint64_t> k;
  if (persist_every) k = static_cast<std::uint64_t>(*persist_every);
  const ckpt::plan::TierPlan p = take(ckpt::plan::plan_tiers(cost, failures, memory_interval, k));
  std::optional<ckpt::plan::TierSimulationResult> sim;
  if (simulate > 0) {
    const ckpt::plan::TierSimulationOptions o{static_cast<std::uint64_t>(simulate), 0, static_cast<std::uint64_t>(seed)};
    sim = take(without_gil([&] { return ckpt::plan::simulate_tiers(cost, failures, p.policy, o); }));
  }
  nb::dict d;
  d["memory_interval_seconds"] = p.policy.memory_interval_seconds;
  d["persist_every"] = p.policy.persist_every;
  d["waste"] = p.waste;
  d["optimum_memory_interval_seconds"] = p.optimum.memory_interval_seconds;
  d["optimum_persist_every"] = p.optimum.persist_every;
  d["waste_at_optimum"] = p.optimum.waste;
  d["simulated_waste"] = sim ? nb::object(nb::float_(sim->mean_waste)) : nb::none();
  d["standard_error"] = sim ? nb::object(nb::float_(sim->standard_error)) : nb::none();
  return d;
}

}  // namespace

NB_MODULE(_ckpt, m) {
  m.doc() = "ckpt: crash-consistent, verified checkpoints (the C++ library's bindings; use the ckpt package)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::gil_scoped_acquire held;
      nb::object problem = nb::none();
      if (const ckpt::Problem* pr = e.status.problem()) problem = problem_dict(*pr);
      nb::object errors = nb::module_::import_("ckpt.errors");
      nb::object exc = errors.attr("_from_status")(ckpt::code_name(e.status.code()), e.status.message(), problem);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  m.def("dtypes", [] {
    nb::list out;
    for (const auto& d : ckpt::format::kDTypes) out.append(nb::make_tuple(std::string(d.name), d.size));
    return out;
  });
  m.def("verify_report", &verify_report, "path"_a, "step"_a = nb::none(), "latest"_a = false, "expect"_a = nb::none(),
        "expect_file"_a = nb::none(), "persistent"_a = "", "threads"_a = 1u);
  m.def("inspect_report", &inspect_report, "path"_a, "step"_a = nb::none(), "latest"_a = false, "chunks"_a = false, "persistent"_a = "");
  m.def("root_digest", &root_digest_of, "path"_a, "step"_a = nb::none());
  m.def("diff_report", &diff_report, "a"_a, "b"_a, "step_a"_a = nb::none(), "step_b"_a = nb::none(),
        "tensors"_a = std::vector<std::string>{});
  m.def("write_sidecar_report", &write_sidecar_report, "path"_a, "chunk_size"_a = std::uint64_t{1} << 20);
  m.def("repair_report", &repair_report, "path"_a, "dry_run"_a = false, "purge"_a = false);
  m.def("xxh3_64", [](Bytes1D data) { return without_gil([&] { return ckpt::xxh3_64(data.data(), data.size()); }); });
  m.def("plan_single", &plan_single, "stall"_a, "background"_a, "mtbf"_a, "restart"_a, "interval"_a = nb::none());
  m.def("plan_job_seconds", &plan_job_seconds, "stall"_a, "background"_a, "mtbf"_a, "restart"_a, "interval"_a, "intervals"_a);
  m.def("plan_tiered", &plan_tiered, "capture_stall"_a, "replicate_seconds"_a, "persist_stall"_a, "persist_seconds"_a, "mtbf"_a,
        "memory_restart"_a, "persistent_restart"_a, "crash_share"_a, "node_loss_share"_a, "power_loss_share"_a, "replicated"_a,
        "memory_interval"_a, "persist_every"_a, "simulate"_a, "seed"_a);
  m.attr("DEFAULT_CHUNK_SIZE_LOG2") = ckpt::format::kDefaultChunkSizeLog2;
  m.attr("HAVE_S3") = static_cast<bool>(object_opener());  // s3:// paths reach an S3 client
  m.attr("DEFAULT_ALIGNMENT_LOG2") = ckpt::format::kDefaultAlignmentLog2;

  nb::class_<FileWriter>(m, "FileWriter")
      .def(nb::init<const std::string&, std::uint32_t, std::uint32_t>(), "path"_a, "alignment_log2"_a, "chunk_size_log2"_a)
      .def("add_tensor", &FileWriter::add_tensor)
      .def("set_metadata", &FileWriter::set_metadata)
      .def("finish", &FileWriter::finish)
      .def("close", &FileWriter::close);

  nb::class_<Reader>(m, "Reader")
      .def(nb::init<const std::string&, std::optional<std::uint64_t>>(), "path"_a, "step"_a = nb::none())
      .def("tensors", &Reader::tensors)
      .def("metadata", &Reader::metadata, "policy"_a = "error")
      .def("state", &Reader::state)
      .def("step", &Reader::step)
      .def("world_size", &Reader::world_size)
      .def("description", &Reader::description)
      .def("read_into", &Reader::read_into)
      .def("view", &Reader::view, "name"_a)
      .def("close", &Reader::close);

  nb::class_<PyTransaction>(m, "Transaction")
      .def_prop_ro("step", &PyTransaction::step)
      .def_prop_ro("txn", &PyTransaction::txn)
      .def_prop_ro("rank", &PyTransaction::rank)
      .def_prop_ro("directory", &PyTransaction::directory)
      .def_prop_ro("active", &PyTransaction::active)
      .def("add_tensor", &PyTransaction::add_tensor, "name"_a, "dtype"_a, "shape"_a, "data"_a, "optimizer"_a = false)
      .def("add_piece", &PyTransaction::add_piece)
      .def("set_state", &PyTransaction::set_state)
      .def("state", &PyTransaction::state)
      .def("commit", &PyTransaction::commit)
      .def("abort", &PyTransaction::abort)
      .def("report", &PyTransaction::report)
      .def("commit_reports", &PyTransaction::commit_reports)
      .def("close", &PyTransaction::close);

  nb::class_<PySaveRequest>(m, "SaveRequest")
      .def(nb::init<std::uint64_t>())
      .def("add_tensor", &PySaveRequest::add_tensor, "name"_a, "dtype"_a, "shape"_a, "data"_a, "optimizer"_a = false)
      .def("set_state", &PySaveRequest::set_state);

  nb::class_<PyStore>(m, "Store")
      .def_static("open", &PyStore::open, "path"_a, "read_only"_a, "create"_a, "keep_last"_a, "keep_every"_a, "chunk_size_log2"_a,
                  "verify_written"_a)
      .def_static("open_rank", &PyStore::open_rank, "path"_a, "rank"_a, "world"_a, "create"_a, "chunk_size_log2"_a)
      .def_prop_ro("path", &PyStore::path)
      .def("steps", &PyStore::steps)
      .def("latest", &PyStore::latest)
      .def("refresh", &PyStore::refresh)
      .def("begin", &PyStore::begin)
      .def("begin_request", &PyStore::begin_request)
      .def("decide_begin", &PyStore::decide_begin)
      .def("join", &PyStore::join)
      .def("retire", &PyStore::retire)
      .def("apply_retention", &PyStore::apply_retention)
      .def("recovery", &PyStore::recovery)
      .def("close", &PyStore::close);

  nb::class_<PyAsyncSaver>(m, "AsyncSaver")
      .def(nb::init<PyStore&, std::size_t, std::size_t, bool>(), "store"_a, "staging_bytes"_a, "max_in_flight"_a, "skip_when_busy"_a)
      .def("save", &PyAsyncSaver::save)
      .def("wait", &PyAsyncSaver::wait)
      .def("in_flight", &PyAsyncSaver::in_flight)
      .def("last_committed", &PyAsyncSaver::last_committed)
      .def("close", &PyAsyncSaver::close);

  nb::class_<PyTierView>(m, "TierView")
      .def_prop_ro("step", &PyTierView::step)
      .def_prop_ro("world", &PyTierView::world)
      .def("state", &PyTierView::state)
      .def("tensor_names", &PyTierView::tensor_names)
      .def("tensor", &PyTierView::tensor, "name"_a)
      .def("read_tensor", &PyTierView::read_tensor, "name"_a, "out"_a)
      .def("read_slice", &PyTierView::read_slice, "name"_a, "offsets"_a, "shape"_a, "out"_a);

  nb::class_<PyTiers>(m, "Tiers")
      .def(nb::init<nb::object, int, int, const std::string&, const std::string&, std::uint64_t, std::uint64_t, int, std::size_t,
                    std::size_t, const std::string&, std::uint32_t, std::size_t, std::size_t, bool, bool, nb::object, nb::object>(),
           "comm"_a, "rank"_a, "world"_a, "memory_root"_a, "persistent"_a, "memory_every"_a, "persist_every"_a, "replicas"_a,
           "memory_keep"_a, "persistent_keep"_a, "topology"_a, "chunk_size_log2"_a, "staging_bytes"_a, "transfer_block"_a,
           "check_free_space"_a, "load_all_shards"_a, "copier"_a = nb::none(), "on_phase"_a = nb::none())
      .def("action", &PyTiers::action, "step"_a)
      .def("step", &PyTiers::step, "step"_a, "pieces"_a, "state"_a)
      .def("wait", &PyTiers::wait)
      .def("resume", &PyTiers::resume, "load"_a)
      .def("placement", &PyTiers::placement)
      .def("topology", &PyTiers::topology)
      .def("records", &PyTiers::records)
      .def_prop_ro("steps_replicated", &PyTiers::steps_replicated)
      .def_prop_ro("steps_persisted", &PyTiers::steps_persisted)
      .def_prop_ro("rank", &PyTiers::rank)
      .def_prop_ro("world", &PyTiers::world)
      .def("close", &PyTiers::close);
}
