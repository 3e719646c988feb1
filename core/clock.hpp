#pragma once
#include <time.h>

#include <cstdint>

namespace memtrace {
// Unix time in microseconds, the unit PyTorch's trace entries use, so histories can be merged.
inline uint64_t now_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}
}  // namespace memtrace
