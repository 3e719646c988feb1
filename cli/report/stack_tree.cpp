#include "cli/report/stack_tree.hpp"

namespace memtrace::report {

uint32_t StackTree::child(uint32_t node, uint32_t name) {
  const uint64_t key = (static_cast<uint64_t>(node) << 32) | name;
  auto [it, inserted] = child_.try_emplace(key, static_cast<uint32_t>(parent_.size()));
  if (inserted) {
    parent_.push_back(static_cast<int32_t>(node));
    name_.push_back(name);
  }
  return it->second;
}

uint32_t StackTree::add(const std::vector<uint32_t>& path) {
  uint32_t node = kRoot;
  for (uint32_t name : path) node = child(node, name);
  return node;
}

}  // namespace memtrace::report
