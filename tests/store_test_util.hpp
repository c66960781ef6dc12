// The store settings the tests share: 4 KiB chunks (so a few KiB of tensor spans several), a small
// alignment and a small write buffer, so every path of the writer runs on small files.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ckpt/store/store.hpp>

namespace ckpt_test {

[[nodiscard]] inline ckpt::StoreOptions small_store_options(bool create = true, std::uint32_t alignment_log2 = 6) {
  ckpt::StoreOptions o;
  o.create_if_missing = create;
  o.chunk_size_log2 = 12;
  o.alignment_log2 = alignment_log2;
  o.buffer_size = 4096;
  return o;
}

}  // namespace ckpt_test
