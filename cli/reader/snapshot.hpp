// The reading side's picture of one snapshot file: what memtrace or PyTorch wrote, decoded from the
// pickle into plain typed structs that the analysis commands work on. Nothing here knows about the
// pickle format (pickle_reader does) or about any command.
//
// Memory: strings (file names, function names, categories) are interned once per snapshot, and a
// stack is a list of frame ids stored once, so a file with 1M trace entries and 10k distinct stacks
// costs about 48 bytes per entry here (sizeof(TraceEntry)).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/raw_value.hpp"
#include "format/schema.hpp"

namespace memtrace::reader {

using StrId = uint32_t;    // index into Snapshot::strings; 0 is always ""
using FrameId = uint32_t;  // index into Snapshot::frames
using StackId = uint32_t;  // index into Snapshot::stacks; 0 is always the empty stack
using RangeId = uint32_t;  // index into Snapshot::ranges; 0 is always "no range"
using StreamId = uint32_t;  // index into Snapshot::streams; 0 is always stream 0

// One node of the range table: a range stack is the chain of names from a node to the root, so
// every distinct stack is one id and a stack shares its outer part with its parent's.
struct RangeNode {
  RangeId parent = 0;
  StrId name = 0;
};

// How deep a range stack the reader keeps: the outermost names past this are kept, the rest
// dropped (memtrace writes at most 64; docs/ranges.md).
inline constexpr size_t kMaxRangeDepth = 256;

struct Frame {
  StrId filename = 0;
  StrId name = 0;
  int64_t line = 0;
};

// One action enumeration and one set of block states for writer and reader (format/schema.hpp).
using format::Action;
using format::action_name;
using format::BlockState;

struct Block {
  uint64_t address = 0;  // recomputed as segment.address + earlier sizes, as the viewer does
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::Inactive;
  StackId stack = 0;
  format::RawId kept = 0;  // its keys memtrace does not interpret, in Snapshot::raw (0: none)
  RangeId range = 0;       // its 'ranges', or derived from its alloc entry (Snapshot::ranges_from)
};

struct Segment {
  int device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t stream = 0;
  StrId segment_type = 0;  // "small" / "large" / "" when absent
  bool is_expandable = false;
  StackId stack = 0;       // the segment's own frames, when written
  format::RawId kept = 0;  // its keys memtrace does not interpret (segment_pool_id too), in Snapshot::raw
  std::vector<Block> blocks;
};

struct TraceEntry {
  Action action = Action::Other;
  bool has_kept = false;         // Snapshot::kept_entry() has keys for it
  bool has_device_free = false;  // an oom that said what was free: `addr` holds it (device_free())
  StrId action_str = 0;          // the original string (kept for kOther)
  uint64_t addr = 0;             // absent -> 0; an oom's is device_free() (no oom has an address)
  uint64_t size = 0;
  int64_t time_us = 0;           // 0 when absent
  StackId stack = 0;
  StrId category = 0;            // "" when absent
  RangeId range = 0;             // its 'ranges', or derived from external_annotations (Snapshot::ranges_from)
  StreamId stream = 0;           // Snapshot::stream_value(): few distinct streams, so an id

  // What the driver said was free, for an oom entry that recorded it. Kept where an oom has no
  // use for its own field, as PyTorch does in its allocator: 8 bytes less for every entry.
  std::optional<uint64_t> device_free() const {
    return has_device_free ? std::optional<uint64_t>(addr) : std::nullopt;
  }
  void set_device_free(uint64_t bytes) {  // for an oom entry only
    addr = bytes;
    has_device_free = true;
  }
};

// The bulk of a big file (issue 18: reading a file takes under twice its size): 48 bytes.
static_assert(sizeof(TraceEntry) <= 48, "TraceEntry grew: see the memory note at the top");

// Where the entries' and blocks' ranges came from (docs/ranges.md, "What a snapshot carries").
enum class RangesFrom : uint8_t {
  kNone,         // no 'ranges' key and nothing to derive them from
  kKeys,         // the 'ranges' keys memtrace writes
  kAnnotations,  // derived from PyTorch's external_annotations (per device, by time)
};

// What deriving ranges from external_annotations met (all 0 unless ranges_from is kAnnotations).
struct RangeDerivation {
  uint64_t markers = 0;         // START/END markers used
  uint64_t ignored = 0;         // not a dict, no name, a stage other than START/END, no time, a device with no trace list
  uint64_t unmatched_ends = 0;  // an END with no open START of that name on its device: ignored
  uint64_t unclosed = 0;        // STARTs still open at the last marker: open to the end of the history
};

// Where the file came from: memtrace writes allocator_settings['memtrace'] (a dict); PyTorch does not.
enum class Producer : uint8_t { kMemtrace, kPyTorch };

struct MemtraceInfo {       // allocator_settings['memtrace'] when present
  int64_t pid = -1;
  std::string rank;         // "" when unknown
  std::string host, exe, reason;
  int64_t entries_dropped = 0;  // history entries overwritten before the dump
  bool allocator_caching = false;
  // `memtrace merge`'s inputs, when this file is a merge ("" otherwise).
  std::string merged_pytorch, merged_memtrace;
};

struct Snapshot {
  Producer producer = Producer::kPyTorch;
  std::vector<std::string> strings{""};
  std::vector<Frame> frames;
  std::vector<std::vector<FrameId>> stacks{{}};  // innermost frame first, as in the file
  std::vector<Segment> segments;                  // all devices, as in the file
  std::vector<std::vector<TraceEntry>> device_traces;  // outer index = device
  // Pinned and registered host memory (host_segments, device -1, and host_traces), kept apart so
  // that no device's figures count it; empty when the file has none.
  std::vector<Segment> host_segments;
  std::vector<TraceEntry> host_traces;
  MemtraceInfo memtrace;                          // defaults when producer is kPyTorch
  // PyTorch's allocator_settings (and memtrace's), kept as "key=value" strings for display only.
  std::vector<std::pair<std::string, std::string>> settings;
  // Range stacks (docs/ranges.md): node 0 is "no range"; TraceEntry::range and Block::range name
  // a node, whose chain to the root is the stack.
  std::vector<RangeNode> ranges{RangeNode{}};
  RangesFrom ranges_from = RangesFrom::kNone;
  RangeDerivation range_derivation;

