#include "cli/analysis/folded.hpp"

#include <catch2/catch.hpp>

#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

TEST_CASE("folded lines: outermost first, one per stack text, sorted, zero bytes left out") {
  SnapshotMaker m;
  auto s1 = m.stack({"leaf@a.c:3", "mid@a.c:2", "main@a.c:1"});
  auto s2 = m.stack({"leaf@a.c:3", "mid@a.c:2", "main@a.c:1"});
  auto s3 = m.stack({"op<a;b>@t.h:7"});
  std::vector<LiveAlloc> v = {{1, 10, s1, 0}, {2, 5, s2, 0}, {3, 8, s3, 0}, {4, 0, 0, 0}, {5, 4, 0, 0}};
  auto lines = fold_allocs(m.s, v);
  CHECK(folded_text(lines) ==
        "[no stack] 4\n"
        "main (a.c:1);mid (a.c:2);leaf (a.c:3) 15\n"
        "op<a,b> (t.h:7) 8\n");
}
