// The writer and the checker of tests/test_s3_crash.py (spec/OBJECT.md 6): a real process that saves steps
// whose bytes follow from the step number alone, so that another process can check them bit for bit after
// this one was killed by SIGKILL in the middle of a save.
//
//   s3_crash_writer save URL FIRST LAST [--keep N] [--wait]   saves steps FIRST..LAST; --wait: before LAST,
//                                                             prints "ready" and waits for a line on stdin
//   s3_crash_writer check URL                                 prints "steps S1 S2 ..." (the committed steps),
//                                                             each read back and compared bit for bit, every
//                                                             chunk of every shard verified; exit 1 on any
//                                                             difference or damaged log object
//
// Endpoint and credentials come from the environment (AWS_ENDPOINT_URL, ...), as for every tool. Small parts
// (64 KiB, the server must accept them: moto's S3_UPLOAD_PART_MIN_SIZE), one part in flight at a time, so a
// save is a short sequence of requests in a fixed order: create, 4 parts, complete, MANIFEST, commit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <ckpt/store/open_store.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/io/object/s3_client.hpp>
#include <ckpt/shard/verify.hpp>

using namespace ckpt;
using namespace ckpt::object;

namespace {

constexpr std::size_t kPartSize = 64 << 10;

// The step's tensor: 200000 + step bytes of a generator seeded by the step (a shard of four parts).
std::vector<unsigned char> tensor_bytes(std::uint64_t step) {
  std::mt19937_64 rng(step);
  std::vector<unsigned char> bytes(200000 + step);
  for (std::size_t i = 0; i < bytes.size(); i += 8) {
    const std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8 && i + k < bytes.size(); ++k) bytes[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  return bytes;
}

double step_value(std::uint64_t step) { return 0.5 + static_cast<double>(step); }

StoreOptions store_options(std::uint64_t keep_last) {
  StoreOptions o;
  o.create_if_missing = true;
  o.io.part_size = kPartSize;
  o.io.parallel_parts = 1;
  o.chunk_size_log2 = 14;
  o.retention.keep_last = keep_last;
  return o;
}

int fail(const std::string& what, const Status& s) {
  std::cout << "FAIL " << what << ": " << s.to_string() << std::endl;
  return 1;
}

Status save_step(Store& store, std::uint64_t step) {
  const auto bytes = tensor_bytes(step);
  CKPT_ASSIGN_OR_RETURN(auto tx, store.begin(step));
  CKPT_TRY(tx->add_tensor("w", DType::U8, Shape{bytes.size()}, bytes.data(), bytes.size()));
  tx->state().values["value"] = Value(step_value(step));
  return tx->commit().status();
}

int save(const std::string& url, std::uint64_t first, std::uint64_t last, std::uint64_t keep_last, bool wait) {
  auto client = open_s3_url(url);
  if (!client.ok()) return fail("opening the client", client.status());
  auto store = Store::open(object_log(**client), Access::read_write, store_options(keep_last));
  if (!store.ok()) return fail("opening the store", store.status());
  for (std::uint64_t step = first; step <= last; ++step) {
    if (wait && step == last) {
      std::cout << "ready" << std::endl;
      std::string line;
      if (!std::getline(std::cin, line)) return fail("waiting for the go", make_error(Code::io, "stdin closed"));
    }
    if (Status s = save_step(**store, step); !s.ok()) return fail("saving step " + std::to_string(step), s);
    std::cout << "committed " << step << std::endl;
  }
  return 0;
}

int check(const std::string& url) {
  auto client = open_s3_url(url);
  if (!client.ok()) return fail("opening the client", client.status());
  auto store = Store::open(object_log(**client), Access::read_only);
  if (!store.ok()) return fail("opening the store", store.status());
  int failures = 0;
  for (const auto& p : (*store)->recovery_report().log_damage) {
    std::cout << "FAIL log object: " << p.message << std::endl;
    ++failures;
  }
  std::cout << "steps";
  for (const auto& s : (*store)->steps()) std::cout << " " << s.step;
  std::cout << std::endl;
  for (const auto& info : (*store)->steps()) {
    const std::string label = "step " + std::to_string(info.step);
    auto reader = (*store)->open_step(info);
    if (!reader.ok()) {
      failures += fail(label, reader.status());
      continue;
    }
    const auto expected = tensor_bytes(info.step);
    std::vector<unsigned char> got(expected.size());
    if (Status s = reader->read_tensor("w", got.data(), got.size(), ReadCheck::touched); !s.ok()) {
      failures += fail(label + " tensor w", s);
      continue;
    }
    if (got != expected) {
      std::size_t at = 0;
      while (got[at] == expected[at]) ++at;
      std::cout << "FAIL " << label << ": tensor w differs from byte " << at << std::endl;
      ++failures;
    }
    const auto value = reader->state().values.find("value");
    if (value == reader->state().values.end() || !(value->second == Value(step_value(info.step)))) {
      std::cout << "FAIL " << label << ": training state value is not " << step_value(info.step) << std::endl;
      ++failures;
    }
    for (const auto& shard : reader->info().files) {
      auto report = verify_file((*store)->fs(), join_path(reader->info().dir, shard.name));
      if (!report.ok()) failures += fail(label + " shard " + shard.name, report.status());
      else if (!report->ok()) {
        std::cout << "FAIL " << label << " shard " << shard.name << ": damaged" << std::endl;
        ++failures;
      }
    }
  }
  std::cout << (failures == 0 ? "ok" : "FAILED") << std::endl;
  return failures == 0 ? 0 : 1;
}

int usage() {
  std::cerr << "usage: s3_crash_writer save URL FIRST LAST [--keep N] [--wait] | check URL\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "check") return check(args[1]);
  if (args.size() < 4 || args[0] != "save") return usage();
  std::uint64_t keep_last = 0;
  bool wait = false;
  for (std::size_t i = 4; i < args.size(); ++i) {
    if (args[i] == "--wait") wait = true;
    else if (args[i] == "--keep" && i + 1 < args.size()) keep_last = std::stoull(args[++i]);
    else return usage();
  }
  return save(args[1], std::stoull(args[2]), std::stoull(args[3]), keep_last, wait);
}
