// The recorder's state translated into format::SnapshotWriter calls. How a dict is written, and
// the viewer's rules about that (sharing, exact integers, tiling blocks, the 'unknown' marker), are
// the writer's (format/snapshot_writer.hpp); what is decided here, and why (docs/snapshot-format.md;
// PyTorch's MemoryViz.js / process_alloc_data.js were read for each):
//
// * Partition. Live records and trace entries of a device index 0..kMaxDevices-1 go to segments and
//   device_traces[device]; one list per device up to the highest one used (docs/snapshot-format.md,
//   "A trace list for every device").
//
// * Categories. EVERY device entry gets one: the owner of its stack, 'unknown' when it has no stack.
//   When none ends up 'unknown', the writer's marker goes to the device list holding the newest
//   entry (the highest ring index), at the device's live bytes and no earlier than the newest entry.
//
// * memtrace metadata lives in allocator_settings['memtrace'] (a nested dict, like
//   roundup_power2_divisions). The viewers only read allocator_settings to JSON.stringify it into
//   the "Allocator Settings" tab, where the user then sees it; an unknown top-level key would be
//   ignored too, but PyTorch never writes one and other tools may enumerate the top level. All
//   integers in it stay far below 2^53. Next to it, trace_alloc_max_entries / trace_alloc_overflowed
//   name the ring size and overflow the way newer PyTorch does (process_alloc_data.js comment).
//
// * Pinned host memory: HostPinned/HostRegistered records (and anything not tied to a device index)
//   go to `host_segments`, a list of segment dicts shaped exactly like device segments but with
//   device -1, and their entries to `host_traces`, ONE flat list (not per device) of trace-entry
//   dicts. PyTorch's own format (PR #182407, 2026) could not be read; this is the best guess of
//   docs/snapshot-format.md, "Pinned host memory: host_segments and host_traces".
//   Neither key is written when no host memory was seen, and no viewer reads them.
//
// * Caching allocator (MEMTRACE_ALLOCATOR=caching). Its segments and blocks are separate Cached
//   records; each segment is written with the blocks that lie inside it, in address order (the
//   writer fills the gaps between them with 'inactive' blocks: the allocator's free, cached space).
//   A freed block waiting for a synchronize is 'active_pending_free'.
//
// * Half free pairs. memtrace frees are synchronous: the recorder always pushes free_requested and
//   free_completed together (the caching allocator's deferred frees too, when the block is really
//   released). A half pair in a device list (the ring cut between them, or
//   MEMTRACE_SKIP_ACTIONS dropped one) is completed here: a lone free_requested makes the
//   "Allocator State History" view throw and never ends the band in the timeline; a lone
//   free_completed would be drawn as "freed but waiting due to record_stream". The synthesized half
//   copies the other one.
//
// * Each list within MEMTRACE_MAX_ENTRIES, completed halves and the marker counted: the oldest
//   entries go first (docs/snapshot-format.md, "Each list within trace_alloc_max_entries").
#include "output/snapshot_builder.hpp"
#include "output/range_paths.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "format/snapshot_writer.hpp"

#ifndef MEMTRACE_VERSION
#define MEMTRACE_VERSION "unknown"
#endif

namespace memtrace::output {

bool is_host_side(MemKind kind, int device) { return is_host(kind) || device < 0 || device >= kMaxDevices; }

namespace {

using format::BlockState;
using format::Key;

// The recorder's stacks, as the writer asks for them.
class Stacks final : public format::StackSource {
 public:
  explicit Stacks(FrameSource& src) : src_(src) {}
  void frames(uint32_t stack, std::vector<format::Frame>* out) override { src_.frames(stack, out); }

 private:
  FrameSource& src_;
};

class Builder {
 public:
  Builder(const StateCopy& s, FrameSource& src, const BuildOptions& o, format::PickleWriter& w, BuildStats& st)
      : s_(s), src_(src), o_(o), st_(st), stacks_(src), w_(w, stacks_, o.include_frames), ranges_(s) {
    w_.set_ranges(&ranges_);
  }

