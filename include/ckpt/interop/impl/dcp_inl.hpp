// ckpt: definitions for the PyTorch DCP reader declared in foreign.hpp (spec/FOREIGN.md 4).
#pragma once

#include "../foreign.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "../../core/format.hpp"
#include "../pickle.hpp"
#include "../../core/problem.hpp"

namespace ckpt {

namespace dcp {
inline constexpr const char* kMetadataName = ".metadata";
// A .metadata larger than this is refused before it is read (spec/FOREIGN.md 4.3).
inline constexpr std::uint64_t kMaxMetadataBytes = std::uint64_t{256} << 20;
// Problems kept per checkpoint; the last one says how many more were found.
inline constexpr std::size_t kMaxProblems = 256;
// What the reader keeps (names, paths, shapes, problems) is at most this many bytes per byte of
// .metadata, plus kDecodedBase: a memoized string or object costs 2 bytes each time it is named again.
inline constexpr std::uint64_t kDecodedPerByte = 16;
inline constexpr std::uint64_t kDecodedBase = std::uint64_t{1} << 20;
inline constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
inline constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";
}  // namespace dcp

namespace detail {

// torch dtype names (the globals torch.float32, ...) with a ckpt spelling (spec/FORMAT.md 4.1).
[[nodiscard]] CKPT_INLINE std::string dcp_dtype_name(const std::string& torch_name) {
  static constexpr std::pair<const char*, const char*> kNames[] = {
      {"float32", "F32"},       {"float", "F32"},          {"float64", "F64"},       {"double", "F64"},
      {"float16", "F16"},       {"half", "F16"},           {"bfloat16", "BF16"},     {"int8", "I8"},
      {"int16", "I16"},         {"short", "I16"},          {"int32", "I32"},         {"int", "I32"},
      {"int64", "I64"},         {"long", "I64"},           {"uint8", "U8"},          {"uint16", "U16"},
      {"uint32", "U32"},        {"uint64", "U64"},         {"bool", "BOOL"},         {"float8_e4m3fn", "F8_E4M3"},
      {"float8_e5m2", "F8_E5M2"}, {"float8_e8m0fnu", "F8_E8M0"}, {"complex64", "C64"}, {"cfloat", "C64"},
  };
  for (const auto& [torch, ours] : kNames)
    if (torch_name == torch) return ours;
  return torch_name;
}

// The fields of a pickled dataclass: BUILD's state as a dict, or a (dict or None, slots dict) pair.
class DcpFields {
 public:
  explicit DcpFields(const PickleValue& object) : object_(object) {
    const PickleValue state = object.state();
    if (state.kind() == PickleKind::dict) {
      dicts_[0] = state;
    } else if (state.kind() == PickleKind::tuple && state.size() == 2) {
      dicts_[0] = state.at(0);
      dicts_[1] = state.at(1);
    }
    dicts_[2] = object.kwargs();
  }
  [[nodiscard]] PickleValue get(std::string_view name) const {
    for (const auto& d : dicts_)
      if (d.kind() == PickleKind::dict)
        if (PickleValue v = d.get(name); v.valid()) return v;
    return {};
  }
  [[nodiscard]] const PickleValue& object() const noexcept { return object_; }

 private:
  PickleValue object_;
  PickleValue dicts_[3];
};

struct DcpStorage {
  std::string relative_path;
  std::uint64_t offset = 0, length = 0;
  std::vector<std::string> transforms;  // transform_descriptors, empty when absent
  std::uint64_t at = 0;                 // byte offset of the entry in .metadata
  bool path_ok = true;
};

// fqn and chunk offsets (none for a bytes entry): a MetadataIndex as DCP compares it (index is a hint).
using DcpKey = std::pair<std::string, std::optional<Shape>>;

class DcpReader {
 public:
  DcpReader(FsRef fs, std::string path) : fs_(fs) {
    out_.format = ForeignFormat::dcp;
    out_.path = path;
    std::string dir = path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (base_name(dir) == dcp::kMetadataName) dir = parent_path(dir);  // the path to .metadata itself
    out_.dir = dir;
    out_.primary = join_path(dir, dcp::kMetadataName);
  }

