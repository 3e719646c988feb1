// Reuse bins (docs/caching-allocator.md, "Reuse bins"): a settled small block goes back out
// whole at its own size, and whatever the bins hold is merged back before the allocator settles
// a batch, takes new memory or gives memory back.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/caching/tests/fake_backend.hpp"
#include "core/caching/tests/must.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {
size_t blocks_in(const CachingAllocator& a) {
  size_t n = 0;
  for (const SegmentView& s : a.segments()) n += s.blocks.size();
  return n;
}
}  // namespace

TEST_CASE("a settled block goes back out whole to the next request of its size", "[reuse]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  const uintptr_t p = must(a.malloc(4096));
  const uintptr_t q = must(a.malloc(4096));
  a.free(p);
  a.flush_pending_frees();
  const size_t blocks = blocks_in(a);
  // Another size leaves the binned block alone and is placed by best fit after q.
  const uintptr_t small = must(a.malloc(3000));
  CHECK(small == q + 4096);
  CHECK(blocks_in(a) == blocks + 1);  // split off the free rest, not off p
  // Its own size takes it back: same address, no split, no merge.
  CHECK(must(a.malloc(4000)) == p);
  CHECK(blocks_in(a) == blocks + 1);
  CHECK(rec.count(Action::Alloc) == 4);
  CHECK(rec.count(Action::FreeCompleted) == 1);
  CHECK(a.stats().num_cache_hits == 3);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("binned blocks merge before a request that would otherwise take new memory", "[reuse]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 512; ++i) ps.push_back(must(a.malloc(4096)));  // the whole 2 MiB segment
  REQUIRE(be.allocs == 1);
  const uintptr_t base = *std::min_element(ps.begin(), ps.end());
  for (uintptr_t p : ps) a.free(p);
  a.flush_pending_frees();
  CHECK(blocks_in(a) == 512);  // all settled, all binned
  CHECK(a.stats().largest_free_block == 4096);
  CHECK(a.check_invariants() == "");
  // 1 MiB fits only in the merged segment: the bins drain instead of a new segment.
  CHECK(must(a.malloc(1 * MiB)) == base);
  CHECK(be.allocs == 1);
  CHECK(blocks_in(a) == 2);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a large request leaves the small pool's bins alone", "[reuse]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  must(a.malloc(4096));
  const uintptr_t p = must(a.malloc(4096));  // borders the free rest of the segment
  a.free(p);
  a.flush_pending_frees();
  const size_t before = blocks_in(a);
  must(a.malloc(12 * MiB));  // large pool: a segment of its own
  CHECK(be.allocs == 2);
  CHECK(blocks_in(a) == before + 1);  // the small segment as it was: p still whole, not merged
  CHECK(must(a.malloc(4096)) == p);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("empty_cache gives back a segment that only binned blocks held", "[reuse]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  const uintptr_t p = must(a.malloc(8192));
  const uintptr_t q = must(a.malloc(512));
  a.free(p);
  a.free(q);
  a.flush_pending_frees();
  REQUIRE(blocks_in(a) == 3);
  a.empty_cache();
  CHECK(rec.count(Action::SegmentFree) == 1);
  CHECK(a.stats().reserved == 0);
  CHECK(be.used() == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a size beyond the bins' count is merged as before", "[reuse]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  // Nine sizes (1..9 KiB), each kept apart from the next by a live 512-byte block; the last
  // one borders the free rest of the segment.
  std::vector<uintptr_t> freed;
  for (size_t k = 1; k <= kReuseBins + 1; ++k) {
    freed.push_back(must(a.malloc(k * 1024)));
    if (k <= kReuseBins) must(a.malloc(512));
  }
  for (uintptr_t p : freed) a.free(p);
  a.flush_pending_frees();
  CHECK(a.check_invariants() == "");
  // The bins took the first eight sizes, whole; the ninth merged with the free rest.
  CHECK(blocks_in(a) == 2 * kReuseBins + 1);
  // Each size comes back at its own address, the ninth by best fit (its space again).
  for (size_t k = 1; k <= kReuseBins + 1; ++k) CHECK(must(a.malloc(k * 1024)) == freed[k - 1]);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("no reuse bins where PyTorch's merging is wanted", "[reuse]") {
  for (const char* c : {"memtrace_deferred_free:False", "expandable_segments:True"}) {
    INFO(c);
    FakeBackend be;
    CachingAllocator a(be, conf_of(c));
    const uintptr_t p = must(a.malloc(4096));
    const uintptr_t q = must(a.malloc(4096));
    a.free(p);
    a.free(q);
    a.flush_pending_frees();
    CHECK(blocks_in(a) == 1);  // merged into one free block at once
    CHECK(a.check_invariants() == "");
  }
}