  void run() {
    partition();
    for (auto& list : per_dev_) trim_to_bound(list, 0);
    trim_to_bound(host_entries_, 0);
    plan_marker();
    if (marker_dev_ >= 0) trim_to_bound(per_dev_[marker_dev_], 1);

    w_.begin();
    w_.begin_top_list(Key::DeviceTraces);
    for (int d = 0; d < ndev_; ++d) {
      w_.begin_list();
      st_.device_entries += entry_list(per_dev_[d]);
      if (d == marker_dev_) {
        marker(d);
        st_.device_entries += 1;
        st_.unknown_marker = true;
      }
      w_.end_list();
    }
    w_.end_list();
    st_.device_lists = static_cast<size_t>(ndev_);

    w_.begin_top_list(Key::Segments);
    for (const Group& g : groups_) {
      if (s_.live[g.rec].cache == CacheRole::Segment)
        cached_segment(g);
      else
        segment(s_.live[g.rec], false);
    }
    w_.end_list();
    st_.device_segments = groups_.size();

    if (!host_recs_.empty() || !host_entries_.empty()) {
      // Written before allocator_settings so that the repair count there includes host frees.
      w_.begin_top_list(Key::HostSegments);
      for (uint32_t i : host_recs_) segment(s_.live[i], true);
      w_.end_list();
      st_.host_segments = host_recs_.size();
      w_.begin_top_list(Key::HostTraces);
      st_.host_entries = entry_list(host_entries_);
      w_.end_list();
    }

    w_.allocator_settings(top_settings(), metadata());
    format::RawValues annotations;
    const format::RawId list = external_annotations(&annotations);
    w_.end(annotations, list, 0);
    st_.frame_lists = w_.stats().frame_lists;
    st_.frame_dicts = w_.stats().frame_dicts;
  }

 private:
  struct Group {
    uint32_t rec;          // index into live: the segment's record
    uint32_t first_block;  // caching segments: their blocks, seg_blocks_[first_block, +n_blocks)
    uint32_t n_blocks;
  };

  // The owner of a stack, asked once per stack (stack ids are the stack table's: dense).
  format::Category category_of(uint32_t stack_id) {
    if (stack_id < categories_.size() && categories_[stack_id] != kNoCategory) return categories_[stack_id];
    if (stack_id >= categories_.size()) categories_.resize(size_t{stack_id} + 1, kNoCategory);
    format::Category c = stack_id == 0 ? w_.category(format::kUnknownCategory) : w_.category(src_.owner(stack_id));
    categories_[stack_id] = c;
    st_.distinct_stacks += stack_id != 0;
    return c;
  }

  // ---- partition ----
  void partition() {
    const auto& live = s_.live;
    for (uint32_t i = 0; i < live.size(); ++i) {
      const AllocRecord& r = live[i];
      (is_host_side(r.kind, r.device) ? host_recs_ : dev_recs_).push_back(i);
    }
    // A caching segment sorts before the block that starts at its address.
    std::sort(dev_recs_.begin(), dev_recs_.end(), [&](uint32_t a, uint32_t b) {
      if (live[a].device != live[b].device) return live[a].device < live[b].device;
      if (live[a].addr != live[b].addr) return live[a].addr < live[b].addr;
      return (live[a].cache == CacheRole::Segment) > (live[b].cache == CacheRole::Segment);
    });
    group_segments();
    std::sort(host_recs_.begin(), host_recs_.end(), [&](uint32_t a, uint32_t b) { return live[a].addr < live[b].addr; });

    int n = std::clamp(s_.device_count, 1, kMaxDevices);
    for (uint32_t i : dev_recs_) n = std::max(n, live[i].device + 1);
    size_t counts[kMaxDevices] = {};
    size_t host_count = 0;
    for (const TraceEntry& e : s_.trace) {
      if (is_host_side(e.kind, e.device)) {
        ++host_count;
      } else {
        ++counts[e.device];
        n = std::max(n, e.device + 1);
      }
    }
    ndev_ = n;
    per_dev_.resize(static_cast<size_t>(n));
    for (int d = 0; d < n; ++d) per_dev_[d].reserve(counts[d]);
    host_entries_.reserve(host_count);
    for (uint32_t j = 0; j < s_.trace.size(); ++j) {
      const TraceEntry& e = s_.trace[j];
      if (is_host_side(e.kind, e.device))
        host_entries_.push_back(j);
      else
        per_dev_[e.device].push_back(j);
    }
  }

