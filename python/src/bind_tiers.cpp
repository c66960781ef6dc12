// ckpt._ckpt, tiers (spec/TIERS.md; spec/PYTHON.md 6.4): ckpt::tiers::TieredCheckpointer over gloo
// communicators (dist/gloo_comm.hpp) that a Python communicator bootstraps once, so no byte and no control
// message of the tiers goes through the interpreter (spec/TIERS.md 4.7). The device copier and the phase
// hook are Python: the library calls them from the caller's thread and its worker; each call takes the GIL
// for its Python part only, and every library call that may wait runs with the GIL released. A Python
// exception inside a callback becomes a Status: nothing is thrown through the library.
#include "bind_common.hpp"

#include <ckpt/dist/comm.hpp>
#include <ckpt/dist/gloo_comm.hpp>
#include <ckpt/store/async_save.hpp>
#include <ckpt/tiers/tiered.hpp>
#include <ckpt/tiers/topology.hpp>

#include <memory>
#include <thread>
#include <string_view>

namespace ckpt_bind {
namespace {

using namespace nb::literals;

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

// The collectives of the Comm concept (comm.hpp) over a Python object: barrier(), gather(bytes, root) ->
// list (root) or [], broadcast(bytes or None, root) -> bytes. ckpt/torch/tiers.py implements it over a
// torch.distributed gloo group; it only bootstraps the gloo communicators. Rank and size are fixed at
// creation, so the library asks for them without the GIL.
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

 private:
  nb::object impl_;
  int rank_, size_;
};

// Device snapshots (spec/ASYNC.md 6) through a Python object: copy(staging_address, device_address,
// bytes) issues a device-to-host copy on a side stream, fence() waits for every copy issued,
// pin(address, bytes) / unpin(address) make a memory-tier slot a target (6.1), and
// allocate(bytes) -> address / release(address) make the pinned staging pool where a slot cannot be mapped. The library calls copy
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
  // A memory-tier slot the copies land in directly (spec/ASYNC.md 6.1): pin(address, bytes), unpin(address).
  Status pin(void* at, std::size_t bytes) override {
    return with_python("device snapshot pin", [&] { impl_.attr("pin")(reinterpret_cast<std::uintptr_t>(at), bytes); });
  }
  void unpin(void* at) noexcept override {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: so is every registration's process state
    (void)with_python("device snapshot unpin", [&] { impl_.attr("unpin")(reinterpret_cast<std::uintptr_t>(at)); });
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
    check(released_on(live(), [&](ckpt::tiers::TierView& v) { return v.read_tensor(name, out.data(), out.size()); }));
  }
  void read_slice(const std::string& name, const ckpt::Shape& offsets, const ckpt::Shape& shape, Out1D out) {
    check(released_on(live(), [&](ckpt::tiers::TierView& v) { return v.read_slice(name, offsets, shape, out.data(), out.size()); }));
  }
  void invalidate() { view_ = nullptr; }

 private:
  ckpt::tiers::TierView& live() { return open_or_fail(view_, "a tier view is valid only inside the load callback"); }
  ckpt::tiers::TierView* view_;
};

