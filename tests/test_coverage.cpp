// Tests for include/ckpt/dist/coverage.hpp: pieces of a tensor gathered from every rank cover it exactly
// once, and each way they can fail to is named with tensor, ranks and region (spec/SHARDING.md 4).
#include <catch2/catch.hpp>

#include <ckpt/dist/coverage.hpp>

using namespace ckpt;

namespace {

GlobalPiece piece(const std::string& tensor, Shape global, Shape offsets, Shape shape, std::uint32_t rank,
                  DType dtype = DType::F32) {
  return GlobalPiece{tensor, dtype, std::move(global), std::move(offsets), std::move(shape), rank};
}

}  // namespace

TEST_CASE("coverage problems are found and named, one table row per way to fail", "[coverage]") {
  struct Row {
    const char* what;
    std::vector<GlobalPiece> pieces;
    bool ok;
    CoverageIssue issue;
    Shape offsets, shape;  // the region named
    const char* message;
  };
  const std::vector<Row> table = {
      {"rows split exactly", {piece("w", {8, 4}, {0, 0}, {3, 4}, 0), piece("w", {8, 4}, {3, 0}, {3, 4}, 1), piece("w", {8, 4}, {6, 0}, {2, 4}, 2)},
       true, CoverageIssue::gap, {}, {}, ""},
      {"2-D grid exactly", {piece("g", {4, 6}, {0, 0}, {2, 3}, 0), piece("g", {4, 6}, {0, 3}, {2, 3}, 1),
                            piece("g", {4, 6}, {2, 0}, {2, 3}, 2), piece("g", {4, 6}, {2, 3}, {2, 3}, 3)},
       true, CoverageIssue::gap, {}, {}, ""},
      {"overlap", {piece("w", {8, 4}, {0, 0}, {5, 4}, 0), piece("w", {8, 4}, {4, 0}, {4, 4}, 1)},
       false, CoverageIssue::overlap, {4, 0}, {1, 4},
       "tensor 'w': the piece of rank 0 at offsets [0, 0] shape [5, 4] and the piece of rank 1 at offsets [4, 0] shape [4, 4] overlap in offsets [4, 0] shape [1, 4]"},
      {"gap between rows", {piece("w", {8, 4}, {0, 0}, {3, 4}, 0), piece("w", {8, 4}, {5, 0}, {3, 4}, 1)},
       false, CoverageIssue::gap, {3, 0}, {2, 4}, "tensor 'w': its pieces hold 24 of 32 elements; no piece holds offsets [3, 0] shape [2, 4]"},
      {"missing grid block", {piece("g", {4, 6}, {0, 0}, {2, 3}, 0), piece("g", {4, 6}, {0, 3}, {2, 3}, 1), piece("g", {4, 6}, {2, 0}, {2, 3}, 2)},
       false, CoverageIssue::gap, {2, 3}, {2, 3}, "no piece holds offsets [2, 3] shape [2, 3]"},
      {"no piece at all beyond a corner", {piece("g", {4, 6}, {0, 0}, {1, 1}, 0)},
       false, CoverageIssue::gap, {}, {}, "its pieces hold 1 of 24 elements"},
      {"dtype mismatch", {piece("w", {8}, {0}, {4}, 0, DType::F32), piece("w", {8}, {4}, {4}, 1, DType::BF16)},
       false, CoverageIssue::dtype_mismatch, {4}, {4}, "tensor 'w': dtype BF16 on rank 1, F32 on rank 0"},
      {"shape mismatch", {piece("w", {8}, {0}, {4}, 0), piece("w", {9}, {4}, {5}, 1)},
       false, CoverageIssue::shape_mismatch, {4}, {5}, "tensor 'w': global shape [9] on rank 1, [8] on rank 0"},
      {"rank mismatch", {piece("w", {8}, {0}, {8}, 0), piece("w", {8, 1}, {0, 0}, {8, 1}, 2)},
       false, CoverageIssue::shape_mismatch, {0, 0}, {8, 1}, "global shape [8, 1] on rank 2, [8] on rank 0"},
      {"out of bounds", {piece("w", {8}, {0}, {4}, 0), piece("w", {8}, {6}, {4}, 1)},
       false, CoverageIssue::out_of_bounds, {6}, {4}, "tensor 'w': the piece of rank 1 at offsets [6] shape [4] does not fit in the global shape [8]"},
      {"two scalars", {piece("s", {}, {}, {}, 0), piece("s", {}, {}, {}, 3)}, false, CoverageIssue::overlap, {}, {}, "overlap in offsets [] shape []"},
      {"one scalar", {piece("s", {}, {}, {}, 1)}, true, CoverageIssue::gap, {}, {}, ""},
      {"empty tensor", {piece("e", {0, 5}, {0, 0}, {0, 5}, 0)}, true, CoverageIssue::gap, {}, {}, ""},
      {"empty pieces are ignored", {piece("w", {4}, {0}, {4}, 0), piece("w", {4}, {2}, {0}, 1)}, true, CoverageIssue::gap, {}, {}, ""},
  };
  for (const auto& row : table) {
    INFO(row.what);
    const auto problems = check_coverage(row.pieces);
    if (row.ok) {
      CHECK(problems.empty());
      continue;
    }
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].issue == row.issue);
    CHECK(problems[0].message.find(row.message) != std::string::npos);
    if (!row.offsets.empty() || row.issue == CoverageIssue::overlap) {
      CHECK(problems[0].offsets == row.offsets);
      CHECK(problems[0].shape == row.shape);
    }
  }
}

