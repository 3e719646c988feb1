#include "cli/analysis/replay_plan.hpp"

#include <map>
#include <unordered_map>

namespace memtrace::analysis::replay {

namespace rd = memtrace::reader;

namespace {

bool is_release(rd::Action a) { return a == rd::Action::SegmentFree || a == rd::Action::SegmentUnmap; }

// Marks the first entry of each run of segment_free/segment_unmap entries that is the program's
// empty_cache() (replay_plan.hpp, "Recorded releases") and counts both kinds of release into `p`.
std::vector<bool> empty_cache_runs(const std::vector<rd::TraceEntry>& trace, Plan* p) {
  std::vector<bool> at(trace.size(), false);
  auto passed_over = [](rd::Action a) {  // entries that neither end a release nor start an allocation
    return a == rd::Action::Snapshot || a == rd::Action::Other;
  };
  size_t i = 0;
  while (i < trace.size()) {
    if (!is_release(trace[i].action)) {
      ++i;
      continue;
    }
    const size_t first = i;
    while (i < trace.size() && (is_release(trace[i].action) || passed_over(trace[i].action))) ++i;
    // What follows the run: the allocation that released, or anything else. A free_completed here
    // is an allocation's processing of record_stream events, not the program's.
    size_t j = i;
    while (j < trace.size() && (passed_over(trace[j].action) || trace[j].action == rd::Action::FreeCompleted ||
                                is_release(trace[j].action)))
      ++j;
    bool by_allocation = false;
    if (j < trace.size()) {
      rd::Action a = trace[j].action;
      by_allocation = (a == rd::Action::SegmentAlloc || a == rd::Action::SegmentMap || a == rd::Action::Oom) &&
                      trace[j].stack == trace[first].stack;
    }
    if (by_allocation) {
      ++p->allocation_releases;
    } else {
      at[first] = true;
      ++p->empty_cache_calls;
    }
  }
  return at;
}

}  // namespace

Plan build_plan(const rd::Snapshot& snap, int device) {
  Plan p;
  p.device = device;
  static const std::vector<rd::TraceEntry> kNone;
  const auto& trace = device < static_cast<int>(snap.device_traces.size()) ? snap.device_traces[device] : kNone;
  p.entries = trace.size();
  p.entries_dropped = snap.producer == rd::Producer::kMemtrace ? snap.memtrace.entries_dropped : 0;
  p.recorded_by_cache = snap.producer == rd::Producer::kPyTorch || snap.memtrace.allocator_caching;

  struct State {
    bool live = false;        // allocated in the replay
    bool allocated_in_trace = false;
    int64_t pending = -1;     // op index of a free_requested waiting for its free_completed
  };
  std::unordered_map<uint64_t, State> at;
  std::map<uint64_t, Op> pre;  // by address
  const std::vector<bool> empty_cache_at =
      snap.producer == rd::Producer::kPyTorch ? empty_cache_runs(trace, &p) : std::vector<bool>(trace.size(), false);
  auto preallocate = [&](uint64_t addr, uint64_t size, uint64_t stream) {
    pre[addr] = Op{OpKind::Alloc, true, -1, addr, size, stream};
    at[addr].live = true;
  };
  auto close_pending = [&](State& s) {  // the free_requested becomes the free
    p.ops[s.pending].enabled = true;
    s.pending = -1;
    s.live = false;
    ++p.frees;
  };

  for (size_t i = 0; i < trace.size(); ++i) {
    const rd::TraceEntry& e = trace[i];
    const int64_t ev = static_cast<int64_t>(i);
    switch (e.action) {
      case rd::Action::Alloc: {
        State& s = at[e.addr];
        if (s.pending >= 0) close_pending(s);  // its free_completed never came
        if (s.live) {                          // allocated twice without a free: the free is lost
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, snap.stream_value(e.stream)});
          ++p.skipped;
        }
        p.ops.push_back(Op{OpKind::Alloc, true, ev, e.addr, e.size, snap.stream_value(e.stream)});
        s.live = true;
        s.allocated_in_trace = true;
        ++p.allocs;
        break;
      }
      case rd::Action::FreeRequested:
      case rd::Action::FreeCompleted: {
        State& s = at[e.addr];
        bool completed = e.action == rd::Action::FreeCompleted;
        if (completed && s.pending >= 0) {
          s.pending = -1;
          s.live = false;
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, snap.stream_value(e.stream)});
          ++p.frees;
          break;
        }
        if (!s.live) {
          if (s.allocated_in_trace || pre.count(e.addr) || s.pending >= 0) {
            ++p.skipped;  // a second free of the same block
            break;
          }
          preallocate(e.addr, e.size, snap.stream_value(e.stream));  // alive since before the first kept entry
        }
        if (completed) {
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, snap.stream_value(e.stream)});
          s.live = false;
          ++p.frees;
        } else {
          s.pending = static_cast<int64_t>(p.ops.size());
          p.ops.push_back(Op{OpKind::Free, false, ev, e.addr, 0, snap.stream_value(e.stream)});
        }
        break;
      }
      case rd::Action::Oom:
        p.ops.push_back(Op{OpKind::RecordedOom, true, ev, 0, e.size, snap.stream_value(e.stream)});
        ++p.recorded_ooms;
        break;
      case rd::Action::SegmentAlloc: p.segment_allocs.emplace_back(e.addr, e.size); break;
      case rd::Action::SegmentFree:
      case rd::Action::SegmentUnmap:
        if (empty_cache_at[i]) p.ops.push_back(Op{OpKind::EmptyCache, true, ev, 0, 0, 0});
        (e.action == rd::Action::SegmentFree ? p.segment_frees : p.segment_unmaps).push_back(e.size);
        break;
      case rd::Action::SegmentMap: p.segment_maps.push_back(e.size); break;
      default: break;
    }
  }
  for (auto& [addr, s] : at)
    if (s.pending >= 0) close_pending(s);  // freed but not completed when the snapshot was taken

  // Blocks alive at the end that the trace never allocated were alive before it began.
  for (const rd::Segment& seg : snap.segments) {
    if (seg.device != device) continue;
    for (const rd::Block& b : seg.blocks) {
      if (b.state != rd::BlockState::ActiveAllocated && b.state != rd::BlockState::ActivePendingFree) continue;
      auto it = at.find(b.address);
      if (it != at.end() && (it->second.live || it->second.allocated_in_trace)) continue;
      if (pre.count(b.address)) continue;
      preallocate(b.address, b.requested_size ? b.requested_size : b.size, seg.stream);
    }
  }
  for (auto& [addr, op] : pre) p.prealloc.push_back(op);
  p.truncated = !p.prealloc.empty() || p.skipped > 0 || p.entries_dropped > 0;
  return p;
}

int default_device(const rd::Snapshot& snap) {
  // The device with the most events (entries, then segments): a file whose memory is all on
  // device 1 replays device 1.
  const int n = snap.device_count();
  std::vector<uint64_t> events(static_cast<size_t>(n > 0 ? n : 1), 0);
  for (size_t d = 0; d < snap.device_traces.size(); ++d) events[d] += snap.device_traces[d].size();
  for (const rd::Segment& seg : snap.segments)
    if (seg.device >= 0 && seg.device < n) events[static_cast<size_t>(seg.device)] += 1 + seg.blocks.size();
  int best = 0;
  for (int d = 1; d < n; ++d)
    if (events[static_cast<size_t>(d)] > events[static_cast<size_t>(best)]) best = d;
  return best;
}

}  // namespace memtrace::analysis::replay
