// ckpt: checks that the pieces of every tensor of a step, gathered from all of its shard files,
// cover the tensor exactly once: one dtype and global shape, every piece inside it, no two pieces
// sharing an element, no element in no piece (spec/SHARDING.md 4). Problems name the tensor, the
// ranks and the slice.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../core/enum_name.hpp"
#include "../core/error.hpp"
#include "../shard/index.hpp"

namespace ckpt {

// One piece of a global tensor, as a rank wrote it.
struct GlobalPiece {
  std::string tensor;
  DType dtype = DType::U8;
  Shape global_shape;
  Shape offsets;  // global offsets of the piece's first element
  Shape shape;    // local shape
  std::uint32_t rank = 0;  // the rank (or shard position) that wrote it
};

enum class CoverageIssue : std::uint8_t {
  dtype_mismatch,  // two pieces disagree on the dtype
  shape_mismatch,  // two pieces disagree on the global shape (rank included)
  out_of_bounds,   // a piece's slice leaves the global shape, or the shape overflows 64 bits
  overlap,         // two pieces share an element
  gap,             // an element is in no piece
  replica_mismatch,  // ranks declared a replicated tensor differently, or its owner did not declare it
};
[[nodiscard]] constexpr EnumBounds<CoverageIssue> enum_bounds(CoverageIssue) noexcept {
  return {CoverageIssue::dtype_mismatch, CoverageIssue::replica_mismatch};
}
[[nodiscard]] const char* coverage_issue_name(CoverageIssue issue) noexcept;

struct CoverageProblem {
  CoverageIssue issue = CoverageIssue::gap;
  std::string tensor;
  // overlap: the shared slice; gap: a slice no piece touches; out_of_bounds: the piece; mismatch: the later piece.
  Shape offsets, shape;
  std::uint32_t rank = 0;        // the piece at fault (gap: none, 0)
  std::uint32_t other_rank = 0;  // overlap and mismatch: the piece it conflicts with
  std::string message;           // one line naming tensor, issue, ranks and slice
};

// A tensor every rank that declares it holds identically; only `owner` writes it (spec/SHARDING.md 3.2).
struct ReplicaDecl {
  std::string tensor;
  DType dtype = DType::U8;
  Shape shape;
  std::uint32_t owner = 0;   // the rank that writes it
  std::uint64_t digest = 0;  // XXH3-64 of the declaring rank's bytes
  std::uint32_t rank = 0;    // the declaring rank
};

// At most one problem per tensor (the first found in the order above), tensors in name order.
// Overlap is found by a sweep (find_overlapping_slices), not by comparing all pairs; a gap is located
// by splitting the tensor at piece boundaries and descending only into halves whose covered volume
// falls short, so the slice reported touches no piece.
[[nodiscard]] std::vector<CoverageProblem> check_coverage(const std::vector<GlobalPiece>& pieces);

// A step that holds one rank's shard of a larger step (a memory-tier store, spec/TIERS.md 2.1) names it in
// its training state under this key (a string "RANK/WORLD"): its pieces must still be in bounds and
// disjoint, but they may leave gaps, which the other ranks' shards fill.
inline constexpr std::string_view kPartialStepKey = "ckpt.partial_step";
// The problems a partial step may not have: all but gaps.
[[nodiscard]] inline std::vector<CoverageProblem> without_gaps(std::vector<CoverageProblem> problems) {
  std::vector<CoverageProblem> out;
  for (auto& p : problems)
    if (p.issue != CoverageIssue::gap) out.push_back(std::move(p));
  return out;
}
// Declarations of one name must agree on dtype, shape, owner and digest, and the owner must declare it.
// One problem per tensor at most, in name order.
[[nodiscard]] std::vector<CoverageProblem> check_replicas(const std::vector<ReplicaDecl>& declarations);
// Appends the pieces of every tensor of one shard file's index, tagged with `rank`.
void append_index_pieces(const Index& index, std::uint32_t rank, std::vector<GlobalPiece>& out);
// ok when problems is empty; otherwise `code` with a message naming up to 8 problems after `context`.
[[nodiscard]] Status coverage_status(const std::vector<CoverageProblem>& problems, Code code, const std::string& context);

}  // namespace ckpt

#if !CKPT_DECLARATIONS_ONLY
#include "impl/coverage_inl.hpp"
#endif
