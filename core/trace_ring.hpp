// Bounded history: the newest `capacity` trace entries, oldest overwritten first.
// Storage is one anonymous mapping reserved up front, so the bound is known at start
// and pages cost RAM only once the program has produced that many events; or memory handed in
// (the state file's shared mapping, attach()), whose sequence number then lives there too.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/event.hpp"

namespace memtrace {

class TraceRing {
 public:
  TraceRing() = default;
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;
  ~TraceRing();

  // Sets the capacity (entries). Drops any history. Returns false if the mapping failed
  // (the ring then records nothing, and says so through capacity() == 0).
  bool reset(size_t capacity);
  // Uses `capacity` entries at `mem` and the sequence number at `total` (both owned by the
  // caller, who keeps them mapped), starting empty. The reader's rule is in docs/state-file.md.
  void attach(TraceEntry* mem, size_t capacity, std::atomic<uint64_t>* total);
  // Pushes are serialised by the caller (the recorder's ring lock).
  void push(const TraceEntry& e) {
    if (capacity_ == 0) return;
    uint64_t t = total_->load(std::memory_order_relaxed);
    const size_t i = t % capacity_;
    // The ring is written once round, so the line a push stores to is in no cache; asking for a
    // later push's line now hides that wait (docs/design.md, "History ring").
    size_t ahead = i + kPrefetchAhead;
    if (ahead >= capacity_) ahead -= capacity_;
    if (ahead < capacity_) __builtin_prefetch(&entries_[ahead], 1, 3);  // (not in a ring of under 8)
    entries_[i] = e;
    total_->store(t + 1, std::memory_order_release);
  }
  // Writes each page of the ring not reached by pushes yet, up to its first `max_bytes`, without
  // changing a byte, so that the first pass of pushes does not pay for first touches of memory
  // (bench_first_fill). From a thread of memtrace's own, while pushes run; stops early, leaving
  // the rest to be paid as it fills, when stop() says so. The ring must stay mapped meanwhile:
  // reset() and attach() are for before the first event and for a forked child only.
  void warm(size_t max_bytes, bool (*stop)()) const;
  // Appends the kept entries, oldest first.
  void copy_to(std::vector<TraceEntry>* out) const;
  // Appends entries [from, to) by sequence number, oldest first, without any lock: pushes may
  // run meanwhile and overwrite the oldest of them. The caller learns which ones survived
  // from total() read afterwards (see Recorder::copy_state).
  void copy_range(uint64_t from, uint64_t to, std::vector<TraceEntry>* out) const;
  void clear() { total_->store(0, std::memory_order_relaxed); }

  size_t capacity() const { return capacity_; }
  uint64_t total() const { return total_->load(std::memory_order_acquire); }
  uint64_t dropped() const {
    uint64_t t = total();
    return t > capacity_ ? t - capacity_ : 0;
  }
  size_t reserved_bytes() const { return capacity_ * sizeof(TraceEntry); }

 private:
  static constexpr size_t kPrefetchAhead = 8;
  TraceEntry* entries_ = nullptr;
  size_t capacity_ = 0;
  bool owned_ = true;  // entries_ is this ring's own mapping
  std::atomic<uint64_t> own_total_{0};
  std::atomic<uint64_t>* total_ = &own_total_;
};

}  // namespace memtrace
