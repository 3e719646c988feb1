// How dump files are named (output/output_path.hpp): the MEMTRACE_OUTPUT template's keys, the
// rule that keeps dumps other than the exit one from overwriting each other or the exit snapshot,
// and what becomes of a result too long for the file system.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/log.hpp"
#include "core/records.hpp"
#include "output/dump.hpp"
#include "output/frame_source.hpp"
#include "output/output_path.hpp"

using namespace memtrace;
using namespace memtrace::output;

namespace {

PathContext context() {
  PathContext c;
  c.pid = 4242;
  c.rank = "3";
  c.host = "node7";
  c.sequence = 5;
  c.unix_time = 1767225600;
  c.exe_name = "train.py";
  return c;
}

constexpr DumpKind kOnDemand[] = {DumpKind::Signal, DumpKind::Interval, DumpKind::Oom, DumpKind::Api};

// memtrace's lines into a file while it lives (as MEMTRACE_LOG would put them): the library took
// a copy of fd 2 as it loaded, so redirecting fd 2 would not catch them.
class LogToFile {
 public:
  explicit LogToFile(std::string path) : path_(std::move(path)) {
    std::remove(path_.c_str());
    log::set_destination(path_.c_str());
  }
  std::string finish() {
    log::set_destination(nullptr);
    std::string out;
    if (FILE* f = std::fopen(path_.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
      std::fclose(f);
    }
    std::remove(path_.c_str());
    return out;
  }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("dump kinds are named in the snapshot as before", "[dump_paths]") {
  CHECK(std::string(dump_kind_name(DumpKind::Exit)) == "exit");
  CHECK(std::string(dump_kind_name(DumpKind::Signal)) == "signal");
  CHECK(std::string(dump_kind_name(DumpKind::Interval)) == "interval");
  CHECK(std::string(dump_kind_name(DumpKind::Oom)) == "oom");
  CHECK(std::string(dump_kind_name(DumpKind::Api)) == "api");
}

TEST_CASE("every template key of a dump's path", "[dump_paths]") {
  const std::string tmpl = "out/%h/r%r-p%p-n%n-t%t-%e.pickle";
  CHECK(expand_output_path(dump_path_template(tmpl, DumpKind::Exit), context()) ==
        "out/node7/r3-p4242-n5-t1767225600-train.py.pickle");
  // The template names each dump itself: on-demand dumps use it unchanged too.
  for (DumpKind k : kOnDemand) CHECK(dump_path_template(tmpl, k) == tmpl);
  CHECK(numbers_each_dump(tmpl));
  CHECK_FALSE(numbers_each_dump("memtrace-%p.pickle"));
}

TEST_CASE("the exit snapshot keeps the template; other dumps get -%n before the extension", "[dump_paths]") {
  struct Case {
    const char* tmpl;
    const char* on_demand;
  };
  const Case cases[] = {
      {"memtrace-%p.pickle", "memtrace-%p-%n.pickle"},
      {"/tmp/run.d/out", "/tmp/run.d/out-%n"},         // a '.' in a directory is no extension
      {"dir/.hidden", "dir/.hidden-%n"},               // nor is a leading one
      {".pickle", ".pickle-%n"},
      {"noext", "noext-%n"},
      {"a.b.c", "a.b-%n.c"},                           // the last '.' of the file name
      {"%h/%e.%p.pickle", "%h/%e.%p-%n.pickle"},
  };
  for (const Case& c : cases) {
    INFO(c.tmpl);
    CHECK(dump_path_template(c.tmpl, DumpKind::Exit) == c.tmpl);
    for (DumpKind k : kOnDemand) CHECK(dump_path_template(c.tmpl, k) == c.on_demand);
  }
  // Numbered: the sequence tells the exit snapshot (sequence 0 here) from the others.
  PathContext first = context(), later = context();
  first.sequence = 0;
  later.sequence = 1;
  CHECK(expand_output_path(dump_path_template("m-%p.pickle", DumpKind::Exit), first) == "m-4242.pickle");
  CHECK(expand_output_path(dump_path_template("m-%p.pickle", DumpKind::Signal), later) == "m-4242-1.pickle");
}

TEST_CASE("over-long results are kept whole, and fail to be written with one warning", "[dump_paths]") {
  PathContext c = context();
  c.host = std::string(300, 'h');
  const std::string tmpl = "/tmp/memtrace-preload-test-%h-%p.pickle";
  const std::string path = expand_output_path(tmpl, c);
  CHECK(path == "/tmp/memtrace-preload-test-" + std::string(300, 'h') + "-4242.pickle");
  CHECK(expand_output_path(dump_path_template(tmpl, DumpKind::Oom), c) ==
        "/tmp/memtrace-preload-test-" + std::string(300, 'h') + "-4242-5.pickle");

  // A file name over NAME_MAX: the dump reports the expanded path and one line why.
  StateCopy state;
  NullFrameSource frames;
  DumpRequest req;
  req.path_template = tmpl;
  req.sequence = 5;
  req.print_summary = false;
  req.kind = DumpKind::Signal;
  LogToFile cap("/tmp/memtrace-preload-test-log-" + std::to_string(getpid()));
  DumpReport rep = dump_with_source(state, frames, req, c, "/bin/app");
  const std::string err = cap.finish();
  INFO(err);
  CHECK_FALSE(rep.written);
  CHECK(rep.path == path);
  CHECK_FALSE(rep.error.empty());
  CHECK(rep.error.find('\n') == std::string::npos);
  CHECK(err.find("memtrace: error: snapshot not written: ") == 0);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}
