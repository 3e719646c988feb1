// Decisions taken here, and why (docs/snapshot-format.md; PyTorch's MemoryViz.js /
// process_alloc_data.js were read for each):
//
// * Categories and the viewer's 'unknown' rule (docs/snapshot-format.md, "The viewer's 'unknown'
//   category"). annotate_snapshot() collects every trace entry's `category` into
//   snapshot.categories, and then, if the list is non-empty but has no 'unknown', calls
//   `snapshot.categores.push('unknown')` (misspelt: a TypeError, the file does not load). Every
//   viewer version read still has that line; all of them also colour blocks rebuilt from
//   `segments` (which have no category) as 'unknown'. memtrace gives EVERY device entry a
//   category (the owner of its stack; 'unknown' when it has no stack), and when no device entry ends
//   up 'unknown', appends one `snapshot` entry (addr 0, size = the device's live bytes, category
//   'unknown') to the device list holding the newest entry. PyTorch itself records `snapshot`
//   entries; every viewer lists them and otherwise ignores them. So 'unknown' is always among the
//   categories whenever categories exist, in every viewer version.
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
//   records; each segment is written with the blocks that lie inside it, in address order, and the
//   gaps between them as 'inactive' blocks (the allocator's free, cached space), so blocks tile
//   segments by construction. A freed block waiting for a synchronize is 'active_pending_free'.
//
// * Half free pairs. memtrace frees are synchronous: the recorder always pushes free_requested and
//   free_completed together (the caching allocator's deferred frees too, when the block is really
//   released). A half pair in a device list (the ring cut between them, or
//   MEMTRACE_SKIP_ACTIONS dropped one) is completed here: a lone free_requested makes the
//   "Allocator State History" view throw and never ends the band in the timeline; a lone
//   free_completed would be drawn as "freed but waiting due to record_stream". The synthesized half
//   copies the other one.
//
// * Sharing. Frame dicts, frame lists (including the empty one), file names, notes, categories,
//   dict keys and constant values are memoized and referred back with BINGET/LONG_BINGET; trace
//   entries, blocks and segments never are (the viewer mutates them in place: docs/snapshot-format.md,
//   "Objects the viewer mutates are never shared"). To keep the frequent references 2-byte
//   BINGETs (memo index < 256), device_traces is written before
//   segments and `frames` is the last key of a trace entry: the first entry memoizes every entry
//   key before the first frame. (Key and top-level order mean nothing to any reader.) Measured:
//   about 60 bytes per trace entry.
#include "output/snapshot_builder.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <unordered_map>
#include <vector>

#ifndef MEMTRACE_VERSION
#define MEMTRACE_VERSION "unknown"
#endif

namespace memtrace::output {

bool is_host_side(MemKind kind, int device) { return is_host(kind) || device < 0 || device >= kMaxDevices; }

namespace {

// Memoized constant strings: dict keys and frequent values.
enum Str : int {
  kAction,
  kAddr,
  kSize,
  kStream,
  kTimeUs,
  kCompileContext,
  kUserMetadata,
  kFrames,
  kCategory,
  kDeviceFree,
  kDevice,
  kAddress,
  kTotalSize,
  kAllocatedSize,
  kActiveSize,
  kRequestedSize,
  kSegmentType,
  kSegmentPoolId,
  kIsExpandable,
  kBlocks,
  kState,
  kFilename,
  kLine,
  kName,
  vEmpty,
  vActiveAllocated,
  vLarge,
  vActivePendingFree,
  vInactive,
  vSmall,
  vActionFirst,  // + Action
  kStrCount = vActionFirst + kActionCount,
};

const char* const kFixedText[vActionFirst] = {
    "action",        "addr",         "size",           "stream",          "time_us",         "compile_context",
    "user_metadata", "frames",       "category",       "device_free",     "device",          "address",
    "total_size",    "allocated_size", "active_size",  "requested_size",  "segment_type",    "segment_pool_id",
    "is_expandable", "blocks",       "state",          "filename",        "line",            "name",
    "",              "active_allocated", "large",  "active_pending_free", "inactive",       "small",
};

struct FrameKey {
  std::string_view file;
  std::string_view name;
  int line;
  bool operator==(const FrameKey& o) const { return line == o.line && file == o.file && name == o.name; }
};
struct FrameKeyHash {
  size_t operator()(const FrameKey& k) const {
    size_t h = std::hash<std::string_view>()(k.file);
    h ^= std::hash<std::string_view>()(k.name) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= static_cast<size_t>(k.line) * 0x100000001b3ull;
    return h;
  }
};

class Builder {
 public:
  Builder(const StateCopy& s, FrameSource& src, const BuildOptions& o, PickleWriter& w, BuildStats& st)
      : s_(s), src_(src), o_(o), w_(w), st_(st) {
    std::fill(std::begin(str_memo_), std::end(str_memo_), -1);
  }

