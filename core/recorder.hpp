// The recording side: registry of live memory + bounded trace ring, updated by hooks.
// Each event takes one registry shard lock and, inside it, the ring lock, so a dump that
// takes every lock sees whole events only: a consistent cut. The caching allocator's blocks are
// the exception that proves it: their records sit in a registry part of their own that the ring
// lock guards, so each of their entries takes that one lock.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/addr_map.hpp"
#include "core/clock.hpp"
#include "core/range_log.hpp"
#include "core/records.hpp"
#include "core/spinlock.hpp"
#include "core/state_memory.hpp"
#include "core/trace_ring.hpp"

namespace memtrace {

// Sorts StateCopy::live as the struct says and raises device_count to cover every live device.
void order_live(StateCopy* c);

class Recorder {
 public:
  Recorder() = default;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Sizes the ring and the range log and sets which actions are skipped. Clears history.
  void configure(size_t max_entries, uint32_t skip_actions_mask, size_t max_range_events = 0);
  // Moves the ring, the usage counters and a copy of every live record into memory handed in
  // (the state file, docs/state-file.md). Call after configure() and before the first event.
  // The mapping's ring replaces the configured one (mem.ring_capacity entries).
  void attach_state(const StateMemory& mem);
  // Back to private memory, starting empty (a forked child must not write its parent's file).
  void detach_state();
  // Touches the ring's pages ahead of the first pass (TraceRing::warm), from memtrace's own
  // thread: the first 256 MiB of it; stop() is asked every MiB.
  void warm_ring(bool (*stop)());

  // Times handed in (AllocRecord::time_us, HandleRecord::time_us) are now_ticks() readings;
  // copy_state() hands them out as Unix microseconds.
  // An allocation succeeded: records it and emits segment_alloc + alloc.
  void record_alloc(const AllocRecord& r);
  // Before the real free: removes the record and emits free_requested, free_completed,
  // segment_free. Emitting before the driver can reuse the memory keeps the history in the
  // driver's real order even when another thread is handed the same range at once.
  // False (nothing emitted) if the address is unknown, or its record is not of only_kind
  // when one is given.
  bool release(uint64_t addr, uint64_t stream, uint32_t free_stack_id, AllocRecord* out,
               const MemKind* only_kind = nullptr);
  // The real free failed: the memory is still the program's. Records it again (segment_alloc
  // + alloc, noted kFreeFailedNote) unless the address is live again already.
  static constexpr const char* kFreeFailedNote = "memtrace: free failed, still allocated";
  void restore(const AllocRecord& r);
  // A free of a pointer memtrace never saw (counted only).
  void note_unknown_free() { unknown_frees_.fetch_add(1, std::memory_order_relaxed); }
  bool is_live(uint64_t addr);

  void record_oom(int device, uint64_t size, uint64_t stream, uint64_t device_free, uint32_t stack_id,
                  const char* note, uint32_t range = 0, uint32_t phase = 0);
  // A marker (nvtxMark, memtrace_annotate; docs/ranges.md). `text` must outlive the recorder.
  void record_marker(int device, const char* text, uint32_t stack_id, uint32_t range, uint32_t phase);
  // Range starts and ends (docs/ranges.md), pushed by whoever tracks ranges, without a lock.
  void record_range(uint32_t node, int device, RangeStage stage) {
    range_log_.push(now_ticks(), node, static_cast<int16_t>(device), stage);
  }

  // MEMTRACE_ALLOCATOR=caching: the allocator's actions, recorded as it reports them (under its
  // own lock, hence in its order). Its records are MemKind::Cached, segments and blocks apart
  // (CacheRole); a snapshot tiles each segment with the blocks inside it. Segments count as the
  // device's bytes (what the driver gave up), blocks as their owner's (who holds the memory).
  // A block handed out: its record (size = block bytes, requested = bytes asked) and `alloc`.
  void cached_block_alloc(const AllocRecord& block);
  // The program freed a block that waits for a synchronize before reuse: the record stays,
  // marked kCachePendingFree (a snapshot shows it 'active_pending_free'), and takes the free's
  // stack when free_stack_id is not 0. No entry yet. False when no live block starts at addr.
  bool cached_block_free_requested(uint64_t addr, uint32_t free_stack_id);
  // The block went back to the allocator's free pool: `free_requested` + `free_completed`
  // together (the pair output/tests/check_snapshot.py and older viewers expect adjacent; the
  // pending state between the two is what the snapshot's block state shows), record removed.
  // `ticks`: when it settled (the blocks one synchronize settles share its instant).
  bool cached_block_free_completed(uint64_t addr, uint64_t ticks = now_ticks());
  // One segment entry (segment_alloc/free/map/unmap, entry.kind Cached) and the segment records
  // it removes (by address) and adds, applied under every lock at once: a cut never sees half of
  // a change that replaces one mapped range by several (an unmap in its middle) or several by one.
  void cached_segments_change(const TraceEntry& entry, const uint64_t* removed, size_t n_removed,
                              const AllocRecord* added, size_t n_added);

