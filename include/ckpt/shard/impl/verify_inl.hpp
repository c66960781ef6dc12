// ckpt: definitions for verify.hpp.
#pragma once

#include "../verify.hpp"  // its declarations first: this file stands alone (spec/LAYOUT.md)

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "../../io/sigbus_guard.hpp"

namespace ckpt {

namespace detail {

CKPT_INLINE void add_padding_problems(FsRef fs, FileHandle file, const std::string& path, const Index& index, std::uint64_t index_offset,
                          const std::function<void(Problem)>& problem) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans, gaps;
  for (const auto& p : index.pieces) spans.emplace_back(p.data_offset, p.data_offset + p.data_length);
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = format::kSuperblockSize;
  for (const auto& s : spans) {
    if (s.first > at) gaps.emplace_back(at, s.first - at);
    at = std::max(at, s.second);
  }
  if (index_offset > at) gaps.emplace_back(at, index_offset - at);
  std::vector<unsigned char> buf;
  for (const auto& g : gaps) {
    buf.resize(static_cast<std::size_t>(g.second));
    if (Status s = read_exact(fs, file, path, buf.data(), buf.size(), g.first); !s.ok()) {
      problem(make_problem(s.code() == Code::incomplete ? Code::incomplete : Code::io, "padding", g.first, g.second, s.message()));
      continue;
    }
    for (std::size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] == 0) continue;
      Problem p = make_problem(Code::corrupt, "padding", g.first + i, 1,
                               "padding [" + std::to_string(g.first) + ", " + std::to_string(g.first + g.second) +
                                   ") must be zero, found byte 0x" + hex64(buf[i]).substr(14) + " at offset " + std::to_string(g.first + i));
      p.expected = "00";
      p.found = hex64(buf[i]).substr(14);
      problem(std::move(p));
      break;
    }
  }
}


// A work item of verify_file: up to 4 MiB of consecutive chunks of one piece.
struct VerifyItem { std::size_t piece; std::uint64_t first, count, offset, length; };

// verify_file's work items, handed to threads as they free up; total_bytes is what they cover.
CKPT_INLINE std::vector<VerifyItem> verify_items(const Index& index, std::uint64_t& total_bytes) {
  std::vector<VerifyItem> items;
  constexpr std::uint64_t kItemBytes = std::uint64_t{4} << 20;
  total_bytes = 0;
  for (std::size_t k = 0; k < index.pieces.size(); ++k) {
    const auto& p = index.pieces[k];
    for (std::uint64_t c = 0; c < p.chunk_count;) {
      VerifyItem item{k, c, 0, index.chunks[p.chunk_first + c].offset, 0};
      while (c < p.chunk_count && (item.count == 0 || item.length + index.chunks[p.chunk_first + c].length <= kItemBytes)) {
        item.length += index.chunks[p.chunk_first + c].length;
        ++item.count;
        ++c;
      }
      total_bytes += item.length;
      items.push_back(item);
    }
  }
  return items;
}

// Digests of an item's chunks. pread mode reads at most kReadWindow bytes at a time into a
// per-thread buffer and hashes them while they are in cache (several small chunks per read, a large
// chunk streamed slice by slice); mmap mode hashes the mapped page cache with no copy at all.
struct ChunkHasher {
  static constexpr const char* kFileChanged = "file changed during verification";
  FsRef fs;
  FileHandle file;
  const std::string& path;
  const Index& index;
  const Superblock& sb;
  const Mapping& mapping;     // the data region, or nothing: read with pread
  std::uint64_t file_size;    // when verification began

