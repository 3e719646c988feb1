// Expandable segments and memtrace's remap policy (docs/caching-allocator.md, "Expandable segments"
// and "The remap policy").
#include <catch2/catch.hpp>

#include "core/caching/tests/fake_backend.hpp"
#include "core/caching/tests/must.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {
const char* kExp = "expandable_segments:True,memtrace_deferred_free:False";
}  // namespace

TEST_CASE("expandable: pages are mapped on demand, no segment_alloc", "[expandable]") {
  FakeBackend be(1024 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of(kExp), &rec);
  REQUIRE(a.expandable_active());
  uintptr_t p = must(a.malloc(5 * MiB));
  CHECK(be.reserves == 1);
  auto maps = rec.of(Action::SegmentMap);
  REQUIRE(maps.size() == 1);
  CHECK(maps[0].addr == p);
  CHECK(maps[0].size == 20 * MiB);  // one large page
  CHECK(rec.count(Action::SegmentAlloc) == 0);
  CHECK(a.stats().reserved == 20 * MiB);

  // Growth: the 15 MiB free tail plus one more page, contiguous with the first.
  uintptr_t q = must(a.malloc(30 * MiB));
  CHECK(q == p + 5 * MiB);
  maps = rec.of(Action::SegmentMap);
  REQUIRE(maps.size() == 2);
  CHECK(maps[1].addr == p + 20 * MiB);
  CHECK(maps[1].size == 20 * MiB);
  auto segs = a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].is_expandable);
  CHECK(segs[0].total_size == 40 * MiB);
  REQUIRE(segs[0].blocks.size() == 3);
  CHECK(segs[0].blocks[1].size == 30 * MiB);  // split at 512 bytes when expandable
  CHECK(a.block_of(q + 7)->segment_size == 40 * MiB);
  CHECK(be.reserves == 1);
  CHECK(a.check_invariants() == "");

  // Shrink: everything free, empty_cache unmaps whole pages and drops the reservation.
  a.free(p);
  a.free(q);
  a.empty_cache();
  CHECK(rec.count(Action::SegmentUnmap) >= 1);
  size_t unmapped = 0;
  for (auto& e : rec.of(Action::SegmentUnmap)) unmapped += e.size;
  CHECK(unmapped == 40 * MiB);
  CHECK(rec.count(Action::SegmentFree) == 0);
  CHECK(be.releases == 1);
  CHECK(a.segments().empty());
  CHECK(a.stats().reserved == 0);
  CHECK(be.used() == 0);
  CHECK(be.bad_calls == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("expandable: only whole free pages are unmapped; holes are mapped again", "[expandable]") {
  FakeBackend be(1024 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of(kExp), &rec);
  uintptr_t p = must(a.malloc(5 * MiB));    // [0, 5)
  uintptr_t b = must(a.malloc(50 * MiB));   // [5, 55): maps [20, 60)
  uintptr_t c = must(a.malloc(5 * MiB));    // [55, 60)
  CHECK(b == p + 5 * MiB);
  CHECK(c == p + 55 * MiB);
  CHECK(a.stats().reserved == 60 * MiB);
  a.free(b);
  a.empty_cache();
  auto un = rec.of(Action::SegmentUnmap);
  REQUIRE(un.size() == 1);
  CHECK(un[0].addr == p + 20 * MiB);  // the one whole page inside [5, 55)
  CHECK(un[0].size == 20 * MiB);
  CHECK(a.stats().reserved == 40 * MiB);
  // Two mapped ranges, each its own segment.
  auto segs = a.segments();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].address == p);
  CHECK(segs[0].total_size == 20 * MiB);
  CHECK(segs[1].address == p + 40 * MiB);
  CHECK(segs[1].total_size == 20 * MiB);
  CHECK(a.check_invariants() == "");
  // A request that fits free + unmapped + free maps the hole again.
  uintptr_t d = must(a.malloc(30 * MiB));
  CHECK(d == p + 5 * MiB);
  auto maps = rec.of(Action::SegmentMap);
  CHECK(maps.back().addr == p + 20 * MiB);
  CHECK(maps.back().size == 20 * MiB);
  CHECK(a.segments().size() == 1);
  CHECK(be.bad_calls == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("expandable: small pool uses 2 MiB pages; each stream has its own range", "[expandable]") {
  FakeBackend be(1024 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of(kExp), &rec);
  must(a.malloc(1000));
  CHECK(rec.of(Action::SegmentMap).back().size == 2 * MiB);
  must(a.malloc(3 * MiB));
  CHECK(rec.of(Action::SegmentMap).back().size == 20 * MiB);
  must(a.malloc(1000, 5));
  CHECK(be.reserves == 3);  // (stream 0, small), (stream 0, large), (stream 5, small)
  auto segs = a.segments();
  CHECK(segs.size() == 3);
  for (auto& s : segs) CHECK(s.is_expandable);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("expandable segments fall back to plain ones without virtual-memory support", "[expandable]") {
  FakeBackend be(1024 * MiB, /*vmm=*/false);
  Recorder rec;
  CachingAllocator a(be, conf_of(kExp), &rec);
  CHECK_FALSE(a.expandable_active());
  must(a.malloc(5 * MiB));
  CHECK(rec.count(Action::SegmentAlloc) == 1);
  CHECK(be.reserves == 0);
}

TEST_CASE("remap policy: free pages of holes are unmapped before new ones are mapped", "[expandable][remap]") {
  FakeBackend be(1024 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("memtrace_policy:remap,memtrace_deferred_free:False"), &rec);
  REQUIRE(a.expandable_active());
  // Ten 10 MiB blocks, then every other one freed: five 10 MiB holes (20 MiB pages would not
  // fit whole in them; 2 MiB pages do).
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 10; ++i) ps.push_back(must(a.malloc(10 * MiB)));
  CHECK(rec.of(Action::SegmentMap)[0].size == 10 * MiB);  // 2 MiB pages, only what is needed
  CHECK(a.stats().reserved == 100 * MiB);
  for (int i = 0; i < 10; i += 2) a.free(ps[i]);
  // A 30 MiB request fits no hole: the holes' pages go back first.
  must(a.malloc(30 * MiB));
  Stats s = a.stats();
  CHECK(rec.count(Action::SegmentUnmap) >= 3);
  CHECK(s.reserved <= 100 * MiB);  // grew by nothing: 80 MiB held, 30 more asked, 50 idle given back
  CHECK(s.peak_reserved == 100 * MiB);
  CHECK(be.bad_calls == 0);
  CHECK(a.check_invariants() == "");

  // The same sequence with expandable segments: reserved grows.
  FakeBackend be2(1024 * MiB);
  CachingAllocator b(be2, conf_of(kExp));
  std::vector<uintptr_t> qs;
  for (int i = 0; i < 10; ++i) qs.push_back(must(b.malloc(10 * MiB)));
  for (int i = 0; i < 10; i += 2) b.free(qs[i]);
  must(b.malloc(30 * MiB));
  CHECK(b.stats().peak_reserved > s.peak_reserved);
}

TEST_CASE("destruction gives everything back, whatever its state", "[expandable][lifetime]") {
  for (const char* c : {"", "expandable_segments:True", "memtrace_policy:remap"}) {
    INFO(c);
    FakeBackend be(1024 * MiB);
    {
      CachingAllocator a(be, conf_of(c));
      uintptr_t p = must(a.malloc(5 * MiB));
      must(a.malloc(1000));
      must(a.malloc(50 * MiB, 3));
      a.free(p);  // pending
      CHECK(be.used() > 0);
    }
    CHECK(be.used() == 0);
    CHECK(be.live_allocations() == 0);
    CHECK(be.bad_calls == 0);
  }
}
