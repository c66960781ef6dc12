// Tests for include/ckpt/shard_writer.hpp.
#include <catch2/catch.hpp>

#include <ckpt/shard_reader.hpp>
#include <ckpt/shard_writer.hpp>

#include "test_util.hpp"

using namespace ckpt;

TEST_CASE("a tensor written whole reads back bit for bit", "[shard_writer]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  const auto data = ckpt_test::random_bytes(3 * 5000 * 4, 1);
  {
    WriterOptions o;
    o.chunk_size_log2 = 12;
    auto w = ShardWriter<>::create(fs, dir.file("a.ckpt"), o);
    REQUIRE(w.ok());
    REQUIRE((*w)->add_tensor("w", DType::F32, {3, 5000}, data.data(), data.size()).ok());
    auto s = (*w)->finish();
    REQUIRE(s.ok());
    CHECK(s->chunk_count == (data.size() + 4095) / 4096);
  }
  auto r = ShardReader<>::open(fs, dir.file("a.ckpt"));
  REQUIRE(r.ok());
  std::vector<unsigned char> back(data.size());
  REQUIRE((*r)->read_tensor("w", back.data(), back.size()).ok());
  CHECK(back == data);
}
