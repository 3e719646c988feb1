// The live set of each moment as weights on two stack trees (the frames the text reports show, and
// every frame), pruned so the page stays small: a node is kept when what lives below it reaches
// keep_fraction of the moment's bytes; the bytes of a stack whose own path is pruned go to a
// "(smaller stacks)" child of its deepest kept ancestor, so every moment's weights still add up to
// its total (docs/report.md, "Trees").
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"
#include "cli/report/stack_tree.hpp"

namespace memtrace::report {

struct StackBytes;

enum TreeKind { kShortTree = 0, kAllTree = 1 };

using NodeBytes = std::vector<std::pair<uint32_t, uint64_t>>;  // (node, bytes), node order

class LiveTrees {
 public:
  LiveTrees(const reader::Snapshot& s, double keep_fraction);

  // One moment's live stacks (bytes per stack) -> its weights in each tree.
  void weigh(const std::vector<StackBytes>& live, uint64_t total, NodeBytes out[2]);
  // A stack the page names in full (a large allocation, an OOM): its whole path is kept.
  void keep_stack(reader::StackId id);
  uint32_t leaf(reader::StackId id, TreeKind t);

  const StackTree& tree(TreeKind t) const { return trees_[t]; }
  bool kept(TreeKind t, uint32_t node) const { return keep_[t][node]; }

 private:
  void grow(TreeKind t);

  const reader::Snapshot& s_;
  analysis::StackView short_view_;
  double keep_fraction_;
  StackTree trees_[2];
  std::vector<uint32_t> leaf_[2];   // per stack id; UINT32_MAX until added
  std::vector<bool> keep_[2];       // per node
  std::vector<uint64_t> weight_[2]; // per node, scratch (zero between moments)
  std::vector<uint32_t> touched_;
};

}  // namespace memtrace::report
