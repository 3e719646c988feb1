#include "cli/analysis/grouping.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

std::vector<Group> group_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs, GroupBy by,
                                StackView* view) {
  // First by (stack id, category): cheap keys; texts are built once per distinct pair.
  struct Acc {
    uint64_t bytes = 0, count = 0;
  };
  std::unordered_map<uint64_t, Acc> by_ids;
  for (const LiveAlloc& a : allocs) {
    // By range, the range id takes the stack's place in the key.
    uint64_t stack = by == GroupBy::kOwner ? 0 : by == GroupBy::kRange ? a.range : a.stack;
    uint64_t cat = a.category;
    Acc& acc = by_ids[(stack << 32) | cat];
    acc.bytes += a.bytes;
    ++acc.count;
  }
  // Then by text: (stack text, owner text), with per-owner bytes kept to name a stack's owner.
  struct Merged {
    Group g;
    std::map<std::string, uint64_t> owner_bytes;
  };
  std::map<std::pair<std::string, std::string>, Merged> merged;
  for (const auto& [k, acc] : by_ids) {
    auto stack = static_cast<reader::StackId>(k >> 32);
    auto cat = static_cast<reader::StrId>(k & 0xffffffffu);
    std::string owner{owner_name(s, cat)};
    std::string text = by == GroupBy::kOwner   ? std::string()
                       : by == GroupBy::kRange ? range_text(s, stack)
                       : view                  ? view->key(stack)
                                               : stack_text(s, stack);
    const bool owner_in_key = by == GroupBy::kOwner || by == GroupBy::kStackAndOwner;
    std::pair<std::string, std::string> key{text, owner_in_key ? owner : std::string()};
    auto [it, inserted] = merged.try_emplace(key);
    Merged& m = it->second;
    if (by == GroupBy::kRange) {
      if (inserted || stack < m.g.range_id) m.g.range_id = stack;  // lowest id: deterministic
      m.g.range = text;
    } else {
      if (inserted || stack < m.g.stack_id) m.g.stack_id = stack;
      m.g.stack = text;
    }
    m.g.bytes += acc.bytes;
    m.g.count += acc.count;
    m.owner_bytes[owner] += acc.bytes;
  }
  std::vector<Group> out;
  out.reserve(merged.size());
  for (auto& [key, m] : merged) {
    uint64_t best = 0;
    for (const auto& [owner, bytes] : m.owner_bytes)
      if (m.g.owner.empty() || bytes > best) {
        m.g.owner = owner;
        best = bytes;
      }
    out.push_back(std::move(m.g));
  }
  std::sort(out.begin(), out.end(), [](const Group& a, const Group& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    if (a.stack != b.stack) return a.stack < b.stack;
    if (a.range != b.range) return a.range < b.range;
    return a.owner < b.owner;
  });
  return out;
}

}  // namespace memtrace::analysis
