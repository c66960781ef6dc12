// ckpt._ckpt: the shared helpers of bind_common.hpp, the exception translator, and the one place that
// includes the S3 client (the other binding files reach it through object_opener()).
#include "bind_common.hpp"

#include <ckpt/core/problem.hpp>
#if CKPT_HAVE_S3
#include <ckpt/io/object/s3_client.hpp>
#endif

namespace ckpt_bind {

ckpt::object::ObjectOpener object_opener() {
#if CKPT_HAVE_S3
  return [](const std::string& url) { return ckpt::object::open_s3_url(url); };
#else
  return {};
#endif
}

ckpt::DType dtype_of(const std::string& name) {
  const auto* info = ckpt::format::dtype_by_name(name);
  if (info == nullptr) fail("unknown dtype '" + name + "'");
  return info->dtype;
}
std::string dtype_name(ckpt::DType d) { return std::string(ckpt::format::dtype_info(d)->name); }

std::string bytes_of(const nb::handle& h) {
  if (nb::isinstance<nb::bytes>(h)) {
    nb::bytes b = nb::borrow<nb::bytes>(h);
    return std::string(b.c_str(), b.size());
  }
  Bytes1D a = nb::cast<Bytes1D>(h);
  return std::string(reinterpret_cast<const char*>(a.data()), a.size());
}

std::vector<std::string> strings_of(const std::vector<nb::bytes>& list) {
  std::vector<std::string> out;
  for (const auto& b : list) out.emplace_back(b.c_str(), b.size());
  return out;
}

ckpt::Value to_value(const nb::handle& h, const std::string& key) {
  if (nb::isinstance<nb::bool_>(h)) return ckpt::Value(nb::cast<bool>(h));
  if (nb::isinstance<nb::int_>(h)) return ckpt::Value(nb::cast<std::int64_t>(h));
  if (nb::isinstance<nb::float_>(h)) return ckpt::Value(nb::cast<double>(h));
  if (nb::isinstance<nb::str>(h)) return ckpt::Value(nb::cast<std::string>(h));
  if (nb::isinstance<nb::bytes>(h)) return ckpt::Value(ckpt::Bytes{bytes_of(h)});
  fail("metadata '" + key + "': a value must be int, float, bool, str or bytes, not " + std::string(nb::type_name(h.type()).c_str()));
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
  d["rng"] = to_bytes(s.rng);
  d["data_epoch"] = s.data.epoch;
  d["data_offset"] = s.data.offset;
  d["data_state"] = to_bytes(s.data.state);
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
      fail("training state has no field '" + key + "'");
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
nb::object step_or_none(const std::optional<ckpt::StepInfo>& s) {
  if (!s) return nb::none();
  return step_dict(*s);
}

namespace {

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

}  // namespace

void bind_common(nb::module_& m) {
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
  m.attr("HAVE_S3") = static_cast<bool>(object_opener());  // s3:// paths reach an S3 client
}

}  // namespace ckpt_bind
