#include "cli/analysis/oom.hpp"

#include <algorithm>
#include <map>

namespace memtrace::analysis {

using reader::Action;
using reader::BlockState;

namespace {

// Address ranges that do not overlap: the device's segments (or, for expandable segments, their
// mapped pieces) at one moment.
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
  uint64_t total() const {
    uint64_t t = 0;
    for (const auto& [a, size] : ranges_) t += size;
    return t;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

void measure(const RangeSet& reserved, const std::map<uint64_t, uint64_t>& blocks, OomReport& r) {
  r.reserved = reserved.total();
  for (const auto& [addr, end_size] : reserved.runs()) {
    const uint64_t end = addr + end_size;
    uint64_t cursor = addr;
    for (auto it = blocks.lower_bound(addr); it != blocks.end() && it->first < end; ++it) {
      if (it->first > cursor) r.largest_free = std::max(r.largest_free, it->first - cursor);
      r.allocated += std::min(it->second, end - it->first);
      cursor = std::max(cursor, std::min(end, it->first + it->second));
    }
    if (end > cursor) r.largest_free = std::max(r.largest_free, end - cursor);
  }
  r.free_in_segments = r.reserved > r.allocated ? r.reserved - r.allocated : 0;
}

}  // namespace

std::vector<OomReport> find_ooms(const reader::Snapshot& s, int device) {
  std::vector<OomReport> out;
  if (device < 0 || device >= static_cast<int>(s.device_traces.size())) return out;
  const auto& tr = s.device_traces[device];
  std::vector<size_t> at;
  bool any_completed = false;
  for (size_t i = 0; i < tr.size(); ++i) {
    if (tr[i].action == Action::Oom) at.push_back(i);
    any_completed = any_completed || tr[i].action == Action::FreeCompleted;
  }
  if (at.empty()) return out;
  const Action closer = any_completed ? Action::FreeCompleted : Action::FreeRequested;

  // The final state, then every later entry undone, newest first.
  RangeSet reserved;
  std::map<uint64_t, uint64_t> blocks;
  for (const reader::Segment& seg : s.segments) {
    if (seg.device != device) continue;
    reserved.add(seg.address, seg.total_size);
    for (const reader::Block& b : seg.blocks)
      if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) blocks[b.address] = b.size;
  }
  out.resize(at.size());
  size_t next = at.size();  // the oom entry to report when the undo reaches it
  for (size_t i = tr.size(); i-- > 0 && next > 0;) {
    const reader::TraceEntry& e = tr[i];
    if (i == at[next - 1]) {
      OomReport& r = out[--next];
      r.device = device;
      r.entry = i;
      r.time_us = e.time_us;
      r.requested = e.size;
      r.device_free = e.device_free;
      r.stack = e.stack;
      measure(reserved, blocks, r);
      continue;
    }
    if (e.action == Action::Alloc)
      blocks.erase(e.addr);
    else if (e.action == closer)
      blocks.emplace(e.addr, e.size);
    else if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap)
      reserved.remove(e.addr, e.size);
    else if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap)
      reserved.add(e.addr, e.size);
  }
  return out;
}

}  // namespace memtrace::analysis
