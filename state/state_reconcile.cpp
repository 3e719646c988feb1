#include "state/state_reconcile.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace memtrace::state {

namespace {

using format::Action;

bool plain(const TraceEntry& e) { return e.kind != MemKind::Cached; }

// Every address range a plain segment held at some point of the kept history. A live slot that
// overlaps one of them cannot have been allocated before that history began (its bytes would have
// been taken all along), so it is an allocation whose events were never written.
class HistoryRanges {
 public:
  explicit HistoryRanges(const std::vector<TraceEntry>& t) {
    for (const TraceEntry& e : t)
      if (plain(e) && (e.action == Action::SegmentAlloc || e.action == Action::SegmentFree) && e.size > 0)
        spans_.push_back({e.device, e.addr, e.addr + e.size});
    std::sort(spans_.begin(), spans_.end(), [](const Span& a, const Span& b) {
      return a.device != b.device ? a.device < b.device : a.start < b.start;
    });
    reach_.resize(spans_.size());
    for (size_t i = 0; i < spans_.size(); ++i)
      reach_[i] = i > 0 && spans_[i - 1].device == spans_[i].device ? std::max(reach_[i - 1], spans_[i].end)
                                                                     : spans_[i].end;
  }
  // Whether [lo, hi) on `device` meets any range: of that device's ranges starting below hi, the
  // farthest end passes lo.
  bool overlaps(int16_t device, uint64_t lo, uint64_t hi) const {
    auto it = std::lower_bound(spans_.begin(), spans_.end(), Span{device, hi, 0}, [](const Span& a, const Span& b) {
      return a.device != b.device ? a.device < b.device : a.start < b.start;
    });
    if (it == spans_.begin()) return false;
    const size_t j = static_cast<size_t>(it - spans_.begin()) - 1;
    return spans_[j].device == device && reach_[j] > lo;
  }

 private:
  struct Span {
    int16_t device;
    uint64_t start, end;
  };
  std::vector<Span> spans_;     // by (device, start)
  std::vector<uint64_t> reach_;  // the largest end among the same device's spans_ up to i
};

AllocRecord record_from(const std::vector<TraceEntry>& t, size_t i) {
  const TraceEntry& e = t[i];
  AllocRecord r;
  r.addr = e.addr;
  r.requested = e.size;
  r.size = i > 0 && t[i - 1].action == Action::SegmentAlloc && t[i - 1].addr == e.addr ? t[i - 1].size : e.size;
  r.stream = e.stream;
  r.time_us = e.time_us;
  r.stack_id = e.stack_id;
  r.device = e.device;
  r.kind = e.kind;
  return r;
}

}  // namespace

// The ring lock orders all events, so only the last one can be half written: a trailing
// segment_alloc without its alloc, or a free group cut short, is dropped. Then the history decides
// for every address it names; a slot it does not name is kept when it can predate the history and
// dropped when its bytes were some segment's inside it. memtrace's caching allocator's records are
// left as the slots have them.
void reconcile(StateCopy* c) {
  auto& t = c->trace;
  if (!t.empty() && plain(t.back()) && t.back().action == Action::SegmentAlloc) t.pop_back();
  while (!t.empty() && plain(t.back()) &&
         (t.back().action == Action::FreeRequested || t.back().action == Action::FreeCompleted))
    t.pop_back();
  std::unordered_map<uint64_t, size_t> last;  // address -> index of its last alloc or segment_free
  for (size_t i = 0; i < t.size(); ++i)
    if (plain(t[i]) && (t[i].action == Action::Alloc || t[i].action == Action::SegmentFree)) last[t[i].addr] = i;
  const HistoryRanges ranges(t);
  std::unordered_map<uint64_t, size_t> live_at;
  std::vector<bool> drop(c->live.size(), false);
  for (size_t i = 0; i < c->live.size(); ++i) {
    const AllocRecord& r = c->live[i];
    if (r.kind == MemKind::Cached) continue;
    live_at[r.addr] = i;
    if (!last.count(r.addr) && ranges.overlaps(r.device, r.addr, r.addr + std::max<uint64_t>(r.size, 1))) drop[i] = true;
  }
  for (const auto& [addr, i] : last) {
    auto it = live_at.find(addr);
    if (t[i].action == Action::SegmentFree) {
      if (it != live_at.end()) drop[it->second] = true;  // its slot was taken after this free
    } else if (it == live_at.end()) {
      c->live.push_back(record_from(t, i));  // its slot was dropped, its free not recorded yet
      drop.push_back(false);
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < c->live.size(); ++i)
    if (!drop[i]) c->live[k++] = c->live[i];
  c->live.resize(k);
}

}  // namespace memtrace::state
