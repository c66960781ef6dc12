// Tests for include/ckpt/store/journal.hpp: framing, sync-group padding, torn tails, mid-log corruption.
#include <catch2/catch.hpp>

#include <ckpt/testing/fault_fs.hpp>
#include <ckpt/testing/sim_fs.hpp>
#include <ckpt/store/journal.hpp>

#include "test_util.hpp"

using namespace ckpt;
using journal::kPageSize;

namespace {

constexpr std::uint16_t kIgnorable = journal::kIgnorableType | 1;

BeginRecord make_begin(std::uint64_t txn, std::uint64_t step, std::uint32_t world = 1) {
  BeginRecord b;
  b.txn = txn;
  b.step = step;
  b.world_size = world;
  for (std::uint32_t r = 0; r < world; ++r) b.files.push_back(TxnFile{r, shard_file_name(r, world)});
  return b;
}

// HEADER | BEGIN 1 | COMMIT 1 | BEGIN 2 | COMMIT 2: five groups, five pages.
std::string five_group_log() {
  JournalHeader h;
  h.store_uuid[0] = 7;
  std::string log = encode_group({header_record(h)}, 0);
  log += encode_group({begin_record(make_begin(1, 100)).value()}, log.size());
  log += encode_group({commit_record(CommitRecord{1, 100, 500, 0xabc})}, log.size());
  log += encode_group({begin_record(make_begin(2, 200)).value()}, log.size());
  log += encode_group({commit_record(CommitRecord{2, 200, 600, 0xdef})}, log.size());
  return log;
}

// A frame with any type, flags and payload, with a valid digest at `offset`.
std::string frame(std::uint16_t type, std::uint16_t flags, const std::string& payload, std::uint64_t offset) {
  std::string out;
  frame_record(out, type, flags, payload, offset);
  return out;
}

// A group built by hand: records framed as given, then a PAD (LAST) to the page boundary.
std::string hand_group(const std::vector<std::pair<std::uint16_t, std::string>>& records, std::uint64_t offset,
                       std::uint16_t first_flags = journal::kFlagFirst) {
  std::string out;
  for (std::size_t i = 0; i < records.size(); ++i)
    frame_record(out, records[i].first, i == 0 ? first_flags : 0, records[i].second, offset + out.size());
  std::uint64_t room = kPageSize - (offset + out.size()) % kPageSize;
  if (room < journal::kFrameOverhead) room += kPageSize;
  frame_record(out, static_cast<std::uint16_t>(journal::RecordType::pad), journal::kFlagLast,
               std::string(room - journal::kFrameOverhead, '\0'), offset + out.size());
  return out;
}

std::string header_page() { return encode_group({header_record(JournalHeader{})}, 0); }

// Offsets in one group page worth damaging: every byte of the records and of the pad's frame, and
// every 61st byte of the pad's zeros between them (all covered by the same digest).
std::vector<std::uint64_t> damage_points(std::uint64_t page_start) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < kPageSize; ++i)
    if (i < 160 || i >= kPageSize - journal::kFrameDigestSize || i % 61 == 0) out.push_back(page_start + i);
  return out;
}

std::string begin_payload(std::uint64_t txn, std::uint32_t world, const std::vector<std::pair<std::uint32_t, std::string>>& files,
                          std::uint32_t count_override = 0xffffffff, std::uint16_t reserved = 0) {
  Encoder e;
  e.u64(txn);
  e.u64(10);
  e.u32(world);
  e.u32(count_override != 0xffffffff ? count_override : static_cast<std::uint32_t>(files.size()));
  for (const auto& f : files) {
    e.u32(f.first);
    e.u16(static_cast<std::uint16_t>(f.second.size()));
    e.u16(reserved);
    e.bytes(f.second);
  }
  return e.str();
}

}  // namespace

