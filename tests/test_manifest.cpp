// Tests for include/ckpt/store/manifest.hpp: round trip, canonical bytes, hostile inputs.
#include <catch2/catch.hpp>

#include <functional>

#include <ckpt/store/manifest.hpp>

#include "heap_counter.hpp"  // replaces operator new in this program
#include "test_util.hpp"

using namespace ckpt;

namespace {

Manifest sample_manifest() {
  Manifest m;
  m.txn = 42;
  m.step = 1000;
  m.world_size = 2;
  m.store_uuid[0] = 0xaa;
  for (std::uint32_t r = 0; r < 2; ++r) {
    ManifestShard s;
    s.rank = r;
    s.name = shard_file_name(r, 2);
    s.file_size = 8192 + r;
    s.uuid[5] = static_cast<unsigned char>(r + 1);
    s.index_digest = 0x1234 + r;
    s.data_bytes = 4000;
    s.tensor_count = 3;
    s.chunk_count = 7;
    m.shards.push_back(s);
  }
  m.state.step = 1000;
  m.state.rng = std::string("\0\1\2rng", 6);
  m.state.data = DataPosition{3, 12345, "sampler"};
  m.state.optimizer_tensors = {"adam.m/w", "adam.v/w"};
  m.state.values["lr"] = 3e-4;
  m.state.values["epoch_name"] = "warmup";
  m.state.values["seed"] = std::int64_t{-7};
  m.state.values["ema"] = true;
  m.state.values["blob"] = Bytes{std::string("\xff\x00", 2)};
  return m;
}

// Rewrites the trailing digest after a patch, so a test reaches the field checks behind it.
std::string redigest(std::string bytes) {
  const std::uint64_t d = xxh3_64(bytes.data(), bytes.size() - 8);
  put_u64(reinterpret_cast<unsigned char*>(&bytes[bytes.size() - 8]), d);
  return bytes;
}

Result<Manifest> decode(const std::string& bytes) {
  return decode_manifest(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "MANIFEST");
}

void put32(std::string& b, std::size_t off, std::uint32_t v) { put_u32(reinterpret_cast<unsigned char*>(&b[off]), v); }
void put64(std::string& b, std::size_t off, std::uint64_t v) { put_u64(reinterpret_cast<unsigned char*>(&b[off]), v); }

}  // namespace

TEST_CASE("a manifest round-trips field for field", "[manifest]") {
  const Manifest m = sample_manifest();
  REQUIRE(check_manifest(m).ok());
  const std::string bytes = encode_manifest(m);
  auto back = decode(bytes);
  REQUIRE(back.ok());
  CHECK(back->txn == 42);
  CHECK(back->step == 1000);
  CHECK(back->world_size == 2);
  CHECK(back->store_uuid == m.store_uuid);
  CHECK(back->shards == m.shards);
  CHECK(back->state == m.state);
  // One canonical encoding: decode then encode gives the same bytes.
  CHECK(encode_manifest(*back) == bytes);
  CHECK(manifest_digest(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) ==
        xxh3_64(bytes.data(), bytes.size() - 8));
}

TEST_CASE("every flipped byte and every truncation of a manifest is refused", "[manifest]") {
  const std::string bytes = encode_manifest(sample_manifest());
  for (const auto& d : ckpt_test::flips_and_cuts(bytes, 0x10)) {
    INFO(d.what);
    auto r = decode(d.bytes);
    REQUIRE_FALSE(r.ok());
    if (d.cut) CHECK((r.status().code() == Code::corrupt || r.status().code() == Code::incomplete));
    else CHECK(r.status().code() == Code::corrupt);
  }
  auto longer = decode(bytes + "x");
  CHECK_FALSE(longer.ok());
}

TEST_CASE("hostile shard names are refused by writer and reader", "[manifest]") {
  const std::vector<std::string> names = {"/etc/passwd", "..", "../../x", "a/b", ".", ".hidden", "MANIFEST", "",
                                          std::string(256, 'n'), std::string("a\0b", 3), "tab\tname", "caf\xc3\xa9"};
  for (const auto& name : names) {
    INFO("name '" << name << "'");
    Manifest m = sample_manifest();
    m.shards[1].name = name;
    CHECK(check_manifest(m).code() == Code::invalid_argument);
    // Encoded anyway (the encoder trusts its caller): the decoder refuses it.
    auto r = decode(encode_manifest(m));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::corrupt);
  }
}

