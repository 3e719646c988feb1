// The caching allocator's policy (docs/caching-allocator.md, "PyTorch's policy, and what memtrace
// adds") and memtrace's deferred frees.
// Data layout: every segment (a driver allocation, or an expandable reservation) is a doubly linked
// list of blocks tiling it. Free mapped blocks sit in their pool's set ordered by
// (stream, size, address) for best fit; unmapped pieces of reservations in a set ordered by
// (stream, address); blocks held by callers in a hash map by address; freed blocks waiting for a
// synchronize in a vector.
#include "core/caching/caching_allocator.hpp"

#include <algorithm>
#include <map>
#include <condition_variable>
#include <mutex>
#include <set>

#include "core/addr_map.hpp"

namespace memtrace::caching {

namespace {

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 * kMiB;
constexpr size_t kSmallBuffer = 2 * kMiB;
constexpr size_t kMinLargeAlloc = 10 * kMiB;
constexpr size_t kRoundLarge = 2 * kMiB;
constexpr size_t kMaxRequest = size_t{1} << 60;

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

enum class State : uint8_t { Free, Allocated, Pending };

struct Segment;

struct Block {
  uintptr_t addr = 0;
  size_t size = 0;
  size_t requested = 0;
  uintptr_t stream = 0;
  Segment* seg = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  uint64_t gc_base = 0;  // the pool's search count when it last became free (its age's origin)
  State state = State::Free;
  bool mapped = true;
};

struct Segment {
  uintptr_t base = 0;
  size_t size = 0;  // whole reservation for expandable ones
  uintptr_t stream = 0;
  PoolKind kind = PoolKind::Large;
  bool expandable = false;
  size_t page = 0;  // expandable only
  Block* head = nullptr;
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->addr < b->addr;
  }
};
struct ByAddr {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->addr < b->addr;
  }
};
using FreeSet = std::set<Block*, BySize>;
using UnmappedSet = std::set<Block*, ByAddr>;

struct Pool {
  PoolKind kind;
  FreeSet free;          // free, mapped blocks
  UnmappedSet unmapped;  // unmapped pieces of expandable reservations
  uint64_t searches = 0; // garbage collection's clock
};

// One malloc's numbers.
struct Request {
  size_t size;        // as asked
  size_t rounded;     // docs/caching-allocator.md, "Request rounding"
  size_t alloc_size;  // segment size: docs/caching-allocator.md, "Pools and segment sizes"
  uintptr_t stream;
  Pool* pool;
};

}  // namespace

struct CachingAllocator::Impl {
  Impl(Backend& b, AllocConf c, Listener* l) : backend(b), conf(std::move(c)), listener(l) {
    pools[0].kind = PoolKind::Small;
    pools[1].kind = PoolKind::Large;
    size_t free_b = 0;
    if (backend.mem_get_info(&free_b, &device_total) != 0) device_total = 0;
    if (conf.per_process_memory_fraction) {
      limit_set = true;
      allowed_max = static_cast<size_t>(*conf.per_process_memory_fraction * static_cast<double>(device_total));
    }
    expandable = (conf.expandable_segments || conf.policy == Policy::Remap) && backend.supports_expandable();
    remap = expandable && conf.policy == Policy::Remap;
  }

  ~Impl() {
    // Everything goes back, whatever its state: the owner is done with the device memory.
    for (auto& [base, s] : segments) {
      if (!s->expandable) {
        backend.free(s->base, s->size);
      } else {
        unmap_all_mapped(s);
        backend.release(s->base, s->size);
      }
      for (Block* b = s->head; b;) {
        Block* n = b->next;
        delete b;
        b = n;
      }
      delete s;
    }
    for (Block* b : block_cache) delete b;
  }

  Backend& backend;
  AllocConf conf;
  Listener* listener;
  mutable std::mutex mu;

  Pool pools[2];
  std::map<uintptr_t, Segment*> segments;
  mutable AddrMap<Block*> live;
  std::vector<Block*> pending;
  std::vector<Block*> in_flight;  // the batch a flush is synchronizing for, lock released
  bool flushing = false;
  std::condition_variable flush_done;
  std::vector<FreeSet::node_type> spare_nodes;  // set nodes kept for reuse: no heap traffic on hits
  std::vector<Block*> block_cache;

  size_t device_total = 0;
  bool limit_set = false;
  size_t allowed_max = SIZE_MAX;
  bool expandable = false;
  bool remap = false;

  Stats st;

  // ---- small helpers ----

  bool gc_enabled() const { return limit_set && conf.garbage_collection_threshold > 0; }
  Pool& pool_of(PoolKind k) { return pools[k == PoolKind::Small ? 0 : 1]; }

