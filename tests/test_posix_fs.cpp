// Tests for include/ckpt/io/posix_fs.hpp: symlinks are never followed (last component or parent),
// special files are refused without blocking, stat reports kinds, and the error codes stay as before.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <ckpt/io/posix_fs.hpp>

#include "test_util.hpp"

using namespace ckpt;

namespace {

// Fails the test (SIGALRM ends the process) instead of hanging when a call blocks, as an open of a
// FIFO with no writer would.
class HangGuard {
 public:
  explicit HangGuard(unsigned seconds = 20) { ::alarm(seconds); }
  ~HangGuard() { ::alarm(0); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;
};

// A scratch directory holding "outside/" (a folder a symlink points into: victim, sub/, sub/inner)
// and, beside it, "store/" with "link" -> outside, "flink" -> outside/victim, "dangling" -> nowhere.
struct Layout {
  ckpt_test::TempDir dir;
  std::string outside = dir.file("outside"), store = dir.file("store");
  std::string link = store + "/link", flink = store + "/flink", dangling = store + "/dangling";
  Layout() {
    REQUIRE(::mkdir(outside.c_str(), 0755) == 0);
    REQUIRE(::mkdir((outside + "/sub").c_str(), 0755) == 0);
    ckpt_test::write_file(outside + "/victim", "precious");
    ckpt_test::write_file(outside + "/sub/inner", "also precious");
    REQUIRE(::mkdir(store.c_str(), 0755) == 0);
    ckpt_test::write_file(store + "/plain", "plain bytes");
    REQUIRE(::symlink(outside.c_str(), link.c_str()) == 0);
    REQUIRE(::symlink((outside + "/victim").c_str(), flink.c_str()) == 0);
    REQUIRE(::symlink((dir.path() + "/nowhere").c_str(), dangling.c_str()) == 0);
  }
  // Every name under outside/ with its contents: what a refused operation must leave unchanged.
  [[nodiscard]] std::map<std::string, std::string> outside_state() const {
    return {{"victim", ckpt_test::read_file(outside + "/victim")},
            {"sub/inner", ckpt_test::read_file(outside + "/sub/inner")},
            {"names", names(outside) + "|" + names(outside + "/sub")}};
  }
  [[nodiscard]] static std::string names(const std::string& d) {
    std::string all;
    // Read with the raw calls: the subject under test is not its own oracle.
    if (DIR* h = ::opendir(d.c_str())) {
      std::vector<std::string> v;
      while (const dirent* e = ::readdir(h))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) v.emplace_back(e->d_name);
      ::closedir(h);
      std::sort(v.begin(), v.end());
      for (const auto& n : v) all += n + ",";
    }
    return all;
  }
};

[[nodiscard]] bool mentions(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Runs an operation that may return a handle; closes it and reports only the status.
template <class T>
[[nodiscard]] Status status_of(PosixFs& fs, Result<T> r) {
  if (!r.ok()) return r.status();
  if constexpr (std::is_same_v<T, FileHandle>) fs.close(*r).ignore_error();
  return Status();
}

// Runs op on a fresh Layout: it must fail with `code` and a message containing says(layout), and
// leave everything outside the store as it was, the plain file's bytes, and no file made through the
// dangling link.
void check_refused(const char* name, const std::function<Status(PosixFs&, const Layout&)>& op, Code code,
                   const std::function<std::string(const Layout&)>& says) {
  INFO(name);
  Layout l;
  const auto before = l.outside_state();
  PosixFs fs;
  const Status s = op(fs, l);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == code);
  CHECK(mentions(s, says(l)));
  CHECK(l.outside_state() == before);
  CHECK(ckpt_test::read_file(l.store + "/plain") == "plain bytes");
  CHECK_FALSE(fs.stat(l.dir.file("nowhere")).ok());
}

}  // namespace

