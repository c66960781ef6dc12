// ckpt-inspect: prints what a shard file holds (format, tensors, pieces, metadata, optionally every
// chunk) from its superblock, footer and index. Data bytes are not read; ckpt-verify checks them.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ckpt/shard_reader.hpp>

#include "cli.hpp"
#include "report_json.hpp"

namespace {

using ckpt::tools::json;
constexpr const char* kTool = "ckpt-inspect";

// Opens one shard and describes it; the unit a store- or step-level caller repeats per shard.
[[nodiscard]] ckpt::Result<json> inspect_shard(ckpt::PosixFs& fs, const std::string& path, bool with_chunks) {
  auto info = fs.stat(path);
  if (!info.ok()) return info.status();  // the message already names the path
  if (info->is_dir) return ckpt::make_error(ckpt::Code::invalid_argument, path + ": is a directory, expected a shard file");
  auto reader = ckpt::ShardReader<>::open(fs, path);
  if (!reader.ok()) return reader.status();
  return ckpt::tools::shard_json(**reader, with_chunks);
}

// Prints rows as columns separated by two spaces; columns listed in right_aligned hold numbers.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned,
                 const char* indent = "") {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.resize(i + 1, 0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line = indent;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - r[i].size(), ' ');
      const bool right = i < right_aligned.size() && right_aligned[i];
      const bool last = i + 1 == r.size();
      line += right ? pad + r[i] : (last ? r[i] : r[i] + pad);
      if (!last) line += "  ";
    }
    std::printf("%s\n", line.c_str());
  }
}

[[nodiscard]] std::string shape_text(const json& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<std::uint64_t>());
  return s + "]";
}

[[nodiscard]] std::string num(const json& j) { return std::to_string(j.get<std::uint64_t>()); }

[[nodiscard]] std::string metadata_text(const json& m) {
  const std::string type = m["type"].get<std::string>();
  const json& v = m["value"];
  if (type == "bytes") {
    const std::string hex = v.get<std::string>();
    const std::string len = num(m["length"]) + " bytes";
    // Short values are shown whole; long ones by length and their first 32 bytes.
    return hex.size() <= 64 ? (hex.empty() ? len : hex + " (" + len + ")") : hex.substr(0, 64) + "... (" + len + ")";
  }
  if (type == "string") {
    std::string quoted;
    for (const char c : v.get<std::string>()) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return "\"" + ckpt::tools::printable(quoted) + "\"";
  }
  if (type == "float64" && v.is_number()) {
    // The shortest of %.15g..%.17g that reads back as the same double.
    const double d = v.get<double>();
    char buf[40];
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void print_human(const json& doc) {
  using ckpt::cli::human_bytes;
  auto bytes = [](const json& j) {
    const auto v = j.get<std::uint64_t>();
    return std::to_string(v) + (v >= 1024 ? " (" + human_bytes(static_cast<double>(v)) + ")" : "");
  };
  print_table({{"file", ckpt::tools::printable(doc["path"].get<std::string>())},
               {"format version", num(doc["format_version"])},
               {"uuid", doc["uuid"].get<std::string>()},
               {"alignment", bytes(doc["alignment"])},
               {"chunk size", bytes(doc["chunk_size"])},
               {"hash", doc["hash"].get<std::string>()},
               {"file size", bytes(doc["file_size"])},
               {"data bytes", bytes(doc["data_bytes"])},
               {"index bytes", bytes(doc["index_bytes"])},
               {"tensors", num(doc["tensor_count"])},
               {"pieces", num(doc["piece_count"])},
               {"chunks", num(doc["chunk_count"])},
               {"metadata", num(doc["metadata_count"])}},
              {false, false});

  if (!doc["tensors"].empty()) {
    std::printf("\ntensors:\n");
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "PIECES", "BYTES"}};
    for (const auto& t : doc["tensors"])
      rows.push_back({ckpt::tools::printable(t["name"].get<std::string>()), t["dtype"].get<std::string>(),
                      shape_text(t["shape"]), num(t["piece_count"]), num(t["bytes"])});
    print_table(rows, {false, false, false, true, true}, "  ");

    std::printf("\npieces:\n");
    rows = {{"TENSOR", "PIECE", "OFFSETS", "SHAPE", "DATA OFFSET", "BYTES", "CHUNKS"}};
    for (const auto& t : doc["tensors"])
      for (const auto& p : t["pieces"])
        rows.push_back({ckpt::tools::printable(t["name"].get<std::string>()), num(p["piece"]), shape_text(p["offsets"]),
                        shape_text(p["shape"]), num(p["data_offset"]), num(p["bytes"]), num(p["chunk_count"])});
    print_table(rows, {false, true, false, false, true, true, true}, "  ");
  }

  if (!doc["metadata"].empty()) {
    std::printf("\nmetadata:\n");
    std::vector<std::vector<std::string>> rows = {{"KEY", "TYPE", "VALUE"}};
    for (const auto& m : doc["metadata"])
      rows.push_back({ckpt::tools::printable(m["key"].get<std::string>()), m["type"].get<std::string>(), metadata_text(m)});
    print_table(rows, {false, false, false}, "  ");
  }

  if (doc.contains("chunks")) {
    std::printf("\nchunks:\n");
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "PIECE", "CHUNK", "OFFSET", "LENGTH", "DIGEST"}};
    for (const auto& c : doc["chunks"])
      rows.push_back({ckpt::tools::printable(c["tensor"].get<std::string>()), num(c["piece"]), num(c["chunk"]),
                      num(c["offset"]), num(c["length"]), c["digest"].get<std::string>()});
    print_table(rows, {false, true, true, true, true, false}, "  ");
  }
}

}  // namespace

int main(int argc, char** argv) {
  return ckpt::cli::guarded(kTool, [&] {
    CLI::App app{"Prints the layout of a ckpt shard file: format, tensors, pieces, metadata and, with --chunks,\n"
                 "every chunk and its digest. Reads only the superblock, footer and index; use ckpt-verify to\n"
                 "check the data.\n\n"
                 "Exit status: 0 ok, 1 the file is damaged or incomplete, 2 usage error or unreadable path.",
                 kTool};
    std::string path;
    bool as_json = false, with_chunks = false;
    app.add_option("PATH", path, "shard file (*.ckpt)")->required();
    app.add_flag("--json", as_json, "print one JSON document instead of tables");
    app.add_flag("--chunks", with_chunks, "also list every chunk: tensor, piece, chunk, offset, length, digest");
    if (const int rc = ckpt::cli::parse(app, argc, argv); rc >= 0) return rc;

    ckpt::PosixFs fs;
    auto doc = inspect_shard(fs, path, with_chunks);
    if (!doc.ok()) return ckpt::cli::report(kTool, doc.status());
    if (as_json) ckpt::cli::print_json(*doc);
    else print_human(*doc);
    return static_cast<int>(ckpt::cli::kOk);
  });
}
