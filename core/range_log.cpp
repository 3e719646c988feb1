#include "core/range_log.hpp"

#include <sys/mman.h>

namespace memtrace {

RangeLog::~RangeLog() {
  if (slots_) munmap(slots_, capacity() * sizeof(Slot));
}

bool RangeLog::reset(size_t capacity) {
  if (slots_) munmap(slots_, this->capacity() * sizeof(Slot));
  slots_ = nullptr;
  mask_ = 0;
  next_.store(0, std::memory_order_relaxed);
  if (capacity == 0) return true;
  size_t n = 1;
  while (n < capacity) n <<= 1;
  // Reserved, paid for as it fills (like the trace ring).
  void* p = mmap(nullptr, n * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  slots_ = static_cast<Slot*>(p);
  mask_ = n - 1;
  return true;
}

void RangeLog::copy_to(std::vector<RangeEvent>* out, uint64_t* dropped) const {
  *dropped = 0;
  if (!slots_) return;
  const uint64_t end = next_.load(std::memory_order_acquire);
  const uint64_t cap = mask_ + 1;
  const uint64_t begin = end > cap ? end - cap : 0;
  *dropped = begin;
  out->reserve(out->size() + (end - begin));
  for (uint64_t t = begin; t < end; ++t) {
    const Slot& s = slots_[t & mask_];
    const uint64_t want = 2 * t + 2;
    if (s.seq.load(std::memory_order_acquire) != want) {
      ++*dropped;
      continue;
    }
    const uint64_t time = s.time.load(std::memory_order_relaxed);
    const uint64_t packed = s.packed.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != want) {
      ++*dropped;
      continue;
    }
    RangeEvent e;
    e.time_us = time;
    e.node = static_cast<uint32_t>(packed);
    e.device = static_cast<int16_t>(static_cast<uint16_t>(packed >> 32));
    e.stage = static_cast<RangeStage>((packed >> 48) & 0xff);
    out->push_back(e);
  }
}

}  // namespace memtrace
