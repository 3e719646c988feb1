// Two reader::Snapshots translated into format::SnapshotWriter calls: which segments and entries
// go in (merge.hpp), and in which order. How each dict is written, its frame sharing and the
// 'unknown' marker are the writer's (format/snapshot_writer.hpp).
#include "cli/analysis/merge.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "format/snapshot_writer.hpp"

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

bool keeps_action(const reader::TraceEntry& e, const Snapshot& s) {
  return e.action != Action::Other || s.str(e.action_str) == format::kAnnotateAction;
}

bool is_live(reader::BlockState st) {
  return st == reader::BlockState::ActiveAllocated || st == reader::BlockState::ActivePendingFree;
}

enum File : int { kPyTorch = 0, kMemtrace = 1 };

// Both files' stacks, as the writer asks for them: PyTorch's ids as they are, memtrace's after them.
// Identical frames from either file still share one frame dict and one list (the writer shares by
// content).
class MergedStacks final : public format::StackSource {
 public:
  MergedStacks(const Snapshot& pt, const Snapshot& mt) : pt_(pt), mt_(mt) {}
  uint32_t id(File f, reader::StackId s) const {
    return s == 0 || f == kPyTorch ? s : static_cast<uint32_t>(pt_.stacks.size()) + s;
  }
  void frames(uint32_t id, std::vector<format::Frame>* out) override {
    const bool pt = id < pt_.stacks.size();
    const Snapshot& s = pt ? pt_ : mt_;
    for (reader::FrameId f : s.stacks[pt ? id : id - static_cast<uint32_t>(pt_.stacks.size())]) {
      const reader::Frame& fr = s.frames[f];
      out->push_back(format::Frame{s.str(fr.filename), s.str(fr.name), fr.line});
    }
  }

 private:
  const Snapshot& pt_;
  const Snapshot& mt_;
};

// One trace entry of the merged list: where it comes from and which category it is written with.
struct Item {
  File file;
  const reader::TraceEntry* e;
  format::Category category;
  format::RawId kept = 0;  // the entry's kept keys, in its file's raw values
};

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

class Merger {
 public:
  Merger(const Snapshot& pt, const Snapshot& mt, const MergeOptions& o, format::PickleWriter& w)
      : pt_(pt), mt_(mt), o_(o), stacks_(pt, mt), w_(w, stacks_) {
    n_dev_ = std::max({device_count(pt), device_count(mt), o.device ? *o.device + 1 : 1, 1});
    host_ = n_dev_;
    lists_.resize(n_dev_ + 1);
  }

  MergeStats run() {
    find_duplicates();
    select_segments();
    for (int d = 0; d < n_dev_; ++d)
      if (wanted(d)) merge_list(d);
    const int marker_dev = plan_.list();
    if (wanted(host_)) merge_list(host_);  // after the plan: the 'unknown' marker is for devices

    w_.begin();
    w_.begin_top_list(format::Key::DeviceTraces);
    for (int d = 0; d < n_dev_; ++d) {
      w_.begin_list();
      for (const Item& it : lists_[d]) w_.entry(entry(it));
      if (d == marker_dev) w_.unknown_marker(live_bytes_[d], plan_.newest());
      w_.end_list();
    }
    w_.end_list();
    st_.devices = static_cast<size_t>(n_dev_);

    w_.begin_top_list(format::Key::Segments);
    for (const SegRef& r : segs_)
      if (r.seg->device >= 0) segment(r);
    w_.end_list();

    // Pinned host memory, when either file has some: the same rules as a device's.
    bool host_segs = std::any_of(segs_.begin(), segs_.end(), [](const SegRef& r) { return r.seg->device < 0; });
    if (host_segs || !lists_[host_].empty()) {
      w_.begin_top_list(format::Key::HostSegments);
      for (const SegRef& r : segs_)
        if (r.seg->device < 0) segment(r);
      w_.end_list();
      w_.begin_top_list(format::Key::HostTraces);
      for (const Item& it : lists_[host_]) w_.entry(entry(it));
      w_.end_list();
    }

    // PyTorch's allocator_settings as it wrote them, with memtrace's metadata beside them.
    if (pt_.settings_raw)
      w_.allocator_settings(pt_.raw, pt_.settings_raw, metadata());
    else
      w_.allocator_settings({}, metadata());
    annotations();
    w_.end(raw_, annotations_, pt_.kept_top ? raw_.copy_from(pt_.raw, pt_.kept_top) : 0);
    return st_;
  }

 private:
  struct SegRef {
    File file;
    const reader::Segment* seg;
  };
  const Snapshot& file(File f) const { return f == kPyTorch ? pt_ : mt_; }
  // Device d, or host_ (pinned host memory, kept when no single device was asked for).
  bool wanted(int d) const {
    if (d == host_) return !o_.device;
    return d >= 0 && d < n_dev_ && (!o_.device || *o_.device == d);
  }
  // The index of a segment's list: its device, or host_ for device -1.
  int list_of(const reader::Segment& seg) const { return seg.device < 0 ? host_ : seg.device; }
  const std::vector<reader::TraceEntry>* trace_list(const Snapshot& s, int d) const {
    if (d == host_) return &s.host_traces;
    return d < static_cast<int>(s.device_traces.size()) ? &s.device_traces[d] : nullptr;
  }
  size_t kept_list(const Snapshot& s, int d) const { return d == host_ ? s.device_traces.size() : static_cast<size_t>(d); }

