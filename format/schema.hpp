// The names a snapshot is spelled with, shared by the writer (output/) and the reader
// (cli/reader/): trace actions and block states (docs/snapshot-format.md, "Trace entries and their
// actions", "Blocks and block states"). The dict keys live beside them in keys.hpp.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace memtrace::format {

// One allocator action, as PyTorch's trace entries name them. memtrace records and writes the
// first kActionCount; Other is what a reader makes of an action name it does not know (kept, and
// ignored by the analyses).
enum class Action : uint8_t {
  Alloc,
  FreeRequested,
  FreeCompleted,
  SegmentAlloc,
  SegmentFree,
  SegmentMap,
  SegmentUnmap,
  Oom,
  Snapshot,
  Other,
};
inline constexpr int kActionCount = 9;

inline constexpr const char* kActionNames[kActionCount] = {
    "alloc",       "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap",  "oom",            "snapshot",
};

// Spelled exactly as PyTorch's snapshot writes them; "other" for Other.
inline const char* action_name(Action a) {
  const int i = static_cast<int>(a);
  return i < kActionCount ? kActionNames[i] : "other";
}

// An action newer PyTorch writes (record_function annotations). memtrace never does; its reader
// keeps it as Other, and `memtrace merge` carries it over.
inline constexpr std::string_view kAnnotateAction = "annotate";

// Parses one name; returns false for an unknown one (and leaves *out alone).
inline bool parse_action(std::string_view name, Action* out) {
  for (int i = 0; i < kActionCount; ++i) {
    if (name == kActionNames[i]) {
      *out = static_cast<Action>(i);
      return true;
    }
  }
  return false;
}

// A block's state inside its segment. The writer writes the first three; Other is a state name a
// reader does not know.
enum class BlockState : uint8_t { ActiveAllocated, ActivePendingFree, Inactive, Other };
inline constexpr int kBlockStateCount = 3;
inline constexpr const char* kBlockStateNames[kBlockStateCount] = {"active_allocated", "active_pending_free",
                                                                   "inactive"};
// PyTorch's Python docs spell ActivePendingFree this way; its C++ and the viewer use the name
// above (docs/snapshot-format.md, "Blocks and block states"). Readers accept both.
inline constexpr std::string_view kAwaitingFreeAlias = "active_awaiting_free";
inline const char* block_state_name(BlockState s) {
  const int i = static_cast<int>(s);
  return i < kBlockStateCount ? kBlockStateNames[i] : "other";
}

}  // namespace memtrace::format