  // Segments as the viewer sees them: a plain record is a segment of its own; a caching segment
  // takes the caching blocks that lie inside it, in address order and without overlap. A block
  // that fits in no segment (only an inconsistent report could make one) is written as a segment
  // of its own, so that the file still loads.
  void group_segments() {
    const auto& live = s_.live;
    size_t i = 0;
    while (i < dev_recs_.size()) {
      const AllocRecord& r = live[dev_recs_[i]];
      Group g{dev_recs_[i], static_cast<uint32_t>(seg_blocks_.size()), 0};
      ++i;
      if (r.cache == CacheRole::Block) ++st_.orphan_blocks;  // before any segment of its device
      if (r.cache == CacheRole::Segment) {
        const uint64_t end = r.addr + r.size;
        uint64_t cursor = r.addr;
        while (i < dev_recs_.size()) {
          const AllocRecord& b = live[dev_recs_[i]];
          if (b.device != r.device || b.addr >= end || b.cache != CacheRole::Block) break;
          if (b.addr >= cursor && b.size <= end - b.addr) {
            seg_blocks_.push_back(dev_recs_[i]);
            ++g.n_blocks;
            cursor = b.addr + b.size;
          } else {
            orphans_.push_back(dev_recs_[i]);
          }
          ++i;
        }
      }
      groups_.push_back(g);
    }
    for (uint32_t o : orphans_) groups_.push_back(Group{o, 0, 0});
    st_.orphan_blocks += orphans_.size();
  }

  // What entry_list() will write for idx[i]: the entry, plus the half it completes.
  bool completes_free(const std::vector<uint32_t>& idx, size_t i) const {
    const auto& t = s_.trace;
    const TraceEntry& e = t[idx[i]];
    if (e.action == Action::FreeCompleted)
      return !(i > 0 && t[idx[i - 1]].action == Action::FreeRequested && t[idx[i - 1]].addr == e.addr);
    if (e.action == Action::FreeRequested)
      return !(i + 1 < idx.size() && t[idx[i + 1]].action == Action::FreeCompleted && t[idx[i + 1]].addr == e.addr);
    return false;
  }

  // No list may exceed the ring's capacity once completed halves and the marker (`reserve`) are
  // counted: users size MEMTRACE_MAX_ENTRIES to what their viewer can hold, and PyTorch's own
  // trace_alloc_max_entries is a bound per device. The oldest entries go first; a free pair goes
  // whole, so that trimming never creates a half to complete. 0 (a state built without a ring)
  // means no bound.
  void trim_to_bound(std::vector<uint32_t>& idx, size_t reserve) {
    uint64_t cap = s_.ring_capacity;
    if (cap == 0) return;
    size_t written = reserve;
    for (size_t i = 0; i < idx.size(); ++i) written += completes_free(idx, i) ? 2 : 1;
    if (written <= cap) return;
    const auto& t = s_.trace;
    size_t drop = 0;
    while (drop < idx.size() && written > cap) {
      bool pair = !completes_free(idx, drop) && t[idx[drop]].action == Action::FreeRequested;
      size_t n = pair ? 2 : 1;
      written -= completes_free(idx, drop) ? 2 : n;
      drop += n;
    }
    idx.erase(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(drop));
    st_.trimmed_entries += drop;
  }

  // The writer's 'unknown' rule over the device lists; the newest entry is the highest ring index.
  void plan_marker() {
    for (int d = 0; d < ndev_; ++d) {
      for (uint32_t j : per_dev_[d]) {
        if (!plan_.unknown() && w_.is_unknown(category_of(s_.trace[j].stack_id))) plan_.unknown_seen();
        plan_.entry(d, j);
      }
    }
    marker_dev_ = plan_.list();
  }

  // ---- writer calls ----
  format::Entry entry(const TraceEntry& e, Action a) {
    format::Entry x;
    x.action = a;
    x.addr = e.addr;
    x.size = e.size;
    x.stream = e.stream;
    x.time_us = static_cast<int64_t>(std::min<uint64_t>(e.time_us, INT64_MAX));
    x.device_free = e.device_free;
    x.note = e.note;
    x.category = category_of(e.stack_id);
    x.stack = e.stack_id;
    x.ranges = ranges_.id(e.range, e.phase);
    if (a == kMarkerAction) x.other_action = format::kAnnotateAction;
    return x;
  }