TEST_CASE("a journal of groups scans back record for record", "[journal]") {
  const std::string log = five_group_log();
  REQUIRE(log.size() == 5 * kPageSize);
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  CHECK(scan->has_header);
  CHECK(scan->header.store_uuid[0] == 7);
  CHECK_FALSE(scan->corrupt());
  CHECK_FALSE(scan->torn_tail);
  CHECK(scan->groups == 5);
  CHECK(scan->end == log.size());
  REQUIRE(scan->records.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(scan->records[i].offset == i * kPageSize);  // each group on a fresh page
  const auto& b = std::get<BeginRecord>(scan->records[1].body);
  CHECK(b.txn == 1);
  CHECK(b.step == 100);
  REQUIRE(b.files.size() == 1);
  CHECK(b.files[0].name == "shard-00000-of-00001.ckpt");
  const auto& c = std::get<CommitRecord>(scan->records[4].body);
  CHECK(c.txn == 2);
  CHECK(c.manifest_size == 600);
  CHECK(c.manifest_digest == 0xdef);
}

TEST_CASE("every sync group ends on a page boundary", "[journal]") {
  // HEADER frames to 56 bytes; an ignorable record of payload L then ends at 72 + L.
  struct Row {
    std::size_t payload;
    std::uint64_t group_end;
    bool has_pad;
  };
  const Row rows[] = {
      {0, kPageSize, true},         // plenty of room: pad to the end of the first page
      {4024, kPageSize, false},     // ends exactly on the boundary: the record itself is LAST
      {4016, 2 * kPageSize, true},  // 8 bytes left, fewer than a pad frame: the pad runs through the next page
      {4009, 2 * kPageSize, true},  // 15 bytes left: the same
      {4008, kPageSize, true},      // exactly 16 bytes left: an empty pad fills them
      {5000, 2 * kPageSize, true},  // a record spanning pages
  };
  for (const auto& row : rows) {
    std::vector<PendingRecord> records{header_record(JournalHeader{}), PendingRecord{kIgnorable, std::string(row.payload, 'x')}};
    std::vector<std::uint64_t> offsets;
    const std::string group = encode_group(records, 0, &offsets);
    const std::uint64_t record_end = 72 + row.payload;
    INFO("payload " << row.payload);
    CHECK(group.size() == row.group_end);
    CHECK((group.size() > record_end) == row.has_pad);
    REQUIRE(offsets.size() == 2);
    CHECK(offsets[1] == 56);
    auto scan = scan_journal_bytes(group);
    REQUIRE(scan.ok());
    CHECK_FALSE(scan->corrupt());
    CHECK_FALSE(scan->torn_tail);
    CHECK(scan->end == group.size());
    CHECK(scan->records.size() == 2);  // pads are not listed; the ignorable record is
  }
}

TEST_CASE("torn journal tail is end of log", "[journal]") {
  const std::string log = five_group_log();
  const std::uint64_t last_group = 4 * kPageSize;
  // Cut at every byte of the last record and its pad frame: the first four groups stand, the rest is a torn tail.
  for (const std::uint64_t cut : damage_points(last_group)) {
    auto scan = scan_journal_bytes(std::string_view(log).substr(0, cut));
    REQUIRE(scan.ok());
    INFO("cut at " << cut);
    CHECK_FALSE(scan->corrupt());
    CHECK(scan->end == last_group);
    CHECK(scan->records.size() == 4);
    CHECK(scan->torn_tail.has_value() == (cut > last_group));
    if (scan->torn_tail) {
      CHECK(scan->torn_tail->offset == last_group);
      CHECK(scan->torn_tail->length == cut - last_group);
    }
  }
  // Damage to any byte of the last group, with nothing valid after it, is the same torn tail.
  for (const std::uint64_t at : damage_points(last_group)) {
    std::string damaged = log;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x01);
    auto scan = scan_journal_bytes(damaged);
    REQUIRE(scan.ok());
    INFO("flip at " << at);
    CHECK_FALSE(scan->corrupt());
    CHECK(scan->end == last_group);
    REQUIRE(scan->torn_tail);
    CHECK(scan->torn_tail->length == kPageSize);
  }
  // A tail of zeros (a preallocated or unwritten page) is torn too.
  auto zeros = scan_journal_bytes(log + std::string(3 * kPageSize, '\0'));
  REQUIRE(zeros.ok());
  CHECK_FALSE(zeros->corrupt());
  CHECK(zeros->end == log.size());
  REQUIRE(zeros->torn_tail);
  CHECK(zeros->torn_tail->length == 3 * kPageSize);
}

