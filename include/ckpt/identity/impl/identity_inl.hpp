// ckpt: definitions for identity.hpp.
#pragma once

#include "../identity.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>

#include "../../core/coding.hpp"
#include "../../core/enum_name.hpp"
#include "../../core/format.hpp"
#include "../../core/hash.hpp"
#include "../../store/path_kind.hpp"
#include "../../shard/shard_reader.hpp"
#include "../../store/sharded.hpp"
#include "../sidecar.hpp"
#include "../../store/step_reader.hpp"
#include "../../store/store.hpp"

namespace ckpt {

CKPT_INLINE std::uint64_t ContentTensor::bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& p : pieces) n += p.length;
  return n;
}

CKPT_INLINE const ContentTensor* Content::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const ContentTensor& t, std::string_view n) { return std::string_view(t.name) < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

namespace detail {

// Strings are a u64 length and the bytes; every integer u64 little-endian (spec/IDENTITY.md 2.1).
CKPT_INLINE void identity_string(Encoder& out, std::string_view s) {
  out.u64(s.size());
  out.bytes(s);
}
CKPT_INLINE void identity_shape(Encoder& out, const Shape& s) {
  for (const auto d : s) out.u64(d);
}
CKPT_INLINE void identity_digest(Encoder& out, const Digest128& d) {
  out.u64(d.high);
  out.u64(d.low);
}
CKPT_INLINE void identity_value(Encoder& out, const Value& v) {
  out.u64(static_cast<std::uint64_t>(v.type()));
  if (v.is_int()) out.u64(static_cast<std::uint64_t>(v.as_int()));
  else if (v.is_float()) {
    std::uint64_t bits = 0;
    const double d = v.as_float();
    std::memcpy(&bits, &d, sizeof bits);
    out.u64(bits);
  } else if (v.is_bool()) out.u64(v.as_bool() ? 1 : 0);
  else identity_string(out, v.is_string() ? v.as_string() : v.as_bytes());
}
CKPT_INLINE std::string identity_value_bytes(const Value& v) {
  Encoder e;
  identity_value(e, v);
  return std::move(e.str());
}
CKPT_INLINE Digest128 digest_of(const std::string& bytes) { return xxh3_128(bytes.data(), bytes.size()); }

// spec/IDENTITY.md 2.2
CKPT_INLINE Digest128 tensor_identity(const ContentTensor& t) {
  Encoder e;
  e.raw(identity::kTensorTag, sizeof identity::kTensorTag);
  e.u32(identity::kVersion);
  identity_string(e, t.name);
  identity_string(e, t.dtype);
  e.u64(t.shape.size());
  identity_shape(e, t.shape);
  e.u64(t.pieces.size());
  for (const auto& p : t.pieces) {
    e.u64(p.offsets.size());
    identity_shape(e, p.offsets);
    identity_shape(e, p.shape);
    e.u64(p.length);
    e.u64(p.chunk_size);
    e.u64(p.chunk_digests.size());
    for (const auto d : p.chunk_digests) e.u64(d);
  }
  return digest_of(e.str());
}

}  // namespace detail

CKPT_INLINE Status seal_content(Content& content) {
  std::sort(content.tensors.begin(), content.tensors.end(),
            [](const ContentTensor& x, const ContentTensor& y) { return x.name < y.name; });
  for (std::size_t i = 1; i < content.tensors.size(); ++i)
    if (content.tensors[i].name == content.tensors[i - 1].name)
      return make_error(Code::invalid_argument, content.description + ": tensor '" + content.tensors[i].name + "' listed twice");
  for (auto& t : content.tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const ContentPiece& x, const ContentPiece& y) {
      return std::tie(x.offsets, x.shape, x.file_offset) < std::tie(y.offsets, y.shape, y.file_offset);
    });
    t.digest = detail::tensor_identity(t);
  }
  // Metadata by key, then by the encoded value, so equal content always encodes alike (spec 2.3).
  std::vector<std::string> encoded;
  for (std::size_t i = 0; i < content.metadata.size(); ++i) encoded.push_back(detail::identity_value_bytes(content.metadata[i].value));
  std::vector<std::size_t> idx(content.metadata.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) {
    return std::tie(content.metadata[x].key, encoded[x]) < std::tie(content.metadata[y].key, encoded[y]);
  });
  std::vector<MetaEntry> sorted;
  Encoder meta;
  meta.raw(identity::kMetadataTag, sizeof identity::kMetadataTag);
  meta.u32(identity::kVersion);
  std::vector<std::size_t> kept;
  for (const auto i : idx) {
    // An entry repeated with the same value (shards of one step) counts once.
    if (!kept.empty() && content.metadata[kept.back()].key == content.metadata[i].key && encoded[kept.back()] == encoded[i]) continue;
    kept.push_back(i);
  }
  meta.u64(kept.size());
  for (const auto i : kept) {
    detail::identity_string(meta, content.metadata[i].key);
    meta.bytes(encoded[i]);
    sorted.push_back(content.metadata[i]);
  }
  content.metadata = std::move(sorted);
  content.metadata_digest = detail::digest_of(meta.str());
  Encoder root;
  root.raw(identity::kRootTag, sizeof identity::kRootTag);
  root.u32(identity::kVersion);
  root.u64(content.tensors.size());
  for (const auto& t : content.tensors) detail::identity_digest(root, t.digest);
  detail::identity_digest(root, content.metadata_digest);
  content.root = detail::digest_of(root.str());
  return Status();
}

