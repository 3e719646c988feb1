// Allocations grouped the ways the commands report them: by stack (keyed by its text, so that the
// same call path groups together within a file and across files), by owner, by both, or by range
// stack (docs/ranges.md; keyed by its text too).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct Group {
  std::string stack;        // the stack's key (StackView::key, stack_text() without a view); "" by owner
  reader::StackId stack_id = 0;  // one of the stacks with that text (for frame lists)
  std::string owner;        // the owner ("unknown" when none); by stack or range: the owner holding most bytes
  std::string range;        // by range: range_text() ("a > b", "(no range)"); "" otherwise
  reader::RangeId range_id = 0;  // by range: one of the range stacks with that text
  uint64_t bytes = 0;
  uint64_t count = 0;
};

enum class GroupBy { kStack, kOwner, kStackAndOwner, kRange };

// Largest first (then most allocations, then by text): the order every command prints. With a view,
// stacks are grouped by the frames it shows (rows that would read the same are one row: text
// reports); without one, by the whole stack (JSON).
std::vector<Group> group_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs, GroupBy by,
                                StackView* view = nullptr);

}  // namespace memtrace::analysis
