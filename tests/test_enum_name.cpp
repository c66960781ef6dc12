// Tests for include/ckpt/core/enum_name.hpp: the one table every *_name function reads, and every
// enum the library names through it. The names are spelled out here because messages, JSON documents
// and golden files carry them: a table edited by mistake fails here first.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ckpt/core/enum_name.hpp>
#include <ckpt/core/error.hpp>
#include <ckpt/core/format.hpp>
#include <ckpt/core/hash.hpp>
#include <ckpt/core/value.hpp>
#include <ckpt/dist/coverage.hpp>
#include <ckpt/identity/identity.hpp>
#include <ckpt/interop/foreign.hpp>
#include <ckpt/interop/gguf.hpp>
#include <ckpt/interop/pickle.hpp>
#include <ckpt/io/fs_op.hpp>
#include <ckpt/shard/verify.hpp>
#include <ckpt/store/journal.hpp>
#include <ckpt/store/path_kind.hpp>
#include <ckpt/store/store.hpp>
#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/tiers/memory_root.hpp>
#include <ckpt/tiers/tier_log.hpp>
#include <ckpt/tiers/tiered.hpp>

using namespace ckpt;

namespace enum_name_test {
enum class Colour : std::uint8_t { red, green, blue };
[[nodiscard]] constexpr EnumBounds<Colour> enum_bounds(Colour) noexcept { return {Colour::red, Colour::blue}; }
constexpr const char* colour_name(Colour c) noexcept { return enum_name(c, {"red", "green", "blue"}); }

enum class Level : std::uint16_t { low = 1, high = 2, special = 0x100 };
[[nodiscard]] constexpr EnumBounds<Level> enum_bounds(Level) noexcept { return {Level::low, Level::special, 3}; }
constexpr const char* level_name(Level l) noexcept {
  return enum_name(l, {{Level::low, "low"}, {Level::high, "high"}, {Level::special, "special"}}, "no level");
}
}  // namespace enum_name_test

namespace {

template <class E>
[[nodiscard]] E from_value(std::uint64_t v) {
  return static_cast<E>(static_cast<std::underlying_type_t<E>>(v));
}

// Every enumerator of a contiguous enum, first to last, has the expected name, the names are distinct
// and none is the fallback; the values just outside the bounds get the fallback.
template <class E, class NameOf>
void check_contiguous(NameOf name_of, const std::vector<std::string>& expected, const std::string& unknown = "unknown") {
  constexpr EnumBounds<E> bounds = enum_bounds(E{});
  STATIC_REQUIRE(bounds.contiguous());
  REQUIRE(enum_count<E>() == expected.size());
  const auto first = static_cast<std::uint64_t>(bounds.first), last = static_cast<std::uint64_t>(bounds.last);
  REQUIRE(last - first + 1 == expected.size());
  std::set<std::string> seen;
  for (std::uint64_t v = first; v <= last; ++v) {
    const std::string name = name_of(from_value<E>(v));
    INFO("value " << v);
    CHECK(name == expected[v - first]);
    CHECK(name != unknown);
    seen.insert(name);
  }
  CHECK(seen.size() == expected.size());
  CHECK(std::string(name_of(from_value<E>(last + 1))) == unknown);
  if (first > 0) CHECK(std::string(name_of(from_value<E>(first - 1))) == unknown);
  using U = std::underlying_type_t<E>;
  CHECK(std::string(name_of(static_cast<E>(std::numeric_limits<U>::max()))) == unknown);
}

}  // namespace

TEST_CASE("a name table in declaration order names each enumerator and nothing else", "[enum_name]") {
  using enum_name_test::Colour;
  STATIC_REQUIRE(enum_count<Colour>() == 3);
  STATIC_REQUIRE(std::string_view(enum_name_test::colour_name(Colour::green)) == "green");
  const std::pair<Colour, const char*> names[] = {{Colour::blue, "blue"}, {static_cast<Colour>(3), "unknown"}, {static_cast<Colour>(255), "unknown"}};
  for (const auto& [value, name] : names) CHECK(std::string(enum_name_test::colour_name(value)) == name);
}

TEST_CASE("an enum with gaps is named by value, with its own fallback", "[enum_name]") {
  using enum_name_test::Level;
  constexpr auto bounds = enum_bounds(Level{});
  STATIC_REQUIRE(!bounds.contiguous());
  STATIC_REQUIRE(enum_count<Level>() == 3);
  const std::pair<Level, const char*> names[] = {
      {Level::special, "special"}, {Level::low, "low"}, {static_cast<Level>(3), "no level"}, {static_cast<Level>(0), "no level"}};
  for (const auto& [value, name] : names) CHECK(std::string(enum_name_test::level_name(value)) == name);
}

