#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cold_log.hpp"
#include "core/log.hpp"
#include "stderr_capture.hpp"

using namespace memtrace;
using log::Level;

namespace {

// The level for one test, and the default (info) again after it.
struct LevelFor {
  explicit LevelFor(Level l) { log::set_level(l); }
  ~LevelFor() { log::set_level(Level::info); }
};

// Says one line at each level on both paths: the write(2) one and spdlog's.
void say_everything() {
  log::trace("t {}", 1);
  log::debug("d {}", 2);
  log::info("i {}", 3);
  log::warn("w {}", 4);
  log::error("e {}", 5);
  log::cold().trace("ct {}", 1);
  log::cold().debug("cd {}", 2);
  log::cold().info("ci {}", 3);
  log::cold().warn("cw {}", 4);
  log::cold().error("ce {}", 5);
}

std::string read_file(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/memtrace-log-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  REQUIRE(d);
  return d;
}

}  // namespace

TEST_CASE("level names: memtrace's set, spdlog's spellings, any case") {
  const std::pair<const char*, Level> good[] = {
      {"trace", Level::trace}, {"debug", Level::debug},   {"info", Level::info}, {"warn", Level::warn},
      {"warning", Level::warn}, {"error", Level::error},  {"err", Level::error}, {"off", Level::off},
      {"DEBUG", Level::debug}, {" Warn ", Level::warn},   {"OFF", Level::off}};
  for (auto [text, want] : good) {
    Level got = Level::trace;
    INFO(text);
    CHECK(log::parse_level(text, &got));
    CHECK(got == want);
  }
  for (const char* text : {"", " ", "critical", "loud", "verbose", "of", "2", "debug1", "informational-but-long"}) {
    Level got = Level::info;
    INFO(text);
    CHECK_FALSE(log::parse_level(text, &got));
    CHECK(got == Level::info);  // untouched
  }
  for (Level l : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    Level back = Level::info;
    CHECK(log::parse_level(log::level_name(l), &back));
    CHECK(back == l);
  }
}

TEST_CASE("each level lets through itself and what is above it, on both paths") {
  struct Want {
    Level level;
    const char* text;
  };
  const Want lines[] = {{Level::trace, "memtrace: trace: t 1\n"},   {Level::debug, "memtrace: debug: d 2\n"},
                        {Level::info, "memtrace: i 3\n"},           {Level::warn, "memtrace: warning: w 4\n"},
                        {Level::error, "memtrace: error: e 5\n"},   {Level::trace, "memtrace: trace: ct 1\n"},
                        {Level::debug, "memtrace: debug: cd 2\n"},  {Level::info, "memtrace: ci 3\n"},
                        {Level::warn, "memtrace: warning: cw 4\n"}, {Level::error, "memtrace: error: ce 5\n"}};
  for (Level at : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    LevelFor lf(at);
    StderrCapture cap;
    say_everything();
    const std::string out = cap.text();
    std::string want;
    for (const Want& w : lines)
      if (static_cast<int>(w.level) >= static_cast<int>(at)) want += w.text;
    INFO("level " << log::level_name(at));
    CHECK(out == want);
    CHECK(log::enabled(Level::debug) == (static_cast<int>(at) <= static_cast<int>(Level::debug)));
  }
}

TEST_CASE("the default level is info: no debug line, everything else") {
  CHECK(log::level() == Level::info);
  StderrCapture cap;
  log::debug("hidden");
  log::cold().debug("hidden");
  log::info("shown");
  CHECK(cap.text() == "memtrace: shown\n");
}

TEST_CASE("spdlog's lines are whole; the write(2) path's are cut to its buffer") {
  const std::string long_text(3000, 'x');
  StderrCapture cap;
  log::cold().warn("{}", long_text);
  log::warn("{}", long_text);
  const std::string out = cap.text();
  const size_t nl = out.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(out.substr(0, nl) == "memtrace: warning: " + long_text);
  const std::string second = out.substr(nl + 1);
  CHECK(second.size() == 1024);
  CHECK(second.back() == '\n');
}

TEST_CASE("a log file is created 0600 whatever the umask, appended to, and never through a link") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/memtrace.log";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs("earlier\n", f);
    std::fclose(f);
    ::chmod(path.c_str(), 0600);
  }
  const std::string fresh = dir + "/fresh.log";
  mode_t old_mask = ::umask(0);
  CHECK(log::use_file(fresh.c_str()) == 0);
  ::umask(old_mask);
  struct stat st {};
  REQUIRE(::stat(fresh.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  log::info("into the fresh file");
  CHECK(log::use_file(path.c_str()) == 0);
  log::warn("one");
  log::cold().info("two");
  const std::string link = dir + "/link.log";
  REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
  CHECK(log::use_file(link.c_str()) == ELOOP);  // and the destination stays the file
  log::info("three");
  log::use_fd2();
  CHECK(read_file(fresh) == "memtrace: into the fresh file\n");
  CHECK(read_file(path) == "earlier\nmemtrace: warning: one\nmemtrace: two\nmemtrace: three\n");
  std::remove(link.c_str());
  std::remove(path.c_str());
  std::remove(fresh.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("a FIFO nobody reads is refused at once, not waited on") {
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/log.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(log::use_file(fifo.c_str()) == ENXIO);
  std::remove(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("a log file that cannot be opened: one warning on stderr, and stderr it is") {
  StderrCapture cap;
  CHECK_FALSE(log::set_destination("/proc/nonexistent/memtrace.log"));
  log::info("still here");
  log::use_fd2();
  const std::string out = cap.text();
  CHECK(out.rfind("memtrace: warning: cannot open MEMTRACE_LOG='/proc/nonexistent/memtrace.log' (", 0) == 0);
  CHECK(out.find("); writing to stderr\nmemtrace: still here\n") != std::string::npos);
}

TEST_CASE("writing to a reader that went away raises no SIGPIPE and keeps errno, on both paths") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);
  static volatile sig_atomic_t pipes = 0;
  struct sigaction sa {}, old {};
  sa.sa_handler = [](int) { pipes = pipes + 1; };
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGPIPE, &sa, &old) == 0);
  const int saved = ::dup(2);  // memtrace writes to fd 2 as it is (log::use_fd2, the tests' default)
  ::dup2(fds[1], 2);
  errno = ENOTTY;
  log::warn("nobody reads this");
  CHECK(errno == ENOTTY);
  log::cold().warn("nor this");
  CHECK(errno == ENOTTY);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fds[1]);
  ::sigaction(SIGPIPE, &old, nullptr);
  CHECK(pipes == 0);
}