  [[nodiscard]] Result<ForeignCheckpoint> run() {
    std::string bytes;
    CKPT_TRY(read_metadata(bytes));
    budget_ = dcp::kDecodedPerByte * bytes.size() + dcp::kDecodedBase;
    auto root = decode_pickle(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out_.primary);
    if (!root.ok()) return root.status();
    bytes.clear();
    bytes.shrink_to_fit();
    CKPT_TRY(interpret(*root));
    CKPT_TRY(collect_files());
    build_tensors();
    check_files();
    if (dropped_ > 0)
      out_.problems.push_back(structure_problem(Code::corrupt, "layout", out_.primary, "", -1, 0, 0, ProblemMessage::given,
                                                out_.primary + ": " + std::to_string(dropped_) + " more problems not listed", "", ""));
    return std::move(out_);
  }

 private:
  [[nodiscard]] Status corrupt_at(const PickleValue& at, const std::string& what, const std::string& expected, const PickleValue& found) const {
    return make_error(Code::corrupt, out_.primary + ": offset " + std::to_string(at.offset()) + ": " + what + ": expected " + expected +
                                         ", found " + (found.valid() ? pickle_kind_name(found.kind()) + std::string(" ") + pickle_repr(found, 80)
                                                                     : std::string("nothing")));
  }

  [[nodiscard]] Status read_metadata(std::string& bytes) {
    auto info = fs_.stat(out_.primary);
    if (!info.ok()) {
      if (info.status().code() == Code::not_found)
        return make_error(Code::not_found, out_.primary + ": not found: a DCP checkpoint directory holds .metadata");
      return info.status();
    }
    if (info->kind != EntryKind::file)
      return make_error(Code::corrupt, out_.primary + ": expected a regular file, found " +
                                           (info->kind == EntryKind::directory ? "a directory" : info->kind == EntryKind::symlink ? "a symlink" : "a special file"));
    auto f = fs_.open(out_.primary, OpenMode::read);
    if (!f.ok()) return f.status();
    ScopedFile file(fs_, *f);
    auto size = fs_.file_size(*f);
    if (!size.ok()) return size.status().with_context(out_.primary);
    if (*size > dcp::kMaxMetadataBytes)
      return make_error(Code::corrupt, out_.primary + ": offset 0: expected at most " + std::to_string(dcp::kMaxMetadataBytes) +
                                           " bytes of metadata (decoder limit), found " + std::to_string(*size));
    bytes.resize(static_cast<std::size_t>(*size));
    CKPT_TRY(read_exact(fs_, *f, out_.primary, bytes.data(), bytes.size(), 0));
    return file.close();
  }

  // A torch.Size (REDUCE of torch.Size with one tuple), or a plain tuple or list, of non-negative ints.
  [[nodiscard]] Status shape_of(const PickleValue& v, const std::string& what, Shape& out) const {
    PickleValue seq = v;
    if (v.kind() == PickleKind::object && v.is_object_of("torch", "Size")) seq = v.args().at(0);
    if (seq.kind() != PickleKind::tuple && seq.kind() != PickleKind::list)
      return corrupt_at(v.valid() ? v : anchor_, what, "a torch.Size", v);
    if (seq.size() > format::kMaxRank)
      return corrupt_at(v, what, "at most " + std::to_string(format::kMaxRank) + " dimensions", v);
    out.clear();
    for (std::size_t i = 0; i < seq.size(); ++i) {
      const auto d = seq.at(i).as_int();
      if (!d || *d < 0) return corrupt_at(v, what + "[" + std::to_string(i) + "]", "a non-negative int", seq.at(i));
      out.push_back(static_cast<std::uint64_t>(*d));
    }
    return Status();
  }
  [[nodiscard]] Status u64_of(const PickleValue& v, const std::string& what, std::uint64_t& out) const {
    const auto n = v.as_int();
    if (!n || *n < 0) return corrupt_at(v.valid() ? v : anchor_, what, "a non-negative int", v);
    out = static_cast<std::uint64_t>(*n);
    return Status();
  }