CKPT_INLINE void add_index_content(Content& content, const Index& index, std::uint64_t chunk_size, const std::string& file) {
  for (const auto& tr : index.tensors) {
    // Names are unique within one index (spec/FORMAT.md 5.7); a step merges its shards by name.
    content.tensors.emplace_back();
    ContentTensor* t = &content.tensors.back();
    t->name = tr.name;
    t->dtype = std::string(format::dtype_info(tr.dtype)->name);
    t->shape = tr.shape;
    for (std::uint64_t k = 0; k < tr.piece_count; ++k) {
      const PieceRecord& pr = index.pieces[tr.piece_first + k];
      ContentPiece p;
      p.offsets = pr.offsets;
      p.shape = pr.shape;
      p.length = pr.data_length;
      p.chunk_size = chunk_size;
      p.file = file;
      p.file_offset = pr.data_offset;
      for (std::uint64_t c = 0; c < pr.chunk_count; ++c) p.chunk_digests.push_back(index.chunks[pr.chunk_first + c].digest);
      t->pieces.push_back(std::move(p));
    }
  }
  for (const auto& m : index.metadata) content.metadata.push_back(m);
}

namespace detail {

// A step's content from its training state and its shards' indexes (spec/IDENTITY.md 2.4).
[[nodiscard]] CKPT_INLINE Result<Content> step_content(const TrainingState& state, const std::vector<const ShardReader*>& shards,
                                                       std::string description) {
  Content c;
  c.description = std::move(description);
  // Tensors met in several shards are merged by name; a map keeps that linear in the tensor count.
  std::unordered_map<std::string, std::size_t> position;
  for (const ShardReader* shard : shards) {
    Content part;
    add_index_content(part, shard->index(), shard->superblock().chunk_size(), base_name(shard->path()));
    for (auto& t : part.tensors) {
      auto it = position.find(t.name);
      if (it == position.end()) {
        position.emplace(t.name, c.tensors.size());
        c.tensors.push_back(std::move(t));
      } else {
        auto& into = c.tensors[it->second].pieces;
        for (auto& p : t.pieces) into.push_back(std::move(p));
      }
    }
    for (auto& m : part.metadata) c.metadata.push_back(std::move(m));
  }
  // A step that says it has no training state counts none, as the file merged from it (spec/SHARDING.md 6.1).
  if (const auto training = step_training_state(state))
    c.metadata.push_back(MetaEntry{std::string(kTrainingStateKey), Value(Bytes{encode_state_metadata(*training)})});
  CKPT_TRY(seal_content(c));
  return c;
}

// A step directory pinned by its MANIFEST alone (a store's step directory is read the same way).
[[nodiscard]] CKPT_INLINE Result<Content> step_directory_content(FsRef fs, const std::string& dir, std::string description) {
  auto sd = read_step_directory(fs, dir);
  if (!sd.ok()) return sd.status();
  if (!sd->shards_match()) return problem_error(sd->shard_problems.front());
  std::vector<ShardReader> readers;
  readers.reserve(sd->shard_paths.size());
  for (const auto& shard_path : sd->shard_paths) {
    auto reader = ShardReader::open(fs, shard_path);
    if (!reader.ok()) return reader.status();
    readers.push_back(std::move(reader).value());
  }
  std::vector<const ShardReader*> shards;
  for (const auto& r : readers) shards.push_back(&r);
  return step_content(sd->manifest.state, shards, std::move(description));
}

}  // namespace detail

