#include "cli/report/report_model.hpp"

#include <algorithm>
#include <map>

#include "cli/analysis/human_size.hpp"
#include "cli/analysis/report.hpp"
#include "cli/analysis/stack_text.hpp"
#include "cli/report/history_sweep.hpp"

namespace memtrace::report {

using analysis::HistorySource;
using reader::Action;

namespace {

std::vector<HistorySource> sources(const reader::Snapshot& s, const std::vector<int>& devices, bool host) {
  std::vector<HistorySource> out;
  for (int d : devices) out.push_back(analysis::device_source(s, d));
  if (host) out.push_back(analysis::host_source(s));
  return out;
}

// Owners by the bytes their allocations asked for over the kept history, largest first; past
// max_owners - 1 the rest are one "other". Returns category StrId -> owner id.
std::vector<uint32_t> choose_owners(const reader::Snapshot& s, const std::vector<HistorySource>& srcs, size_t max_owners,
                                    std::vector<std::string>* names) {
  std::map<reader::StrId, uint64_t> bytes;
  bytes[0] = 0;  // "unknown" always exists: blocks older than the history have no category
  for (const HistorySource& src : srcs)
    for (const reader::TraceEntry& e : *src.trace)
      if (e.action == Action::Alloc) bytes[e.category] += e.size;
  std::vector<std::pair<uint64_t, reader::StrId>> order;
  for (const auto& [c, b] : bytes) order.emplace_back(b, c);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : analysis::owner_name(s, a.second) < analysis::owner_name(s, b.second);
  });
  std::vector<uint32_t> of(s.strings.size(), 0);
  const bool fold = order.size() > max_owners;
  const size_t named = fold ? max_owners - 1 : order.size();
  for (size_t k = 0; k < order.size(); ++k) {
    if (k < named) {
      of[order[k].second] = static_cast<uint32_t>(names->size());
      names->emplace_back(analysis::owner_name(s, order[k].second));
    } else {
      of[order[k].second] = static_cast<uint32_t>(named);
    }
  }
  if (fold) names->emplace_back("other");
  return of;
}

// Range stacks by the bytes their allocations asked for over the kept history, largest first (as
// owners are chosen); past max_ranges - 1 the rest are one "other ranges". "(no range)" always
// exists: blocks older than the history may have none. Returns RangeId -> range group; empty
// (and no names) when the snapshot has no ranges.
std::vector<uint32_t> choose_ranges(const reader::Snapshot& s, const std::vector<HistorySource>& srcs, size_t max_ranges,
                                    std::vector<std::string>* names) {
  if (s.ranges_from == reader::RangesFrom::kNone) return {};
  std::map<reader::RangeId, uint64_t> bytes;
  bytes[0] = 0;
  for (const HistorySource& src : srcs) {
    for (const reader::TraceEntry& e : *src.trace)
      if (e.action == Action::Alloc) bytes[e.range] += e.size;
    for (const reader::Segment& seg : *src.segments)
      if (src.has(seg))
        for (const reader::Block& b : seg.blocks) bytes[b.range] += 0;  // named even when only a block has it
  }
  std::vector<std::pair<uint64_t, std::string>> order;
  std::vector<reader::RangeId> ids;
  for (const auto& [r, b] : bytes) {
    order.emplace_back(b, analysis::range_text(s, r));
    ids.push_back(r);
  }
  std::vector<size_t> idx(order.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return order[a].first != order[b].first ? order[a].first > order[b].first : order[a].second < order[b].second;
  });
  std::vector<uint32_t> of(s.ranges.size(), 0);
  const bool fold = idx.size() > max_ranges;
  const size_t named = fold ? max_ranges - 1 : idx.size();
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k < named) {
      of[ids[idx[k]]] = static_cast<uint32_t>(names->size());
      names->push_back(order[idx[k]].second);
    } else {
      of[ids[idx[k]]] = static_cast<uint32_t>(named);
    }
  }
  if (fold) names->emplace_back("other ranges");
  return of;
}