TEST_CASE("a group whose LAST record is missing is not applied", "[journal]") {
  // BEGIN survived, the PAD that ends its group did not: the BEGIN is part of the torn tail, so a
  // reader and the writer's recovery agree on what exists.
  const std::string log = five_group_log();
  const std::string cut = log.substr(0, 4 * kPageSize + 100);  // the COMMIT record (48 bytes) is whole
  auto scan = scan_journal_bytes(cut);
  REQUIRE(scan.ok());
  CHECK(scan->records.size() == 4);
  REQUIRE(scan->torn_tail);
  REQUIRE(scan->torn_tail->unapplied.size() == 1);
  CHECK(scan->torn_tail->unapplied[0].type == static_cast<std::uint16_t>(journal::RecordType::commit));
}

TEST_CASE("a flipped bit mid-log is reported, not skipped", "[journal]") {
  const std::string log = five_group_log();
  // The second group (BEGIN txn 1, page 1) and the third (COMMIT txn 1, page 2).
  std::vector<std::uint64_t> points = damage_points(kPageSize);
  for (const auto p : damage_points(2 * kPageSize)) points.push_back(p);
  for (const std::uint64_t at : points) {
    std::string damaged = log;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x40);
    auto scan = scan_journal_bytes(damaged);
    REQUIRE(scan.ok());
    INFO("flip at " << at);
    REQUIRE(scan->corruption.size() == 1);
    const auto& d = scan->corruption[0];
    CHECK(d.offset == align_up(at + 1, kPageSize) - kPageSize);  // the damaged group
    CHECK(d.length == kPageSize);
    CHECK(d.bad_offset >= d.offset);
    CHECK_FALSE(d.reason.empty());
    // The groups after the damage are still read: nothing past it is silently dropped.
    CHECK(scan->records.size() == 4);
    CHECK(scan->end == log.size());
    CHECK_FALSE(scan->torn_tail);
    CHECK(scan->corruption_summary().find(std::to_string(d.offset)) != std::string::npos);
  }
}

TEST_CASE("damage to the header is corruption, never an empty log", "[journal]") {
  std::string log = five_group_log();
  log[20] = static_cast<char>(log[20] ^ 1);
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  CHECK_FALSE(scan->has_header);
  CHECK(scan->corrupt());
  // A journal holding only a torn header: no header, so corrupt as well (a journal is created whole).
  auto only = scan_journal_bytes(log.substr(0, 100));
  REQUIRE(only.ok());
  CHECK(only->corrupt());
  auto empty = scan_journal_bytes("");
  REQUIRE(empty.ok());
  CHECK(empty->corrupt());
}

TEST_CASE("a record is valid only at the offset it was written at", "[journal]") {
  // Copy the BEGIN page over the COMMIT page: same bytes, wrong place.
  std::string log = five_group_log();
  log.replace(2 * kPageSize, kPageSize, log.substr(kPageSize, kPageSize));
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  REQUIRE(scan->corruption.size() == 1);
  CHECK(scan->corruption[0].offset == 2 * kPageSize);
  CHECK(scan->corruption[0].reason.find("digest") != std::string::npos);
}

TEST_CASE("record lengths are bounded before anything is read or allocated", "[journal]") {
  for (const std::uint32_t length : {journal::kMaxPayload + 1, 0xffffffffu, 5000u}) {
    std::string log = header_page();
    unsigned char h[8];
    put_u32(h, length);
    put_u16(h + 4, static_cast<std::uint16_t>(journal::RecordType::begin));
    put_u16(h + 6, journal::kFlagFirst);
    log.append(reinterpret_cast<const char*>(h), 8);
    log.append(100, 'z');
    auto scan = scan_journal_bytes(log);
    REQUIRE(scan.ok());
    INFO("length " << length);
    CHECK_FALSE(scan->corrupt());
    REQUIRE(scan->torn_tail);
    CHECK(scan->end == kPageSize);
  }
}

