#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/recorder.hpp"

using namespace memtrace;

namespace {
AllocRecord rec(uint64_t addr, uint64_t size, int dev = 0, MemKind k = MemKind::Device, uint64_t ctx = 1) {
  AllocRecord r;
  r.addr = addr;
  r.size = size;
  r.requested = size - 1;
  r.device = static_cast<int16_t>(dev);
  r.kind = k;
  r.ctx = ctx;
  return r;
}
std::vector<Action> actions(const StateCopy& c) {
  std::vector<Action> a;
  for (auto& e : c.trace) a.push_back(e.action);
  return a;
}
}  // namespace

TEST_CASE("alloc and free produce PyTorch's entry sequence and stats") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512));
  r.record_alloc(rec(0x2000, 1024, 1));
  AllocRecord taken;
  REQUIRE(r.release(0x1000, 0, 0, &taken));
  StateCopy c = r.copy_state();
  CHECK(actions(c) == std::vector<Action>{Action::SegmentAlloc, Action::Alloc, Action::SegmentAlloc, Action::Alloc,
                                          Action::FreeRequested, Action::FreeCompleted, Action::SegmentFree});
  CHECK(c.trace[1].size == 511);  // alloc carries the requested size
  CHECK(c.trace[0].size == 512);  // segment_alloc the segment size
  REQUIRE(c.live.size() == 1);
  CHECK(c.live[0].addr == 0x2000);
  CHECK(c.device_count == 2);
  CHECK(c.device[0].current == 0);
  CHECK(c.device[0].peak == 512);
  CHECK(c.device[1].current == 1024);
}

TEST_CASE("a failed free records the allocation again") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512));
  AllocRecord taken;
  REQUIRE(r.release(0x1000, 0, 0, &taken));
  CHECK_FALSE(r.is_live(0x1000));
  CHECK_FALSE(r.release(0x1000, 0, 0, &taken));  // unknown now
  r.restore(taken);
  StateCopy c = r.copy_state();
  CHECK(c.live.size() == 1);
  CHECK(actions(c) == std::vector<Action>{Action::SegmentAlloc, Action::Alloc, Action::FreeRequested,
                                          Action::FreeCompleted, Action::SegmentFree, Action::SegmentAlloc,
                                          Action::Alloc});
  CHECK(std::string(c.trace.back().note) == Recorder::kFreeFailedNote);
  CHECK(c.device[0].current == 512);
}

TEST_CASE("release can be limited to one kind") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512));
  AllocRecord taken;
  const MemKind vmm = MemKind::VmmMapping;
  CHECK_FALSE(r.release(0x1000, 0, 0, &taken, &vmm));
  CHECK(r.is_live(0x1000));
}

TEST_CASE("skip mask drops those actions only") {
  Recorder r;
  r.configure(100, 1u << int(Action::FreeRequested));
  r.record_alloc(rec(0x1000, 512));
  AllocRecord t;
  r.release(0x1000, 0, 0, &t);
  StateCopy c = r.copy_state();
  for (auto& e : c.trace) CHECK(e.action != Action::FreeRequested);
  CHECK(c.trace.size() == 4);
}

TEST_CASE("reallocation at a live address closes the stale record first") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512));
  r.record_alloc(rec(0x1000, 256));
  StateCopy c = r.copy_state();
  CHECK(c.live.size() == 1);
  CHECK(c.live[0].size == 256);
  CHECK(c.stale_replaced == 1);
  CHECK(c.device[0].current == 256);
  CHECK(actions(c)[2] == Action::FreeRequested);
}

TEST_CASE("VMM physical memory lives until the last reference") {
  Recorder r;
  r.configure(100, 0);
  HandleRecord h;
  h.handle = 77;
  h.size = 2 << 20;
  h.refs = 1;
  h.device = 0;
  r.handle_created(h);
  r.handle_ref(77, +1);  // map
  r.handle_ref(77, +1);  // retain
  r.handle_ref(77, -1);  // release of the retain
  r.handle_ref(77, -1);  // release of the creation reference: still mapped
  CHECK(r.copy_state().device[0].current == (2u << 20));
  r.handle_ref(77, -1);  // unmap
  StateCopy c = r.copy_state();
  CHECK(c.device[0].current == 0);
  CHECK(c.device[0].peak == (2u << 20));
  CHECK(c.handles.empty());
}

