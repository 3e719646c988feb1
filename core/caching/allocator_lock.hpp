// The allocator's one lock. Its release is a plain store: a cache hit takes it twice a pair,
// and each locked instruction waits for every store before it (docs/caching-allocator.md, "What
// the hooks add"), so the release of a mutex, itself a locked exchange, was a cost of its own.
// With no release that wakes anyone, a waiter cannot sleep until woken: it spins briefly (most
// holds are a cache hit's hundred nanoseconds), then yields, then sleeps in growing steps up to
// a millisecond, since the holder may be in a driver call (a new segment, the out-of-memory
// path's synchronize) that takes that long. A wait after a long hold so costs at most a
// millisecond more; nothing is ever lost.
#pragma once
#include <sched.h>
#include <time.h>

#include <atomic>

namespace memtrace::caching {

class AllocatorLock {
 public:
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    wait_then_lock();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  static constexpr unsigned kSpins = 256, kYields = 64;
  static constexpr long kFirstSleepNs = 10'000, kLongestSleepNs = 1'000'000;

  void wait_then_lock() noexcept {
    unsigned waited = 0;
    long sleep_ns = kFirstSleepNs;
    for (;;) {
      while (held_.load(std::memory_order_relaxed)) {
        if (waited < kSpins) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
          ++waited;
        } else if (waited < kSpins + kYields) {
          sched_yield();
          ++waited;
        } else {
          timespec ts{0, sleep_ns};
          nanosleep(&ts, nullptr);
          if (sleep_ns < kLongestSleepNs) sleep_ns *= 2;
        }
      }
      if (!held_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  std::atomic<bool> held_{false};
};

}  // namespace memtrace::caching
