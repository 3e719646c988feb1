#include "cli/analysis/merge.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cli/analysis/device_history.hpp"

namespace memtrace::analysis {

using reader::Action;
using reader::Snapshot;

namespace {

// Address ranges [begin, end) of one device, merged and sorted, for "is this PyTorch's?" queries.
class Ranges {
 public:
  void add(uint64_t addr, uint64_t size) {
    if (size) r_.push_back({addr, addr + size < addr ? UINT64_MAX : addr + size});
  }
  void finish() {
    std::sort(r_.begin(), r_.end());
    std::vector<std::pair<uint64_t, uint64_t>> m;
    for (const auto& x : r_) {
      if (!m.empty() && x.first <= m.back().second) m.back().second = std::max(m.back().second, x.second);
      else m.push_back(x);
    }
    r_.swap(m);
  }
  bool contains(uint64_t addr) const { return overlaps(addr, 1); }
  bool overlaps(uint64_t addr, uint64_t size) const {
    uint64_t end = addr + std::max<uint64_t>(size, 1);
    auto it = std::upper_bound(r_.begin(), r_.end(), std::make_pair(addr, UINT64_MAX));
    if (it != r_.begin() && std::prev(it)->second > addr) return true;
    return it != r_.end() && it->first < end;
  }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> r_;
};

bool is_segment_action(Action a) {
  return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap ||
         a == Action::SegmentUnmap;
}

// Writes frame lists so that identical frames and identical lists, from either file, are one
// pickled object each (memo), as PyTorch's own snapshots share them.
class FrameLists {
 public:
  explicit FrameLists(output::PickleWriter& w) : w_(w) {}

  void write(const Snapshot& s, reader::StackId id) {
    auto& cache = cache_[&s];
    if (cache.empty()) cache.assign(s.stacks.size(), UINT32_MAX);
    if (cache[id] != UINT32_MAX) return w_.get(cache[id]);
    // Frame memo indices first (writing any new frame dict inside the list).
    const auto& frames = s.stacks[id];
    std::string key;
    std::vector<int64_t> known;
    bool all_known = true;
    for (reader::FrameId f : frames) {
      auto it = frame_memo_.find(frame_key(s, f));
      known.push_back(it == frame_memo_.end() ? -1 : it->second);
      if (it == frame_memo_.end()) all_known = false;
    }
    if (all_known) {
      for (int64_t m : known) key.append(reinterpret_cast<const char*>(&m), sizeof m);
      auto it = list_memo_.find(key);
      if (it != list_memo_.end()) {
        cache[id] = it->second;
        return w_.get(it->second);
      }
    }
    w_.begin_list();
    for (size_t i = 0; i < frames.size(); ++i) {
      w_.item();
      std::string fk = frame_key(s, frames[i]);
      auto it = frame_memo_.find(fk);
      if (it != frame_memo_.end()) {
        known[i] = it->second;
        w_.get(it->second);
        continue;
      }
      const reader::Frame& fr = s.frames[frames[i]];
      w_.begin_dict();
      w_.key("filename");
      w_.str(s.str(fr.filename));
      w_.key("line");
      w_.integer(fr.line);
      w_.key("name");
      w_.str(s.str(fr.name));
      w_.end_dict();
      known[i] = w_.memoize();
      frame_memo_.emplace(std::move(fk), static_cast<uint32_t>(known[i]));
    }
    w_.end_list();
    uint32_t m = w_.memoize();
    key.clear();
    for (int64_t k : known) key.append(reinterpret_cast<const char*>(&k), sizeof k);
    list_memo_.emplace(std::move(key), m);
    cache[id] = m;
  }

 private:
  static std::string frame_key(const Snapshot& s, reader::FrameId f) {
    const reader::Frame& fr = s.frames[f];
    std::string k{s.str(fr.filename)};
    k += '\0';
    k += s.str(fr.name);
    k += '\0';
    k += std::to_string(fr.line);
    return k;
  }

