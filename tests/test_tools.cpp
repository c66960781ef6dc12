// Tests for the ckpt-inspect and ckpt-verify programs: exit codes, one-line errors, JSON and JUnit
// output, on good, damaged, missing, odd and hostile inputs. The programs are run as built.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/shard/shard_reader.hpp>
#include <ckpt/shard/shard_writer.hpp>

#include "shard_test_util.hpp"
#include "test_util.hpp"
#include "tool_run.hpp"

using namespace ckpt;
using nlohmann::json;

namespace {

const std::string kInspect = std::string(CKPT_BINARY_DIR) + "/ckpt-inspect";
const std::string kVerify = std::string(CKPT_BINARY_DIR) + "/ckpt-verify";

using Run = ckpt_test::ToolRun;
using ckpt_test::shell_quote;

// The test's files: a good shard, damaged copies, and things that are not shards.
struct Files {
  ckpt_test::TempDir dir;
  std::string good, damaged_data, damaged_index, truncated, empty, garbage, missing, odd_name;
  Index index;

  Files() {
    PosixFs fs;
    good = dir.file("good.ckpt");
    auto w = ShardWriter::create(fs, good, ckpt_test::small_writer_options());
    REQUIRE(w.ok());
    const auto data = ckpt_test::random_bytes(5 * 3000 * 4, 1);
    REQUIRE(w->add_tensor("layer/w", DType::F32, {5, 3000}, data.data(), data.size()).ok());
    ckpt_test::write_piece(*w, "emb", DType::BF16, {10, 4}, {5, 0}, {5, 4}, data.data(), 40);
    ckpt_test::write_piece(*w, "emb", DType::BF16, {10, 4}, {0, 0}, {5, 4}, data.data() + 40, 40);
    REQUIRE(w->add_tensor("step", DType::I64, {}, data.data(), 8).ok());
    REQUIRE(w->add_tensor("none", DType::U8, {0}, nullptr, 0).ok());
    ckpt_test::set_metadata(*w, {{"step", Value(std::int64_t{-77})}, {"lr", Value(0.125)}, {"final", Value(false)},
                                 {"note", Value("tab\there")}, {"rng", Value(Bytes{std::string("\x00\xff\x10", 3)})}});
    const ShardReader r = ckpt_test::finish_and_open(fs, *w, good);
    index = r.index();
    const std::string bytes = ckpt_test::read_file(good);

    damaged_data = dir.file("damaged-data.ckpt");
    std::string b = bytes;
    const auto& chunk = index.chunks[index.pieces[index.find_tensor("layer/w")->piece_first].chunk_first + 2];
    b[chunk.offset + 5] ^= 0x01;
    ckpt_test::write_file(damaged_data, b);

    damaged_index = dir.file("damaged-index.ckpt");
    b = bytes;
    b[r.footer().index_offset + 70] ^= 0x01;
    ckpt_test::write_file(damaged_index, b);

    truncated = dir.file("truncated.ckpt");
    ckpt_test::write_file(truncated, bytes.substr(0, bytes.size() / 2));
    empty = dir.file("empty.ckpt");
    ckpt_test::write_file(empty, "");
    garbage = dir.file("garbage.ckpt");
    const auto noise = ckpt_test::random_bytes(10000, 2);
    ckpt_test::write_file(garbage, std::string(noise.begin(), noise.end()));
    missing = dir.file("missing.ckpt");
    // Markup characters, a quote, and a byte that is not UTF-8: output must stay valid JSON and XML.
    odd_name = dir.file("odd &<\"name'>\xff.ckpt");
    ckpt_test::write_file(odd_name, bytes);
  }

  Run run(const std::string& tool, const std::string& args) const {
    REQUIRE(::access(tool.c_str(), X_OK) == 0);
    return Run(ckpt_test::run_shell(shell_quote(tool) + " " + args));
  }
};

void check_one_line_error(const Run& r, const std::string& tool, const std::string& path) {
  INFO("stderr: " << r.err);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind(tool + ": ", 0) == 0);
  CHECK(r.err.find(path) != std::string::npos);
}

}  // namespace