// A step's pieces: (name, dtype, global_shape, offsets, local_shape, data, optimizer[, replica_owner]) where
// data is a uint8 CPU buffer, or (device_address, bytes) for the copier, and replica_owner (default -1) the rank
// that writes a tensor every rank holds (spec/TIERS.md 11.1). The CPU buffers go to keep, which must stay
// referenced until the library has copied them.
std::vector<ckpt::SaveTensor> save_tensors_of(const nb::list& pieces, std::vector<nb::object>& keep) {
  std::vector<ckpt::SaveTensor> tensors;
  for (nb::handle item : pieces) {
    nb::tuple p = nb::cast<nb::tuple>(item);
    if (p.size() != 7 && p.size() != 8)
      fail("a piece is (name, dtype, global_shape, offsets, local_shape, data, optimizer[, replica_owner])");
    ckpt::SaveTensor s;
    s.name = nb::cast<std::string>(p[0]);
    s.dtype = dtype_of(nb::cast<std::string>(p[1]));
    s.global_shape = nb::cast<ckpt::Shape>(p[2]);
    s.offsets = nb::cast<ckpt::Shape>(p[3]);
    s.local_shape = nb::cast<ckpt::Shape>(p[4]);
    s.optimizer = nb::cast<bool>(p[6]);
    if (p.size() == 8) s.replica_owner = nb::cast<std::int32_t>(p[7]);
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
  return tensors;
}

class PyTiers {
 public:
  // Collective over bootstrap, which connects the tiers' gloo communicators (the background's, step()'s skip
  // agreement from the training thread, and with a persistent tier the promoter's), then TieredCheckpointer::create. topology: "RANK NODE
  // [RACK]" lines (parse_topology); empty: every rank's hostname is its node.
  PyTiers(nb::object bootstrap, int rank, int world, const std::string& memory_root, const std::string& persistent,
          std::uint64_t memory_every, std::uint64_t persist_every, int replicas, std::size_t memory_keep, std::size_t persistent_keep,
          const std::string& topology, std::uint32_t chunk_size_log2, std::size_t staging_bytes, std::size_t transfer_block,
          bool check_free_space, bool load_all_shards, nb::object copier, nb::object on_phase, const std::string& when_busy,
          int parity_group, int parity_losses, int background_nice)
      : rank_(rank), world_(world), on_phase_(std::move(on_phase)) {
    ckpt::tiers::TierOptions o;
    o.memory_root = memory_root;
    o.persistent = persistent;
    o.open_objects = object_opener();  // an s3:// persistent tier (spec/TIERS.md 4.5)
    o.memory_every = memory_every;
    o.persist_every = persist_every;
    o.replicas = replicas;
    o.parity_group = parity_group;  // parity groups instead of replicas (spec/TIERS.md 12)
    o.parity_losses = parity_losses;
    o.memory_keep = memory_keep;
    o.persistent_keep = persistent_keep;
    if (!topology.empty()) o.topology = take(ckpt::tiers::parse_topology(topology, world, "topology"));
    o.chunk_size_log2 = chunk_size_log2;
    o.staging_bytes = staging_bytes;
    o.transfer_block = transfer_block;
    o.check_free_space = check_free_space;
    o.load_all_shards = load_all_shards;
    if (when_busy != "skip" && when_busy != "wait")
      throw nb::value_error(("when_busy must be 'skip' or 'wait', not '" + when_busy + "'").c_str());
    o.when_busy = when_busy == "skip" ? ckpt::WhenBusy::skip : ckpt::WhenBusy::wait;
    if (background_nice < 0 || background_nice > 19)
      throw nb::value_error(("background_nice must be 0 to 19, not " + std::to_string(background_nice)).c_str());
    o.background_nice = background_nice;  // spec/ASYNC.md 1: lowered, never raised
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
    PyComm boot(std::move(bootstrap), rank, world);
    tiers_ = take(without_gil([&]() -> ckpt::Result<std::unique_ptr<ckpt::tiers::TieredCheckpointer>> {
      // With a persistent tier, promotions get a thread and communicator of their own (4.4): all in one exchange.
      const bool promoter = o.persist_every > 0;
      CKPT_ASSIGN_OR_RETURN(auto comms, ckpt::GlooComm::connect_many(boot, promoter ? 3 : 2));
      comm_ = std::move(comms[0]);
      control_ = std::move(comms[1]);
      if (!promoter) return ckpt::tiers::TieredCheckpointer::create(storage_fs(), *comm_, *control_, std::move(o));
      promotion_ = std::move(comms[2]);
      return ckpt::tiers::TieredCheckpointer::create(storage_fs(), *comm_, *control_, *promotion_, std::move(o));
    }));
  }
  ~PyTiers() { close(); }

  std::string action(std::uint64_t step) { return ckpt::tiers::tier_action_name(live().action(step)); }

  // pieces as save_tensors_of reads them; the buffers are read before this returns. live: (name, offsets, data, owner)
  // of pieces other ranks save that this rank holds live (a uint8 CPU buffer each): the canary compares them
  // (SaveRequest::add_live_copy, spec/TIERS.md 11.1).
  nb::dict step(std::uint64_t step, const nb::list& pieces, const nb::dict& state, const nb::list& live_pieces) {
    ckpt::tiers::TieredCheckpointer& t = live();
    std::vector<nb::object> keep;  // the buffers, referenced until the staging copy is done
    std::vector<ckpt::SaveTensor> tensors = save_tensors_of(pieces, keep);
    std::vector<ckpt::SaveRequest::LiveCopy> copies;
    for (nb::handle item : live_pieces) {
      nb::tuple p = nb::cast<nb::tuple>(item);
      if (p.size() != 4) fail("a live piece is (name, offsets, data, owner)");
      Bytes1D data = nb::cast<Bytes1D>(p[2]);
      copies.push_back({nb::cast<std::string>(p[0]), nb::cast<ckpt::Shape>(p[1]), data.data(), data.size(), nb::cast<int>(p[3])});
      keep.push_back(nb::borrow(p[2]));
    }
    ckpt::TrainingState training;
    set_state(training, state);
    const ckpt::tiers::StepOutcome outcome = take(without_gil([&] {
      return t.step(step, [&](ckpt::SaveRequest& r) {
        for (auto& s : tensors) r.add(std::move(s));
        for (auto& c : copies) r.add_live_copy(std::move(c.name), c.offsets, c.data, c.size, c.owner);
        r.state() = std::move(training);
      });
    }));
    nb::dict d;
    d["action"] = ckpt::tiers::tier_action_name(outcome.action);
    d["stall_seconds"] = seconds_of(outcome.stall);
    d["skipped"] = outcome.skipped;
    return d;
  }

  void wait() { check(released_on(live(), [](ckpt::tiers::TieredCheckpointer& t) { return t.wait(); })); }

  // Collective. load(view) is called on this thread for each step the job tries, until one loads on every rank.
  nb::dict resume(nb::object load) {
    const ckpt::tiers::Resumed r = take(released_on(live(), [&](ckpt::tiers::TieredCheckpointer& t) {
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
    d["refilling"] = r.refilling;
    d["verified_bytes"] = r.verified_bytes;
    return d;
  }

  nb::dict placement() {
    const ckpt::tiers::Placement& p = live().placement();
    nb::dict d;
    d["replicas"] = p.replicas;
    d["achievable"] = p.achievable;
    d["holders"] = p.holders;
    d["notes"] = p.notes;
    if (const auto& parity = live().parity_placement()) {
      std::vector<std::vector<int>> groups;
      for (const auto& g : parity->groups) groups.push_back(g.ranks);
      d["parity_groups"] = groups;
      d["parity_losses"] = parity->losses;
      for (const auto& n : parity->notes) nb::cast<nb::list>(d["notes"]).append(n);
    }
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
  std::uint64_t steps_skipped() { return live().steps_skipped(); }
  int rank() const { return rank_; }
  int world() const { return world_; }

  // A test's hook (spec/TIERS.md 4.7): holds the GIL, never releasing it, until this rank has recorded
  // `step` replicated or `seconds` passed; true when it was. The background needs no interpreter to get there.
  bool hold_gil_until_replicated(std::uint64_t step, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      for (const auto& r : live().records())
        if (r.event == ckpt::tiers::TierEvent::replicated && r.step == step) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Finishes the work taken (as wait()) and stops the worker; the communicator is not used after.
  void close() {
    if (!tiers_) return;
    nb::gil_scoped_release released;
    tiers_.reset();
  }

 private:
  ckpt::tiers::TieredCheckpointer& live() { return open_or_fail(tiers_, "the tiered checkpointer is closed"); }
  int rank_, world_;
  // Declared before tiers_, so they outlive it.
  std::unique_ptr<ckpt::GlooComm> comm_;       // the background's: replication, resume
  std::unique_ptr<ckpt::GlooComm> control_;    // step()'s skip agreement, from the training thread
  std::unique_ptr<ckpt::GlooComm> promotion_;  // the promoter's, with a persistent tier
  nb::object on_phase_;
  std::unique_ptr<PySnapshotCopier> copier_;
  std::unique_ptr<ckpt::tiers::TieredCheckpointer> tiers_;
};

}  // namespace

void bind_tiers(nb::module_& m) {
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
                    std::size_t, const std::string&, std::uint32_t, std::size_t, std::size_t, bool, bool, nb::object, nb::object,
                    const std::string&, int, int, int>(),
           "comm"_a, "rank"_a, "world"_a, "memory_root"_a, "persistent"_a, "memory_every"_a, "persist_every"_a, "replicas"_a,
           "memory_keep"_a, "persistent_keep"_a, "topology"_a, "chunk_size_log2"_a, "staging_bytes"_a, "transfer_block"_a,
           "check_free_space"_a, "load_all_shards"_a, "copier"_a = nb::none(), "on_phase"_a = nb::none(), "when_busy"_a = "skip",
           "parity_group"_a = 0, "parity_losses"_a = 1, "background_nice"_a = 10)
      .def("action", &PyTiers::action, "step"_a)
      .def("step", &PyTiers::step, "step"_a, "pieces"_a, "state"_a, "live"_a = nb::list())
      .def("wait", &PyTiers::wait)
      .def("resume", &PyTiers::resume, "load"_a)
      .def("placement", &PyTiers::placement)
      .def("topology", &PyTiers::topology)
      .def("records", &PyTiers::records)
      .def_prop_ro("steps_replicated", &PyTiers::steps_replicated)
      .def_prop_ro("steps_persisted", &PyTiers::steps_persisted)
      .def_prop_ro("steps_skipped", &PyTiers::steps_skipped)
      .def_prop_ro("rank", &PyTiers::rank)
      .def_prop_ro("world", &PyTiers::world)
      .def("_hold_gil_until_replicated", &PyTiers::hold_gil_until_replicated, "step"_a, "seconds"_a)
      .def("close", &PyTiers::close);
}

}  // namespace ckpt_bind
