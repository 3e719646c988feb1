// First-fit over a free list kept in address order: simple, deterministic (tests can predict
// reuse of freed space), and coalescing keeps fragmentation honest for OOM tests.
#include "internal.h"

namespace sim {

void RangeAllocator::reset(uint64_t size) {
  free_.clear();
  if (size != 0) free_.emplace(0, size);
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t align) {
  if (size == 0) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t len = it->second;
    const uint64_t aligned = (start + align - 1) / align * align;
    if (aligned - start > len || len - (aligned - start) < size) continue;
    const uint64_t tail = len - (aligned - start) - size;
    free_.erase(it);
    if (aligned > start) free_.emplace(start, aligned - start);
    if (tail != 0) free_.emplace(aligned + size, tail);
    return aligned;
  }
  return std::nullopt;
}

void RangeAllocator::release(uint64_t offset, uint64_t size) {
  if (size == 0) return;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_.emplace(offset, size);
}

uint64_t RangeAllocator::free_bytes() const {
  uint64_t total = 0;
  for (const auto& [off, len] : free_) total += len;
  return total;
}

}  // namespace sim