TEST_CASE("digest-valid records that break a rule are corruption even at the tail", "[journal]") {
  using journal::RecordType;
  const auto begin = static_cast<std::uint16_t>(RecordType::begin);
  const std::string good_name = "shard-00000-of-00001.ckpt";
  struct Row {
    const char* what;
    std::string group;  // the bytes after the header page
  };
  const std::uint64_t at = kPageSize;
  const std::vector<Row> rows = {
      {"first record without FIRST", hand_group({{begin, begin_payload(1, 1, {{0, good_name}})}}, at, 0)},
      {"absolute path", hand_group({{begin, begin_payload(1, 1, {{0, "/etc/passwd"}})}}, at)},
      {"parent directory", hand_group({{begin, begin_payload(1, 1, {{0, ".."}})}}, at)},
      {"escape with ..", hand_group({{begin, begin_payload(1, 1, {{0, "../x.ckpt"}})}}, at)},
      {"slash", hand_group({{begin, begin_payload(1, 1, {{0, "a/b"}})}}, at)},
      {"hidden", hand_group({{begin, begin_payload(1, 1, {{0, ".x"}})}}, at)},
      {"empty name", hand_group({{begin, begin_payload(1, 1, {{0, ""}})}}, at)},
      {"MANIFEST", hand_group({{begin, begin_payload(1, 1, {{0, "MANIFEST"}})}}, at)},
      {"control byte", hand_group({{begin, begin_payload(1, 1, {{0, std::string("a\nb", 3)}})}}, at)},
      {"NUL byte", hand_group({{begin, begin_payload(1, 1, {{0, std::string("a\0b", 3)}})}}, at)},
      {"256-byte name", hand_group({{begin, begin_payload(1, 1, {{0, std::string(256, 'a')}})}}, at)},
      {"rank outside the world", hand_group({{begin, begin_payload(1, 1, {{1, good_name}})}}, at)},
      {"same name twice", hand_group({{begin, begin_payload(1, 2, {{0, "a"}, {1, "a"}})}}, at)},
      {"world size 0", hand_group({{begin, begin_payload(1, 0, {})}}, at)},
      {"world size over the limit", hand_group({{begin, begin_payload(1, journal::kMaxWorldSize + 1, {})}}, at)},
      {"file count over the bytes present", hand_group({{begin, begin_payload(1, 1, {}, 0x7fffffff)}}, at)},
      {"reserved field set", hand_group({{begin, begin_payload(1, 1, {{0, good_name}}, 0xffffffff, 1)}}, at)},
      {"trailing bytes", hand_group({{begin, begin_payload(1, 1, {{0, good_name}}) + "x"}}, at)},
      {"COMMIT of the wrong size", hand_group({{static_cast<std::uint16_t>(RecordType::commit), std::string(31, '\0')}}, at)},
      {"ABORT with an unknown reason", hand_group({{static_cast<std::uint16_t>(RecordType::abort), [] {
                                                      Encoder e;
                                                      e.u64(1);
                                                      e.u64(10);
                                                      e.u32(9);
                                                      e.u32(0);
                                                      return e.str();
                                                    }()}},
                                                  at)},
      {"type 0", hand_group({{0, "abc"}}, at)},
      {"second HEADER", hand_group({{static_cast<std::uint16_t>(RecordType::header), header_record(JournalHeader{}).payload}}, at)},
      {"padding with data", [&] {
         std::string g = frame(begin, journal::kFlagFirst, begin_payload(1, 1, {{0, good_name}}), at);
         const std::size_t room = kPageSize - g.size() - journal::kFrameOverhead;
         std::string pad(room, '\0');
         pad[3] = 1;
         return g + frame(static_cast<std::uint16_t>(RecordType::pad), journal::kFlagLast, pad, at + g.size());
       }()},
      {"LAST record off a page boundary", frame(begin, journal::kFlagFirst | journal::kFlagLast,
                                                begin_payload(1, 1, {{0, good_name}}), at)},
      {"pad that is not LAST", [&] {
         std::string g = frame(static_cast<std::uint16_t>(RecordType::pad), journal::kFlagFirst, std::string(10, '\0'), at);
         return g + hand_group({{kIgnorable, ""}}, at + g.size(), 0);
       }()},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    auto scan = scan_journal_bytes(header_page() + row.group);
    REQUIRE(scan.ok());
    CHECK(scan->corrupt());
    REQUIRE(scan->corruption.size() == 1);
    CHECK(scan->corruption[0].offset == kPageSize);
    CHECK_FALSE(scan->torn_tail);
    CHECK(scan->end == kPageSize);
    CHECK(scan->records.size() == 1);
  }
}

