// Growth and shrinkage between two snapshots: the same grouping (by stack text, by owner, by range
// text) on each side, matched by text because stack, range and string ids are per file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/analysis/grouping.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

struct DiffRow {
  std::string key;    // stack text, owner name, or range text
  std::string owner;  // for stack rows: B's owner when present in B, else A's
  const reader::Snapshot* frames_from = nullptr;  // the side whose stack id is kept (B when present)
  reader::StackId stack_id = 0;
  reader::RangeId range_id = 0;  // by range: frames_from's range stack
  uint64_t bytes_a = 0, bytes_b = 0;
  uint64_t count_a = 0, count_b = 0;
  int64_t delta() const { return static_cast<int64_t>(bytes_b) - static_cast<int64_t>(bytes_a); }
};

// Rows whose bytes or counts differ, largest change first (then by key). `key` says which of the
// groups' texts matches rows: kOwner the owner, kRange the range, anything else the stack.
std::vector<DiffRow> diff_groups(const reader::Snapshot& a, const std::vector<Group>& ga, const reader::Snapshot& b,
                                 const std::vector<Group>& gb, GroupBy key);
// The same with `by_owner` choosing between kOwner and kStack.
inline std::vector<DiffRow> diff_groups(const reader::Snapshot& a, const std::vector<Group>& ga,
                                        const reader::Snapshot& b, const std::vector<Group>& gb, bool by_owner) {
  return diff_groups(a, ga, b, gb, by_owner ? GroupBy::kOwner : GroupBy::kStack);
}

}  // namespace memtrace::analysis