  void run() {
    partition();
    for (auto& list : per_dev_) trim_to_bound(list, 0);
    trim_to_bound(host_entries_, 0);
    plan_marker();
    if (marker_dev_ >= 0) trim_to_bound(per_dev_[marker_dev_], 1);

    w_.begin();
    w_.begin_dict();

    w_.key("device_traces");
    w_.begin_list();
    for (int d = 0; d < ndev_; ++d) {
      w_.item();
      w_.begin_list();
      st_.device_entries += entry_list(per_dev_[d]);
      if (d == marker_dev_) {
        w_.item();
        marker(d);
        st_.device_entries += 1;
        st_.unknown_marker = true;
      }
      w_.end_list();
    }
    w_.end_list();
    st_.device_lists = static_cast<size_t>(ndev_);

    w_.key("segments");
    w_.begin_list();
    for (const Group& g : groups_) {
      w_.item();
      if (s_.live[g.rec].cache == CacheRole::Segment)
        cached_segment(g);
      else
        segment(s_.live[g.rec], false);
    }
    w_.end_list();
    st_.device_segments = groups_.size();

    bool host = !host_recs_.empty() || !host_entries_.empty();
    if (host) {
      // Written before allocator_settings so that the repair count there includes host frees.
      w_.key("host_segments");
      w_.begin_list();
      for (uint32_t i : host_recs_) {
        w_.item();
        segment(s_.live[i], true);
      }
      w_.end_list();
      st_.host_segments = host_recs_.size();
      w_.key("host_traces");
      w_.begin_list();
      st_.host_entries = entry_list(host_entries_);
      w_.end_list();
    }

    w_.key("allocator_settings");
    allocator_settings();

    w_.key("external_annotations");
    w_.begin_list();
    w_.end_list();

    w_.end_dict();
    w_.end();
    st_.distinct_stacks = stacks_.size();
  }

 private:
  struct StackInfo {
    int64_t list_memo = -1;
    int category = -1;
  };
  struct Group {
    uint32_t rec;          // index into live: the segment's record
    uint32_t first_block;  // caching segments: their blocks, seg_blocks_[first_block, +n_blocks)
    uint32_t n_blocks;
  };

  // ---- strings ----
  void cstr(int id) {
    if (str_memo_[id] >= 0) {
      w_.get(static_cast<uint32_t>(str_memo_[id]));
      return;
    }
    if (id >= vActionFirst)
      w_.str(action_name(static_cast<Action>(id - vActionFirst)));
    else
      w_.str(kFixedText[id]);
    str_memo_[id] = w_.memoize();
  }
  void key(int id) {
    w_.item();
    cstr(id);
  }
  // Strings that repeat with the same content (file names): memoized by content.
  void shared_str(std::string_view s) {
    auto it = text_memo_.find(s);
    if (it != text_memo_.end()) {
      w_.get(it->second);
      return;
    }
    w_.str(s);
    text_memo_.emplace(s, w_.memoize());
  }
  // Notes are static strings: memoized by address.
  void note(const char* n) {
    if (!n || !*n) {
      cstr(vEmpty);
      return;
    }
    auto it = note_memo_.find(n);
    if (it != note_memo_.end()) {
      w_.get(it->second);
      return;
    }
    w_.str(n);
    note_memo_.emplace(n, w_.memoize());
  }

  // ---- stacks ----
  StackInfo& stack(uint32_t id) { return stacks_[id]; }

  int category_of(uint32_t stack_id) {
    if (stack_id == 0) return category_index("unknown");
    StackInfo& si = stack(stack_id);
    if (si.category < 0) si.category = category_index(src_.owner(stack_id));
    return si.category;
  }
  int category_index(const std::string& name) {
    const std::string& n = name.empty() ? unknown_ : name;
    auto it = cat_index_.find(n);
    if (it != cat_index_.end()) return it->second;
    int idx = static_cast<int>(categories_.size());
    categories_.push_back(n);
    cat_memo_.push_back(-1);
    cat_index_.emplace(n, idx);
    return idx;
  }
  bool is_unknown(int cat) const { return categories_[cat] == unknown_; }
  void category(int cat) {
    if (cat_memo_[cat] >= 0) {
      w_.get(static_cast<uint32_t>(cat_memo_[cat]));
      return;
    }
    w_.str(categories_[cat]);
    cat_memo_[cat] = w_.memoize();
  }