TEST_CASE("the first record must be the header", "[journal]") {
  std::string log = hand_group({{kIgnorable, "x"}}, 0);
  log += encode_group({commit_record(CommitRecord{1, 1, 1, 1})}, log.size());
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  CHECK(scan->corrupt());
  CHECK_FALSE(scan->has_header);
}

TEST_CASE("records and flags from a newer writer are refused, ignorable types are skipped", "[journal]") {
  const std::string head = header_page();
  auto unknown_type = scan_journal_bytes(head + hand_group({{77, "new"}}, kPageSize));
  REQUIRE_FALSE(unknown_type.ok());
  CHECK(unknown_type.status().code() == Code::version);
  std::string flags = frame(kIgnorable, journal::kFlagFirst | 0x0100, "", kPageSize);
  flags += hand_group({{kIgnorable, ""}}, kPageSize + flags.size(), 0);
  auto unknown_flag = scan_journal_bytes(head + flags);
  REQUIRE_FALSE(unknown_flag.ok());
  CHECK(unknown_flag.status().code() == Code::version);
  auto ignorable = scan_journal_bytes(head + hand_group({{kIgnorable, "later"}}, kPageSize));
  REQUIRE(ignorable.ok());
  CHECK_FALSE(ignorable->corrupt());
  CHECK(ignorable->records.size() == 2);
  // A header of another version is refused too.
  std::string v3 = header_record(JournalHeader{}).payload;
  v3[8] = 3;
  auto version = scan_journal_bytes(hand_group({{static_cast<std::uint16_t>(journal::RecordType::header), v3}}, 0));
  REQUIRE_FALSE(version.ok());
  CHECK(version.status().code() == Code::version);
}

TEST_CASE("a FIRST record inside an unfinished group starts the next valid group", "[journal]") {
  // Group 1 lost its end (its PAD), yet group 2 follows: the damage is mid-log and group 2 is applied.
  const std::string log = five_group_log();
  std::string damaged = log.substr(0, kPageSize);
  const PendingRecord begin = begin_record(make_begin(1, 100)).value();
  damaged += frame(begin.type, journal::kFlagFirst, begin.payload, kPageSize);
  damaged.resize(2 * kPageSize, '\0');
  damaged += log.substr(2 * kPageSize);
  auto scan = scan_journal_bytes(damaged);
  REQUIRE(scan.ok());
  REQUIRE(scan->corruption.size() == 1);
  CHECK(scan->corruption[0].offset == kPageSize);
  CHECK(scan->corruption[0].length == kPageSize);
  CHECK(scan->corruption[0].unapplied.size() == 1);
  CHECK(scan->records.size() == 4);
}

TEST_CASE("store names are checked and parsed exactly", "[journal]") {
  for (const std::string& good : {std::string("a"), std::string("shard-00000-of-00001.ckpt"), std::string("A.b_c-9"),
                                 std::string(255, 'x')}) {
    INFO(good);
    CHECK(check_file_name(good).ok());
  }
  for (const std::string& bad : {std::string(), std::string("."), std::string(".."), std::string("../a"), std::string("/a"),
                                std::string("a/b"), std::string("a\\b"), std::string(".a"), std::string("MANIFEST"),
                                std::string("a b"), std::string("caf\xc3\xa9"), std::string(256, 'x'), std::string("a\0", 2)}) {
    INFO(bad);
    CHECK(check_file_name(bad).code() == Code::invalid_argument);
  }
  std::uint64_t step = 0, txn = 0;
  CHECK(parse_step_dir_name("step-0-1", step, txn));
  CHECK((step == 0 && txn == 1));
  CHECK(parse_step_dir_name(step_dir_name(18446744073709551615u, 42), step, txn));
  CHECK((step == 18446744073709551615u && txn == 42));
  for (const char* bad : {"step-01-1", "step--1", "step-1-", "step-1-2x", "step-1", "Step-1-1", "step-1-+2",
                          "step-18446744073709551616-1", "step-1-2-3", "xstep-1-2"}) {
    INFO(bad);
    CHECK_FALSE(parse_step_dir_name(bad, step, txn));
  }
  CHECK(shard_file_name(3, 8) == "shard-00003-of-00008.ckpt");
}

