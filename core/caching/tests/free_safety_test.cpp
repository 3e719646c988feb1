// The real free's promise: a freed block is not handed out again while work submitted before
// its free may still touch it. One synchronize settles a whole batch of frees.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <random>
#include <thread>

#include "core/caching/tests/fake_backend.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {
// The program's loop: allocate, launch work on the block, free it without waiting.
// Returns how many blocks were handed out with work still in flight on them.
int run_loop(CachingAllocator& a, FakeBackend& be, int iterations, std::mt19937_64& rng, bool vary) {
  std::uniform_int_distribution<size_t> size(1, 64 * 1024);
  int unsafe = 0;
  std::vector<uintptr_t> held;
  for (int i = 0; i < iterations; ++i) {
    size_t n = vary ? size(rng) : 4096;
    MallocResult r = a.malloc(n);
    REQUIRE(r.error == 0);
    if (be.work_in_flight(r.ptr, n)) ++unsafe;
    be.submit_work(r.ptr, n);
    held.push_back(r.ptr);
    // Keep a few alive so blocks are freed out of order.
    if (held.size() > 3 || !vary) {
      size_t k = vary ? rng() % held.size() : 0;
      REQUIRE(a.free(held[k]));
      held.erase(held.begin() + static_cast<long>(k));
    }
  }
  for (uintptr_t p : held) a.free(p);
  return unsafe;
}
}  // namespace

TEST_CASE("deferred frees never hand out a block with work in flight", "[free_safety]") {
  std::mt19937_64 rng(42);
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  CHECK(run_loop(a, be, 5000, rng, /*vary=*/true) == 0);
  CHECK(a.check_invariants() == "");
  FakeBackend be2;
  CachingAllocator b(be2, AllocConf{});
  CHECK(run_loop(b, be2, 5000, rng, /*vary=*/false) == 0);
}

TEST_CASE("without deferral the same loop reuses blocks under work in flight", "[free_safety]") {
  // What the deferral protects against: PyTorch's stream-ordered reuse, fine within one stream,
  // wrong for a driver free that promised to wait.
  std::mt19937_64 rng(42);
  FakeBackend be;
  CachingAllocator a(be, conf_of("memtrace_deferred_free:False"));
  CHECK(run_loop(a, be, 1000, rng, /*vary=*/false) > 900);
}

TEST_CASE("one synchronize per batch in the hot loop", "[free_safety]") {
  std::mt19937_64 rng(1);
  FakeBackend be;
  CachingAllocator a(be, AllocConf{});
  const int n = 10000;
  run_loop(a, be, n, rng, /*vary=*/false);
  // 4 KiB blocks carve a 2 MiB segment 512 times before a miss flushes the batch.
  Stats s = a.stats();
  CHECK(s.backend_syncs == be.syncs);
  CHECK(be.syncs >= n / 512 - 1);
  CHECK(be.syncs <= n / 512 + 1);
  CHECK(be.allocs == 1);  // the batch is settled before any new memory is taken
  CHECK(s.num_cache_hits == n - 1);
}

TEST_CASE("pending blocks show as active_pending_free and complete after the flush", "[free_safety]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  uintptr_t p = a.malloc(4096).ptr;
  uintptr_t q = a.malloc(4096).ptr;
  a.free(p);
  CHECK(rec.count(Action::FreeRequested) == 1);
  CHECK(rec.count(Action::FreeCompleted) == 0);
  auto blocks = a.segments()[0].blocks;
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].pending_free);
  CHECK_FALSE(blocks[0].allocated);
  CHECK(blocks[0].requested_size == 4096);
  CHECK(a.stats().pending_free == 4096);
  CHECK_FALSE(a.block_of(p));  // freed: no longer a live block
  CHECK(a.check_invariants() == "");
  a.flush_pending_frees();
  CHECK(be.syncs == 1);
  CHECK(rec.count(Action::FreeCompleted) == 1);
  CHECK(a.stats().pending_free == 0);
  blocks = a.segments()[0].blocks;
  REQUIRE(blocks.size() == 3);  // q still separates it from the free rest
  CHECK_FALSE(blocks[0].pending_free);
  CHECK_FALSE(blocks[0].allocated);
  a.free(q);
  a.flush_pending_frees();
  blocks = a.segments()[0].blocks;
  REQUIRE(blocks.size() == 3);  // both settled, kept whole in the 4 KiB reuse bin
  for (const auto& b : blocks) CHECK_FALSE((b.allocated || b.pending_free));
  CHECK(a.check_invariants() == "");
  CHECK(be.syncs == 2);
  a.flush_pending_frees();
  CHECK(be.syncs == 2);  // nothing pending: no synchronize
}

