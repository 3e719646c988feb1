// `memtrace merge`: one snapshot with PyTorch's view of its caching allocator and memtrace's view of
// everything else on the card.
//
// What goes in (per device; device d of one file is taken to be device d of the other):
//  * every PyTorch segment, with its own blocks and stacks;
//  * every memtrace segment that lies outside all of PyTorch's address ranges. PyTorch's ranges are
//    its final segments plus every range named by its segment_alloc / segment_map / segment_free /
//    segment_unmap entries (a segment released by empty_cache() still was PyTorch's). Memory
//    memtrace saw inside those ranges is PyTorch's own cudaMalloc / cuMemMap seen at the driver:
//    a duplicate, dropped.
//  * the traces, merged by time_us. Both files stamp Unix microseconds (PyTorch from its clock at
//    snapshot time, memtrace from the time-stamp counter converted at dump time), so no offset is
//    applied; each file's own order is kept (a merge of two ordered lists, PyTorch first on equal
//    times), and a free_requested immediately followed by its free_completed stays one unit.
//    memtrace entries whose address lies in a PyTorch range, or at the start of a memtrace segment
//    dropped above, are the duplicates and are dropped, all events of such an allocation together
//    (they share its address); memtrace's own `snapshot` markers are dropped too.
// Every entry names its owner in `category`: memtrace's entries keep theirs (nccl, cublas, ...),
// PyTorch's get "torch" unless they carry one, and a `snapshot` marker with category 'unknown' is
// appended when no entry has it (every viewer version read needs 'unknown' among the categories:
// docs/snapshot-format.md, "The viewer's 'unknown' category").
// What neither file's reader interprets is written back as it was: each entry's, segment's and
// block's kept keys (user_metadata, compile_context, annotate's name and stage, new keys),
// PyTorch's allocator_settings with memtrace's metadata beside them, both files'
// external_annotations merged by time_us, PyTorch's other top-level keys; pinned host memory
// (host_segments, host_traces) by the device rules, without --device only
// (docs/snapshot-format.md, "Keys kept as they were").
// Limits: an address PyTorch used and later released, then reused by another library, drops that
// library's allocation too (addresses, not times, decide); clocks that disagree by more than the
// gap between two events interleave those events in the wrong order.
// The result satisfies docs/snapshot-format.md, "Consistency rules for a writer", when both inputs
// do: segments sorted by (device, address) without overlaps, blocks tiling them, every kept alloc
// inside a kept segment.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include "cli/reader/snapshot.hpp"
#include "format/pickle_writer.hpp"

namespace memtrace::analysis {

struct MergeOptions {
  std::optional<int> device;   // keep only this device (the others' lists stay empty)
  std::string pytorch_name;    // recorded in allocator_settings['memtrace']
  std::string memtrace_name;
};

struct MergeStats {
  size_t devices = 0;  // device_traces lists written
  size_t pytorch_segments = 0;
  size_t memtrace_segments_kept = 0;
  size_t memtrace_segments_dropped = 0;  // duplicates of PyTorch's
  size_t pytorch_entries = 0;
  size_t memtrace_entries_kept = 0;
  size_t memtrace_entries_dropped = 0;   // duplicates, markers, unknown actions
  size_t pytorch_entries_dropped = 0;    // actions no viewer knows
  uint64_t memtrace_bytes_kept = 0;      // reserved bytes of the kept memtrace segments
};

// Writes the merged snapshot (PROTO 4 ... STOP) into w, which should be empty, with format/'s
// snapshot writer: the same dicts, sharing and 'unknown' marker as memtrace's own snapshots.
MergeStats merge_snapshots(const reader::Snapshot& pytorch, const reader::Snapshot& memtrace,
                           const MergeOptions& options, format::PickleWriter& w);

}  // namespace memtrace::analysis
