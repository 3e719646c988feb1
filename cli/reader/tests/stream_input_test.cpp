// Input that is not a regular file (FIFOs, pipes on /dev/stdin, devices): reading stops at a first
// byte that cannot start a pickle, buffers at most LoadOptions::max_stream_bytes, and a FIFO with
// no writer is an error after a bounded wait, never a hang; a writer that is there but slow loads.
//
// Every load runs in a forked child under alarm(): a regression that hangs (or grows without end)
// kills the child and fails the test, which itself only waits for the child to end.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cli/reader/pickle_vm.hpp"
#include "cli/reader/snapshot.hpp"
#include "test_util.hpp"

using namespace memtrace::reader;
namespace t = memtrace::reader::test;

namespace {

// {'segments': [], 'device_traces': [[{'action': 'alloc', 'size': 5}]]}
std::string small_pickle() {
  return "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + "]]}(" + t::sbu("action") +
         t::sbu("alloc") + t::sbu("size") + "K\x05" + "ua" + "a" + "u.";
}

// One line for the parent: "loaded <size of the first entry>" or "error <message>", then the
// stream bytes read.
std::string describe(const LoadResult& r, uint64_t bytes_read) {
  std::string s;
  if (r.error) {
    s = "error " + r.error->message;
  } else if (r.snapshot && r.snapshot->device_traces.size() == 1 && r.snapshot->device_traces[0].size() == 1) {
    s = "loaded " + std::to_string(r.snapshot->device_traces[0][0].size);
  } else {
    s = "loaded something else";
  }
  return s + "\nread " + std::to_string(bytes_read);
}

struct Child {
  bool ok = false;  // exited with status 0 (not killed by the alarm)
  std::string out;
};