TEST_CASE("begin_record refuses what a reader would refuse", "[journal]") {
  BeginRecord b = make_begin(1, 1);
  b.files.push_back(TxnFile{0, "../escape"});
  CHECK(begin_record(b).status().code() == Code::invalid_argument);
  b = make_begin(1, 1);
  b.files[0].rank = 1;
  CHECK(begin_record(b).status().code() == Code::invalid_argument);
  b = make_begin(1, 1, 2);
  b.files[1].name = b.files[0].name;
  CHECK(begin_record(b).status().code() == Code::invalid_argument);
  b.world_size = 0;
  CHECK(begin_record(b).status().code() == Code::invalid_argument);
}

TEST_CASE("the journal writer appends durable groups at page boundaries", "[journal]") {
  SimFs sim;
  JournalHeader header;
  header.store_uuid[3] = 9;
  REQUIRE(JournalWriter::create(sim, "/JOURNAL", header).ok());
  CHECK(sim.unsynced_file_ops() == 0);
  CHECK(sim.unsynced_dir_ops() == 0);  // created under a temporary name, renamed, directory synced
  auto writer = JournalWriter::open(sim, "/JOURNAL", kPageSize);
  REQUIRE(writer.ok());
  REQUIRE(writer->append_group({begin_record(make_begin(1, 5)).value()}).ok());
  CHECK(writer->last_offsets() == std::vector<std::uint64_t>{kPageSize});
  REQUIRE(writer->append_group({commit_record(CommitRecord{1, 5, 9, 9}), abort_record(AbortRecord{2, 6, AbortReason::user})}).ok());
  CHECK(writer->last_offsets() == std::vector<std::uint64_t>{2 * kPageSize, 2 * kPageSize + 48});
  CHECK(writer->end() == 3 * kPageSize);
  CHECK(sim.unsynced_file_ops() == 0);  // every group was fdatasynced
  auto scan = scan_journal(sim, "/JOURNAL");
  REQUIRE(scan.ok());
  CHECK(scan->records.size() == 4);
  CHECK(scan->header.store_uuid[3] == 9);
  CHECK(scan->end == 3 * kPageSize);
  // Not on a page boundary: refused.
  CHECK(JournalWriter::open(sim, "/JOURNAL", 100).status().code() == Code::invalid_argument);
}

TEST_CASE("after a failed sync the journal writer refuses every later append", "[journal]") {
  SimFs sim;
  REQUIRE(JournalWriter::create(sim, "/JOURNAL", JournalHeader{}).ok());
  FaultFs<SimFs> faulty(sim, FaultPlan::nth(1, Fault::io_error, fs_op_bit(FsOp::sync_data)));
  auto writer = JournalWriter::open(faulty, "/JOURNAL", kPageSize);
  REQUIRE(writer.ok());
  Status s = writer->append_group({begin_record(make_begin(1, 5)).value()});
  CHECK(s.code() == Code::io);
  CHECK(writer->failed());
  const std::uint64_t ops = faulty.total_count();
  faulty.set_plan({});
  CHECK(writer->append_group({commit_record(CommitRecord{1, 5, 9, 9})}).code() == Code::io);
  CHECK(faulty.total_count() == 0);  // refused without touching the file
  CHECK(ops > 0);
  CHECK(writer->end() == kPageSize);
}

