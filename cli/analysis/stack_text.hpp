// How a stack reads: the text that identifies it across files (ids differ from one snapshot to the
// next, frame text does not) and the folded form flame graph tools read.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

// "name (file:line)", "name (file)" when line is 0, "name" without a file, "??" without a name.
std::string frame_text(const reader::Snapshot& s, reader::FrameId f);
// Innermost first, " < " between frames (the allocation site reads first); "[no stack]" when empty.
std::string stack_text(const reader::Snapshot& s, reader::StackId id);
// The same for a list of frames (a stack's shown frames).
std::string frames_text(const reader::Snapshot& s, const std::vector<reader::FrameId>& frames);
// Outermost first, ';' between frames (flamegraph.pl's folded format); ';' and newlines inside a
// frame are replaced so a frame stays one field. Empty stacks become "[no stack]".
std::string folded_stack(const reader::Snapshot& s, reader::StackId id);
// A range stack as it reads (docs/ranges.md): its names outermost first, " > " between them;
// kNoRange for none.
inline constexpr std::string_view kNoRange = "(no range)";
std::string range_text(const reader::Snapshot& s, reader::RangeId id);
// A trace entry's owner: its category, "unknown" when it has none.
std::string_view owner_name(const reader::Snapshot& s, reader::StrId category);

}  // namespace memtrace::analysis
