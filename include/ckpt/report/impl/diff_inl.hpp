// ckpt: definitions of report/diff.hpp (spec/REPORTS.md 5).
#pragma once

#include <utility>

#include "../../store/open_store.hpp"
#include "../../store/store.hpp"
#include "../../store/sharded.hpp"
#include "../steps.hpp"
#include "../diff.hpp"

namespace ckpt::report {

namespace detail {

[[nodiscard]] inline json side_json(const std::string& path, const Content& c) {
  return {{"path", path}, {"description", c.description}, {"root_digest", c.root.hex()}, {"tensor_count", c.tensors.size()}};
}

[[nodiscard]] inline json optional_value_json(const std::optional<Value>& v) {
  if (!v) return nullptr;
  return {{"type", value_type_name(v->type())}, {"value", metadata_value_json(*v)}};
}

[[nodiscard]] inline json diff_json(const ContentDiff& d) {
  json tensors = json::array();
  for (const auto& ch : d.tensors) {
    json t = {{"name", ch.name}, {"change", change_kind_name(ch.kind)}};
    auto side = [](const ContentTensor* x) -> json {
      if (x == nullptr) return nullptr;
      return {{"dtype", x->dtype}, {"shape", shape_json(x->shape)}, {"bytes", x->bytes()}, {"digest", x->digest.hex()}};
    };
    t["a"] = side(ch.a);
    t["b"] = side(ch.b);
    if (ch.kind == TensorChange::Kind::changed) {
      t["dtype_changed"] = ch.dtype_changed;
      t["shape_changed"] = ch.shape_changed;
      t["bytes_changed"] = ch.bytes_changed;
      t["chunks_comparable"] = ch.chunks_comparable;
      json chunks = json::array();
      for (const auto& c : ch.chunks)
        chunks.push_back({{"piece", c.piece}, {"chunk", c.chunk}, {"offset", c.offset}, {"length", c.length}});
      t["chunks"] = std::move(chunks);
      if (ch.chunks_comparable) {
        std::uint64_t total = 0;
        for (const auto& p : ch.a->pieces) total += p.chunk_digests.size();
        t["chunk_count"] = total;
      }
    }
    tensors.push_back(std::move(t));
  }
  json metadata = json::array();
  for (const auto& m : d.metadata)
    metadata.push_back({{"key", m.key}, {"change", change_kind_name(m.kind)}, {"a", optional_value_json(m.a)}, {"b", optional_value_json(m.b)}});
  return {{"identical", d.identical()}, {"tensors_unchanged", d.tensors_unchanged}, {"tensors", std::move(tensors)}, {"metadata", std::move(metadata)}};
}

// Keeps the tensors whose names match one of the globs (all when there are none); metadata only
// when no glob is given, since a glob asks about tensors.
inline void select_tensors(Content& c, const std::vector<std::string>& globs) {
  if (globs.empty()) return;
  std::vector<ContentTensor> kept;
  for (auto& t : c.tensors)
    for (const auto& g : globs)
      if (glob_match(g, t.name)) {
        kept.push_back(std::move(t));
        break;
      }
  c.tensors = std::move(kept);
  c.metadata.clear();
}

}  // namespace detail

CKPT_INLINE Result<DiffReport> diff_paths(FsRef fs, const std::string& a_path, const std::string& b_path, const DiffOptions& options) {
  DiffReport out;
  auto load = [&](const std::string& path, const std::optional<std::uint64_t>& step) -> Result<Content> {
    if (object::is_object_url(path)) {
      // A store on objects: its step's manifest and shard indexes, through the commit object (spec/OBJECT.md 4).
      StoreOptions o;
      o.open_objects = options.open_objects;
      CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open_store(path, Access::read_only, o));
      StepSelection selection;
      selection.step = step;
      selection.latest = !step;
      CKPT_ASSIGN_OR_RETURN(auto selected, select_steps(*store, selection));
      CKPT_ASSIGN_OR_RETURN(StepReader reader, store->open_step(selected.front()));
      return content_of_step(reader, "step " + std::to_string(selected.front().step) + " of " + path);
    }
    ContentOptions content_options;
    content_options.step = step;
    auto c = content_of_path(fs, path, content_options);
    if (c.ok() || c.status().code() != Code::unsupported) return c;
    // A foreign checkpoint without a sidecar: its digests are computed now, by reading it.
    out.notes.push_back(path + " has no sidecar; its data was read and hashed");
    out.data_read = true;
    content_options.read_foreign_data = true;
    return content_of_path(fs, path, content_options);
  };
  CKPT_ASSIGN_OR_RETURN(out.a, load(a_path, options.step_a));
  CKPT_ASSIGN_OR_RETURN(out.b, load(b_path, options.step_b));
  detail::select_tensors(out.a, options.tensors);
  detail::select_tensors(out.b, options.tensors);
  out.diff = diff_content(out.a, out.b);
  out.doc = detail::diff_json(out.diff);
  out.doc["a"] = detail::side_json(a_path, out.a);
  out.doc["b"] = detail::side_json(b_path, out.b);
  out.doc["data_read"] = out.data_read;
  out.doc["selected"] = options.tensors;
  out.doc["report"] = "diff";
  out.doc["subject"] = out.kind;
  out.doc["exit_code"] = out.exit_code();
  return out;
}

}  // namespace ckpt::report
