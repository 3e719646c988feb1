// Internal to the caching allocator: its data layout and CachingAllocator::Impl, whose parts are
//   caching_allocator.cpp    construction and teardown
//   allocator_malloc.cpp     malloc: rounding, best fit, splitting, new segments, out of memory
//   allocator_free.cpp       free: coalescing, the deferred-free batch and its flush
//   allocator_reuse.cpp      reuse bins: settled small blocks handed out again at their size
//   allocator_release.cpp    giving segments back: release and retry, garbage collection, empty_cache
//   allocator_expandable.cpp expandable segments and the remap policy: reserve, map, unmap
//   allocator_inspect.cpp    block_of, owns, segment views, stats and check_invariants
// Not part of memtrace's interface.
//
// Data layout: every segment (a driver allocation, or an expandable reservation) is a doubly linked
// list of blocks tiling it. Free mapped blocks sit in their pool's set ordered by
// (stream, size, address) for best fit; unmapped pieces of reservations in a set ordered by
// (stream, address); blocks held by callers in a hash map by address; freed blocks waiting for a
// synchronize in a vector; settled small blocks kept whole for their next request of that size in
// a few reuse bins (allocator_reuse.cpp).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/addr_map.hpp"
#include "core/spinlock.hpp"
#include "core/caching/caching_allocator.hpp"

namespace memtrace::caching {

namespace detail {

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 * kMiB;
constexpr size_t kSmallBuffer = 2 * kMiB;
constexpr size_t kMinLargeAlloc = 10 * kMiB;
constexpr size_t kRoundLarge = 2 * kMiB;
constexpr size_t kMaxRequest = size_t{1} << 60;

inline size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// Binned: free and settled, but held unmerged in a reuse bin (in no free set), for the next
// request of exactly its size.
enum class State : uint8_t { Free, Allocated, Pending, Binned };

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

// Settled small blocks of one (stream, size), kept whole (docs/caching-allocator.md, "Reuse bins").
struct ReuseBin {
  uintptr_t stream = 0;
  size_t size = 0;
  std::vector<Block*> blocks;
};

// One malloc's numbers.
struct Request {
  size_t size;        // as asked
  size_t rounded;     // docs/caching-allocator.md, "Request rounding"
  size_t alloc_size;  // segment size: docs/caching-allocator.md, "Pools and segment sizes"
  uintptr_t stream;
  Pool* pool;
};

}  // namespace detail

using detail::Block;
using detail::FreeSet;
using detail::kMaxRequest;
using detail::kMinBlockSize;
using detail::kMinLargeAlloc;
using detail::kRoundLarge;
using detail::kSmallBuffer;
using detail::kSmallSize;
using detail::Pool;
using detail::Request;
using detail::ReuseBin;
using detail::round_up;
using detail::Segment;
using detail::State;

struct CachingAllocator::Impl {
  Impl(Backend& b, AllocConf c, Listener* l);
  ~Impl();

  Backend& backend;
  AllocConf conf;
  Listener* listener;
  mutable SleepingLock mu;

  Pool pools[2];
  std::map<uintptr_t, Segment*> segments;
  mutable AddrMap<Block*> live;
  std::vector<Block*> pending;
  std::vector<Block*> in_flight;  // the batch a flush is synchronizing for, lock released
  bool flushing = false;
  std::condition_variable_any flush_done;
  std::vector<FreeSet::node_type> spare_nodes;  // set nodes kept for reuse: no heap traffic on hits
  std::vector<Block*> block_cache;
  // Reuse bins: on with deferred frees in plain segments (set by the constructor). `binned` counts
  // the blocks in all bins, so that a miss with none binned costs nothing.
  bool reuse = false;
  ReuseBin bins[kReuseBins];
  size_t binned = 0;

  size_t device_total = 0;
  bool limit_set = false;
  size_t allowed_max = SIZE_MAX;
  bool expandable = false;
  bool remap = false;

  Stats st;

  // ---- small helpers, inline: every malloc and free runs them ----

  bool gc_enabled() const { return limit_set && conf.garbage_collection_threshold > 0; }
  Pool& pool_of(PoolKind k) { return pools[k == PoolKind::Small ? 0 : 1]; }

