// What the allocator holds, read under its lock: the live block at an address, segment views
// (docs/caching-allocator.md, "Expandable segments": a contiguous mapped range is a segment of its
// own), statistics, and the invariant check the tests run after every step.
#include "core/caching/allocator_impl.hpp"

#include <algorithm>
#include <cstdio>

namespace memtrace::caching {

const Segment* CachingAllocator::Impl::segment_at(uintptr_t ptr) const {
  auto it = segments.upper_bound(ptr);
  if (it == segments.begin()) return nullptr;
  --it;
  const Segment* s = it->second;
  return ptr < s->base + s->size ? s : nullptr;
}

BlockInfo CachingAllocator::Impl::info_of(const Block* b) const {
  BlockInfo i;
  i.base = b->addr;
  i.size = b->size;
  i.requested_size = b->requested;
  i.stream = b->stream;
  const Segment* s = b->seg;
  if (!s->expandable) {
    i.segment_base = s->base;
    i.segment_size = s->size;
  } else {
    const Block* lo = b;
    while (lo->prev && lo->prev->mapped) lo = lo->prev;
    size_t len = 0;
    for (const Block* x = lo; x && x->mapped; x = x->next) len += x->size;
    i.segment_base = lo->addr;
    i.segment_size = len;
  }
  return i;
}

std::optional<BlockInfo> CachingAllocator::Impl::block_of(uintptr_t ptr) const {
  if (Block** b = live.find(ptr)) return info_of(*b);
  const Segment* s = segment_at(ptr);
  if (!s) return std::nullopt;
  for (const Block* b = s->head; b; b = b->next) {
    if (ptr < b->addr) break;
    if (ptr < b->addr + b->size) {
      if (b->state == State::Allocated) return info_of(b);
      return std::nullopt;
    }
  }
  return std::nullopt;
}

BlockView CachingAllocator::Impl::view_of(const Block* b) {
  BlockView v;
  v.address = b->addr;
  v.size = b->size;
  v.requested_size = b->requested;
  v.allocated = b->state == State::Allocated;
  v.pending_free = b->state == State::Pending;
  return v;
}

std::vector<SegmentView> CachingAllocator::Impl::segment_views() const {
  std::vector<SegmentView> out;
  for (const auto& [base, s] : segments) {
    if (!s->expandable) {
      SegmentView v;
      v.address = s->base;
      v.total_size = s->size;
      v.stream = s->stream;
      v.pool = s->kind;
      for (const Block* b = s->head; b; b = b->next) v.blocks.push_back(view_of(b));
      out.push_back(std::move(v));
      continue;
    }
    // Each contiguous mapped range is a segment of its own (docs/caching-allocator.md, "Expandable
    // segments").
    for (const Block* b = s->head; b;) {
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      SegmentView v;
      v.address = b->addr;
      v.stream = s->stream;
      v.pool = s->kind;
      v.is_expandable = true;
      for (; b && b->mapped; b = b->next) {
        v.total_size += b->size;
        v.blocks.push_back(view_of(b));
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::string CachingAllocator::Impl::check() const {
  std::string out;
  auto bad = [&](const std::string& s) { out += s + "\n"; };
  auto hex = [](uintptr_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  size_t reserved = 0, allocated = 0, requested = 0, pending_bytes = 0;
  size_t n_free[2] = {0, 0}, n_unmapped[2] = {0, 0}, n_alloc = 0, n_pending = 0, n_binned = 0;
  for (const auto& [base, s] : segments) {
    if (base != s->base) bad("segment map key differs from base " + hex(s->base));
    const Block* b = s->head;
    if (!b) { bad("segment " + hex(s->base) + " has no blocks"); continue; }
    if (b->prev) bad("segment " + hex(s->base) + ": head has a predecessor");
    uintptr_t at = s->base;
    const int pi = s->kind == PoolKind::Small ? 0 : 1;
    const Pool& p = pools[pi];
    for (; b; b = b->next) {
      if (b->seg != s) bad("block " + hex(b->addr) + " names another segment");
      if (b->addr != at) bad("segment " + hex(s->base) + ": gap or overlap at " + hex(at) + " (block at " + hex(b->addr) + ")");
      if (b->size == 0) bad("empty block at " + hex(b->addr));
      if (b->next && b->next->prev != b) bad("broken back link after " + hex(b->addr));
      if (b->stream != s->stream) bad("block " + hex(b->addr) + " on another stream than its segment");
      if (b->mapped) {
        if (s->expandable) reserved += b->size;
      } else {
        if (!s->expandable) bad("unmapped block in a plain segment at " + hex(b->addr));
        if ((b->addr - s->base) % s->page || b->size % s->page) bad("unmapped block not page aligned at " + hex(b->addr));
        if (b->state != State::Free) bad("unmapped block in use at " + hex(b->addr));
      }
      switch (b->state) {
        case State::Free:
          if (b->mapped) {
            ++n_free[pi];
            if (!p.free.count(const_cast<Block*>(b))) bad("free block " + hex(b->addr) + " missing from its pool's free set");
          } else {
            ++n_unmapped[pi];
            if (!p.unmapped.count(const_cast<Block*>(b))) bad("unmapped block " + hex(b->addr) + " missing from the unmapped set");
          }
          if (b->next && b->next->state == State::Free && b->next->mapped == b->mapped)
            bad("adjacent free blocks left unmerged at " + hex(b->addr));
          break;
        case State::Allocated: {
          ++n_alloc;
          allocated += b->size;
          requested += b->requested;
          Block** l = live.find(b->addr);
          if (!l || *l != b) bad("allocated block " + hex(b->addr) + " not in the live map");
          break;
        }
        case State::Binned: {
          ++n_binned;
          bool found = false;
          for (const ReuseBin& bin : bins)
            if (bin.size == b->size && bin.stream == b->stream &&
                std::find(bin.blocks.begin(), bin.blocks.end(), b) != bin.blocks.end())
              found = true;
          if (!found) bad("binned block " + hex(b->addr) + " in no bin of its size");
          if (!reuse || s->kind != PoolKind::Small) bad("block " + hex(b->addr) + " binned where reuse bins are off");
          break;
        }
        case State::Pending:
          ++n_pending;
          pending_bytes += b->size;
          if (std::find(pending.begin(), pending.end(), b) == pending.end() &&
              std::find(in_flight.begin(), in_flight.end(), b) == in_flight.end())
            bad("pending block " + hex(b->addr) + " in no batch");
          break;
      }
      at += b->size;
    }
    if (at != s->base + s->size) bad("segment " + hex(s->base) + ": blocks sum to " + std::to_string(at - s->base) + " of " + std::to_string(s->size));
    if (!s->expandable) reserved += s->size;
  }
  for (int i = 0; i < 2; ++i) {
    if (pools[i].free.size() != n_free[i]) bad("pool " + std::to_string(i) + ": free set holds " + std::to_string(pools[i].free.size()) + " blocks, segments have " + std::to_string(n_free[i]));
    if (pools[i].unmapped.size() != n_unmapped[i]) bad("pool " + std::to_string(i) + ": unmapped set size mismatch");
    for (const Block* b : pools[i].free)
      if (b->state != State::Free || !b->mapped || (b->seg->kind == PoolKind::Small) != (i == 0)) bad("free set of pool " + std::to_string(i) + " holds a wrong block at " + hex(b->addr));
  }
  size_t in_bins = 0;
  for (const ReuseBin& bin : bins) in_bins += bin.blocks.size();
  if (in_bins != n_binned || binned != n_binned) bad("reuse bins hold " + std::to_string(in_bins) + " blocks (counted " + std::to_string(binned) + "), segments have " + std::to_string(n_binned) + " binned");
  if (live.size() != n_alloc) bad("live map holds " + std::to_string(live.size()) + " blocks, segments have " + std::to_string(n_alloc) + " allocated");
  if (pending.size() + in_flight.size() != n_pending) bad("pending batch holds " + std::to_string(pending.size()) + ", segments have " + std::to_string(n_pending));
  if (st.reserved != reserved) bad("stats.reserved " + std::to_string(st.reserved) + " != " + std::to_string(reserved));
  if (st.allocated != allocated) bad("stats.allocated " + std::to_string(st.allocated) + " != " + std::to_string(allocated));
  if (st.requested != requested) bad("stats.requested " + std::to_string(st.requested) + " != " + std::to_string(requested));
  if (st.pending_free != pending_bytes) bad("stats.pending_free " + std::to_string(st.pending_free) + " != " + std::to_string(pending_bytes));
  if (st.peak_reserved < st.reserved || st.peak_allocated < st.allocated) bad("a peak is below the current value");
  if (limit_set && st.reserved > allowed_max) bad("reserved exceeds the memory fraction's limit");
  return out;
}

std::optional<BlockInfo> CachingAllocator::block_of(uintptr_t ptr) const {
  std::lock_guard<SleepingLock> g(impl_->mu);
  return impl_->block_of(ptr);
}
bool CachingAllocator::owns(uintptr_t ptr) const {
  std::lock_guard<SleepingLock> g(impl_->mu);
  return impl_->segment_at(ptr) != nullptr;
}
std::vector<SegmentView> CachingAllocator::segments() const {
  std::lock_guard<SleepingLock> g(impl_->mu);
  return impl_->segment_views();
}
Stats CachingAllocator::stats() const {
  std::lock_guard<SleepingLock> g(impl_->mu);
  Stats s = impl_->st;
  for (const Pool& p : impl_->pools)
    for (const Block* b : p.free) s.largest_free_block = std::max(s.largest_free_block, b->size);
  for (const ReuseBin& bin : impl_->bins)
    if (!bin.blocks.empty()) s.largest_free_block = std::max(s.largest_free_block, bin.size);
  return s;
}
std::string CachingAllocator::check_invariants() const {
  std::lock_guard<SleepingLock> g(impl_->mu);
  return impl_->check();
}

}  // namespace memtrace::caching
