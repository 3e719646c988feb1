// Decisions taken here, and why:
//
// * Consistent cut. The listener records each allocator action into the recorder as it happens,
//   under the allocator's lock: blocks as MemKind::Cached records of role Block (one shard lock,
//   like any allocation), segments as records of role Segment, changed under every shard lock at
//   once (Recorder::cached_segments_change). copy_state() takes the same locks, so a snapshot sees
//   the registry exactly after the last ring entry it holds, and the writer tiles each segment with
//   the blocks inside it (gaps = 'inactive'). Asking the allocator for segments() at dump time
//   would need the allocators' locks inside the recorder's cut and a second truth to keep in step.
//
// * Expandable segments: the registry holds maximal contiguous mapped ranges (what PyTorch reports
//   as segments). A map next to a range merges with it; an unmap inside one splits it; each change
//   is one atomic registry update with its one trace entry.
//
// * Deferred frees: the program's free only marks the block pending (snapshots show it
//   'active_pending_free'); free_requested + free_completed are written together when a
//   synchronize makes the block reusable. PyTorch would write free_requested at the free, but
//   output/tests/check_snapshot.py (and the older viewers' collapse into 'free') want the pair
//   adjacent. The exit dump settles the pending batch first, so the exit snapshot has every free.
//
// * Stacks: the hook captures the caller's stack before calling the allocator (never under its
//   lock) and leaves it in a thread-local the listener reads; the segment a request creates gets
//   the same stack. Frees keep the block's stack (or the free's own with MEMTRACE_FREE_STACKS).
#include "preload/caching_recording.hpp"
#include "preload/ranges.hpp"

#include <iterator>

#include "core/clock.hpp"

namespace memtrace::preload {

__thread CachingRequest t_request __attribute__((tls_model("initial-exec"))) = {0, 0, nullptr, 0, false};

void RecordingListener::on_event(const caching::AllocatorEvent& e) {
  if (!s_) return;
  Recorder& rec = s_->recorder;
  switch (e.action) {
    case Action::Alloc: {
      AllocRecord r = base_record(e.addr, e.block_size, t_request.stack_id);
      r.requested = e.size;
      r.stream = e.stream;
      r.owner = t_request.owner;
      r.cache = CacheRole::Block;
      rec.cached_block_alloc(r);
      break;
    }
    case Action::FreeRequested:
      rec.cached_block_free_requested(e.addr, t_request.free_stack_id);
      break;
    case Action::FreeCompleted:
      // One reading of the clock per synchronize: its blocks all became reusable when it returned.
      if (!e.same_settle) settled_ticks_ = now_ticks();
      rec.cached_block_free_completed(e.addr, settled_ticks_);
      break;
    case Action::SegmentAlloc: {
      AllocRecord seg =
          segment_record(e.addr, e.size, e.stream, t_request.small ? kCacheSmallPool : 0, t_request.stack_id);
      segs_[e.addr] = seg;
      rec.cached_segments_change(entry(e, seg.stack_id), nullptr, 0, &seg, 1);
      break;
    }
    case Action::SegmentFree: {
      uint32_t stack = 0;
      if (auto it = segs_.find(e.addr); it != segs_.end()) stack = it->second.stack_id, segs_.erase(it);
      rec.cached_segments_change(entry(e, stack), &e.addr, 1, nullptr, 0);
      break;
    }
    case Action::SegmentMap:
      mapped(e);
      break;
    case Action::SegmentUnmap:
      unmapped(e);
      break;
    case Action::Oom:
      rec.record_oom(device_, e.size, e.stream, e.device_free, t_request.stack_id, t_request.note);
      break;
    default:
      break;
  }
}

AllocRecord RecordingListener::base_record(uint64_t addr, uint64_t size, uint32_t stack) const {
  AllocRecord r;
  r.addr = addr;
  r.size = size;
  r.time_us = now_ticks();
  r.ctx = ctx_;
  r.device = static_cast<int16_t>(device_);
  r.note = t_request.note;
  r.stack_id = stack;
  // The allocator reports in the thread that asked: its ranges are the request's.
  const ranges::Current open = ranges::current();
  r.range = open.range;
  r.phase = open.phase;
  r.kind = MemKind::Cached;
  return r;
}

AllocRecord RecordingListener::segment_record(uint64_t addr, uint64_t size, uint64_t stream, uint8_t flags,
                                              uint32_t stack) const {
  AllocRecord r = base_record(addr, size, stack);
  r.stream = stream;
  r.cache = CacheRole::Segment;
  r.cache_flags = flags;
  return r;
}

TraceEntry RecordingListener::entry(const caching::AllocatorEvent& e, uint32_t stack) const {
  TraceEntry t;
  t.time_us = now_ticks();
  t.addr = e.addr;
  t.size = e.size;
  t.stream = e.stream;
  t.note = t_request.note;
  t.stack_id = stack;
  const ranges::Current open = ranges::current();
  t.range = open.range;
  t.phase = open.phase;
  t.device = static_cast<int16_t>(device_);
  t.action = e.action;
  t.kind = MemKind::Cached;
  return t;
}

// A mapped range joins the ranges it touches (same stream: the same reservation's pool).
void RecordingListener::mapped(const caching::AllocatorEvent& e) {
  uint8_t flags = kCacheExpandable | (t_request.small ? kCacheSmallPool : 0);
  AllocRecord merged = segment_record(e.addr, e.size, e.stream, flags, t_request.stack_id);
  uint64_t removed[2];
  size_t n = 0;
  auto it = segs_.lower_bound(e.addr);
  if (it != segs_.begin()) {
    auto p = std::prev(it);
    const AllocRecord& r = p->second;
    if ((r.cache_flags & kCacheExpandable) && r.addr + r.size == e.addr && r.stream == e.stream) {
      merged.addr = r.addr;
      merged.size += r.size;
      merged.stack_id = r.stack_id;
      merged.time_us = r.time_us;
      merged.cache_flags = r.cache_flags;
      removed[n++] = r.addr;
      segs_.erase(p);
    }
  }
  if (auto nx = segs_.find(e.addr + e.size); nx != segs_.end()) {
    const AllocRecord& r = nx->second;
    if ((r.cache_flags & kCacheExpandable) && r.stream == e.stream) {
      merged.size += r.size;
      removed[n++] = r.addr;
      segs_.erase(nx);
    }
  }
  segs_[merged.addr] = merged;
  s_->recorder.cached_segments_change(entry(e, t_request.stack_id), removed, n, &merged, 1);
}

// An unmapped range splits the range holding it into what is left on either side.
void RecordingListener::unmapped(const caching::AllocatorEvent& e) {
  AllocRecord left[2];
  size_t n_added = 0;
  uint64_t removed = 0;
  size_t n_removed = 0;
  uint32_t stack = 0;
  auto it = segs_.upper_bound(e.addr);
  if (it != segs_.begin()) {
    --it;
    const AllocRecord r = it->second;
    if (e.addr < r.addr + r.size) {
      stack = r.stack_id;
      removed = r.addr;
      n_removed = 1;
      segs_.erase(it);
      const uint64_t end = e.addr + e.size, r_end = r.addr + r.size;
      if (e.addr > r.addr) {
        left[n_added] = r;
        left[n_added++].size = e.addr - r.addr;
      }
      if (end < r_end) {
        left[n_added] = r;
        left[n_added].addr = end;
        left[n_added++].size = r_end - end;
      }
      for (size_t i = 0; i < n_added; ++i) segs_[left[i].addr] = left[i];
    }
  }
  s_->recorder.cached_segments_change(entry(e, stack), &removed, n_removed, left, n_added);
}

}  // namespace memtrace::preload
