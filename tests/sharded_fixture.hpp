// Shared by tests/test_sharded.cpp (threads) and tests/mpi/*.cpp (MPI ranks): a set of tensors split
// among ranks in every way spec/SHARDING.md allows (uneven, along an inner dimension, a 2-D grid,
// a rank holding nothing, replicated, scalar), deterministic bytes, and helpers to cut a global tensor
// into a rank's slice and to put slices back together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ckpt/store/sharded.hpp>
#include <ckpt/store/store.hpp>

namespace sharded_fixture {

using ckpt::Slice;
using ckpt::DType;
using ckpt::Shape;
using ckpt::Status;

enum class Split { dim, grid, replicated };

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
  Split split;
  std::size_t dim = 0;
  bool optimizer = false;  // listed as optimizer state (by rank 1 only, to prove the lists are merged)
};

inline std::vector<TensorSpec> specs() {
  return {
      {"emb", DType::F32, {10, 6}, Split::dim, 0, false},         // 10 rows over 4 ranks: 3, 3, 2, 2
      {"attn.w", DType::BF16, {5, 7, 3}, Split::dim, 1, false},    // inner dimension: 2, 2, 2, 1
      {"tiny", DType::I64, {3}, Split::dim, 0, false},             // rank 3 holds nothing
      {"grid", DType::U8, {6, 9}, Split::grid, 0, false},          // 2 x 2 blocks: 3x5, 3x4, 3x5, 3x4
      {"norm", DType::F32, {6}, Split::replicated, 0, false},      // every rank holds it, rank 0 writes it
      {"step_count", DType::I64, {}, Split::replicated, 0, false}, // a scalar
      {"adam.m/emb", DType::F32, {10, 6}, Split::dim, 0, true},
  };
}

[[nodiscard]] inline std::size_t element_size(DType d) { return ckpt::format::dtype_info(d)->size; }

[[nodiscard]] inline std::uint64_t elements(const Shape& shape) {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// The whole tensor's bytes at a step: a function of name, step and position only.
[[nodiscard]] inline std::vector<unsigned char> global_bytes(const TensorSpec& t, std::uint64_t step) {
  std::vector<unsigned char> out(elements(t.shape) * element_size(t.dtype));
  std::uint64_t h = 1469598103934665603ull ^ step;
  for (const char c : t.name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  for (std::size_t i = 0; i < out.size(); ++i) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    out[i] = static_cast<unsigned char>(h + i);
  }
  return out;
}

// Calls f(global element index, slice element index) for every element of the slice, row-major.
template <class F>
void for_each_element(const Shape& shape, const Slice& slice, F f) {
  const std::size_t rank = shape.size();
  const std::uint64_t n = elements(slice.shape);
  if (n == 0) return;
  Shape at(rank, 0);
  for (std::uint64_t k = 0; k < n; ++k) {
    std::uint64_t global = 0;
    for (std::size_t d = 0; d < rank; ++d) global = global * shape[d] + slice.offsets[d] + at[d];
    f(global, k);
    for (std::size_t d = rank; d-- > 0;) {
      if (++at[d] < slice.shape[d]) break;
      at[d] = 0;
    }
  }
}

[[nodiscard]] inline std::vector<unsigned char> extract(const std::vector<unsigned char>& global, const TensorSpec& t,
                                                        const Slice& slice) {
  const std::size_t es = element_size(t.dtype);
  std::vector<unsigned char> part(elements(slice.shape) * es);
  for_each_element(t.shape, slice, [&](std::uint64_t g, std::uint64_t k) {
    for (std::size_t b = 0; b < es; ++b) part[k * es + b] = global[g * es + b];
  });
  return part;
}

inline void place(std::vector<unsigned char>& global, const TensorSpec& t, const Slice& slice, const std::vector<unsigned char>& part) {
  const std::size_t es = element_size(t.dtype);
  for_each_element(t.shape, slice, [&](std::uint64_t g, std::uint64_t k) {
    for (std::size_t b = 0; b < es; ++b) global[g * es + b] = part[k * es + b];
  });
}

// The slice a rank of `world` saves. The grid needs 4 ranks; other worlds split it along dimension 0.
[[nodiscard]] inline Slice save_box(const TensorSpec& t, std::uint32_t world, std::uint32_t rank) {
  if (t.split == Split::replicated) return Slice{Shape(t.shape.size(), 0), t.shape};
  if (t.split == Split::grid && world == 4) {
    const auto rows = ckpt::split_range(t.shape[0], 2, rank / 2);
    const auto cols = ckpt::split_range(t.shape[1], 2, rank % 2);
    return Slice{{rows.first, cols.first}, {rows.second, cols.second}};
  }
  ckpt::SplitChoice choice;
  choice.dim = t.split == Split::dim ? t.dim : 0;
  return ckpt::split_slice(t.shape, choice, world, rank);
}

// The slice a rank of `world` loads: an even split along dimension 0, whatever the saved layout was.
[[nodiscard]] inline Slice load_box(const TensorSpec& t, std::uint32_t world, std::uint32_t rank) {
  return ckpt::split_slice(t.shape, ckpt::SplitChoice{}, world, rank);  // a scalar: every rank reads it
}

// Writes this rank's part of every tensor into an open transaction.
[[nodiscard]] inline Status save_rank(ckpt::Transaction& tx, std::uint32_t world, std::uint32_t rank, std::uint64_t step) {
  for (const auto& t : specs()) {
    const auto global = global_bytes(t, step);
    if (t.split == Split::replicated) {
      CKPT_TRY(tx.add_replicated_tensor(t.name, t.dtype, t.shape, global.data(), global.size(), 0));
      continue;
    }
    const Slice slice = save_box(t, world, rank);
    if (elements(slice.shape) == 0) continue;
    const auto part = extract(global, t, slice);
    CKPT_TRY(tx.begin_piece(t.name, t.dtype, t.shape, slice.offsets, slice.shape));
    // Two writes per piece, so streaming is exercised.
    const std::size_t half = part.size() / 2;
    CKPT_TRY(tx.write(part.data(), half));
    CKPT_TRY(tx.write(part.data() + half, part.size() - half));
    CKPT_TRY(tx.end_piece());
    if (t.optimizer && rank == 1 % world) tx.state().optimizer_tensors.push_back(t.name);
  }
  tx.state().rng = "rng of rank " + std::to_string(rank);
  tx.state().values["world"] = static_cast<std::int64_t>(world);
  return Status();
}

}  // namespace sharded_fixture
