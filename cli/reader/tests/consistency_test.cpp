// find_inconsistencies on hand-made snapshots: each impossible fact is named once, with its place,
// and what real allocators write (adjacent segments, an oom asking for SIZE_MAX) is not flagged.
#include <catch2/catch.hpp>
#include <cstdint>

#include "cli/reader/consistency.hpp"

using namespace memtrace::reader;

namespace {

Segment seg(int device, uint64_t address, uint64_t total, std::initializer_list<uint64_t> blocks = {}) {
  Segment s;
  s.device = device;
  s.address = address;
  s.total_size = total;
  for (uint64_t b : blocks) {
    Block blk;
    blk.size = b;
    s.blocks.push_back(blk);
  }
  return s;
}

TraceEntry entry(Action a, uint64_t addr, uint64_t size) {
  TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  return e;
}

}  // namespace

TEST_CASE("a consistent snapshot has no findings", "[consistency]") {
  Snapshot s;
  s.segments = {seg(0, 0x1000, 0x1000, {0x800, 0x800}), seg(0, 0x2000, 0x1000), seg(1, 0x1000, 0x1000)};
  s.device_traces = {{entry(Action::SegmentAlloc, 0x1000, 0x1000), entry(Action::Oom, 0, UINT64_MAX)}};
  size_t total = 99;
  CHECK(find_inconsistencies(s, 0, &total).empty());
  CHECK(total == 0);
}

TEST_CASE("each impossible fact is named with its place", "[consistency]") {
  Snapshot s;
  s.segments = {
      seg(0, 0x10000, 0x10000),                  // [0] holds 0x10000..0x20000
      seg(0, 0x11000, 0x1000),                   // [1] inside [0]
      seg(0, 0x18000, 0x100),                    // [2] inside [0] too, after a smaller one
      seg(0, 0x40000, 0x1000, {0x800, 0x1000}),  // [3] blocks larger than the segment
      seg(1, 0x10000, uint64_t(-4096)),          // [4] negative size
      seg(1, 0x50000, 0x1000),                   // [5]
      seg(1, 0x50000, 0x1000),                   // [6] duplicate of [5]
  };
  s.device_traces = {{}, {entry(Action::Alloc, 0x50000, uint64_t(-1))}};
  size_t total = 0;
  auto found = find_inconsistencies(s, 0, &total);
  REQUIRE(total == 6);
  REQUIRE(found.size() == 6);
  CHECK(found[0].what == "segments[3] (device 0, 0x40000): its blocks add up to 6144 bytes, more than its total_size 4096");
  CHECK(found[1].what == "segments[4] (device 1, 0x10000): total_size is -4096");
  CHECK(found[2].what == "segments[1] (device 0, 0x11000) overlaps segments[0] (0x10000, 65536 bytes)");
  CHECK(found[3].what == "segments[2] (device 0, 0x18000) overlaps segments[0] (0x10000, 65536 bytes)");
  CHECK(found[4].what == "segments[6] (device 1, 0x50000) duplicates segments[5]");
  CHECK(found[5].what == "device_traces[1][0] (alloc at 0x50000): size is -1");

  auto first = find_inconsistencies(s, 1, &total);
  CHECK(first.size() == 1);
  CHECK(total == 6);
}
