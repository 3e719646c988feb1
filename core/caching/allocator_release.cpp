// Cached memory given back to the backend: on the out-of-memory path (docs/caching-allocator.md,
// "When the device is full: release and retry"), by garbage collection and in empty_cache().
#include "core/caching/allocator_impl.hpp"

#include <algorithm>

namespace memtrace::caching {

void CachingAllocator::Impl::release_segment(Block* b) {
  Segment* s = b->seg;
  free_erase(pool_of(s->kind), b);
  ++st.backend_frees;
  backend.free(s->base, s->size);
  st.reserved -= s->size;
  emit(Action::SegmentFree, s->base, s->size, s->size, s->stream);
  segments.erase(s->base);
  drop_block(b);
  delete s;
}

// docs/caching-allocator.md, "When the device is full: release and retry", step 4: free one
// oversize cached block big enough, or the largest ones until enough bytes went back.
bool CachingAllocator::Impl::release_available_cached_blocks(Request& r) {
  if (conf.max_split_size == kNoMaxSplit) return false;
  Pool& p = *r.pool;
  Block key;
  key.stream = r.stream;
  key.size = std::max(r.rounded, conf.max_split_size);
  key.addr = 0;
  auto it = p.free.lower_bound(&key);
  if (it == p.free.end() || (*it)->stream != r.stream || (*it)->seg->expandable) {
    if (it == p.free.begin()) return false;
    size_t released = 0;
    --it;
    while (released < key.size && (*it)->size >= conf.max_split_size && (*it)->stream == r.stream) {
      auto cur = it;
      bool first = cur == p.free.begin();
      if (!first) --it;
      Block* b = *cur;
      if (!b->seg->expandable && whole_segment(b)) {
        released += b->size;
        release_segment(b);
      }
      if (first) break;
    }
    return released >= key.size;
  }
  Block* b = *it;
  if (!whole_segment(b)) return false;
  release_segment(b);
  return true;
}

// docs/caching-allocator.md, "When the device is full: release and retry", step 5, and
// empty_cache: one synchronize, then every wholly free segment and every whole free page of
// expandable reservations goes back.
void CachingAllocator::Impl::release_cached_blocks() {
  backend.synchronize();
  ++st.backend_syncs;
  complete_pending();
  reuse_drain();  // a segment goes back only when one free block spans it
  for (Pool* pp : {&pools[1], &pools[0]}) {  // large first, as PyTorch emits them
    Pool& p = *pp;
    std::vector<Block*> to_unmap;
    for (auto it = p.free.begin(); it != p.free.end();) {
      Block* b = *it++;
      if (b->seg->expandable) to_unmap.push_back(b);
      else if (whole_segment(b)) release_segment(b);
    }
    for (Block* b : to_unmap) {
      Segment* s = b->seg;
      unmap_block(b);
      release_reservation_if_empty(s);
    }
  }
  // Reservations whose pages all went back earlier (remap) are dropped here too. PyTorch's
  // policy keeps them (a reservation made by a failed attempt stays), and so does ours then.
  if (!remap) return;
  std::vector<Segment*> empty;
  for (auto& [base, s] : segments)
    if (s->expandable && s->head && !s->head->next && !s->head->mapped) empty.push_back(s);
  for (Segment* s : empty) release_reservation_if_empty(s);
}

// docs/caching-allocator.md, "Garbage collection": frees whole, old, cached large segments until
// reserved is back under the threshold.
void CachingAllocator::Impl::garbage_collect() {
  const size_t threshold = static_cast<size_t>(conf.garbage_collection_threshold * static_cast<double>(allowed_max));
  if (st.reserved <= threshold) return;
  const size_t target = st.reserved - threshold;
  size_t reclaimed = 0;
  Pool& p = pool_of(PoolKind::Large);
  for (;;) {
    double total_age = 0;
    size_t n = 0;
    for (Block* b : p.free)
      if (!b->seg->expandable && whole_segment(b)) total_age += static_cast<double>(p.searches - b->gc_base), ++n;
    if (n == 0) return;
    const double avg = total_age / static_cast<double>(n);
    bool freed = false;
    for (auto it = p.free.begin(); it != p.free.end();) {
      Block* b = *it++;
      if (!b->seg->expandable && whole_segment(b) && static_cast<double>(p.searches - b->gc_base) >= avg) {
        reclaimed += b->size;
        ++st.num_gc_frees;
        release_segment(b);
        freed = true;
      }
    }
    if (reclaimed >= target || !freed) return;
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<SleepingLock> g(impl_->mu);
  impl_->release_cached_blocks();
}

}  // namespace memtrace::caching
