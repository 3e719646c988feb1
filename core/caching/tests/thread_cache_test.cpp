// Thread caches (docs/caching-allocator.md, "Thread caches"): a thread's hits and frees take its
// own cache's lock, and still the statistics are exact, a block freed on one thread settles into
// that thread's bins, and nothing a cache holds makes the allocator take new memory.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "core/caching/tests/fake_backend.hpp"
#include "core/caching/tests/must.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {
template <typename F>
void on_another_thread(F&& f) {
  std::thread t(std::forward<F>(f));
  t.join();
}
}  // namespace

TEST_CASE("a hit through a thread cache still raises the peaks exactly", "[thread_cache]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  const uintptr_t x = must(a.malloc(4096));
  REQUIRE(a.free(x));
  a.flush_pending_frees();                 // x settles into this thread's bins
  const uintptr_t y = must(a.malloc(8192));  // by best fit, under the allocator's lock
  CHECK(must(a.malloc(4096)) == x);        // the thread cache's block: allocated is now 12 KiB
  REQUIRE(a.free(x));
  REQUIRE(a.free(y));
  const Stats s = a.stats();
  CHECK(s.peak_allocated == 4096 + 8192);
  CHECK(s.allocated_at_peak_reserved == 4096 + 8192);
  CHECK(s.allocated == 0);
  CHECK(s.num_mallocs == 3);
  CHECK(s.num_frees == 3);
  CHECK(s.num_cache_hits == 2);  // the first malloc took a new segment
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a loop of hits on one thread stays below its budget and keeps the peak", "[thread_cache]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  for (int i = 0; i < 5000; ++i) REQUIRE(a.free(must(a.malloc(4096))));
  const Stats s = a.stats();
  CHECK(s.peak_allocated == 4096);
  CHECK(s.num_mallocs == 5000);
  CHECK(s.num_cache_hits == 4999);
  CHECK(s.pending_free > 0);  // the last frees wait for the next synchronize
  CHECK(be.allocs == 1);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a block freed on another thread settles into that thread's bins", "[thread_cache]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  const uintptr_t p = must(a.malloc(4096));
  uintptr_t again = 0;
  on_another_thread([&] {
    REQUIRE(a.free(p));  // not in that thread's live map: found through the allocator's lock
    a.flush_pending_frees();
    again = must(a.malloc(4096));
    CHECK(a.free(again));
  });
  CHECK(again == p);
  CHECK(a.check_invariants() == "");
  CHECK(rec.count(Action::Alloc) == 2);
  CHECK(rec.count(Action::FreeRequested) == 2);
}

TEST_CASE("another thread's binned block of the size is taken before new memory", "[thread_cache]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  std::vector<uintptr_t> mine;
  // Fill one small segment (2 MiB) with 4 KiB blocks, free them and settle them here.
  for (int i = 0; i < 512; ++i) mine.push_back(must(a.malloc(4096)));
  for (uintptr_t p : mine) REQUIRE(a.free(p));
  a.flush_pending_frees();
  REQUIRE(be.allocs == 1);
  on_another_thread([&] {
    // Its own cache is empty and the free sets hold nothing: it takes this thread's blocks whole.
    std::vector<uintptr_t> theirs;
    for (int i = 0; i < 512; ++i) theirs.push_back(must(a.malloc(4096)));
    CHECK(be.allocs == 1);
    for (uintptr_t p : theirs) REQUIRE(a.free(p));
  });
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a thread cache's bins are merged before another size takes new memory", "[thread_cache]") {
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  std::vector<uintptr_t> mine;
  for (int i = 0; i < 512; ++i) mine.push_back(must(a.malloc(4096)));
  for (uintptr_t p : mine) REQUIRE(a.free(p));
  a.flush_pending_frees();
  on_another_thread([&] {
    const uintptr_t big = must(a.malloc(1 << 20));  // 1 MiB: only the merged blocks fit
    CHECK(be.allocs == 1);
    CHECK(a.free(big));
  });
  CHECK(a.check_invariants() == "");
  a.empty_cache();
  CHECK(a.stats().reserved == 0);
  CHECK(be.used() == 0);
}

TEST_CASE("exit-style flush settles what a thread cache freed", "[thread_cache]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  on_another_thread([&] {
    for (int i = 0; i < 10; ++i) REQUIRE(a.free(must(a.malloc(4096))));
  });
  a.flush_pending_frees();
  CHECK(rec.count(Action::FreeCompleted) == 10);
  CHECK(a.stats().pending_free == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("two threads allocating at once: every block once, statistics exact", "[thread_cache]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  constexpr int kPairs = 20000;
  std::atomic<int> failures{0};  // Catch's assertions are not for two threads at once
  auto loop = [&](size_t bytes) {
    std::vector<uintptr_t> held;
    for (int i = 0; i < kPairs; ++i) {
      const MallocResult m = a.malloc(bytes);
      if (m.error != 0 || m.ptr == 0) ++failures;
      else held.push_back(m.ptr);
      if (held.size() == 3) {
        for (uintptr_t p : held) failures += a.free(p) ? 0 : 1;
        held.clear();
      }
    }
    for (uintptr_t p : held) failures += a.free(p) ? 0 : 1;
  };
  std::thread t1(loop, 4096), t2(loop, 4096);
  t1.join();
  t2.join();
  CHECK(failures.load() == 0);
  a.flush_pending_frees();
  const Stats s = a.stats();
  CHECK(s.num_mallocs == 2 * kPairs);
  CHECK(s.num_frees == 2 * kPairs);
  CHECK(s.allocated == 0);
  CHECK(s.pending_free == 0);
  CHECK(s.peak_allocated <= 6 * 4096);
  CHECK(s.peak_allocated >= 3 * 4096);
  CHECK(rec.count(Action::Alloc) == 2 * kPairs);
  CHECK(rec.count(Action::FreeCompleted) == 2 * kPairs);
  CHECK(a.check_invariants() == "");
}
