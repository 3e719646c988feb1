#include <catch2/catch.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>

#include "format/atomic_file.hpp"
#include "test_util.hpp"

using namespace memtrace::format;
namespace t = memtrace::format::test;

namespace {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

mode_t mode_of(const std::string& p) {
  struct stat st;
  REQUIRE(stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("writes into missing nested directories, created 0700", "[atomic]") {
  t::TempDir dir;
  std::string target = dir / "a/b/c/snap.pickle";
  std::string err;
  REQUIRE(write_file_atomically(target, "hello", &err));
  CHECK(err.empty());
  CHECK(t::read_file(target) == "hello");
  CHECK(mode_of(dir / "a") == 0700);
  CHECK(mode_of(dir / "a/b/c") == 0700);
  CHECK(mode_of(target) == 0600);
  CHECK(list_dir(dir / "a/b/c") == std::vector<std::string>{"snap.pickle"});
  // Replacing keeps one file with the new content.
  REQUIRE(write_file_atomically(target, "second", &err));
  CHECK(t::read_file(target) == "second");
  CHECK(list_dir(dir / "a/b/c").size() == 1);
}

TEST_CASE("relative paths and empty content", "[atomic]") {
  t::TempDir dir;
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof(cwd)));
  REQUIRE(chdir(dir.path().c_str()) == 0);
  std::string err;
  CHECK(write_file_atomically("plain.pickle", "", &err));
  CHECK(write_file_atomically("sub//dir/x.pickle", "x", &err));
  REQUIRE(chdir(cwd) == 0);
  CHECK(t::exists(dir / "plain.pickle"));
  CHECK(t::read_file(dir / "sub/dir/x.pickle") == "x");
}

TEST_CASE("a failing rename leaves the old target and no temporary", "[atomic]") {
  t::TempDir dir;
  std::string target = dir / "snap.pickle";
  REQUIRE(mkdir(target.c_str(), 0700) == 0);  // a directory where the file should go
  REQUIRE(t::write_text(dir / "snap.pickle/keep", "old"));
  std::string err;
  CHECK_FALSE(write_file_atomically(target, "new", &err));
  INFO(err);
  CHECK(err.find(target) != std::string::npos);
  CHECK(err.find('\n') == std::string::npos);
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"snap.pickle"});
  CHECK(t::read_file(dir / "snap.pickle/keep") == "old");
}

TEST_CASE("a path component that is a file fails cleanly", "[atomic]") {
  t::TempDir dir;
  REQUIRE(t::write_text(dir / "file", "x"));
  std::string err;
  CHECK_FALSE(write_file_atomically(dir / "file/sub/snap.pickle", "new", &err));
  CHECK(err.find("Not a directory") != std::string::npos);
  CHECK_FALSE(write_file_atomically(dir.path() + "/", "x", &err));
  CHECK_FALSE(write_file_atomically("", "x", &err));
}

TEST_CASE("an unwritable directory: error, no temporary, old target intact", "[atomic]") {
  t::TempDir dir;
  std::string sub = dir / "ro";
  REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  std::string target = sub + "/snap.pickle";
  REQUIRE(t::write_text(target, "old content"));
  if (geteuid() == 0) {
    REQUIRE(chmod(dir.path().c_str(), 0755) == 0);  // let 'nobody' reach ro/
    // root ignores permission bits: try as 'nobody' in a child process.
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(pipefd[0]);
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      std::string err;
      bool ok = write_file_atomically(target, "new content", &err);
      ssize_t w = write(pipefd[1], err.data(), err.size());
      (void)w;
      _exit(ok ? 1 : 0);
    }
    close(pipefd[1]);
    std::string err;
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) err.append(buf, static_cast<size_t>(n));
    close(pipefd[0]);
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 3) {
      WARN("cannot drop privileges; unwritable-directory case skipped");
      return;
    }
    INFO(err);
    CHECK(WEXITSTATUS(st) == 0);
    CHECK(err.find(sub) != std::string::npos);
    CHECK(err.find("Permission denied") != std::string::npos);
  } else {
    REQUIRE(chmod(sub.c_str(), 0500) == 0);
    std::string err;
    CHECK_FALSE(write_file_atomically(target, "new content", &err));
    CHECK(err.find("Permission denied") != std::string::npos);
    chmod(sub.c_str(), 0700);
  }
  CHECK(list_dir(sub) == std::vector<std::string>{"snap.pickle"});
  CHECK(t::read_file(target) == "old content");
}

TEST_CASE("a full file system (ENOSPC): error, no temporary, old target intact", "[atomic]") {
  t::TempDir dir;
  std::string mnt = dir / "small";
  REQUIRE(mkdir(mnt.c_str(), 0700) == 0);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("cannot mount a small tmpfs here; ENOSPC case skipped");
    return;
  }
  std::string target = mnt + "/snap.pickle";
  REQUIRE(t::write_text(target, "old content"));
  std::string big(1 << 20, 'x');
  std::string err;
  bool ok = write_file_atomically(target, big, &err);
  std::vector<std::string> names = list_dir(mnt);
  std::string old = t::read_file(target);
  umount(mnt.c_str());
  CHECK_FALSE(ok);
  INFO(err);
  CHECK(err.find(target) != std::string::npos);
  CHECK(err.find("No space left on device") != std::string::npos);
  CHECK(names == std::vector<std::string>{"snap.pickle"});
  CHECK(old == "old content");
}

