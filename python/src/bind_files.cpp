// ckpt._ckpt, files (spec/PYTHON.md 2.1, 2.2): the format's dtypes and hash, a standalone file written
// as safetensors' save_file writes one, and the one reader of any checkpoint: a file, a step directory,
// a store's step (on a file system or on objects: ckpt::object::open_checkpoint decides).
#include "bind_common.hpp"

#include <ckpt/core/hash.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/store/object_checkpoint.hpp>
#include <ckpt/store/sharded.hpp>

namespace ckpt_bind {
namespace {

using namespace nb::literals;

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
    writer_.emplace(take(without_gil([&] { return ckpt::ShardWriter::create(storage_fs(), path, o); })));
  }
  void add_tensor(const std::string& name, const std::string& dtype, const ckpt::Shape& shape, Bytes1D data) {
    const ckpt::DType d = dtype_of(dtype);
    check(released_on(live(), [&](ckpt::ShardWriter& w) { return w.add_tensor(name, d, shape, data.data(), data.size()); }));
  }
  void set_metadata(const std::string& key, const nb::handle& value) { check(live().set_metadata(key, to_value(value, key))); }
  nb::dict finish() {
    const ckpt::ShardSummary s = take(released_on(live(), [](ckpt::ShardWriter& w) { return w.finish(); }));
    writer_.reset();
    nb::dict d;
    d["path"] = s.path;
    d["file_size"] = s.file_size;
    return d;
  }
  void close() { writer_.reset(); }  // unfinished: the temporary file is removed

 private:
  ckpt::ShardWriter& live() { return open_or_fail(writer_, "the writer is finished or closed"); }
  std::optional<ckpt::ShardWriter> writer_;
};

// A zero-copy view's owner: the mapping lives as long as an array refers to it.
struct View {
  ckpt::Mapping mapping;
};

class Reader {
 public:
  Reader(const std::string& path, std::optional<std::uint64_t> step) {
    ckpt::StepSelector sel;
    sel.step = step;
    cp_.emplace(take(without_gil([&] { return ckpt::object::open_checkpoint(storage_fs(), path, sel, object_opener()); })));
  }
  nb::list tensors() {
    nb::list out;
    for (const auto& t : cp().tensors()) out.append(nb::make_tuple(t.name, dtype_name(t.dtype), t.shape, t.bytes));
    return out;
  }
  nb::dict metadata(const std::string& policy) {
    auto p = take(ckpt::parse_conflict_policy(policy));
    auto entries = take(cp().metadata(p));
    nb::dict d;
    for (const auto& e : entries) d[nb::str(e.key.c_str(), e.key.size())] = from_value(e.value);
    return d;
  }
  nb::object state() {
    if (!cp().state()) return nb::none();
    return state_dict(*cp().state());
  }
  std::optional<std::uint64_t> step() { return cp().step(); }
  std::uint32_t world_size() { return cp().world_size(); }
  std::string description() { return cp().description(); }
  void read_into(const std::string& name, const ckpt::Shape& offsets, const ckpt::Shape& shape, Out1D out) {
    check(released_on(cp(), [&](ckpt::Checkpoint& c) { return c.read_slice(name, offsets, shape, out.data(), out.size()); }));
  }
  // A writable uint8 view of the whole tensor's bytes over a copy-on-write mapping (writes never reach
  // the file), every chunk verified, or None where it is stored in pieces.
  nb::object view(const std::string& name) {
    ckpt::Result<ckpt::Mapping> m =
        released_on(cp(), [&](ckpt::Checkpoint& c) { return c.map_tensor(name, ckpt::MapMode::copy_on_write); });
    if (!m.ok() && m.status().code() == Code::unsupported) return nb::none();
    auto* owner = new View{take(std::move(m))};
    nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<View*>(p); });
    const std::size_t n = owner->mapping.size();
    return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(owner->mapping.writable_data(), {n}, keep));
  }
  void close() { cp_.reset(); }

 private:
  ckpt::Checkpoint& cp() { return open_or_fail(cp_, "the checkpoint is closed"); }
  std::optional<ckpt::Checkpoint> cp_;
};

}  // namespace

void bind_files(nb::module_& m) {
  m.def("dtypes", [] {
    nb::list out;
    for (const auto& d : ckpt::format::kDTypes) out.append(nb::make_tuple(std::string(d.name), d.size));
    return out;
  });
  m.def("xxh3_64", [](Bytes1D data) { return without_gil([&] { return ckpt::xxh3_64(data.data(), data.size()); }); });
  m.attr("DEFAULT_CHUNK_SIZE_LOG2") = ckpt::format::kDefaultChunkSizeLog2;
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
}

}  // namespace ckpt_bind
