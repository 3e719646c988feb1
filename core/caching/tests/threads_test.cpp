// Eight threads allocating and freeing at once: no two live blocks ever overlap, every range
// query answers for its own block, and the internal state is consistent after every run.
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/caching/tests/fake_backend.hpp"

using namespace memtrace;
using namespace memtrace::caching;
using namespace memtrace::caching::testing;

namespace {

// Live blocks across all threads, to catch two callers holding the same bytes.
class Ledger {
 public:
  bool add(uintptr_t p, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.lower_bound(p);
    if (it != live_.end() && it->first < p + n) return false;
    if (it != live_.begin() && std::prev(it)->first + std::prev(it)->second > p) return false;
    live_[p] = n;
    return true;
  }
  void remove(uintptr_t p) {
    std::lock_guard<std::mutex> g(mu_);
    live_.erase(p);
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, size_t> live_;
};

void worker(CachingAllocator& a, Ledger& ledger, int seed, int ops, std::atomic<int>* failures) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uintptr_t, size_t>> held;
  auto fail = [&] { failures->fetch_add(1); };
  for (int i = 0; i < ops; ++i) {
    if (held.size() < 24 && (held.empty() || rng() % 3 != 0)) {
      size_t n;
      switch (rng() % 4) {
        case 0: n = 1 + rng() % 4096; break;
        case 1: n = 1 + rng() % (1 << 20); break;
        case 2: n = (1 << 20) + rng() % (12 << 20); break;
        default: n = 1 + rng() % 512; break;
      }
      uintptr_t stream = rng() % 2;
      MallocResult r = a.malloc(n, stream);
      if (r.error != 0 || r.ptr == 0) {
        fail();
        continue;
      }
      if (!ledger.add(r.ptr, n)) fail();
      held.emplace_back(r.ptr, n);
    } else {
      size_t k = rng() % held.size();
      auto [p, n] = held[k];
      auto b = a.block_of(p + n - 1);
      if (!b || b->base != p || b->requested_size != n) fail();
      ledger.remove(p);
      if (!a.free(p)) fail();
      held[k] = held.back();
      held.pop_back();
    }
    if (i % 997 == 0 && seed % 4 == 0) a.empty_cache();
  }
  for (auto [p, n] : held) {
    ledger.remove(p);
    if (!a.free(p)) fail();
  }
}

}  // namespace

TEST_CASE("8-thread stress, with a consistency check after every run", "[threads]") {
  const char* confs[] = {
      "",
      "memtrace_deferred_free:False",
      "expandable_segments:True",
      "memtrace_policy:remap",
      "max_split_size_mb:24,roundup_power2_divisions:4,memtrace_free_batch_mb:8",
      "per_process_memory_fraction:0.9,garbage_collection_threshold:0.5",
  };
  for (const char* c : confs) {
    for (int run = 0; run < 2; ++run) {
      INFO(c << " run " << run);
      FakeBackend be(size_t{4} << 30);
      CachingAllocator a(be, conf_of(c));
      Ledger ledger;
      std::atomic<int> failures{0};
      std::vector<std::thread> ts;
      for (int t = 0; t < 8; ++t) ts.emplace_back(worker, std::ref(a), std::ref(ledger), run * 100 + t, 3000, &failures);
      for (auto& t : ts) t.join();
      CHECK(failures.load() == 0);
      CHECK(a.check_invariants() == "");
      Stats s = a.stats();
      CHECK(s.allocated == 0);
      CHECK(s.num_mallocs == s.num_frees);
      a.empty_cache();
      CHECK(a.check_invariants() == "");
      CHECK(a.stats().reserved == 0);
      CHECK(be.used() == 0);
      CHECK(be.live_allocations() == 0);
      CHECK(be.bad_calls == 0);
    }
  }
}

// With eight threads, reuse bins and batches settled with the lock released, a listener must see
// each block settled before any block that overlaps it is handed out, and each block's alloc,
// free_requested and free_completed in that order.
TEST_CASE("8 threads: the listener sees every block's reports in order, never two live blocks overlapping",
          "[threads]") {
  for (const char* c : {"", "memtrace_free_batch_mb:1", "memtrace_deferred_free:False"}) {
    INFO(c);
    FakeBackend be(size_t{4} << 30);
    Recorder rec;
    CachingAllocator a(be, conf_of(c), &rec);
    Ledger ledger;
    std::atomic<int> failures{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t) ts.emplace_back(worker, std::ref(a), std::ref(ledger), 7 + t, 3000, &failures);
    for (auto& t : ts) t.join();
    a.flush_pending_frees();
    CHECK(failures.load() == 0);
    std::map<uintptr_t, std::pair<size_t, Action>> live;  // block start -> (block bytes, last report)
    size_t bad = 0;
    for (const AllocatorEvent& e : rec.events) {
      if (e.action == Action::Alloc) {
        auto it = live.lower_bound(e.addr);
        if (it != live.end() && it->first < e.addr + e.block_size) ++bad;
        if (it != live.begin() && std::prev(it)->first + std::prev(it)->second.first > e.addr) ++bad;
        live[e.addr] = {e.block_size, Action::Alloc};
      } else if (e.action == Action::FreeRequested) {
        auto it = live.find(e.addr);
        if (it == live.end() || it->second.second != Action::Alloc) ++bad;
        else it->second.second = Action::FreeRequested;
      } else if (e.action == Action::FreeCompleted) {
        auto it = live.find(e.addr);
        if (it == live.end() || it->second.second != Action::FreeRequested) ++bad;
        else live.erase(it);
      }
    }
    CHECK(bad == 0);
    CHECK(live.empty());
    CHECK(rec.count(Action::Alloc) == rec.count(Action::FreeCompleted));
    CHECK(a.check_invariants() == "");
  }
}