  [[nodiscard]] Status hash(const VerifyItem& item, std::vector<unsigned char>& buf, std::vector<std::uint64_t>& found) const {
    found.clear();
    if (mapping.data() != nullptr) return hash_mapped(item, found);
    const auto& p = index.pieces[item.piece];
    const std::uint64_t end = item.first + item.count;
    buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(item.length, kReadWindow)));
    for (std::uint64_t c = item.first; c < end;) {
      const auto& rec = index.chunks[p.chunk_first + c];
      if (rec.length > kReadWindow) {
        auto digest = read_hashed(fs, file, path, buf.data(), static_cast<std::size_t>(rec.length), rec.offset, true);
        if (!digest.ok()) return digest.status();
        found.push_back(*digest);
        ++c;
        continue;
      }
      // Chunks tile a piece back to back (spec 5.7), so consecutive small chunks are one read.
      std::uint64_t last = c, bytes = 0;
      while (last < end && index.chunks[p.chunk_first + last].length <= kReadWindow - bytes)
        bytes += index.chunks[p.chunk_first + last++].length;
      CKPT_TRY(read_exact(fs, file, path, buf.data(), static_cast<std::size_t>(bytes), rec.offset));
      for (; c < last; ++c) {
        const auto& r = index.chunks[p.chunk_first + c];
        found.push_back(xxh3_64(buf.data() + (r.offset - rec.offset), static_cast<std::size_t>(r.length)));
      }
    }
    return Status();
  }

  // A file truncated while mapped raises SIGBUS on the first page past its new end (issue 5): the
  // hashing runs under run_catching_sigbus, so it allocates nothing and owns nothing.
  [[nodiscard]] Status hash_mapped(const VerifyItem& item, std::vector<std::uint64_t>& found) const {
    const auto& p = index.pieces[item.piece];
    const std::uint64_t end = item.first + item.count;
    found.resize(static_cast<std::size_t>(item.count));
    std::uint64_t* out = found.data();
    const unsigned char* base = mapping.data();
    const ChunkRecord* chunks = index.chunks.data() + p.chunk_first;
    const std::uint64_t data_offset = sb.data_offset;
    const void* fault = nullptr;
    const bool finished = run_catching_sigbus(
        [&] {
          for (std::uint64_t c = item.first; c < end; ++c)
            out[c - item.first] = xxh3_64(base + (chunks[c].offset - data_offset), static_cast<std::size_t>(chunks[c].length));
        },
        &fault);
    if (finished) return Status();
    const auto* at = static_cast<const unsigned char*>(fault);
    const std::uint64_t offset = at != nullptr && at >= base && at < base + mapping.size()
                                     ? sb.data_offset + static_cast<std::uint64_t>(at - base)
                                     : item.offset;
    auto now = fs.file_size(file);
    return make_error(Code::io, std::string(kFileChanged) + ": bus error reading the mapping at offset " +
                                    std::to_string(offset) + " (the file was " + std::to_string(file_size) +
                                    " bytes when verification began" +
                                    (now.ok() ? ", " + std::to_string(*now) + " bytes now" : std::string()) +
                                    "; truncated while being read)");
  }
};

// In offset order, ties in the order found: a sort of (offset, position) pairs, which other definitions
// instantiate too, rather than one of Problems (header-only parse time, spec/LAYOUT.md 5).
CKPT_INLINE void sort_by_offset(std::vector<Problem>& problems) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order;
  order.reserve(problems.size());
  for (std::size_t i = 0; i < problems.size(); ++i) order.push_back({problems[i].offset, i});
  std::sort(order.begin(), order.end());
  std::vector<Problem> sorted;
  sorted.reserve(order.size());
  for (const auto& o : order) sorted.push_back(std::move(problems[o.second]));
  problems = std::move(sorted);
}

}  // namespace detail