TEST_CASE("context purge frees that context's records of the chosen kinds only") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512, 0, MemKind::Device, 1));
  r.record_alloc(rec(0x2000, 512, 0, MemKind::Device, 2));
  r.record_alloc(rec(0x3000, 1024, 0, MemKind::Async, 1));
  for (int i = 0; i < 200; ++i) r.record_alloc(rec(0x100000 + i * 4096, 64, 0, MemKind::Device, 1));
  HandleRecord h;
  h.handle = 5;
  h.size = 100;
  h.refs = 1;
  h.ctx = 1;
  r.handle_created(h);
  r.purge_context(1, Recorder::kind_bit(MemKind::Device));
  StateCopy c = r.copy_state();
  REQUIRE(c.live.size() == 2);
  CHECK(c.live[0].ctx == 2);
  CHECK(c.live[1].kind == MemKind::Async);
  CHECK(c.handles.size() == 1);  // VMM physical memory outlives the context
  CHECK(c.device[0].current == 512 + 1024 + 100);
}

TEST_CASE("host memory is kept apart from device memory") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x9000, 4096, -1, MemKind::HostPinned));
  r.record_alloc(rec(0x1000, 512, 0));
  StateCopy c = r.copy_state();
  CHECK(c.host.current == 4096);
  CHECK(c.device[0].current == 512);
  REQUIRE(c.live.size() == 2);
  CHECK(c.live[0].kind == MemKind::Device);  // device records sort first
}

TEST_CASE("ten threads lose no event and the cut matches the registry") {
  Recorder r;
  r.configure(1 << 20, 0);
  constexpr int kThreads = 10, kIters = 5000;
  std::vector<std::thread> ts;
  std::atomic<bool> stop{false};
  // Catch2's assertions are not thread-safe: the threads note what they saw, the test asserts
  // it after joining them.
  std::atomic<int> failed_releases{0};
  size_t inconsistent_cuts = 0, first_open = 0, first_live = 0;
  std::thread dumper([&] {
    // Dumps while threads run: each cut must be self-consistent.
    while (!stop.load()) {
      StateCopy c = r.copy_state();
      std::set<uint64_t> live;
      for (auto& e : c.trace) {
        if (e.action == Action::Alloc) live.insert(e.addr);
        if (e.action == Action::FreeCompleted) live.erase(e.addr);
      }
      if (live.size() != c.live.size() && inconsistent_cuts++ == 0) {
        first_open = live.size();
        first_live = c.live.size();
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        uint64_t a = (uint64_t(t + 1) << 32) + uint64_t(i) * 512;
        r.record_alloc(rec(a, 512));
        if (i % 2 == 0) {
          AllocRecord x;
          if (!r.release(a, 0, 0, &x)) failed_releases.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  stop = true;
  dumper.join();
  REQUIRE(failed_releases.load() == 0);
  INFO("first inconsistent cut: " << first_open << " open in the history, " << first_live << " live");
  REQUIRE(inconsistent_cuts == 0);
  StateCopy c = r.copy_state();
  size_t allocs = 0, frees = 0;
  for (auto& e : c.trace) {
    allocs += e.action == Action::Alloc;
    frees += e.action == Action::FreeCompleted;
  }
  CHECK(allocs == size_t(kThreads) * kIters);
  CHECK(frees == size_t(kThreads) * kIters / 2);
  CHECK(c.live.size() == size_t(kThreads) * kIters / 2);
  CHECK(c.device[0].current == c.live.size() * 512);
}

TEST_CASE("fork reset empties everything") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x1000, 512));
  r.reset_after_fork();
  StateCopy c = r.copy_state();
  CHECK(c.live.empty());
  CHECK(c.trace.empty());
  CHECK(c.device[0].current == 0);
}


TEST_CASE("a dump while a small ring wraps keeps an untorn suffix consistent with the registry") {
  Recorder r;
  r.configure(1000, 0);
  constexpr int kThreads = 4, kIters = 20000;
  std::atomic<bool> stop{false};
  std::atomic<int> failed_releases{0};  // asserted by this thread after the join
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        uint64_t a = (uint64_t(t + 1) << 32) + uint64_t(i % 64) * 4096;
        AllocRecord x = rec(a, (a % 997) + 2);  // size derived from the address: a torn copy shows
        r.record_alloc(x);
        AllocRecord y;
        if (!r.release(a, 0, 0, &y)) failed_releases.fetch_add(1);
      }
    });
  }
  int dumps = 0;
  while (dumps < 200) {
    StateCopy c = r.copy_state();
    ++dumps;
    REQUIRE(c.trace.size() <= 1000);
    REQUIRE(c.dropped_entries + c.trace.size() == c.total_entries);
    for (const TraceEntry& e : c.trace) {
      uint64_t seg = (e.addr % 997) + 2;
      if (e.action == Action::SegmentAlloc || e.action == Action::SegmentFree) REQUIRE(e.size == seg);
      if (e.action == Action::Alloc || e.action == Action::FreeCompleted) REQUIRE(e.size == seg - 1);
    }
    // Allocations the kept history leaves open are live in the registry copy.
    std::set<uint64_t> open;
    for (const TraceEntry& e : c.trace) {
      if (e.action == Action::Alloc) open.insert(e.addr);
      if (e.action == Action::FreeCompleted) open.erase(e.addr);
    }
    std::set<uint64_t> live;
    for (const AllocRecord& a : c.live) live.insert(a.addr);
    for (uint64_t a : open) REQUIRE(live.count(a) == 1);
  }
  for (auto& t : ts) t.join();
  stop = true;
  REQUIRE(failed_releases.load() == 0);
}

