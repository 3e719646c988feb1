// What the caching allocator tells its owner, one call per allocator action, named as PyTorch's
// trace entries are (docs/caching-allocator.md, "Reporting to the recorder: the Listener"). The
// preload hooks record these into the trace ring; `memtrace replay` counts them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/event.hpp"

namespace memtrace::caching {

struct AllocatorEvent {
  Action action = Action::Alloc;  // Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree,
                                  // SegmentMap, SegmentUnmap or Oom
  uintptr_t addr = 0;             // block / segment / mapped-range start; 0 for Oom
  size_t size = 0;                // as PyTorch's entry: requested bytes for alloc/free_*, segment or
                                  // range bytes for segment_*, the rounded request for oom
  size_t block_size = 0;          // alloc/free_*: the block's size (rounded request plus unsplit slack)
  uintptr_t stream = 0;
  size_t device_free = 0;         // oom only: the backend's free bytes
  int error = 0;                  // oom only: the backend's error code, as the caller gets it
  bool same_settle = false;       // free_completed only: settled by the synchronize that settled the
                                  // block reported just before (one instant for the whole batch)
};

// Called with the allocator's lock held, in the order the actions happen. An implementation must
// not call back into the same allocator, and should be quick: it runs on every malloc and free.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual void on_event(const AllocatorEvent& e) = 0;
};

}  // namespace memtrace::caching