TEST_CASE("--help exits 0 and bad usage exits 2", "[tools]") {
  Files f;
  for (const auto& tool : {kInspect, kVerify}) {
    INFO(tool);
    const Run help = f.run(tool, "--help");
    CHECK(help.code == 0);
    CHECK(help.out.find("Usage") != std::string::npos);
    CHECK(help.out.find("--json") != std::string::npos);
    CHECK(f.run(tool, "").code == 2);
    CHECK(f.run(tool, "--no-such-flag " + shell_quote(f.good)).code == 2);
  }
  CHECK(f.run(kInspect, shell_quote(f.good) + " " + shell_quote(f.good)).code == 2);  // one path only
  CHECK(f.run(kVerify, "--threads 0 " + shell_quote(f.good)).code == 2);
  CHECK(f.run(kVerify, "--threads many " + shell_quote(f.good)).code == 2);
  CHECK(f.run(kVerify, "--junit").code == 2);
}

TEST_CASE("ckpt-inspect prints the layout as a table and as JSON", "[tools]") {
  Files f;
  const Run human = f.run(kInspect, shell_quote(f.good));
  REQUIRE(human.code == 0);
  CHECK(human.err.empty());
  for (const char* want : {"format version", "uuid", "alignment", "chunk size", "file size", "data bytes",
                           "index bytes", "chunks", "layer/w", "F32", "[5, 3000]", "emb", "BF16", "[5, 0]",
                           "step", "int64", "-77", "0.125", "false", "\"tab\\x09here\"", "00ff10 (3 bytes)"})
    CHECK(human.out.find(want) != std::string::npos);
  CHECK(human.out.find("DIGEST") == std::string::npos);

  const Run run = f.run(kInspect, "--json " + shell_quote(f.good));
  REQUIRE(run.code == 0);
  CHECK(run.err.empty());
  const json j = run.out_json();
  CHECK(j["path"] == f.good);
  CHECK(j["format_version"] == 1);
  CHECK(j["alignment"] == 4096);
  CHECK(j["chunk_size"] == 4096);
  CHECK(j["file_size"] == ckpt_test::read_file(f.good).size());
  CHECK(j["tensor_count"] == f.index.tensors.size());
  CHECK(j["piece_count"] == f.index.pieces.size());
  CHECK(j["chunk_count"] == f.index.chunks.size());
  CHECK(j["uuid"].get<std::string>().size() == 36);
  CHECK(j["data_bytes"] == 5 * 3000 * 4 + 80 + 8);
  CHECK(j["index_bytes"].get<std::uint64_t>() > 64);
  CHECK_FALSE(j.contains("chunks"));
  REQUIRE(j["tensors"].size() == 4);
  const json& emb = j["tensors"][1];
  CHECK(emb["name"] == "emb");
  CHECK(emb["dtype"] == "BF16");
  CHECK(emb["shape"] == json({10, 4}));
  CHECK(emb["piece_count"] == 2);
  CHECK(emb["bytes"] == 80);
  REQUIRE(emb["pieces"].size() == 2);
  CHECK(emb["pieces"][0]["offsets"] == json({5, 0}));
  CHECK(emb["pieces"][0]["shape"] == json({5, 4}));
  CHECK(emb["pieces"][1]["offsets"] == json({0, 0}));
  CHECK(emb["pieces"][1]["data_offset"] == f.index.pieces[f.index.find_tensor("emb")->piece_first + 1].data_offset);
  CHECK(emb["pieces"][1]["bytes"] == 40);
  CHECK(emb["pieces"][1]["chunk_count"] == 1);
  CHECK(j["tensors"][2]["shape"] == json::array());
  CHECK(j["tensors"][3]["bytes"] == 0);
  REQUIRE(j["metadata"].size() == 5);
  CHECK(j["metadata"][0] == json({{"key", "step"}, {"type", "int64"}, {"value", -77}}));
  CHECK(j["metadata"][1]["value"] == 0.125);
  CHECK(j["metadata"][2]["value"] == false);
  CHECK(j["metadata"][3]["value"] == "tab\there");
  CHECK(j["metadata"][4]["type"] == "bytes");
  CHECK(j["metadata"][4]["value"] == "00ff10");
  CHECK(j["metadata"][4]["length"] == 3);
}