  void empty_list() {
    if (empty_memo_ >= 0) {
      w_.get(static_cast<uint32_t>(empty_memo_));
      return;
    }
    w_.begin_list();
    w_.end_list();
    empty_memo_ = w_.memoize();
  }

  void frame_dict(const FrameRef& f) {
    w_.begin_dict();
    key(kFilename);
    shared_str(f.filename);
    key(kLine);
    w_.integer(f.line);
    key(kName);
    w_.str(f.name);
    w_.end_dict();
  }

  void frames_list(uint32_t stack_id) {
    if (!o_.include_frames || stack_id == 0) {
      empty_list();
      return;
    }
    StackInfo& si = stack(stack_id);
    if (si.list_memo >= 0) {
      w_.get(static_cast<uint32_t>(si.list_memo));
      return;
    }
    tmp_.clear();
    src_.frames(stack_id, &tmp_);
    if (tmp_.empty()) {
      empty_list();
      si.list_memo = empty_memo_;
      return;
    }
    // Two stack ids can give the same frames (they differed only inside memtrace): share the list.
    ids_.clear();
    bool all_known = true;
    for (const FrameRef& f : tmp_) {
      auto it = frame_memo_.find(FrameKey{f.filename, f.name, f.line});
      if (it == frame_memo_.end()) {
        ids_.push_back(UINT32_MAX);
        all_known = false;
      } else {
        ids_.push_back(it->second);
      }
    }
    if (all_known) {
      auto it = list_memo_.find(ids_key());
      if (it != list_memo_.end()) {
        si.list_memo = it->second;
        w_.get(it->second);
        return;
      }
    }
    w_.begin_list();
    for (size_t i = 0; i < tmp_.size(); ++i) {
      w_.item();
      if (ids_[i] == UINT32_MAX) {
        // Maybe written earlier in this same list (recursion).
        FrameKey k{tmp_[i].filename, tmp_[i].name, tmp_[i].line};
        auto it = frame_memo_.find(k);
        if (it != frame_memo_.end()) {
          ids_[i] = it->second;
        } else {
          frame_dict(tmp_[i]);
          ids_[i] = w_.memoize();
          frame_memo_.emplace(k, ids_[i]);
          ++st_.frame_dicts;
          continue;
        }
      }
      w_.get(ids_[i]);
    }
    w_.end_list();
    uint32_t m = w_.memoize();
    list_memo_.emplace(ids_key(), m);
    si.list_memo = m;
    ++st_.frame_lists;
  }
  std::string ids_key() const {
    return std::string(reinterpret_cast<const char*>(ids_.data()), ids_.size() * sizeof(uint32_t));
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

  void plan_marker() {
    bool any = false, unknown = false;
    int last = -1;
    for (int d = 0; d < ndev_; ++d) {
      for (uint32_t j : per_dev_[d]) {
        any = true;
        if (!unknown && is_unknown(category_of(s_.trace[j].stack_id))) unknown = true;
        if (last < 0 || j > last_index_) {
          last_index_ = j;
          last = d;
        }
      }
    }
    if (any && !unknown) marker_dev_ = last;
  }

  // ---- dicts ----
  void segment(const AllocRecord& r, bool host) {
    uint64_t req = std::min(r.requested, r.size);
    w_.begin_dict();
    key(kDevice);
    w_.integer(host ? -1 : r.device);
    key(kAddress);
    w_.uinteger(r.addr);
    key(kTotalSize);
    w_.uinteger(r.size);
    key(kAllocatedSize);
    w_.uinteger(r.size);
    key(kActiveSize);
    w_.uinteger(r.size);
    key(kRequestedSize);
    w_.uinteger(req);
    key(kStream);
    w_.uinteger(r.stream);
    key(kSegmentType);
    cstr(vLarge);
    key(kSegmentPoolId);
    w_.integer(0);
    w_.integer(0);
    w_.tuple2();
    key(kIsExpandable);
    w_.boolean(false);
    key(kFrames);
    frames_list(r.stack_id);
    if (r.note && *r.note) {
      key(kUserMetadata);
      note(r.note);
    }
    key(kBlocks);
    w_.begin_list();
    w_.item();
    w_.begin_dict();
    key(kAddress);
    w_.uinteger(r.addr);
    key(kSize);
    w_.uinteger(r.size);
    key(kRequestedSize);
    w_.uinteger(req);
    key(kState);
    cstr(vActiveAllocated);
    key(kFrames);
    frames_list(r.stack_id);
    if (r.note && *r.note) {
      key(kUserMetadata);
      note(r.note);
    }
    w_.end_dict();
    w_.end_list();
    w_.end_dict();
  }

  void block_dict(uint64_t addr, uint64_t size, uint64_t requested, int state, uint32_t stack_id, const char* n) {
    w_.begin_dict();
    key(kAddress);
    w_.uinteger(addr);
    key(kSize);
    w_.uinteger(size);
    key(kRequestedSize);
    w_.uinteger(requested);
    key(kState);
    cstr(state);
    key(kFrames);
    frames_list(stack_id);
    if (n && *n) {
      key(kUserMetadata);
      note(n);
    }
    w_.end_dict();
  }

  void cached_segment(const Group& g) {
    const AllocRecord& r = s_.live[g.rec];
    uint64_t allocated = 0, active = 0, requested = 0;
    for (uint32_t k = 0; k < g.n_blocks; ++k) {
      const AllocRecord& b = s_.live[seg_blocks_[g.first_block + k]];
      active += b.size;
      requested += std::min(b.requested, b.size);
      if (!(b.cache_flags & kCachePendingFree)) allocated += b.size;
    }
    w_.begin_dict();
    key(kDevice);
    w_.integer(r.device);
    key(kAddress);
    w_.uinteger(r.addr);
    key(kTotalSize);
    w_.uinteger(r.size);
    key(kAllocatedSize);
    w_.uinteger(allocated);
    key(kActiveSize);
    w_.uinteger(active);
    key(kRequestedSize);
    w_.uinteger(requested);
    key(kStream);
    w_.uinteger(r.stream);
    key(kSegmentType);
    cstr((r.cache_flags & kCacheSmallPool) ? vSmall : vLarge);
    key(kSegmentPoolId);
    w_.integer(0);
    w_.integer(0);
    w_.tuple2();
    key(kIsExpandable);
    w_.boolean((r.cache_flags & kCacheExpandable) != 0);
    key(kFrames);
    frames_list(r.stack_id);
    key(kBlocks);
    w_.begin_list();
    uint64_t cursor = r.addr;
    for (uint32_t k = 0; k < g.n_blocks; ++k) {
      const AllocRecord& b = s_.live[seg_blocks_[g.first_block + k]];
      if (b.addr > cursor) {
        w_.item();
        block_dict(cursor, b.addr - cursor, 0, vInactive, 0, nullptr);
      }
      w_.item();
      block_dict(b.addr, b.size, std::min(b.requested, b.size),
                 (b.cache_flags & kCachePendingFree) ? vActivePendingFree : vActiveAllocated, b.stack_id, b.note);
      cursor = b.addr + b.size;
    }
    if (cursor < r.addr + r.size) {
      w_.item();
      block_dict(cursor, r.addr + r.size - cursor, 0, vInactive, 0, nullptr);
    }
    w_.end_list();
    w_.end_dict();
  }

  // Writes v (the key already written); a value the viewer cannot hold exactly (a failed request
  // for 1 << 62 or SIZE_MAX bytes) is written capped at 2^53 - 1, and its true value follows
  // under exact_key as a decimal string, which memtrace's reader prefers (docs: snapshot format).
  void exact_beside(std::string_view exact_key, uint64_t v) {
    if (w_.uinteger(v)) return;
    char digits[24];
    int n = std::snprintf(digits, sizeof digits, "%llu", static_cast<unsigned long long>(v));
    w_.item();
    w_.str(exact_key);
    w_.str(std::string_view(digits, static_cast<size_t>(n)));
  }

  void entry(const TraceEntry& e, Action a) {
    w_.begin_dict();
    key(kAction);
    cstr(vActionFirst + static_cast<int>(a));
    if (a != Action::Oom) {
      key(kAddr);
      w_.uinteger(e.addr);
    }
    key(kSize);
    exact_beside("size_exact", e.size);
    key(kStream);
    w_.uinteger(e.stream);
    key(kTimeUs);
    w_.uinteger(e.time_us);
    key(kCompileContext);
    cstr(vEmpty);
    key(kUserMetadata);
    note(e.note);
    key(kCategory);
    category(category_of(e.stack_id));
    if (a == Action::Oom) {
      key(kDeviceFree);
      exact_beside("device_free_exact", e.device_free);
    }
    // Last, so that the first entry memoizes every key before any frame (small BINGET indices).
    if (o_.include_frames && e.stack_id != 0) {
      key(kFrames);
      frames_list(e.stack_id);
    }
    w_.end_dict();
  }

  // Writes one list's entries (the caller opened the list); returns how many were written.
  size_t entry_list(const std::vector<uint32_t>& idx) {
    size_t n = 0;
    const auto& t = s_.trace;
    for (size_t i = 0; i < idx.size(); ++i) {
      const TraceEntry& e = t[idx[i]];
      if (e.action == Action::FreeCompleted) {
        bool paired = i > 0 && t[idx[i - 1]].action == Action::FreeRequested && t[idx[i - 1]].addr == e.addr;
        if (!paired) {
          w_.item();
          entry(e, Action::FreeRequested);
          ++n;
          ++st_.repaired_frees;
        }
      }
      w_.item();
      entry(e, e.action);
      ++n;
      if (e.action == Action::FreeRequested) {
        bool paired =
            i + 1 < idx.size() && t[idx[i + 1]].action == Action::FreeCompleted && t[idx[i + 1]].addr == e.addr;
        if (!paired) {
          w_.item();
          entry(e, Action::FreeCompleted);
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
    if (last_index_ < s_.trace.size()) t = std::max(t, s_.trace[last_index_].time_us);
    w_.begin_dict();
    key(kAction);
    cstr(vActionFirst + static_cast<int>(Action::Snapshot));
    key(kAddr);
    w_.integer(0);
    key(kSize);
    w_.uinteger(live_bytes);
    key(kStream);
    w_.integer(0);
    key(kTimeUs);
    w_.uinteger(t);
    key(kCompileContext);
    cstr(vEmpty);
    key(kUserMetadata);
    w_.str("snapshot written by memtrace");
    key(kCategory);
    category(category_index(unknown_));
    w_.end_dict();
  }

  // One described value, as the pickle writer spells it.
  void setting_value(const format::Setting& st) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::monostate>)
            w_.none();
          else if constexpr (std::is_same_v<T, bool>)
            w_.boolean(v);
          else if constexpr (std::is_same_v<T, int64_t>)
            w_.integer(v);
          else if constexpr (std::is_same_v<T, uint64_t>)
            w_.uinteger(v);
          else if constexpr (std::is_same_v<T, double>)
            w_.float64(v);
          else if constexpr (std::is_same_v<T, std::string>) {
            if (v.empty())
              cstr(vEmpty);
            else
              w_.str(v);
          } else {
            w_.begin_dict();
            for (const auto& [k, n] : v) {
              w_.key(k);
              w_.integer(n);
            }
            w_.end_dict();
          }
        },
        st.value);
  }

