// ckpt._ckpt, stores (spec/PYTHON.md 2.3; spec/JOURNAL.md, spec/OBJECT.md 4): the one ckpt::Store,
// whatever its commit log (a directory's journal or an "s3://bucket/prefix" object log: open_store and
// commit_log tell them apart, the binding never does), its transactions, single- and multi-rank, and the
// AsyncSaver over it.
#include "bind_common.hpp"

#include <ckpt/store/async_save.hpp>
#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>

#include <memory>

namespace ckpt_bind {
namespace {

using namespace nb::literals;

// One transaction of a store. It holds its store, declared first so that it is destroyed after the transaction.
class PyTransaction {
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
    check(released_on(live(), [&](ckpt::Transaction& tx) {
      return optimizer ? tx.add_optimizer_tensor(name, d, shape, data.data(), data.size()) : tx.add_tensor(name, d, shape, data.data(), data.size());
    }));
  }
  void add_piece(const std::string& name, const std::string& dtype, const ckpt::Shape& global_shape, const ckpt::Shape& offsets,
                 const ckpt::Shape& shape, Bytes1D data) {
    const ckpt::DType d = dtype_of(dtype);
    check(released_on(live(), [&](ckpt::Transaction& tx) {
      CKPT_TRY(tx.begin_piece(name, d, global_shape, offsets, shape));
      CKPT_TRY(tx.write(data.data(), data.size()));
      return tx.end_piece();
    }));
  }
  void set_state(const nb::dict& d) { ckpt_bind::set_state(live().state(), d); }
  nb::dict state() { return state_dict(live().state()); }
  nb::dict commit() { return commit_dict(take(released_on(live(), [](ckpt::Transaction& tx) { return tx.commit(); }))); }
  void abort() { check(released_on(live(), [](ckpt::Transaction& tx) { return tx.abort(); })); }
  nb::bytes report() { return to_bytes(take(released_on(live(), [](ckpt::Transaction& tx) { return tx.report(); }))); }
  nb::dict commit_reports(const std::vector<nb::bytes>& reports) {
    const std::vector<std::string> rs = strings_of(reports);
    return commit_dict(take(released_on(live(), [&](ckpt::Transaction& tx) { return tx.commit_reports(rs); })));
  }
  // Drops an unfinished transaction as its destructor does (rank 0: the abort recorded, its files removed).
  void close() {
    nb::gil_scoped_release released;
    tx_.reset();
  }

 private:
  ckpt::Transaction& live() { return open_or_fail(tx_, "the transaction is closed"); }
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
  void set_state(const nb::dict& d) { ckpt_bind::set_state(request_.state(), d); }
  ckpt::SaveRequest request_;
  std::vector<nb::object> keep_;
};

// A store of steps: a directory (spec/JOURNAL.md) or an "s3://bucket/prefix" on object storage (spec/OBJECT.md 4);
// ckpt::open_store tells them apart.
class PyStore {
 public:
  static std::unique_ptr<PyStore> open(const std::string& path, bool read_only, bool create, std::uint64_t keep_last,
                                       std::uint64_t keep_every, std::uint32_t chunk_size_log2, bool verify_written) {
    const ckpt::Access access = read_only ? ckpt::Access::read_only : ckpt::Access::read_write;
    ckpt::StoreOptions o = options(create, keep_last, keep_every, chunk_size_log2, verify_written);
    return std::unique_ptr<PyStore>(new PyStore(take(without_gil([&] { return ckpt::open_store(storage_fs(), path, access, o); }))));
  }
  static std::unique_ptr<PyStore> open_rank(const std::string& path, int rank, int world, bool create, std::uint32_t chunk_size_log2) {
    ckpt::StoreOptions o = options(create, 0, 0, chunk_size_log2, false);
    return std::unique_ptr<PyStore>(new PyStore(take(without_gil([&]() -> ckpt::Result<std::unique_ptr<ckpt::Store>> {
      CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CommitLog> log, ckpt::commit_log(storage_fs(), path, o));
      return ckpt::Store::open_rank(std::move(log), rank, world, o);
    }))));
  }
  std::string path() { return live().path(); }
  nb::list steps() {
    nb::list out;
    for (const auto& s : live().steps()) out.append(step_dict(s));
    return out;
  }
  nb::object latest() { return step_or_none(live().latest()); }
  void refresh() { check(released_on(live(), [](ckpt::Store& s) { return s.refresh(); })); }
  std::unique_ptr<PyTransaction> begin(std::uint64_t step) {
    return std::make_unique<PyTransaction>(store_, take(released_on(live(), [&](ckpt::Store& s) { return s.begin(step); })));
  }
  nb::bytes begin_request(std::uint64_t step) { return to_bytes(live().begin_request(step)); }
  nb::bytes decide_begin(std::uint64_t step, const std::vector<nb::bytes>& requests) {
    const std::vector<std::string> rs = strings_of(requests);
    return to_bytes(released_on(live(), [&](ckpt::Store& s) { return s.decide_begin(step, rs); }));
  }
  std::unique_ptr<PyTransaction> join(nb::bytes decision) {
    const std::string d(decision.c_str(), decision.size());
    return std::make_unique<PyTransaction>(store_, take(released_on(live(), [&](ckpt::Store& s) { return s.join(d); })));
  }
  nb::list retire(std::uint64_t step) {
    check(released_on(live(), [&](ckpt::Store& s) { return s.retire(step); }));
    return steps();
  }
  nb::list apply_retention(std::uint64_t keep_last, std::uint64_t keep_every) {
    const std::vector<ckpt::StepInfo> retired = take(
        released_on(live(), [&](ckpt::Store& s) { return s.apply_retention(ckpt::RetentionPolicy{keep_last, keep_every}); }));
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
    for (const auto& p : r.log_damage) actions.append("damaged log object: " + p.message);
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
    return take(released_on(live(), [&](ckpt::Store& s) { return ckpt::AsyncSaver::create(s, o); }));
  }