  // Range starts and ends as PyTorch writes its record_function markers (docs/ranges.md).
  format::RawId external_annotations(format::RawValues* raw) {
    std::vector<format::RawId> items;
    items.reserve(s_.range_events.size());
    const format::RawId name_key = raw->str("name"), stage_key = raw->str("stage"),
                        device_key = raw->str("device"), time_key = raw->str("time_us");
    const format::RawId start = raw->str("START"), end = raw->str("END");
    for (const RangeEvent& e : s_.range_events) {
      const format::RawId kv[8] = {name_key,   raw->str(ranges_.name_of(e.node)),
                                   stage_key,  e.stage == RangeStage::Start ? start : end,
                                   device_key, raw->integer(e.device),
                                   time_key,   raw->uinteger(e.time_us)};
      items.push_back(raw->container(format::RawKind::kDict, kv, 8));
    }
    st_.range_events = items.size();
    return raw->container(format::RawKind::kList, items.data(), items.size());
  }

  // Writes one list's entries (the caller opened the list), completing half free pairs; returns
  // how many were written.
  size_t entry_list(const std::vector<uint32_t>& idx) {
    size_t n = 0;
    const auto& t = s_.trace;
    for (size_t i = 0; i < idx.size(); ++i) {
      const TraceEntry& e = t[idx[i]];
      if (e.action == Action::FreeCompleted) {
        bool paired = i > 0 && t[idx[i - 1]].action == Action::FreeRequested && t[idx[i - 1]].addr == e.addr;
        if (!paired) {
          w_.entry(entry(e, Action::FreeRequested));
          ++n;
          ++st_.repaired_frees;
        }
      }
      w_.entry(entry(e, e.action));
      ++n;
      if (e.action == Action::FreeRequested) {
        bool paired =
            i + 1 < idx.size() && t[idx[i + 1]].action == Action::FreeCompleted && t[idx[i + 1]].addr == e.addr;
        if (!paired) {
          w_.entry(entry(e, Action::FreeCompleted));
          ++n;
          ++st_.repaired_frees;
        }
      }
    }
    return n;
  }

  void marker(int d) {
    uint64_t live_bytes = 0;
    for (uint32_t i : dev_recs_)
      if (s_.live[i].device == d && s_.live[i].cache != CacheRole::Segment) live_bytes += s_.live[i].size;
    uint64_t t = s_.time_us;
    if (plan_.newest() >= 0 && static_cast<size_t>(plan_.newest()) < s_.trace.size())
      t = std::max(t, s_.trace[static_cast<size_t>(plan_.newest())].time_us);
    w_.unknown_marker(live_bytes, static_cast<int64_t>(std::min<uint64_t>(t, INT64_MAX)));
  }

  // A plain record: a segment of its own holding one active_allocated block of its size.
  void segment(const AllocRecord& r, bool host) {
    format::Segment s;
    s.device = host ? -1 : r.device;
    s.address = r.addr;
    s.total_size = r.size;
    s.stream = r.stream;
    s.segment_type = format::kLargePool;
    s.pool_id = std::pair<int64_t, int64_t>{0, 0};
    s.stack = r.stack_id;
    s.note = r.note;
    format::Block b{r.addr, r.size, std::min(r.requested, r.size), BlockState::ActiveAllocated, r.stack_id,
                    r.note, {}, ranges_.id(r.range, r.phase)};
    w_.segment(s, std::span<const format::Block>(&b, 1));
  }

  void cached_segment(const Group& g) {
    const AllocRecord& r = s_.live[g.rec];
    blocks_.clear();
    for (uint32_t k = 0; k < g.n_blocks; ++k) {
      const AllocRecord& b = s_.live[seg_blocks_[g.first_block + k]];
      blocks_.push_back(format::Block{
          b.addr, b.size, std::min(b.requested, b.size),
          (b.cache_flags & kCachePendingFree) ? BlockState::ActivePendingFree : BlockState::ActiveAllocated,
          b.stack_id, b.note, {}, ranges_.id(b.range, b.phase)});
    }
    format::Segment s;
    s.device = r.device;
    s.address = r.addr;
    s.total_size = r.size;
    s.stream = r.stream;
    s.segment_type = (r.cache_flags & kCacheSmallPool) ? format::kSmallPool : format::kLargePool;
    s.pool_id = std::pair<int64_t, int64_t>{0, 0};
    s.is_expandable = (r.cache_flags & kCacheExpandable) != 0;
    s.stack = r.stack_id;
    w_.segment(s, blocks_);
  }