TEST_CASE("device bytes are counted by owner, current and peak") {
  Recorder r;
  r.configure(100, 0);
  AllocRecord a = rec(0x1000, 1000);
  a.owner = 3;
  AllocRecord b = rec(0x2000, 500);
  b.owner = 5;
  AllocRecord host = rec(0x9000, 4096, -1, MemKind::HostPinned);
  host.owner = 3;
  r.record_alloc(a);
  r.record_alloc(b);
  r.record_alloc(host);
  AllocRecord out;
  r.release(0x1000, 0, 0, &out);
  HandleRecord h;
  h.handle = 9;
  h.size = 2048;
  h.refs = 1;
  h.owner = 5;
  r.handle_created(h);
  StateCopy c = r.copy_state();
  CHECK(c.owner_device[3].current == 0);
  CHECK(c.owner_device[3].peak == 1000);  // host memory is not device memory
  CHECK(c.owner_device[5].current == 2548);
  CHECK(c.owner_device[5].peak == 2548);
}

TEST_CASE("times are stamped in ticks and handed out as Unix microseconds") {
  Recorder r;
  uint64_t before = now_us();
  r.configure(100, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  AllocRecord a = rec(0x1000, 512);
  a.time_us = now_ticks();
  r.record_alloc(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  AllocRecord out;
  r.release(0x1000, 0, 0, &out);
  uint64_t after = now_us();
  StateCopy c = r.copy_state();
  REQUIRE(c.trace.size() == 5);
  uint64_t alloc_t = c.trace[1].time_us, free_t = c.trace[4].time_us;
  CHECK(alloc_t >= before + 15000);
  CHECK(free_t <= after + 1000);
  CHECK(free_t - alloc_t >= 15000);  // the 20 ms between them, within scheduling slack
  CHECK(free_t - alloc_t <= 200000);
}

TEST_CASE("caching allocator records: segments and blocks apart, one entry per action") {
  Recorder r;
  r.configure(100, 0);
  auto seg = [](uint64_t addr, uint64_t size) {
    AllocRecord s = rec(addr, size, 0, MemKind::Cached, 7);
    s.cache = CacheRole::Segment;
    s.cache_flags = kCacheExpandable;
    return s;
  };
  auto entry = [](Action a, uint64_t addr, uint64_t size) {
    TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.kind = MemKind::Cached;
    return e;
  };
  const uint64_t base = 0x7000000;
  const uint64_t page = 2 << 20;
  AllocRecord s1 = seg(base, page);
  r.cached_segments_change(entry(Action::SegmentMap, base, page), nullptr, 0, &s1, 1);
  AllocRecord block = rec(base, 4096, 0, MemKind::Cached, 7);  // same address as its segment
  block.cache = CacheRole::Block;
  block.requested = 4000;
  block.owner = 3;
  r.cached_block_alloc(block);
  // A second page mapped right after: the range grows (one record replaces the other).
  AllocRecord s2 = seg(base, 2 * page);
  uint64_t gone = base;
  r.cached_segments_change(entry(Action::SegmentMap, base + page, page), &gone, 1, &s2, 1);
  StateCopy c = r.copy_state();
  REQUIRE(c.live.size() == 2);
  CHECK(r.is_live(base));  // the block (its segment is filed apart)
  CHECK(c.device[0].current == 2 * page);  // segments are the device's bytes
  CHECK(c.owner_device[3].current == 4096);  // blocks their owner's
  REQUIRE(r.cached_block_free_requested(base, 0));
  CHECK_FALSE(r.cached_block_free_requested(base, 0));  // already waiting
  c = r.copy_state();
  for (const AllocRecord& x : c.live)
    if (x.cache == CacheRole::Block) CHECK((x.cache_flags & kCachePendingFree) != 0);
  REQUIRE(r.cached_block_free_completed(base));
  // The first page unmapped: the range that is left starts one page up.
  AllocRecord rest = seg(base + page, page);
  r.cached_segments_change(entry(Action::SegmentUnmap, base, page), &gone, 1, &rest, 1);
  c = r.copy_state();
  REQUIRE(c.live.size() == 1);
  CHECK(c.live[0].addr == base + page);
  CHECK(c.device[0].current == page);
  CHECK(c.owner_device[3].current == 0);
  CHECK(actions(c) == std::vector<Action>{Action::SegmentMap, Action::Alloc, Action::SegmentMap, Action::FreeRequested,
                                          Action::FreeCompleted, Action::SegmentUnmap});
  CHECK(c.trace[1].size == 4000);
  // Context teardown takes what is left.
  r.purge_context(7, Recorder::kind_bit(MemKind::Cached));
  c = r.copy_state();
  CHECK(c.live.empty());
  CHECK(c.trace.back().action == Action::SegmentUnmap);
  CHECK(c.device[0].current == 0);
}

TEST_CASE("usage totals: reserved and allocated per device and together, without a cut") {
  Recorder r;
  r.configure(100, 0);
  AllocRecord a = rec(0x1000, 1000, 0);
  a.owner = 2;
  r.record_alloc(a);
  r.record_alloc(rec(0x2000, 3000, 1));
  r.record_alloc(rec(0x9000, 4096, -1, MemKind::HostPinned));
  AllocRecord out;
  REQUIRE(r.release(0x2000, 0, 0, &out));
  r.record_alloc(rec(0x3000, 500, 1));
  // A caching segment is reserved, not allocated; its block is allocated.
  AllocRecord seg = rec(0x7000000, 2 << 20, 0, MemKind::Cached, 7);
  seg.cache = CacheRole::Segment;
  TraceEntry e;
  e.action = Action::SegmentAlloc;
  e.addr = seg.addr;
  e.size = seg.size;
  e.kind = MemKind::Cached;
  r.cached_segments_change(e, nullptr, 0, &seg, 1);
  AllocRecord block = rec(0x7000000, 4096, 0, MemKind::Cached, 7);
  block.cache = CacheRole::Block;
  block.owner = 2;
  r.cached_block_alloc(block);

  UsageTotals u;
  r.usage(&u);
  StateCopy c = r.copy_state();
  CHECK(u.device_count == 2);
  for (int d = 0; d < 2; ++d) {
    CHECK(u.reserved[d].current == c.device[d].current);
    CHECK(u.reserved[d].peak == c.device[d].peak);
  }
  CHECK(u.reserved[0].current == 1000 + (2u << 20));
  CHECK(u.allocated[0].current == 1000 + 4096);
  CHECK(u.allocated[0].allocations == 2);
  CHECK(u.reserved[1].current == 500);
  CHECK(u.reserved[1].peak == 3000);
  CHECK(u.allocated[1].peak == 3000);
  // The peak of both devices together: 1000 + 3000 at once, before the free; then the segment.
  CHECK(u.reserved_all.current == 1000 + 500 + (2u << 20));
  CHECK(u.reserved_all.peak == 1000 + 500 + (2u << 20));
  CHECK(u.allocated_all.current == 1000 + 500 + 4096);
  CHECK(u.allocated_all.peak == 1000 + 500 + 4096);
  CHECK(u.allocated_all.peak < u.allocated[0].peak + u.allocated[1].peak);
  CHECK(u.host.current == 4096);
  CHECK(u.owner_device[2].current == 1000 + 4096);
  REQUIRE(r.cached_block_free_requested(0x7000000, 0));
  REQUIRE(r.cached_block_free_completed(0x7000000));
  r.usage(&u);
  CHECK(u.allocated[0].current == 1000);
  CHECK(u.reserved[0].current == 1000 + (2u << 20));  // the segment stays cached
}

TEST_CASE("a cached block's free_completed carries the instant it is given; other records are left alone") {
  Recorder r;
  r.configure(100, 0);
  r.record_alloc(rec(0x9000, 512));  // the driver's own allocation, not a cached block
  CHECK_FALSE(r.cached_block_free_completed(0x9000));
  CHECK(r.is_live(0x9000));
  AllocRecord b = rec(0xa000, 4096, 0, MemKind::Cached);
  b.cache = CacheRole::Block;
  b.time_us = now_ticks();
  r.cached_block_alloc(b);
  b.addr = 0xb000;
  r.cached_block_alloc(b);
  const uint64_t settled = now_ticks();
  REQUIRE(r.cached_block_free_completed(0xa000, settled));
  REQUIRE(r.cached_block_free_completed(0xb000, settled));
  CHECK_FALSE(r.cached_block_free_completed(0xb000, settled));  // gone
  StateCopy c = r.copy_state();
  REQUIRE(c.live.size() == 1);
  CHECK(c.live[0].addr == 0x9000);
  std::vector<uint64_t> times;
  for (const TraceEntry& e : c.trace)
    if (e.action == Action::FreeCompleted || e.action == Action::FreeRequested) times.push_back(e.time_us);
  REQUIRE(times.size() == 4);
  for (uint64_t t : times) CHECK(t == times[0]);  // one instant, as given
}
