#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "core/range_log.hpp"
#include "core/range_table.hpp"

using namespace memtrace;

TEST_CASE("range table: a name and a (parent, name) pair are each stored once") {
  static RangeTable t;  // ~13 MiB of reserved address space: one per process is the real use
  const uint32_t fwd = t.intern_name("forward");
  CHECK(fwd != 0);
  CHECK(t.intern_name("forward") == fwd);
  CHECK(t.name(fwd) == "forward");
  CHECK(t.name(fwd).data()[7] == '\0');  // a C string too (markers are notes)
  const uint32_t blk = t.intern_name("block3");
  CHECK(blk != fwd);
  const uint32_t a = t.child(0, fwd);
  const uint32_t b = t.child(a, blk);
  CHECK(t.child(0, fwd) == a);
  CHECK(t.child(a, blk) == b);
  CHECK(t.child(0, blk) != b);  // the same name elsewhere is another node
  CHECK(t.node(b).parent == a);
  CHECK(t.node(b).name == blk);
  CHECK(t.node(b).depth == 2);
  CHECK(t.node(a).depth == 1);
  std::vector<RangeNode> nodes;
  std::vector<std::string_view> names;
  t.copy_to(&nodes, &names);
  CHECK(nodes.size() == t.node_count() + 1);
  CHECK(names.size() == t.name_count() + 1);
  CHECK(names[fwd] == "forward");
  CHECK(nodes[b].parent == a);
}

TEST_CASE("range table: long names are cut at a character boundary; depth is bounded") {
  static RangeTable t;
  std::string longname(RangeTable::kMaxNameLength - 1, 'x');
  longname += "\xc3\xa9tail";  // a two-byte character across the bound
  const uint32_t id = t.intern_name(longname);
  CHECK(t.name(id).size() == RangeTable::kMaxNameLength - 1);
  uint32_t node = 0;
  const uint32_t n = t.intern_name("level");
  for (uint32_t d = 0; d < RangeTable::kMaxDepth; ++d) node = t.child(node, n);
  CHECK(t.node(node).depth == RangeTable::kMaxDepth);
  CHECK(t.child(node, n) == node);  // one deeper: the caller counts it instead
}

TEST_CASE("range table: threads interning the same names agree") {
  static RangeTable t;
  std::vector<uint32_t> got(8);
  std::vector<std::thread> th;
  for (int k = 0; k < 8; ++k)
    th.emplace_back([&, k] {
      uint32_t node = 0;
      for (int d = 0; d < 20; ++d) node = t.child(node, t.intern_name("n" + std::to_string(d)));
      got[k] = node;
    });
  for (auto& x : th) x.join();
  for (uint32_t g : got) CHECK(g == got[0]);
  CHECK(t.node_count() == 20);
}

TEST_CASE("range log: keeps the newest, oldest first, and says how many it dropped") {
  RangeLog log;
  REQUIRE(log.reset(5));  // rounded up to 8
  CHECK(log.capacity() == 8);
  for (uint32_t i = 1; i <= 11; ++i) log.push(100 + i, i, 0, i % 2 ? RangeStage::Start : RangeStage::End);
  std::vector<RangeEvent> out;
  uint64_t dropped = 0;
  log.copy_to(&out, &dropped);
  REQUIRE(out.size() == 8);
  CHECK(dropped == 3);
  CHECK(out.front().node == 4);
  CHECK(out.back().node == 11);
  CHECK(out.back().time_us == 111);
  CHECK(out.back().stage == RangeStage::Start);
  RangeLog off;
  REQUIRE(off.reset(0));
  off.push(1, 1, 0, RangeStage::Start);
  off.copy_to(&out, &dropped);
  CHECK(dropped == 0);
}

TEST_CASE("range log: a copy taken while threads push holds only whole events") {
  RangeLog log;
  REQUIRE(log.reset(64));
  std::atomic<bool> stop{false};
  std::vector<std::thread> th;
  for (int k = 0; k < 3; ++k)
    th.emplace_back([&, k] {
      for (uint32_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
        log.push(i, (static_cast<uint32_t>(k) << 24) | (i & 0xffffff), static_cast<int16_t>(k), RangeStage::Start);
    });
  for (int round = 0; round < 200; ++round) {
    std::vector<RangeEvent> out;
    uint64_t dropped = 0;
    log.copy_to(&out, &dropped);
    for (const RangeEvent& e : out) {
      const int k = static_cast<int>(e.node >> 24);
      CHECK(k < 3);
      CHECK(e.device == k);  // fields of one push, never mixed with another's
      CHECK((e.node & 0xffffff) == (e.time_us & 0xffffff));
    }
  }
  stop = true;
  for (auto& x : th) x.join();
}