  // What the reader kept as it was, for `memtrace merge` to write back (docs/snapshot-format.md,
  // "Keys kept as they were"): values in `raw`; each RawId below is 0 when there is nothing.
  format::RawValues raw;
  format::RawId settings_raw = 0;          // allocator_settings, the whole dict
  format::RawId external_annotations = 0;  // the list
  format::RawId kept_top = 0;              // a dict of the top-level keys memtrace does not read
  // Per trace list (device_traces[d], then host_traces last): (index in the list, a dict of the
  // entry's keys memtrace does not interpret, with user_metadata and compile_context when not
  // ''), sorted by index. Only entries with has_kept appear.
  std::vector<std::vector<std::pair<uint32_t, format::RawId>>> kept_entries;
  // The kept dict of device_traces[list][index] (list == device_traces.size(): host_traces).
  format::RawId kept_entry(size_t list, size_t index) const;

  // The distinct streams the entries name ([0] is stream 0, the default stream).
  std::vector<uint64_t> streams{0};

  std::string_view str(StrId id) const { return strings[id]; }
  uint64_t stream_value(StreamId id) const { return streams[id]; }
  // A range stack's names, outermost first (empty for 0).
  std::vector<StrId> range_path(RangeId id) const;
  int device_count() const;  // max(device_traces.size(), 1 + highest segment device)
};

// A load failure: one line for the user ("snap.pickle: truncated at byte 1234 (opcode 0x71)").
struct LoadError {
  std::string message;
};

// Reads and decodes a snapshot file. Never throws, never aborts: every bad input (truncated, not a
// pickle, a pickle of something else, missing keys, hostile sizes or nesting) becomes a LoadError.
// Memory use is bounded by a small multiple of the file size (of max_stream_bytes for a stream).
//
// Accepted: Python pickle protocols 0-5 of plain data (object-constructing opcodes are refused),
// memtrace's writer, the TorchScript pickler. Integers are exact in [INT64_MIN, UINT64_MAX]; a
// field that needs a number outside that range is a LoadError naming the field (elsewhere, e.g. in
// allocator_settings, it is shown as "<integer out of range>"). Required keys: 'segments' and
// 'device_traces' at the top; 'address', 'total_size', 'blocks' per segment; 'size' per block;
// 'action' per trace entry; everything else defaults to 0 / "" / the empty stack. Legacy shapes: a
// bare list of segments loads with no device_traces; blocks with 'history' instead of 'frames' use
// history[0]. Details: snapshot_decoder_internal.hpp and pickle_vm.hpp.
struct LoadResult {
  std::optional<Snapshot> snapshot;
  std::optional<LoadError> error;
};
LoadResult load_snapshot(const std::string& path);

// Input that is not a regular file (a FIFO, a pipe such as /dev/stdin, a character device) cannot
// be mapped and has no size, so it is read into memory, under these rules:
//  - The first byte is read alone and must be able to start a pickle (pickle::may_start_pickle);
//    otherwise reading stops there with the VM's message ("not a pickle: unknown opcode 0x00 at
//    byte 0" for /dev/zero).
//  - At most max_stream_bytes are buffered; one byte more is the error "not a regular file and
//    longer than 4 GiB ...". The default, 4 GiB, is above the largest snapshots seen in practice (a
//    few GB: PyTorch's default history of 100k entries is far less) and keeps a runaway stream from
//    taking the machine's memory; a larger snapshot can be read from a regular file, which has no
//    such bound (its size bounds it).
//  - The path is opened with O_NONBLOCK, so opening a FIFO never waits for a writer. A FIFO with no
//    writer is given fifo_writer_wait_ms (default 2 s) for one to open it: enough for
//    `producer > fifo & memtrace summary fifo`, where the two opens race. After that, still no
//    writer is the error "no data: FIFO has no writer". A writer that is present (at open time or
//    within the wait) may be as slow as it likes: from then on reads block until data or EOF.
struct LoadOptions {
  static constexpr uint64_t kDefaultMaxStreamBytes = uint64_t{4} << 30;
  static constexpr int kDefaultFifoWriterWaitMs = 2000;
  uint64_t max_stream_bytes = kDefaultMaxStreamBytes;
  int fifo_writer_wait_ms = kDefaultFifoWriterWaitMs;
  // When set: receives how many bytes were read from a non-regular input (0 for a regular file,
  // which is mapped, not read).
  uint64_t* stream_bytes_read = nullptr;
};
LoadResult load_snapshot(const std::string& path, const LoadOptions& options);
LoadResult load_snapshot_bytes(std::string_view bytes, const std::string& name_for_errors);

}  // namespace memtrace::reader