  // external_annotations: PyTorch's and memtrace's lists, merged by time_us (PyTorch first on
  // equal times), each marker as its file wrote it.
  void annotations() {
    std::vector<std::pair<int64_t, format::RawId>> all;
    for (const Snapshot* s : {&pt_, &mt_}) {
      const format::RawValues& r = s->raw;
      if (!s->external_annotations || r.node(s->external_annotations).kind != format::RawKind::kList) continue;
      const format::RawId* c = r.children(s->external_annotations);
      for (uint32_t i = 0; i < r.node(s->external_annotations).count; ++i) {
        int64_t t = 0;
        if (const format::RawId* v = r.find(c[i], format::key_name(format::Key::TimeUs));
            v && r.node(*v).kind == format::RawKind::kInt)
          t = static_cast<int64_t>(r.node(*v).v);
        all.emplace_back(t, raw_.copy_from(r, c[i]));
      }
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<format::RawId> ids;
    for (const auto& a : all) ids.push_back(a.second);
    annotations_ = raw_.container(format::RawKind::kList, ids.data(), ids.size());
  }
  bool mt_duplicate(int d, uint64_t addr) const { return torch_[d].contains(addr) || dup_[d].count(addr) != 0; }

  // PyTorch's address ranges per device over its whole kept life, and the memtrace segments (final
  // or in its trace) that overlap them: their start addresses identify every event of those
  // allocations.
  void find_duplicates() {
    torch_.resize(n_dev_ + 1);
    for (const std::vector<reader::Segment>* v : {&pt_.segments, &pt_.host_segments})
      for (const reader::Segment& seg : *v)
        if (seg.device < n_dev_) torch_[list_of(seg)].add(seg.address, seg.total_size);
    for (int d = 0; d <= n_dev_; ++d)
      if (const auto* l = trace_list(pt_, d))
        for (const reader::TraceEntry& e : *l)
          if (is_segment_action(e.action)) torch_[d].add(e.addr, e.size);
    for (Ranges& r : torch_) r.finish();

    dup_.resize(n_dev_ + 1);
    for (const std::vector<reader::Segment>* v : {&mt_.segments, &mt_.host_segments})
      for (const reader::Segment& seg : *v)
        if (seg.device < n_dev_ && torch_[list_of(seg)].overlaps(seg.address, seg.total_size))
          dup_[list_of(seg)].insert(seg.address);
    for (int d = 0; d <= n_dev_; ++d)
      if (const auto* l = trace_list(mt_, d))
        for (const reader::TraceEntry& e : *l)
          if (is_segment_action(e.action) && torch_[d].overlaps(e.addr, e.size)) dup_[d].insert(e.addr);
  }

  // Segments of the result, sorted by (device, address), and the live bytes of each device.
  void select_segments() {
    for (const std::vector<reader::Segment>* v : {&pt_.segments, &pt_.host_segments})
      for (const reader::Segment& seg : *v) {
        if (seg.device >= n_dev_ || !wanted(list_of(seg))) continue;
        segs_.push_back({kPyTorch, &seg});
        ++st_.pytorch_segments;
      }
    for (const std::vector<reader::Segment>* v : {&mt_.segments, &mt_.host_segments})
      for (const reader::Segment& seg : *v) {
        if (seg.device >= n_dev_ || !wanted(list_of(seg))) continue;
        int l = list_of(seg);
        if (mt_duplicate(l, seg.address) || torch_[l].overlaps(seg.address, seg.total_size)) {
          ++st_.memtrace_segments_dropped;
          continue;
        }
        segs_.push_back({kMemtrace, &seg});
        ++st_.memtrace_segments_kept;
        st_.memtrace_bytes_kept += seg.total_size;
      }
    std::stable_sort(segs_.begin(), segs_.end(), [](const SegRef& a, const SegRef& b) {
      return a.seg->device != b.seg->device ? a.seg->device < b.seg->device : a.seg->address < b.seg->address;
    });
    live_bytes_.assign(n_dev_ + 1, 0);
    for (const SegRef& r : segs_)
      for (const reader::Block& b : r.seg->blocks)
        if (is_live(b.state)) live_bytes_[list_of(*r.seg)] += b.requested_size;
  }

  // Device d's trace list: each file's kept entries in its own order, then merged by time.
  void merge_list(int d) {
    std::vector<Item> p, m;
    if (const auto* l = trace_list(pt_, d))
      for (size_t i = 0; i < l->size(); ++i) {
        const reader::TraceEntry& e = (*l)[i];
        if (!keeps_action(e, pt_)) {
          ++st_.pytorch_entries_dropped;
          continue;
        }
        std::string_view cat = pt_.str(e.category);
        p.push_back({kPyTorch, &e, w_.category(cat.empty() ? std::string_view("torch") : cat),
                     e.has_kept ? pt_.kept_entry(kept_list(pt_, d), i) : 0});
      }
    if (const auto* l = trace_list(mt_, d))
      for (size_t i = 0; i < l->size(); ++i) {
        const reader::TraceEntry& e = (*l)[i];
        bool drop = !keeps_action(e, mt_) || e.action == Action::Snapshot ||
                    (e.action != Action::Oom && mt_duplicate(d, e.addr));
        if (drop) {
          ++st_.memtrace_entries_dropped;
          continue;
        }
        m.push_back({kMemtrace, &e, w_.category(mt_.str(e.category)),
                     e.has_kept ? mt_.kept_entry(kept_list(mt_, d), i) : 0});
      }
    st_.pytorch_entries += p.size();
    st_.memtrace_entries_kept += m.size();
    std::vector<size_t> up = units(p), um = units(m);
    std::vector<Item>& out = lists_[d];
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
    if (d == host_) return;  // the 'unknown' marker concerns device lists only
    for (const Item& it : out) {
      if (w_.is_unknown(it.category)) plan_.unknown_seen();
      plan_.entry(d, it.e->time_us);
    }
  }

  format::Entry entry(const Item& it) const {
    const reader::TraceEntry& e = *it.e;
    format::Entry x;
    x.action = e.action;
    if (e.action == Action::Other) x.other_action = file(it.file).str(e.action_str);
    x.addr = e.addr;
    x.size = e.size;
    x.stream = file(it.file).stream_value(e.stream);
    x.time_us = e.time_us;
    x.device_free = e.device_free().value_or(0);
    x.category = it.category;
    x.stack = stacks_.id(it.file, e.stack);
    x.kept = format::Kept{&file(it.file).raw, it.kept};
    return x;
  }

  void segment(const SegRef& r) {
    const Snapshot& s = file(r.file);
    const reader::Segment& seg = *r.seg;
    blocks_.clear();
    for (const reader::Block& b : seg.blocks) {
      // A state the reader did not know is written as free space, which is what the viewer makes of it.
      reader::BlockState st = b.state == reader::BlockState::Other ? reader::BlockState::Inactive : b.state;
      blocks_.push_back(format::Block{b.address, b.size, b.requested_size, st, stacks_.id(r.file, b.stack),
                                      nullptr, format::Kept{&s.raw, b.kept}});
    }
    format::Segment out;
    out.device = seg.device;
    out.address = seg.address;
    out.total_size = seg.total_size;
    out.stream = seg.stream;
    out.segment_type = s.str(seg.segment_type);
    out.is_expandable = seg.is_expandable;
    out.stack = stacks_.id(r.file, seg.stack);
    out.kept = format::Kept{&s.raw, seg.kept};
    w_.segment(out, blocks_);
  }

  format::Settings metadata() const {
    using format::Key;
    auto k = [](Key key) { return std::string(format::key_name(key)); };
    return {
        {k(Key::MergedPytorchSnapshot), o_.pytorch_name},
        {k(Key::MergedMemtraceSnapshot), o_.memtrace_name},
        {k(Key::Pid), int64_t{mt_.memtrace.pid}},
        {k(Key::Rank), mt_.memtrace.rank},
        {k(Key::Host), mt_.memtrace.host},
        {k(Key::Exe), mt_.memtrace.exe},
        {k(Key::Reason), mt_.memtrace.reason},
        {k(Key::EntriesDropped), int64_t{mt_.memtrace.entries_dropped}},
        {k(Key::DuplicateSegmentsDropped), uint64_t{st_.memtrace_segments_dropped}},
        {k(Key::DuplicateEntriesDropped), uint64_t{st_.memtrace_entries_dropped}},
    };
  }

  const Snapshot& pt_;
  const Snapshot& mt_;
  const MergeOptions& o_;
  MergedStacks stacks_;
  format::SnapshotWriter w_;
  int n_dev_ = 1;
  int host_ = 1;  // the list index of pinned host memory: after the devices
  MergeStats st_;
  format::RawValues raw_;  // what this merge composes: the merged external_annotations, the top keys
  format::RawId annotations_ = 0;

  std::vector<Ranges> torch_;
  std::vector<std::unordered_set<uint64_t>> dup_;
  std::vector<SegRef> segs_;
  std::vector<uint64_t> live_bytes_;
  std::vector<std::vector<Item>> lists_;
  format::UnknownMarkerPlan plan_;
  std::vector<format::Block> blocks_;
};

}  // namespace

MergeStats merge_snapshots(const Snapshot& pt, const Snapshot& mt, const MergeOptions& options,
                           format::PickleWriter& w) {
  Merger m(pt, mt, options, w);
  return m.run();
}

}  // namespace memtrace::analysis
