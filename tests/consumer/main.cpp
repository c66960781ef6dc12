// The consumer: writes a small shard file with the public API, reads it back, verifies it.
// Usage: consumer DIR. Exit 0 when everything round-trips.
#include <ckpt/ckpt.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  ckpt::PosixFs fs;
  const std::string path = ckpt::join_path(argv[1], "consumer.ckpt");
  fs.unlink(path).ignore_error();  // a leftover from an earlier run may or may not exist
  std::vector<std::int32_t> values(5000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i * 7) - 100;
  {
    ckpt::WriterOptions options;
    options.chunk_size_log2 = 12;  // 20000 bytes: five chunks
    auto writer = ckpt::ShardWriter::create(fs, path, options);
    if (!writer.ok()) return std::fprintf(stderr, "create: %s\n", writer.status().to_string().c_str()), 1;
    ckpt::Status s = writer->add_tensor("values", ckpt::DType::I32, {50, 100}, values.data(), values.size() * 4);
    if (s.ok()) s = writer->set_metadata("step", ckpt::Value(std::int64_t{42}));
    if (!s.ok()) return std::fprintf(stderr, "write: %s\n", s.to_string().c_str()), 1;
    auto summary = writer->finish();
    if (!summary.ok()) return std::fprintf(stderr, "finish: %s\n", summary.status().to_string().c_str()), 1;
  }
  auto reader = ckpt::ShardReader::open(fs, path);
  if (!reader.ok()) return std::fprintf(stderr, "open: %s\n", reader.status().to_string().c_str()), 1;
  std::vector<std::int32_t> back(values.size());
  ckpt::Status s = reader->read_tensor("values", back.data(), back.size() * 4);
  if (!s.ok() || back != values) return std::fprintf(stderr, "read: %s\n", s.to_string().c_str()), 1;
  const ckpt::MetaEntry* step = reader->index().find_metadata("step");
  if (step == nullptr || !step->value.is_int() || step->value.as_int() != 42) return std::fprintf(stderr, "metadata\n"), 1;
  auto report = ckpt::verify_file(fs, path);
  if (!report.ok() || !report->ok() || report->chunks_checked != 5)
    return std::fprintf(stderr, "verify failed\n"), 1;
  std::printf("consumer: wrote, read and verified %s (%zu chunks)\n", path.c_str(),
              static_cast<std::size_t>(report->chunks_checked));
  return 0;
}
