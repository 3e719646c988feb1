#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "fake_source.hpp"
#include "core/log.hpp"
#include "output/dump.hpp"
#include "test_util.hpp"

using namespace memtrace;
using namespace memtrace::output;
namespace t = memtrace::output::test;

namespace {

// Captures what is written to fd 2 while alive.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& file) : file_(file) {
    fflush(stderr);
    saved_ = dup(2);
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  std::string finish() {
    if (saved_ >= 0) {
      fflush(stderr);
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
    }
    return t::read_file(file_);
  }
  ~StderrCapture() { finish(); }

 private:
  std::string file_;
  int saved_ = -1;
};

StateCopy small_state() {
  StateCopy s;
  AllocRecord r;
  r.addr = 0x7f0000000000;
  r.size = 4096;
  r.requested = 4000;
  r.stack_id = 1;
  s.live.push_back(r);
  TraceEntry e;
  e.addr = r.addr;
  e.stack_id = 1;
  e.time_us = 1767225600000000;
  e.action = Action::SegmentAlloc;
  e.size = 4096;
  s.trace.push_back(e);
  e.action = Action::Alloc;
  e.size = 4000;
  s.trace.push_back(e);
  s.device_count = 1;
  s.device[0] = UsageStats{4096, 4096, 1};
  s.ring_capacity = 100;
  s.total_entries = 2;
  return s;
}

PathContext ctx() {
  PathContext c;
  c.pid = 31337;
  c.host = "h";
  c.sequence = 1;
  c.unix_time = 1767225600;
  c.exe_name = "app";
  return c;
}

int lines_with(const std::string& text, const std::string& prefix) {
  int n = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, prefix.size(), prefix) == 0) ++n;
    pos = end + 1;
  }
  return n;
}

}  // namespace

TEST_CASE("dump writes the snapshot and prints the summary", "[dump]") {
  t::TempDir dir;
  t::FakeFrameSource src;
  src.set(1, {{"app.cu", "main", 12}}, "app");
  DumpRequest req;
  req.path_template = dir / "out/%e-%p-%n.pickle";
  req.sequence = 1;
  req.kind = DumpKind::Exit;
  StderrCapture cap(dir / "stderr.txt");
  DumpReport rep = dump_with_source(small_state(), src, req, ctx(), "/bin/app");
  std::string err = cap.finish();
  INFO(err);
  CHECK(rep.written);
  CHECK(rep.error.empty());
  CHECK(rep.path == dir / "out/app-31337-1.pickle");
  CHECK(rep.bytes > 100);
  CHECK(rep.seconds >= 0);
  CHECK(t::read_file(rep.path).size() == rep.bytes);
  CHECK(lines_with(err, "memtrace: warning:") == 0);
  CHECK(err.find("memtrace: summary of /bin/app (pid 31337)") == 0);
  CHECK(err.find("  snapshot: " + rep.path) != std::string::npos);
  std::string out;
  int rc = t::run(t::python() + " '" + t::checker() + "' '" + rep.path +
                      "' --expect-json '{\"segments\": 1, \"metadata\": {\"pid\": 31337, \"reason\": \"exit\", "
                      "\"dump_sequence\": 1, \"exe\": \"/bin/app\"}, \"frame_names\": [\"main\"]}'",
                  &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("a failed write is one error line, never an exception", "[dump]") {
  t::TempDir dir;
  REQUIRE(t::write_text(dir / "blocker", "x"));
  t::FakeFrameSource src;
  DumpRequest req;
  req.path_template = dir / "blocker/snap.pickle";
  StderrCapture cap(dir / "stderr.txt");
  DumpReport rep = dump_with_source(small_state(), src, req, ctx(), "/bin/app");
  std::string err = cap.finish();
  INFO(err);
  CHECK_FALSE(rep.written);
  CHECK(rep.error.find(dir / "blocker") != std::string::npos);
  CHECK(lines_with(err, "memtrace: warning:") == 0);
  CHECK(lines_with(err, "memtrace: error:") == 1);
  CHECK(lines_with(err, "memtrace: error: snapshot not written: cannot ") == 1);
  CHECK(err.find("  snapshot: not written (see the error above)") != std::string::npos);
}

TEST_CASE("no summary when not asked; nothing on stderr on success", "[dump]") {
  t::TempDir dir;
  NullFrameSource none;
  DumpRequest req;
  req.path_template = dir / "s.pickle";
  req.print_summary = false;
  StderrCapture cap(dir / "stderr.txt");
  DumpReport rep = dump_with_source(small_state(), none, req, ctx(), "/bin/app");
  std::string err = cap.finish();
  CHECK(rep.written);
  CHECK(err.empty());
}

TEST_CASE("the summary is an info message: MEMTRACE_LOG_LEVEL=warn or above keeps it back", "[dump]") {
  t::TempDir dir;
  NullFrameSource none;
  for (log::Level l : {log::Level::info, log::Level::warn, log::Level::error, log::Level::off}) {
    DumpRequest req;
    req.path_template = dir / "s.pickle";
    req.print_summary = true;
    log::set_level(l);
    StderrCapture cap(dir / "stderr.txt");
    DumpReport rep = dump_with_source(small_state(), none, req, ctx(), "/bin/app");
    std::string err = cap.finish();
    log::set_level(log::Level::info);
    INFO(log::level_name(l) << ": " << err);
    CHECK(rep.written);
    CHECK((err.find("memtrace: summary") != std::string::npos) == (l == log::Level::info));
  }
}

TEST_CASE("a throwing frame source still gives a snapshot, without frames", "[dump]") {
  t::TempDir dir;
  t::ThrowingFrameSource bad;
  DumpRequest req;
  req.path_template = dir / "s.pickle";
  StderrCapture cap(dir / "stderr.txt");
  DumpReport rep = dump_with_source(small_state(), bad, req, ctx(), "/bin/app");
  std::string err = cap.finish();
  INFO(err);
  CHECK(rep.written);
  CHECK(lines_with(err, "memtrace: warning: symbolization failed") == 1);
  CHECK(err.find("unknown") != std::string::npos);  // owners fall back to unknown in the summary
  std::string out;
  CHECK(t::run(t::python() + " '" + t::checker() + "' '" + rep.path + "' --expect-json '{\"segments\": 1}'", &out) ==
        0);
  INFO(out);
}

TEST_CASE("an empty template writes nothing and says why", "[dump]") {
  t::TempDir dir;
  NullFrameSource none;
  DumpRequest req;
  StderrCapture cap(dir / "stderr.txt");
  DumpReport rep = dump_with_source(small_state(), none, req, ctx(), "/bin/app");
  std::string err = cap.finish();
  CHECK_FALSE(rep.written);
  CHECK(rep.error.empty());
  CHECK(lines_with(err, "memtrace: warning:") == 0);
  CHECK(err.find("not written (MEMTRACE_OUTPUT is empty)") != std::string::npos);
}
