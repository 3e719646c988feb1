// Two small locks for hot paths, both released with a plain store and needing no initialisation
// (safe before constructors run and after fork). SpinLock: critical sections are a few hash-table
// operations, so spinning beats parking a thread. SleepingLock, below: for sections that may
// sometimes last milliseconds.
#pragma once
#include <atomic>
#include <sched.h>
#include <time.h>

#include <cstdint>

#include "core/clock.hpp"

namespace memtrace {

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!flag_.exchange(true, std::memory_order_acquire)) return;
      int spins = 0;
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          sched_yield();
          spins = 0;
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }
  // After fork the child has one thread; whoever held the lock in the parent is gone.
  void reset() noexcept { flag_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> flag_{false};
};

class SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) noexcept : l_(l) { l_.lock(); }
  ~SpinGuard() { l_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& l_;
};

// A lock for sections that are short but now and then long (the caching allocator's: a cache hit,
// or a driver call for a new segment or the out-of-memory path's synchronize). Like SpinLock it is
// released with a plain store: a cache hit takes its allocator's lock twice a pair, and each
// locked instruction waits for every store before it (docs/caching-allocator.md, "What the hooks
// add"), so the release of a mutex, itself a locked exchange, was a cost of its own. With no
// release that wakes anyone, a waiter cannot sleep until woken: it spins briefly, then yields, then
// sleeps in growing steps up to a millisecond. A wait after a long hold so costs at most a
// millisecond more; nothing is ever lost.
// While spinning, a waiter looks at the lock at doubling intervals, up to a few microseconds. Two
// threads that both allocate all the time would otherwise hand the lock to each other on every
// call, and each hand-over moves every line the allocator and the recorder touch to the other
// core; this way whoever holds it gets it back for a run of calls first. The waiter still gets in
// (spinlock_test.cpp); docs/caching-allocator.md has the figures.
class SleepingLock {
 public:
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    wait_then_lock();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  // Times in now_ticks() units, not in pauses, since a pause lasts from a few to over a hundred
  // cycles by CPU. With a 2.4 GHz counter a waiter looks at least every 6.7 us and spins for
  // 27 us before it yields.
  static constexpr uint64_t kFirstGap = 64, kLongestGap = 16384, kSpinFor = 65536;
  static constexpr unsigned kYields = 64;
  static constexpr long kFirstSleepNs = 10'000, kLongestSleepNs = 1'000'000;

  void wait_then_lock() noexcept {
    const uint64_t start = now_ticks();
    uint64_t gap = kFirstGap;
    unsigned yields = 0;
    long sleep_ns = kFirstSleepNs;
    for (;;) {
      while (held_.load(std::memory_order_relaxed)) {
        const uint64_t now = now_ticks();
        if (now - start < kSpinFor) {
          while (now_ticks() - now < gap) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
          }
          if (gap < kLongestGap) gap *= 2;
        } else if (yields < kYields) {
          sched_yield();
          ++yields;
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


}  // namespace memtrace