  [[nodiscard]] Status interpret(const PickleValue& root) {
    anchor_ = root;
    if (!root.is_object_of(dcp::kMetadataModule, "Metadata"))
      return corrupt_at(root, "the pickled object", "a torch.distributed.checkpoint.metadata.Metadata", root.kind() == PickleKind::object ? root.callable() : root);
    const DcpFields fields(root);
    const PickleValue entries = fields.get("state_dict_metadata");
    if (entries.kind() != PickleKind::dict) return corrupt_at(root, "Metadata.state_dict_metadata", "a dict", entries);
    CKPT_TRY(interpret_storage(fields.get("storage_data")));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const PickleValue key = entries.key(i), entry = entries.value(i);
      const std::string* fqn = key.as_string();
      if (fqn == nullptr) return corrupt_at(key, "a state_dict_metadata key", "a str", key);
      anchor_ = entry;
      CKPT_TRY(charge(sizeof(DcpEntry) + fqn->size(), entry, "state_dict_metadata['" + *fqn + "']"));
      DcpEntry e;
      e.at = entry.offset();
      if (entry.is_object_of(dcp::kMetadataModule, "BytesStorageMetadata")) {
        e.bytes = true;
      } else if (entry.is_object_of(dcp::kMetadataModule, "TensorStorageMetadata")) {
        CKPT_TRY(interpret_tensor(*fqn, entry, e));
      } else {
        return corrupt_at(entry, "state_dict_metadata['" + *fqn + "']", "a TensorStorageMetadata or BytesStorageMetadata",
                          entry.kind() == PickleKind::object ? entry.callable() : entry);
      }
      entries_[*fqn] = std::move(e);  // a repeated key: the last, as Python keeps it
    }
    interpret_metadata(fields);
    return Status();
  }

  struct DcpChunk {
    Shape offsets, sizes;
    std::uint64_t at = 0;
  };
  struct DcpEntry {
    bool bytes = false;
    std::string dtype;
    Shape shape;
    std::vector<DcpChunk> chunks;
    std::uint64_t at = 0;
  };

  [[nodiscard]] Status interpret_tensor(const std::string& fqn, const PickleValue& entry, DcpEntry& e) {
    const DcpFields fields(entry);
    const std::string where = "tensor '" + fqn + "'";
    const PickleValue properties = fields.get("properties");
    if (!properties.is_object_of(dcp::kMetadataModule, "TensorProperties"))
      return corrupt_at(entry, where + " properties", "a TensorProperties", properties);
    // TensorProperties pickles its state as a tuple (dtype, layout, ...); older versions as a dict.
    const PickleValue state = properties.state();
    const PickleValue dtype = state.kind() == PickleKind::tuple ? state.at(0) : DcpFields(properties).get("dtype");
    if (dtype.kind() != PickleKind::global || *dtype.module() != "torch")
      return corrupt_at(properties, where + " dtype", "a torch dtype (torch.float32, ...)", dtype);
    e.dtype = dcp_dtype_name(*dtype.name());
    CKPT_TRY(shape_of(fields.get("size"), where + " size", e.shape));
    const PickleValue chunks = fields.get("chunks");
    if (chunks.kind() != PickleKind::list && chunks.kind() != PickleKind::tuple)
      return corrupt_at(entry, where + " chunks", "a list of ChunkStorageMetadata", chunks);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const PickleValue chunk = chunks.at(i);
      const std::string cwhere = where + " chunk " + std::to_string(i);
      if (!chunk.is_object_of(dcp::kMetadataModule, "ChunkStorageMetadata"))
        return corrupt_at(chunk, cwhere, "a ChunkStorageMetadata", chunk);
      anchor_ = chunk;
      const DcpFields cf(chunk);
      DcpChunk c;
      c.at = chunk.offset();
      CKPT_TRY(shape_of(cf.get("offsets"), cwhere + " offsets", c.offsets));
      CKPT_TRY(shape_of(cf.get("sizes"), cwhere + " sizes", c.sizes));
      CKPT_TRY(charge(sizeof(DcpChunk) + 16 * (c.offsets.size() + c.sizes.size()), chunk, cwhere));  // and the piece's copy
      e.chunks.push_back(std::move(c));
    }
    return Status();
  }

