// Range stacks interned into Snapshot::ranges: a stack is a node (parent, name), so finding a
// stack is one look-up per name and equal stacks get equal ids, whether they came from 'ranges'
// lists or were derived from markers.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::reader {

class RangeTable {
 public:
  explicit RangeTable(std::vector<RangeNode>* nodes);

  // The node for `name` inside `parent`, added when new. A new node's id is above its parent's.
  RangeId child(RangeId parent, StrId name);
  // The node of a whole stack, outermost first; only the outermost kMaxRangeDepth names count.
  RangeId stack(const StrId* names, size_t n);

 private:
  std::vector<RangeNode>* nodes_;
  std::unordered_map<uint64_t, RangeId> index_;  // (parent << 32 | name) -> node
};

}  // namespace memtrace::reader