TEST_CASE("stat reports what is at a path and does not follow a symlink", "[posix_fs]") {
  Layout l;
  REQUIRE(::mkfifo(l.dir.file("fifo").c_str(), 0644) == 0);
  struct Row {
    std::string path;
    EntryKind kind;
    std::uint64_t size;
  };
  const std::vector<Row> rows = {
      {l.store + "/plain", EntryKind::file, 11},
      {l.store, EntryKind::directory, 0},
      {l.link, EntryKind::symlink, 0},      // to a directory: not a directory here
      {l.flink, EntryKind::symlink, 0},     // to a file
      {l.dangling, EntryKind::symlink, 0},  // to nowhere: still there
      {l.dir.file("fifo"), EntryKind::other, 0},
      {"/dev/null", EntryKind::other, 0},
  };
  PosixFs fs;
  for (const auto& row : rows) {
    INFO(row.path);
    auto info = fs.stat(row.path);
    REQUIRE(info.ok());
    CHECK(info->kind == row.kind);
    CHECK(info->is_dir == (row.kind == EntryKind::directory));
    CHECK(info->size == row.size);
  }
  auto missing = fs.stat(l.dir.file("missing"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::not_found);
}

TEST_CASE("open refuses at once anything that is not a regular file, naming what it is", "[posix_fs]") {
  Layout l;
  const std::string fifo = l.dir.file("fifo"), socket_path = l.dir.file("sock");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(sock >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(socket_path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  REQUIRE(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  struct Row {
    std::string path, says;
  };
  const std::vector<Row> rows = {
      {fifo, "not a regular file (a FIFO)"},  // no writer: a blocking open would wait forever
      {socket_path, "not a regular file (a socket)"},
      {l.store, "not a regular file (a directory)"},
      {"/dev/null", "not a regular file (a character device)"},
      {"/dev/zero", "not a regular file (a character device)"},
      {l.flink, "is a symlink"},
      {l.dangling, "is a symlink"},
      {l.link, "is a symlink"},
  };
  PosixFs fs;
  HangGuard guard;
  for (const auto& row : rows)
    for (const OpenMode mode : {OpenMode::read, OpenMode::read_write}) {
      INFO(row.path << (mode == OpenMode::read ? " read" : " read_write"));
      auto f = fs.open(row.path, mode);
      REQUIRE_FALSE(f.ok());
      CHECK(f.status().code() == Code::io);
      CHECK(mentions(f.status(), row.path));
      CHECK(mentions(f.status(), row.says));
    }
  ::close(sock);
  CHECK(ckpt_test::read_file(l.outside + "/victim") == "precious");
}

TEST_CASE("open of a FIFO returns at once even with a writer waiting", "[posix_fs]") {
  ckpt_test::TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  HangGuard guard;
  const int writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);  // holds both ends: a reader would not block
  REQUIRE(writer >= 0);
  PosixFs fs;
  auto f = fs.open(fifo, OpenMode::read);
  REQUIRE_FALSE(f.ok());
  CHECK(mentions(f.status(), "a FIFO"));
  ::close(writer);
}

TEST_CASE("a regular file opens as before, with a blocking descriptor", "[posix_fs]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto created = fs.open(dir.file("f"), OpenMode::create_new);
  REQUIRE(created.ok());
  REQUIRE(fs.pwrite(*created, "abc", 3, 0).ok());
  REQUIRE(fs.close(*created).ok());
  for (const OpenMode mode : {OpenMode::read, OpenMode::read_write}) {
    auto f = fs.open(dir.file("f"), mode);
    REQUIRE(f.ok());
    CHECK((::fcntl(static_cast<int>(f->id), F_GETFL) & O_NONBLOCK) == 0);
    char buf[3] = {};
    auto got = fs.pread(*f, buf, 3, 0);
    REQUIRE(got.ok());
    CHECK(std::string(buf, 3) == "abc");
    REQUIRE(fs.close(*f).ok());
  }
  auto again = fs.open(dir.file("f"), OpenMode::create_new);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == Code::conflict);
}

TEST_CASE("every operation through a symlinked parent directory fails and leaves the target untouched", "[posix_fs]") {
  struct Row {
    const char* name;
    std::function<Status(PosixFs&, const Layout&)> op;
  };
  const std::vector<Row> rows = {
      {"open read", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.open(l.link + "/victim", OpenMode::read)); }},
      {"open read_write",
       [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.open(l.link + "/victim", OpenMode::read_write)); }},
      {"open create_new",
       [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.open(l.link + "/new", OpenMode::create_new)); }},
      {"unlink", [](PosixFs& fs, const Layout& l) { return fs.unlink(l.link + "/victim"); }},
      {"rmdir", [](PosixFs& fs, const Layout& l) { return fs.rmdir(l.link + "/sub"); }},
      {"mkdir", [](PosixFs& fs, const Layout& l) { return fs.mkdir(l.link + "/newdir"); }},
      {"rename out of it", [](PosixFs& fs, const Layout& l) { return fs.rename(l.link + "/victim", l.store + "/moved"); }},
      {"rename into it", [](PosixFs& fs, const Layout& l) { return fs.rename(l.store + "/plain", l.link + "/victim"); }},
      {"list_dir", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.list_dir(l.link + "/sub")); }},
      {"sync_dir", [](PosixFs& fs, const Layout& l) { return fs.sync_dir(l.link + "/sub"); }},
      {"lock", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.lock(l.link + "/LOCK")); }},
  };
  for (const auto& row : rows)
    check_refused(row.name, row.op, Code::io, [](const Layout& l) { return l.link + " is a symlink"; });
}