  [[nodiscard]] Status interpret_storage(const PickleValue& storage) {
    if (!storage.valid() || storage.is_none()) return Status();  // every chunk then lacks its entry (a problem each)
    if (storage.kind() != PickleKind::dict) return corrupt_at(anchor_, "Metadata.storage_data", "a dict of MetadataIndex to _StorageInfo", storage);
    for (std::size_t i = 0; i < storage.size(); ++i) {
      const PickleValue key = storage.key(i), info = storage.value(i);
      anchor_ = key;
      if (!key.is_object_of(dcp::kMetadataModule, "MetadataIndex"))
        return corrupt_at(key, "a storage_data key", "a MetadataIndex", key);
      const DcpFields kf(key);
      const PickleValue fqn = kf.get("fqn");
      if (fqn.as_string() == nullptr) return corrupt_at(key, "MetadataIndex.fqn", "a str", fqn);
      DcpKey k{*fqn.as_string(), std::nullopt};
      const PickleValue offsets = kf.get("offset");
      if (offsets.valid() && !offsets.is_none()) {
        Shape s;
        CKPT_TRY(shape_of(offsets, "MetadataIndex '" + k.first + "' offset", s));
        k.second = std::move(s);
      }
      if (!info.is_object_of(dcp::kFilesystemModule, "_StorageInfo"))
        return corrupt_at(info, "storage_data['" + k.first + "']", "a torch.distributed.checkpoint.filesystem._StorageInfo", info);
      anchor_ = info;
      const DcpFields vf(info);
      DcpStorage s;
      s.at = info.offset();
      const PickleValue rel = vf.get("relative_path");
      if (rel.as_string() == nullptr) return corrupt_at(info, "_StorageInfo.relative_path", "a str", rel);
      s.relative_path = *rel.as_string();
      CKPT_TRY(u64_of(vf.get("offset"), "_StorageInfo.offset", s.offset));
      CKPT_TRY(u64_of(vf.get("length"), "_StorageInfo.length", s.length));
      const PickleValue transforms = vf.get("transform_descriptors");
      if (transforms.valid() && !transforms.is_none()) {
        if (transforms.kind() != PickleKind::list && transforms.kind() != PickleKind::tuple)
          return corrupt_at(info, "_StorageInfo.transform_descriptors", "a list of str", transforms);
        for (std::size_t t = 0; t < transforms.size(); ++t) {
          const std::string* d = transforms.at(t).as_string();
          if (d == nullptr) return corrupt_at(info, "_StorageInfo.transform_descriptors", "a list of str", transforms);
          s.transforms.push_back(*d);
        }
      }
      s.path_ok = safe_relative_name(s.relative_path);
      std::uint64_t kept = sizeof(DcpStorage) + 2 * k.first.size() + s.relative_path.size();  // the fqn again where a chunk uses it
      for (const auto& t : s.transforms) kept += t.size();
      CKPT_TRY(charge(kept + 8 * (k.second ? k.second->size() : 0), info, "storage_data['" + k.first + "']"));
      storage_[std::move(k)] = std::move(s);  // a repeated key: the last, as Python's dict keeps it
    }
    return Status();
  }

  // A name inside the directory: not empty, not absolute, no "." or ".." component, no NUL.
  [[nodiscard]] static bool safe_relative_name(const std::string& name) {
    if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
    std::size_t start = 0;
    while (start <= name.size()) {
      const std::size_t slash = std::min(name.find('/', start), name.size());
      const std::string_view part(name.data() + start, slash - start);
      if (part.empty() || part == "." || part == "..") return false;
      start = slash + 1;
    }
    return true;
  }

  // Text for DCP's own fields (spec/FOREIGN.md 4.5).
  void interpret_metadata(const DcpFields& fields) {
    auto text = [](const PickleValue& v) -> std::string {
      if (const std::string* s = v.as_string()) return *s;
      // pathlib paths pickle as REDUCE(pathlib.PosixPath, ('/', 'a', ...)): the parts joined.
      if (v.kind() == PickleKind::object && v.callable().kind() == PickleKind::global && *v.callable().module() == "pathlib") {
        std::string joined;
        const PickleValue args = v.args();
        for (std::size_t i = 0; i < args.size(); ++i) {
          const std::string* part = args.at(i).as_string();
          if (part == nullptr) return pickle_repr(v, 200);
          if (!joined.empty() && joined.back() != '/') joined += '/';
          joined += *part;
        }
        return joined;
      }
      return pickle_repr(v, 200);
    };
    auto add = [&](const std::string& key, std::string value) {
      if (value.size() > 256) value = value.substr(0, 240) + "... (" + std::to_string(value.size()) + " bytes)";
      out_.metadata.emplace_back(key, std::move(value));
    };
    if (const PickleValue version = fields.get("version"); version.valid() && !version.is_none()) add("dcp.version", text(version));
    const PickleValue meta = fields.get("storage_meta");
    if (meta.kind() == PickleKind::object) {
      const DcpFields mf(meta);
      for (const char* field : {"checkpoint_id", "save_id", "load_id"})
        if (const PickleValue v = mf.get(field); v.valid() && !v.is_none()) add(std::string("dcp.") + field, text(v));
      const PickleValue modules = mf.get("modules");
      if (modules.size() > 0) {
        std::string joined;
        for (std::size_t i = 0; i < modules.size(); ++i) joined += (i ? ", " : "") + text(modules.at(i));
        add("dcp.modules", joined);
      }
    }
    std::set<std::string> transforms;
    for (const auto& [key, s] : storage_) {
      std::string joined;
      for (const auto& t : s.transforms) joined += (joined.empty() ? "" : ",") + t;
      transforms.insert(joined.empty() ? std::string("none") : joined);
    }
    if (!transforms.empty() && !(transforms.size() == 1 && *transforms.begin() == "none")) {
      std::string joined;
      for (const auto& t : transforms) joined += (joined.empty() ? "" : "; ") + t;
      add("dcp.transforms", joined);
    }
    std::sort(out_.metadata.begin(), out_.metadata.end());
  }