  void allocator_settings() {
    const AllocatorSettings& as = o_.allocator;
    // PyTorch's keys and defaults, in the order PyTorch writes them; a described setting of the
    // same key replaces the default.
    format::IntDict divisions;
    for (int i = 0; i < 16; ++i) divisions.emplace_back(std::to_string(1 << i), 0);
    const format::Setting defaults[] = {
        {"PYTORCH_CUDA_ALLOC_CONF", std::string()},
        {"max_split_size", int64_t{-1}},
        {"garbage_collection_threshold", 0.0},
        {"expandable_segments", false},
        {"pinned_num_register_threads", int64_t{1}},
        {"release_lock_on_cudamalloc", false},
        {"pinned_use_cuda_host_register", false},
        {"graph_capture_record_stream_reuse", false},
        {"roundup_power2_divisions", std::move(divisions)},
    };
    auto described = [&](std::string_view key) -> const format::Setting* {
      for (const format::Setting& st : as.pytorch)
        if (st.key == key) return &st;
      return nullptr;
    };
    w_.begin_dict();
    for (const format::Setting& d : defaults) {
      const format::Setting* st = described(d.key);
      w_.key(d.key);
      setting_value(st ? *st : d);
    }
    for (const format::Setting& st : as.pytorch) {
      bool is_default = false;
      for (const format::Setting& d : defaults) is_default = is_default || d.key == st.key;
      if (is_default) continue;
      w_.key(st.key);
      setting_value(st);
    }
    w_.key("trace_alloc_max_entries");
    w_.uinteger(s_.ring_capacity);
    w_.key("trace_alloc_overflowed");
    w_.boolean(s_.dropped_entries > 0 || st_.trimmed_entries > 0);

    uint64_t vmm_dev = 0, vmm_host = 0;
    for (const HandleRecord& h : s_.handles) (h.host ? vmm_host : vmm_dev) += h.size;

    w_.key("memtrace");
    w_.begin_dict();
    w_.key("allocator");
    w_.str(as.mode);
    for (const format::Setting& st : as.memtrace) {
      w_.key(st.key);
      setting_value(st);
    }
    if (!as.memtrace.empty()) {
      w_.key("orphan_blocks");
      w_.uinteger(st_.orphan_blocks);
    }
    w_.key("version");
    w_.str(o_.meta.version.empty() ? std::string_view(MEMTRACE_VERSION) : std::string_view(o_.meta.version));
    w_.key("pid");
    w_.integer(o_.meta.pid);
    w_.key("exe");
    w_.str(o_.meta.exe);
    w_.key("host");
    w_.str(o_.meta.host);
    w_.key("rank");
    w_.str(o_.meta.rank);
    w_.key("dump_sequence");
    w_.uinteger(o_.meta.sequence);
    w_.key("reason");
    w_.str(o_.meta.reason);
    w_.key("time_us");
    w_.uinteger(s_.time_us);
    w_.key("ring_capacity");
    w_.uinteger(s_.ring_capacity);
    w_.key("entries_total");
    w_.uinteger(s_.total_entries);
    w_.key("entries_kept");
    w_.uinteger(s_.trace.size());
    w_.key("entries_dropped");
    w_.uinteger(s_.dropped_entries);
    w_.key("frees_completed_by_writer");
    w_.uinteger(st_.repaired_frees);
    w_.key("entries_trimmed_by_writer");
    w_.uinteger(st_.trimmed_entries);
    w_.key("unknown_frees");
    w_.uinteger(s_.unknown_frees);
    w_.key("stale_replaced");
    w_.uinteger(s_.stale_replaced);
    w_.key("live_device_allocations");
    w_.uinteger(dev_recs_.size());
    w_.key("live_host_allocations");
    w_.uinteger(host_recs_.size());
    w_.key("vmm_handles");
    w_.uinteger(s_.handles.size());
    w_.key("vmm_device_bytes");
    w_.uinteger(vmm_dev);
    w_.key("vmm_host_bytes");
    w_.uinteger(vmm_host);
    w_.key("frames_included");
    w_.boolean(o_.include_frames);
    w_.key("unknown_category_marker");
    w_.boolean(marker_dev_ >= 0);
    w_.end_dict();

    w_.end_dict();
  }