TEST_CASE("ckpt-inspect --chunks lists every chunk with its digest", "[tools]") {
  Files f;
  const Run run = f.run(kInspect, "--json --chunks " + shell_quote(f.good));
  REQUIRE(run.code == 0);
  const json j = run.out_json();
  REQUIRE(j["chunks"].size() == f.index.chunks.size());
  std::size_t i = 0;
  for (const auto& t : f.index.tensors) {
    for (std::uint64_t k = t.piece_first; k < t.piece_first + t.piece_count; ++k) {
      const auto& p = f.index.pieces[k];
      for (std::uint64_t c = 0; c < p.chunk_count; ++c, ++i) {
        const auto& rec = f.index.chunks[p.chunk_first + c];
        const json& row = j["chunks"][i];
        CHECK(row["tensor"] == t.name);
        CHECK(row["piece"] == k - t.piece_first);
        CHECK(row["chunk"] == c);
        CHECK(row["offset"] == rec.offset);
        CHECK(row["length"] == rec.length);
        CHECK(row["digest"] == hex64(rec.digest));
      }
    }
  }
  CHECK(i == f.index.chunks.size());
  const Run human = f.run(kInspect, "--chunks " + shell_quote(f.good));
  REQUIRE(human.code == 0);
  CHECK(human.out.find("DIGEST") != std::string::npos);
  for (const auto& rec : f.index.chunks) CHECK(human.out.find(hex64(rec.digest)) != std::string::npos);
}

TEST_CASE("exit codes: 0 intact, 1 damaged or incomplete, 2 unreadable", "[tools]") {
  Files f;
  struct Row { const char* name; std::string path; int inspect, verify; };
  const std::vector<Row> rows = {
      {"good", f.good, 0, 0},
      {"damaged data (inspect reads no data)", f.damaged_data, 0, 1},
      {"damaged index", f.damaged_index, 1, 1},
      {"truncated", f.truncated, 1, 1},
      {"empty", f.empty, 1, 1},
      {"random garbage", f.garbage, 1, 1},
      {"nonexistent", f.missing, 2, 2},
      {"a directory", f.dir.path(), 2, 2},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    const Run inspect = f.run(kInspect, shell_quote(row.path));
    CHECK(inspect.code == row.inspect);
    if (row.inspect != 0) {
      check_one_line_error(inspect, "ckpt-inspect", row.path);
      CHECK(inspect.out.empty());
    }
    const Run inspect_json = f.run(kInspect, "--json " + shell_quote(row.path));
    CHECK(inspect_json.code == row.inspect);
    if (row.inspect != 0) check_one_line_error(inspect_json, "ckpt-inspect", row.path);

    const Run verify = f.run(kVerify, shell_quote(row.path));
    CHECK(verify.code == row.verify);
    if (row.verify == 2) {
      check_one_line_error(verify, "ckpt-verify", row.path);
    } else if (row.verify == 1) {
      CHECK(verify.err.empty());
      CHECK(verify.out.find(row.path + ": DAMAGED") != std::string::npos);
    } else {
      CHECK(verify.err.empty());
      CHECK(verify.out.find(row.path + ": ok") != std::string::npos);
    }
    const Run verify_json = f.run(kVerify, "--json " + shell_quote(row.path));
    CHECK(verify_json.code == row.verify);
    const json j = verify_json.out_json();
    REQUIRE(j["files"].size() == 1);
    CHECK(j["ok"] == (row.verify == 0));
    CHECK(j["files"][0]["path"] == row.path);
    CHECK(j["files"][0]["status"] == (row.verify == 0 ? "intact" : row.verify == 1 ? "damaged" : "error"));
    if (row.verify == 2) CHECK(j["files"][0]["error"]["message"].get<std::string>().find(row.path) != std::string::npos);
    if (row.verify == 1) CHECK_FALSE(j["files"][0]["problems"].empty());
  }
  if (::geteuid() != 0) {  // root reads anything: the permission case only means something for a user
    const std::string locked = f.dir.file("locked.ckpt");
    ckpt_test::write_file(locked, ckpt_test::read_file(f.good));
    REQUIRE(::chmod(locked.c_str(), 0) == 0);
    const Run inspect = f.run(kInspect, shell_quote(locked));
    CHECK(inspect.code == 2);
    check_one_line_error(inspect, "ckpt-inspect", locked);
    const Run verify = f.run(kVerify, shell_quote(locked));
    CHECK(verify.code == 2);
    check_one_line_error(verify, "ckpt-verify", locked);
  }
}

