#include "core/trace_ring.hpp"

#include <sys/mman.h>

namespace memtrace {

TraceRing::~TraceRing() {
  if (entries_) munmap(entries_, reserved_bytes());
}

bool TraceRing::reset(size_t capacity) {
  if (entries_) munmap(entries_, reserved_bytes());
  entries_ = nullptr;
  capacity_ = 0;
  total_ = 0;
  if (capacity == 0) return true;
  void* p = mmap(nullptr, capacity * sizeof(TraceEntry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  entries_ = static_cast<TraceEntry*>(p);
  capacity_ = capacity;
  return true;
}

void TraceRing::copy_to(std::vector<TraceEntry>* out) const {
  if (capacity_ == 0 || total_ == 0) return;
  uint64_t kept = total_ < capacity_ ? total_ : capacity_;
  uint64_t first = total_ - kept;
  out->reserve(out->size() + kept);
  for (uint64_t i = first; i < total_; ++i) out->push_back(entries_[i % capacity_]);
}

}  // namespace memtrace