  output::PickleWriter& w_;
  std::unordered_map<const Snapshot*, std::vector<uint32_t>> cache_;
  std::unordered_map<std::string, uint32_t> frame_memo_;
  std::unordered_map<std::string, uint32_t> list_memo_;
};

// One trace entry of the merged list: where it comes from and which category it is written with.
struct Item {
  const Snapshot* src;
  const reader::TraceEntry* e;
  std::string_view category;
};

bool keeps_action(const reader::TraceEntry& e, const Snapshot& s) {
  return e.action != Action::Other || s.str(e.action_str) == "annotate";
}

// Indices where each unit (an entry, or a free_requested + its free_completed) starts.
std::vector<size_t> units(const std::vector<Item>& v) {
  std::vector<size_t> u;
  for (size_t i = 0; i < v.size(); ++i) {
    u.push_back(i);
    if (v[i].e->action == Action::FreeRequested && i + 1 < v.size() &&
        v[i + 1].e->action == Action::FreeCompleted && v[i + 1].e->addr == v[i].e->addr)
      ++i;
  }
  return u;
}

void write_entry(output::PickleWriter& w, FrameLists& fl, const Item& it) {
  const reader::TraceEntry& e = *it.e;
  const Snapshot& s = *it.src;
  w.begin_dict();
  w.key("action");
  w.str(e.action == Action::Other ? s.str(e.action_str) : reader::action_name(e.action));
  if (e.action != Action::Oom) {
    w.key("addr");
    w.uinteger(e.addr);
  }
  w.key("size");
  w.uinteger(e.size);
  w.key("stream");
  w.uinteger(e.stream);
  if (e.action == Action::Oom) {
    w.key("device_free");
    w.uinteger(e.device_free.value_or(0));
  }
  if (e.time_us) {
    w.key("time_us");
    w.integer(e.time_us);
  }
  w.key("category");
  w.str(it.category);
  w.key("frames");
  fl.write(s, e.stack);
  w.end_dict();
}

bool is_live(reader::BlockState st) {
  return st == reader::BlockState::ActiveAllocated || st == reader::BlockState::ActivePendingFree;
}

void write_segment(output::PickleWriter& w, FrameLists& fl, const Snapshot& s, const reader::Segment& seg) {
  uint64_t allocated = 0, active = 0, requested = 0;
  for (const reader::Block& b : seg.blocks) {
    if (b.state == reader::BlockState::ActiveAllocated) allocated += b.size;
    if (is_live(b.state)) {
      active += b.size;
      requested += b.requested_size;
    }
  }
  w.begin_dict();
  w.key("device");
  w.integer(seg.device);
  w.key("address");
  w.uinteger(seg.address);
  w.key("total_size");
  w.uinteger(seg.total_size);
  w.key("allocated_size");
  w.uinteger(allocated);
  w.key("active_size");
  w.uinteger(active);
  w.key("requested_size");
  w.uinteger(requested);
  w.key("stream");
  w.uinteger(seg.stream);
  if (!s.str(seg.segment_type).empty()) {
    w.key("segment_type");
    w.str(s.str(seg.segment_type));
  }
  w.key("is_expandable");
  w.boolean(seg.is_expandable);
  w.key("frames");
  fl.write(s, seg.stack);
  w.key("blocks");
  w.begin_list();
  for (const reader::Block& b : seg.blocks) {
    w.item();
    w.begin_dict();
    w.key("address");
    w.uinteger(b.address);
    w.key("size");
    w.uinteger(b.size);
    w.key("requested_size");
    w.uinteger(b.requested_size);
    w.key("state");
    switch (b.state) {
      case reader::BlockState::ActiveAllocated:
        w.str("active_allocated");
        break;
      case reader::BlockState::ActivePendingFree:
        w.str("active_pending_free");
        break;
      default:
        w.str("inactive");
        break;
    }
    w.key("frames");
    fl.write(s, b.stack);
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
}

}  // namespace

MergeStats merge_snapshots(const Snapshot& pt, const Snapshot& mt, const MergeOptions& options,
                           output::PickleWriter& w) {
  MergeStats st;
  const int n_dev = std::max({device_count(pt), device_count(mt), options.device ? *options.device + 1 : 1, 1});
  auto wanted = [&](int d) { return d >= 0 && d < n_dev && (!options.device || *options.device == d); };

  // PyTorch's address ranges per device, over its whole kept life.
  std::vector<Ranges> torch(n_dev);
  for (const reader::Segment& seg : pt.segments)
    if (seg.device >= 0 && seg.device < n_dev) torch[seg.device].add(seg.address, seg.total_size);
  for (size_t d = 0; d < pt.device_traces.size() && static_cast<int>(d) < n_dev; ++d)
    for (const reader::TraceEntry& e : pt.device_traces[d])
      if (is_segment_action(e.action)) torch[d].add(e.addr, e.size);
  for (Ranges& r : torch) r.finish();

  // memtrace segments (final or in its trace) that overlap PyTorch's ranges: their start addresses
  // identify every event of those allocations.
  std::vector<std::unordered_set<uint64_t>> dup(n_dev);
  for (const reader::Segment& seg : mt.segments)
    if (seg.device >= 0 && seg.device < n_dev && torch[seg.device].overlaps(seg.address, seg.total_size))
      dup[seg.device].insert(seg.address);
  for (size_t d = 0; d < mt.device_traces.size() && static_cast<int>(d) < n_dev; ++d)
    for (const reader::TraceEntry& e : mt.device_traces[d])
      if (is_segment_action(e.action) && torch[d].overlaps(e.addr, e.size)) dup[d].insert(e.addr);
  auto mt_duplicate = [&](int d, uint64_t addr) { return torch[d].contains(addr) || dup[d].count(addr) != 0; };

  // Segments of the result, sorted by (device, address).
  struct SegRef {
    const Snapshot* src;
    const reader::Segment* seg;
  };
  std::vector<SegRef> segs;
  std::vector<uint64_t> live_bytes(n_dev, 0);
  for (const reader::Segment& seg : pt.segments) {
    if (!wanted(seg.device)) continue;
    segs.push_back({&pt, &seg});
    ++st.pytorch_segments;
  }
  for (const reader::Segment& seg : mt.segments) {
    if (!wanted(seg.device)) continue;
    if (mt_duplicate(seg.device, seg.address) || torch[seg.device].overlaps(seg.address, seg.total_size)) {
      ++st.memtrace_segments_dropped;
      continue;
    }
    segs.push_back({&mt, &seg});
    ++st.memtrace_segments_kept;
    st.memtrace_bytes_kept += seg.total_size;
  }
  std::stable_sort(segs.begin(), segs.end(), [](const SegRef& a, const SegRef& b) {
    return a.seg->device != b.seg->device ? a.seg->device < b.seg->device : a.seg->address < b.seg->address;
  });
  for (const SegRef& r : segs)
    for (const reader::Block& b : r.seg->blocks)
      if (is_live(b.state)) live_bytes[r.seg->device] += b.requested_size;

  // Trace lists: each file's kept entries in its own order, then merged by time.
  std::vector<std::vector<Item>> lists(n_dev);
  bool any_unknown = false;
  int newest_dev = -1;
  int64_t newest_t = INT64_MIN;
  for (int d = 0; d < n_dev; ++d) {
    if (!wanted(d)) continue;
    std::vector<Item> p, m;
    if (d < static_cast<int>(pt.device_traces.size()))
      for (const reader::TraceEntry& e : pt.device_traces[d]) {
        if (!keeps_action(e, pt)) {
          ++st.pytorch_entries_dropped;
          continue;
        }
        std::string_view cat = pt.str(e.category);
        p.push_back({&pt, &e, cat.empty() ? std::string_view("torch") : cat});
      }
    if (d < static_cast<int>(mt.device_traces.size()))
      for (const reader::TraceEntry& e : mt.device_traces[d]) {
        bool drop = !keeps_action(e, mt) || e.action == Action::Snapshot ||
                    (e.action != Action::Oom && mt_duplicate(d, e.addr));
        if (drop) {
          ++st.memtrace_entries_dropped;
          continue;
        }
        std::string_view cat = mt.str(e.category);
        m.push_back({&mt, &e, cat.empty() ? std::string_view("unknown") : cat});
      }
    st.pytorch_entries += p.size();
    st.memtrace_entries_kept += m.size();
    std::vector<size_t> up = units(p), um = units(m);
    std::vector<Item>& out = lists[d];
    out.reserve(p.size() + m.size());
    size_t i = 0, j = 0;
    auto copy_unit = [&](const std::vector<Item>& v, const std::vector<size_t>& u, size_t k) {
      size_t end = k + 1 < u.size() ? u[k + 1] : v.size();
      for (size_t x = u[k]; x < end; ++x) out.push_back(v[x]);
    };
    while (i < up.size() || j < um.size()) {
      bool take_p = j == um.size() || (i < up.size() && p[up[i]].e->time_us <= m[um[j]].e->time_us);
      if (take_p) copy_unit(p, up, i++);
      else copy_unit(m, um, j++);
    }
    for (const Item& it : out) {
      if (it.category == "unknown") any_unknown = true;
      if (it.e->time_us >= newest_t) {
        newest_t = it.e->time_us;
        newest_dev = d;
      }
    }
  }
  // Every viewer version read needs 'unknown' among the categories once any entry has one.
  reader::TraceEntry marker;
  marker.action = Action::Snapshot;
  if (!any_unknown && newest_dev >= 0) {
    marker.size = live_bytes[newest_dev];
    marker.time_us = newest_t;
    lists[newest_dev].push_back({&mt, &marker, "unknown"});
  }

  FrameLists fl(w);
  w.begin();
  w.begin_dict();
  w.key("device_traces");
  w.begin_list();
  for (int d = 0; d < n_dev; ++d) {
    w.item();
    w.begin_list();
    for (const Item& it : lists[d]) {
      w.item();
      write_entry(w, fl, it);
    }
    w.end_list();
  }
  w.end_list();
  st.devices = static_cast<size_t>(n_dev);

  w.key("segments");
  w.begin_list();
  for (const SegRef& r : segs) {
    w.item();
    write_segment(w, fl, *r.src, *r.seg);
  }
  w.end_list();

  w.key("allocator_settings");
  w.begin_dict();
  w.key("memtrace");
  w.begin_dict();
  w.key("merged_pytorch_snapshot");
  w.str(options.pytorch_name);
  w.key("merged_memtrace_snapshot");
  w.str(options.memtrace_name);
  w.key("pid");
  w.integer(mt.memtrace.pid);
  w.key("rank");
  w.str(mt.memtrace.rank);
  w.key("host");
  w.str(mt.memtrace.host);
  w.key("exe");
  w.str(mt.memtrace.exe);
  w.key("reason");
  w.str(mt.memtrace.reason);
  w.key("entries_dropped");
  w.integer(mt.memtrace.entries_dropped);
  w.key("duplicate_segments_dropped");
  w.uinteger(st.memtrace_segments_dropped);
  w.key("duplicate_entries_dropped");
  w.uinteger(st.memtrace_entries_dropped);
  w.end_dict();
  w.end_dict();

  w.key("external_annotations");
  w.begin_list();
  w.end_list();
  w.end_dict();
  w.end();
  return st;
}

}  // namespace memtrace::analysis
