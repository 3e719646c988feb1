// Out of memory: release cached memory and retry once, then report the backend's error unchanged.
#include <catch2/catch.hpp>

#include "core/caching/tests/fake_backend.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

TEST_CASE("OOM: cached segments are released and the allocation retried", "[oom]") {
  FakeBackend be(60 * MiB);
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  uintptr_t p = a.malloc(40 * MiB).ptr;
  a.free(p);  // pending, then cached
  MallocResult r = a.malloc(50 * MiB);
  REQUIRE(r.error == 0);
  Stats s = a.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.reserved == 50 * MiB);
  // segment_free of the cached one comes before the new segment_alloc.
  std::vector<Action> seq;
  for (auto& e : rec.events)
    if (e.action == Action::SegmentAlloc || e.action == Action::SegmentFree) seq.push_back(e.action);
  CHECK(seq == std::vector<Action>{Action::SegmentAlloc, Action::SegmentFree, Action::SegmentAlloc});
  CHECK(rec.count(Action::Oom) == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("OOM: still failing, the backend's code comes back unchanged with an oom event", "[oom]") {
  FakeBackend be(30 * MiB);
  be.oom_code = 719;  // whatever this backend calls out-of-memory
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  uintptr_t keep = a.malloc(3 * MiB).ptr;  // a 20 MiB segment, in use: cannot be released
  MallocResult r = a.malloc(50 * MiB - 100);
  CHECK(r.ptr == 0);
  CHECK(r.error == 719);
  auto oom = rec.of(Action::Oom);
  REQUIRE(oom.size() == 1);
  CHECK(oom[0].size == 50 * MiB);         // the rounded request
  CHECK(oom[0].device_free == 10 * MiB);  // what the backend reported
  CHECK(oom[0].error == 719);
  Stats s = a.stats();
  CHECK(s.num_ooms == 1);
  CHECK(s.num_alloc_retries == 1);
  CHECK(a.block_of(keep));
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a non-OOM error is returned at once: no release, no retry, no oom event", "[oom]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  uintptr_t p = a.malloc(30 * MiB).ptr;
  a.free(p);
  a.flush_pending_frees();
  be.fail_next_allocate = 999;
  MallocResult r = a.malloc(40 * MiB);
  CHECK(r.error == 999);
  CHECK(r.ptr == 0);
  CHECK(rec.count(Action::Oom) == 0);
  CHECK(rec.count(Action::SegmentFree) == 0);
  CHECK(a.stats().num_alloc_retries == 0);
  CHECK(a.malloc(40 * MiB).error == 0);
}

TEST_CASE("OOM with max_split_size: oversize cached blocks go first, largest first", "[oom][max_split]") {
  FakeBackend be(150 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("max_split_size_mb:40,memtrace_deferred_free:False"), &rec);
  uintptr_t x = a.malloc(60 * MiB).ptr;
  uintptr_t y = a.malloc(62 * MiB).ptr;
  uintptr_t small = a.malloc(3 * MiB).ptr;  // a 20 MiB segment, split, stays cached after free
  a.free(x);
  a.free(y);
  a.free(small);
  // 82 MiB needs both oversize blocks back (142 + 82 > 150); the 20 MiB segment is not oversize.
  MallocResult r = a.malloc(82 * MiB);
  REQUIRE(r.error == 0);
  auto frees = rec.of(Action::SegmentFree);
  REQUIRE(frees.size() == 2);
  CHECK(frees[0].addr == y);  // the largest first
  CHECK(frees[1].addr == x);
  CHECK(a.stats().num_alloc_retries == 0);  // settled before the synchronize-everything path
  CHECK(be.syncs == 0);
  CHECK(a.stats().reserved == 102 * MiB);
}

TEST_CASE("per_process_memory_fraction: refused without asking the backend", "[oom]") {
  FakeBackend be(100 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("per_process_memory_fraction:0.5"), &rec);
  MallocResult r = a.malloc(60 * MiB);
  CHECK(r.error == kErrorOutOfMemory);
  CHECK(be.allocs == 0);
  CHECK(rec.count(Action::Oom) == 1);
  CHECK(a.malloc(40 * MiB).error == 0);
}

TEST_CASE("OOM with expandable segments: free pages are unmapped and the map retried", "[oom][expandable]") {
  FakeBackend be(100 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("expandable_segments:True"), &rec);
  uintptr_t s = a.malloc(1000).ptr;                // small range: one 2 MiB page
  uintptr_t p = a.malloc(60 * MiB).ptr;            // large range: three 20 MiB pages
  a.free(p);
  MallocResult r = a.malloc(60 * MiB, /*stream=*/3);  // another stream's range: 60 + 60 + 2 > 100
  REQUIRE(r.error == 0);
  CHECK(rec.count(Action::SegmentUnmap) == 1);
  CHECK(a.stats().num_alloc_retries == 1);
  CHECK(a.block_of(s));
  CHECK(be.bad_calls == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("an impossible size is out of memory without a backend call", "[oom]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  MallocResult r = a.malloc(SIZE_MAX - 10);
  CHECK(r.ptr == 0);
  CHECK(r.error == kErrorOutOfMemory);
  CHECK(be.allocs == 0);
  CHECK(rec.count(Action::Oom) == 1);
  CHECK(a.check_invariants() == "");
}