  [[nodiscard]] Status collect_files() {
    std::set<std::string> names{dcp::kMetadataName};
    for (const auto& [key, s] : storage_)
      if (s.path_ok) names.insert(s.relative_path);
    for (const auto& name : names) {
      ForeignFile f;
      f.name = name;
      auto info = fs_.stat(join_path(out_.dir, name));
      if (info.ok() && info->kind == EntryKind::file) {
        f.size = info->size;
      } else if (info.ok() || info.status().code() == Code::not_found || through_file(name)) {
        f.present = false;
        if (info.ok()) not_regular_[name] = info->kind;
      } else {
        return info.status();
      }
      file_index_[name] = out_.files.size();
      out_.files.push_back(std::move(f));
    }
    return Status();
  }

  // A name one of whose folders is a file (".metadata/x"): stat fails with ENOTDIR, which an Fs reports
  // as io, but it is a file the directory does not hold, not a failure to read one.
  [[nodiscard]] bool through_file(const std::string& name) const {
    for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1)) {
      auto folder = fs_.stat(join_path(out_.dir, name.substr(0, slash)));
      if (folder.ok() && folder->kind != EntryKind::directory) return true;
    }
    return false;
  }

  // Charges bytes the reader keeps against budget_ (dcp::kDecodedPerByte).
  [[nodiscard]] Status charge(std::uint64_t bytes, const PickleValue& at, const std::string& what) {
    decoded_ += bytes;
    if (decoded_ <= budget_) return Status();
    return make_error(Code::corrupt, out_.primary + ": offset " + std::to_string(at.offset()) + ": " + what.substr(0, 200) +
                                         ": expected at most " + std::to_string(budget_) + " bytes decoded (decoder limit: " +
                                         std::to_string(dcp::kDecodedPerByte) + " per byte of metadata), found more");
  }

  void add_problem(Problem p) {
    decoded_ += p.message.size() + p.tensor.size() + p.file.size() + p.expected.size() + p.found.size();
    if (out_.problems.size() >= dcp::kMaxProblems || decoded_ > budget_) {
      ++dropped_;
      return;
    }
    out_.problems.push_back(std::move(p));
  }

  // The piece for one storage entry, or a problem when it has none or names a file outside the directory.
  [[nodiscard]] bool piece_for(const std::string& fqn, std::int64_t chunk, const DcpKey& key, std::uint64_t at, ForeignPiece& piece) {
    const auto it = storage_.find(key);
    if (it == storage_.end()) {
      add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, chunk, at, 0, ProblemMessage::at_piece,
                                    "its bytes are in no file",
                                    "a storage_data entry for MetadataIndex('" + fqn + "'" +
                                        (key.second ? ", " + shape_string(*key.second) : std::string()) + ")",
                                    "none"));
      return false;
    }
    const DcpStorage& s = it->second;
    if (!s.path_ok) {
      add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, chunk, s.at, 0, ProblemMessage::at_piece,
                                    "refused: it would be read outside " + out_.dir,
                                    "a file name inside the directory (relative, no '.' or '..' component)",
                                    "relative_path '" + s.relative_path + "'"));
      return false;
    }
    piece.file = file_index_.at(s.relative_path);
    piece.offset = s.offset;
    piece.length = s.length;
    used_[it->first] = {fqn, chunk};
    return true;
  }

  void build_tensors() {
    for (const auto& [fqn, e] : entries_) {
      ForeignTensor t;
      t.name = fqn;
      if (e.bytes) {
        t.dtype = "bytes";
        ForeignPiece piece;
        if (piece_for(fqn, 0, DcpKey{fqn, std::nullopt}, e.at, piece)) {
          piece.offsets = {0};
          piece.shape = {piece.length};
          t.shape = {piece.length};
          t.pieces.push_back(std::move(piece));
        } else {
          t.shape = {0};
        }
        out_.tensors.push_back(std::move(t));
        continue;
      }
      t.dtype = e.dtype;
      t.shape = e.shape;
      check_chunks(fqn, e);
      for (std::size_t i = 0; i < e.chunks.size(); ++i) {
        const DcpChunk& c = e.chunks[i];
        ForeignPiece piece;
        if (!piece_for(fqn, static_cast<std::int64_t>(i), DcpKey{fqn, c.offsets}, c.at, piece)) continue;
        piece.offsets = c.offsets;
        piece.shape = c.sizes;
        t.pieces.push_back(std::move(piece));
      }
      out_.tensors.push_back(std::move(t));
    }
  }

  // Chunks inside the tensor, none sharing an element, together covering it (DCP reads each element
  // from the chunk that holds it).
  void check_chunks(const std::string& fqn, const DcpEntry& e) {
    std::vector<SliceRef> slices;
    std::vector<std::size_t> positions;
    bool in_bounds = true;
    for (std::size_t i = 0; i < e.chunks.size(); ++i) {
      const DcpChunk& c = e.chunks[i];
      bool ok = c.offsets.size() == e.shape.size() && c.sizes.size() == e.shape.size();
      for (std::size_t d = 0; ok && d < e.shape.size(); ++d)
        ok = c.offsets[d] <= e.shape[d] && c.sizes[d] <= e.shape[d] - c.offsets[d];
      if (!ok) {
        in_bounds = false;
        add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, static_cast<std::int64_t>(i), c.at, 0,
                                      ProblemMessage::at_piece, "chunk outside the tensor",
                                      "a chunk inside the tensor's shape " + shape_string(e.shape),
                                      "offsets " + shape_string(c.offsets) + " sizes " + shape_string(c.sizes)));
        continue;
      }
      slices.push_back(SliceRef{&c.offsets, &c.sizes});
      positions.push_back(i);
    }
    if (const auto hit = find_overlapping_slices(slices, e.shape.size())) {
      const DcpChunk& a = e.chunks[positions[hit->first]];
      const DcpChunk& b = e.chunks[positions[hit->second]];
      add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, static_cast<std::int64_t>(positions[hit->second]),
                                    b.at, 0, ProblemMessage::at_piece, "overlapping chunks", "chunks sharing no element",
                                    "chunk " + std::to_string(positions[hit->first]) + " (offsets " + shape_string(a.offsets) + " sizes " +
                                        shape_string(a.sizes) + ") and chunk " + std::to_string(positions[hit->second]) + " (offsets " +
                                        shape_string(b.offsets) + " sizes " + shape_string(b.sizes) + ") overlap"));
      return;
    }
    if (!in_bounds) return;
    // Inside the tensor and disjoint: they cover it exactly when their volumes add up to its own.
    std::uint64_t total = 0, covered = 0;
    if (!shape_elements(e.shape, total)) {
      add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, -1, e.at, 0, ProblemMessage::at_piece, "tensor too large",
                                    "a shape of at most 2^64 elements", shape_string(e.shape)));
      return;
    }
    for (const auto& s : slices) {
      std::uint64_t n = 0;
      if (!shape_elements(*s.shape, n)) n = 0;  // cannot overflow: inside a shape that does not
      covered += n;
    }
    if (covered != total)
      add_problem(structure_problem(Code::corrupt, "layout", out_.primary, fqn, -1, e.at, 0, ProblemMessage::at_piece,
                                    "tensor not covered by its chunks",
                                    "chunks covering all " + std::to_string(total) + " elements of " + shape_string(e.shape),
                                    std::to_string(covered) + " elements in " + std::to_string(e.chunks.size()) + " chunks"));
  }

  // Each .distcp file: present, and its items packed from offset 0 to its end with no hole, overlap
  // or trailing bytes, as FileSystemWriter writes them one after another (spec/FOREIGN.md 4.4).
  void check_files() {
    struct Item {
      std::uint64_t offset, length;
      std::string fqn;
      std::int64_t chunk;
    };
    std::map<std::string, std::vector<Item>> per_file;
    for (const auto& [key, s] : storage_) {
      if (!s.path_ok) continue;
      const auto used = used_.find(key);
      // An entry no chunk refers to still occupies its bytes: it is counted, named by its key.
      const std::string fqn = used != used_.end() ? used->second.first : key.first;
      const std::int64_t chunk = used != used_.end() ? used->second.second : -1;
      per_file[s.relative_path].push_back(Item{s.offset, s.length, fqn, chunk});
    }
    for (auto& [name, items] : per_file) {
      const ForeignFile& f = out_.files[file_index_.at(name)];
      const std::string path = join_path(out_.dir, name);
      if (!f.present) {
        const auto odd = not_regular_.find(name);
        add_problem(structure_problem(Code::corrupt, "missing", path, items.front().fqn, items.front().chunk, 0, 0,
                                      ProblemMessage::at_piece, "file missing",
                                      "a regular file holding " + std::to_string(items.size()) + " items",
                                      odd == not_regular_.end()                 ? "no file"
                                      : odd->second == EntryKind::directory     ? "a directory"
                                      : odd->second == EntryKind::symlink       ? "a symlink"
                                                                                : "a special file"));
        continue;
      }
      std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
      });
      std::uint64_t cursor = 0;
      const Item* previous = nullptr;
      std::size_t past_end = 0;
      std::optional<Problem> truncated;
      for (const Item& it : items) {
        if (it.offset > f.size || it.length > f.size - it.offset) {
          // A truncated copy or a crash mid-save (torchtitan #4011): the file ends inside or before the item.
          if (past_end++ == 0)
            truncated = structure_problem(Code::incomplete, "layout", path, it.fqn, it.chunk, it.offset, it.length,
                                          ProblemMessage::at_piece, "item runs past the end of the file",
                                          "a file of at least " + std::to_string(it.offset) + " + " + std::to_string(it.length) + " bytes",
                                          std::to_string(f.size) + " bytes");
          continue;
        }
        if (it.offset < cursor) {
          add_problem(structure_problem(Code::corrupt, "layout", path, it.fqn, it.chunk, it.offset, it.length, ProblemMessage::at_piece,
                                        "overlapping items", "an item starting at " + std::to_string(cursor) + " or later",
                                        "it overlaps tensor '" + previous->fqn + "'" +
                                            (previous->chunk >= 0 ? " chunk " + std::to_string(previous->chunk) : std::string()) + " [" +
                                            std::to_string(previous->offset) + ", " + std::to_string(previous->offset + previous->length) + ")"));
        } else if (it.offset > cursor) {
          add_problem(structure_problem(Code::corrupt, "layout", path, "", -1, cursor, it.offset - cursor, ProblemMessage::at_piece, "hole",
                                        "the next item at " + std::to_string(cursor),
                                        "an item at " + std::to_string(it.offset) + " (tensor '" + it.fqn + "'): " +
                                            std::to_string(it.offset - cursor) + " bytes belong to no item"));
        }
        if (it.offset + it.length >= cursor) {
          cursor = it.offset + it.length;
          previous = &it;
        }
      }
      if (past_end == 0 && cursor < f.size)
        add_problem(structure_problem(Code::corrupt, "layout", path, "", -1, cursor, f.size - cursor, ProblemMessage::at_piece,
                                      "trailing bytes", "the file to end at " + std::to_string(cursor),
                                      std::to_string(f.size) + " bytes: " + std::to_string(f.size - cursor) +
                                          " trailing bytes belong to no item"));
      if (truncated) {
        if (past_end > 1) truncated->message += " (" + std::to_string(past_end) + " items of this file end past it)";
        add_problem(std::move(*truncated));
      }
    }
  }

  FsRef fs_;
  ForeignCheckpoint out_;
  PickleValue anchor_;  // the value errors point at when a field is missing
  std::map<std::string, DcpEntry> entries_;
  std::map<DcpKey, DcpStorage> storage_;
  std::map<DcpKey, std::pair<std::string, std::int64_t>> used_;  // storage entries chunks refer to
  std::map<std::string, std::size_t> file_index_;
  std::map<std::string, EntryKind> not_regular_;
  std::size_t dropped_ = 0;
  std::uint64_t budget_ = 0, decoded_ = 0;  // the most bytes kept, and those kept so far (charge)
};

}  // namespace detail

[[nodiscard]] CKPT_INLINE Result<ForeignCheckpoint> open_dcp(FsRef fs, const std::string& dir) {
  detail::DcpReader reader(fs, dir);
  return reader.run();
}

}  // namespace ckpt