  // ---- allocator_settings ----
  format::Settings top_settings() const {
    format::Settings top = format::pytorch_settings(o_.allocator.pytorch);
    top.push_back({format::key_name(Key::TraceAllocMaxEntries), uint64_t{s_.ring_capacity}});
    top.push_back({format::key_name(Key::TraceAllocOverflowed), s_.dropped_entries > 0 || st_.trimmed_entries > 0});
    return top;
  }

  format::Settings metadata() const {
    const AllocatorSettings& as = o_.allocator;
    uint64_t vmm_dev = 0, vmm_host = 0;
    for (const HandleRecord& h : s_.handles) (h.host ? vmm_host : vmm_dev) += h.size;
    auto k = [](Key key) { return std::string(format::key_name(key)); };
    format::Settings m;
    m.push_back({k(Key::Allocator), as.mode});
    m.insert(m.end(), as.memtrace.begin(), as.memtrace.end());
    if (!as.memtrace.empty()) m.push_back({k(Key::OrphanBlocks), uint64_t{st_.orphan_blocks}});
    m.push_back({k(Key::Version), o_.meta.version.empty() ? std::string(MEMTRACE_VERSION) : o_.meta.version});
    m.push_back({k(Key::Pid), int64_t{o_.meta.pid}});
    m.push_back({k(Key::Exe), o_.meta.exe});
    m.push_back({k(Key::Host), o_.meta.host});
    m.push_back({k(Key::Rank), o_.meta.rank});
    m.push_back({k(Key::DumpSequence), uint64_t{o_.meta.sequence}});
    m.push_back({k(Key::Reason), o_.meta.reason});
    m.push_back({k(Key::TimeUs), uint64_t{s_.time_us}});
    m.push_back({k(Key::RingCapacity), uint64_t{s_.ring_capacity}});
    m.push_back({k(Key::EntriesTotal), uint64_t{s_.total_entries}});
    m.push_back({k(Key::EntriesKept), uint64_t{s_.trace.size()}});
    m.push_back({k(Key::EntriesDropped), uint64_t{s_.dropped_entries}});
    m.push_back({k(Key::FreesCompletedByWriter), uint64_t{st_.repaired_frees}});
    m.push_back({k(Key::EntriesTrimmedByWriter), uint64_t{st_.trimmed_entries}});
    m.push_back({k(Key::UnknownFrees), uint64_t{s_.unknown_frees}});
    m.push_back({k(Key::StaleReplaced), uint64_t{s_.stale_replaced}});
    m.push_back({k(Key::LiveDeviceAllocations), uint64_t{dev_recs_.size()}});
    m.push_back({k(Key::LiveHostAllocations), uint64_t{host_recs_.size()}});
    m.push_back({k(Key::VmmHandles), uint64_t{s_.handles.size()}});
    m.push_back({k(Key::VmmDeviceBytes), vmm_dev});
    m.push_back({k(Key::VmmHostBytes), vmm_host});
    m.push_back({k(Key::FramesIncluded), o_.include_frames});
    m.push_back({k(Key::UnknownCategoryMarker), marker_dev_ >= 0});
    return m;
  }

  const StateCopy& s_;
  FrameSource& src_;
  const BuildOptions& o_;
  BuildStats& st_;
  Stacks stacks_;
  format::SnapshotWriter w_;
  RangePaths ranges_;

  static constexpr format::Category kNoCategory = UINT32_MAX;
  std::vector<format::Category> categories_;  // by stack id
  format::UnknownMarkerPlan plan_;
  std::vector<format::Block> blocks_;

  std::vector<uint32_t> dev_recs_, host_recs_;
  std::vector<Group> groups_;
  std::vector<uint32_t> seg_blocks_, orphans_;
  int ndev_ = 1;
  std::vector<std::vector<uint32_t>> per_dev_;
  std::vector<uint32_t> host_entries_;
  int marker_dev_ = -1;
};

}  // namespace

void build_snapshot(const StateCopy& state, FrameSource& frames, const BuildOptions& options,
                    format::PickleWriter& w, BuildStats* stats) {
  BuildStats local;
  BuildStats& st = stats ? *stats : local;
  st = BuildStats{};
  Builder b(state, frames, options, w, st);
  b.run();
}

}  // namespace memtrace::output
