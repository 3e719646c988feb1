// Reuse bins (docs/caching-allocator.md, "Reuse bins"): with deferred frees, a settled small
// block is kept whole in a bin of its size instead of being merged, and the next request of that
// size takes it back without a search, a split or a merge. Whatever the bins hold, the thread
// caches' bins included, is merged back before the allocator would settle a batch, take new
// memory or give memory back, so they never make the footprint grow.
#include <algorithm>

#include "core/caching/allocator_impl.hpp"

namespace memtrace::caching {

Block* ReuseBins::take(size_t rounded, uintptr_t stream) {
  if (count == 0) return nullptr;
  for (ReuseBin& bin : bins) {
    if (bin.size != rounded || bin.stream != stream || bin.blocks.empty()) continue;
    Block* b = bin.blocks.back();
    bin.blocks.pop_back();
    --count;
    return b;
  }
  return nullptr;
}

bool ReuseBins::keep(Block* b) {
  // The bin of its size, else the first empty one (which takes that size from now on).
  ReuseBin* into = nullptr;
  for (ReuseBin& bin : bins) {
    if (bin.size == b->size && bin.stream == b->stream) {
      into = &bin;
      break;
    }
    if (!into && bin.blocks.empty()) into = &bin;
  }
  if (!into) return false;
  into->size = b->size;
  into->stream = b->stream;
  into->blocks.push_back(b);
  b->state = State::Binned;
  ++count;
  return true;
}

bool ReuseBins::holds(const Block* b) const {
  for (const ReuseBin& bin : bins)
    if (bin.size == b->size && bin.stream == b->stream &&
        std::find(bin.blocks.begin(), bin.blocks.end(), b) != bin.blocks.end())
      return true;
  return false;
}

size_t ReuseBins::largest() const {
  size_t m = 0;
  for (const ReuseBin& bin : bins)
    if (!bin.blocks.empty()) m = std::max(m, bin.size);
  return m;
}

Block* CachingAllocator::Impl::reuse_take(const Request& r) {
  if (ThreadCache* tc = thread_caches ? cache_of_thread() : nullptr) {
    SpinGuard g(tc->mu);
    if (Block* b = tc->bins.take(r.rounded, r.stream)) return b;
  }
  return bins.take(r.rounded, r.stream);
}

bool CachingAllocator::Impl::reuse_keep(Block* b) {
  if (b->seg->kind != PoolKind::Small) return false;
  if (ThreadCache* tc = b->home) {
    SpinGuard g(tc->mu);
    return tc->bins.keep(b);
  }
  return bins.keep(b);
}

void CachingAllocator::Impl::reuse_drain() {
  // A neighbour still binned is not merged with (it is not Free); it merges in turn when its
  // own bin is drained.
  auto drain = [&](ReuseBins& set) {
    if (set.count == 0) return;
    for (ReuseBin& bin : set.bins) {
      for (Block* b : bin.blocks) put_free(b);
      bin.blocks.clear();
    }
    set.count = 0;
  };
  drain(bins);
  for (auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc) continue;
    SpinGuard g(tc->mu);
    drain(tc->bins);
  }
}

Block* CachingAllocator::Impl::reuse_steal(const Request& r) {
  ThreadCache* own = own_cache();
  for (auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc || tc == own) continue;
    SpinGuard g(tc->mu);
    Block* b = tc->bins.take(r.rounded, r.stream);
    if (!b) continue;
    // Half of what is left comes along: the thread that ran out first then finds its next
    // blocks in its own cache, and a batch costs a few trips through the allocator's lock, not
    // one per block the other thread had over.
    std::vector<Block*> moved;
    for (size_t n = (tc->bins.count + 1) / 2; n > 0; --n) {
      Block* m = tc->bins.take(r.rounded, r.stream);
      if (!m) break;
      moved.push_back(m);
    }
    b->home = own;
    if (own && !moved.empty()) {
      SpinGuard og(own->mu);
      for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
        (*it)->home = own;
        if (!own->bins.keep(*it)) (*it)->home = tc, tc->bins.keep(*it);
      }
    } else {
      for (auto it = moved.rbegin(); it != moved.rend(); ++it) tc->bins.keep(*it);
    }
    return b;
  }
  return nullptr;
}

bool CachingAllocator::Impl::any_binned() {
  if (bins.count) return true;
  for (auto& slot : caches) {
    ThreadCache* tc = slot.load(std::memory_order_acquire);
    if (!tc) continue;
    SpinGuard g(tc->mu);
    if (tc->bins.count) return true;
  }
  return false;
}

Block* CachingAllocator::Impl::find_cached(Request& r) {
  if (Block* b = reuse_take(r)) return b;
  Block* b = get_free_block(r);
  // Bins hold small-pool blocks only: draining them cannot serve a large request.
  if (b || r.pool->kind != PoolKind::Small) return b;
  // Another thread's block of this size, whole, before every bin is merged: the bins then stay
  // thread-local when one thread runs out a little before the others.
  if ((b = reuse_steal(r))) return b;
  if (!any_binned()) return nullptr;
  reuse_drain();
  return get_free_block(r);
}

}  // namespace memtrace::caching