CKPT_INLINE Result<Content> content_of_step(const StepReader& step, std::string description) {
  std::vector<const ShardReader*> shards;
  for (std::size_t i = 0; i < step.shard_count(); ++i) shards.push_back(&step.shard(i));
  return detail::step_content(step.state(), shards, std::move(description));
}

CKPT_INLINE Result<Content> content_of_path(FsRef fs, const std::string& path, const ContentOptions& options) {
  auto kind = classify_path(fs, path);
  if (!kind.ok()) return kind.status();
  if (*kind == PathKind::store) {
    StoreOptions o;
    auto store = Store::open(fs, path, Access::read_only, o);
    if (!store.ok()) return store.status();
    const auto& steps = (*store)->steps();
    if (steps.empty()) return make_error(Code::not_found, path + ": the store has no committed step");
    const StepInfo* chosen = &steps.back();
    if (options.step) {
      chosen = nullptr;
      for (const auto& s : steps)
        if (s.step == *options.step) chosen = &s;
      if (chosen == nullptr) return make_error(Code::not_found, path + ": no committed step " + std::to_string(*options.step));
    }
    // Through its COMMIT record, as every reader of a store's step (spec/JOURNAL.md 7.5).
    auto reader = (*store)->open_step(*chosen);
    if (!reader.ok()) return reader.status();
    return content_of_step(*reader, "step " + std::to_string(chosen->step) + " of " + path);
  }
  if (options.step) return make_error(Code::invalid_argument, path + ": a step number applies to a store only");
  if (*kind == PathKind::step_dir) return detail::step_directory_content(fs, path, "step directory " + path);
  // A .ckpt file is told by its superblock magic; anything else may be a foreign format.
  if (*kind == PathKind::file) {
    unsigned char magic[sizeof format::kSuperblockMagic] = {};
    auto file = fs.open(path, OpenMode::read);
    if (!file.ok()) return file.status();
    auto n = fs.pread(*file, magic, sizeof magic, 0);
    (void)fs.close(*file);
    if (!n.ok()) return n.status();
    if (*n == sizeof magic && std::memcmp(magic, format::kSuperblockMagic, sizeof magic) == 0) {
      auto reader = ShardReader::open(fs, path);
      if (!reader.ok()) return reader.status();
      Content c;
      c.description = "file " + path;
      add_index_content(c, reader->index(), reader->superblock().chunk_size(), base_name(path));
      CKPT_TRY(seal_content(c));
      return c;
    }
  }
  return foreign_content(fs, path, options);
}

// --- Diff ------------------------------------------------------------------------------------------

CKPT_INLINE const char* change_kind_name(ChangeKind k) noexcept { return enum_name(k, {"added", "removed", "changed"}); }

namespace detail {
// Same pieces (offsets, shape, length) and chunk size on both sides: chunk i of piece k means the same bytes.
[[nodiscard]] CKPT_INLINE bool same_layout(const ContentTensor& a, const ContentTensor& b) {
  if (a.pieces.size() != b.pieces.size()) return false;
  for (std::size_t k = 0; k < a.pieces.size(); ++k) {
    const auto& x = a.pieces[k];
    const auto& y = b.pieces[k];
    if (x.offsets != y.offsets || x.shape != y.shape || x.length != y.length || x.chunk_size != y.chunk_size ||
        x.chunk_digests.size() != y.chunk_digests.size())
      return false;
  }
  return true;
}
}  // namespace detail

