// Recorded out-of-memory failures, each with the device's state at that moment: what was reserved
// and allocated, the free space inside segments and its largest piece, and whether the request
// would have fitted without fragmentation (docs/reports.md, "Out of memory").
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct OomReport {
  int device = 0;
  size_t entry = 0;      // index of the oom entry in the device's trace
  int64_t time_us = 0;   // 0 when the file has no time
  uint64_t requested = 0;                 // the size asked for
  std::optional<uint64_t> device_free;    // what the driver said was free, when recorded
  reader::StackId stack = 0;
  // The device's state when the request failed (before the oom entry).
  uint64_t reserved = 0;          // bytes in segments
  uint64_t allocated = 0;         // bytes in live blocks
  uint64_t free_in_segments = 0;  // reserved - allocated
  uint64_t largest_free = 0;      // the largest free piece inside one segment (or mapped range)
  // The request was no larger than the free space inside segments: only fragmentation failed it.
  bool fits_without_fragmentation() const { return requested <= free_in_segments; }
};

// Every oom entry of `device`, oldest first. The state at each is rebuilt backwards from the final
// segments and blocks, undoing the later entries, so a history whose start was dropped still gives
// exact figures.
std::vector<OomReport> find_ooms(const reader::Snapshot& s, int device);

}  // namespace memtrace::analysis
