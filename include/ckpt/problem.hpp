// ckpt: one problem found in a checkpoint, as a record that tools print and serialise without
// parsing text (spec/FORMAT.md 8). The reader, the verifier and step verification all report these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "error.hpp"

namespace ckpt {

struct Problem {
  Code code = Code::corrupt;  // corrupt or incomplete (io: the bytes could not be read)
  // What kind of problem, by where it is: superblock, padding, data, index, footer, file (verify_file);
  // manifest, missing, shard, coverage (a step: step_reader.hpp step_region).
  std::string region;
  std::string file;           // the file it is in (a shard, a MANIFEST, or the step directory)
  std::string tensor;         // set when region is data
  std::int64_t piece = -1;    // piece number within the tensor
  std::int64_t chunk = -1;    // chunk number within the piece
  std::uint64_t offset = 0, length = 0;  // byte range in the file
  std::string expected, found;
  std::string message;  // one line naming all of the above
};

// The error for damage found while reading: the problem's code and message, with the record attached.
[[nodiscard]] inline Status problem_error(Problem p) {
  Status s(p.code, p.message);
  return s.with_problem(std::make_shared<const Problem>(std::move(p)));
}

}  // namespace ckpt
