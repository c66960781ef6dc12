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

// How structure_problem writes a message. Each reader keeps the form its messages have always had.
enum class ProblemMessage : std::uint8_t {
  given,      // SUBJECT alone: a Status's message, which names its file and place itself
  at_offset,  // "FILE: offset N: SUBJECT: expected E, found F": the subject names tensor and range (GGUF)
  at_piece,   // "FILE: offset N[ length L]: [tensor 'T'[ chunk P]: ]SUBJECT: expected E, found F" (DCP)
};

// The one builder of the Problem found in a checkpoint's structure (its files, header and layout; a
// foreign checkpoint's or its sidecar's): every field from the same values as the message, which is
// one line whatever the names hold (control bytes become '?'). piece -1: not inside a piece.
[[nodiscard]] inline Problem structure_problem(Code code, std::string region, std::string file, std::string tensor,
                                               std::int64_t piece, std::uint64_t offset, std::uint64_t length,
                                               ProblemMessage form, std::string subject, std::string expected, std::string found) {
  Problem p;
  p.code = code;
  p.region = std::move(region);
  p.file = std::move(file);
  p.tensor = std::move(tensor);
  p.piece = piece;
  p.offset = offset;
  p.length = length;
  if (form == ProblemMessage::given) {
    p.message = std::move(subject);
  } else {
    p.message = p.file + ": offset " + std::to_string(offset);
    if (form == ProblemMessage::at_piece) {
      if (length > 0) p.message += " length " + std::to_string(length);
      p.message += ": ";
      if (!p.tensor.empty())
        p.message += "tensor '" + p.tensor + "'" + (piece >= 0 ? " chunk " + std::to_string(piece) : std::string()) + ": ";
    } else {
      p.message += ": ";
    }
    p.message += subject + ": expected " + expected + ", found " + found;
  }
  for (char& ch : p.message)
    if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
  p.expected = std::move(expected);
  p.found = std::move(found);
  return p;
}

// The error for damage found while reading: the problem's code and message, with the record attached.
[[nodiscard]] inline Status problem_error(Problem p) {
  Status s(p.code, p.message);
  return s.with_problem(std::make_shared<const Problem>(std::move(p)));
}

}  // namespace ckpt