TEST_CASE("truncate_tail cuts a torn group so the next one starts on its page", "[journal]") {
  SimFs sim;
  REQUIRE(JournalWriter::create(sim, "/JOURNAL", JournalHeader{}).ok());
  {
    auto f = sim.open("/JOURNAL", OpenMode::read_write);
    REQUIRE(f.ok());
    const std::string garbage(700, 'g');
    REQUIRE(sim.pwrite(*f, garbage.data(), garbage.size(), kPageSize).ok());
    REQUIRE(sim.close(*f).ok());
  }
  auto scan = scan_journal(sim, "/JOURNAL");
  REQUIRE(scan.ok());
  REQUIRE(scan->torn_tail);
  auto writer = JournalWriter::open(sim, "/JOURNAL", scan->end);
  REQUIRE(writer.ok());
  REQUIRE(writer->truncate_tail(scan->end).ok());
  CHECK(sim.unsynced_file_ops() == 0);
  REQUIRE(writer->append_group({begin_record(make_begin(1, 5)).value()}).ok());
  auto again = scan_journal(sim, "/JOURNAL");
  REQUIRE(again.ok());
  CHECK_FALSE(again->torn_tail);
  CHECK(again->records.size() == 2);
}

TEST_CASE("the worked example of spec/JOURNAL.md 14 is what the encoder writes", "[journal]") {
  JournalHeader h;
  for (int i = 0; i < 16; ++i) h.store_uuid[static_cast<std::size_t>(i)] = static_cast<unsigned char>(0x10 + i);
  std::string log = encode_group({header_record(h)}, 0);
  log += encode_group({begin_record(make_begin(1, 100)).value()}, log.size());
  log += encode_group({commit_record(CommitRecord{1, 100, 0x1a2, 0x0123456789abcdefULL})}, log.size());
  REQUIRE(log.size() == 3 * kPageSize);
  auto u64_at = [&](std::size_t off) { return get_u64(reinterpret_cast<const unsigned char*>(log.data()) + off); };
  // Frame digests as printed in the spec (checked there against the Python xxhash package).
  CHECK(u64_at(0x30) == 0xec50c1a12190ec2dULL);     // HEADER, seed 0
  CHECK(u64_at(0xff8) == 0x5fcc8dfb1f66ff7aULL);    // PAD, seed 56
  CHECK(u64_at(0x1020) == 0x468d54980df65f62ULL);   // BEGIN_SHARDS, seed 4096
  CHECK(u64_at(0x1ff8) == 0xf9c16851e4cd79a0ULL);   // PAD, seed 4136
  CHECK(u64_at(0x2028) == 0xf0dc549175e8353cULL);   // COMMIT, seed 8192
  CHECK(u64_at(0x2ff8) == 0x13fcc3e318bebd01ULL);   // PAD, seed 8240
  CHECK(log.substr(0, 16) == std::string("\x28\0\0\0\x01\0\x01\0CKPTJRNL", 16));
  CHECK(log.substr(0x10, 4) == std::string("\x02\0\0\0", 4));     // version 2
  CHECK(log.substr(0x1000, 8) == std::string("\x18\0\0\0\x08\0\x01\0", 8));  // 24 bytes, type 8, FIRST
}

TEST_CASE("a BEGIN for W ranks is O(1) in W when it names the standard shard files", "[journal]") {
  for (const std::uint32_t world : {1u, 7u, 4096u, journal::kMaxWorldSize}) {
    INFO("world " << world);
    BeginRecord b = make_begin(3, 30, world);
    auto rec = begin_record(b);
    REQUIRE(rec.ok());
    CHECK(rec->type == static_cast<std::uint16_t>(journal::RecordType::begin_shards));
    CHECK(rec->payload.size() == journal::kBeginShardsPayloadSize);
    auto scan = scan_journal_bytes(header_page() + encode_group({*rec}, kPageSize));
    REQUIRE(scan.ok());
    REQUIRE(scan->records.size() == 2);
    const auto* decoded = std::get_if<BeginRecord>(&scan->records[1].body);
    REQUIRE(decoded != nullptr);
    CHECK(decoded->files == b.files);
  }
  // Any other file list is spelled out, as in version 1.
  BeginRecord odd = make_begin(4, 40, 2);
  odd.files.pop_back();
  auto rec = begin_record(odd);
  REQUIRE(rec.ok());
  CHECK(rec->type == static_cast<std::uint16_t>(journal::RecordType::begin));
}

