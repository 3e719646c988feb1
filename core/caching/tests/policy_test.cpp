// PyTorch's policy on plain segments: pools, segment sizes, best fit, splitting, coalescing,
// max_split_size, garbage collection, and range queries.
#include <catch2/catch.hpp>

#include "core/caching/tests/fake_backend.hpp"
#include "core/caching/tests/must.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {
// PyTorch's semantics: frees complete at once (deferred frees have their own tests).
const char* kImmediate = "memtrace_deferred_free:False";

size_t last_segment_alloc(const Recorder& rec) {
  auto v = rec.of(Action::SegmentAlloc);
  REQUIRE(!v.empty());
  return v.back().size;
}
}  // namespace

// docs/caching-allocator.md, "Pools and segment sizes".
TEST_CASE("pool choice and segment sizes", "[policy]") {
  struct Case {
    size_t request, segment;
    PoolKind pool;
  };
  const Case cases[] = {
      {1, 2 * MiB, PoolKind::Small},
      {1 * MiB, 2 * MiB, PoolKind::Small},
      {1 * MiB + 1, 20 * MiB, PoolKind::Large},
      {10 * MiB - 512, 20 * MiB, PoolKind::Large},
      {10 * MiB, 10 * MiB, PoolKind::Large},
      {11 * MiB + 1, 12 * MiB, PoolKind::Large},
      {100 * MiB + 3, 102 * MiB, PoolKind::Large},
  };
  for (const Case& k : cases) {
    INFO(k.request);
    FakeBackend be;
    Recorder rec;
    CachingAllocator a(be, conf_of(kImmediate), &rec);
    uintptr_t p = must(a.malloc(k.request));
    CHECK(last_segment_alloc(rec) == k.segment);
    auto segs = a.segments();
    REQUIRE(segs.size() == 1);
    CHECK(segs[0].pool == k.pool);
    CHECK(segs[0].total_size == k.segment);
    CHECK(segs[0].address == p);
    CHECK(a.check_invariants() == "");
  }
}

TEST_CASE("large_segment_size_mb changes the segment of mid-sized requests", "[policy]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, conf_of("large_segment_size_mb:32,memtrace_deferred_free:False"), &rec);
  must(a.malloc(3 * MiB));
  CHECK(last_segment_alloc(rec) == 32 * MiB);
}

TEST_CASE("small requests share a 2 MiB segment, packed from its start", "[policy]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, conf_of(kImmediate), &rec);
  uintptr_t p = must(a.malloc(1000));
  uintptr_t q = must(a.malloc(1000));
  CHECK(q == p + 1024);
  CHECK(rec.count(Action::SegmentAlloc) == 1);
  auto alloc = rec.of(Action::Alloc);
  REQUIRE(alloc.size() == 2);
  CHECK(alloc[0].size == 1000);  // requested bytes, as PyTorch's trace entries
  CHECK(alloc[0].block_size == 1024);
}

// docs/caching-allocator.md, "Splitting".
TEST_CASE("split rules", "[policy][split]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of(kImmediate));
  SECTION("large pool splits when more than 1 MiB remains") {
    uintptr_t p = must(a.malloc(5 * MiB));
    auto b = a.block_of(p);
    REQUIRE(b);
    CHECK(b->size == 5 * MiB);
    CHECK(a.segments()[0].blocks.size() == 2);
  }
  SECTION("large pool keeps the block whole when 1 MiB or less remains") {
    uintptr_t p = must(a.malloc(19 * MiB));
    auto b = a.block_of(p);
    REQUIRE(b);
    CHECK(b->size == 20 * MiB);
    CHECK(b->requested_size == 19 * MiB);
    CHECK(a.segments()[0].blocks.size() == 1);
  }
  SECTION("small pool splits whenever 512 bytes remain") {
    uintptr_t p = must(a.malloc(2 * MiB - 1024));
    CHECK(a.block_of(p)->size == 2 * MiB - 1024);
    CHECK(a.segments()[0].blocks.size() == 2);
  }
  CHECK(a.check_invariants() == "");
}

