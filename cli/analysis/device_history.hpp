// One device's memory over the kept history: the figures now and at the peak, and which allocations
// were alive at the peak and at the end. Every analysis command starts from this.
//
// How the history is replayed (the rules of the viewer's Active Memory Timeline, docs/snapshot-format.md,
// "The Active Memory Timeline", made exact):
//  * An `alloc` opens an allocation at its address; `free_completed` closes the one open there (a
//    file without any free_completed, e.g. recorded with skip_actions, is closed by free_requested).
//    A second alloc at an open address closes the first one there (its free was not recorded).
//  * A free whose alloc is not in the history (the ring dropped it, or recording started late)
//    stands for an allocation alive from before the first kept entry until that free.
//  * A live block at the end (active_allocated or active_pending_free) that no alloc of the history
//    opened was alive throughout ("untraced": allocated before the first kept entry).
//  So allocated(before entry 0) = untraced blocks + frees without alloc, and every entry moves it.
//  Allocation bytes are the requested sizes (the trace's `size`, the block's `requested_size`):
//  what the program asked for, the unit the viewer draws. Reserved bytes follow the segment events
//  backwards from the final segments: reserved(after i) = reserved_end - (net segment bytes after i),
//  so expandable segments' partial maps and unmaps need no address matching.
#pragma once
#include <cstdint>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct LiveAlloc {
  uint64_t addr = 0;
  uint64_t bytes = 0;          // requested bytes
  reader::StackId stack = 0;
  reader::StrId category = 0;  // owner; "" (shown as "unknown") when no alloc event names it
  reader::RangeId range = 0;   // the block's ranges, else its alloc entry's (0: none)
};

struct DeviceHistory {
  int device = 0;
  // History span.
  size_t entries = 0;
  int64_t first_time_us = 0;  // smallest / largest non-zero time_us of the device's entries
  int64_t last_time_us = 0;
  uint64_t frees_without_alloc = 0;   // frees whose alloc is not in the kept history
  uint64_t untraced_blocks = 0;       // live blocks at the end that no kept alloc created
  // Final state (segments).
  uint64_t reserved_now = 0;        // sum of segment total_size
  uint64_t allocated_now = 0;       // sum of live blocks' size (rounded, what the allocator holds)
  uint64_t requested_now = 0;       // sum of live blocks' requested_size
  uint64_t live_count = 0;          // live blocks
  uint64_t free_in_segments = 0;    // inactive blocks' bytes inside segments
  uint64_t largest_free_block = 0;
  uint64_t segment_count = 0;
  // Peaks (over the kept history and the final state).
  uint64_t peak_reserved = 0;
  uint64_t peak_allocated = 0;      // requested bytes live at once
  int64_t peak_index = -1;          // the peak holds right after this entry; -1: before the first kept one
  int64_t peak_time_us = 0;         // that entry's time_us (0 when peak_index is -1)
  std::vector<LiveAlloc> live_at_peak;
  std::vector<LiveAlloc> live_at_end;
};

// One history and the final segments it ends in: a device's (the segments on that device) or the
// pinned host memory's (every host segment).
struct HistorySource {
  const std::vector<reader::Segment>* segments;
  bool by_device;  // only the segments whose device is `device`
  int device;
  const std::vector<reader::TraceEntry>* trace;
  bool has(const reader::Segment& seg) const { return !by_device || seg.device == device; }
};
HistorySource device_source(const reader::Snapshot& s, int device);
HistorySource host_source(const reader::Snapshot& s);
DeviceHistory analyze_history(const HistorySource& src, bool with_sets = true);

// What an entry changes in reserved bytes: + for segment_alloc/segment_map, - for their undoing.
__int128 segment_delta(const reader::TraceEntry& e);

// Highest device index used plus one: device_traces lists and segments' devices.
int device_count(const reader::Snapshot& s);

// Replays one device. `with_sets` false skips the live_at_peak / live_at_end lists.
DeviceHistory analyze_device(const reader::Snapshot& s, int device, bool with_sets = true);

// Pinned and registered host memory (host_segments and host_traces) replayed by the same rules as
// a device, as its own "device" kHostDevice; never counted in any device's figures.
inline constexpr int kHostDevice = -1;
bool has_host_memory(const reader::Snapshot& s);
DeviceHistory analyze_host(const reader::Snapshot& s, bool with_sets = true);

// Which allocations a command looks at.
enum class Moment { kEnd, kPeak };

}  // namespace memtrace::analysis