TEST_CASE("a symlink as the last component is refused where it would be followed", "[posix_fs]") {
  struct Row {
    const char* name;
    std::function<Status(PosixFs&, const Layout&)> op;
    Code code;
    const char* says;
  };
  const std::vector<Row> rows = {
      {"open read of a link to a file", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.open(l.flink, OpenMode::read)); },
       Code::io, "is a symlink"},
      {"open create_new over a dangling link",
       [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.open(l.dangling, OpenMode::create_new)); }, Code::conflict, "exists"},
      {"rmdir of a link to a directory", [](PosixFs& fs, const Layout& l) { return fs.rmdir(l.link); }, Code::io, "is a symlink"},
      {"list_dir of a link to a directory", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.list_dir(l.link)); },
       Code::io, "is a symlink"},
      {"sync_dir of a link to a directory", [](PosixFs& fs, const Layout& l) { return fs.sync_dir(l.link); }, Code::io,
       "is a symlink"},
      {"lock of a link to a file", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.lock(l.flink)); }, Code::io,
       "is a symlink"},
      {"lock of a dangling link", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.lock(l.dangling)); }, Code::io,
       "is a symlink"},
      {"mkdir over a link", [](PosixFs& fs, const Layout& l) { return fs.mkdir(l.link); }, Code::conflict, "exists"},
      {"list_dir of a file", [](PosixFs& fs, const Layout& l) { return status_of(fs, fs.list_dir(l.store + "/plain")); },
       Code::io, "is not a directory (a regular file)"},
  };
  for (const auto& row : rows)
    check_refused(row.name, row.op, row.code, [&row](const Layout&) { return std::string(row.says); });
}

TEST_CASE("unlink and rename of a symlink act on the link, never on its target", "[posix_fs]") {
  Layout l;
  const auto before = l.outside_state();
  PosixFs fs;
  REQUIRE(fs.unlink(l.link).ok());
  REQUIRE(fs.unlink(l.flink).ok());
  REQUIRE(fs.rename(l.dangling, l.store + "/moved").ok());
  CHECK(fs.stat(l.store + "/moved")->kind == EntryKind::symlink);
  REQUIRE(::symlink((l.outside + "/victim").c_str(), l.flink.c_str()) == 0);
  REQUIRE(fs.rename(l.store + "/plain", l.flink).ok());  // replaces the link itself
  CHECK(fs.stat(l.flink)->kind == EntryKind::file);
  CHECK(ckpt_test::read_file(l.flink) == "plain bytes");
  CHECK(l.outside_state() == before);
  auto names = fs.list_dir(l.store);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"flink", "moved"});
}

