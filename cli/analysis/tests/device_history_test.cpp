#include "cli/analysis/device_history.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

namespace {
std::vector<uint64_t> addrs(std::vector<LiveAlloc> v) {
  std::vector<uint64_t> out;
  for (const LiveAlloc& a : v) out.push_back(a.addr);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("memtrace shape: one segment per allocation, peak and sets from a complete history") {
  SnapshotMaker m;
  auto sa = m.stack({"a@x.c:1", "main@x.c:9"});
  auto sb = m.stack({"b@x.c:2", "main@x.c:9"});
  m.mt_alloc(0, 0x1000, 100, 10, sa, "app");
  m.mt_alloc(0, 0x2000, 200, 20, sb, "nccl");
  m.mt_free(0, 0x1000, 100, 30, sa, "app");
  m.mt_alloc(0, 0x3000, 50, 40, sa, "app");
  m.segment(0, 0x2000, {{200, 200, BlockState::ActiveAllocated, sb}});
  m.segment(0, 0x3000, {{50, 50, BlockState::ActiveAllocated, sa}});

  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.entries == 9);
  CHECK(h.first_time_us == 10);
  CHECK(h.last_time_us == 40);
  CHECK(h.reserved_now == 250);
  CHECK(h.allocated_now == 250);
  CHECK(h.requested_now == 250);
  CHECK(h.live_count == 2);
  CHECK(h.peak_allocated == 300);
  CHECK(h.peak_index == 3);  // the second alloc
  CHECK(h.peak_time_us == 20);
  CHECK(h.peak_reserved == 300);
  CHECK(h.frees_without_alloc == 0);
  CHECK(h.untraced_blocks == 0);
  CHECK(addrs(h.live_at_peak) == std::vector<uint64_t>{0x1000, 0x2000});
  CHECK(addrs(h.live_at_end) == std::vector<uint64_t>{0x2000, 0x3000});
  for (const LiveAlloc& a : h.live_at_end)
    CHECK(m.s.str(a.category) == (a.addr == 0x2000 ? "nccl" : "app"));
}

TEST_CASE("truncated history: untraced live blocks and frees without alloc count from the start") {
  SnapshotMaker m;
  auto sz = m.stack({"z@y.c:3"});
  auto sy = m.stack({"y@y.c:4"});
  m.entry(0, Action::Alloc, 0x5000, 300, 100, sz, "app");          // 0: 1500 -> 1800 (peak)
  m.entry(0, Action::FreeRequested, 0x9000, 500, 110, sy, "app");  // 1
  m.entry(0, Action::FreeCompleted, 0x9000, 500, 110, sy, "app");  // 2: -> 1300
  m.entry(0, Action::FreeRequested, 0x5000, 300, 120, sz, "app");  // 3
  m.entry(0, Action::FreeCompleted, 0x5000, 300, 120, sz, "app");  // 4: -> 1000
  m.segment(0, 0x100000, {{1024, 1000, BlockState::ActiveAllocated, sy}, {3072, 0, BlockState::Inactive}});
  m.segment(0, 0x200000, {{4096, 0, BlockState::Inactive}});

  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.frees_without_alloc == 1);
  CHECK(h.untraced_blocks == 1);
  CHECK(h.peak_allocated == 1800);
  CHECK(h.peak_index == 0);
  CHECK(addrs(h.live_at_peak) == std::vector<uint64_t>{0x5000, 0x9000, 0x100000});
  CHECK(addrs(h.live_at_end) == std::vector<uint64_t>{0x100000});
  CHECK(h.live_at_end[0].category == 0);  // no alloc names its owner
  CHECK(h.free_in_segments == 3072 + 4096);
  CHECK(h.largest_free_block == 4096);
  CHECK(h.allocated_now == 1024);
  CHECK(h.requested_now == 1000);
  CHECK(h.segment_count == 2);
}

TEST_CASE("the peak can lie before the first kept entry") {
  SnapshotMaker m;
  m.entry(0, Action::FreeCompleted, 0x9000, 500, 5);
  m.segment(0, 0x100000, {{1000, 1000, BlockState::ActiveAllocated}});
  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.peak_allocated == 1500);
  CHECK(h.peak_index == -1);
  CHECK(h.peak_time_us == 0);
  CHECK(addrs(h.live_at_peak) == std::vector<uint64_t>{0x9000, 0x100000});
}

