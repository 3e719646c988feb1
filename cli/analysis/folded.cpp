#include "cli/analysis/folded.hpp"

#include <map>
#include <unordered_map>

#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs) {
  std::unordered_map<reader::StackId, uint64_t> by_id;
  for (const LiveAlloc& a : allocs) by_id[a.stack] += a.bytes;
  std::map<std::string, uint64_t> by_text;
  for (const auto& [id, bytes] : by_id)
    if (bytes) by_text[folded_stack(s, id)] += bytes;
  std::vector<FoldedLine> out;
  out.reserve(by_text.size());
  for (auto& [text, bytes] : by_text) out.push_back({text, bytes});
  return out;
}

std::string folded_text(const std::vector<FoldedLine>& lines) {
  std::string out;
  for (const FoldedLine& l : lines) {
    out += l.stack;
    out += ' ';
    out += std::to_string(l.bytes);
    out += '\n';
  }
  return out;
}

}  // namespace memtrace::analysis
