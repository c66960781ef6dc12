// Tests for include/ckpt/core/format.hpp: the dtype table and the on-disk constants, and that the byte
// tables of spec/FORMAT.md say the same as the code (one cannot change without the other).
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ckpt/core/format.hpp>

#include "test_util.hpp"

using namespace ckpt;
namespace f = ckpt::format;

namespace {

// The lines of spec/FORMAT.md from the heading that starts with `from` to the next heading.
std::vector<std::string> spec_section(const std::string& from) {
  const std::string text = ckpt_test::read_file(std::string(CKPT_SOURCE_DIR) + "/spec/FORMAT.md");
  REQUIRE_FALSE(text.empty());
  std::istringstream in(text);
  std::vector<std::string> lines;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) {
      if (inside) break;
      inside = line.find(from) != std::string::npos;
      continue;
    }
    if (inside) lines.push_back(line);
  }
  REQUIRE_FALSE(lines.empty());
  return lines;
}

struct Field {
  std::uint64_t offset, size;
  std::string name;
};

// Rows `| offset | size | `name` | ...` of the byte table in a spec section.
std::vector<Field> spec_fields(const std::string& section) {
  static const std::regex row(R"(^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*`([a-z0-9_]+)`\s*\|)");
  std::vector<Field> fields;
  for (const auto& line : spec_section(section)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) fields.push_back({std::stoull(m[1]), std::stoull(m[2]), m[3]});
  }
  REQUIRE_FALSE(fields.empty());
  return fields;
}

// Fields must tile [0, total) with no gap and no overlap.
void check_tiles(const std::vector<Field>& fields, std::uint64_t total) {
  std::uint64_t at = 0;
  for (const auto& fd : fields) {
    INFO("field " << fd.name);
    CHECK(fd.offset == at);
    at = fd.offset + fd.size;
  }
  CHECK(at == total);
}

std::map<std::string, Field> by_name(const std::vector<Field>& fields) {
  std::map<std::string, Field> out;
  for (const auto& fd : fields) out.emplace(fd.name, fd);
  return out;
}

// The spec's table under `section` tiles `size` bytes and names exactly the fields of `code`, at its offsets.
void check_spec_table(const std::string& section, std::size_t size, const std::map<std::string, std::size_t>& code) {
  const auto fields = spec_fields(section);
  check_tiles(fields, size);
  const auto at = by_name(fields);
  CHECK(at.size() == code.size());
  for (const auto& [name, offset] : code) {
    INFO(name);
    REQUIRE(at.count(name) == 1);
    CHECK(at.at(name).offset == offset);
  }
}

}  // namespace

TEST_CASE("dtype codes are 1 to 17, each once, with their sizes", "[format]") {
  const std::map<std::string, std::pair<int, std::uint32_t>> want = {
      {"BOOL", {1, 1}},     {"U8", {2, 1}},       {"I8", {3, 1}},       {"U16", {4, 2}},  {"I16", {5, 2}},
      {"U32", {6, 4}},      {"I32", {7, 4}},      {"U64", {8, 8}},      {"I64", {9, 8}},  {"F16", {10, 2}},
      {"BF16", {11, 2}},    {"F32", {12, 4}},     {"F64", {13, 8}},     {"F8_E4M3", {14, 1}},
      {"F8_E5M2", {15, 1}}, {"F8_E8M0", {16, 1}}, {"C64", {17, 8}},
  };
  std::set<int> codes;
  for (const auto& d : f::kDTypes) {
    INFO(d.name);
    const auto it = want.find(std::string(d.name));
    REQUIRE(it != want.end());
    CHECK(static_cast<int>(d.dtype) == it->second.first);
    CHECK(d.size == it->second.second);
    CHECK(codes.insert(static_cast<int>(d.dtype)).second);
    CHECK(f::dtype_info(d.dtype) == &d);
    CHECK(f::dtype_by_name(d.name) == &d);
  }
  CHECK(codes.size() == want.size());
}

TEST_CASE("unassigned dtype codes and unknown names are not found", "[format]") {
  for (const int code : {0, 18, 19, 255, 256, 0x7fff, 0xffff}) {
    INFO("code " << code);
    CHECK(f::dtype_info(static_cast<std::uint16_t>(code)) == nullptr);
  }
  CHECK(f::dtype_by_name("f32") == nullptr);  // names are case-sensitive, as in safetensors
  CHECK(f::dtype_by_name("") == nullptr);
  CHECK(f::dtype_by_name("F32 ") == nullptr);
  CHECK(f::dtype_by_name("FLOAT") == nullptr);
  static_assert(f::dtype_info(f::DType::F32)->size == 4, "usable at compile time");
}

TEST_CASE("the dtype table of the spec matches the code", "[format][spec]") {
  static const std::regex row(R"(^\|\s*(\d+)\s*\|\s*`([A-Z0-9_]+)`\s*\|\s*(\d+)\s*\|)");
  std::size_t rows = 0;
  for (const auto& line : spec_section("4.1 Element types")) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    ++rows;
    INFO(line);
    const auto* info = f::dtype_info(static_cast<std::uint16_t>(std::stoi(m[1])));
    REQUIRE(info != nullptr);
    CHECK(info->name == m[2].str());
    CHECK(info->size == std::stoul(m[3]));
  }
  CHECK(rows == std::size(f::kDTypes));
}

