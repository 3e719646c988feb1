// memtrace's caching allocator: PyTorch's policy (docs/caching-allocator.md, "PyTorch's policy, and
// what memtrace adds") over any Backend, plus
// the promise a real free keeps (memory is never handed out again while work submitted before its
// free may still touch it) and memtrace's own policies. Thread-safe: one lock per allocator, held
// in every call except while a deferred-free batch is being synchronized (see below).
//
// Free safety. A cache does not synchronize on free the way cuMemFree does. With
// conf.deferred_free (the default) a freed block goes to a pending batch and is reusable only after
// one Backend::synchronize() that started after the free. The batch is flushed when a malloc finds
// no reusable block while blocks are pending (before any new device memory is taken), when the
// pending bytes pass conf.free_batch_bytes, on the out-of-memory path and in empty_cache(). A loop
// that allocates and frees the same sizes thus pays one synchronize per batch - each time the
// cached free space runs out - instead of one per free; the price is that the pending bytes are
// idle until the next flush (they never cause new segments: a miss flushes first). That
// synchronize runs with the lock released, so other threads' cache hits and frees go on while
// the device drains; a thread that misses meanwhile waits for that flush rather than starting
// another. The out-of-memory path and empty_cache() synchronize under the lock (rare, and they
// need a settled state); every other backend call is made under the lock.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/caching/alloc_conf.hpp"
#include "core/caching/backend.hpp"
#include "core/caching/listener.hpp"

namespace memtrace::caching {

enum class PoolKind : uint8_t { Small, Large };  // rounded request <= 1 MiB, or larger

struct MallocResult {
  uintptr_t ptr = 0;  // 0 on failure
  int error = 0;      // 0, or the backend's error code unchanged (out of memory or otherwise)
};

// The live block that holds a pointer (for cuMemGetAddressRange / cuPointerGetAttribute answers).
struct BlockInfo {
  uintptr_t base = 0;
  size_t size = 0;            // the block's bytes (rounded request plus unsplit slack)
  size_t requested_size = 0;  // what the caller asked for
  uintptr_t segment_base = 0; // the driver allocation, or the contiguous mapped range, holding it
  size_t segment_size = 0;
  uintptr_t stream = 0;
};

struct BlockView {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;  // 0 for blocks never allocated
  bool allocated = false;     // held by a caller ('active_allocated')
  bool pending_free = false;  // freed, waiting for a synchronize ('active_pending_free')
};

// One driver allocation, or one contiguous mapped range of an expandable reservation.
struct SegmentView {
  uintptr_t address = 0;
  size_t total_size = 0;
  uintptr_t stream = 0;
  PoolKind pool = PoolKind::Large;
  bool is_expandable = false;
  std::vector<BlockView> blocks;  // tile [address, address+total_size) in address order
};

// How many sizes the reuse bins keep settled small blocks of at once (docs/caching-allocator.md,
// "Reuse bins"); blocks of other sizes merge as usual.
constexpr size_t kReuseBins = 8;

struct Stats {
  size_t reserved = 0;            // bytes held from the backend (segments + mapped pages)
  size_t allocated = 0;           // bytes of blocks held by callers
  size_t requested = 0;           // what those callers asked for
  size_t pending_free = 0;        // bytes of blocks waiting for a synchronize
  size_t peak_reserved = 0;
  size_t peak_allocated = 0;
  size_t allocated_at_peak_reserved = 0;  // peak_reserved minus this = fragmentation at the peak
  size_t largest_free_block = 0;  // now (computed by stats())
  uint64_t num_mallocs = 0;       // successful ones
  uint64_t num_frees = 0;
  uint64_t num_cache_hits = 0;    // mallocs served without calling the backend
  uint64_t num_alloc_retries = 0; // mallocs that had to release cached memory and retry
  uint64_t num_ooms = 0;
  uint64_t num_gc_frees = 0;      // segments freed by garbage collection
  // Backend calls made.
  uint64_t backend_allocs = 0, backend_frees = 0, backend_maps = 0, backend_unmaps = 0;
  uint64_t backend_reserves = 0, backend_releases = 0, backend_syncs = 0;
};

class CachingAllocator {
 public:
  // `backend` and `listener` (may be null) must outlive the allocator. The constructor asks the
  // backend for its total memory once (memory fraction, expandable reservation size).
  CachingAllocator(Backend& backend, AllocConf conf, Listener* listener = nullptr);
  ~CachingAllocator();  // gives every segment back to the backend, whatever its state
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `size` bytes (size 0 gets a 512-byte block, as PyTorch's round_size does)
  // usable on `stream`. On failure after the release-and-retry path: {0, backend error}, and an
  // oom event when that error is an out-of-memory one.
  MallocResult malloc(size_t size, uintptr_t stream = 0);
  // Frees a block `malloc` returned. False (and nothing done) when `ptr` is not the start of a
  // live block of this allocator, so a hook can pass the pointer on to the driver.
  bool free(uintptr_t ptr);
  // Synchronizes once and makes every pending freed block reusable.
  void flush_pending_frees();
  // Flushes pending frees and gives every wholly free segment (and whole free expandable page)
  // back to the backend.
  void empty_cache();

  // The live (allocated) block containing `ptr`, anywhere inside it.
  std::optional<BlockInfo> block_of(uintptr_t ptr) const;
  // Whether `ptr` lies inside memory this allocator holds from the backend: a segment, or an
  // expandable reservation (mapped or not), whether or not a live block covers it.
  bool owns(uintptr_t ptr) const;

  std::vector<SegmentView> segments() const;  // in address order
  Stats stats() const;
  // Empty when the internal state is consistent; otherwise one line per problem found: blocks
  // tile their segments, free sets hold exactly the free blocks, no two adjacent free blocks are
  // left unmerged, counters add up.
  std::string check_invariants() const;

  const AllocConf& conf() const;
  // False when conf asked for expandable segments (or the remap policy) but the backend lacks
  // virtual-memory support.
  bool expandable_active() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace memtrace::caching
