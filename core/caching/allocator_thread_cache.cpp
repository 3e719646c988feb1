// Thread caches (docs/caching-allocator.md, "Thread caches"): a cache hit and the free of a block
// the same cache handed out take the thread cache's lock and nothing shared, so threads on
// different cores do not pass the allocator's lock and the lines it guards between them. Every
// other path takes the allocator's lock, folds the caches into the shared state first (absorb)
// and so works on exact statistics and a complete pending batch.
#include <algorithm>

#include "core/caching/allocator_impl.hpp"

namespace memtrace::caching {

namespace {
std::atomic<unsigned> g_next_slot{0};
__thread unsigned t_slot __attribute__((tls_model("initial-exec"))) = 0;  // slot + 1; 0: not chosen yet

unsigned slot_of_thread() {
  if (t_slot == 0) t_slot = g_next_slot.fetch_add(1, std::memory_order_relaxed) % kThreadCaches + 1;
  return t_slot - 1;
}
}  // namespace

ThreadCache* CachingAllocator::Impl::cache_of_thread() const {
  return caches[slot_of_thread()].load(std::memory_order_acquire);
}

ThreadCache* CachingAllocator::Impl::own_cache() {
  if (!thread_caches) return nullptr;
  auto& slot = caches[slot_of_thread()];
  ThreadCache* tc = slot.load(std::memory_order_acquire);
  if (!tc) {
    tc = new ThreadCache();
    slot.store(tc, std::memory_order_release);
  }
  return tc;
}

uintptr_t CachingAllocator::Impl::cache_hit(ThreadCache& tc, size_t size, size_t rounded, uintptr_t stream) {
  Block* b = tc.bins.take(rounded, stream);
  if (!b) return 0;
  if (tc.allocated + static_cast<int64_t>(b->size) > tc.budget) {
    tc.bins.keep(b);  // back on top of its bin; the allocator's lock decides
    return 0;
  }
  b->state = State::Allocated;
  b->requested = size;
  tc.live.put(b->addr, b);
  tc.allocated += static_cast<int64_t>(b->size);
  tc.requested += static_cast<int64_t>(size);
  ++tc.mallocs;
  ++tc.hits;
  emit(Action::Alloc, b->addr, size, b->size, stream);
  return b->addr;
}

bool CachingAllocator::Impl::cache_free(ThreadCache& tc, uintptr_t ptr) {
  Block* b = nullptr;
  if (!tc.live.take(ptr, &b)) return false;
  tc.allocated -= static_cast<int64_t>(b->size);
  tc.requested -= static_cast<int64_t>(b->requested);
  ++tc.frees;
  emit(Action::FreeRequested, b->addr, b->requested, b->size, b->stream);
  b->state = State::Pending;
  tc.pending.push_back(b);
  tc.pending_free += static_cast<int64_t>(b->size);
  return true;
}

void CachingAllocator::Impl::absorb() {
  for (auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc) continue;
    SpinGuard g(tc->mu);
    st.allocated += tc->allocated;
    st.requested += tc->requested;
    st.pending_free += tc->pending_free;
    st.num_mallocs += tc->mallocs;
    st.num_frees += tc->frees;
    st.num_cache_hits += tc->hits;
    tc->allocated = tc->requested = tc->pending_free = 0;
    tc->mallocs = tc->frees = tc->hits = 0;
    tc->budget = 0;
    // The batch keeps the order of the frees within each cache; across caches there was none.
    pending.insert(pending.end(), tc->pending.begin(), tc->pending.end());
    tc->pending.clear();
  }
}

void CachingAllocator::Impl::grant() {
  ThreadCache* tc = thread_caches ? cache_of_thread() : nullptr;
  if (!tc) return;
  // note_peaks() raises peak_allocated past `allocated`, and allocated_at_peak_reserved while
  // reserved is at its peak; below the lower of the two that applies, a hit changes neither.
  const size_t ceiling = st.reserved == st.peak_reserved ? st.allocated_at_peak_reserved : st.peak_allocated;
  SpinGuard g(tc->mu);
  // Every other cache's budget was taken back by absorb() and its allocated has not risen since.
  tc->budget = ceiling > st.allocated ? static_cast<int64_t>(ceiling - st.allocated) : 0;
}

bool CachingAllocator::Impl::take_live(uintptr_t ptr, Block** out) {
  if (live.take(ptr, out)) return true;
  for (auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc) continue;
    SpinGuard g(tc->mu);
    if (tc->live.take(ptr, out)) return true;
  }
  return false;
}

Block* CachingAllocator::Impl::find_live(uintptr_t ptr) const {
  if (Block** b = live.find(ptr)) return *b;
  for (const auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc) continue;
    if (Block** b = tc->live.find(ptr)) return *b;  // caller holds every cache's lock
  }
  return nullptr;
}

void CachingAllocator::Impl::lock_caches() const {
  for (const auto& slot : caches)
    if (ThreadCache* tc = slot.load(std::memory_order_acquire)) tc->mu.lock();
}
void CachingAllocator::Impl::unlock_caches() const {
  for (const auto& slot : caches)
    if (ThreadCache* tc = slot.load(std::memory_order_acquire)) tc->mu.unlock();
}

// ---- the entry points: a thread cache first, else the allocator's lock ----

MallocResult CachingAllocator::malloc(size_t size, uintptr_t stream) {
  Impl& m = *impl_;
  if (m.thread_caches && size <= kSmallSize) {
    if (ThreadCache* tc = m.cache_of_thread()) {
      const size_t rounded = round_size(m.conf, size);
      SpinGuard g(tc->mu);
      if (uintptr_t p = m.cache_hit(*tc, size, rounded, stream)) return {p, 0};
    }
  }
  std::unique_lock<SleepingLock> lk(m.mu);
  m.absorb();
  MallocResult r = m.malloc(size, stream, lk);
  m.grant();
  return r;
}

bool CachingAllocator::free(uintptr_t ptr) {
  Impl& m = *impl_;
  if (m.thread_caches) {
    if (ThreadCache* tc = m.cache_of_thread()) {
      SpinGuard g(tc->mu);
      if (m.cache_free(*tc, ptr)) return true;
    }
  }
  std::unique_lock<SleepingLock> lk(m.mu);
  m.absorb();
  const bool ok = m.free(ptr, lk);
  m.grant();
  return ok;
}

}  // namespace memtrace::caching