TEST_CASE("ckpt-verify names each damaged chunk: file, region, tensor, piece, chunk, range, digests", "[tools]") {
  Files f;
  const auto& t = *f.index.find_tensor("layer/w");
  const auto& rec = f.index.chunks[f.index.pieces[t.piece_first].chunk_first + 2];
  const Run human = f.run(kVerify, shell_quote(f.damaged_data));
  REQUIRE(human.code == 1);
  const std::string line = f.damaged_data + ": corrupt data bytes [" + std::to_string(rec.offset) + ", " +
                           std::to_string(rec.offset + rec.length) + ") tensor 'layer/w' piece 0 chunk 2: expected " +
                           hex64(rec.digest) + ", found ";
  INFO(human.out);
  CHECK(human.out.find(line) != std::string::npos);

  const Run run = f.run(kVerify, "--json --threads 3 " + shell_quote(f.damaged_data));
  REQUIRE(run.code == 1);
  const json j = run.out_json();
  const json& file = j["files"][0];
  CHECK(file["chunks_checked"] == f.index.chunks.size());
  CHECK(file["chunks_total"] == f.index.chunks.size());
  REQUIRE(file["problems"].size() == 1);
  const json& p = file["problems"][0];
  CHECK(p["code"] == "corrupt");
  CHECK(p["region"] == "data");
  CHECK(p["tensor"] == "layer/w");
  CHECK(p["piece"] == 0);
  CHECK(p["chunk"] == 2);
  CHECK(p["offset"] == rec.offset);
  CHECK(p["length"] == rec.length);
  CHECK(p["expected"] == hex64(rec.digest));
  CHECK(p["found"].get<std::string>().size() == 16);
  CHECK(p["found"] != p["expected"]);
  CHECK(j["summary"]["damaged"] == 1);

  // Structural damage carries its explanation.
  const Run index = f.run(kVerify, shell_quote(f.damaged_index));
  CHECK(index.code == 1);
  CHECK(index.out.find(f.damaged_index + ": corrupt index bytes [") != std::string::npos);
  CHECK(index.out.find("digest expected") != std::string::npos);
}

TEST_CASE("ckpt-verify options: threads, mmap, quiet, several files, gpu", "[tools]") {
  Files f;
  for (const char* opts : {"--threads 1", "--threads 7", "--mmap", "--mmap --threads 2"}) {
    INFO(opts);
    const Run good = f.run(kVerify, std::string(opts) + " " + shell_quote(f.good));
    CHECK(good.code == 0);
    const Run bad = f.run(kVerify, std::string(opts) + " --json " + shell_quote(f.damaged_data));
    CHECK(bad.code == 1);
    CHECK(bad.out_json()["files"][0]["problems"][0]["chunk"] == 2);
  }
  const Run quiet = f.run(kVerify, "--quiet " + shell_quote(f.good) + " " + shell_quote(f.good));
  CHECK(quiet.code == 0);
  CHECK(quiet.out.empty());
  CHECK(quiet.err.empty());
  const Run quiet_bad = f.run(kVerify, "-q " + shell_quote(f.good) + " " + shell_quote(f.damaged_data));
  CHECK(quiet_bad.code == 1);
  CHECK(quiet_bad.out.find(f.good) == std::string::npos);
  CHECK(quiet_bad.out.find(f.damaged_data) != std::string::npos);

  // The worst outcome decides: damage over intact, an unreadable path over damage.
  CHECK(f.run(kVerify, shell_quote(f.good) + " " + shell_quote(f.damaged_data)).code == 1);
  const Run mixed = f.run(kVerify, "--json " + shell_quote(f.good) + " " + shell_quote(f.damaged_data) + " " + shell_quote(f.missing));
  CHECK(mixed.code == 2);
  const json j = mixed.out_json();
  REQUIRE(j["files"].size() == 3);
  CHECK(j["files"][0]["status"] == "intact");
  CHECK(j["files"][1]["status"] == "damaged");
  CHECK(j["files"][2]["status"] == "error");
  CHECK(j["summary"] == json({{"files", 3}, {"intact", 1}, {"damaged", 1}, {"errors", 1}, {"problems", 1}, {"retired", 0}}));
  check_one_line_error(mixed, "ckpt-verify", f.missing);  // JSON on stdout, the error still on stderr

  // --gpu: with no usable device, exit 2 and say why; --gpu-fallback verifies on the CPU with a note.
  const Run gpu = f.run(kVerify, "--json --gpu " + shell_quote(f.good));
  if (gpu.code == 2) {
    INFO(gpu.err);
    CHECK(gpu.err_lines() == 1);
    CHECK(gpu.err.find("GPU") != std::string::npos);
    CHECK(gpu.out.empty());
    const Run fallback = f.run(kVerify, "--json --gpu-fallback " + shell_quote(f.good));
    CHECK(fallback.code == 0);
    CHECK(fallback.err.find("note") != std::string::npos);
    CHECK(fallback.out_json()["files"][0]["engine"] == "cpu");
    const Run fallback_bad = f.run(kVerify, "--gpu-fallback " + shell_quote(f.damaged_data));
    CHECK(fallback_bad.code == 1);
  } else {
    REQUIRE(gpu.code == 0);  // a device was found: the GPU verdict must match the CPU's
    CHECK(gpu.out_json()["files"][0]["engine"] == "gpu");
    const Run bad = f.run(kVerify, "--json --gpu " + shell_quote(f.damaged_data));
    CHECK(bad.code == 1);
    CHECK(bad.out_json()["files"][0]["problems"][0]["chunk"] == 2);
  }
}

