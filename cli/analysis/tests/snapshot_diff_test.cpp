#include "cli/analysis/snapshot_diff.hpp"

#include <catch2/catch.hpp>

#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

TEST_CASE("stacks are matched by text across files; unchanged rows are left out") {
  SnapshotMaker a, b;
  auto a1 = a.stack({"grow@m.c:1"});
  auto a2 = a.stack({"same@m.c:2"});
  auto a3 = a.stack({"gone@m.c:3"});
  b.stack({"new@m.c:9"});  // ids differ between the files
  auto b1 = b.stack({"grow@m.c:1"});
  auto b2 = b.stack({"same@m.c:2"});
  auto b4 = b.stack({"new@m.c:4"});
  auto ca = a.str("app"), cb = b.str("app"), cn = b.str("nccl");
  std::vector<LiveAlloc> la = {{1, 100, a1, ca}, {2, 50, a2, ca}, {3, 30, a3, ca}};
  std::vector<LiveAlloc> lb = {{1, 400, b1, cb}, {2, 50, b2, cb}, {4, 20, b4, cn}};
  auto rows = diff_groups(a.s, group_allocs(a.s, la, GroupBy::kStack), b.s, group_allocs(b.s, lb, GroupBy::kStack), false);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].key == "grow (m.c:1)");
  CHECK(rows[0].delta() == 300);
  CHECK(rows[0].frames_from == &b.s);
  CHECK(rows[0].stack_id == b1);
  CHECK(rows[1].key == "gone (m.c:3)");
  CHECK(rows[1].delta() == -30);
  CHECK(rows[1].frames_from == &a.s);
  CHECK(rows[2].key == "new (m.c:4)");
  CHECK(rows[2].delta() == 20);
  CHECK(rows[2].count_a == 0);

  auto owners = diff_groups(a.s, group_allocs(a.s, la, GroupBy::kOwner), b.s, group_allocs(b.s, lb, GroupBy::kOwner), true);
  REQUIRE(owners.size() == 2);
  CHECK(owners[0].key == "app");
  CHECK(owners[0].delta() == 270);
  CHECK(owners[1].key == "nccl");
}
