#include "cli/analysis/layout.hpp"

#include <algorithm>
#include <map>

namespace memtrace::analysis {

using reader::Action;
using reader::BlockState;

namespace {

// Address ranges that do not overlap: the segments (or, for expandable segments, their mapped
// pieces) at one moment.
class RangeSet {
 public:
  void add(uint64_t addr, uint64_t size) {
    if (size == 0) return;
    remove(addr, size);
    ranges_[addr] = size;
  }
  void remove(uint64_t addr, uint64_t size) {
    const uint64_t end = addr + size < addr ? UINT64_MAX : addr + size;
    auto it = ranges_.upper_bound(addr);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      const uint64_t a = it->first, e = a + it->second;
      if (e <= addr) {
        ++it;
        continue;
      }
      it = ranges_.erase(it);
      if (a < addr) ranges_[a] = addr - a;
      if (e > end) ranges_[end] = e - end;
    }
  }
  // Adjacent ranges merged: a segment mapped in pieces is one run of address space.
  std::vector<std::pair<uint64_t, uint64_t>> runs() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [a, size] : ranges_) {
      if (!out.empty() && out.back().first + out.back().second == a)
        out.back().second += size;
      else
        out.emplace_back(a, size);
    }
    return out;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

Layout measure(const RangeSet& reserved, const std::map<uint64_t, uint64_t>& blocks, bool with_runs) {
  Layout l;
  for (const auto& [addr, size] : reserved.runs()) {
    const uint64_t end = addr + size;
    l.reserved += size;
    SegmentRun run{addr, size, {}};
    uint64_t cursor = addr;
    for (auto it = blocks.lower_bound(addr); it != blocks.end() && it->first < end; ++it) {
      if (it->first > cursor) l.largest_free = std::max(l.largest_free, it->first - cursor);
      const uint64_t used = std::min(it->second, end - it->first);
      l.allocated += used;
      if (with_runs) run.blocks.emplace_back(it->first, used);
      cursor = std::max(cursor, std::min(end, it->first + it->second));
    }
    if (end > cursor) l.largest_free = std::max(l.largest_free, end - cursor);
    if (with_runs) l.runs.push_back(std::move(run));
  }
  l.free_in_segments = l.reserved > l.allocated ? l.reserved - l.allocated : 0;
  return l;
}

}  // namespace

std::vector<Layout> layouts_after(const HistorySource& src, const std::vector<int64_t>& entries, bool with_runs) {
  std::vector<Layout> out(entries.size());
  if (entries.empty()) return out;
  const auto& tr = *src.trace;
  bool any_completed = false;
  for (const reader::TraceEntry& e : tr) any_completed = any_completed || e.action == Action::FreeCompleted;
  const Action closer = any_completed ? Action::FreeCompleted : Action::FreeRequested;

  // The final state, then every later entry undone, newest first.
  RangeSet reserved;
  std::map<uint64_t, uint64_t> blocks;
  for (const reader::Segment& seg : *src.segments) {
    if (!src.has(seg)) continue;
    reserved.add(seg.address, seg.total_size);
    for (const reader::Block& b : seg.blocks)
      if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) blocks[b.address] = b.size;
  }
  size_t next = entries.size();  // the layout to take when the undo reaches its entry
  auto take_due = [&](int64_t after) {
    while (next > 0 && entries[next - 1] >= after) {
      out[--next] = measure(reserved, blocks, with_runs);
      out[next].after_entry = entries[next];
    }
  };
  for (size_t i = tr.size(); i-- > 0 && next > 0;) {
    take_due(static_cast<int64_t>(i));
    const reader::TraceEntry& e = tr[i];
    if (e.action == Action::Alloc)
      blocks.erase(e.addr);
    else if (e.action == closer)
      blocks.emplace(e.addr, e.size);
    else if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap)
      reserved.remove(e.addr, e.size);
    else if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap)
      reserved.add(e.addr, e.size);
  }
  take_due(-1);
  return out;
}

}  // namespace memtrace::analysis