TEST_CASE("the slice reported for a gap touches no piece, wherever the hole is", "[coverage]") {
  // A 48 x 48 grid of 1 x 1 pieces (2304 pieces, so an all-pairs search would be slow) with one hole at
  // each position in turn along a diagonal: the gap found is exactly that element.
  for (std::uint64_t hole = 0; hole < 48; hole += 7) {
    std::vector<GlobalPiece> pieces;
    for (std::uint64_t i = 0; i < 48; ++i)
      for (std::uint64_t j = 0; j < 48; ++j)
        if (!(i == hole && j == 47 - hole)) pieces.push_back(piece("g", {48, 48}, {i, j}, {1, 1}, static_cast<std::uint32_t>(i)));
    const auto problems = check_coverage(pieces);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].issue == CoverageIssue::gap);
    CHECK(problems[0].offsets == Shape{hole, 47 - hole});
    CHECK(problems[0].shape == Shape{1, 1});
  }
}

TEST_CASE("each tensor gets its own verdict, in name order", "[coverage]") {
  const std::vector<GlobalPiece> pieces = {
      piece("z", {4}, {0}, {2}, 0),                            // gap
      piece("a", {4}, {0}, {4}, 0), piece("a", {4}, {0}, {1}, 1),  // overlap
      piece("m", {4}, {0}, {4}, 2),                            // fine
  };
  const auto problems = check_coverage(pieces);
  REQUIRE(problems.size() == 2);
  CHECK(problems[0].tensor == "a");
  CHECK(problems[0].issue == CoverageIssue::overlap);
  CHECK(problems[0].rank == 1);
  CHECK(problems[0].other_rank == 0);
  CHECK(problems[1].tensor == "z");
  CHECK(problems[1].issue == CoverageIssue::gap);
  const Status s = coverage_status(problems, Code::invalid_argument, "step 5");
  CHECK(s.code() == Code::invalid_argument);
  CHECK(s.message().rfind("step 5: 2 tensors not covered exactly once: overlap: tensor 'a'", 0) == 0);
  CHECK(s.message().find("; gap: tensor 'z'") != std::string::npos);
  CHECK(coverage_status({}, Code::corrupt, "x").ok());
}

TEST_CASE("replicated tensors must be declared alike and by their owner", "[coverage]") {
  auto decl = [](std::uint32_t rank, std::uint32_t owner, std::uint64_t digest, Shape shape = {4}, DType dtype = DType::F32) {
    return ReplicaDecl{"r", dtype, std::move(shape), owner, digest, rank};
  };
  struct Row {
    const char* what;
    std::vector<ReplicaDecl> decls;
    const char* message;  // empty: fine
  };
  const std::vector<Row> table = {
      {"alike", {decl(0, 0, 7), decl(1, 0, 7), decl(2, 0, 7)}, ""},
      {"a subgroup with its own owner", {decl(2, 2, 7), decl(3, 2, 7)}, ""},
      {"content differs", {decl(0, 0, 7), decl(1, 0, 7), decl(2, 0, 8)}, "rank 2 declared content digest 0000000000000008 vs 0000000000000007 on rank 0"},
      {"owner differs", {decl(0, 0, 7), decl(1, 1, 7)}, "rank 1 declared owner rank 1 vs 0 on rank 0"},
      {"shape differs", {decl(0, 0, 7), decl(1, 0, 7, {5})}, "rank 1 declared shape [5] vs [4]"},
      {"dtype differs", {decl(0, 0, 7), decl(1, 0, 7, {4}, DType::I32)}, "rank 1 declared dtype I32 vs F32"},
      {"owner absent", {decl(1, 0, 7), decl(2, 0, 7)}, "its owner, rank 0, did not declare it"},
  };
  for (const auto& row : table) {
    INFO(row.what);
    const auto problems = check_replicas(row.decls);
    if (std::string(row.message).empty()) {
      CHECK(problems.empty());
      continue;
    }
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].issue == CoverageIssue::replica_mismatch);
    CHECK(problems[0].message.find(row.message) != std::string::npos);
  }
}
