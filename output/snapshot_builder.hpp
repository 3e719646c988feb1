// StateCopy -> the dict PyTorch's memory viewer and _memory_viz.py read (docs/snapshot-format.md,
// "The snapshot dict"), written by format::SnapshotWriter straight into a PickleWriter.
//
// Shape written (in this order):
//   device_traces  one list per device index 0..N-1 (N >= 1 and covers every device used), oldest
//                  entry first. Every entry carries `category` = owner of its stack.
//   segments       one segment per live device AllocRecord (Device, Managed, Async, VmmMapping on a
//                  device 0..63), holding exactly one 'active_allocated' block; and one per caching
//                  allocator segment record (MemKind::Cached, CacheRole::Segment), tiled by the
//                  Cached block records inside it plus 'inactive' blocks for the gaps. Sorted by
//                  (device, address).
//   host_segments / host_traces  only when pinned host memory was seen (see snapshot_builder.cpp).
//   allocator_settings  PyTorch's defaults, plus trace_alloc_max_entries / trace_alloc_overflowed and
//                  a nested 'memtrace' dict of metadata (see snapshot_builder.cpp).
//   external_annotations  the kept range starts and ends (docs/ranges.md); [] without ranges.
//   Entries and blocks of events inside a range carry 'ranges' (and user_metadata when they have
//   no note); markers are 'annotate' entries.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/records.hpp"
#include "format/keys.hpp"
#include "format/pickle_writer.hpp"
#include "format/setting.hpp"
#include "output/frame_source.hpp"

namespace memtrace::output {

// Facts about the process and the dump, stored under allocator_settings['memtrace'].
struct SnapshotMeta {
  std::string version;  // memtrace version; defaults to the build's
  int64_t pid = 0;
  std::string exe;     // executable path
  std::string host;    // host name
  std::string rank;    // distributed rank ("" if none)
  uint64_t sequence = 0;  // dump number within this process
  std::string reason;     // why the dump happened: "exit", "signal", "oom", ...
};

// Which allocator served the program and how it was set, for allocator_settings. The owner of the
// settings describes them (preload/allocator_settings.cpp); this side only writes them.
struct AllocatorSettings {
  std::string mode{format::kAllocatorPassthrough};  // allocator_settings['memtrace']['allocator']
  // PyTorch's top-level keys: each replaces the default of the same key (PyTorch's defaults are
  // written for the others); a key PyTorch does not have is written after them.
  format::Settings pytorch;
  // memtrace's own allocator keys, and PyTorch's that have no top-level slot: written into
  // allocator_settings['memtrace'] after 'allocator'. Non-empty exactly when a caching allocator ran.
  format::Settings memtrace;
};

struct BuildOptions {
  bool include_frames = true;  // false: frames lists are empty and trace entries carry none
  SnapshotMeta meta;
  AllocatorSettings allocator;
};

struct BuildStats {
  size_t device_segments = 0;
  size_t host_segments = 0;
  size_t device_entries = 0;  // written into device_traces (repairs and marker included)
  size_t host_entries = 0;
  size_t device_lists = 0;
  size_t distinct_stacks = 0;  // stack ids whose owner was resolved
  size_t frame_lists = 0;      // distinct frame lists written (shared by memo after that)
  size_t frame_dicts = 0;      // distinct frame dicts written
  size_t repaired_frees = 0;   // half free pairs completed (see snapshot_builder.cpp)
  size_t trimmed_entries = 0;  // oldest kept entries left out to hold the per-list bound
  size_t orphan_blocks = 0;    // caching blocks inside no caching segment (written as segments)
  bool unknown_marker = false;  // the 'snapshot' entry with category 'unknown' was added
  size_t range_events = 0;      // external_annotations written (range starts and ends)
};

// Writes a whole pickle (PROTO ... STOP) into w, which should be empty.
// Throws only what allocation throws.
void build_snapshot(const StateCopy& state, FrameSource& frames, const BuildOptions& options,
                    format::PickleWriter& w, BuildStats* stats = nullptr);

// True when a live record belongs in host_segments (and its entries in host_traces): pinned or
// registered host memory, or memory not tied to a device index 0..kMaxDevices-1.
bool is_host_side(MemKind kind, int device);

}  // namespace memtrace::output