CKPT_INLINE Result<VerifyReport> verify_file(FsRef fs, const std::string& path, const VerifyOptions& options) {
  using detail::make_problem;
  VerifyReport report;
  report.path = path;
  CKPT_ASSIGN_OR_RETURN(ReadFile opened, open_read(fs, path));
  report.file_size = opened.size;
  auto problem = [&](Problem p) {
    if (p.message.rfind(path, 0) != 0) p.message = path + ": " + p.message;
    p.file = path;
    report.problems.push_back(std::move(p));
  };

  // The head (superblock, footer, index) is read by the reader's own function, salvaging what it can.
  auto head = detail::read_shard_head(fs, opened.file.get(), path, opened.size, true, report.problems);
  for (auto& p : report.problems) p.file = path;
  if (!head.ok()) return report;
  const Superblock& sb = head->superblock;
  const Footer* footer = &head->footer;
  const Index& index = head->index;
  report.chunks_total = index.chunks.size();

  detail::add_padding_problems(fs, opened.file.get(), path, index, footer->index_offset, problem);

  std::uint64_t total_bytes = 0;
  const std::vector<detail::VerifyItem> items = detail::verify_items(index, total_bytes);
  Mapping mapping;
  {
    if (footer->index_offset > sb.data_offset && options.mapped.size() >= footer->index_offset) {
      mapping = Mapping(nullptr, 0, reinterpret_cast<const unsigned char*>(options.mapped.data()) + sb.data_offset,
                        static_cast<std::size_t>(footer->index_offset - sb.data_offset));  // the caller's: not unmapped here
    } else if (options.use_mmap && fs.can_map() && footer->index_offset > sb.data_offset) {
      auto m = fs.map(opened.file.get(), sb.data_offset, static_cast<std::size_t>(footer->index_offset - sb.data_offset));
      if (m.ok()) mapping = std::move(m).value();
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> file_changed{false};
  std::atomic<std::uint64_t> bytes_done{0}, chunks_done{0};
  std::mutex mutex;
  const detail::ChunkHasher hasher{fs, opened.file.get(), path, index, sb, mapping, report.file_size};
  auto worker = [&](bool reports_progress) {
    std::vector<unsigned char> buf;
    std::vector<std::uint64_t> found;
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const detail::VerifyItem& item = items[i];
      const auto& p = index.pieces[item.piece];
      const auto& t = index.tensors[p.tensor];
      if (file_changed.load()) break;  // one report is enough: every later item would fault the same way
      if (options.already_verified) {
        bool all = true;
        for (std::uint64_t c = item.first; all && c < item.first + item.count; ++c) all = options.already_verified(p.chunk_first + c);
        if (all) {  // checked by the caller's reads of this file: counted, not hashed again
          chunks_done += item.count;
          const std::uint64_t done = bytes_done += item.length;
          if (reports_progress && options.progress) options.progress(done, total_bytes);
          continue;
        }
      }
      if (Status s = hasher.hash(item, buf, found); !s.ok()) {
        if (s.message().rfind(detail::ChunkHasher::kFileChanged, 0) == 0 && file_changed.exchange(true)) break;
        std::lock_guard<std::mutex> lock(mutex);
        Problem pr = make_problem(s.code() == Code::incomplete ? Code::incomplete : Code::io, "data", item.offset, item.length,
                                  "tensor '" + t.name + "' piece " + std::to_string(item.piece - t.piece_first) + ": " + s.message());
        pr.tensor = t.name;
        pr.piece = static_cast<std::int64_t>(item.piece - t.piece_first);
        pr.chunk = static_cast<std::int64_t>(item.first);
        problem(std::move(pr));
        continue;
      }
      for (std::uint64_t c = item.first; c < item.first + item.count; ++c) {
        const auto& rec = index.chunks[p.chunk_first + c];
        const std::uint64_t digest = found[static_cast<std::size_t>(c - item.first)];
        if (digest == rec.digest) continue;
        Problem pr = make_problem(Code::corrupt, "data", rec.offset, rec.length,
                                  "tensor '" + t.name + "' piece " + std::to_string(item.piece - t.piece_first) + " chunk " +
                                      std::to_string(c) + " bytes [" + std::to_string(rec.offset) + ", " +
                                      std::to_string(rec.offset + rec.length) + "): digest expected " + hex64(rec.digest) +
                                      ", found " + hex64(digest));
        pr.tensor = t.name;
        pr.piece = static_cast<std::int64_t>(item.piece - t.piece_first);
        pr.chunk = static_cast<std::int64_t>(c);
        pr.expected = hex64(rec.digest);
        pr.found = hex64(digest);
        std::lock_guard<std::mutex> lock(mutex);
        problem(std::move(pr));
      }
      chunks_done += item.count;
      const std::uint64_t done = bytes_done += item.length;
      if (reports_progress && options.progress) options.progress(done, total_bytes);
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(options.threads, static_cast<unsigned>(std::max<std::size_t>(items.size(), 1))));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(worker, false);
  worker(true);
  for (auto& th : pool) th.join();
  report.chunks_checked = chunks_done;
  report.bytes_checked = bytes_done;
  detail::sort_by_offset(report.problems);
  return report;
}

CKPT_INLINE const char* step_recheck_name(StepRecheck r) noexcept {
  return enum_name(r, {"committed", "retired", "not in the journal"});
}


}  // namespace ckpt
