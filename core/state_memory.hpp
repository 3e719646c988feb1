// The parts of the recorder that can live in memory someone else provides (the state file's shared
// mapping, state/), laid out so that a reader in another process can take them apart. core/ only
// writes into the memory it is handed; it never opens or maps a file (docs/state-file.md).
#pragma once
#include <atomic>
#include <cstdint>

#include "core/records.hpp"

namespace memtrace {

// The usage totals the recorder keeps under its ring lock. Plain values: a reader of a dead
// process may see the counters of the one event that was being recorded half updated.
struct UsageCounters {
  UsageStats reserved[kMaxDevices];   // device bytes the driver gave up
  UsageStats allocated[kMaxDevices];  // of them, the bytes in blocks the program holds
  UsageStats reserved_all;
  UsageStats allocated_all;
  UsageStats host;
  UsageStats owner_device[kMaxOwners];
  int device_count = 0;
  uint64_t stale_replaced = 0;
};

// One live allocation as a reader of the mapping finds it. `seq` is odd while the writer (holding
// the record's shard lock) changes the slot; a reader keeps a copy only when it read the same even
// value before and after copying. `live` says whether the slot holds a record; `next_free` links
// the shard's free slots (the writer's business only).
struct LiveSlot {
  std::atomic<uint32_t> seq;
  uint32_t live;
  uint32_t next_free;
  uint32_t unused;
  AllocRecord rec;
};

// One owner's name (preload's OwnerTable interns them), NUL-terminated; a longer name is cut.
struct OwnerName {
  char text[248];
};

// Where the recorder keeps its ring, counters and live slots when a state file is attached. Every
// pointer is into one shared mapping that outlives the recorder's use of it.
struct StateMemory {
  TraceEntry* ring = nullptr;
  uint64_t ring_capacity = 0;
  std::atomic<uint64_t>* ring_total = nullptr;  // entries ever pushed (the ring's sequence number)
  UsageCounters* counters = nullptr;
  LiveSlot* live = nullptr;
  uint64_t live_slots = 0;                         // split evenly between the registry's shards
  std::atomic<uint64_t>* live_unrecorded = nullptr;  // live records that found no free slot
  // Owner names by id (kMaxOwners of them), written by whoever names owners; ids below
  // owners_published are complete.
  OwnerName* owner_names = nullptr;
  std::atomic<uint64_t>* owners_published = nullptr;
};

}  // namespace memtrace
