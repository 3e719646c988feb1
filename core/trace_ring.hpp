// Bounded history: the newest `capacity` trace entries, oldest overwritten first.
// Storage is one anonymous mapping reserved up front, so the bound is known at start
// and pages cost RAM only once the program has produced that many events.
#pragma once
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
  // Not thread-safe: the recorder serialises pushes.
  void push(const TraceEntry& e) {
    if (capacity_ == 0) return;
    entries_[total_ % capacity_] = e;
    ++total_;
  }
  // Appends the kept entries, oldest first.
  void copy_to(std::vector<TraceEntry>* out) const;
  void clear() { total_ = 0; }

  size_t capacity() const { return capacity_; }
  uint64_t total() const { return total_; }
  uint64_t dropped() const { return total_ > capacity_ ? total_ - capacity_ : 0; }
  size_t reserved_bytes() const { return capacity_ * sizeof(TraceEntry); }

 private:
  TraceEntry* entries_ = nullptr;
  size_t capacity_ = 0;
  uint64_t total_ = 0;
};

}  // namespace memtrace
