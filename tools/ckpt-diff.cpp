// ckpt-diff: which tensors two checkpoints add, remove or change (dtype, shape, bytes) and, for a
// changed one, which chunks, from their digests alone (spec/IDENTITY.md 3). Either side may be a .ckpt
// file, a step directory, a store's step, or a foreign checkpoint (with a sidecar, or read and hashed).
// Exit status: 0 identical, 1 they differ, 2 usage error or unreadable path (diff(1)'s convention).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/report/diff.hpp>

#include "cli.hpp"

namespace {

using ckpt::tools::json;
constexpr const char* kTool = "ckpt-diff";

[[nodiscard]] std::string shape_text(const ckpt::Shape& s) { return ckpt::shape_string(s); }

[[nodiscard]] std::string value_text(const std::optional<ckpt::Value>& v) {
  if (!v) return "-";
  const json j = ckpt::tools::metadata_value_json(*v);
  std::string text = j.is_string() ? j.get<std::string>() : j.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return ckpt::tools::printable(text);
}

void print_diff(const ckpt::Content& a, const ckpt::Content& b, const ckpt::ContentDiff& d) {
  std::printf("a: %s (root %s)\nb: %s (root %s)\n", ckpt::tools::printable(a.description).c_str(), a.root.hex().c_str(),
              ckpt::tools::printable(b.description).c_str(), b.root.hex().c_str());
  for (const auto& ch : d.tensors) {
    const std::string name = ckpt::tools::printable(ch.name);
    if (ch.kind == ckpt::TensorChange::Kind::added) {
      std::printf("added    %s  %s %s\n", name.c_str(), ch.b->dtype.c_str(), shape_text(ch.b->shape).c_str());
      continue;
    }
    if (ch.kind == ckpt::TensorChange::Kind::removed) {
      std::printf("removed  %s  %s %s\n", name.c_str(), ch.a->dtype.c_str(), shape_text(ch.a->shape).c_str());
      continue;
    }
    std::string what;
    if (ch.dtype_changed) what += " dtype " + ch.a->dtype + " -> " + ch.b->dtype + ";";
    if (ch.shape_changed) what += " shape " + shape_text(ch.a->shape) + " -> " + shape_text(ch.b->shape) + ";";
    if (ch.bytes_changed) what += " bytes " + std::to_string(ch.a->bytes()) + " -> " + std::to_string(ch.b->bytes()) + ";";
    if (ch.chunks_comparable) {
      std::uint64_t total = 0;
      for (const auto& p : ch.a->pieces) total += p.chunk_digests.size();
      what += " " + std::to_string(ch.chunks.size()) + " of " + std::to_string(total) + " chunks differ";
    } else if (!ch.dtype_changed && !ch.shape_changed && !ch.bytes_changed) {
      what += " content differs (split into different pieces or chunk sizes: chunks cannot be lined up)";
    } else if (!what.empty()) {
      what.pop_back();
    }
    std::printf("changed  %s %s\n", name.c_str(), what.c_str());
    const std::size_t shown = std::min<std::size_t>(ch.chunks.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& c = ch.chunks[i];
      std::printf("         piece %zu chunk %llu: bytes [%llu, %llu) of the piece\n", c.piece, static_cast<unsigned long long>(c.chunk),
                  static_cast<unsigned long long>(c.offset), static_cast<unsigned long long>(c.offset + c.length));
    }
    if (ch.chunks.size() > shown) std::printf("         ... and %zu more chunks (--json lists every one)\n", ch.chunks.size() - shown);
  }
  for (const auto& m : d.metadata)
    std::printf("metadata %-7s %s: %s -> %s\n", ckpt::change_kind_name(m.kind), ckpt::tools::printable(m.key).c_str(), value_text(m.a).c_str(),
                value_text(m.b).c_str());
  std::printf("%s: %zu tensor%s changed, added or removed, %zu unchanged, %zu metadata key%s differ\n",
              d.identical() ? "identical" : "different", d.tensors.size(), d.tensors.size() == 1 ? "" : "s", d.tensors_unchanged,
              d.metadata.size(), d.metadata.size() == 1 ? "" : "s");
}

}  // namespace

constexpr const char* kAbout = R"(Compares two checkpoints by their digests: which tensors were added, removed or changed
(dtype, shape, bytes) and, for a changed tensor split the same way on both sides, exactly which
chunks differ. Nothing but indexes and manifests is read when both sides record digests: a
.ckpt file, a step directory, a store (its latest step, or --step-a/--step-b N; also
s3://bucket/prefix), or a foreign
checkpoint (safetensors, Hugging Face set, DCP, GGUF) with a sidecar (ckpt-verify
--write-sidecar). A foreign checkpoint without one is read and hashed (said on stderr).

--tensors GLOB (repeatable) compares only the tensors whose names match, '*' any run of
characters, '?' one: "did fine-tuning touch the frozen layers?" is
  ckpt-diff base.ckpt tuned.ckpt --tensors 'model.embed*' --tensors 'model.layers.0.*'

Exit status: 0 identical, 1 they differ, 2 usage error or unreadable path.)";

int main(int argc, char** argv) {
  return ckpt::cli::run_tool(kTool, kAbout, [&](CLI::App& app) {
    std::string a_path, b_path;
    bool as_json = false;
    std::optional<std::uint64_t> step_a, step_b;
    std::vector<std::string> globs;
    app.add_option("A", a_path, "the first checkpoint")->required();
    app.add_option("B", b_path, "the second checkpoint")->required();
    app.add_flag("--json", as_json, "print one JSON document");
    app.add_option("--step-a", step_a, "A is a store: compare this step (default: its latest)");
    app.add_option("--step-b", step_b, "B is a store: compare this step (default: its latest)");
    app.add_option("--tensors", globs, "compare only tensors whose names match this glob (repeatable)");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::PosixFs fs;
    ckpt::report::DiffOptions options;
    options.step_a = step_a;
    options.step_b = step_b;
    options.tensors = globs;
    options.open_objects = ckpt::cli::object_opener();
    auto d = ckpt::report::diff_paths(fs, a_path, b_path, options);
    if (!d.ok()) return ckpt::cli::report(kTool, d.status());
    for (const auto& note : d->notes) std::fprintf(stderr, "%s: note: %s\n", kTool, ckpt::tools::printable(note).c_str());
    if (as_json) ckpt::cli::print_json(d->doc);
    else print_diff(d->a, d->b, d->diff);
    return d->exit_code();
  });
}
