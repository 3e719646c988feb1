// The range starts and ends a snapshot lists as external_annotations (docs/ranges.md): a bounded
// ring, oldest overwritten first, written by any thread without a lock (a range push must cost a
// few nanoseconds, not a lock every allocating thread also wants).
//
// How a reader tells a complete slot from one being written: every slot has a sequence word. A
// writer takes a ticket t (one fetch_add), stores 2t+1 in the slot's word, then the fields, then
// 2t+2. A reader that finds 2t+2 before and after copying the fields of ticket t has a whole
// entry; anything else (odd, another ticket) is an entry being written or already overwritten, and
// is left out. The fields are relaxed atomics, so the race is defined behaviour.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace memtrace {

enum class RangeStage : uint8_t { Start, End };

struct RangeEvent {
  uint64_t time_us = 0;  // ticks inside the log, Unix microseconds in a StateCopy
  uint32_t node = 0;     // the range (a RangeTable node): its name, and where it sat
  int16_t device = 0;
  RangeStage stage = RangeStage::Start;
};

class RangeLog {
 public:
  RangeLog() = default;
  RangeLog(const RangeLog&) = delete;
  RangeLog& operator=(const RangeLog&) = delete;
  ~RangeLog();

  // Capacity in events, rounded up to a power of two; 0 turns the log off. Drops what was kept.
  // Not safe against concurrent push(): call before recording starts.
  bool reset(size_t capacity);

  void push(uint64_t ticks, uint32_t node, int16_t device, RangeStage stage) {
    if (slots_ == nullptr) return;
    const uint64_t t = next_.fetch_add(1, std::memory_order_relaxed);
    Slot& s = slots_[t & mask_];
    s.seq.store(2 * t + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.time.store(ticks, std::memory_order_relaxed);
    s.packed.store(static_cast<uint64_t>(node) | static_cast<uint64_t>(static_cast<uint16_t>(device)) << 32 |
                       static_cast<uint64_t>(stage) << 48,
                   std::memory_order_relaxed);
    s.seq.store(2 * t + 2, std::memory_order_release);
  }

  // Appends the kept, complete events, oldest first; *dropped gets how many were overwritten
  // or could not be read whole.
  void copy_to(std::vector<RangeEvent>* out, uint64_t* dropped) const;
  size_t capacity() const { return slots_ ? mask_ + 1 : 0; }
  void clear() { next_.store(0, std::memory_order_relaxed); }  // a forked child: start empty
  size_t reserved_bytes() const { return capacity() * sizeof(Slot); }

 private:
  struct Slot {
    std::atomic<uint64_t> seq;
    std::atomic<uint64_t> time;
    std::atomic<uint64_t> packed;
  };
  Slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  std::atomic<uint64_t> next_{0};
};

}  // namespace memtrace