TEST_CASE("error codes are kept: not_found, conflict, io", "[posix_fs]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  REQUIRE(fs.mkdir(dir.file("d")).ok());
  REQUIRE(fs.mkdir(dir.file("e/")).ok());  // a trailing slash names the same directory
  ckpt_test::write_file(dir.file("d/f"), "x");
  struct Row {
    const char* name;
    Status status;
    Code code;
  };
  const std::vector<Row> rows = {
      {"open missing", status_of(fs, fs.open(dir.file("missing"), OpenMode::read)), Code::not_found},
      {"open in a missing directory", status_of(fs, fs.open(dir.file("missing/f"), OpenMode::read)), Code::not_found},
      {"create_new existing", status_of(fs, fs.open(dir.file("d/f"), OpenMode::create_new)), Code::conflict},
      {"unlink missing", fs.unlink(dir.file("d/missing")), Code::not_found},
      {"unlink a directory", fs.unlink(dir.file("d")), Code::io},
      {"rmdir missing", fs.rmdir(dir.file("missing")), Code::not_found},
      {"rmdir not empty", fs.rmdir(dir.file("d")), Code::io},
      {"rmdir a file", fs.rmdir(dir.file("d/f")), Code::io},
      {"mkdir existing", fs.mkdir(dir.file("d")), Code::conflict},
      {"mkdir in a missing directory", fs.mkdir(dir.file("missing/d")), Code::not_found},
      {"rename missing", fs.rename(dir.file("missing"), dir.file("x")), Code::not_found},
      {"list_dir missing", status_of(fs, fs.list_dir(dir.file("missing"))), Code::not_found},
      {"sync_dir missing", fs.sync_dir(dir.file("missing")), Code::not_found},
      {"open a path under a file", status_of(fs, fs.open(dir.file("d/f/g"), OpenMode::read)), Code::io},
  };
  for (const auto& row : rows) {
    INFO(row.name << ": " << row.status.message());
    CHECK(row.status.code() == row.code);
  }
  REQUIRE(fs.rmdir(dir.file("e/")).ok());
  REQUIRE(fs.rename(dir.file("d/f"), dir.file("g")).ok());
  REQUIRE(fs.rmdir(dir.file("d")).ok());
  auto names = fs.list_dir(dir.path() + "/");
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"g"});
  REQUIRE(fs.sync_dir(dir.path()).ok());
  REQUIRE(fs.sync_dir(".").ok());  // a relative path with no parent component
}

TEST_CASE("lock is exclusive and refuses a FIFO at once", "[posix_fs]") {
  ckpt_test::TempDir dir;
  PosixFs fs;
  auto first = fs.lock(dir.file("LOCK"));
  REQUIRE(first.ok());
  PosixFs other;
  auto second = other.lock(dir.file("LOCK"));
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == Code::conflict);
  REQUIRE(fs.close(*first).ok());
  REQUIRE(::mkfifo(dir.file("FIFO").c_str(), 0644) == 0);
  HangGuard guard;
  auto fifo = fs.lock(dir.file("FIFO"));
  REQUIRE_FALSE(fifo.ok());
  CHECK(mentions(fifo.status(), "not a regular file (a FIFO)"));
}

TEST_CASE("a symlink above the parent directory is followed, so a store may live under one", "[posix_fs]") {
  Layout l;
  PosixFs fs;
  // link/sub: the parent "sub" is a real directory; "link" above it is an ordinary path component.
  auto names = fs.list_dir(l.link + "/sub");
  CHECK_FALSE(names.ok());  // sub is the last component here, its parent "link" is a symlink
  REQUIRE(::mkdir((l.outside + "/sub/step").c_str(), 0755) == 0);
  auto inner = fs.list_dir(l.link + "/sub/step");
  REQUIRE(inner.ok());
  CHECK(inner->empty());
  auto f = fs.open(l.link + "/sub/inner", OpenMode::read);
  REQUIRE(f.ok());
  REQUIRE(fs.close(*f).ok());
}

TEST_CASE("a writable shared mapping on a full file system is an ENOSPC error, never a SIGBUS later", "[posix_fs]") {
  // A tmpfs of 1 MiB, mounted in a mount namespace of a child's own (root, or an unprivileged user
  // namespace): a slot of 4 MiB fits its size limit as a sparse file but not as blocks.
  ckpt_test::TempDir dir;
  const std::string mnt = dir.file("tmpfs");
  REQUIRE(::mkdir(mnt.c_str(), 0700) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(20);
    const bool own_ns = ::unshare(CLONE_NEWNS) == 0 || ::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0;
    if (!own_ns || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0)
      ::_exit(77);
    PosixFs fs;
    auto f = fs.open(mnt + "/slot", OpenMode::create_new);
    if (!f.ok() || !fs.truncate(*f, 4u << 20).ok()) ::_exit(3);
    auto m = fs.map(*f, 0, 4u << 20, MapMode::shared_write);
    if (m.ok()) {
      std::memset(m->writable_data(), 1, m->size());  // before the fix: SIGBUS here
      ::_exit(4);
    }
    const std::string why = m.status().message();
    ::_exit(m.status().code() == Code::io && why.find("fallocate") != std::string::npos &&
                    why.find(std::strerror(ENOSPC)) != std::string::npos
                ? 0
                : 5);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    WARN("skipped: no mount namespace here to mount a small tmpfs in");
    return;
  }
  INFO("child: exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ", signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}
