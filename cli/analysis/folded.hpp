// Folded stacks ("outer;...;inner bytes", one line per distinct stack, outermost frame first), the
// input flamegraph.pl, speedscope and inferno read, weighted by the bytes allocated there.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
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
// `root` puts frames above the stack's outermost one: kRange the allocation's range names,
// outermost first ("(no range)" for none), kOwner its owner; anything else none.
std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs,
                                    StackView* view = nullptr, GroupBy root = GroupBy::kStack);
// The root frames `root` puts above an allocation's stack (none for kStack), outermost first.
std::vector<std::string> root_frames(const reader::Snapshot& s, const LiveAlloc& a, GroupBy root);
// The allocations summed per (stack, root group): the owner's category or the range beside the
// stack, cheap ids first, texts built once per group by the caller. `example` is one of them.
struct RootedStack {
  reader::StackId stack = 0;
  uint64_t bytes = 0;
  const LiveAlloc* example = nullptr;
};
std::vector<RootedStack> group_by_stack_and_root(const std::vector<LiveAlloc>& allocs, GroupBy root);
std::string folded_text(const std::vector<FoldedLine>& lines);

}  // namespace memtrace::analysis