CKPT_INLINE ContentDiff diff_content(const Content& a, const Content& b) {
  ContentDiff d;
  std::size_t i = 0, j = 0;
  while (i < a.tensors.size() || j < b.tensors.size()) {
    TensorChange ch;
    if (j == b.tensors.size() || (i < a.tensors.size() && a.tensors[i].name < b.tensors[j].name)) {
      ch.kind = TensorChange::Kind::removed;
      ch.name = a.tensors[i].name;
      ch.a = &a.tensors[i++];
      d.tensors.push_back(std::move(ch));
      continue;
    }
    if (i == a.tensors.size() || b.tensors[j].name < a.tensors[i].name) {
      ch.kind = TensorChange::Kind::added;
      ch.name = b.tensors[j].name;
      ch.b = &b.tensors[j++];
      d.tensors.push_back(std::move(ch));
      continue;
    }
    const ContentTensor& x = a.tensors[i++];
    const ContentTensor& y = b.tensors[j++];
    if (x.digest == y.digest) {
      ++d.tensors_unchanged;
      continue;
    }
    ch.name = x.name;
    ch.a = &x;
    ch.b = &y;
    ch.dtype_changed = x.dtype != y.dtype;
    ch.shape_changed = x.shape != y.shape;
    ch.bytes_changed = x.bytes() != y.bytes();
    ch.chunks_comparable = detail::same_layout(x, y);
    if (ch.chunks_comparable)
      for (std::size_t k = 0; k < x.pieces.size(); ++k)
        for (std::size_t c = 0; c < x.pieces[k].chunk_digests.size(); ++c)
          if (x.pieces[k].chunk_digests[c] != y.pieces[k].chunk_digests[c]) {
            const std::uint64_t off = c * x.pieces[k].chunk_size;
            ch.chunks.push_back(ChunkChange{k, c, off, std::min(x.pieces[k].chunk_size, x.pieces[k].length - off)});
          }
    d.tensors.push_back(std::move(ch));
  }
  // Metadata: sealed lists are sorted by key; a key present several times (differing shards) compares
  // as its list of values.
  std::size_t p = 0, q = 0;
  auto key_end = [](const std::vector<MetaEntry>& m, std::size_t from) {
    std::size_t e = from;
    while (e < m.size() && m[e].key == m[from].key) ++e;
    return e;
  };
  // A key only one side has: removed (only in a) or added (only in b), with that side's first value.
  auto one_sided = [&](MetadataChange::Kind kind, const std::vector<MetaEntry>& m, std::size_t& at) {
    MetadataChange mc;
    mc.kind = kind;
    mc.key = m[at].key;
    (kind == MetadataChange::Kind::removed ? mc.a : mc.b) = m[at].value;
    at = key_end(m, at);
    d.metadata.push_back(std::move(mc));
  };
  while (p < a.metadata.size() || q < b.metadata.size()) {
    if (q == b.metadata.size() || (p < a.metadata.size() && a.metadata[p].key < b.metadata[q].key)) {
      one_sided(MetadataChange::Kind::removed, a.metadata, p);
      continue;
    }
    if (p == a.metadata.size() || b.metadata[q].key < a.metadata[p].key) {
      one_sided(MetadataChange::Kind::added, b.metadata, q);
      continue;
    }
    const std::size_t pe = key_end(a.metadata, p), qe = key_end(b.metadata, q);
    bool same = pe - p == qe - q;
    for (std::size_t k = 0; same && k < pe - p; ++k) same = a.metadata[p + k].value == b.metadata[q + k].value;
    if (!same) {
      MetadataChange mc;
      mc.key = a.metadata[p].key;
      mc.a = a.metadata[p].value;
      mc.b = b.metadata[q].value;
      d.metadata.push_back(std::move(mc));
    }
    p = pe;
    q = qe;
  }
  return d;
}

}  // namespace ckpt
