#include "cli/reader/range_table.hpp"

#include <algorithm>

namespace memtrace::reader {

RangeTable::RangeTable(std::vector<RangeNode>* nodes) : nodes_(nodes) {
  if (nodes_->empty()) nodes_->push_back(RangeNode{});
  // A table that already has nodes (the decoder's, when markers are derived after it) is indexed
  // so that a derived stack equal to a read one gets the same id.
  for (size_t i = 1; i < nodes_->size(); ++i)
    index_.emplace(uint64_t{(*nodes_)[i].parent} << 32 | (*nodes_)[i].name, static_cast<RangeId>(i));
}

RangeId RangeTable::child(RangeId parent, StrId name) {
  auto [it, added] = index_.try_emplace(uint64_t{parent} << 32 | name, static_cast<RangeId>(nodes_->size()));
  if (added) nodes_->push_back(RangeNode{parent, name});
  return it->second;
}

RangeId RangeTable::stack(const StrId* names, size_t n) {
  RangeId id = 0;
  for (size_t i = 0; i < std::min(n, kMaxRangeDepth); ++i) id = child(id, names[i]);
  return id;
}

}  // namespace memtrace::reader
