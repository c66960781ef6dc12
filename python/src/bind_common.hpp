// ckpt._ckpt, what every binding file shares (spec/PYTHON.md 1.1, 6.4): the subjects' entry points, the
// error path (a failed Status is thrown as StatusError, which bind_common turns into ckpt.errors'
// exception), the GIL released around library calls, and the conversions between Python values and the
// library's (dtypes, typed metadata values, training state, step records). The binding binds the
// library's own types and calls; every policy stays in the headers. Tensors cross as C-contiguous uint8
// buffers (ckpt/_tensors.py views numpy and torch tensors of any dtype as bytes).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <ckpt/core/error.hpp>
#include <ckpt/core/format.hpp>
#include <ckpt/core/value.hpp>
#include <ckpt/io/object/client.hpp>
#include <ckpt/io/paced_fs.hpp>
#include <ckpt/io/posix_fs.hpp>
#include <ckpt/store/step_reader.hpp>
#include <ckpt/store/training_state.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckpt_bind {

namespace nb = nanobind;
using ckpt::Code;
using ckpt::Status;

// --- The subjects, one file each; ckpt_ext.cpp calls them in this order ----------------------------
void bind_common(nb::module_& m);   // bind_common.cpp: the exception translator, HAVE_S3
void bind_files(nb::module_& m);    // bind_files.cpp: dtypes, xxh3_64, FileWriter, Reader (file, step, store)
void bind_stores(nb::module_& m);   // bind_stores.cpp: Store (open_store), Transaction, SaveRequest, AsyncSaver
void bind_tiers(nb::module_& m);    // bind_tiers.cpp: Tiers over a Python communicator, TierView
void bind_reports(nb::module_& m);  // bind_reports.cpp: verify, inspect, diff, sidecar, repair, as (document, text)
void bind_plan(nb::module_& m);     // bind_plan.cpp: the interval planner (ckpt.plan)

// --- Errors ---------------------------------------------------------------------------------------

// A Status that failed, carried to the exception translator (ckpt/errors.py makes the Python exception).
struct StatusError {
  Status status;
};

inline void check(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <class T>
T take(ckpt::Result<T>&& r) {
  if (!r.ok()) throw StatusError{std::move(r).take_status()};
  return std::move(r).value();
}
// Misuse from Python (a bad argument, a closed object): Code::invalid_argument.
[[noreturn]] inline void fail(const std::string& message) { throw StatusError{ckpt::make_error(Code::invalid_argument, message)}; }

// What a handle holds (a closed object holds nothing): *holder, or the failure `closed` says.
template <class Holder>
auto& open_or_fail(Holder& holder, const char* closed) {
  if (!holder) fail(closed);
  return *holder;
}

// --- The GIL --------------------------------------------------------------------------------------

// f() with the GIL released, for a call that does I/O or hashing and touches no Python object.
template <class F>
decltype(auto) without_gil(F&& f) {
  nb::gil_scoped_release released;
  return f();
}
// f(target) with the GIL released: target is found (and a closed one refused) before the GIL goes.
template <class T, class F>
decltype(auto) released_on(T& target, F&& f) {
  return without_gil([&] { return f(target); });
}

// --- Where paths lead -------------------------------------------------------------------------------

// One PosixFs for every call: it holds no state, and FsRef refers to it. The reports read through it.
inline ckpt::PosixFs& posix_fs() {
  static ckpt::PosixFs fs;
  return fs;
}
// What files, stores and the tiers write and read through: posix_fs(), with the files under one root
// crossing a node's storage link once pace_storage() named them (io/paced_fs.hpp; the goodput benchmark).
inline ckpt::PacedFs& storage_fs() {
  static ckpt::PacedFs fs(posix_fs());
  return fs;
}
// How an "s3://bucket/prefix" path is reached (spec/OBJECT.md 2): the S3 client where the extension was
// built with it (python/CMakeLists.txt), else none, and such a path is Code::unsupported.
ckpt::object::ObjectOpener object_opener();

// --- Conversions ----------------------------------------------------------------------------------

using Bytes1D = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out1D = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A dtype by its format name (safetensors spellings, spec/FORMAT.md 5.2), and back.
ckpt::DType dtype_of(const std::string& name);
std::string dtype_name(ckpt::DType d);

inline nb::bytes to_bytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }
// Bytes Python hands over: bytes, or any C-contiguous uint8 CPU array (numpy, a torch CPU tensor).
std::string bytes_of(const nb::handle& h);
// A list of bytes (ranks' requests and reports) as the library's strings.
std::vector<std::string> strings_of(const std::vector<nb::bytes>& list);

template <class Rep, class Period>
double seconds_of(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<double>(d).count();
}

// Python values <-> typed values (spec/FORMAT.md 5.6): int, float, bool, str, bytes.
ckpt::Value to_value(const nb::handle& h, const std::string& key);
nb::object from_value(const ckpt::Value& v);

// A training state as a dict: step, rng, data_epoch, data_offset, data_state, optimizer_tensors, values;
// set_state takes the same keys (step and optimizer_tensors are the library's and ignored).
nb::dict state_dict(const ckpt::TrainingState& s);
void set_state(ckpt::TrainingState& s, const nb::dict& d);

// A committed step as a dict (step, txn, world_size, dir), or None for no step.
nb::dict step_dict(const ckpt::StepInfo& s);
nb::object step_or_none(const std::optional<ckpt::StepInfo>& s);

}  // namespace ckpt_bind
