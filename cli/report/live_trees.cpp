#include "cli/report/live_trees.hpp"

#include <algorithm>
#include <map>

#include "cli/report/report_model.hpp"

namespace memtrace::report {

LiveTrees::LiveTrees(const reader::Snapshot& s, double keep_fraction)
    : s_(s), short_view_(s, analysis::FrameMode::kShort), keep_fraction_(keep_fraction) {
  for (int t = 0; t < 2; ++t) {
    leaf_[t].assign(s.stacks.size(), UINT32_MAX);
    keep_[t].assign(1, true);  // the root
    weight_[t].assign(1, 0);
  }
}

void LiveTrees::grow(TreeKind t) {
  keep_[t].resize(trees_[t].size(), false);
  weight_[t].resize(trees_[t].size(), 0);
}

uint32_t LiveTrees::leaf(reader::StackId id, TreeKind t) {
  uint32_t& l = leaf_[t][id];
  if (l != UINT32_MAX) return l;
  std::vector<reader::FrameId> frames = t == kShortTree ? short_view_.shown(id) : s_.stacks[id];
  std::vector<uint32_t> path(frames.rbegin(), frames.rend());  // outermost first
  if (path.empty()) path.push_back(StackTree::kNoStack);
  l = trees_[t].add(path);
  grow(t);
  return l;
}

void LiveTrees::keep_stack(reader::StackId id) {
  for (TreeKind t : {kShortTree, kAllTree}) {
    const auto& parent = trees_[t].parent();
    for (int64_t n = leaf(id, t); n >= 0 && !keep_[t][n]; n = parent[n]) keep_[t][n] = true;
  }
}

void LiveTrees::weigh(const std::vector<StackBytes>& live, uint64_t total, NodeBytes out[2]) {
  const double threshold = keep_fraction_ * static_cast<double>(total);
  for (TreeKind t : {kShortTree, kAllTree}) {
    for (const StackBytes& sb : live) leaf(sb.stack, t);
    const auto& parent = trees_[t].parent();
    std::vector<uint64_t>& w = weight_[t];
    for (const StackBytes& sb : live)
      for (int64_t n = leaf(sb.stack, t); n >= 0; n = parent[n]) {
        if (w[n] == 0) touched_.push_back(static_cast<uint32_t>(n));
        w[n] += sb.bytes;
      }
    std::map<uint32_t, uint64_t> self;
    for (const StackBytes& sb : live) {
      const int64_t l = leaf(sb.stack, t);
      int64_t n = l;
      while (n > 0 && static_cast<double>(w[n]) < threshold) n = parent[n];
      // A pruned stack's bytes go on its kept ancestor's "(smaller stacks)" child, so that the page
      // draws them as such rather than as the ancestor's own.
      uint32_t at = static_cast<uint32_t>(n);
      if (n != l) {
        at = trees_[t].child(at, StackTree::kSmaller);
        grow(t);
      }
      self[at] += sb.bytes;
      for (int64_t a = at; a >= 0 && !keep_[t][a]; a = trees_[t].parent()[a]) keep_[t][a] = true;
    }
    for (uint32_t n : touched_) w[n] = 0;
    touched_.clear();
    out[t].assign(self.begin(), self.end());
  }
}

}  // namespace memtrace::report