TEST_CASE("manifest fields that break a rule are refused even with a valid digest", "[manifest]") {
  namespace hd = manifest::hd;
  const std::string good = encode_manifest(sample_manifest());
  const std::size_t body = manifest::kHeaderSize;
  struct Row {
    const char* what;
    std::function<void(std::string&)> patch;
    Code code;
  };
  const std::vector<Row> rows = {
      {"magic", [](std::string& b) { b[0] = 'X'; }, Code::corrupt},
      {"version 2", [](std::string& b) { put32(b, hd::kVersion, 2); }, Code::version},
      {"header size", [](std::string& b) { put32(b, hd::kHeaderSize, 72); }, Code::corrupt},
      {"world size 0", [](std::string& b) { put32(b, hd::kWorldSize, 0); }, Code::corrupt},
      {"world size 1 leaves rank 1 outside", [](std::string& b) { put32(b, hd::kWorldSize, 1); }, Code::corrupt},
      {"world size 3 leaves rank 2 without a shard", [](std::string& b) { put32(b, hd::kWorldSize, 3); }, Code::corrupt},
      {"shard count 2^32-1", [](std::string& b) { put32(b, hd::kShardCount, 0xffffffff); }, Code::corrupt},
      {"shard count 1 leaves bytes", [](std::string& b) { put32(b, hd::kShardCount, 1); }, Code::corrupt},
      {"body length", [](std::string& b) { put64(b, hd::kBodyLength, 5); }, Code::corrupt},
      {"body length 2^64-1", [](std::string& b) { put64(b, hd::kBodyLength, ~std::uint64_t{0}); }, Code::corrupt},
      {"shard reserved field", [&](std::string& b) { b[body + 6] = 1; }, Code::corrupt},
      {"shard name length past the end", [&](std::string& b) { b[body + 4] = static_cast<char>(0xff); b[body + 5] = 0x7f; }, Code::corrupt},
      {"same rank twice", [&](std::string& b) { put32(b, body + 64 + 25, 0); }, Code::corrupt},
      {"RNG length 2^64-1",
       [&](std::string& b) { put64(b, body + 2 * (64 + 25), ~std::uint64_t{0}); }, Code::corrupt},
  };
  for (const auto& row : rows) {
    std::string b = good;
    row.patch(b);
    auto r = decode(redigest(b));
    INFO(row.what);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == row.code);
  }
}

TEST_CASE("a manifest is bounded before it is decoded", "[manifest]") {
  // The size check comes first: a buffer claimed larger than the limit is refused unread.
  const std::string bytes = encode_manifest(sample_manifest());
  auto r = decode_manifest(reinterpret_cast<const unsigned char*>(bytes.data()), manifest::kMaxSize + 1, "MANIFEST");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::corrupt);
}

TEST_CASE("check_manifest refuses what decode would refuse", "[manifest]") {
  Manifest m = sample_manifest();
  m.shards[1].rank = 0;  // rank 1 has no shard
  CHECK(check_manifest(m).code() == Code::invalid_argument);
  m = sample_manifest();
  m.shards[1].name = m.shards[0].name;
  CHECK(check_manifest(m).code() == Code::invalid_argument);
  m = sample_manifest();
  m.state.step = 999;
  CHECK(check_manifest(m).code() == Code::invalid_argument);
  m = sample_manifest();
  m.world_size = journal::kMaxWorldSize + 1;
  CHECK(check_manifest(m).code() == Code::invalid_argument);
}

TEST_CASE("a shard entry travels between ranks unchanged", "[manifest]") {
  ShardSummary summary;
  summary.uuid[0] = 1;
  summary.file_size = 10;
  summary.index_digest = 11;
  summary.data_bytes = 12;
  summary.tensor_count = 13;
  summary.chunk_count = 14;
  const ManifestShard s = manifest_shard(3, shard_file_name(3, 4), summary);
  Encoder e;
  encode_manifest_shard(e, s);
  CHECK(e.size() == manifest::kShardEntryFixedSize + s.name.size());
  Decoder d(reinterpret_cast<const unsigned char*>(e.str().data()), e.size());
  ManifestShard back;
  REQUIRE(decode_manifest_shard(d, back, "rank 3").ok());
  CHECK(back == s);
  CHECK(d.remaining() == 0);
}

TEST_CASE("a manifest of many tiny names decodes in a small multiple of its size (issue 9)", "[manifest][limits]") {
  // 200000 optimizer tensor names of 1 to 4 bytes: 7 input bytes each, the densest a state can be.
  Manifest m = sample_manifest();
  m.state.optimizer_tensors.clear();
  for (std::uint32_t i = 0; i < 200000; ++i) {
    std::string name;
    for (std::uint32_t v = i; name.empty() || v > 0; v /= 62) name += "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[v % 62];
    m.state.optimizer_tensors.push_back(name);
  }
  const std::string bytes = encode_manifest(m);
  ckpt_test::HeapPeak peak;
  auto decoded = decode(bytes);
  const std::int64_t used = peak.bytes();
  REQUIRE(decoded.ok());
  CHECK(decoded->state.optimizer_tensors.size() == 200000);
  // A std::string per name is 32 bytes for 7 input bytes; duplicates are found without a second copy.
  INFO("decode used " << used << " heap bytes for " << bytes.size() << " input bytes");
  CHECK(used < static_cast<std::int64_t>(8 * bytes.size()));

  SECTION("a duplicate among them is still found, naming the name") {
    m.state.optimizer_tensors.back() = m.state.optimizer_tensors.front();
    auto twice = decode(encode_manifest(m));
    REQUIRE_FALSE(twice.ok());
    CHECK(twice.status().code() == Code::corrupt);
    CHECK(twice.status().message().find("optimizer tensor '0' listed twice") != std::string::npos);
  }
}
