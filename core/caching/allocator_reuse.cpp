// Reuse bins (docs/caching-allocator.md, "Reuse bins"): with deferred frees, a settled small
// block is kept whole in a bin of its size instead of being merged, and the next request of that
// size takes it back without a search, a split or a merge. Whatever the bins hold is merged back
// before the allocator would settle a batch, take new memory or give memory back, so they never
// make the footprint grow.
#include "core/caching/allocator_impl.hpp"

namespace memtrace::caching {

Block* CachingAllocator::Impl::reuse_take(const Request& r) {
  if (binned == 0) return nullptr;
  for (ReuseBin& bin : bins) {
    if (bin.size != r.rounded || bin.stream != r.stream || bin.blocks.empty()) continue;
    Block* b = bin.blocks.back();
    bin.blocks.pop_back();
    --binned;
    return b;
  }
  return nullptr;
}

bool CachingAllocator::Impl::reuse_keep(Block* b) {
  if (b->seg->kind != PoolKind::Small) return false;
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
  ++binned;
  return true;
}

void CachingAllocator::Impl::reuse_drain() {
  if (binned == 0) return;
  for (ReuseBin& bin : bins) {
    // A neighbour still binned is not merged with (it is not Free); it merges in turn when its
    // own bin is drained.
    for (Block* b : bin.blocks) put_free(b);
    bin.blocks.clear();
  }
  binned = 0;
}

Block* CachingAllocator::Impl::find_cached(Request& r) {
  if (Block* b = reuse_take(r)) return b;
  Block* b = get_free_block(r);
  // Bins hold small-pool blocks only: draining them cannot serve a large request.
  if (b || binned == 0 || r.pool->kind != PoolKind::Small) return b;
  reuse_drain();
  return get_free_block(r);
}

}  // namespace memtrace::caching