  void emit(Action a, uintptr_t addr, size_t size, size_t block_size, uintptr_t stream) {
    if (!listener) return;
    AllocatorEvent e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.block_size = block_size;
    e.stream = stream;
    listener->on_event(e);
  }

  Block* new_block() {
    if (block_cache.empty()) return new Block();
    Block* b = block_cache.back();
    block_cache.pop_back();
    *b = Block();
    return b;
  }
  void drop_block(Block* b) {
    if (block_cache.size() < 4096) block_cache.push_back(b);
    else delete b;
  }

  void free_insert(Pool& p, Block* b) {
    if (!spare_nodes.empty()) {
      FreeSet::node_type nh = std::move(spare_nodes.back());
      spare_nodes.pop_back();
      nh.value() = b;
      p.free.insert(std::move(nh));
    } else {
      p.free.insert(b);
    }
  }
  void free_erase(Pool& p, FreeSet::iterator it) {
    FreeSet::node_type nh = p.free.extract(it);
    if (spare_nodes.size() < 64) spare_nodes.push_back(std::move(nh));
  }
  void free_erase(Pool& p, Block* b) {
    auto it = p.free.find(b);
    if (it != p.free.end()) free_erase(p, it);
  }

  // Puts `src` (a free neighbour with the same mapped state) into `dst`. `dst` is in no set.
  void try_merge(Block* dst, Block* src) {
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

  // A block becomes free: merged with its neighbours and put back for reuse (docs/caching-allocator.md,
  // "Freeing and coalescing").
  void complete_free(Block* b) {
    emit(Action::FreeCompleted, b->addr, b->requested, b->size, b->stream);
    b->state = State::Free;
    b->requested = 0;
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
  void flush_pending(std::unique_lock<std::mutex>& lk) {
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
      complete_free(b);
    }
    in_flight.clear();
    flushing = false;
    flush_done.notify_all();
  }
  // After a synchronize (under the lock) that started after every pending free.
  void complete_pending() {
    for (Block* b : pending) {
      st.pending_free -= b->size;
      complete_free(b);
    }
    pending.clear();
  }

  void note_peaks() {
    if (st.reserved > st.peak_reserved) {
      st.peak_reserved = st.reserved;
      st.allocated_at_peak_reserved = st.allocated;
    } else if (st.reserved == st.peak_reserved && st.allocated > st.allocated_at_peak_reserved) {
      st.allocated_at_peak_reserved = st.allocated;
    }
    if (st.allocated > st.peak_allocated) st.peak_allocated = st.allocated;
  }

  // ---- docs/caching-allocator.md, "Pools and segment sizes" ----
  size_t segment_size(size_t rounded) const {
    if (rounded <= kSmallSize) return kSmallBuffer;
    if (rounded < kMinLargeAlloc) return std::max(conf.large_segment_size, round_up(rounded, kRoundLarge));
    return round_up(rounded, kRoundLarge);
  }
  size_t page_size(PoolKind k) const {
    if (k == PoolKind::Small || remap) return kSmallBuffer;
    return round_up(conf.large_segment_size, kSmallBuffer);
  }

  // ---- docs/caching-allocator.md, "Best-fit search" ----
  Block* get_free_block(Request& r) {
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

  // ---- new memory ----
  Block* alloc_block(Request& r, bool is_retry, int* err) {
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

  // Gives a whole-segment free block's segment back (the release paths of docs/caching-allocator.md,
  // "When the device is full: release and retry"; GC; empty_cache).
  void release_segment(Block* b) {
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
  static bool whole_segment(const Block* b) { return !b->prev && !b->next; }

  // docs/caching-allocator.md, "When the device is full: release and retry", step 4: free one
  // oversize cached block big enough, or the largest ones until enough bytes went back.
  bool release_available_cached_blocks(Request& r) {
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
  void release_cached_blocks() {
    backend.synchronize();
    ++st.backend_syncs;
    complete_pending();
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
  void garbage_collect() {
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

  // ---- expandable segments: docs/caching-allocator.md, "Expandable segments" ----
  static bool allocatable(const Block* b) { return b && b->state == State::Free; }

  // The lowest-address run of free-or-unmapped space on this stream that fits `size`; a new
  // reservation when none does.
  Block* find_expandable_block(Request& r, int* err) {
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

  // Backs the first `bytes` (rounded up to pages) of unmapped block `u`; the mapped part merges
  // with free neighbours and goes into the free set. Returns the merged block, or null.
  Block* map_block(Block* u, size_t bytes, int* err) {
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

  // Unmaps the whole pages inside free mapped block `b`; returns the bytes unmapped.
  size_t unmap_block(Block* b) {
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

  void release_reservation_if_empty(Segment* s) {
    Block* u = s->head;
    if (!u || u->next || u->mapped || u->state != State::Free) return;
    pool_of(s->kind).unmapped.erase(u);
    ++st.backend_releases;
    backend.release(s->base, s->size);
    segments.erase(s->base);
    drop_block(u);
    delete s;
  }

  void unmap_all_mapped(Segment* s) {
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

  // Bytes that placing the request at `c` would map.
  size_t bytes_to_map(Block* c, size_t size) const {
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
  void remap_reclaim(Block* run, size_t need) {
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

  Block* allocate_expandable(Request& r, int* err) {
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

  // ---- docs/caching-allocator.md, "Splitting", and the hand-out ----
  bool should_split(const Block* b, size_t rounded) const {
    const size_t remaining = b->size - rounded;
    if (b->seg->kind == PoolKind::Small || expandable) return remaining >= kMinBlockSize;
    return rounded < conf.max_split_size && remaining > kSmallSize;
  }

  uintptr_t hand_out(Block* b, Request& r) {
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

  MallocResult malloc(size_t size, uintptr_t stream, std::unique_lock<std::mutex>& lk) {
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

    Block* b = get_free_block(r);
    // A miss: the pending batch may hold what is needed; one synchronize settles all of it.
    // (A few rounds at most: another thread's flush may be under way, and frees go on meanwhile.)
    for (int round = 0; !b && round < 3 && (flushing || !pending.empty()); ++round) {
      flush_pending(lk);
      b = get_free_block(r);
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

  // docs/caching-allocator.md, "When the device is full: release and retry", step 6: the caller
  // gets the backend's code; the trace gets an oom entry.
  MallocResult oom(const Request& r, int err) {
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

  bool free(uintptr_t ptr, std::unique_lock<std::mutex>& lk) {
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

  // ---- queries ----
  const Segment* segment_at(uintptr_t ptr) const {
    auto it = segments.upper_bound(ptr);
    if (it == segments.begin()) return nullptr;
    --it;
    const Segment* s = it->second;
    return ptr < s->base + s->size ? s : nullptr;
  }

  BlockInfo info_of(const Block* b) const {
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

  std::optional<BlockInfo> block_of(uintptr_t ptr) const {
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

  static BlockView view_of(const Block* b) {
    BlockView v;
    v.address = b->addr;
    v.size = b->size;
    v.requested_size = b->requested;
    v.allocated = b->state == State::Allocated;
    v.pending_free = b->state == State::Pending;
    return v;
  }

  std::vector<SegmentView> segment_views() const {
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

  std::string check() const;
};

std::string CachingAllocator::Impl::check() const {
  std::string out;
  auto bad = [&](const std::string& s) { out += s + "\n"; };
  auto hex = [](uintptr_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  size_t reserved = 0, allocated = 0, requested = 0, pending_bytes = 0;
  size_t n_free[2] = {0, 0}, n_unmapped[2] = {0, 0}, n_alloc = 0, n_pending = 0;
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

// ---- public face ----

CachingAllocator::CachingAllocator(Backend& backend, AllocConf conf, Listener* listener)
    : impl_(std::make_unique<Impl>(backend, std::move(conf), listener)) {}
CachingAllocator::~CachingAllocator() = default;

MallocResult CachingAllocator::malloc(size_t size, uintptr_t stream) {
  std::unique_lock<std::mutex> lk(impl_->mu);
  return impl_->malloc(size, stream, lk);
}
bool CachingAllocator::free(uintptr_t ptr) {
  std::unique_lock<std::mutex> lk(impl_->mu);
  return impl_->free(ptr, lk);
}
void CachingAllocator::flush_pending_frees() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->flush_pending(lk);  // waits for a flush under way, if any
  impl_->flush_pending(lk);  // then settles what is pending now
}
void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->release_cached_blocks();
}
std::optional<BlockInfo> CachingAllocator::block_of(uintptr_t ptr) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->block_of(ptr);
}
bool CachingAllocator::owns(uintptr_t ptr) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->segment_at(ptr) != nullptr;
}
std::vector<SegmentView> CachingAllocator::segments() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->segment_views();
}
Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  Stats s = impl_->st;
  for (const Pool& p : impl_->pools)
    for (const Block* b : p.free) s.largest_free_block = std::max(s.largest_free_block, b->size);
  return s;
}
std::string CachingAllocator::check_invariants() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->check();
}
const AllocConf& CachingAllocator::conf() const { return impl_->conf; }
bool CachingAllocator::expandable_active() const { return impl_->expandable; }

}  // namespace memtrace::caching
