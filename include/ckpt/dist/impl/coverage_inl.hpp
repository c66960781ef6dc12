// ckpt: definitions for coverage.hpp (spec/SHARDING.md 4).
#pragma once

#include "../coverage.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <string_view>
#include <utility>

namespace ckpt {

CKPT_INLINE const char* coverage_issue_name(CoverageIssue issue) noexcept {
  return enum_name(issue, {"dtype_mismatch", "shape_mismatch", "out_of_bounds", "overlap", "gap", "replica_mismatch"});
}

namespace detail {

[[nodiscard]] CKPT_INLINE std::string dtype_label(DType d) {
  const auto* info = format::dtype_info(d);
  return info != nullptr ? std::string(info->name) : "dtype " + std::to_string(static_cast<int>(d));
}

[[nodiscard]] CKPT_INLINE std::string region_string(const Shape& offsets, const Shape& shape) {
  return "offsets " + shape_string(offsets) + " shape " + shape_string(shape);
}

// Elements of a slice known to fit in 64 bits (it lies inside a tensor whose count fits).
[[nodiscard]] CKPT_INLINE std::uint64_t box_volume(const Shape& shape) noexcept {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// Finds a slice inside [lo, lo + len) that no piece touches, given that the pieces do not overlap:
// true with it in found_lo, found_len, false when the pieces cover [lo, lo + len).
// Splits at the median piece boundary of the dimension with the most boundaries inside the slice and
// descends only into a half whose covered volume falls short, so each level halves the boundaries.
[[nodiscard]] CKPT_INLINE bool find_uncovered_slice(const std::vector<const GlobalPiece*>& candidates, const Shape& lo,
                                                    const Shape& len, Shape& found_lo, Shape& found_len) {
  const std::size_t rank = lo.size();
  std::vector<const GlobalPiece*> inside;
  std::uint64_t covered = 0;
  for (const GlobalPiece* p : candidates) {
    std::uint64_t vol = 1;
    for (std::size_t d = 0; d < rank && vol != 0; ++d) {
      const std::uint64_t a = std::max(lo[d], p->offsets[d]);
      const std::uint64_t b = std::min(lo[d] + len[d], p->offsets[d] + p->shape[d]);
      vol = b > a ? vol * (b - a) : 0;
    }
    if (vol == 0) continue;
    inside.push_back(p);
    covered += vol;  // no overlap, so at most the slice volume
  }
  if (inside.empty()) return found_lo = lo, found_len = len, true;
  if (covered == box_volume(len)) return false;
  std::size_t split_dim = rank;
  std::vector<std::uint64_t> best;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::uint64_t> cuts;
    for (const GlobalPiece* p : inside) {
      const std::uint64_t a = p->offsets[d], b = p->offsets[d] + p->shape[d];
      if (a > lo[d] && a < lo[d] + len[d]) cuts.push_back(a);
      if (b > lo[d] && b < lo[d] + len[d]) cuts.push_back(b);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    if (cuts.size() > best.size()) best = std::move(cuts), split_dim = d;
  }
  // No boundary inside: every piece spans the slice, so one piece would cover it all. Unreachable, but
  // report the slice rather than loop.
  if (split_dim == rank) return found_lo = lo, found_len = len, true;
  const std::uint64_t cut = best[best.size() / 2];
  Shape left_len = len, right_lo = lo, right_len = len;
  left_len[split_dim] = cut - lo[split_dim];
  right_lo[split_dim] = cut;
  right_len[split_dim] = lo[split_dim] + len[split_dim] - cut;
  return find_uncovered_slice(inside, lo, left_len, found_lo, found_len) ||
         find_uncovered_slice(inside, right_lo, right_len, found_lo, found_len);
}

// True with the tensor's first problem in `problem` (spec/SHARDING.md 4), false when its pieces cover it
// exactly once. (Out parameters rather than std::optional: header-only parse time, spec/LAYOUT.md 5.)
[[nodiscard]] CKPT_INLINE bool check_tensor_coverage(const std::vector<const GlobalPiece*>& pieces, CoverageProblem& problem) {
  const GlobalPiece& first = *pieces.front();
  problem = CoverageProblem();
  problem.tensor = first.tensor;
  const std::string who = "tensor '" + first.tensor + "': ";
  auto piece_label = [](const GlobalPiece& p) {
    return "the piece of rank " + std::to_string(p.rank) + " at " + region_string(p.offsets, p.shape);
  };
  // One dtype and one global shape across every rank (spec/SHARDING.md 4.1).
  for (const GlobalPiece* p : pieces) {
    if (p->dtype != first.dtype || p->global_shape != first.global_shape) {
      const bool dtype = p->dtype != first.dtype;
      problem.issue = dtype ? CoverageIssue::dtype_mismatch : CoverageIssue::shape_mismatch;
      problem.offsets = p->offsets;
      problem.shape = p->shape;
      problem.rank = p->rank;
      problem.other_rank = first.rank;
      problem.message = who + (dtype ? "dtype " + dtype_label(p->dtype) + " on rank " + std::to_string(p->rank) + ", " +
                                           dtype_label(first.dtype) + " on rank " + std::to_string(first.rank)
                                     : "global shape " + shape_string(p->global_shape) + " on rank " + std::to_string(p->rank) +
                                           ", " + shape_string(first.global_shape) + " on rank " + std::to_string(first.rank));
      return true;
    }
  }
  const Shape& global = first.global_shape;
  const std::size_t rank = global.size();
  std::uint64_t total = 0;
  bool bounded = shape_elements(global, total) && rank <= format::kMaxRank;
  for (const GlobalPiece* p : pieces) {
    bool inside = bounded && p->offsets.size() == rank && p->shape.size() == rank;
    for (std::size_t d = 0; inside && d < rank; ++d)
      inside = p->offsets[d] <= global[d] && p->shape[d] <= global[d] - p->offsets[d];
    if (!inside) {
      problem.issue = CoverageIssue::out_of_bounds;
      problem.offsets = p->offsets;
      problem.shape = p->shape;
      problem.rank = p->rank;
      problem.message = who + piece_label(*p) + " does not fit in the global shape " + shape_string(global) +
                        (bounded ? "" : " (which overflows 64 bits or exceeds rank 64)");
      return true;
    }
  }
  std::vector<SliceRef> slices;
  slices.reserve(pieces.size());
  for (const GlobalPiece* p : pieces) slices.push_back(SliceRef{&p->offsets, &p->shape});
  if (const auto hit = find_overlapping_slices(slices, rank)) {
    const GlobalPiece& a = *pieces[hit->first];
    const GlobalPiece& b = *pieces[hit->second];
    problem.issue = CoverageIssue::overlap;
    problem.offsets.resize(rank);
    problem.shape.resize(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      problem.offsets[d] = std::max(a.offsets[d], b.offsets[d]);
      problem.shape[d] = std::min(a.offsets[d] + a.shape[d], b.offsets[d] + b.shape[d]) - problem.offsets[d];
    }
    problem.rank = b.rank;
    problem.other_rank = a.rank;
    problem.message = who + piece_label(a) + " and " + piece_label(b) + " overlap in " +
                      region_string(problem.offsets, problem.shape);
    return true;
  }
  // No overlap and every piece inside: the volumes add up to the element count exactly when nothing is missing.
  std::uint64_t covered = 0;
  for (const GlobalPiece* p : pieces) covered += box_volume(p->shape);
  if (covered == total) return false;
  problem.issue = CoverageIssue::gap;
  Shape gap_lo, gap_len;
  if (find_uncovered_slice(pieces, Shape(rank, 0), global, gap_lo, gap_len))
    problem.offsets = std::move(gap_lo), problem.shape = std::move(gap_len);
  problem.message = who + "its pieces hold " + std::to_string(covered) + " of " + std::to_string(total) +
                    " elements; no piece holds " + region_string(problem.offsets, problem.shape);
  return true;
}

// Pieces or declarations in tensor name order, each tensor's in rank order with ties in input order, so
// "first" means the lowest rank and reports are deterministic: (name ordinal << 32 | rank, position).
// Sorts of views and of pairs that other definitions instantiate too, rather than a map and a
// stable_sort per element type: header-only parse time (spec/LAYOUT.md 5).
template <class Decl>
[[nodiscard]] std::vector<std::pair<std::uint64_t, std::uint64_t>> in_tensor_rank_order(const std::vector<Decl>& decls) {
  std::vector<std::string_view> names;
  names.reserve(decls.size());
  for (const auto& d : decls) names.push_back(d.tensor);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order;
  order.reserve(decls.size());
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const auto name = std::lower_bound(names.begin(), names.end(), std::string_view(decls[i].tensor)) - names.begin();
    order.push_back({static_cast<std::uint64_t>(name) << 32 | decls[i].rank, i});
  }
  std::sort(order.begin(), order.end());
  return order;
}

// The end of the group of order[first]: the entries of one tensor.
[[nodiscard]] CKPT_INLINE std::size_t tensor_group_end(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& order,
                                                       std::size_t first) noexcept {
  std::size_t end = first + 1;
  while (end < order.size() && order[end].first >> 32 == order[first].first >> 32) ++end;
  return end;
}

}  // namespace detail

CKPT_INLINE std::vector<CoverageProblem> check_coverage(const std::vector<GlobalPiece>& pieces) {
  std::vector<CoverageProblem> problems;
  std::vector<const GlobalPiece*> list;
  CoverageProblem problem;
  const auto order = detail::in_tensor_rank_order(pieces);
  for (std::size_t i = 0, end = 0; i < order.size(); i = end) {
    end = detail::tensor_group_end(order, i);
    list.clear();
    for (std::size_t k = i; k < end; ++k) list.push_back(&pieces[order[k].second]);
    if (detail::check_tensor_coverage(list, problem)) problems.push_back(std::move(problem));
  }
  return problems;
}

CKPT_INLINE std::vector<CoverageProblem> check_replicas(const std::vector<ReplicaDecl>& declarations) {
  std::vector<CoverageProblem> problems;
  std::vector<const ReplicaDecl*> list;
  const auto order = detail::in_tensor_rank_order(declarations);
  for (std::size_t i = 0, end = 0; i < order.size(); i = end) {
    end = detail::tensor_group_end(order, i);
    list.clear();
    for (std::size_t k = i; k < end; ++k) list.push_back(&declarations[order[k].second]);
    const ReplicaDecl& first = *list.front();
    CoverageProblem problem;
    problem.issue = CoverageIssue::replica_mismatch;
    problem.tensor = first.tensor;
    problem.shape = first.shape;
    problem.offsets.assign(first.shape.size(), 0);
    const std::string who = "replicated tensor '" + first.tensor + "': ";
    bool owner_declared = false;
    for (const ReplicaDecl* d : list) {
      owner_declared = owner_declared || d->rank == first.owner;
      std::string what;
      if (d->dtype != first.dtype) what = "dtype " + detail::dtype_label(d->dtype) + " vs " + detail::dtype_label(first.dtype);
      else if (d->shape != first.shape) what = "shape " + shape_string(d->shape) + " vs " + shape_string(first.shape);
      else if (d->owner != first.owner) what = "owner rank " + std::to_string(d->owner) + " vs " + std::to_string(first.owner);
      else if (d->digest != first.digest) what = "content digest " + hex64(d->digest) + " vs " + hex64(first.digest);
      if (what.empty()) continue;
      problem.rank = d->rank;
      problem.other_rank = first.rank;
      problem.message = who + "rank " + std::to_string(d->rank) + " declared " + what + " on rank " + std::to_string(first.rank);
      break;
    }
    if (problem.message.empty() && !owner_declared) {
      problem.rank = first.owner;
      problem.other_rank = first.rank;
      problem.message = who + "its owner, rank " + std::to_string(first.owner) + ", did not declare it (rank " +
                        std::to_string(first.rank) + " did), so nobody wrote it";
    }
    if (!problem.message.empty()) problems.push_back(std::move(problem));
  }
  return problems;
}

CKPT_INLINE void append_index_pieces(const Index& index, std::uint32_t rank, std::vector<GlobalPiece>& out) {
  for (const auto& t : index.tensors)
    for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) {
      const auto& p = index.pieces[k];
      out.push_back(GlobalPiece{t.name, t.dtype, t.shape, p.offsets, p.shape, rank});
    }
}

CKPT_INLINE Status coverage_status(const std::vector<CoverageProblem>& problems, Code code, const std::string& context) {
  if (problems.empty()) return Status();
  std::string msg = context + ": " + std::to_string(problems.size()) + " tensor" + (problems.size() == 1 ? "" : "s") +
                    " not covered exactly once: ";
  constexpr std::size_t kShown = 8;
  for (std::size_t i = 0; i < problems.size() && i < kShown; ++i)
    msg += (i ? "; " : "") + std::string(coverage_issue_name(problems[i].issue)) + ": " + problems[i].message;
  if (problems.size() > kShown) msg += "; and " + std::to_string(problems.size() - kShown) + " more";
  return make_error(code, msg);
}

}  // namespace ckpt
