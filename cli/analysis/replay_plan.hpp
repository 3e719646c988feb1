// What `memtrace replay` replays from one device's history: the list of allocator calls, and the
// recording's own segment decisions to compare the replay with (replay.hpp runs the list).
//
// From the trace: `alloc` (size = requested bytes) and one free per block (its `free_completed`,
// when that follows the `free_requested`, since that is when PyTorch puts the block back in the
// pool), and `oom` entries as a request that failed in the recording (attempted again; freed at
// once if it succeeds here, since the program never got it), and the program's
// torch.cuda.empty_cache() calls (below). Where the history was cut (a ring that wrapped,
// memtrace's entries_dropped), the blocks alive before the first kept entry are pre-allocated, in
// address order, when they can be inferred: a free of an address the trace never allocated, a block
// alive in `segments` with no alloc in the trace.
//
// Recorded releases. PyTorch writes one segment_free (segment_unmap for expandable pages) per
// segment it gives back, in two situations: inside an allocation (the out-of-memory retry's release
// of cached blocks, max_split_size's release of oversize blocks, garbage collection), and when the
// program calls torch.cuda.empty_cache(). The first kind is the allocator's own decision, and the
// replayed allocator makes it again itself where it applies (under --capacity, its own settings).
// The second is the program's: it happens under any settings, so the replay makes the same call
// there, under every configuration: the replayed allocator's empty_cache(), which gives back every
// wholly free segment and every whole free expandable page of the device (all streams, both pools),
// as PyTorch's emptyCache does. It is the call that is replayed, not the recorded list of segments:
// under the recorded settings the replayed state is the recorded one, so the call frees the
// recorded segments (the comparison with the recording checks that), and under other settings the
// recorded segments do not exist. A run of consecutive segment_free/segment_unmap entries is one
// release; it is the program's empty_cache() unless the next entry (past free_completed, snapshot
// and unknown entries) is a segment_alloc, segment_map or oom carrying the same stack: PyTorch
// gives a release inside an allocation that allocation's stack, which its retry's segment_alloc
// (or its oom) carries too, while empty_cache() gives it the stack of the call (or, with contexts
// off, the segment's own). Without stacks (all empty) an empty_cache() followed at once by an
// allocation that takes a new segment cannot be told from an out-of-memory retry and is left to
// the allocator. A call that found nothing to release left no entry and cannot be replayed.
// memtrace's own snapshots get no empty_cache replay: memtrace's allocator has no empty_cache the
// program can call, so every release in them was made inside an allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis::replay {

enum class OpKind : uint8_t { Alloc, Free, RecordedOom, EmptyCache };

struct Op {
  OpKind kind = OpKind::Alloc;
  bool enabled = true;  // a free_requested's free stays off while its free_completed may follow
  int64_t event = -1;   // index in the device's trace; -1 for pre-allocations
  uint64_t addr = 0;    // recorded address (the key that pairs a free with its alloc)
  uint64_t size = 0;
  uint64_t stream = 0;
};

struct Plan {
  int device = 0;
  size_t entries = 0;
  std::vector<Op> prealloc;  // blocks alive before the first kept entry, in address order
  std::vector<Op> ops;
  uint64_t allocs = 0, frees = 0, recorded_ooms = 0, skipped = 0;
  uint64_t empty_cache_calls = 0;    // recorded releases read as the program's empty_cache()
  uint64_t allocation_releases = 0;  // recorded releases made inside an allocation (left to the allocator)
  int64_t entries_dropped = 0;
  bool truncated = false;
  bool recorded_by_cache = true;  // PyTorch's allocator, or memtrace's in caching mode
  // The recording's own decisions, to follow (addresses) and to compare with.
  std::vector<std::pair<uint64_t, uint64_t>> segment_allocs;  // (address, bytes)
  std::vector<uint64_t> segment_frees, segment_maps, segment_unmaps;

  // Events replayed: allocations, frees, recorded out-of-memory requests and empty_cache calls.
  uint64_t events() const { return allocs + frees + recorded_ooms + empty_cache_calls; }
};

// The device replayed when none is named: device 0, or the first device with entries when device
// 0 has none.
int default_device(const reader::Snapshot& snap);

// The plan for `device`'s history (any index: a device without a trace gives an empty plan).
Plan build_plan(const reader::Snapshot& snap, int device);

}  // namespace memtrace::analysis::replay
