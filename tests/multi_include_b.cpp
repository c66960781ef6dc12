// Build test, second translation unit: the same headers in reverse order (an order dependence
// between headers shows as a compile error here), then a small write-read-verify round trip.
#include "ckpt_all_headers_reverse.hpp"

#include <ckpt/ckpt.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

int multi_include_b(const std::string& dir) {
  ckpt::PosixFs fs;
  const std::string path = ckpt::join_path(dir, "multi_include-" + std::to_string(::getpid()) + ".ckpt");
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  auto fail = [&](const char* what, const ckpt::Status& s) {
    std::fprintf(stderr, "multi_include_b: %s: %s\n", what, s.to_string().c_str());
    fs.unlink(path).ignore_error();  // scratch file: best effort
    return 1;
  };
  {
    ckpt::WriterOptions options;
    options.alignment_log2 = 6;
    options.chunk_size_log2 = 12;
    options.durable = false;
    auto writer = ckpt::ShardWriter::create(fs, path, options);
    if (!writer.ok()) return fail("create", writer.status());
    if (auto s = writer->add_tensor("w", ckpt::DType::F32, {2, 3}, values.data(), values.size() * 4); !s.ok())
      return fail("add_tensor", s);
    if (auto s = writer->set_metadata("step", ckpt::Value(std::int64_t{7})); !s.ok()) return fail("set_metadata", s);
    auto summary = writer->finish();
    if (!summary.ok()) return fail("finish", summary.status());
  }
  auto reader = ckpt::ShardReader::open(fs, path);
  if (!reader.ok()) return fail("open", reader.status());
  std::vector<float> back(values.size());
  if (auto s = reader->read_tensor("w", back.data(), back.size() * 4); !s.ok()) return fail("read_tensor", s);
  if (back != values) return fail("read_tensor", ckpt::make_error(ckpt::Code::corrupt, "values differ"));
  auto report = ckpt::verify_file(fs, path);
  if (!report.ok()) return fail("verify_file", report.status());
  if (!report->ok()) return fail("verify_file", ckpt::make_error(ckpt::Code::corrupt, report->problems[0].message));
  return fs.unlink(path).ok() ? 0 : 1;
}