// Runs fn() in a forked child that SIGALRM kills after limit_s; returns what fn returned.
template <class F>
Child in_child(unsigned limit_s, F fn) {
  Child c;
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    ::signal(SIGPIPE, SIG_IGN);
    ::alarm(limit_s);
    std::string s = fn();
    for (size_t off = 0; off < s.size();) {
      ssize_t n = ::write(p[1], s.data() + off, s.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[4096];
  while (true) {
    ssize_t n = ::read(p[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    c.out.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  c.ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!c.ok) UNSCOPED_INFO("child " << (WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st)) : "failed"));
  return c;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Writes `data` in pieces after a pause, waits until the reader has taken all of it out of the
// pipe (so closing cannot discard it), then closes fd.
void slow_write_then_close(int fd, std::string data, int first_delay_ms) {
  sleep_ms(first_delay_ms);
  size_t piece = data.size() / 4 + 1;
  for (size_t off = 0; off < data.size(); off += piece) {
    write_all(fd, std::string_view(data).substr(off, piece));
    sleep_ms(30);
  }
  int left = 0;
  while (::ioctl(fd, FIONREAD, &left) == 0 && left > 0) sleep_ms(5);
  ::close(fd);
}

std::string make_fifo(const t::TempDir& dir) {
  std::string path = dir / "fifo";
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  return path;
}

}  // namespace

TEST_CASE("stream input: the first byte alone decides what cannot start a pickle, as the VM does") {
  // A byte may_start_pickle refuses is rejected by the VM at byte 0 whatever follows it (with the
  // same message, but for the memo opcodes, which read their argument before they fail); a byte it
  // accepts is only ever "truncated" on its own (the VM wanted more), never rejected.
  int memo_ops = 0;
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    LoadResult alone = load_snapshot_bytes(one, "x");
    REQUIRE(alone.error.has_value());
    if (!pickle::may_start_pickle(static_cast<uint8_t>(b))) {
      LoadResult more = load_snapshot_bytes(one + small_pickle(), "x");
      REQUIRE(more.error.has_value());
      INFO("byte " << b << ": " << alone.error->message << " / " << more.error->message);
      CHECK_THAT(more.error->message, Catch::EndsWith(" at byte 0"));
      if (std::string("ghjpqr").find(static_cast<char>(b)) != std::string::npos) {
        ++memo_ops;
        CHECK_THAT(alone.error->message, Catch::Contains("truncated"));
      } else {
        CHECK(alone.error->message == more.error->message);
      }
    } else {
      INFO("byte " << b << ": " << alone.error->message);
      CHECK_THAT(alone.error->message, Catch::Contains("truncated"));
    }
  }
  CHECK(pickle::may_start_pickle(0x80));
  CHECK(pickle::may_start_pickle('('));  // protocol 0: MARK first
  CHECK(pickle::may_start_pickle('}'));  // protocol 1
  CHECK_FALSE(pickle::may_start_pickle(0x00));
  CHECK(memo_ops == 6);
}

TEST_CASE("stream input: a FIFO starting with a byte that cannot start a pickle is rejected at once") {
  t::TempDir dir;
  std::string fifo = make_fifo(dir);
  for (std::string first : {std::string("n"), std::string("."), std::string("q")}) {
    Child c = in_child(60, [&] {
      int w = ::open(fifo.c_str(), O_RDWR);  // the writer stays open: only the first byte may be read
      if (w < 0) return std::string("cannot open the writer");
      write_all(w, first + "otes on the run\n");
      uint64_t read = 0;
      LoadOptions o;
      o.stream_bytes_read = &read;
      LoadResult r = load_snapshot(fifo, o);
      ::close(w);
      return describe(r, read);
    });
    REQUIRE(c.ok);
    if (first == "n") CHECK(c.out == "error " + fifo + ": not a pickle: unknown opcode 0x6e at byte 0\nread 1");
    if (first == ".") CHECK(c.out == "error " + fifo + ": STOP with an empty stack at byte 0\nread 1");
    if (first == "q") CHECK(c.out == "error " + fifo + ": not a pickle: BINPUT (0x71) cannot start a pickle at byte 0\nread 1");
  }
}

TEST_CASE("stream input: /dev/zero is rejected at its first byte, without buffering") {
  Child c = in_child(60, [] {
    // Without the first-byte check the reader would buffer until out of memory: cap the address
    // space so such a regression fails fast here instead of taking the machine's memory.
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0) {
      long pages = 0;
      if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
        std::fclose(f);
      }
      rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{512} << 20);
      if (rl.rlim_max == RLIM_INFINITY || cap < rl.rlim_max) rl.rlim_cur = cap;
      setrlimit(RLIMIT_AS, &rl);
    }
    uint64_t read = 0;
    LoadOptions o;
    o.stream_bytes_read = &read;
    LoadResult r = load_snapshot("/dev/zero", o);
    return describe(r, read) + "\n" + describe(load_snapshot("/dev/zero"), 0);
  });
  REQUIRE(c.ok);
  CHECK(c.out ==
        "error /dev/zero: not a pickle: unknown opcode 0x00 at byte 0\nread 1\n"
        "error /dev/zero: not a pickle: unknown opcode 0x00 at byte 0\nread 0");
}

TEST_CASE("stream input: a FIFO with no writer is an error after the documented wait, not a hang") {
  t::TempDir dir;
  std::string fifo = make_fifo(dir);
  SECTION("default wait (2 s)") {
    Child c = in_child(60, [&] {
      auto t0 = std::chrono::steady_clock::now();
      LoadResult r = load_snapshot(fifo);
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
      return describe(r, 0) + (ms >= 2000 ? "\nwaited" : "\ntoo soon");
    });
    REQUIRE(c.ok);
    CHECK(c.out == "error " + fifo + ": no data: FIFO has no writer (none opened it within 2 s)\nread 0\nwaited");
  }
  SECTION("injected wait") {
    Child c = in_child(60, [&] {
      LoadOptions o;
      o.fifo_writer_wait_ms = 100;
      return describe(load_snapshot(fifo, o), 0);
    });
    REQUIRE(c.ok);
    CHECK(c.out == "error " + fifo + ": no data: FIFO has no writer (none opened it within 100 ms)\nread 0");
  }
}

