// Expandable segments (docs/caching-allocator.md, "Expandable segments"): one reservation per stream
// and pool, backed page by page as requests need it; with memtrace_policy:remap, idle pages are
// unmapped before new ones are mapped.
#include "core/caching/allocator_impl.hpp"

#include <algorithm>
#include <utility>

namespace memtrace::caching {

size_t CachingAllocator::Impl::page_size(PoolKind k) const {
  if (k == PoolKind::Small || remap) return kSmallBuffer;
  return round_up(conf.large_segment_size, kSmallBuffer);
}

Block* CachingAllocator::Impl::find_expandable_block(Request& r, int* err) {
  Pool& p = *r.pool;
  auto has_space = [&](Block* b) {
    size_t bytes = 0;
    while (bytes < r.rounded && allocatable(b)) bytes += b->size, b = b->next;
    return bytes >= r.rounded;
  };
  Block key;
  key.stream = r.stream;
  key.addr = 0;
  for (auto it = p.unmapped.lower_bound(&key); it != p.unmapped.end() && (*it)->stream == r.stream; ++it) {
    Block* c = *it;
    if (allocatable(c->prev)) c = c->prev;
    if (has_space(c)) return c;
  }
  const size_t page = page_size(p.kind);
  size_t want = device_total ? device_total + device_total / 8 : size_t{64} << 30;
  want = round_up(std::max(want, r.rounded), page);
  uintptr_t base = 0;
  ++st.backend_reserves;
  *err = backend.reserve(want, &base);
  if (*err != 0) return nullptr;
  Segment* s = new Segment();
  s->base = base;
  s->size = want;
  s->stream = r.stream;
  s->kind = p.kind;
  s->expandable = true;
  s->page = page;
  Block* u = new_block();
  u->addr = base;
  u->size = want;
  u->stream = r.stream;
  u->seg = s;
  u->mapped = false;
  s->head = u;
  segments.emplace(base, s);
  p.unmapped.insert(u);
  return u;
}

Block* CachingAllocator::Impl::map_block(Block* u, size_t bytes, int* err) {
  Segment* s = u->seg;
  Pool& p = pool_of(s->kind);
  const size_t len = std::min(round_up(bytes, s->page), u->size);
  ++st.backend_maps;
  *err = backend.map(s->base, u->addr - s->base, len);
  if (*err != 0) return nullptr;
  p.unmapped.erase(u);
  const uintptr_t start = u->addr;
  u->mapped = true;
  if (len < u->size) {
    Block* rest = new_block();
    rest->addr = u->addr + len;
    rest->size = u->size - len;
    rest->stream = u->stream;
    rest->seg = s;
    rest->mapped = false;
    rest->prev = u;
    rest->next = u->next;
    if (rest->next) rest->next->prev = rest;
    u->next = rest;
    u->size = len;
    p.unmapped.insert(rest);
  }
  try_merge(u, u->prev);
  try_merge(u, u->next);
  u->gc_base = p.searches;
  free_insert(p, u);
  st.reserved += len;
  emit(Action::SegmentMap, start, len, len, s->stream);
  return u;
}

size_t CachingAllocator::Impl::unmap_block(Block* b) {
  Segment* s = b->seg;
  Pool& p = pool_of(s->kind);
  const uintptr_t start = s->base + round_up(b->addr - s->base, s->page);
  const uintptr_t end = s->base + (b->addr + b->size - s->base) / s->page * s->page;
  if (end <= start) return 0;
  ++st.backend_unmaps;
  if (backend.unmap(s->base, start - s->base, end - start) != 0) return 0;
  free_erase(p, b);
  if (start > b->addr) {
    Block* f = new_block();
    f->addr = b->addr;
    f->size = start - b->addr;
    f->stream = b->stream;
    f->seg = s;
    f->gc_base = b->gc_base;
    f->prev = b->prev;
    f->next = b;
    if (f->prev) f->prev->next = f;
    else s->head = f;
    b->prev = f;
    free_insert(p, f);
  }
  if (b->addr + b->size > end) {
    Block* f = new_block();
    f->addr = end;
    f->size = b->addr + b->size - end;
    f->stream = b->stream;
    f->seg = s;
    f->gc_base = b->gc_base;
    f->prev = b;
    f->next = b->next;
    if (f->next) f->next->prev = f;
    b->next = f;
    free_insert(p, f);
  }
  b->addr = start;
  b->size = end - start;
  b->mapped = false;
  try_merge(b, b->prev);
  try_merge(b, b->next);
  p.unmapped.insert(b);
  st.reserved -= end - start;
  emit(Action::SegmentUnmap, start, end - start, end - start, s->stream);
  return end - start;
}

void CachingAllocator::Impl::release_reservation_if_empty(Segment* s) {
  Block* u = s->head;
  if (!u || u->next || u->mapped || u->state != State::Free) return;
  pool_of(s->kind).unmapped.erase(u);
  ++st.backend_releases;
  backend.release(s->base, s->size);
  segments.erase(s->base);
  drop_block(u);
  delete s;
}

void CachingAllocator::Impl::unmap_all_mapped(Segment* s) {
  for (Block* b = s->head; b;) {
    if (!b->mapped) {
      b = b->next;
      continue;
    }
    Block* e = b;
    size_t len = 0;
    while (e && e->mapped) len += e->size, e = e->next;
    backend.unmap(s->base, b->addr - s->base, len);
    b = e;
  }
}

size_t CachingAllocator::Impl::bytes_to_map(Block* c, size_t size) const {
  size_t have = 0, map = 0;
  for (Block* b = c; b && have < size; b = b->next) {
    if (b->mapped) {
      have += b->size;
    } else {
      size_t m = std::min(round_up(size - have, b->seg->page), b->size);
      map += m;
      have += m;
    }
  }
  return map;
}

// memtrace_policy:remap: before mapping new pages, give back whole free pages of cached holes
// elsewhere in this pool (any stream: physical memory is shared) - at least as many bytes as
// are about to be mapped, largest holes first - so the new pages replace idle ones.
void CachingAllocator::Impl::remap_reclaim(Block* run, size_t need) {
  Pool& p = pool_of(run->seg->kind);
  std::vector<std::pair<size_t, Block*>> cands;
  for (Block* b : p.free) {
    if (!b->seg->expandable) continue;
    // Not the run the request is about to use.
    bool in_run = false;
    for (Block* x = run; x && allocatable(x); x = x->next)
      if (x == b) in_run = true;
    if (in_run) continue;
    const size_t page = b->seg->page;
    const size_t lo = round_up(b->addr - b->seg->base, page);
    const size_t hi = (b->addr + b->size - b->seg->base) / page * page;
    if (hi > lo) cands.emplace_back(hi - lo, b);
  }
  std::sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->addr < b.second->addr;
  });
  size_t got = 0;
  for (auto& [bytes, b] : cands) {
    if (got >= need) break;
    got += unmap_block(b);
  }
}

Block* CachingAllocator::Impl::allocate_expandable(Request& r, int* err) {
  Block* c = find_expandable_block(r, err);
  if (!c) return nullptr;
  if (remap) {
    const size_t need = bytes_to_map(c, r.rounded);
    if (need > 0) {
      remap_reclaim(c, need);
      c = find_expandable_block(r, err);  // a hole just unmapped may now be the lowest fit
      if (!c) return nullptr;
    }
  }
  if (!c->mapped) {
    c = map_block(c, std::min(c->size, r.rounded), err);
    if (!c) return nullptr;
  }
  while (c->size < r.rounded) {
    Block* n = c->next;  // free -> unmapped, by construction of the run
    c = map_block(n, std::min(r.rounded - c->size, n->size), err);
    if (!c) return nullptr;
  }
  free_erase(*r.pool, c);
  return c;
}

}  // namespace memtrace::caching
