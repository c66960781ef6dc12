// ckpt: sidecar digests for a checkpoint in a foreign format (spec/IDENTITY.md 4). A small file beside
// a safetensors file, a Hugging Face set, a DCP directory or a GGUF file records XXH3-64 chunk digests
// of every byte of every file it consists of, tensor data and headers alike; the foreign files are
// never modified. Afterwards every byte is checked against it and damage is named by tensor, chunk and
// byte range as for a .ckpt file; its root digest (identity.hpp) pins the checkpoint.
//
//   header (64 bytes) | files | tensors | metadata | u64 XXH3-64 of everything before it | "CKPTSEND"
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../interop/foreign.hpp"
#include "identity.hpp"
#include "../io/fs.hpp"
#include "../core/problem.hpp"
#include "../core/sidecar_format.hpp"

namespace ckpt {


// Bytes of a file that belong to no tensor (headers, padding, DCP's .metadata): covered by digests too.
struct SidecarRegion {
  std::uint64_t offset = 0, length = 0;
  std::vector<std::uint64_t> chunk_digests;
};

struct SidecarFile {
  std::string name;  // relative to the checkpoint's directory
  std::uint64_t size = 0;
  std::vector<SidecarRegion> regions;  // in offset order; with the tensors' pieces they tile the file
};

struct Sidecar {
  ForeignFormat format = ForeignFormat::safetensors;
  std::uint32_t chunk_size_log2 = 20;
  std::vector<SidecarFile> files;
  // Tensors (pieces name their file, ContentPiece::file) and the format's metadata as string values;
  // sealed, so content.root is the checkpoint's root digest.
  Content content;
  [[nodiscard]] std::uint64_t chunk_size() const noexcept { return std::uint64_t{1} << chunk_size_log2; }
};

// Where the sidecar of a foreign checkpoint lies: its primary file + ".ckptsum" (spec/IDENTITY.md 4.1).
[[nodiscard]] std::string sidecar_path(const ForeignCheckpoint& checkpoint);

// Reads every byte of every file once and records its chunk digests. A checkpoint with structure
// problems is refused (Code::corrupt): digests of damage would pin the damage.
[[nodiscard]] Result<Sidecar> build_sidecar(FsRef fs, const ForeignCheckpoint& checkpoint, std::uint32_t chunk_size_log2,
                                            const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});
[[nodiscard]] std::string encode_sidecar(const Sidecar& sidecar);
// Untrusted bytes: digest, magic, version, every count and length checked before use (spec 4.3).
[[nodiscard]] Result<Sidecar> decode_sidecar(const unsigned char* bytes, std::size_t size, const std::string& path);
[[nodiscard]] Result<Sidecar> read_sidecar(FsRef fs, const std::string& path);  // not_found when absent
// Written under a temporary name, fsynced, renamed, the directory fsynced: complete or absent.
[[nodiscard]] Status write_sidecar(FsRef fs, const Sidecar& sidecar, const std::string& path);

struct ForeignVerifyReport {
  std::string path;
  std::optional<ForeignFormat> format;   // unset when not even the format could be told
  std::optional<ForeignCheckpoint> checkpoint;  // unset when its header could not be decoded
  std::string sidecar;                   // the sidecar used, empty when there is none
  bool data_checked = false;             // every byte was hashed against the sidecar
  std::optional<Digest128> root;         // the sidecar's root digest
  std::uint64_t chunks_checked = 0, bytes_checked = 0;
  std::vector<Problem> problems;
  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};

// Checks a foreign checkpoint: its structure (what the format allows), and, when its sidecar exists,
// every byte against it. Damage goes in the report; the Status fails only when nothing could be read.
[[nodiscard]] Result<ForeignVerifyReport> verify_foreign(FsRef fs, const std::string& path,
                                                         const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

// foreign_content (declared in identity.hpp, defined here): a foreign checkpoint's content from its
// sidecar, or (options.read_foreign_data) by hashing its data now.

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/sidecar_inl.hpp"
#endif
