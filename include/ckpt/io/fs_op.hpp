// ckpt: names for the operations of the Fs concept (io/fs.hpp), so SimFs can count them and
// FaultFs can choose which ones to count and fail.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/enum_name.hpp"

namespace ckpt {

// One value per member of the Fs concept, in the order fs.hpp lists them.
enum class FsOp : std::uint8_t {
  open,
  close,
  pread,
  pwrite,
  sync,
  sync_data,
  file_size,
  truncate,
  rename,
  unlink,
  mkdir,
  rmdir,
  sync_dir,
  list_dir,
  stat,
  lock,
  map,
};
[[nodiscard]] constexpr EnumBounds<FsOp> enum_bounds(FsOp) noexcept { return {FsOp::open, FsOp::map}; }
inline constexpr std::size_t kFsOpCount = enum_count<FsOp>();

[[nodiscard]] inline const char* fs_op_name(FsOp op) noexcept {
  return enum_name(op, {"open", "close", "pread", "pwrite", "sync", "sync_data", "file_size", "truncate", "rename", "unlink",
                        "mkdir", "rmdir", "sync_dir", "list_dir", "stat", "lock", "map"});
}

// A set of operation kinds, one bit per FsOp.
using FsOpSet = std::uint32_t;
[[nodiscard]] constexpr FsOpSet fs_op_bit(FsOp op) noexcept { return FsOpSet{1} << static_cast<unsigned>(op); }
[[nodiscard]] constexpr bool fs_op_in(FsOpSet set, FsOp op) noexcept { return (set & fs_op_bit(op)) != 0; }

namespace fs_ops {
inline constexpr FsOpSet all = (FsOpSet{1} << kFsOpCount) - 1;
// The durability barriers: fsync, fdatasync and a directory fsync.
inline constexpr FsOpSet syncs = fs_op_bit(FsOp::sync) | fs_op_bit(FsOp::sync_data) | fs_op_bit(FsOp::sync_dir);
// Operations that change file content.
inline constexpr FsOpSet data_writes = fs_op_bit(FsOp::pwrite) | fs_op_bit(FsOp::truncate);
// Operations that can change the directory tree.
inline constexpr FsOpSet namespace_changes = fs_op_bit(FsOp::open) | fs_op_bit(FsOp::rename) | fs_op_bit(FsOp::unlink) |
                                             fs_op_bit(FsOp::mkdir) | fs_op_bit(FsOp::rmdir) | fs_op_bit(FsOp::lock);
// Operations that only read.
inline constexpr FsOpSet reads = fs_op_bit(FsOp::pread) | fs_op_bit(FsOp::file_size) | fs_op_bit(FsOp::list_dir) |
                                 fs_op_bit(FsOp::stat) | fs_op_bit(FsOp::map);
}  // namespace fs_ops

}  // namespace ckpt
