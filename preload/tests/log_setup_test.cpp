#include <catch2/catch.hpp>

#include <string>

#include "preload/log_setup.hpp"

using namespace memtrace;
using memtrace::output::PathContext;

namespace {
PathContext at_load() {
  PathContext c;
  c.pid = 4242;
  c.rank = "3";
  c.host = "node7";
  c.sequence = 5;
  c.unix_time = 1767225600;
  c.exe_name = "train.py";
  return c;
}
}  // namespace

TEST_CASE("MEMTRACE_LOG takes MEMTRACE_OUTPUT's keys; %n is 0, one log per process", "[log_setup]") {
  CHECK(preload::log_path("logs/%h/r%r-p%p-n%n-t%t-%e.log", at_load()) ==
        "logs/node7/r3-p4242-n0-t1767225600-train.py.log");
  CHECK(preload::log_path("/var/log/memtrace.log", at_load()) == "/var/log/memtrace.log");
  CHECK(preload::log_path("100%%-%q.log", at_load()) == "100%-%q.log");  // as MEMTRACE_OUTPUT: %% and unknown keys
  PathContext slashy = at_load();
  slashy.rank = "a/b";
  CHECK(preload::log_path("r%r.log", slashy) == "ra_b.log");  // a value never adds a directory
}

TEST_CASE("a forked child has its own log file exactly when the template holds %p", "[log_setup]") {
  const PathContext parent = at_load();
  CHECK(preload::child_log_path("log-%p.txt", parent, 4343) == "log-4343.txt");
  CHECK(preload::log_path("log-%p.txt", parent) == "log-4242.txt");
  // Without %p (or with a literal "%%p") parent and child share the file; the rank, host and load
  // time are the parent's, so they never split it.
  for (const char* t : {"log-r%r.txt", "log-%t-%h.txt", "log-%%p.txt"})
    CHECK(preload::child_log_path(t, parent, 4343) == preload::log_path(t, parent));
}
