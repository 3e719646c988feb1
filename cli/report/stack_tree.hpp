// Stacks as one tree of distinct paths, outermost frame at the root's children, so that a page
// holds each shared prefix once however many stacks share it (docs/report.md, "Trees").
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memtrace::report {

// Text shared by the trees and the page: each distinct label once, 0 is "".
class StringTable {
 public:
  StringTable() { strings_.emplace_back(); }
  uint32_t intern(std::string_view s);
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> ids_;
};

class StackTree {
 public:
  StackTree() {
    parent_.push_back(-1);
    name_.push_back(0);
  }
  // The node at the end of `path` (string ids, outermost first), added where missing; the root
  // (node 0) for an empty path.
  uint32_t add(const std::vector<uint32_t>& path);
  const std::vector<int32_t>& parent() const { return parent_; }
  const std::vector<uint32_t>& name() const { return name_; }

 private:
  std::vector<int32_t> parent_;
  std::vector<uint32_t> name_;
  std::unordered_map<uint64_t, uint32_t> child_;  // (parent << 32 | name) -> node
};

}  // namespace memtrace::report
