// The unit of memtrace's history: one allocator action, as PyTorch's trace entries name them.
#pragma once
#include <cstdint>

#include "format/schema.hpp"

namespace memtrace {

// The one action enumeration, shared with the snapshot writer and reader (format/schema.hpp).
using format::Action;
using format::action_name;
using format::kActionCount;
using format::parse_action;

// Which allocation family produced a record: decides device vs host accounting
// and lets the summary break totals down.
enum class MemKind : uint8_t {
  Device,          // cuMemAlloc_v2 / cuMemAllocPitch_v2
  Managed,         // cuMemAllocManaged
  Async,           // cuMemAllocAsync / FromPool (stream-ordered)
  VmmMapping,      // a cuMemMap'ed range (its physical handle is accounted separately)
  HostPinned,      // cuMemAllocHost_v2 / cuMemHostAlloc
  HostRegistered,  // cuMemHostRegister_v2 (existing memory, pinned)
  Cached,          // memtrace's caching allocator (MEMTRACE_ALLOCATOR=caching): its segments and
                   // the blocks tiling them; entries of this kind follow PyTorch's allocator exactly
                   // (free_requested and free_completed may be apart: deferred frees)
};
constexpr int kMemKindCount = 7;
inline bool is_host(MemKind k) { return k == MemKind::HostPinned || k == MemKind::HostRegistered; }

// A marker (nvtxMark, memtrace_annotate): recorded as the action a reader makes of names it does
// not know, and written under PyTorch's name for annotations, 'annotate' (docs/ranges.md).
inline constexpr Action kMarkerAction = Action::Other;

// One trace entry. Fixed size, no pointers to heap memory: the ring is a flat array.
struct TraceEntry {
  uint64_t time_us = 0;      // Unix microseconds, as PyTorch writes it (ticks inside the ring)
  uint64_t addr = 0;
  uint64_t size = 0;         // requested bytes for alloc/free; segment bytes for segment_*; rounded for oom
  uint64_t stream = 0;       // raw CUstream value
  uint64_t device_free = 0;  // oom only
  const char* note = nullptr;  // static string (user_metadata), e.g. the NCCL call in progress
  uint32_t stack_id = 0;     // 0 = no stack
  uint32_t range = 0;        // the thread's open push/pop ranges (a RangeTable node), 0 = none
  uint32_t phase = 0;        // the process-wide start/end ranges open then (docs/ranges.md)
  int16_t device = 0;        // -1 for host entries
  Action action = Action::Alloc;
  MemKind kind = MemKind::Device;
};

}  // namespace memtrace
