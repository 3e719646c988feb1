// Folded stacks ("outer;...;inner bytes", one line per distinct stack, outermost frame first), the
// input flamegraph.pl, speedscope and inferno read, weighted by the bytes allocated there.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct FoldedLine {
  std::string stack;  // folded_stack()
  uint64_t bytes = 0;
};

// One line per distinct folded text, sorted by text (the order flamegraph.pl expects and a diff
// of two outputs reads best in). Zero-byte groups are left out.
// With a view in FrameMode::kShort, each stack keeps only the frames the view shows, shortened
// (docs/reports.md, "Readable stacks"); without one, or in kAll, every frame in full.
std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs,
                                    StackView* view = nullptr);
std::string folded_text(const std::vector<FoldedLine>& lines);

}  // namespace memtrace::analysis
