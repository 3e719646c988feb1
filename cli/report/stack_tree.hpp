// Stacks as one tree of distinct paths, outermost frame at the root's children, so that a page
// holds each shared prefix once however many stacks share it (docs/report.md, "Trees").
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace memtrace::report {

class StackTree {
 public:
  static constexpr uint32_t kRoot = 0;
  static constexpr uint32_t kNoStack = UINT32_MAX;  // the name of the node an empty stack ends at
  // The name of the child that holds a node's stacks too small to be drawn one by one.
  static constexpr uint32_t kSmaller = UINT32_MAX - 1;

  StackTree() {
    parent_.push_back(-1);
    name_.push_back(kNoStack);
  }
  // The node at the end of `path` (frame ids, outermost first), added where missing.
  uint32_t add(const std::vector<uint32_t>& path);
  // The child of `node` named `name`, added when missing.
  uint32_t child(uint32_t node, uint32_t name);
  const std::vector<int32_t>& parent() const { return parent_; }
  const std::vector<uint32_t>& name() const { return name_; }
  size_t size() const { return parent_.size(); }

 private:
  std::vector<int32_t> parent_;
  std::vector<uint32_t> name_;
  std::unordered_map<uint64_t, uint32_t> child_;  // (parent << 32 | name) -> node
};

}  // namespace memtrace::report