TEST_CASE("JSON and JUnit output stay valid for any path", "[tools]") {
  Files f;
  const Run inspect = f.run(kInspect, "--json " + shell_quote(f.odd_name));
  CHECK(inspect.code == 0);
  CHECK(inspect.out_json()["tensor_count"] == 4);
  const Run verify = f.run(kVerify, "--json " + shell_quote(f.odd_name));
  CHECK(verify.code == 0);
  CHECK(verify.out_json()["ok"] == true);

  const std::string xml_path = f.dir.file("report.xml");
  const Run run = f.run(kVerify, "--quiet --junit " + shell_quote(xml_path) + " " + shell_quote(f.good) + " " + shell_quote(f.damaged_data) +
                                     " " + shell_quote(f.odd_name) + " " + shell_quote(f.missing) + " " + shell_quote(f.truncated));
  CHECK(run.code == 2);
  const std::string xml = ckpt_test::read_file(xml_path);
  INFO(xml);
  CHECK(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0) == 0);
  auto count = [&](const std::string& s) {
    std::size_t n = 0;
    for (std::size_t at = xml.find(s); at != std::string::npos; at = xml.find(s, at + 1)) ++n;
    return n;
  };
  CHECK(count("<testsuite ") == 1);
  CHECK(count("</testsuite>") == 1);
  CHECK(count("<testcase ") == 5);
  CHECK(count("<failure ") == 2);
  CHECK(count("<error ") == 1);
  CHECK(xml.find("tests=\"5\" failures=\"2\" errors=\"1\"") != std::string::npos);
  CHECK(xml.find("odd &amp;&lt;&quot;name&apos;&gt;\xEF\xBF\xBD.ckpt") != std::string::npos);
  CHECK(xml.find('\xff') == std::string::npos);
  // An independent XML parser, when the machine has one, must accept the file.
  if (ckpt_test::run_command("python3 -c 'import xml.etree.ElementTree' >/dev/null 2>&1") == 0) {
    CHECK(ckpt_test::run_command("python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                                 "sys.exit(0 if len(r.findall(\"testsuite/testcase\")) == 5 else 1)' " +
                                 shell_quote(xml_path)) == 0);
  }
  // A JUnit file that cannot be written is an error, after the verdicts are printed.
  const Run unwritable = f.run(kVerify, "--junit " + shell_quote(f.dir.file("no/such/dir/x.xml")) + " " + shell_quote(f.good));
  CHECK(unwritable.code == 2);
  CHECK(unwritable.err.find("JUnit") != std::string::npos);
}
