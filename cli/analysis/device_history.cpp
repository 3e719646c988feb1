#include "cli/analysis/device_history.hpp"

#include <algorithm>
#include <unordered_map>

namespace memtrace::analysis {

using reader::Action;
using reader::BlockState;

int device_count(const reader::Snapshot& s) {
  int n = static_cast<int>(s.device_traces.size());
  for (const auto& seg : s.segments) n = std::max(n, seg.device + 1);
  return n;
}

namespace {

constexpr uint32_t kNever = UINT32_MAX;

bool is_live(BlockState st) { return st == BlockState::ActiveAllocated || st == BlockState::ActivePendingFree; }

// Running sums are 128-bit: up to 2^32 entries of up to 2^64 bytes each (hostile files included)
// cannot overflow them.
using Sum = __int128;

uint64_t clamp_bytes(Sum v) {
  if (v < 0) return 0;
  if (v > static_cast<Sum>(UINT64_MAX)) return UINT64_MAX;
  return static_cast<uint64_t>(v);
}

}  // namespace

DeviceHistory analyze_history(const HistorySource& src, bool with_sets) {
  const std::vector<reader::TraceEntry>& tr = *src.trace;
  DeviceHistory h;
  h.device = src.device;
  const size_t n = std::min<size_t>(tr.size(), kNever - 1);
  h.entries = n;

  bool any_completed = false;
  for (size_t i = 0; i < n; ++i) {
    if (tr[i].action == Action::FreeCompleted) any_completed = true;
    int64_t t = tr[i].time_us;
    if (t != 0) {
      if (h.first_time_us == 0 || t < h.first_time_us) h.first_time_us = t;
      if (t > h.last_time_us) h.last_time_us = t;
    }
  }
  const Action closer = any_completed ? Action::FreeCompleted : Action::FreeRequested;

  // Pass 1: pair allocs with their frees; running sums relative to the (still unknown) start.
  std::vector<uint32_t> closed_at(with_sets ? n : 0, kNever);
  std::vector<uint32_t> frees_without_alloc;
  std::unordered_map<uint64_t, uint32_t> open;
  open.reserve(1024);
  Sum alloc_sum = 0, alloc_max = 0;
  Sum seg_sum = 0, seg_max = 0;
  int64_t peak_index = -1;
  Sum unknown_free_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const reader::TraceEntry& e = tr[i];
    if (e.action == Action::Alloc) {
      auto [it, inserted] = open.try_emplace(e.addr, static_cast<uint32_t>(i));
      if (!inserted) {  // its free was not recorded: it ends here
        alloc_sum -= static_cast<Sum>(tr[it->second].size);
        if (with_sets) closed_at[it->second] = static_cast<uint32_t>(i);
        it->second = static_cast<uint32_t>(i);
      }
      alloc_sum += static_cast<Sum>(e.size);
    } else if (e.action == closer) {
      auto it = open.find(e.addr);
      if (it != open.end()) {
        alloc_sum -= static_cast<Sum>(tr[it->second].size);
        if (with_sets) closed_at[it->second] = static_cast<uint32_t>(i);
        open.erase(it);
      } else {
        alloc_sum -= static_cast<Sum>(e.size);
        unknown_free_bytes += e.size;
        frees_without_alloc.push_back(static_cast<uint32_t>(i));
      }
    } else {
      seg_sum += segment_delta(e);
      seg_max = std::max(seg_max, seg_sum);
      continue;
    }
    if (alloc_sum > alloc_max) {
      alloc_max = alloc_sum;
      peak_index = static_cast<int64_t>(i);
    }
  }
  h.frees_without_alloc = frees_without_alloc.size();

