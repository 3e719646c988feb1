#include "core/trace_ring.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "core/sanitizer.hpp"

namespace memtrace {

TraceRing::~TraceRing() {
  if (entries_ && owned_) munmap(entries_, reserved_bytes());
}

void TraceRing::attach(TraceEntry* mem, size_t capacity, std::atomic<uint64_t>* total) {
  if (entries_ && owned_) munmap(entries_, reserved_bytes());
  entries_ = mem;
  capacity_ = mem ? capacity : 0;
  owned_ = false;
  total_ = total;
  total_->store(0);
}

bool TraceRing::reset(size_t capacity) {
  if (entries_ && owned_) munmap(entries_, reserved_bytes());
  entries_ = nullptr;
  capacity_ = 0;
  owned_ = true;
  total_ = &own_total_;
  total_->store(0);
  if (capacity == 0) return true;
  void* p = mmap(nullptr, capacity * sizeof(TraceEntry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  entries_ = static_cast<TraceEntry*>(p);
  capacity_ = capacity;
  return true;
}

void TraceRing::warm(size_t max_bytes, bool (*stop)()) const {
#ifndef MEMTRACE_TSAN
  if (capacity_ == 0) return;
  const uint64_t t = total();
  if (t >= capacity_) return;  // every page has been written once already
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* base = reinterpret_cast<char*>(entries_);
  const size_t end = std::min(reserved_bytes(), max_bytes);
  // From the page after the one being pushed to: pages before it are touched already.
  size_t at = (static_cast<size_t>(t) * sizeof(TraceEntry) / page + 1) * page;
  constexpr size_t kChunk = size_t{1} << 20;
  for (size_t chunk_end = at; at < end; at += page) {
    if (at >= chunk_end) {
      if (stop && stop()) return;
      chunk_end = at + kChunk;
    }
    // Adding zero with a locked instruction: the page is written (which is what the first touch
    // costs; MADV_POPULATE_WRITE does not spare it on every machine, see bench_first_fill) and a
    // push storing there at the same moment is never undone, the sum being its own value.
    __atomic_fetch_add(reinterpret_cast<uint64_t*>(base + at), 0, __ATOMIC_RELAXED);
  }
#else
  // ThreadSanitizer would rightly call the locked add racing with a push's plain store a race.
  static_cast<void>(max_bytes);
  static_cast<void>(stop);
#endif
}

void TraceRing::copy_to(std::vector<TraceEntry>* out) const {
  uint64_t t = total();
  copy_range(t > capacity_ ? t - capacity_ : 0, t, out);
}

void TraceRing::copy_range(uint64_t from, uint64_t to, std::vector<TraceEntry>* out) const {
  if (capacity_ == 0 || to <= from) return;
  out->reserve(out->size() + (to - from));
  // Copied without the ring lock, pushes may overwrite the oldest slots while they are read: a
  // race by design, the price of not stopping the program's threads for the largest part of a
  // snapshot. The caller reads total() afterwards and drops every entry a push may have reached
  // (Recorder::copy_state), so a torn entry is never kept. Hidden from ThreadSanitizer for that.
  MEMTRACE_TSAN_IGNORE_READS_BEGIN();
  // Two contiguous runs at most: memcpy-speed copies of the flat array.
  uint64_t i = from;
  while (i < to) {
    size_t slot = static_cast<size_t>(i % capacity_);
    size_t run = static_cast<size_t>(std::min<uint64_t>(to - i, capacity_ - slot));
    out->insert(out->end(), entries_ + slot, entries_ + slot + run);
    i += run;
  }
  MEMTRACE_TSAN_IGNORE_READS_END();
}

}  // namespace memtrace