 private:
  explicit PyStore(std::unique_ptr<ckpt::Store> s) : store_(std::move(s)) {}
  ckpt::Store& live() { return open_or_fail(store_, "the store is closed"); }
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
    const ckpt::SaveTicket t = take(released_on(live(), [&](ckpt::AsyncSaver& s) { return s.save(std::move(request.request_)); }));
    request.keep_.clear();  // staged: the caller's tensors may change now
    nb::dict d;
    d["step"] = t.step;
    d["skipped"] = t.skipped;
    d["stall_seconds"] = seconds_of(t.stall);
    return d;
  }
  void wait() { check(released_on(live(), [](ckpt::AsyncSaver& s) { return s.wait(); })); }
  std::size_t in_flight() { return live().in_flight(); }
  nb::object last_committed() { return step_or_none(live().last_committed()); }
  void close() {
    nb::gil_scoped_release released;
    saver_.reset();  // finishes what is in flight
  }

 private:
  ckpt::AsyncSaver& live() { return open_or_fail(saver_, "the saver is closed"); }
  std::shared_ptr<ckpt::Store> store_;  // declared first: the store outlives the saver
  std::unique_ptr<ckpt::AsyncSaver> saver_;
};

}  // namespace

void bind_stores(nb::module_& m) {
  // Shared storage at scale (io/paced_fs.hpp): from now on, files under `root` cross the node's link whose
  // state is `link_path`, at `bytes_per_s`, reads through the node's `read_cache` ("": none); an empty root
  // stops pacing.
  m.def("pace_storage", [](const std::string& root, const std::string& link_path, double bytes_per_s, const std::string& read_cache) {
    if (root.empty()) return storage_fs().pace("", nullptr);
    storage_fs().pace(root, std::shared_ptr<ckpt::StorageLink>(take(ckpt::StorageLink::open(link_path, bytes_per_s, read_cache))));
  }, "root"_a, "link_path"_a, "bytes_per_s"_a, "read_cache"_a = "");
  // The same link for bytes the caller moves itself (the Python contenders' streams): `n` written, or bytes
  // [offset, offset + n) of `path` (of `file_size` bytes) read; a no-op when none is set.
  m.def("storage_transfer", [](std::uint64_t n) {
    const std::shared_ptr<ckpt::StorageLink> link = storage_fs().link();
    if (link) check(without_gil([&] { return link->transfer(n); }));
  }, "n"_a);
  m.def("storage_read", [](const std::string& path, std::uint64_t offset, std::uint64_t n, std::uint64_t file_size) {
    const std::shared_ptr<ckpt::StorageLink> link = storage_fs().link();
    if (link) check(without_gil([&] { return link->read(path, offset, n, file_size); }));
  }, "path"_a, "offset"_a, "n"_a, "file_size"_a);
  // (bytes this process moved across the link, the link's seconds they took), or None when none is set.
  m.def("storage_link_stats", []() -> nb::object {
    const std::shared_ptr<ckpt::StorageLink> link = storage_fs().link();
    if (!link) return nb::none();
    return nb::make_tuple(link->bytes(), link->busy_s());
  });
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
}

}  // namespace ckpt_bind
