#include "cli/analysis/grouping.hpp"

#include <catch2/catch.hpp>

#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

TEST_CASE("groups by stack text (two ids with the same frames are one group), largest first") {
  SnapshotMaker m;
  auto s1 = m.stack({"f@a.c:1", "main@a.c:2"});
  auto s2 = m.stack({"f@a.c:1", "main@a.c:2"});  // same text, another id
  auto s3 = m.stack({"g@a.c:5"});
  auto app = m.str("app"), nccl = m.str("nccl");
  std::vector<LiveAlloc> v = {{1, 100, s1, app}, {2, 50, s2, app}, {3, 400, s3, nccl}, {4, 10, s2, nccl}, {5, 7, 0, 0}};
  auto g = group_allocs(m.s, v, GroupBy::kStack);
  REQUIRE(g.size() == 3);
  CHECK(g[0].stack == "g (a.c:5)");
  CHECK(g[0].bytes == 400);
  CHECK(g[1].stack == "f (a.c:1) < main (a.c:2)");
  CHECK(g[1].bytes == 160);
  CHECK(g[1].count == 3);
  CHECK(g[1].owner == "app");  // the owner holding most of its bytes
  CHECK(g[1].stack_id == s1);
  CHECK(g[2].stack == "[no stack]");
  CHECK(g[2].owner == "unknown");

  auto o = group_allocs(m.s, v, GroupBy::kOwner);
  REQUIRE(o.size() == 3);
  CHECK(o[0].owner == "nccl");
  CHECK(o[0].bytes == 410);
  CHECK(o[1].owner == "app");
  CHECK(o[2].owner == "unknown");

  auto so = group_allocs(m.s, v, GroupBy::kStackAndOwner);
  CHECK(so.size() == 4);  // f/main splits into app and nccl
}

TEST_CASE("ties are ordered by count, then text, so outputs are stable") {
  SnapshotMaker m;
  auto a = m.stack({"a@f.c:1"});
  auto b = m.stack({"b@f.c:1"});
  std::vector<LiveAlloc> v = {{1, 10, b, 0}, {2, 10, a, 0}};
  auto g = group_allocs(m.s, v, GroupBy::kStack);
  CHECK(g[0].stack == "a (f.c:1)");
  CHECK(g[1].stack == "b (f.c:1)");
}