TEST_CASE("every enumerator of every named enum has its own name, and other values are unknown", "[enum_name]") {
  SECTION("Code") {
    check_contiguous<Code>(code_name, {"ok", "io", "corrupt", "incomplete", "version", "not_found", "invalid_argument", "conflict",
                                       "unsupported", "cancelled"});
  }
  SECTION("format::ValueType") {
    check_contiguous<format::ValueType>(value_type_name, {"int64", "float64", "bool", "string", "bytes"});
  }
  SECTION("FsOp") {
    check_contiguous<FsOp>(fs_op_name, {"open", "close", "pread", "pwrite", "sync", "sync_data", "file_size", "truncate", "rename",
                                        "unlink", "mkdir", "rmdir", "sync_dir", "list_dir", "stat", "lock", "map"});
  }
  SECTION("HashUnit") { check_contiguous<HashUnit>(hash_unit_name, {"build", "sse2", "avx2", "avx512"}); }
  SECTION("CoverageIssue") {
    check_contiguous<CoverageIssue>(coverage_issue_name, {"dtype_mismatch", "shape_mismatch", "out_of_bounds", "overlap", "gap",
                                                          "replica_mismatch"});
  }
  SECTION("ForeignFormat") {
    check_contiguous<ForeignFormat>(foreign_format_name, {"safetensors", "safetensors-index", "dcp", "gguf"});
  }
  SECTION("PickleKind: a phrase for the unknown value too") {
    check_contiguous<PickleKind>(pickle_kind_name,
                                 {"None", "a bool", "an int", "an int wider than 64 bits", "a float", "a str", "bytes", "a tuple",
                                  "a list", "a dict", "a set", "a frozenset", "a global", "an object"},
                                 "an unknown value");
  }
  SECTION("StepRecheck") {
    check_contiguous<StepRecheck>(step_recheck_name, {"committed", "retired", "not in the journal"});
  }
  SECTION("AbortReason") {
    check_contiguous<AbortReason>(abort_reason_name, {"writer_error", "user", "recovery"});
  }
  SECTION("TxnState") {
    check_contiguous<TxnState>(txn_state_name, {"open", "committed", "aborted", "retired"});
  }
  SECTION("RecoveryActionKind") {
    check_contiguous<RecoveryActionKind>(recovery_action_name, {"truncate_journal", "append_abort", "remove_file", "remove_dir",
                                                                "sync_dir", "append_commit", "quarantine", "rewrite_journal"});
  }
  SECTION("PathKind") {
    check_contiguous<PathKind>(path_kind_name, {"file", "store", "step directory", "store without a journal", "directory",
                                                "memory root", "rank directory"});
  }
  SECTION("Fate") { check_contiguous<Fate>(fate_name, {"lost", "kept", "torn", "garbled"}); }
  SECTION("Fault") { check_contiguous<Fault>(fault_name, {"none", "no_space", "io_error", "short_write", "interrupted"}); }
  SECTION("ChangeKind") { check_contiguous<ChangeKind>(change_kind_name, {"added", "removed", "changed"}); }
  SECTION("TierAction") {
    check_contiguous<tiers::TierAction>(tiers::tier_action_name, {"none", "capture", "capture_and_persist"});
  }
  SECTION("TierEvent: upper case, the unknown one too") {
    check_contiguous<tiers::TierEvent>(tiers::tier_event_name, {"CAPTURED", "HELD", "REPLICATED", "PERSISTED", "EVICTED",
                                                                 "SET_ASIDE", "LOAD_FAILED", "RESUMED", "SKIPPED", "SDC", "PARITY", "REBUILT"},
                                       "UNKNOWN");
  }
  SECTION("PersistentState") {
    check_contiguous<tiers::PersistentState>(tiers::persistent_state_name, {"not checked", "absent", "same", "different", "unreadable"});
  }
  SECTION("gguf::ValueType: by code, null for an unknown code") {
    const std::vector<std::string> expected = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    REQUIRE(enum_count<gguf::ValueType>() == expected.size());
    REQUIRE(gguf::kValueTypeCount == expected.size());
    for (std::uint32_t t = 0; t < gguf::kValueTypeCount; ++t) {
      REQUIRE(gguf::value_type_name(t) != nullptr);
      CHECK(gguf::value_type_name(t) == expected[t]);
    }
    CHECK(gguf::value_type_name(gguf::kValueTypeCount) == nullptr);
    CHECK(gguf::value_type_name(0xFFFFFFFFu) == nullptr);
  }
}

TEST_CASE("journal record types are named by value, unknown ones by their ignorable bit", "[enum_name]") {
  using journal::RecordType;
  const std::vector<std::pair<RecordType, std::string>> expected = {
      {RecordType::header, "HEADER"}, {RecordType::pad, "PAD"},       {RecordType::begin, "BEGIN"},
      {RecordType::commit, "COMMIT"}, {RecordType::abort, "ABORT"},   {RecordType::retire, "RETIRE"},
      {RecordType::save_stats, "SAVE_STATS"}, {RecordType::begin_shards, "BEGIN_SHARDS"}};
  REQUIRE(enum_count<RecordType>() == expected.size());
  std::set<std::string> seen;
  for (const auto& [type, name] : expected) {
    CHECK(journal::record_type_name(static_cast<std::uint16_t>(type)) == name);
    seen.insert(name);
  }
  CHECK(seen.size() == expected.size());
  CHECK(std::string(journal::record_type_name(0)) == "UNKNOWN");
  CHECK(std::string(journal::record_type_name(9)) == "UNKNOWN");
  CHECK(std::string(journal::record_type_name(journal::kIgnorableType | 9)) == "IGNORABLE");
  CHECK(std::string(journal::record_type_name(journal::kIgnorableType | 8)) == "IGNORABLE");
}

TEST_CASE("counts the library derives from enum bounds match the enums", "[enum_name]") {
  STATIC_REQUIRE(kFsOpCount == 17);
  STATIC_REQUIRE(enum_count<Code>() == static_cast<std::size_t>(kLastCode) + 1);
  STATIC_REQUIRE(enum_count<format::DType>() == sizeof(format::kDTypes) / sizeof(format::kDTypes[0]));
  STATIC_REQUIRE(gguf::kValueTypeCount == 13);
  STATIC_REQUIRE(enum_count<journal::RecordType>() == 8);
}