  const StateCopy& s_;
  FrameSource& src_;
  const BuildOptions& o_;
  PickleWriter& w_;
  BuildStats& st_;

  int64_t str_memo_[kStrCount];
  std::unordered_map<std::string_view, uint32_t> text_memo_;
  std::unordered_map<const char*, uint32_t> note_memo_;
  std::unordered_map<uint32_t, StackInfo> stacks_;
  std::unordered_map<FrameKey, uint32_t, FrameKeyHash> frame_memo_;
  std::unordered_map<std::string, uint32_t> list_memo_;
  int64_t empty_memo_ = -1;
  std::vector<FrameRef> tmp_;
  std::vector<uint32_t> ids_;

  const std::string unknown_ = "unknown";
  std::vector<std::string> categories_;
  std::vector<int64_t> cat_memo_;
  std::unordered_map<std::string, int> cat_index_;

  std::vector<uint32_t> dev_recs_, host_recs_;
  std::vector<Group> groups_;
  std::vector<uint32_t> seg_blocks_, orphans_;
  int ndev_ = 1;
  std::vector<std::vector<uint32_t>> per_dev_;
  std::vector<uint32_t> host_entries_;
  int marker_dev_ = -1;
  uint32_t last_index_ = 0;
};

}  // namespace

void build_snapshot(const StateCopy& state, FrameSource& frames, const BuildOptions& options, PickleWriter& w,
                    BuildStats* stats) {
  BuildStats local;
  BuildStats& st = stats ? *stats : local;
  st = BuildStats{};
  Builder b(state, frames, options, w, st);
  b.run();
}

}  // namespace memtrace::output