TEST_CASE("PyTorch shape: blocks inside a cached segment, requested vs rounded sizes") {
  SnapshotMaker m;
  auto st = m.stack({"forward@train.py:42", "<module>@train.py:7"});
  const uint64_t base = 0x7f3a00000000;
  m.entry(0, Action::SegmentAlloc, base, 2097152, 1, st);
  m.entry(0, Action::Alloc, base, 400, 2, st);
  m.entry(0, Action::Alloc, base + 512, 1000, 3, st);
  m.entry(0, Action::FreeRequested, base + 512, 1000, 4, st);
  m.entry(0, Action::FreeCompleted, base + 512, 1000, 5, st);
  m.segment(0, base, {{512, 400, BlockState::ActiveAllocated, st}, {2097152 - 512, 0, BlockState::Inactive}});
  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.peak_allocated == 1400);
  CHECK(h.peak_index == 2);
  CHECK(h.requested_now == 400);
  CHECK(h.allocated_now == 512);
  CHECK(h.peak_reserved == 2097152);
  CHECK(h.reserved_now == 2097152);
  CHECK(h.free_in_segments == 2097152 - 512);
  CHECK(h.live_at_end.size() == 1);
  CHECK(h.live_at_end[0].bytes == 400);
}

TEST_CASE("reserved peak follows partial maps and unmaps backwards from the final segments") {
  SnapshotMaker m;
  m.entry(0, Action::SegmentMap, 0x100000, 2 << 20, 1);
  m.entry(0, Action::SegmentMap, 0x300000, 2 << 20, 2);
  m.entry(0, Action::SegmentUnmap, 0x300000, 1 << 20, 3);
  m.segment(0, 0x100000, {{3 << 20, 0, BlockState::Inactive}});
  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.reserved_now == 3u << 20);
  CHECK(h.peak_reserved == 4u << 20);
}

TEST_CASE("a file without free_completed is closed by free_requested; a reused address closes the old one") {
  SnapshotMaker m;
  m.entry(0, Action::Alloc, 0x1000, 100, 1);
  m.entry(0, Action::FreeRequested, 0x1000, 100, 2);
  m.entry(0, Action::Alloc, 0x2000, 50, 3);
  m.entry(0, Action::Alloc, 0x2000, 70, 4);  // its earlier free was not recorded
  m.segment(0, 0x2000, {{70, 70, BlockState::ActiveAllocated}});
  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.peak_allocated == 100);
  CHECK(h.peak_index == 0);
  CHECK(addrs(h.live_at_end) == std::vector<uint64_t>{0x2000});
  CHECK(h.live_at_end[0].bytes == 70);
}

TEST_CASE("devices: counted from traces and segments; an absent device is all zeros") {
  SnapshotMaker m;
  m.segment(2, 0x1000, {{64, 64, BlockState::ActiveAllocated}});
  CHECK(device_count(m.s) == 3);
  DeviceHistory h = analyze_device(m.s, 1);
  CHECK(h.entries == 0);
  CHECK(h.peak_allocated == 0);
  CHECK(h.peak_index == -1);
  DeviceHistory h2 = analyze_device(m.s, 2);
  CHECK(h2.peak_allocated == 64);
  CHECK(h2.untraced_blocks == 1);
  DeviceHistory h3 = analyze_device(m.s, 2, /*with_sets=*/false);
  CHECK(h3.live_at_end.empty());
  CHECK(h3.peak_allocated == 64);
}

TEST_CASE("hostile sizes saturate instead of overflowing") {
  SnapshotMaker m;
  for (int i = 0; i < 4; ++i) m.entry(0, Action::Alloc, 0x1000 + i, UINT64_MAX - 1, i);
  // Reserved runs backwards from the final segments: before these frees it was beyond 2^64.
  for (int i = 0; i < 4; ++i) m.entry(0, Action::SegmentFree, 0x1000 + i, UINT64_MAX - 1, 10 + i);
  m.segment(0, 0x10000, {{1ull << 62, 0, BlockState::Inactive}});
  DeviceHistory h = analyze_device(m.s, 0);
  CHECK(h.peak_allocated == UINT64_MAX);
  CHECK(h.peak_index == 3);
  CHECK(h.peak_reserved == UINT64_MAX);
}