// Each entry's place on the time axis: microseconds since t0 (an entry without a time takes the
// previous one's), or its index when the file has no times at all.
std::vector<int64_t> positions(const std::vector<reader::TraceEntry>& tr, bool timed, int64_t t0) {
  std::vector<int64_t> x(tr.size());
  int64_t prev = 0;
  for (size_t i = 0; i < tr.size(); ++i) {
    if (!timed) {
      x[i] = static_cast<int64_t>(i);
      continue;
    }
    if (tr[i].time_us != 0) prev = tr[i].time_us - t0;
    x[i] = prev;
  }
  return x;
}

// The entries whose states the page keeps: the peak, each OOM, the end, and `count` more spread
// evenly over the time axis (the last entry at or before each target time); every state, the one
// before the first entry included, when the history has no more entries than that.
std::vector<int64_t> checkpoints(const std::vector<int64_t>& x, int64_t peak, const std::vector<int64_t>& ooms, size_t count) {
  std::vector<int64_t> cp{peak};
  cp.insert(cp.end(), ooms.begin(), ooms.end());
  const int64_t n = static_cast<int64_t>(x.size());
  cp.push_back(n - 1);
  if (n > 0 && static_cast<size_t>(n) <= count) {  // a short history: every state is a moment
    for (int64_t e = -1; e < n; ++e) cp.push_back(e);
  } else if (n > 0 && count > 0) {
    const bool sorted = std::is_sorted(x.begin(), x.end());
    const int64_t first = x.front(), span = x.back() - x.front();
    for (size_t k = 1; k <= count; ++k) {
      int64_t e;
      if (sorted && span > 0) {
        const int64_t target = first + static_cast<int64_t>(static_cast<__int128>(span) * k / count);
        e = static_cast<int64_t>(std::upper_bound(x.begin(), x.end(), target) - x.begin()) - 1;
      } else {
        e = static_cast<int64_t>(static_cast<__int128>(n) * k / count) - 1;
      }
      cp.push_back(e);
    }
  }
  std::sort(cp.begin(), cp.end());
  cp.erase(std::unique(cp.begin(), cp.end()), cp.end());
  return cp;
}

LayoutView layout_view(std::string label, int64_t t, analysis::Layout layout, size_t max_segments) {
  LayoutView v;
  v.label = std::move(label);
  v.t = t;
  std::stable_sort(layout.runs.begin(), layout.runs.end(),
                   [](const analysis::SegmentRun& a, const analysis::SegmentRun& b) { return a.size > b.size; });
  if (layout.runs.size() > max_segments) {
    v.omitted = layout.runs.size() - max_segments;
    layout.runs.resize(max_segments);
  }
  v.layout = std::move(layout);
  return v;
}

