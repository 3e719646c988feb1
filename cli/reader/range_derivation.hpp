// Range stacks for a snapshot that has no 'ranges' keys (PyTorch's own), derived from its
// external_annotations: PyTorch's record_function markers, dicts of name, stage ('START' or
// 'END'), device and time_us (docs/ranges.md, "What a snapshot carries").
//
// The rules, per device (PyTorch does not say which thread a marker came from):
//  * The markers are taken in time order (a stable sort: markers out of order in the list are put
//    back in order; equal times keep the list's order).
//  * A START pushes its name. An END closes the innermost open range of its name, even when
//    others opened inside it are still open (they stay open: scopes that cross). An END with no
//    open range of its name is ignored (its START was before the history); a START never ended
//    stays open to the end of the history. Both are counted in Snapshot::range_derivation.
//  * A trace entry at time t carries the ranges open after every marker at or before t: an
//    allocation in the microsecond a range starts is inside it, one in the microsecond it ends
//    is outside.
//  * A live block carries the ranges of the last alloc entry at its address, when the history
//    has one.
//  * Markers that are not dicts, lack a str name or an int time_us, have another stage, or name
//    a device with no trace list are skipped (counted as ignored); a marker without a device is
//    device 0; past 1024 ranges open at once on a device, further STARTs are skipped too (so
//    matching ENDs stays linear). host_traces get no ranges: the markers are per device.
#pragma once
#include "cli/reader/snapshot.hpp"

namespace memtrace::reader {

// Derives the ranges when the snapshot has none and its external_annotations hold markers; sets
// ranges_from to kAnnotations when it did. Bounded work: O((markers + entries) log markers).
void derive_ranges_from_annotations(Snapshot& s);

}  // namespace memtrace::reader