TEST_CASE("the blocks one synchronize settles are reported as settled together", "[free_safety]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 5; ++i) ps.push_back(a.malloc(4096).ptr);
  for (int i = 0; i < 3; ++i) a.free(ps[i]);
  a.flush_pending_frees();
  a.free(ps[3]);
  a.free(ps[4]);
  a.flush_pending_frees();
  CHECK(be.syncs == 2);
  const auto done = rec.of(Action::FreeCompleted);
  REQUIRE(done.size() == 5);
  // The listener reads its clock once per synchronize (preload/caching_recording.cpp).
  const bool together[] = {false, true, true, false, true};
  for (size_t i = 0; i < done.size(); ++i) {
    INFO(i);
    CHECK(done[i].same_settle == together[i]);
    CHECK(done[i].addr == ps[i]);
  }
  for (const auto& e : rec.of(Action::FreeRequested)) CHECK_FALSE(e.same_settle);
}

TEST_CASE("memtrace_free_batch_mb flushes at the free that crosses it", "[free_safety]") {
  FakeBackend be;
  CachingAllocator a(be, conf_of("memtrace_free_batch_mb:1"));
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(a.malloc(256 * 1024).ptr);
  for (int i = 0; i < 3; ++i) a.free(ps[i]);
  CHECK(be.syncs == 0);
  a.free(ps[3]);  // 1 MiB pending
  CHECK(be.syncs == 1);
  CHECK(a.stats().pending_free == 0);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("a flush goes before new memory, and empty_cache settles pending frees", "[free_safety]") {
  FakeBackend be;
  Recorder rec;
  CachingAllocator a(be, AllocConf{}, &rec);
  uintptr_t p = a.malloc(30 * MiB).ptr;
  a.free(p);
  uintptr_t q = a.malloc(30 * MiB).ptr;
  CHECK(q == p);
  CHECK(be.allocs == 1);
  CHECK(be.syncs == 1);
  a.free(q);
  a.empty_cache();
  CHECK(rec.count(Action::FreeCompleted) == 2);
  CHECK(rec.count(Action::SegmentFree) == 1);
  CHECK(a.stats().reserved == 0);
}

namespace {
// A device that is busy: synchronize() returns only when the test says so.
class SlowSyncBackend : public FakeBackend {
 public:
  bool block = false;  // set once the test's setup is done
  int synchronize() override {
    if (block) {
      std::unique_lock<std::mutex> lk(m_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lk, [&] { return released_; });
    }
    return FakeBackend::synchronize();
  }
  bool wait_entered() {
    std::unique_lock<std::mutex> lk(m_);
    return cv_.wait_for(lk, std::chrono::seconds(10), [&] { return entered_; });
  }
  void release() {
    std::lock_guard<std::mutex> g(m_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false;
};
}  // namespace

TEST_CASE("other threads' cache hits and frees go on while a batch is synchronized", "[free_safety][threads]") {
  SlowSyncBackend be;
  CachingAllocator a(be, AllocConf{});
  // Stream 0 has a cached segment to hit. (A miss would wait for the flush under way: a miss
  // settles pending frees before taking new memory.)
  a.free(a.malloc(4096, 0).ptr);
  a.flush_pending_frees();
  // Stream 1's 2 MiB segment is filled and freed: its next malloc misses and must flush.
  std::vector<uintptr_t> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a.malloc(512 * 1024, 1).ptr);
  for (uintptr_t p : ps) a.free(p);
  be.block = true;
  const uint64_t syncs_before = be.syncs;
  // Catch2's assertions are not thread-safe: the threads keep their results, asserted here.
  int flusher_error = -1;
  std::atomic<int> other_errors{0};
  std::thread flusher([&] { flusher_error = a.malloc(512 * 1024, 1).error; });
  const bool entered = be.wait_entered();
  // The flusher is inside synchronize(). Stream 0 is served from its cache meanwhile.
  std::atomic<bool> done{false};
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) {
      MallocResult r = a.malloc(4096, 0);
      if (r.error != 0) other_errors.fetch_add(1);
      a.free(r.ptr);
    }
    done = true;
  });
  for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool done_while_synchronizing = done.load();
  const uint64_t syncs_meanwhile = be.syncs;
  be.release();
  flusher.join();
  other.join();
  REQUIRE(entered);
  CHECK(done_while_synchronizing);  // would stay false if the lock were held across synchronize()
  CHECK(syncs_meanwhile == syncs_before);
  CHECK(flusher_error == 0);
  CHECK(other_errors.load() == 0);
  CHECK(a.check_invariants() == "");
  CHECK(a.stats().backend_syncs >= 1);
}
