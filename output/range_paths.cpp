#include "output/range_paths.hpp"

#include <algorithm>

namespace memtrace::output {

namespace {
// A range past the table's bound has no name; it still shows where it sat.
constexpr std::string_view kUnnamed = "(unnamed range)";
}  // namespace

uint32_t RangePaths::id(uint32_t range, uint32_t phase) {
  if (range == 0 && phase == 0) return 0;
  const uint64_t key = static_cast<uint64_t>(phase) << 32 | range;
  auto [it, added] = ids_.emplace(key, static_cast<uint32_t>(pairs_.size() + 1));
  if (added) pairs_.push_back(key);
  return it->second;
}

std::string_view RangePaths::name_of(uint32_t node) const {
  if (node == 0 || node >= s_.range_nodes.size()) return kUnnamed;
  const uint32_t name = s_.range_nodes[node].name;
  if (name == 0 || name >= s_.range_names.size()) return kUnnamed;
  return s_.range_names[name];
}

void RangePaths::append_path(uint32_t node, std::vector<std::string_view>* out) const {
  const size_t first = out->size();
  // Parents always have smaller ids than their children, so the walk ends even on a bad copy.
  for (uint32_t n = node; n != 0 && n < s_.range_nodes.size(); n = s_.range_nodes[n].parent) {
    out->push_back(name_of(n));
    if (s_.range_nodes[n].parent >= n) break;
  }
  std::reverse(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
}

void RangePaths::names(uint32_t id, std::vector<std::string_view>* out) {
  out->clear();
  if (id == 0 || id > pairs_.size()) return;
  const uint64_t key = pairs_[id - 1];
  append_path(static_cast<uint32_t>(key >> 32), out);
  append_path(static_cast<uint32_t>(key), out);
}

}  // namespace memtrace::output
