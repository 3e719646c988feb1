// The dict keys of a snapshot and the constant strings among its values, spelled once for the
// writer (format/snapshot_writer.*, used by output/ and `memtrace merge`) and the reader
// (cli/reader/) (docs/snapshot-format.md, "The snapshot dict"). Action and block-state names are
// in schema.hpp.
#pragma once
#include <cstdint>
#include <string_view>

namespace memtrace::format {

enum class Key : uint8_t {
  // The top level.
  DeviceTraces,
  Segments,
  HostSegments,
  HostTraces,
  AllocatorSettings,
  ExternalAnnotations,
  // A trace entry.
  Action,
  Addr,
  Size,
  SizeExact,
  Stream,
  TimeUs,
  CompileContext,
  UserMetadata,
  Category,
  DeviceFree,
  DeviceFreeExact,
  Frames,
  Ranges,  // memtrace's range stack, outermost first (docs/ranges.md); blocks carry it too
  // A segment and its blocks.
  Device,
  Address,
  TotalSize,
  AllocatedSize,
  ActiveSize,
  RequestedSize,
  SegmentType,
  SegmentPoolId,
  IsExpandable,
  Blocks,
  State,
  History,   // pre-2023 blocks: a list of records, the newest first
  RealSize,  // in such a record: what the caller asked for
  // A frame.
  Filename,
  Line,
  Name,
  // allocator_settings, beside PyTorch's own settings keys.
  TraceAllocMaxEntries,
  TraceAllocOverflowed,
  Memtrace,
  // allocator_settings['memtrace'] (docs/snapshot-format.md, "allocator_settings and memtrace's
  // metadata"). TimeUs above is also the time the state was copied.
  Allocator,
  AllocatorCaching,  // older memtrace files: a bool instead of 'allocator'
  OrphanBlocks,
  Version,
  Pid,
  Exe,
  Host,
  Rank,
  DumpSequence,
  Reason,
  RingCapacity,
  EntriesTotal,
  EntriesKept,
  EntriesDropped,
  FreesCompletedByWriter,
  EntriesTrimmedByWriter,
  UnknownFrees,
  StaleReplaced,
  LiveDeviceAllocations,
  LiveHostAllocations,
  VmmHandles,
  VmmDeviceBytes,
  VmmHostBytes,
  FramesIncluded,
  UnknownCategoryMarker,
  // allocator_settings['memtrace'] of a file `memtrace merge` wrote.
  MergedPytorchSnapshot,
  MergedMemtraceSnapshot,
  DuplicateSegmentsDropped,
  DuplicateEntriesDropped,
};
inline constexpr int kKeyCount = static_cast<int>(Key::DuplicateEntriesDropped) + 1;

inline constexpr const char* kKeyNames[kKeyCount] = {
    "device_traces",
    "segments",
    "host_segments",
    "host_traces",
    "allocator_settings",
    "external_annotations",
    "action",
    "addr",
    "size",
    "size_exact",
    "stream",
    "time_us",
    "compile_context",
    "user_metadata",
    "category",
    "device_free",
    "device_free_exact",
    "frames",
    "ranges",
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "blocks",
    "state",
    "history",
    "real_size",
    "filename",
    "line",
    "name",
    "trace_alloc_max_entries",
    "trace_alloc_overflowed",
    "memtrace",
    "allocator",
    "allocator_caching",
    "orphan_blocks",
    "version",
    "pid",
    "exe",
    "host",
    "rank",
    "dump_sequence",
    "reason",
    "ring_capacity",
    "entries_total",
    "entries_kept",
    "entries_dropped",
    "frees_completed_by_writer",
    "entries_trimmed_by_writer",
    "unknown_frees",
    "stale_replaced",
    "live_device_allocations",
    "live_host_allocations",
    "vmm_handles",
    "vmm_device_bytes",
    "vmm_host_bytes",
    "frames_included",
    "unknown_category_marker",
    "merged_pytorch_snapshot",
    "merged_memtrace_snapshot",
    "duplicate_segments_dropped",
    "duplicate_entries_dropped",
};

inline const char* key_name(Key k) { return kKeyNames[static_cast<int>(k)]; }

// Constant values.
inline constexpr std::string_view kLargePool = "large";  // segment_type
inline constexpr std::string_view kSmallPool = "small";
// The category of an entry without an owner, and the one the viewer needs among the categories
// (docs/snapshot-format.md, "The viewer's 'unknown' category").
inline constexpr std::string_view kUnknownCategory = "unknown";
// The user_metadata of the 'unknown' marker entry.
inline constexpr std::string_view kMarkerNote = "snapshot written by memtrace";
// allocator_settings['memtrace']['allocator'] when the driver served every allocation as asked.
inline constexpr std::string_view kAllocatorPassthrough = "passthrough";

}  // namespace memtrace::format