TEST_CASE("the superblock table of the spec matches the code", "[format][spec]") {
  check_spec_table("3.1 Fields", f::kSuperblockSize, {
      {"magic", f::sb::kMagic},     {"version", f::sb::kVersion},        {"superblock_size", f::sb::kSize},
      {"compat", f::sb::kCompat},   {"ro_compat", f::sb::kRoCompat},     {"incompat", f::sb::kIncompat},
      {"uuid", f::sb::kUuid},       {"alignment_log2", f::sb::kAlignmentLog2},
      {"chunk_size_log2", f::sb::kChunkSizeLog2}, {"hash_id", f::sb::kHashId}, {"reserved0", f::sb::kReserved0},
      {"data_offset", f::sb::kDataOffset}, {"reserved1", f::sb::kReserved1}, {"digest", f::sb::kDigest},
  });
}

TEST_CASE("the footer table of the spec matches the code", "[format][spec]") {
  check_spec_table("6. Footer", f::kFooterSize, {
      {"index_offset", f::ft::kIndexOffset}, {"index_length", f::ft::kIndexLength},
      {"index_digest", f::ft::kIndexDigest}, {"uuid", f::ft::kUuid}, {"version", f::ft::kVersion},
      {"reserved", f::ft::kReserved},         {"digest", f::ft::kDigest}, {"magic", f::ft::kMagic},
  });
}

TEST_CASE("the index tables of the spec match the record sizes of the code", "[format][spec]") {
  const auto header = spec_fields("5.1 Position and header");
  check_tiles(header, f::kIndexHeaderSize);
  const auto at = by_name(header);
  CHECK(at.at("magic").offset == f::ix::kMagic);
  CHECK(at.at("tensor_count").offset == f::ix::kTensorCount);
  CHECK(at.at("piece_count").offset == f::ix::kPieceCount);
  CHECK(at.at("chunk_count").offset == f::ix::kChunkCount);
  CHECK(at.at("dim_count").offset == f::ix::kDimCount);
  CHECK(at.at("meta_count").offset == f::ix::kMetaCount);
  CHECK(at.at("blob_size").offset == f::ix::kBlobSize);
  CHECK(at.at("reserved").offset == f::ix::kReserved);
  check_tiles(spec_fields("5.2 Tensor table"), f::kTensorRecordSize);
  check_tiles(spec_fields("5.3 Piece table"), f::kPieceRecordSize);
  check_tiles(spec_fields("5.4 Chunk table"), f::kChunkRecordSize);
  check_tiles(spec_fields("5.6 Metadata"), f::kMetaRecordSize);
}

TEST_CASE("magics, sizes and parameters are those of format version 1", "[format]") {
  CHECK(f::kVersion == 1);
  CHECK(std::memcmp(f::kSuperblockMagic, "\x89" "CKPT\r\n\x1a", 8) == 0);
  CHECK(std::memcmp(f::kIndexMagic, "CKPTINDX", 8) == 0);
  CHECK(std::memcmp(f::kFooterMagic, "CKPTFEND", 8) == 0);
  CHECK(f::kSuperblockSize == 128);
  CHECK(f::kFooterSize == 64);
  CHECK(f::kIndexHeaderSize == 64);
  CHECK(f::kTensorRecordSize == 40);
  CHECK(f::kPieceRecordSize == 48);
  CHECK(f::kChunkRecordSize == 24);
  CHECK(f::kDimRecordSize == 8);
  CHECK(f::kMetaRecordSize == 32);
  CHECK(f::kHashXxh3_64 == 1);
  CHECK((f::kMinAlignmentLog2 == 6 && f::kMaxAlignmentLog2 == 21 && f::kDefaultAlignmentLog2 == 12));
  CHECK((f::kMinChunkSizeLog2 == 12 && f::kMaxChunkSizeLog2 == 30 && f::kDefaultChunkSizeLog2 == 20));
  CHECK(f::kMaxRank == 64);
  CHECK(f::kMaxNameLength == 65535);
  CHECK(f::kMaxIndexLength == std::uint64_t{1} << 32);
  CHECK(f::kMaxPiecesPerTensor == 4096);
  // Version 1 defines no feature bits: every bit is reserved (spec 3.2).
  CHECK((f::kKnownCompat == 0 && f::kKnownRoCompat == 0 && f::kKnownIncompat == 0));
  // The superblock always fits before the first possible data offset.
  CHECK(f::kSuperblockSize <= (std::uint64_t{1} << f::kMinAlignmentLog2) * 2);
  CHECK(f::kDefaultAlignmentLog2 >= f::kMinAlignmentLog2);
  CHECK(f::kDefaultChunkSizeLog2 <= f::kMaxChunkSizeLog2);
}

TEST_CASE("metadata value type codes are 1 to 5", "[format]") {
  CHECK(static_cast<int>(f::ValueType::int64) == 1);
  CHECK(static_cast<int>(f::ValueType::float64) == 2);
  CHECK(static_cast<int>(f::ValueType::boolean) == 3);
  CHECK(static_cast<int>(f::ValueType::string) == 4);
  CHECK(static_cast<int>(f::ValueType::bytes) == 5);
}
