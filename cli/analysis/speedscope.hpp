// The allocations live at a moment in speedscope's JSON file format
// (https://www.speedscope.app/file-format-schema.json): one "sampled" profile per device, each
// distinct stack one sample weighted by the requested bytes live there, "unit": "bytes", and one
// table of frames shared by all profiles (docs/reports.md, "Flame graphs").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct SpeedscopeProfile {
  std::string name;  // what is weighed: "device 0 live at the end"
  std::vector<LiveAlloc> allocs;
};

struct SpeedscopeFile {
  std::string json;   // one line, no trailing newline
  size_t samples = 0; // distinct stacks, over all profiles
  uint64_t bytes = 0; // all weights together
};

// The frames of a sample are the ones the folded output shows, with the same labels: with a view
// in FrameMode::kShort the frames the view shows, shortened; without one, or in kAll, every frame
// in full. A frame's "file" and "line" are the snapshot's, where it has them. Frames with the same
// label, file and line are one entry of the table; samples are sorted by their frames, outermost
// first, and an empty stack is the one frame "[no stack]", as in the folded output.
// `root` adds frames above each stack's outermost one, as fold_allocs() does (range names or the
// owner; none for kStack); they have no file or line.
SpeedscopeFile speedscope_file(const reader::Snapshot& s, const std::vector<SpeedscopeProfile>& profiles,
                               StackView* view, std::string_view name, GroupBy root = GroupBy::kStack);

}  // namespace memtrace::analysis
