// The reading side's picture of one snapshot file: what memtrace or PyTorch wrote, decoded from the
// pickle into plain typed structs that the analysis commands work on. Nothing here knows about the
// pickle format (pickle_reader does) or about any command.
//
// Memory: strings (file names, function names, categories) are interned once per snapshot, and a
// stack is a list of frame ids stored once, so a file with 1M trace entries and 10k distinct stacks
// costs about 64 bytes per entry here (sizeof(TraceEntry)).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::reader {

using StrId = uint32_t;    // index into Snapshot::strings; 0 is always ""
using FrameId = uint32_t;  // index into Snapshot::frames
using StackId = uint32_t;  // index into Snapshot::stacks; 0 is always the empty stack

struct Frame {
  StrId filename = 0;
  StrId name = 0;
  int64_t line = 0;
};

enum class Action : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
  kOther,  // an action string this reader does not know (kept, ignored by the analyses)
};
std::string_view action_name(Action a);

enum class BlockState : uint8_t { kActiveAllocated, kActivePendingFree, kInactive, kOther };

struct Block {
  uint64_t address = 0;  // recomputed as segment.address + earlier sizes, as the viewer does
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::kInactive;
  StackId stack = 0;
};

struct Segment {
  int device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t stream = 0;
  StrId segment_type = 0;  // "small" / "large" / "" when absent
  bool is_expandable = false;
  StackId stack = 0;       // the segment's own frames, when written
  std::vector<Block> blocks;
};

struct TraceEntry {
  Action action = Action::kOther;
  StrId action_str = 0;      // the original string (kept for kOther)
  uint64_t addr = 0;         // absent for oom -> 0
  uint64_t size = 0;
  uint64_t stream = 0;
  int64_t time_us = 0;       // 0 when absent
  StackId stack = 0;
  StrId category = 0;        // "" when absent
  std::optional<uint64_t> device_free;  // oom only
};

// Where the file came from: memtrace writes allocator_settings['memtrace'] (a dict); PyTorch does not.
enum class Producer : uint8_t { kMemtrace, kPyTorch };

struct MemtraceInfo {       // allocator_settings['memtrace'] when present
  int64_t pid = -1;
  std::string rank;         // "" when unknown
  std::string host, exe, reason;
  int64_t entries_dropped = 0;  // history entries overwritten before the dump
  bool allocator_caching = false;
};

struct Snapshot {
  Producer producer = Producer::kPyTorch;
  std::vector<std::string> strings{""};
  std::vector<Frame> frames;
  std::vector<std::vector<FrameId>> stacks{{}};  // innermost frame first, as in the file
  std::vector<Segment> segments;                  // all devices, as in the file
  std::vector<std::vector<TraceEntry>> device_traces;  // outer index = device
  MemtraceInfo memtrace;                          // defaults when producer is kPyTorch
  // PyTorch's allocator_settings (and memtrace's), kept as "key=value" strings for display only.
  std::vector<std::pair<std::string, std::string>> settings;

  std::string_view str(StrId id) const { return strings[id]; }
  int device_count() const;  // max(device_traces.size(), 1 + highest segment device)
};

// A load failure: one line for the user ("snap.pickle: truncated at byte 1234 (opcode 0x71)").
struct LoadError {
  std::string message;
};

// Reads and decodes a snapshot file. Never throws, never aborts: every bad input (truncated, not a
// pickle, a pickle of something else, missing keys, hostile sizes or nesting) becomes a LoadError.
// Memory use is bounded by a small multiple of the file size.
//
// Accepted: Python pickle protocols 0-5 of plain data (object-constructing opcodes are refused),
// memtrace's writer, the TorchScript pickler. Integers are exact in [INT64_MIN, UINT64_MAX]; a
// field that needs a number outside that range is a LoadError naming the field (elsewhere, e.g. in
// allocator_settings, it is shown as "<integer out of range>"). Required keys: 'segments' and
// 'device_traces' at the top; 'address', 'total_size', 'blocks' per segment; 'size' per block;
// 'action' per trace entry; everything else defaults to 0 / "" / the empty stack. Legacy shapes: a
// bare list of segments loads with no device_traces; blocks with 'history' instead of 'frames' use
// history[0]. Details: snapshot_decoder.cpp and pickle_vm.hpp.
struct LoadResult {
  std::optional<Snapshot> snapshot;
  std::optional<LoadError> error;
};
LoadResult load_snapshot(const std::string& path);
LoadResult load_snapshot_bytes(std::string_view bytes, const std::string& name_for_errors);

}  // namespace memtrace::reader
