#include <catch2/catch.hpp>
#include <string>
#include <unistd.h>

#include "output/output_path.hpp"

using namespace memtrace::output;

namespace {
PathContext ctx() {
  PathContext c;
  c.pid = 4242;
  c.rank = "3";
  c.host = "node7";
  c.sequence = 2;
  c.unix_time = 1767225600;
  c.exe_name = "python3.11";
  return c;
}
}  // namespace

TEST_CASE("every template key expands", "[path]") {
  CHECK(expand_output_path("memtrace-%p.pickle", ctx()) == "memtrace-4242.pickle");
  CHECK(expand_output_path("out/%h/rank%r-%n-%t-%e.pickle", ctx()) == "out/node7/rank3-2-1767225600-python3.11.pickle");
  CHECK(expand_output_path("100%%-%p", ctx()) == "100%-4242");
  CHECK(expand_output_path("", ctx()) == "");
  CHECK(expand_output_path("plain.pickle", ctx()) == "plain.pickle");
}

TEST_CASE("unknown keys and a trailing % stay literal", "[path]") {
  CHECK(expand_output_path("a%xb%", ctx()) == "a%xb%");
  CHECK(expand_output_path("%q%p", ctx()) == "%q4242");
  CHECK(expand_output_path("%%p", ctx()) == "%p");
  CHECK(expand_output_path("%", ctx()) == "%");
}

TEST_CASE("substituted values cannot add directories", "[path]") {
  PathContext c = ctx();
  c.host = "evil/../../x";
  c.rank = "";
  CHECK(expand_output_path("d/%h-%r.p", c) == "d/evil_.._.._x-.p");
}

TEST_CASE("the process context is filled in", "[path]") {
  PathContext c = path_context_from_process(5);
  CHECK(c.pid == static_cast<int64_t>(getpid()));
  CHECK(c.sequence == 5);
  CHECK(c.unix_time > 1600000000);
  CHECK(c.exe_name == "output_tests");
  CHECK_FALSE(c.host.empty());
  CHECK(executable_path().find("output_tests") != std::string::npos);
}
