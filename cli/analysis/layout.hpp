// The segments and live blocks of one history at chosen moments: how the address space was laid
// out, what was free between blocks, and its largest piece. Rebuilt backwards from the final
// segments and blocks, undoing later entries, so a history whose start was dropped still gives
// exact figures (docs/reports.md, "Out of memory").
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "cli/analysis/device_history.hpp"

namespace memtrace::analysis {

// One run of reserved address space: a segment, or an expandable segment's adjacent mapped pieces.
struct SegmentRun {
  uint64_t addr = 0;
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // live blocks (address, size), in address order
};

struct Layout {
  int64_t after_entry = -1;       // the state right after this entry; -1: before the first
  uint64_t reserved = 0;          // bytes in segments
  uint64_t allocated = 0;         // bytes in live blocks (the allocator's sizes)
  uint64_t free_in_segments = 0;  // reserved - allocated
  uint64_t largest_free = 0;      // the largest free piece inside one run
  std::vector<SegmentRun> runs;   // address order; empty unless asked for
};

// The layout after each of `entries` (ascending, each -1 .. trace size - 1).
std::vector<Layout> layouts_after(const HistorySource& src, const std::vector<int64_t>& entries, bool with_runs);

}  // namespace memtrace::analysis
