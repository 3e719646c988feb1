#include "core/recorder.hpp"

#include <algorithm>

#include "core/clock.hpp"

namespace memtrace {

void Recorder::configure(size_t max_entries, uint32_t skip_actions_mask, size_t max_range_events) {
  SpinGuard g(ring_lock_);
  clock_.start();
  ring_.reset(max_entries);
  configured_entries_ = max_entries;
  range_log_.reset(max_range_events);
  skip_mask_ = skip_actions_mask;
}

void Recorder::attach_state(const StateMemory& mem) {
  SpinGuard g(ring_lock_);
  ring_.attach(mem.ring, mem.ring_capacity, mem.ring_total);
  *mem.counters = *c_;
  c_ = mem.counters;
  slots_ = mem.live_slots ? mem.live : nullptr;
  unrecorded_ = mem.live_unrecorded;
  // Half the slots for the shards, half for the caching allocator's blocks: in caching mode
  // nearly every live record is a block (docs/state-file.md, "Live slots").
  const uint64_t per = slots_ ? mem.live_slots / 2 / kShards : 0;
  for (int i = 0; i <= kShards; ++i) {
    Shard& s = i < kShards ? shards_[i] : blocks_;
    s.slot_begin = s.slot_fresh = static_cast<uint32_t>(1 + per * i);
    s.slot_end = static_cast<uint32_t>(i < kShards ? 1 + per * (i + 1) : 1 + (slots_ ? mem.live_slots : 0));
    s.slot_free = 0;
  }
}

void Recorder::warm_ring(bool (*stop)()) {
  // Not under the ring lock: pushes go on meanwhile (the ring stays mapped, see TraceRing::warm).
  ring_.warm(size_t{256} << 20, stop);
}

void Recorder::detach_state() {
  SpinGuard g(ring_lock_);
  ring_.reset(configured_entries_);
  own_counters_ = UsageCounters{};
  c_ = &own_counters_;
  slots_ = nullptr;
  unrecorded_ = nullptr;
  for (Shard& s : shards_) s.slot_begin = s.slot_end = s.slot_fresh = s.slot_free = 0;
  blocks_.slot_begin = blocks_.slot_end = blocks_.slot_fresh = blocks_.slot_free = 0;
}

// A slot is written inside an odd sequence number, so a reader in another process can tell a
// copy taken while it changed (docs/state-file.md, "Live slots").
namespace {
template <typename Change>
void change_slot(LiveSlot& slot, Change&& change) {
  const uint32_t q = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(q + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  change();
  slot.seq.store(q + 2, std::memory_order_release);
}
void write_slot(LiveSlot& slot, const AllocRecord* r) {
  change_slot(slot, [&] {
    if (r) slot.rec = *r;
    slot.live = r ? 1 : 0;
  });
}
}  // namespace

void Recorder::slot_put(Shard& s, AllocRecord* r) {
  r->slot = 0;
  if (!slots_) return;
  uint32_t id = 0;
  if (s.slot_free) {
    id = s.slot_free;
    s.slot_free = slots_[id - 1].next_free;
  } else if (s.slot_fresh < s.slot_end) {
    id = s.slot_fresh++;
  } else {
    unrecorded_->fetch_add(1, std::memory_order_relaxed);
    return;
  }
  r->slot = id;
  write_slot(slots_[id - 1], r);
}

void Recorder::slot_mark_freed(const AllocRecord& r) {
  if (!slots_ || !r.slot) return;
  // Only what a pending free changes: a whole record copied again was a visible share of a
  // cached block's free (docs/caching-allocator.md, "What the hooks add").
  LiveSlot& slot = slots_[r.slot - 1];
  change_slot(slot, [&] {
    slot.rec.cache_flags = r.cache_flags;
    slot.rec.stack_id = r.stack_id;
  });
}

void Recorder::slot_drop(Shard& s, uint32_t id) {
  if (!slots_) return;
  if (id == 0) {
    // A record that found no slot is gone: one fewer missing from the file.
    if (unrecorded_->load(std::memory_order_relaxed) > 0) unrecorded_->fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  write_slot(slots_[id - 1], nullptr);
  slots_[id - 1].next_free = s.slot_free;
  s.slot_free = id;
}

bool Recorder::live_put(Shard& s, uint64_t key, AllocRecord r, AllocRecord* stale) {
  slot_put(s, &r);
  AllocRecord old;
  const bool had = s.live.exchange(key, r, &old);
  if (had) slot_drop(s, old.slot);
  if (had && stale) *stale = old;
  return had;
}

bool Recorder::live_take(Shard& s, uint64_t key, AllocRecord* out) {
  AllocRecord gone;
  if (!s.live.take(key, &gone)) return false;
  slot_drop(s, gone.slot);
  if (out) *out = gone;
  return true;
}

void Recorder::push(const TraceEntry& e) {
  if (skip_mask_ & (1u << static_cast<int>(e.action))) return;
  ring_.push(e);
}

// Usage statistics live under the ring lock: every event already holds it, so the totals move
// together with the history and a dump sees both at the same instant.
namespace {
void add_usage(UsageStats* u, int64_t delta) {
  if (delta >= 0) {
    u->current += static_cast<uint64_t>(delta);
    u->allocations += 1;
    if (u->current > u->peak) u->peak = u->current;
  } else {
    uint64_t d = static_cast<uint64_t>(-delta);
    u->current = u->current >= d ? u->current - d : 0;
  }
}
}  // namespace

void Recorder::account_device(int device, int64_t reserved, int64_t allocated) {
  if (reserved != 0) {
    add_usage(&c_->reserved[device], reserved);
    add_usage(&c_->reserved_all, reserved);
  }
  if (allocated != 0) {
    add_usage(&c_->allocated[device], allocated);
    add_usage(&c_->allocated_all, allocated);
  }
}

void Recorder::account_bytes(bool host, int device, uint16_t owner, int64_t delta) {
  if (host) {
    add_usage(&c_->host, delta);
    return;
  }
  if (device < 0 || device >= kMaxDevices) return;
  if (device + 1 > c_->device_count) c_->device_count = device + 1;
  account_device(device, delta, delta);
  if (owner < kMaxOwners) add_usage(&c_->owner_device[owner], delta);
}

void Recorder::note_device(int device) {
  if (device >= 0 && device < kMaxDevices && device + 1 > c_->device_count) c_->device_count = device + 1;
}

void Recorder::account(const AllocRecord& r, int64_t sign) {
  if (r.kind == MemKind::VmmMapping) {
    // Mappings show where physical memory is visible; the bytes are counted on the handle.
    note_device(r.device);
    return;
  }
  if (r.kind == MemKind::Cached) {
    // Segments are the device's bytes (what the driver gave up), blocks their owner's.
    note_device(r.device);
    if (r.device < 0 || r.device >= kMaxDevices) return;
    const int64_t delta = sign * static_cast<int64_t>(r.size);
    if (r.cache == CacheRole::Segment) {
      account_device(r.device, delta, 0);
    } else {
      account_device(r.device, 0, delta);
      if (r.owner < kMaxOwners) add_usage(&c_->owner_device[r.owner], delta);
    }
    return;
  }
  account_bytes(is_host(r.kind), r.device, r.owner, sign * static_cast<int64_t>(r.size));
}

void Recorder::emit_alloc(const AllocRecord& r) {
  TraceEntry e = entry_of(r, r.time_us);
  e.action = Action::SegmentAlloc;
  e.size = r.size;
  push(e);
  e.action = Action::Alloc;
  e.size = r.requested;
  push(e);
}

void Recorder::emit_free(const AllocRecord& r, uint64_t stream, uint32_t stack_id, uint64_t t) {
  TraceEntry e = entry_of(r, t);
  e.stream = stream;
  e.stack_id = stack_id ? stack_id : r.stack_id;  // its ranges stay the allocation's
  e.size = r.requested;
  e.action = Action::FreeRequested;
  push(e);
  e.action = Action::FreeCompleted;
  push(e);
  e.action = Action::SegmentFree;
  e.size = r.size;
  push(e);
}

void Recorder::record_alloc(const AllocRecord& r) {
  Shard& s = shard_of(r.addr);
  SpinGuard g(s.lock);
  AllocRecord stale;
  bool had_stale = live_put(s, r.addr, r, &stale);
  SpinGuard rg(ring_lock_);
  if (had_stale) {
    // The driver reused an address memtrace thought was live (a free it never saw):
    // close the old one first so the viewer never sees two blocks at one address.
    emit_free(stale, stale.stream, 0, r.time_us);
    ++c_->stale_replaced;
    account(stale, -1);
  }
  emit_alloc(r);
  account(r, +1);
}

bool Recorder::release(uint64_t addr, uint64_t stream, uint32_t free_stack_id, AllocRecord* out,
                       const MemKind* only_kind) {
  Shard& s = shard_of(addr);
  SpinGuard g(s.lock);
  AllocRecord* cur = s.live.find(addr);
  if (!cur || (only_kind && cur->kind != *only_kind)) return false;
  live_take(s, addr, out);
  SpinGuard rg(ring_lock_);
  emit_free(*out, stream ? stream : out->stream, free_stack_id, now_ticks());
  account(*out, -1);
  return true;
}

bool Recorder::is_live(uint64_t addr) {
  Shard& s = shard_of(addr);
  SpinGuard g(s.lock);
  if (s.live.find(addr) != nullptr) return true;
  SpinGuard rg(ring_lock_);
  return blocks_.live.find(addr) != nullptr;
}

void Recorder::restore(const AllocRecord& r) {
  if (is_live(r.addr)) return;
  AllocRecord again = r;
  again.time_us = now_ticks();
  again.note = kFreeFailedNote;
  record_alloc(again);
}

void Recorder::record_oom(int device, uint64_t size, uint64_t stream, uint64_t device_free,
                          uint32_t stack_id, const char* note, uint32_t range, uint32_t phase) {
  TraceEntry e;
  e.range = range;
  e.phase = phase;
  e.time_us = now_ticks();
  e.action = Action::Oom;
  e.size = size;
  e.stream = stream;
  e.device_free = device_free;
  e.stack_id = stack_id;
  e.device = static_cast<int16_t>(device);
  e.note = note;
  SpinGuard rg(ring_lock_);
  push(e);
}

void Recorder::record_marker(int device, const char* text, uint32_t stack_id, uint32_t range, uint32_t phase) {
  TraceEntry e;
  e.time_us = now_ticks();
  e.action = kMarkerAction;
  e.note = text;
  e.stack_id = stack_id;
  e.range = range;
  e.phase = phase;
  e.device = static_cast<int16_t>(device);
  SpinGuard rg(ring_lock_);
  push(e);
}

void Recorder::handle_created(const HandleRecord& h) {
  {
    SpinGuard g(handle_lock_);
    handles_.put(h.handle, h);
  }
  SpinGuard rg(ring_lock_);
  account_bytes(h.host, h.device, h.owner, static_cast<int64_t>(h.size));
}

void Recorder::handle_ref(uint64_t handle, int delta) {
  HandleRecord gone;
  {
    SpinGuard g(handle_lock_);
    HandleRecord* h = handles_.find(handle);
    if (!h) return;
    h->refs += delta;
    if (h->refs > 0) return;
    handles_.take(handle, &gone);
  }
  SpinGuard rg(ring_lock_);
  account_bytes(gone.host, gone.device, gone.owner, -static_cast<int64_t>(gone.size));
}

bool Recorder::handle_info(uint64_t handle, HandleRecord* out) {
  SpinGuard g(handle_lock_);
  HandleRecord* h = handles_.find(handle);
  if (!h) return false;
  *out = *h;
  return true;
}

StateCopy Recorder::copy_state() { return copy_state_impl(false); }

StateCopy Recorder::copy_state_locked() { return copy_state_impl(true); }

StateCopy Recorder::copy_state_impl(bool ring_under_locks) {
  StateCopy c;
  // Memory for the copies is faulted in before any lock is taken: on a virtual machine a page
  // fault costs microseconds, and the program's threads must not wait for thousands of them.
  size_t estimate = 64;
  for (Shard& s : shards_) estimate += s.live.size() + s.live.size() / 8;  // racy reads: a hint
  estimate += blocks_.live.size() + blocks_.live.size() / 8;
  c.live.resize(estimate);
  c.live.clear();
  if (ring_under_locks) {
    c.trace.resize(ring_.capacity());
    c.trace.clear();
  }
  // The cut: registry, handles and totals are copied under every lock, together with the
  // ring's position. The ring itself, by far the largest part, is copied after the locks are
  // released, so the program's threads wait only for the small part.
  for (Shard& s : shards_) s.lock.lock();
  handle_lock_.lock();
  ring_lock_.lock();
  size_t n = 0;
  for (Shard& s : shards_) n += s.live.size();
  c.live.reserve(n + blocks_.live.size());
  for (Shard& s : shards_) s.live.for_each([&](uint64_t, const AllocRecord& r) { c.live.push_back(r); });
  blocks_.live.for_each([&](uint64_t, const AllocRecord& r) { c.live.push_back(r); });
  handles_.for_each([&](uint64_t, const HandleRecord& h) { c.handles.push_back(h); });
  const uint64_t cut = ring_.total();
  const uint64_t cap = ring_.capacity();
  if (ring_under_locks) ring_.copy_range(cut > cap ? cut - cap : 0, cut, &c.trace);
  for (int i = 0; i < kMaxDevices; ++i) c.device[i] = c_->reserved[i];
  for (int i = 0; i < kMaxOwners; ++i) c.owner_device[i] = c_->owner_device[i];
  c.device_count = c_->device_count;
  c.host = c_->host;
  c.stale_replaced = c_->stale_replaced;
  ring_lock_.unlock();
  handle_lock_.unlock();
  for (int i = kShards - 1; i >= 0; --i) shards_[i].lock.unlock();

  uint64_t first = cut > cap ? cut - cap : 0;
  uint64_t after = cut;  // with the ring copied under the locks nothing can be torn
  if (!ring_under_locks) {
    ring_.copy_range(first, cut, &c.trace);
    SpinGuard rg(ring_lock_);  // every push that started has finished
    after = ring_.total();
  }
  // Pushes made while copying reused the slots of the oldest entries: those copies may be torn.
  // What is kept is still an unbroken suffix of the history up to the cut, which the viewer
  // reads like any truncated history.
  uint64_t valid_from = after > cap ? after - cap : 0;
  if (valid_from > first) {
    uint64_t lost = std::min<uint64_t>(valid_from - first, c.trace.size());
    if (lost * 4 > c.trace.size()) {
      // The program allocates faster than the ring can be copied: losing over a quarter of the
      // history to save the pause is a bad trade. Take the cut again, ring under the locks.
      return copy_state_locked();
    }
    c.trace.erase(c.trace.begin(), c.trace.begin() + static_cast<std::ptrdiff_t>(lost));
    first += lost;
  }
  // Ticks become Unix microseconds here, outside every lock.
  TickClock clock = clock_;
  clock.calibrate();
  for (TraceEntry& e : c.trace) e.time_us = clock.to_us(e.time_us);
  for (AllocRecord& r : c.live) r.time_us = clock.to_us(r.time_us);
  for (HandleRecord& h : c.handles) h.time_us = clock.to_us(h.time_us);
  // Range starts and ends are not part of the cut: they are copied after it, so a dump may list a
  // range that started after its last entry, never lose one that started before.
  range_log_.copy_to(&c.range_events, &c.range_events_dropped);
  for (RangeEvent& e : c.range_events) e.time_us = clock.to_us(e.time_us);
  c.time_us = now_us();
  c.dropped_entries = first;
  c.total_entries = cut;
  c.ring_capacity = cap;
  c.ring_bytes = ring_.reserved_bytes();
  c.unknown_frees = unknown_frees_.load(std::memory_order_relaxed);
  order_live(&c);
  return c;
}

void order_live(StateCopy* c) {
  std::sort(c->live.begin(), c->live.end(), [](const AllocRecord& a, const AllocRecord& b) {
    bool ha = is_host(a.kind), hb = is_host(b.kind);
    if (ha != hb) return hb;
    if (a.device != b.device) return a.device < b.device;
    return a.addr < b.addr;
  });
  for (const AllocRecord& r : c->live)
    if (!is_host(r.kind) && r.device + 1 > c->device_count) c->device_count = r.device + 1;
}

void Recorder::usage(UsageTotals* out) {
  SpinGuard g(ring_lock_);
  for (int i = 0; i < kMaxDevices; ++i) {
    out->reserved[i] = c_->reserved[i];
    out->allocated[i] = c_->allocated[i];
  }
  out->reserved_all = c_->reserved_all;
  out->allocated_all = c_->allocated_all;
  out->host = c_->host;
  for (int i = 0; i < kMaxOwners; ++i) out->owner_device[i] = c_->owner_device[i];
  out->device_count = c_->device_count;
}

void Recorder::reset_after_fork() {
  for (Shard& s : shards_) {
    s.lock.reset();
    s.live.clear();
  }
  blocks_.live.clear();
  handle_lock_.reset();
  handles_.clear();
  ring_lock_.reset();
  range_log_.clear();
  detach_state();  // the parent's state file is the parent's; clears ring and counters
  unknown_frees_.store(0);
}

}  // namespace memtrace