TEST_CASE("stream input: a FIFO whose writer is there at open time but slow still loads") {
  t::TempDir dir;
  std::string fifo = make_fifo(dir);
  std::string data = small_pickle();
  Child c = in_child(60, [&] {
    // O_RDWR: a writer end that exists before the reader opens (and does not wait for one).
    int w = ::open(fifo.c_str(), O_RDWR);
    if (w < 0) return std::string("cannot open the writer");
    // Its first byte comes well after the reader's wait for a writer has passed.
    std::thread writer(slow_write_then_close, w, data, 400);
    uint64_t read = 0;
    LoadOptions o;
    o.fifo_writer_wait_ms = 50;
    o.stream_bytes_read = &read;
    LoadResult r = load_snapshot(fifo, o);
    writer.join();
    return describe(r, read);
  });
  REQUIRE(c.ok);
  CHECK(c.out == "loaded 5\nread " + std::to_string(data.size()));
}

TEST_CASE("stream input: a writer that opens the FIFO after the reader, within the wait, loads") {
  t::TempDir dir;
  std::string fifo = make_fifo(dir);
  std::string data = small_pickle();
  Child c = in_child(60, [&] {
    std::thread writer([&] {
      sleep_ms(100);
      int w = ::open(fifo.c_str(), O_WRONLY);  // waits for the reader if it is not there yet
      if (w >= 0) slow_write_then_close(w, data, 100);
    });
    LoadOptions o;
    o.fifo_writer_wait_ms = 50000;  // long enough that how fast the writer starts does not matter
    LoadResult r = load_snapshot(fifo, o);
    writer.join();
    return describe(r, 0);
  });
  REQUIRE(c.ok);
  CHECK(c.out == "loaded 5\nread 0");
}

TEST_CASE("stream input: a pipe on /dev/stdin with a slow writer loads; an empty one is no data") {
  std::string data = small_pickle();
  Child slow = in_child(60, [&] {
    int p[2];
    if (::pipe(p) != 0 || ::dup2(p[0], 0) < 0) return std::string("no pipe");
    ::close(p[0]);
    std::thread writer(slow_write_then_close, p[1], data, 300);
    LoadOptions o;
    o.fifo_writer_wait_ms = 50;
    LoadResult r = load_snapshot("/dev/stdin", o);
    writer.join();
    return describe(r, 0);
  });
  REQUIRE(slow.ok);
  CHECK(slow.out == "loaded 5\nread 0");

  Child empty = in_child(60, [&] {
    int p[2];
    if (::pipe(p) != 0 || ::dup2(p[0], 0) < 0) return std::string("no pipe");
    ::close(p[0]);
    ::close(p[1]);
    LoadOptions o;
    o.fifo_writer_wait_ms = 50;
    return describe(load_snapshot("/dev/stdin", o), 0);
  });
  REQUIRE(empty.ok);
  CHECK_THAT(empty.out, Catch::StartsWith("error /dev/stdin: no data: "));
}

TEST_CASE("stream input: more than max_stream_bytes from a FIFO is rejected, exactly that many loads") {
  t::TempDir dir;
  std::string fifo = make_fifo(dir);
  std::string data = small_pickle();
  SECTION("too long: stops one byte past the bound") {
    Child c = in_child(60, [&] {
      int w = ::open(fifo.c_str(), O_RDWR);
      if (w < 0) return std::string("cannot open the writer");
      write_all(w, "\x80\x04" + std::string(3000, 'N'));  // fits any pipe buffer (>= 4 KiB)
      uint64_t read = 0;
      LoadOptions o;
      o.max_stream_bytes = 1000;
      o.stream_bytes_read = &read;
      LoadResult r = load_snapshot(fifo, o);
      ::close(w);
      return describe(r, read);
    });
    REQUIRE(c.ok);
    CHECK(c.out == "error " + fifo +
                       ": not a regular file and longer than 1000 bytes, the most read from a pipe or device; "
                       "save it to a file first\nread 1001");
  }
  SECTION("exactly the bound") {
    Child c = in_child(60, [&] {
      int w = ::open(fifo.c_str(), O_RDWR);
      if (w < 0) return std::string("cannot open the writer");
      std::thread writer(slow_write_then_close, w, data, 0);
      LoadOptions o;
      o.max_stream_bytes = data.size();
      LoadResult r = load_snapshot(fifo, o);
      writer.join();
      return describe(r, 0);
    });
    REQUIRE(c.ok);
    CHECK(c.out == "loaded 5\nread 0");
  }
  CHECK(LoadOptions{}.max_stream_bytes == uint64_t{4} << 30);
}