DeviceModel build_device(const reader::Snapshot& s, const HistorySource& src, Model& m,
                         const std::vector<uint32_t>& owner_of, const std::vector<uint32_t>& range_of,
                         const Limits& lim) {
  DeviceModel d;
  d.device = src.device;
  d.title = src.device == analysis::kHostDevice ? "pinned host memory" : "device " + std::to_string(src.device);
  d.history = analysis::analyze_history(src, false);
  const auto& tr = *src.trace;
  std::vector<int64_t> x = positions(tr, m.timed, m.t0_us);
  auto at = [&](int64_t entry) { return entry >= 0 ? x[entry] : (x.empty() ? 0 : x.front()); };

  if (src.device != analysis::kHostDevice) d.ooms = analysis::find_ooms(s, src.device);
  for (const analysis::OomReport& r : d.ooms) m.trees->keep_stack(r.stack);
  std::vector<int64_t> oom_entries;
  for (const analysis::OomReport& r : d.ooms) {
    oom_entries.push_back(static_cast<int64_t>(r.entry));
    d.oom_t.push_back(at(static_cast<int64_t>(r.entry)));
  }
  SweepInput in{src, &x, &owner_of, static_cast<uint32_t>(m.owners.size()),
                range_of.empty() ? nullptr : &range_of, static_cast<uint32_t>(m.ranges.size()),
                checkpoints(x, d.history.peak_index, oom_entries, lim.moments), d.history.peak_index, &lim, {}};
  in.on_moment = [&](Moment& mo) {
    m.trees->weigh(mo.stacks, mo.allocated, mo.live);
    for (const LiveItem& it : mo.top) m.trees->keep_stack(it.stack);
    mo.stacks = {};
  };
  SweepOutput sw = sweep_history(in);
  d.series = std::move(sw.series);
  d.top_stacks = std::move(sw.top_stacks);
  for (reader::StackId st : d.top_stacks) m.trees->keep_stack(st);
  d.moments = std::move(sw.moments);
  for (size_t k = 0; k < d.moments.size(); ++k) {
    Moment& mo = d.moments[k];
    if (mo.entry == d.history.peak_index) {
      mo.label = "peak";
      d.peak_moment = k;
    }
    if (std::find(oom_entries.begin(), oom_entries.end(), mo.entry) != oom_entries.end())
      mo.label += mo.label.empty() ? "oom" : " + oom";
    if (k + 1 == d.moments.size()) mo.label += mo.label.empty() ? "end" : " + end";
  }

  d.markers.push_back({"peak", at(d.history.peak_index), "peak " + analysis::human_bytes(d.history.peak_allocated)});
  for (size_t k = 0; k < d.ooms.size(); ++k)
    d.markers.push_back({"oom", d.oom_t[k], "out of memory: asked for " + analysis::human_bytes(d.ooms[k].requested)});
  for (size_t i = 0; i < tr.size(); ++i) {
    if (tr[i].action == Action::Snapshot) d.markers.push_back({"snapshot", x[i], "snapshot"});
    else if (tr[i].action == Action::Other && s.str(tr[i].action_str) == format::kAnnotateAction)
      d.markers.push_back({"annotation", x[i], "annotation"});
  }

  std::vector<int64_t> layout_at{d.history.peak_index};
  layout_at.insert(layout_at.end(), oom_entries.begin(), oom_entries.end());
  std::vector<int64_t> sorted = layout_at;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<analysis::Layout> ls = analysis::layouts_after(src, sorted, true);
  auto layout_of = [&](int64_t entry) {
    return ls[static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), entry) - sorted.begin())];
  };
  d.layouts.push_back(layout_view("at the peak", at(d.history.peak_index), layout_of(d.history.peak_index), lim.max_segments));
  for (size_t k = 0; k < d.ooms.size(); ++k) {
    LayoutView v = layout_view("out of memory #" + std::to_string(k + 1), d.oom_t[k], layout_of(oom_entries[k]),
                               lim.max_segments);
    v.verdict = analysis::oom_verdict(d.ooms[k]);
    d.layouts.push_back(std::move(v));
  }
  return d;
}

}  // namespace

Model build_model(const reader::Snapshot& s, const std::string& file, const std::vector<int>& devices, bool host,
                  const Limits& limits) {
  Model m;
  m.snapshot = &s;
  m.file = file;
  m.trees = std::make_unique<LiveTrees>(s, limits.keep_fraction);
  std::vector<HistorySource> srcs = sources(s, devices, host);
  int64_t t0 = 0;
  for (const HistorySource& src : srcs)
    for (const reader::TraceEntry& e : *src.trace)
      if (e.time_us != 0 && (t0 == 0 || e.time_us < t0)) t0 = e.time_us;
  m.timed = t0 != 0;
  m.t0_us = t0;
  std::vector<uint32_t> owner_of = choose_owners(s, srcs, limits.max_owners, &m.owners);
  std::vector<uint32_t> range_of = choose_ranges(s, srcs, limits.max_ranges, &m.ranges);
  bool any = false;
  for (const HistorySource& src : srcs) {
    m.devices.push_back(build_device(s, src, m, owner_of, range_of, limits));
    const DeviceModel& d = m.devices.back();
    m.truncated = m.truncated || d.history.frees_without_alloc > 0 || d.history.untraced_blocks > 0;
    if (src.trace->empty()) continue;
    const SeriesLevel& l = d.series.front();
    const int64_t lo = l.t.front(), hi = l.t.back();
    m.first = any ? std::min(m.first, lo) : lo;
    m.last = any ? std::max(m.last, hi) : hi;
    any = true;
  }
  if (s.producer == reader::Producer::kMemtrace && s.memtrace.entries_dropped > 0) m.truncated = true;
  return m;
}

}  // namespace memtrace::report
