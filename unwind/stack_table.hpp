// Each distinct stack stored once; events carry a 32-bit id.
// Lock-light: lookups of known stacks take no lock; inserting a new one takes a short lock.
// Storage is append-only, so a view returned by get() stays valid for the table's lifetime.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/spinlock.hpp"

namespace memtrace::unwind {

// A copy of every new stack in memory someone else provides (the state file, docs/state-file.md):
// stack id i's addresses are frames[records[i-1] >> 12 ...], (records[i-1] & 0xfff) of them, 0 when
// they did not fit; `published` is the count of ids written, stored after their records.
struct StackMirror {
  uint64_t* records = nullptr;
  uint64_t max_stacks = 0;
  uintptr_t* frames = nullptr;
  uint64_t max_frames = 0;
  std::atomic<uint64_t>* published = nullptr;
  uint64_t frames_used = 0;       // the writer's (under the table's insert lock)
  void (*on_new_stack)() = nullptr;  // called after each new stack, outside the table's lock
};

class StackTable {
 public:
  StackTable();
  // Smaller bounds (tests, or a caller that wants less); clamped to kMaxStacks / kMaxFrames.
  StackTable(uint32_t max_stacks, uint64_t max_frames);
  ~StackTable();
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  // Id (> 0) of this address sequence; 0 when n == 0 or the table is full.
  uint32_t intern(const uintptr_t* pcs, uint32_t n);
  // The same, allowed into the last kReserved ids that intern() leaves free: once the table is
  // full, a stack that names only who asked (one address) still gets an id, so later events
  // keep their owner.
  uint32_t intern_reserved(const uintptr_t* pcs, uint32_t n);
  // Lowers the number of stacks kept (MEMTRACE_MAX_STACKS); call before the first intern.
  void limit_stacks(uint32_t max_stacks);
  uint32_t reserved() const;
  // The addresses of a stack id (innermost first); empty span for 0 or unknown ids.
  std::span<const uintptr_t> get(uint32_t id) const;
  size_t size() const;          // distinct stacks
  size_t memory_bytes() const;  // bytes held by the table
  void clear();                 // forked child: start empty (and without a mirror)
  // Bumped by clear(): ids kept elsewhere are good while it is the same.
  uint32_t generation() const { return generation_.load(std::memory_order_relaxed); }
  // Copies each stack interned from now on into *m (which must outlive the table's use of it);
  // null stops that. Call before the first intern.
  void set_mirror(StackMirror* m) { mirror_ = m; }

  // Bounds: intern() returns 0 once either is reached. Storage is reserved address space
  // (PROT_NONE, MAP_NORESERVE) committed in chunks as stacks arrive.
  static constexpr uint32_t kMaxStacks = 1u << 20;         // 1M distinct stacks
  static constexpr uint64_t kMaxFrames = uint64_t{64} << 20;  // 64M addresses in all
  static constexpr uint32_t kReserved = 4096;  // ids (and addresses) only intern_reserved() may use
  size_t frame_count() const;  // addresses stored, all stacks together

 private:
  struct Record;  // one stack: hash, first frame, length
  struct Slots;   // one open-addressing index: atomic (hash tag << 32 | id) words

  void init();
  void release();
  uint32_t intern_up_to(const uintptr_t* pcs, uint32_t n, bool into_reserve);
  uint32_t find(const Slots* s, uint64_t hash, const uintptr_t* pcs, uint32_t n) const;
  uint32_t insert_locked(uint64_t hash, const uintptr_t* pcs, uint32_t n, bool into_reserve);
  static bool commit(void* base, std::atomic<size_t>& committed, size_t need, size_t limit,
                     size_t chunk);

  uint32_t max_stacks_ = kMaxStacks;
  uint64_t max_frames_ = kMaxFrames;
  uintptr_t* frames_ = nullptr;  // reserved kMaxFrames addresses, never moves
  Record* records_ = nullptr;    // reserved kMaxStacks records, never moves
  std::atomic<uint32_t> generation_{0};
  std::atomic<Slots*> slots_{nullptr};  // current index; older ones kept until clear()
  std::atomic<uint32_t> count_{0};      // stacks published; ids are 1..count_
  std::atomic<uint64_t> frames_used_{0};
  std::atomic<size_t> index_bytes_{0};
  std::atomic<size_t> frames_committed_{0};   // bytes of frames_ made writable
  std::atomic<size_t> records_committed_{0};  // bytes of records_ made writable
  void mirror_locked(uint32_t id, const uintptr_t* pcs, uint32_t n);
  SpinLock insert_lock_;  // taken by inserts only; lookups take none
  StackMirror* mirror_ = nullptr;
};

}  // namespace memtrace::unwind