// docs/caching-allocator.md, "Best-fit search".
TEST_CASE("best fit by (stream, size, address)", "[policy][fit]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, conf_of(kImmediate), &rec);
  // One 20 MiB segment: free holes of 3, 4.5 and 4 MiB between 1 MiB+ separators, and a
  // 5.5 MiB tail.
  uintptr_t h3 = must(a.malloc(3 * MiB));
  must(a.malloc(1 * MiB + 512));
  uintptr_t h5 = must(a.malloc(4 * MiB + 512 * 1024));
  must(a.malloc(1 * MiB + 512));
  uintptr_t h4 = must(a.malloc(4 * MiB));
  must(a.malloc(1 * MiB + 512));
  REQUIRE(rec.count(Action::SegmentAlloc) == 1);
  a.free(h3);
  a.free(h5);
  a.free(h4);
  CHECK(must(a.malloc(4 * MiB)) == h4);            // exact fit, not the first or the tail
  CHECK(must(a.malloc(3 * MiB + 1)) == h5);        // smallest that fits: 4.5 MiB, not 3 or the tail
  CHECK(rec.count(Action::SegmentAlloc) == 1);
  // Blocks never cross streams.
  uintptr_t other = must(a.malloc(2 * MiB, /*stream=*/7));
  CHECK(rec.count(Action::SegmentAlloc) == 2);
  CHECK(a.block_of(other)->stream == 7);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("coalescing on free and the whole segment back in empty_cache", "[policy][coalesce]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, conf_of(kImmediate), &rec);
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 6; ++i) ps.push_back(must(a.malloc(2 * MiB)));
  // Free in an order that needs merges on both sides.
  for (int i : {1, 3, 2, 0, 5, 4}) {
    CHECK(a.free(ps[i]));
    CHECK(a.check_invariants() == "");
  }
  auto segs = a.segments();
  REQUIRE(segs.size() == 1);
  REQUIRE(segs[0].blocks.size() == 1);
  CHECK_FALSE(segs[0].blocks[0].allocated);
  CHECK(segs[0].blocks[0].size == 20 * MiB);
  CHECK(rec.count(Action::SegmentFree) == 0);  // a free does not give memory back
  CHECK(a.stats().reserved == 20 * MiB);
  a.empty_cache();
  CHECK(rec.count(Action::SegmentFree) == 1);
  CHECK(a.stats().reserved == 0);
  CHECK(be.used() == 0);
  CHECK(a.segments().empty());
  CHECK(a.check_invariants() == "");
}

TEST_CASE("empty_cache keeps segments that still hold a block", "[policy][coalesce]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of(kImmediate));
  uintptr_t p = must(a.malloc(3 * MiB));
  uintptr_t q = must(a.malloc(30 * MiB));
  a.free(q);
  a.empty_cache();
  CHECK(a.stats().reserved == 20 * MiB);
  CHECK(a.block_of(p));
}

// docs/caching-allocator.md, "Oversize blocks: max_split_size and max_non_split_rounding".
TEST_CASE("max_split_size and max_non_split_rounding", "[policy][max_split]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, conf_of("max_split_size_mb:40,memtrace_deferred_free:False"), &rec);
  uintptr_t big = must(a.malloc(50 * MiB));
  a.free(big);
  SECTION("an oversize block does not serve a request below max_split_size") {
    uintptr_t p = must(a.malloc(30 * MiB));
    CHECK(p != big);
    CHECK(rec.count(Action::SegmentAlloc) == 2);
  }
  SECTION("it serves a large request whole, without splitting") {
    uintptr_t p = must(a.malloc(45 * MiB));
    CHECK(p == big);
    CHECK(a.block_of(p)->size == 50 * MiB);
    CHECK(rec.count(Action::SegmentAlloc) == 1);
  }
  SECTION("but not when it is max_non_split_rounding or more too big") {
    uintptr_t p = must(a.malloc(41 * MiB - 512));  // 50 >= 40.99 + 20? no: 50 < 61 -> used
    CHECK(p == big);
    a.free(p);
    uintptr_t q = must(a.malloc(62 * MiB));
    a.free(q);
    uintptr_t r = must(a.malloc(42 * MiB));  // 62 >= 42 + 20: the 62 MiB block is refused
    CHECK(r == big);                          // the 50 MiB one is fine
    uintptr_t s = must(a.malloc(41 * MiB));  // only the 62 MiB block is free: 62 >= 61, refused
    CHECK(s != q);
    CHECK(rec.count(Action::SegmentAlloc) == 3);
  }
  CHECK(a.check_invariants() == "");
}

