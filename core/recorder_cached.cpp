// The caching allocator's records (MEMTRACE_ALLOCATOR=caching) and context teardown: blocks
// handed out, freed and settled, segment changes, and the purge of a destroyed context's records.
// The rest of the recorder is core/recorder.cpp.
#include "core/clock.hpp"
#include "core/recorder.hpp"

namespace memtrace {

namespace {
constexpr int kBatch = 64;
// Up to kBatch records that pick() chooses, copied out: taking while iterating would reshuffle
// the table.
template <typename Pick>
int pick_batch(AddrMap<AllocRecord>& live, Pick&& pick, AllocRecord* out) {
  int n = 0;
  live.for_each([&](uint64_t, const AllocRecord& r) {
    if (n < kBatch && pick(r)) out[n++] = r;
  });
  return n;
}
}  // namespace

void Recorder::purge_context(uint64_t ctx, uint32_t kind_mask) {
  if (ctx == 0) return;
  uint64_t t = now_ticks();
  // Two passes: the caching allocator's blocks go before its segments (the viewer re-creates a
  // freed block inside a segment that must still exist at that point).
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) purge_cached_blocks(ctx, kind_mask, t);
    for (Shard& s : shards_) {
      SpinGuard g(s.lock);
      AllocRecord victims[kBatch];
      for (;;) {
        const int n = pick_batch(s.live, [&](const AllocRecord& r) {
          return r.ctx == ctx && (kind_mask & kind_bit(r.kind)) && (r.cache == CacheRole::Segment) == (pass == 1);
        }, victims);
        if (n == 0) break;
        for (int i = 0; i < n; ++i) live_take(s, key_of(victims[i]), nullptr);
        SpinGuard rg(ring_lock_);
        for (int i = 0; i < n; ++i) {
          if (victims[i].kind == MemKind::Cached)
            emit_cached_purge(victims[i], t);
          else
            emit_free(victims[i], victims[i].stream, 0, t);
          account(victims[i], -1);
        }
      }
    }
  }
}

void Recorder::purge_cached_blocks(uint64_t ctx, uint32_t kind_mask, uint64_t t) {
  if (!(kind_mask & kind_bit(MemKind::Cached))) return;
  SpinGuard rg(ring_lock_);
  AllocRecord victims[kBatch];
  for (;;) {
    const int n = pick_batch(blocks_.live, [&](const AllocRecord& r) { return r.ctx == ctx; }, victims);
    if (n == 0) return;
    for (int i = 0; i < n; ++i) {
      live_take(blocks_, victims[i].addr, nullptr);
      emit_cached_purge(victims[i], t);
      account(victims[i], -1);
    }
  }
}

void Recorder::emit_cached_purge(const AllocRecord& r, uint64_t t) {
  TraceEntry e = entry_of(r, t);
  if (r.cache == CacheRole::Block) {
    e.size = r.requested;
    e.action = Action::FreeRequested;
    push(e);
    e.action = Action::FreeCompleted;
    push(e);
    return;
  }
  e.size = r.size;
  e.action = (r.cache_flags & kCacheExpandable) ? Action::SegmentUnmap : Action::SegmentFree;
  push(e);
}

// A cached block is only ever touched under the ring lock, so its record lives in blocks_, which
// that one lock guards: an entry costs one lock instead of a shard's and then the ring's (both
// are what a consistent cut takes, so the cut is unchanged).
void Recorder::cached_block_alloc(const AllocRecord& r) {
  SpinGuard rg(ring_lock_);
  AllocRecord stale;
  if (live_put(blocks_, r.addr, r, &stale)) {
    // Only a bug in the allocator's reports could get here; keep the viewer's alternation.
    ++c_->stale_replaced;
    account(stale, -1);
  }
  TraceEntry e = entry_of(r, r.time_us);
  e.size = r.requested;
  e.action = Action::Alloc;
  push(e);
  account(r, +1);
}

bool Recorder::cached_block_free_requested(uint64_t addr, uint32_t free_stack_id) {
  SpinGuard rg(ring_lock_);
  AllocRecord* cur = blocks_.live.find(addr);
  if (!cur || (cur->cache_flags & kCachePendingFree)) return false;
  cur->cache_flags |= kCachePendingFree;
  if (free_stack_id) cur->stack_id = free_stack_id;  // the free's entries carry the free's stack
  slot_mark_freed(*cur);
  return true;
}

bool Recorder::cached_block_free_completed(uint64_t addr, uint64_t ticks) {
  SpinGuard rg(ring_lock_);
  AllocRecord r;
  if (!live_take(blocks_, addr, &r)) return false;
  TraceEntry e = entry_of(r, ticks);
  e.size = r.requested;
  e.action = Action::FreeRequested;
  push(e);
  e.action = Action::FreeCompleted;
  push(e);
  account(r, -1);
  return true;
}

void Recorder::cached_segments_change(const TraceEntry& entry, const uint64_t* removed, size_t n_removed,
                                      const AllocRecord* added, size_t n_added) {
  // Rare (each one is a driver call): every lock, in the order copy_state takes them.
  for (Shard& s : shards_) s.lock.lock();
  int64_t delta = 0;
  AllocRecord like{};
  bool have_like = false;
  for (size_t i = 0; i < n_removed; ++i) {
    AllocRecord gone;
    const uint64_t key = segment_key(removed[i]);
    if (live_take(shard_of(key), key, &gone)) {
      delta -= static_cast<int64_t>(gone.size);
      if (!have_like) like = gone, have_like = true;
    }
  }
  for (size_t i = 0; i < n_added; ++i) {
    const uint64_t key = segment_key(added[i].addr);
    live_put(shard_of(key), key, added[i], nullptr);
    delta += static_cast<int64_t>(added[i].size);
    if (!have_like) like = added[i], have_like = true;
  }
  {
    SpinGuard rg(ring_lock_);
    push(entry);
    if (have_like && delta != 0) {
      // One net change per entry: a map that merges ranges is one allocation, not three.
      like.size = static_cast<uint64_t>(delta < 0 ? -delta : delta);
      account(like, delta < 0 ? -1 : +1);
    } else {
      note_device(entry.device);
    }
  }
  for (int i = kShards - 1; i >= 0; --i) shards_[i].lock.unlock();
}

}  // namespace memtrace