  // VMM physical memory.
  void handle_created(const HandleRecord& h);
  // Adds delta to the handle's references; at zero the physical memory is gone.
  void handle_ref(uint64_t handle, int delta);
  bool handle_info(uint64_t handle, HandleRecord* out);

  // Context teardown frees the context's allocations of the kinds in kind_mask (bit per
  // MemKind): emit frees for them. VMM physical memory and pool allocations belong to no
  // context and survive it; the caller chooses.
  void purge_context(uint64_t ctx, uint32_t kind_mask);
  static constexpr uint32_t kind_bit(MemKind k) { return 1u << static_cast<int>(k); }

  // A consistent cut. The history ring is copied after the locks are released; if the program
  // overwrote more than a quarter of it meanwhile, the cut is taken again with the ring copied
  // under the locks.
  StateCopy copy_state();
  // The usage totals only, under the ring lock (the lock every event already takes): cheap enough
  // for a program to ask for its numbers every step.
  void usage(UsageTotals* out);
  // In a forked child: the child owns no device memory.
  void reset_after_fork();


 private:
  static constexpr int kShards = 32;
  struct Shard {
    SpinLock lock;
    AddrMap<AllocRecord> live;
    // This shard's part of the state file's live slots [slot_begin, slot_end), 1-based ids; under
    // the shard lock. Fresh slots are taken in order, freed ones are reused first.
    uint32_t slot_begin = 0, slot_end = 0, slot_fresh = 0, slot_free = 0;
  };
  // The record goes into a slot of its shard's (r->slot set), or is counted as unrecorded.
  void slot_put(Shard& s, AllocRecord* r);
  void slot_mark_freed(const AllocRecord& r);  // its cache_flags and stack_id changed in place
  void slot_drop(Shard& s, uint32_t slot);
  // Copies r into the registry (key) with its slot: the whole of an insertion. Caller holds s.lock.
  bool live_put(Shard& s, uint64_t key, AllocRecord r, AllocRecord* stale);
  bool live_take(Shard& s, uint64_t key, AllocRecord* out);
  // A caching segment and its first block start at the same address: segments are filed under
  // the address plus one (device addresses are at least 512-byte aligned, so no key collides).
  static uint64_t segment_key(uint64_t addr) { return addr | 1; }
  static uint64_t key_of(const AllocRecord& r) { return r.cache == CacheRole::Segment ? segment_key(r.addr) : r.addr; }
  Shard& shard_of(uint64_t addr) { return shards_[(addr >> 9) * 0x9E3779B97F4A7C15ull >> 59]; }
  void push(const TraceEntry& e);  // caller holds ring_lock_
  // An entry about r's memory at time t, with r's stream, note, stack, ranges, device and kind;
  // the caller sets action and size.
  static TraceEntry entry_of(const AllocRecord& r, uint64_t t) {
    TraceEntry e;
    e.time_us = t;
    e.addr = r.addr;
    e.stream = r.stream;
    e.note = r.note;
    e.stack_id = r.stack_id;
    e.range = r.range;
    e.phase = r.phase;
    e.device = r.device;
    e.kind = r.kind;
    return e;
  }
  StateCopy copy_state_locked();
  StateCopy copy_state_impl(bool ring_under_locks);
  void emit_alloc(const AllocRecord& r);
  void emit_free(const AllocRecord& r, uint64_t stream, uint32_t stack_id, uint64_t t);
  void emit_cached_purge(const AllocRecord& r, uint64_t t);  // caller holds ring_lock_
  void purge_cached_blocks(uint64_t ctx, uint32_t kind_mask, uint64_t t);
  void account(const AllocRecord& r, int64_t sign);         // caller holds ring_lock_
  void account_bytes(bool host, int device, uint16_t owner, int64_t delta);  // caller holds ring_lock_
  // Device bytes moved: `reserved` (the driver's), `allocated` (the program's blocks); without the
  // caching allocator both are the same. Caller holds ring_lock_, device is in range.
  void account_device(int device, int64_t reserved, int64_t allocated);
  void note_device(int device);  // caller holds ring_lock_

  Shard shards_[kShards];
  // The caching allocator's blocks (CacheRole::Block), under ring_lock_ (its own lock is unused).
  // Their addresses lie inside cached segments, which the driver never hands out again, so no
  // other record shares one.
  Shard blocks_;
  SpinLock handle_lock_;
  AddrMap<HandleRecord> handles_;
  SpinLock ring_lock_;
  TraceRing ring_;
  RangeLog range_log_;
  uint32_t skip_mask_ = 0;
  size_t configured_entries_ = 0;  // the private ring's size, for detach_state
  TickClock clock_;  // set by configure

  // Guarded by ring_lock_; in the state file when one is attached.
  UsageCounters own_counters_;
  UsageCounters* c_ = &own_counters_;
  std::atomic<uint64_t> unknown_frees_{0};
  // The state file's live slots (null: none).
  LiveSlot* slots_ = nullptr;
  std::atomic<uint64_t>* unrecorded_ = nullptr;
};

}  // namespace memtrace