// docs/caching-allocator.md, "Garbage collection".
TEST_CASE("garbage collection frees old whole segments first", "[policy][gc]") {
  FakeBackend be(300 * MiB);
  Recorder rec;
  // Allowed 300 MiB, threshold 150 MiB.
  CachingAllocator a(be, conf_of("per_process_memory_fraction:1.0,garbage_collection_threshold:0.5,"
                                 "memtrace_deferred_free:False"),
                     &rec);
  uintptr_t A = must(a.malloc(40 * MiB));
  uintptr_t B = must(a.malloc(40 * MiB));
  must(a.malloc(40 * MiB));
  a.free(A);
  // Large-pool searches age A: eight carve a 20 MiB segment on stream 1, one more takes 30 MiB
  // on stream 2 (reserved is still under the threshold at each of these misses).
  for (int i = 0; i < 8; ++i) must(a.malloc(2 * MiB, 1));
  must(a.malloc(30 * MiB, 2));
  a.free(B);  // young
  REQUIRE(a.stats().reserved == 170 * MiB);
  REQUIRE(rec.count(Action::SegmentFree) == 0);
  uintptr_t n = must(a.malloc(60 * MiB));  // a miss above the threshold: collect 20 MiB
  auto frees = rec.of(Action::SegmentFree);
  REQUIRE(frees.size() == 1);
  CHECK(frees[0].addr == A);  // age 10 against B's 1: only the old one goes
  CHECK(a.stats().num_gc_frees == 1);
  CHECK(a.stats().reserved == 190 * MiB);
  CHECK(n != B);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("garbage collection keeps going until the target is met", "[policy][gc]") {
  FakeBackend be(300 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("per_process_memory_fraction:1.0,garbage_collection_threshold:0.5,"
                                 "memtrace_deferred_free:False"),
                     &rec);
  uintptr_t A = must(a.malloc(40 * MiB));
  uintptr_t B = must(a.malloc(40 * MiB));
  must(a.malloc(40 * MiB));
  must(a.malloc(40 * MiB, 2));
  a.free(A);
  a.free(B);
  // Reserved 160 > 150; a 100 MiB miss needs 10 MiB back: one pass frees both (equal ages).
  must(a.malloc(100 * MiB));
  CHECK(rec.count(Action::SegmentFree) == 2);
  CHECK(a.stats().num_gc_frees == 2);
}

TEST_CASE("no garbage collection without a memory fraction", "[policy][gc]") {
  FakeBackend be(200 * MiB);
  Recorder rec;
  CachingAllocator a(be, conf_of("garbage_collection_threshold:0.5,memtrace_deferred_free:False"), &rec);
  uintptr_t A = must(a.malloc(80 * MiB));
  must(a.malloc(40 * MiB));
  a.free(A);
  must(a.malloc(60 * MiB));
  CHECK(rec.count(Action::SegmentFree) == 0);
}

TEST_CASE("range queries answer for the block, anywhere inside it", "[policy][range]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of(kImmediate));
  uintptr_t p = must(a.malloc(3 * MiB + 100));
  uintptr_t q = must(a.malloc(5000));
  for (uintptr_t off : {size_t{0}, size_t{1}, 3 * MiB, 3 * MiB + 511}) {
    auto b = a.block_of(p + off);
    REQUIRE(b);
    CHECK(b->base == p);
    CHECK(b->size == 3 * MiB + 512);
    CHECK(b->requested_size == 3 * MiB + 100);
    CHECK(b->segment_base == p);
    CHECK(b->segment_size == 20 * MiB);
  }
  CHECK_FALSE(a.block_of(p + 3 * MiB + 512));  // the free rest of the segment
  CHECK(a.owns(p + 3 * MiB + 512));
  CHECK_FALSE(a.owns(p + 20 * MiB));
  CHECK_FALSE(a.block_of(p - 1));
  CHECK(a.block_of(q + 4999)->base == q);
  a.free(q);
  CHECK_FALSE(a.block_of(q));
  CHECK_FALSE(a.free(q));        // double free: not ours any more
  CHECK_FALSE(a.free(p + 512));  // inside a block, not its start
  CHECK(a.check_invariants() == "");
}

TEST_CASE("stats add up and peaks hold", "[policy][stats]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of(kImmediate));
  uintptr_t p = must(a.malloc(3 * MiB));
  uintptr_t q = must(a.malloc(1000));
  Stats s = a.stats();
  CHECK(s.reserved == 22 * MiB);
  CHECK(s.allocated == 3 * MiB + 1024);
  CHECK(s.requested == 3 * MiB + 1000);
  CHECK(s.backend_allocs == 2);
  a.free(p);
  a.free(q);
  s = a.stats();
  CHECK(s.allocated == 0);
  CHECK(s.peak_allocated == 3 * MiB + 1024);
  CHECK(s.peak_reserved == 22 * MiB);
  CHECK(s.allocated_at_peak_reserved == 3 * MiB + 1024);
  CHECK(s.largest_free_block == 20 * MiB);
  CHECK(s.num_mallocs == 2);
  CHECK(s.num_frees == 2);
}

TEST_CASE("roundup_power2_divisions shapes the blocks handed out", "[policy][rounding]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of("roundup_power2_divisions:4,memtrace_deferred_free:False"));
  uintptr_t p = must(a.malloc(5000000));
  CHECK(a.block_of(p)->size == 5242880);
  CHECK(a.block_of(p)->requested_size == 5000000);
  uintptr_t q = must(a.malloc(600 * 1024));  // below 2 MiB, interval 0: steps of 512 KiB / 4
  CHECK(a.block_of(q)->size == 640 * 1024);
}

TEST_CASE("every malloc and free is reported once, in PyTorch's terms", "[policy][events]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(must(a.malloc(1000 + static_cast<size_t>(i) * 40000)));
  for (uintptr_t p : ps) a.free(p);
  a.empty_cache();
  CHECK(rec.count(Action::Alloc) == 50);
  CHECK(rec.count(Action::FreeRequested) == 50);
  CHECK(rec.count(Action::FreeCompleted) == 50);
  CHECK(rec.count(Action::SegmentAlloc) == rec.count(Action::SegmentFree));
  for (auto& e : rec.of(Action::FreeCompleted)) CHECK(e.size >= 1000);  // requested bytes, not 0
}