  void emit(Action a, uintptr_t addr, size_t size, size_t block_size, uintptr_t stream, bool same_settle = false) {
    if (!listener) return;
    AllocatorEvent e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.block_size = block_size;
    e.stream = stream;
    e.same_settle = same_settle;
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

  void note_peaks() {
    if (st.reserved > st.peak_reserved) {
      st.peak_reserved = st.reserved;
      st.allocated_at_peak_reserved = st.allocated;
    } else if (st.reserved == st.peak_reserved && st.allocated > st.allocated_at_peak_reserved) {
      st.allocated_at_peak_reserved = st.allocated;
    }
    if (st.allocated > st.peak_allocated) st.peak_allocated = st.allocated;
  }
  static bool whole_segment(const Block* b) { return !b->prev && !b->next; }
  static bool allocatable(const Block* b) { return b && b->state == State::Free; }

  // ---- allocator_malloc.cpp ----

  // docs/caching-allocator.md, "Pools and segment sizes"
  size_t segment_size(size_t rounded) const;
  // docs/caching-allocator.md, "Best-fit search"
  Block* get_free_block(Request& r);
  // New memory: a segment from the backend, or space in an expandable reservation.
  Block* alloc_block(Request& r, bool is_retry, int* err);
  // docs/caching-allocator.md, "Splitting", and the hand-out
  bool should_split(const Block* b, size_t rounded) const;
  uintptr_t hand_out(Block* b, Request& r);
  MallocResult malloc(size_t size, uintptr_t stream, std::unique_lock<SleepingLock>& lk);
  // docs/caching-allocator.md, "When the device is full: release and retry", step 6: the caller
  // gets the backend's code; the trace gets an oom entry.
  MallocResult oom(const Request& r, int err);

  // ---- allocator_reuse.cpp: docs/caching-allocator.md, "Reuse bins" ----

  // A binned block of exactly the request's size and stream, taken out of its bin; null if none.
  Block* reuse_take(const Request& r);
  // Keeps settled block `b` whole in the bin of its size; false when it is not a small block or
  // all bins hold other sizes (the caller merges it as usual).
  bool reuse_keep(Block* b);
  // Every binned block merged with its free neighbours and put back into its pool's free set.
  void reuse_drain();
  // The cached block for `r`: a binned one of its size, else best fit, else best fit after the
  // bins are drained (their blocks may merge into one that fits).
  Block* find_cached(Request& r);

  // ---- allocator_free.cpp ----

  // Puts `src` (a free neighbour with the same mapped state) into `dst`. `dst` is in no set.
  void try_merge(Block* dst, Block* src);
  // A block becomes free: merged with its neighbours and put back for reuse (docs/caching-allocator.md,
  // "Freeing and coalescing").
  // same_settle: the synchronize that settled the block before it settled this one too.
  void complete_free(Block* b, bool same_settle = false);
  // Merges `b` (settled, in no set) with its free neighbours into its pool's free set.
  void put_free(Block* b);
  // Settles the pending batch with one synchronize, run WITHOUT the lock (see allocator_free.cpp).
  void flush_pending(std::unique_lock<SleepingLock>& lk);
  // After a synchronize (under the lock) that started after every pending free.
  void complete_pending();
  bool free(uintptr_t ptr, std::unique_lock<SleepingLock>& lk);

  // ---- allocator_release.cpp ----

  // Gives a whole-segment free block's segment back (the release paths of docs/caching-allocator.md,
  // "When the device is full: release and retry"; GC; empty_cache).
  void release_segment(Block* b);
  // docs/caching-allocator.md, "When the device is full: release and retry", step 4.
  bool release_available_cached_blocks(Request& r);
  // docs/caching-allocator.md, "When the device is full: release and retry", step 5, and empty_cache.
  void release_cached_blocks();
  // docs/caching-allocator.md, "Garbage collection".
  void garbage_collect();

  // ---- allocator_expandable.cpp: docs/caching-allocator.md, "Expandable segments" ----

  size_t page_size(PoolKind k) const;
  // The lowest-address run of free-or-unmapped space on this stream that fits `size`; a new
  // reservation when none does.
  Block* find_expandable_block(Request& r, int* err);
  // Backs the first `bytes` (rounded up to pages) of unmapped block `u`; the mapped part merges
  // with free neighbours and goes into the free set. Returns the merged block, or null.
  Block* map_block(Block* u, size_t bytes, int* err);
  // Unmaps the whole pages inside free mapped block `b`; returns the bytes unmapped.
  size_t unmap_block(Block* b);
  void release_reservation_if_empty(Segment* s);
  void unmap_all_mapped(Segment* s);
  // Bytes that placing the request at `c` would map.
  size_t bytes_to_map(Block* c, size_t size) const;
  // memtrace_policy:remap: idle pages given back before new ones are mapped.
  void remap_reclaim(Block* run, size_t need);
  Block* allocate_expandable(Request& r, int* err);

  // ---- allocator_inspect.cpp ----

  const Segment* segment_at(uintptr_t ptr) const;
  BlockInfo info_of(const Block* b) const;
  std::optional<BlockInfo> block_of(uintptr_t ptr) const;
  static BlockView view_of(const Block* b);
  std::vector<SegmentView> segment_views() const;
  std::string check() const;
};

}  // namespace memtrace::caching
