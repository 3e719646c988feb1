#pragma once
#include <time.h>

#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace memtrace {

// Unix time in microseconds, the unit PyTorch's trace entries use, so histories can be merged.
inline uint64_t now_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

// What events are stamped with on the hot path: the CPU's time-stamp counter where there is one
// (a few nanoseconds, against tens for a clock call on a virtual machine), else a monotonic
// clock in nanoseconds. Ticks become Unix microseconds only when a dump copies them out.
inline uint64_t now_ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
#endif
}

// Maps ticks to Unix microseconds by the line through two (ticks, Unix time) readings: one
// taken when recording starts, one when the dump converts. Ticks before the first reading (a
// record made with no time) map to the first reading.
class TickClock {
 public:
  void start() {
    tick0_ = now_ticks();
    us0_ = now_us();
  }
  // The first point as another process read it (a state file's header): the counter is the
  // machine's, so a process of the same boot can convert that process's ticks.
  void start_at(uint64_t ticks, uint64_t us) {
    tick0_ = ticks;
    us0_ = us;
  }
  // Reads the second point; conversions until the next call use it.
  void calibrate() {
    uint64_t t1 = now_ticks(), u1 = now_us();
    rate_ = (t1 > tick0_ + 1000 && u1 > us0_) ? static_cast<double>(u1 - us0_) / static_cast<double>(t1 - tick0_)
                                              : default_rate();
  }
  uint64_t to_us(uint64_t ticks) const {
    if (ticks <= tick0_) return us0_;
    return us0_ + static_cast<uint64_t>(static_cast<double>(ticks - tick0_) * rate_);
  }

 private:
  static double default_rate() {
#if defined(__x86_64__)
    return 1.0 / 2000.0;  // only for dumps within microseconds of the start: ~2 GHz
#else
    return 1.0 / 1000.0;
#endif
  }
  uint64_t tick0_ = 0;
  uint64_t us0_ = 0;
  double rate_ = default_rate();
};

}  // namespace memtrace
