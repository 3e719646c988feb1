// CachingAllocator::free: a block back to its pool, merged with free neighbours, at once or (with
// deferred frees, the default) once a synchronize that began after its free has returned.
#include "core/caching/allocator_impl.hpp"

namespace memtrace::caching {

void CachingAllocator::Impl::try_merge(Block* dst, Block* src) {
  if (!src || src->state != State::Free || src->mapped != dst->mapped) return;
  Pool& p = pool_of(dst->seg->kind);
  if (src->mapped) free_erase(p, src);
  else p.unmapped.erase(src);
  if (src == dst->prev) {
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    else dst->seg->head = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  drop_block(src);
}

void CachingAllocator::Impl::complete_free(Block* b, bool same_settle) {
  emit(Action::FreeCompleted, b->addr, b->requested, b->size, b->stream, same_settle);
  b->requested = 0;
  if (reuse && reuse_keep(b)) return;
  put_free(b);
}

void CachingAllocator::Impl::put_free(Block* b) {
  b->state = State::Free;
  try_merge(b, b->prev);
  try_merge(b, b->next);
  Pool& p = pool_of(b->seg->kind);
  b->gc_base = p.searches;
  free_insert(p, b);
}

// Settles the pending batch with one synchronize, run WITHOUT the lock: a busy device can take
// long to drain, and other threads' cache hits and frees must not wait for it. The batch is
// moved aside first (its blocks stay Pending, so nothing touches them); frees made meanwhile
// start the next batch. A thread that finds a flush under way waits for it instead of
// synchronizing again.
void CachingAllocator::Impl::flush_pending(std::unique_lock<SleepingLock>& lk) {
  if (flushing) {
    flush_done.wait(lk, [&] { return !flushing; });
    return;
  }
  if (pending.empty()) return;
  flushing = true;
  in_flight.swap(pending);
  ++st.backend_syncs;
  lk.unlock();
  backend.synchronize();
  lk.lock();
  for (Block* b : in_flight) {
    st.pending_free -= b->size;
    complete_free(b, b != in_flight.front());
  }
  in_flight.clear();
  flushing = false;
  flush_done.notify_all();
}

void CachingAllocator::Impl::complete_pending() {
  for (Block* b : pending) {
    st.pending_free -= b->size;
    complete_free(b, b != pending.front());
  }
  pending.clear();
}

bool CachingAllocator::Impl::free(uintptr_t ptr, std::unique_lock<SleepingLock>& lk) {
  Block* b = nullptr;
  if (!live.take(ptr, &b)) return false;
  st.allocated -= b->size;
  st.requested -= b->requested;
  ++st.num_frees;
  emit(Action::FreeRequested, b->addr, b->requested, b->size, b->stream);
  if (!conf.deferred_free) {
    complete_free(b);
    return true;
  }
  b->state = State::Pending;
  pending.push_back(b);
  st.pending_free += b->size;
  if (conf.free_batch_bytes && !flushing && st.pending_free >= conf.free_batch_bytes) flush_pending(lk);
  return true;
}

bool CachingAllocator::free(uintptr_t ptr) {
  std::unique_lock<SleepingLock> lk(impl_->mu);
  return impl_->free(ptr, lk);
}
void CachingAllocator::flush_pending_frees() {
  std::unique_lock<SleepingLock> lk(impl_->mu);
  impl_->flush_pending(lk);  // waits for a flush under way, if any
  impl_->flush_pending(lk);  // then settles what is pending now
}

}  // namespace memtrace::caching
