// What the registry keeps about live memory, and the copy a dump works from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/event.hpp"
#include "core/range_log.hpp"
#include "core/range_table.hpp"

namespace memtrace {

constexpr int kMaxDevices = 64;
// Owners (libraries that asked for memory) are small ids given by the hook side; 0 = not known.
constexpr int kMaxOwners = 256;

// What a MemKind::Cached record stands for. The registry keeps the caching allocator's segments
// and its live blocks as separate records; a snapshot tiles each segment with the blocks inside it
// and fills the gaps with 'inactive' blocks, so registry + ring stay the one source of truth.
enum class CacheRole : uint8_t {
  None,     // not the caching allocator's
  Segment,  // a driver allocation, or a contiguous mapped range of an expandable reservation
  Block,    // a block handed to the program (or freed and waiting for a synchronize)
};
// AllocRecord::cache_flags bits.
constexpr uint8_t kCachePendingFree = 1;  // Block: freed, reusable after the next synchronize
constexpr uint8_t kCacheExpandable = 2;   // Segment: mapped range of an expandable reservation
constexpr uint8_t kCacheSmallPool = 4;    // Segment: small pool (blocks of at most 1 MiB)

// One live allocation. Without the caching allocator it is one snapshot segment holding one block.
struct AllocRecord {
  uint64_t addr = 0;
  uint64_t size = 0;       // bytes the driver handed out (pitch x height for pitched memory)
  uint64_t requested = 0;  // bytes the caller asked for
  uint64_t stream = 0;
  uint64_t time_us = 0;  // ticks inside the recorder, Unix microseconds in a StateCopy
  uint64_t ctx = 0;     // owning CUcontext; its destruction frees the record
  uint64_t handle = 0;  // VmmMapping: the physical allocation handle mapped here
  const char* note = nullptr;
  uint32_t stack_id = 0;
  uint32_t range = 0;  // ranges open at the allocation (TraceEntry::range, ::phase)
  uint32_t phase = 0;
  uint16_t owner = 0;
  int16_t device = 0;  // -1 for host memory not tied to a device
  MemKind kind = MemKind::Device;
  CacheRole cache = CacheRole::None;  // kind Cached only
  uint8_t cache_flags = 0;            // kCache* bits
  uint32_t slot = 0;  // 1 + its LiveSlot in the state file (core/state_memory.hpp); 0: none
};

// VMM physical memory (cuMemCreate): alive until the creation reference, every mapping
// and every retain are gone.
struct HandleRecord {
  uint64_t handle = 0;
  uint64_t size = 0;
  uint64_t ctx = 0;
  uint64_t time_us = 0;
  uint32_t stack_id = 0;
  uint16_t owner = 0;
  int32_t refs = 0;
  int16_t device = 0;
  bool host = false;  // location HOST / HOST_NUMA: pinned host memory, not device memory
};

struct UsageStats {
  uint64_t current = 0;
  uint64_t peak = 0;
  uint64_t allocations = 0;  // allocations ever made
};

// The usage totals alone, for a program that asks for its numbers while it runs (the public API's
// memory_stats): a few kilobytes copied under one lock, no registry, no history.
struct UsageTotals {
  UsageStats reserved[kMaxDevices];   // device bytes the driver gave up (StateCopy::device)
  UsageStats allocated[kMaxDevices];  // of them, the bytes in blocks the program holds
  UsageStats reserved_all;            // all devices together (its peak is the peak of the sum)
  UsageStats allocated_all;
  UsageStats host;                    // pinned host memory, allocated or registered
  UsageStats owner_device[kMaxOwners];
  int device_count = 0;
};

// A consistent cut of the recorder: `live` is the state right after the last entry of `trace`.
struct StateCopy {
  std::vector<AllocRecord> live;      // sorted by (kind is host, device, addr)
  std::vector<HandleRecord> handles;  // physical VMM memory still alive
  std::vector<TraceEntry> trace;      // kept history, oldest first, all devices mixed
  uint64_t dropped_entries = 0;       // history the ring overwrote
  uint64_t total_entries = 0;
  uint64_t ring_capacity = 0;
  UsageStats device[kMaxDevices];
  int device_count = 0;  // highest device index seen + 1
  UsageStats host;
  UsageStats owner_device[kMaxOwners];  // device bytes by owner id
  std::vector<std::string> owner_names;  // by owner id, filled in by whoever names owners
  uint64_t time_us = 0;
  uint64_t unknown_frees = 0;   // frees of pointers memtrace never saw allocated
  uint64_t stale_replaced = 0;  // allocations reported at an address memtrace thought was live
  // memtrace's own footprint, filled in by whoever owns the stack table
  uint64_t distinct_stacks = 0;
  uint64_t stack_table_bytes = 0;
  uint64_t ring_bytes = 0;
  // Python frames, filled in by whoever captures stacks: how they were read ("" when the program
  // runs no Python) and how many captures found the frame chain unreadable (those stacks have no
  // Python frames).
  std::string python_support;
  // Ranges (docs/ranges.md), filled in by whoever owns the range table: every node (index = id)
  // and name (index = id) at the cut, and the range starts and ends kept, oldest first.
  std::vector<RangeNode> range_nodes;
  std::vector<std::string> range_names;
  std::vector<RangeEvent> range_events;
  uint64_t range_events_dropped = 0;
  bool python_direct = false;  // frames read without the GIL: python_walks_failed means something
  uint64_t python_walks_failed = 0;
};

}  // namespace memtrace
