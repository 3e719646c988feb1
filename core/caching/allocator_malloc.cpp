// CachingAllocator::malloc: a request rounded and placed in its pool, served from the best-fitting
// cached block when there is one (docs/caching-allocator.md, "PyTorch's policy, and what memtrace
// adds"), else from new memory, after the release-and-retry path when the device is full.
#include "core/caching/allocator_impl.hpp"

#include <algorithm>

namespace memtrace::caching {

size_t CachingAllocator::Impl::segment_size(size_t rounded) const {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return std::max(conf.large_segment_size, round_up(rounded, kRoundLarge));
  return round_up(rounded, kRoundLarge);
}

Block* CachingAllocator::Impl::get_free_block(Request& r) {
  Pool& p = *r.pool;
  if (gc_enabled()) ++p.searches;
  Block key;
  key.stream = r.stream;
  key.size = r.rounded;
  key.addr = 0;
  auto it = p.free.lower_bound(&key);
  if (it == p.free.end() || (*it)->stream != r.stream) return nullptr;
  if ((*it)->seg->expandable) {
    // A block that can grow into unmapped space ranks by the size it can reach.
    auto reach = [](const Block* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
    auto next = std::next(it);
    while ((*it)->seg->expandable && next != p.free.end() && (*next)->stream == r.stream &&
           reach(*next) < reach(*it)) {
      it = next++;
    }
  }
  if (r.rounded < conf.max_split_size && (*it)->size >= conf.max_split_size) return nullptr;
  if (r.rounded >= conf.max_split_size && (*it)->size >= r.rounded + conf.max_non_split_rounding) return nullptr;
  Block* b = *it;
  free_erase(p, it);
  return b;
}

Block* CachingAllocator::Impl::alloc_block(Request& r, bool is_retry, int* err) {
  if (is_retry) ++st.num_alloc_retries;
  if (limit_set && st.reserved + r.alloc_size > allowed_max) {
    *err = backend.out_of_memory_error();
    return nullptr;
  }
  if (expandable) return allocate_expandable(r, err);
  uintptr_t ptr = 0;
  ++st.backend_allocs;
  *err = backend.allocate(r.alloc_size, &ptr);
  if (*err != 0) return nullptr;
  Segment* s = new Segment();
  s->base = ptr;
  s->size = r.alloc_size;
  s->stream = r.stream;
  s->kind = r.pool->kind;
  Block* b = new_block();
  b->addr = ptr;
  b->size = r.alloc_size;
  b->stream = r.stream;
  b->seg = s;
  s->head = b;
  segments.emplace(ptr, s);
  st.reserved += r.alloc_size;
  emit(Action::SegmentAlloc, ptr, r.alloc_size, r.alloc_size, r.stream);
  return b;
}

bool CachingAllocator::Impl::should_split(const Block* b, size_t rounded) const {
  const size_t remaining = b->size - rounded;
  if (b->seg->kind == PoolKind::Small || expandable) return remaining >= kMinBlockSize;
  return rounded < conf.max_split_size && remaining > kSmallSize;
}

uintptr_t CachingAllocator::Impl::hand_out(Block* b, Request& r) {
  if (should_split(b, r.rounded)) {
    // The caller gets the front; the rest stays free (same Block object, reinserted).
    Block* a = new_block();
    a->addr = b->addr;
    a->size = r.rounded;
    a->stream = b->stream;
    a->seg = b->seg;
    a->prev = b->prev;
    if (a->prev) a->prev->next = a;
    else b->seg->head = a;
    a->next = b;
    b->prev = a;
    b->addr += r.rounded;
    b->size -= r.rounded;
    free_insert(*r.pool, b);
    b = a;
  }
  b->state = State::Allocated;
  b->requested = r.size;
  live.put(b->addr, b);
  st.allocated += b->size;
  st.requested += r.size;
  ++st.num_mallocs;
  note_peaks();
  emit(Action::Alloc, b->addr, r.size, b->size, r.stream);
  return b->addr;
}

MallocResult CachingAllocator::Impl::malloc(size_t size, uintptr_t stream, std::unique_lock<SleepingLock>& lk) {
  Request r;
  r.size = size;
  r.stream = stream;
  if (size > kMaxRequest) {  // rounding would overflow; no device has this much
    r.rounded = size;
    return oom(r, backend.out_of_memory_error());
  }
  r.rounded = round_size(conf, size);
  r.alloc_size = segment_size(r.rounded);
  r.pool = &pool_of(r.rounded <= kSmallSize ? PoolKind::Small : PoolKind::Large);

  Block* b = find_cached(r);
  // A miss: the pending batch may hold what is needed; one synchronize settles all of it.
  // (A few rounds at most: another thread's flush may be under way, and frees go on meanwhile.)
  for (int round = 0; !b && round < 3 && (flushing || !pending.empty()); ++round) {
    flush_pending(lk);
    b = find_cached(r);
  }
  if (b) {
    ++st.num_cache_hits;
    return {hand_out(b, r), 0};
  }
  if (gc_enabled()) garbage_collect();
  int err = 0;
  b = alloc_block(r, false, &err);
  if (!b && backend.is_out_of_memory(err)) {
    if (release_available_cached_blocks(r)) b = alloc_block(r, false, &err);
    if (!b && backend.is_out_of_memory(err)) {
      release_cached_blocks();
      b = alloc_block(r, true, &err);
    }
  }
  if (!b) return backend.is_out_of_memory(err) ? oom(r, err) : MallocResult{0, err};
  return {hand_out(b, r), 0};
}

MallocResult CachingAllocator::Impl::oom(const Request& r, int err) {
  ++st.num_ooms;
  size_t free_b = 0, total_b = 0;
  backend.mem_get_info(&free_b, &total_b);
  if (listener) {
    AllocatorEvent e;
    e.action = Action::Oom;
    e.size = r.rounded;
    e.stream = r.stream;
    e.device_free = free_b;
    e.error = err;
    listener->on_event(e);
  }
  return {0, err};
}

MallocResult CachingAllocator::malloc(size_t size, uintptr_t stream) {
  std::unique_lock<SleepingLock> lk(impl_->mu);
  return impl_->malloc(size, stream, lk);
}

}  // namespace memtrace::caching