TEST_CASE("a failed write removes the directories it created", "[atomic]") {
  t::TempDir dir;
  std::string mnt = dir / "small";
  REQUIRE(mkdir(mnt.c_str(), 0700) == 0);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("cannot mount a small tmpfs here; case skipped");
    return;
  }
  std::string err;
  bool ok = write_file_atomically(mnt + "/new1/new2/snap.pickle", std::string(1 << 20, 'x'), &err);
  std::vector<std::string> names = list_dir(mnt);
  umount(mnt.c_str());
  CHECK_FALSE(ok);
  INFO(err);
  CHECK(err.find("No space left on device") != std::string::npos);
  CHECK(names.empty());
}

TEST_CASE("over-long names are refused before any directory is made", "[atomic]") {
  t::TempDir dir;
  std::string err;
  // A component over NAME_MAX, below a directory that does not exist yet.
  std::string long_part(300, 'x');
  CHECK_FALSE(write_file_atomically(dir / ("new1/" + long_part + "/snap.pickle"), "content", &err));
  CHECK(err.find("File name too long") != std::string::npos);
  CHECK(list_dir(dir.path()).empty());
  // The whole path over PATH_MAX, every component short enough.
  std::string deep = "new1";
  for (int i = 0; i < 20; ++i) deep += "/" + std::string(250, 'y');
  err.clear();
  CHECK_FALSE(write_file_atomically(dir / (deep + "/snap.pickle"), "content", &err));
  CHECK(err.find("File name too long") != std::string::npos);
  CHECK(list_dir(dir.path()).empty());
  CHECK_FALSE(make_directories(dir / deep, &err));
  CHECK(list_dir(dir.path()).empty());
  // A base name of 250 bytes is a valid name: its temporary is cut to fit.
  std::string name(250, 'z');
  err.clear();
  CHECK(write_file_atomically(dir / ("new1/" + name), "content", &err));
  INFO(err);
  CHECK(list_dir(dir / "new1") == std::vector<std::string>{name});
}

TEST_CASE("a file size limit is refused before writing", "[atomic]") {
  t::TempDir dir;
  std::string target = dir / "snap.pickle";
  REQUIRE(t::write_text(target, "old"));
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rlimit rl = {1024, 1024};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    std::string err;
    bool ok = write_file_atomically(target, std::string(4096, 'x'), &err);
    _exit(!ok && err.find("File too large") != std::string::npos ? 0 : 1);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));  // not killed by SIGXFSZ
  if (WIFEXITED(st)) CHECK(WEXITSTATUS(st) == 0);
  CHECK(t::read_file(target) == "old");
  CHECK(list_dir(dir.path()).size() == 1);
}

TEST_CASE("only regular files are replaced: a FIFO or a device node stays what it is", "[atomic]") {
  t::TempDir dir;
  std::string fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::string err;
  CHECK_FALSE(write_file_atomically(fifo, "snapshot", &err));
  INFO(err);
  CHECK(err.find("is a FIFO, not a regular file") != std::string::npos);
  struct stat st;
  REQUIRE(lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"fifo"});  // no temporary left

  // A character device like /dev/null, made here (root only) rather than risking the real one.
  std::string dev = dir / "null";
  if (mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) {
    CHECK_FALSE(write_file_atomically(dev, "snapshot", &err));
    CHECK(err.find("character device") != std::string::npos);
    REQUIRE(lstat(dev.c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
  }
  // A regular file and a symbolic link (the link is replaced, never its target) still work.
  std::string plain = dir / "snap.pickle";
  REQUIRE(t::write_text(plain, "old"));
  CHECK(write_file_atomically(plain, "new", &err));
  CHECK(t::read_file(plain) == "new");
  std::string link = dir / "link.pickle";
  REQUIRE(symlink(fifo.c_str(), link.c_str()) == 0);
  CHECK(write_file_atomically(link, "via link", &err));
  REQUIRE(lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(t::read_file(link) == "via link");
}

TEST_CASE("temporaries left by killed writers on this host are removed once provably dead", "[atomic]") {
  t::TempDir dir;
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof host - 1) == 0);
  std::string h = host;
  for (char& c : h)
    if (c == '.' || c == '/') c = '_';
  // A pid that is certainly gone: a child that has exited and been reaped.
  pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto make_old = [&](const std::string& name, time_t age) {
    REQUIRE(t::write_text(dir / name, std::string(4096, 'x')));
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= age;
    times[1] = times[0];
    REQUIRE(utimensat(AT_FDCWD, (dir / name).c_str(), times, 0) == 0);
  };
  const std::string dead = ".snap.pickle.tmp." + h + "." + std::to_string(child) + ".3.beef";
  const std::string fresh = ".other.pickle.tmp." + h + "." + std::to_string(child) + ".4.beef";
  const std::string alive = ".snap.pickle.tmp." + h + ".1.0.beef";          // pid 1 lives
  const std::string elsewhere = ".snap.pickle.tmp.otherhost." + std::to_string(child) + ".0.beef";
  const std::string unrelated = ".notes.tmp";
  make_old(dead, 600);
  make_old(fresh, 5);  // the writer may be on another pid namespace and still writing
  make_old(alive, 600);
  make_old(elsewhere, 600);
  make_old(unrelated, 600);
  std::string err;
  REQUIRE(write_file_atomically(dir / "snap.pickle", "new", &err));
  auto names = list_dir(dir.path());
  std::sort(names.begin(), names.end());
  std::vector<std::string> want = {fresh, unrelated, alive, elsewhere, "snap.pickle"};
  std::sort(want.begin(), want.end());
  CHECK(names == want);
}
