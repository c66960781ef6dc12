// Writes the seed corpora of tests/fuzz/seeds/<decoder>/ through the library's own encoders (run by
// hand when a format changes: tools/fuzz.sh --make-seeds). The shard seeds add to spec/golden/*.ckpt.
// `make_seeds --write-sidecar PATH...` writes PATH's sidecar as ckpt-verify --write-sidecar
// --sidecar-chunk-size 4096 does, for tests/fuzz/make_foreign_seeds.py (the foreign seeds).
#include <cstdio>
#include <string>
#include <vector>

#include <ckpt/store/journal.hpp>
#include <ckpt/store/manifest.hpp>
#include <ckpt/interop/safetensors.hpp>
#include <ckpt/shard/shard_writer.hpp>
#include <ckpt/identity/sidecar.hpp>

#include "../hostile_shard.hpp"

namespace {

using namespace ckpt;

void save(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

void require(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "make_seeds: %s\n", s.message().c_str());
    std::exit(1);
  }
}

TrainingState state(std::uint64_t step) {
  TrainingState s;
  s.step = step;
  s.rng = std::string("\x01\x02\x03\x04", 4);
  s.data.epoch = 2;
  s.data.offset = 12345;
  s.data.state = "loader";
  s.optimizer_tensors = {"adam.m", "adam.v"};
  s.values["b"] = Value(true);
  s.values["f"] = Value(0.5);
  s.values["i"] = Value(std::int64_t{-7});
  s.values["s"] = Value("text");
  s.values["y"] = Value(Bytes{std::string("\0\xff", 2)});
  return s;
}

// The library's sidecar writer, as ckpt-verify --write-sidecar calls it, at 4 KiB chunks (several per seed).
int write_sidecars(int argc, char** argv) {
  PosixFs fs;
  for (int i = 2; i < argc; ++i) {
    auto checkpoint = open_foreign(fs, argv[i]);
    require(checkpoint.status());
    auto built = build_sidecar(fs, *checkpoint, sidecar::kMinChunkSizeLog2);
    require(built.status());
    require(write_sidecar(fs, *built, sidecar_path(*checkpoint)));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--write-sidecar") return write_sidecars(argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR (writes DIR/{index,manifest,journal,safetensors}/)\n"
                         "       make_seeds --write-sidecar PATH... (writes PATH's sidecar, 4 KiB chunks)\n");
    return 2;
  }
  const std::string root = argv[1];
  PosixFs fs;

  // Shards: several pieces, chunks, dtypes and every metadata type, at small alignment and chunk size.
  const std::string shard = root + "/index/pieces.ckpt";
  std::remove(shard.c_str());
  {
    WriterOptions o;
    o.alignment_log2 = 6;
    o.chunk_size_log2 = 12;
    auto w = ShardWriter::create(fs, shard, o);
    require(w.status());
    std::vector<unsigned char> bytes(9000);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
    require(w->begin_piece("w", DType::I16, {4, 6}, {2, 0}, {2, 6}));
    require(w->write(bytes.data(), 24));
    require(w->end_piece());
    require(w->add_tensor("big", DType::U8, {9000}, bytes.data(), 9000));
    require(w->add_tensor("s", DType::F64, {}, bytes.data(), 8));
    require(w->begin_piece("w", DType::I16, {4, 6}, {0, 0}, {2, 6}));
    require(w->write(bytes.data() + 100, 24));
    require(w->end_piece());
    require(w->add_tensor("empty", DType::BF16, {0, 3}, nullptr, 0));
    require(w->set_metadata("i", Value(std::int64_t{-5})));
    require(w->set_metadata("f", Value(1.5)));
    require(w->set_metadata("t", Value(true)));
    require(w->set_metadata("s", Value("hello")));
    require(w->set_metadata("y", Value(Bytes{std::string("\0\1\2", 3)})));
    require(w->finish().status());
  }
  // Shared blob and dims ranges within the decoder limit (issue 9), and a little over it.
  ckpt_test::HostileShape shape;
  shape.tensors = 4;
  shape.metadata = 4;
  shape.blob = 256;
  shape.name_length = 40;
  shape.value_length = 16;
  save(root + "/index", "shared-ranges.ckpt", ckpt_test::hostile_shared_blob_shard(shape).file);
  shape.value_length = 200;
  save(root + "/index", "shared-ranges-over-limit.ckpt", ckpt_test::hostile_shared_blob_shard(shape).file);

  // Manifests.
  for (std::uint32_t world : {1u, 3u}) {
    Manifest m;
    m.txn = 7;
    m.step = 300;
    m.world_size = world;
    for (std::uint32_t r = 0; r < world; ++r) {
      ManifestShard s;
      s.rank = r;
      s.name = shard_file_name(r, world);
      s.file_size = 4096 + r;
      s.index_digest = 0x1234 + r;
      s.data_bytes = 1000;
      s.tensor_count = 2;
      s.chunk_count = 3;
      m.shards.push_back(s);
    }
    m.state = state(300);
    save(root + "/manifest", "world-" + std::to_string(world) + ".bin", encode_manifest(m));
  }

  // Journals: a header group, then BEGIN + COMMIT, then an ABORT and a RETIRE.
  {
    JournalHeader h;
    h.store_uuid[0] = 0x42;
    std::string log = encode_group({header_record(h)}, 0);
    BeginRecord b;
    b.txn = 1;
    b.step = 100;
    b.world_size = 2;
    b.files = standard_shard_files(2);
    auto begin = begin_record(b);
    require(begin.status());
    CommitRecord c{1, 100, 512, 0x99};
    log += encode_group({*begin, commit_record(c)}, log.size());
    save(root + "/journal", "commit.bin", log);
    BeginRecord b2 = b;
    b2.txn = 2;
    b2.step = 200;
    b2.files = {TxnFile{0, "weights.ckpt"}, TxnFile{1, "opt.ckpt"}};
    auto begin2 = begin_record(b2);
    require(begin2.status());
    log += encode_group({*begin2, abort_record(AbortRecord{2, 200, AbortReason::user})}, log.size());
    log += encode_group({retire_record(RetireRecord{1, 100})}, log.size());
    SaveRecord sr;
    sr.txn = 1;
    sr.step = 100;
    sr.bytes = 4096;
    log += encode_group({save_stats_record(sr)}, log.size());
    save(root + "/journal", "abort-retire.bin", log);
    save(root + "/journal", "torn-tail.bin", log.substr(0, log.size() - 100));
  }

  // safetensors: hand-written headers, and the shard above converted.
  const char* headers[] = {
      R"({})",
      R"({"__metadata__":{"format":"pt","a":""}})",
      R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"y":{"dtype":"U8","shape":[],"data_offsets":[16,17]}})",
      R"({"e":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},"__metadata__":{"k":"v"}})",
  };
  const std::size_t data_sizes[] = {0, 0, 17, 0};
  for (std::size_t i = 0; i < sizeof headers / sizeof headers[0]; ++i) {
    const std::string json = headers[i];
    std::string file(8, '\0');
    put_u64(reinterpret_cast<unsigned char*>(&file[0]), json.size());
    file += json;
    file += std::string(data_sizes[i], '\x01');
    save(root + "/safetensors", "header-" + std::to_string(i) + ".bin", file);
  }
  ConvertOptions co;
  co.overwrite = true;
  co.stringify_metadata = true;
  const std::string st = root + "/safetensors/converted.bin";
  auto converted = ckpt_to_safetensors(fs, shard, st, co);
  if (!converted.ok()) std::fprintf(stderr, "make_seeds: note: %s\n", converted.status().message().c_str());
  return 0;
}