  // Final state of this device.
  std::vector<LiveAlloc> untraced;
  Sum untraced_bytes = 0;
  for (const reader::Segment& seg : *src.segments) {
    if (!src.has(seg)) continue;
    ++h.segment_count;
    h.reserved_now += seg.total_size;
    for (const reader::Block& b : seg.blocks) {
      if (!is_live(b.state)) {
        h.free_in_segments += b.size;
        h.largest_free_block = std::max(h.largest_free_block, b.size);
        continue;
      }
      ++h.live_count;
      h.allocated_now += b.size;
      h.requested_now += b.requested_size;
      auto it = open.find(b.address);
      LiveAlloc a{b.address, b.requested_size, b.stack, 0, b.range};
      if (it != open.end()) {
        const reader::TraceEntry& e = tr[it->second];
        a.category = e.category;
        if (a.stack == 0) a.stack = e.stack;
        if (a.range == 0) a.range = e.range;
        a.bytes = e.size;  // the history's unit, so that the end of the walk is this state
      } else {
        ++h.untraced_blocks;
        untraced_bytes += a.bytes;
        if (with_sets) untraced.push_back(a);
      }
      if (with_sets) h.live_at_end.push_back(a);
    }
  }
  // Allocations the history leaves open but the final state lacks (an inconsistent file) stay alive
  // to the end: the walk counted them, so the end set does too.
  if (with_sets && open.size() + untraced.size() > h.live_at_end.size()) {
    std::unordered_map<uint64_t, bool> in_final;
    for (const LiveAlloc& a : h.live_at_end) in_final.emplace(a.addr, true);
    for (const auto& [addr, idx] : open)
      if (!in_final.count(addr)) h.live_at_end.push_back({addr, tr[idx].size, tr[idx].stack, tr[idx].category, tr[idx].range});
  }

  h.peak_allocated = clamp_bytes(untraced_bytes + unknown_free_bytes + alloc_max);
  h.peak_index = peak_index;
  h.peak_time_us = peak_index >= 0 ? tr[peak_index].time_us : 0;
  const Sum reserved_start = static_cast<Sum>(h.reserved_now) - seg_sum;
  h.peak_reserved = clamp_bytes(std::max<Sum>(reserved_start + seg_max, static_cast<Sum>(h.reserved_now)));

  if (with_sets) {
    h.live_at_peak = untraced;
    for (uint32_t i : frees_without_alloc)
      if (static_cast<int64_t>(i) > peak_index) h.live_at_peak.push_back({tr[i].addr, tr[i].size, tr[i].stack, tr[i].category, tr[i].range});
    for (int64_t i = 0; i <= peak_index; ++i) {
      const reader::TraceEntry& e = tr[i];
      if (e.action == Action::Alloc && (closed_at[i] == kNever || static_cast<int64_t>(closed_at[i]) > peak_index))
        h.live_at_peak.push_back({e.addr, e.size, e.stack, e.category, e.range});
    }
  }
  return h;
}

__int128 segment_delta(const reader::TraceEntry& e) {
  switch (e.action) {
    case Action::SegmentAlloc:
    case Action::SegmentMap:
      return static_cast<__int128>(e.size);
    case Action::SegmentFree:
    case Action::SegmentUnmap:
      return -static_cast<__int128>(e.size);
    default:
      return 0;
  }
}

HistorySource device_source(const reader::Snapshot& s, int device) {
  static const std::vector<reader::TraceEntry> kEmpty;
  const auto& tr = device >= 0 && device < static_cast<int>(s.device_traces.size()) ? s.device_traces[device] : kEmpty;
  return {&s.segments, true, device, &tr};
}

HistorySource host_source(const reader::Snapshot& s) { return {&s.host_segments, false, kHostDevice, &s.host_traces}; }

DeviceHistory analyze_device(const reader::Snapshot& s, int device, bool with_sets) {
  return analyze_history(device_source(s, device), with_sets);
}

bool has_host_memory(const reader::Snapshot& s) { return !s.host_segments.empty() || !s.host_traces.empty(); }

DeviceHistory analyze_host(const reader::Snapshot& s, bool with_sets) { return analyze_history(host_source(s), with_sets); }

}  // namespace memtrace::analysis
