#include "cli/analysis/snapshot_diff.hpp"

#include <algorithm>
#include <map>

namespace memtrace::analysis {

std::vector<DiffRow> diff_groups(const reader::Snapshot& a, const std::vector<Group>& ga, const reader::Snapshot& b,
                                 const std::vector<Group>& gb, GroupBy key) {
  auto key_of = [key](const Group& g) -> const std::string& {
    return key == GroupBy::kOwner ? g.owner : key == GroupBy::kRange ? g.range : g.stack;
  };
  std::map<std::string, DiffRow> rows;
  for (const Group& g : ga) {
    DiffRow& r = rows[key_of(g)];
    r.key = key_of(g);
    r.owner = g.owner;
    r.frames_from = &a;
    r.stack_id = g.stack_id;
    r.range_id = g.range_id;
    r.bytes_a += g.bytes;
    r.count_a += g.count;
  }
  for (const Group& g : gb) {
    DiffRow& r = rows[key_of(g)];
    r.key = key_of(g);
    r.owner = g.owner;
    r.frames_from = &b;
    r.stack_id = g.stack_id;
    r.range_id = g.range_id;
    r.bytes_b += g.bytes;
    r.count_b += g.count;
  }
  std::vector<DiffRow> out;
  for (auto& [k, r] : rows)
    if (r.bytes_a != r.bytes_b || r.count_a != r.count_b) out.push_back(std::move(r));
  std::sort(out.begin(), out.end(), [](const DiffRow& x, const DiffRow& y) {
    uint64_t ax = x.delta() < 0 ? static_cast<uint64_t>(-x.delta()) : static_cast<uint64_t>(x.delta());
    uint64_t ay = y.delta() < 0 ? static_cast<uint64_t>(-y.delta()) : static_cast<uint64_t>(y.delta());
    if (ax != ay) return ax > ay;
    if (x.delta() != y.delta()) return x.delta() > y.delta();  // growth before shrinkage
    return x.key < y.key;
  });
  return out;
}

}  // namespace memtrace::analysis