TEST_CASE("a damaged tail is a clean tear only when the bytes look like an interrupted append", "[journal][evidence]") {
  const std::string head = header_page();
  const std::string group =
      encode_group({commit_record(CommitRecord{1, 100, 418, 0x55}), save_stats_record(SaveRecord{1, 100, 9, 1, 2, false})}, kPageSize);
  auto flipped = [&](std::size_t at) {
    std::string g = group;
    g[at] = static_cast<char>(g[at] ^ 0x10);
    return g;
  };
  struct Row {
    const char* what;
    std::string tail;
    bool clean;
    std::size_t unapplied;
  };
  const std::vector<Row> rows = {
      {"cut inside the COMMIT", group.substr(0, 30), true, 0},
      {"cut inside the PAD", group.substr(0, 300), true, 2},
      {"the PAD's last sector never written", group.substr(0, 3584) + std::string(512, '\0'), true, 2},
      {"a bit flipped in the PAD's zeros", flipped(1000), false, 2},
      {"a bit flipped in the PAD's digest", flipped(4090), false, 2},
      {"a bit flipped in the COMMIT's payload", flipped(20), false, 1},  // SAVE_STATS still found past it
      {"a bit flipped in SAVE_STATS", flipped(60), false, 1},
      {"bytes no writer writes", std::string(200, 'T'), false, 0},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    auto scan = scan_journal_bytes(head + row.tail);
    REQUIRE(scan.ok());
    CHECK_FALSE(scan->corrupt());
    REQUIRE(scan->torn_tail);
    CHECK(scan->torn_tail->clean_tear == row.clean);
    CHECK(scan->tail_damaged() == !row.clean);
    CHECK(scan->torn_tail->unapplied.size() == row.unapplied);
    CHECK(scan->end == kPageSize);
  }
}

TEST_CASE("a damaged tail longer than any sync group is corruption, not a torn tail", "[journal][evidence]") {
  std::string log = header_page();
  log += std::string(journal::kMaxGroupSize + kPageSize, 'g');
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  CHECK_FALSE(scan->torn_tail);
  REQUIRE(scan->corrupt());
  CHECK(scan->corruption_summary().find("longer than any sync group") != std::string::npos);
}

TEST_CASE("the search for the next group after damage does bounded work on hostile bytes", "[journal][evidence]") {
  // Every page holds a header that could start a group and claims almost everything after it: without
  // a budget each would be hashed to the end, O(size^2). The scan stops undecided and calls it corruption.
  const std::size_t pages = 2048;  // 8 MiB
  std::string log = header_page();
  log.resize(kPageSize * (pages + 1), 'x');
  for (std::size_t p = 1; p <= pages; ++p) {
    unsigned char h[8];
    const std::uint64_t left = log.size() - p * kPageSize;
    put_u32(h, static_cast<std::uint32_t>(std::min<std::uint64_t>(left - 16, journal::kMaxPayload)));
    put_u16(h + 4, kIgnorable);
    put_u16(h + 6, journal::kFlagFirst);
    std::memcpy(&log[p * kPageSize], h, 8);
  }
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  REQUIRE(scan->corrupt());
  CHECK(scan->corruption_summary().find("cannot be told apart") != std::string::npos);
}

TEST_CASE("a version 1 journal still opens, with its spelled-out BEGIN", "[journal]") {
  JournalHeader h;
  std::string head = header_record(h).payload;
  head[8] = 1;  // version 1: bytes [32, 40) reserved, zero
  std::string log = hand_group({{static_cast<std::uint16_t>(journal::RecordType::header), head}}, 0);
  BeginRecord b = make_begin(1, 10, 2);
  b.files.push_back(TxnFile{1, "extra.ckpt"});  // not the standard list: a type 3 BEGIN
  log += encode_group({begin_record(b).value()}, log.size());
  log += encode_group({commit_record(CommitRecord{1, 10, 100, 7})}, log.size());
  auto scan = scan_journal_bytes(log);
  REQUIRE(scan.ok());
  CHECK_FALSE(scan->corrupt());
  CHECK(scan->header.version == 1);
  CHECK(scan->header.txn_floor == 0);
  REQUIRE(scan->records.size() == 3);
  // A version 1 header with its reserved bytes set is still refused.
  head[32] = 1;
  auto bad = scan_journal_bytes(hand_group({{static_cast<std::uint16_t>(journal::RecordType::header), head}}, 0));
  REQUIRE(bad.ok());
  CHECK(bad->corrupt());
}
