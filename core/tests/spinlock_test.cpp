// SleepingLock (core/spinlock.hpp): one holder at a time, and a waiter that went to sleep behind a
// long hold still gets the lock once it is released, with no wake-up.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/spinlock.hpp"

using memtrace::SleepingLock;

TEST_CASE("a sleeping lock lets one thread in at a time", "[lock]") {
  SleepingLock lock;
  long counter = 0;  // plain: only the lock orders it (ThreadSanitizer checks this in CI)
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::lock_guard<SleepingLock> g(lock);
        if (inside.fetch_add(1) != 0) overlap = true;
        ++counter;
        inside.fetch_sub(1);
      }
    });
  for (auto& t : ts) t.join();
  CHECK_FALSE(overlap.load());
  CHECK(counter == 4 * 20000);
}

TEST_CASE("a waiter behind a long hold gets the lock when it is released", "[lock]") {
  SleepingLock lock;
  lock.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    std::lock_guard<SleepingLock> g(lock);
    got = true;
  });
  // Long enough for the waiter to have gone past spinning and yielding to sleeping.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(got.load());
  lock.unlock();
  waiter.join();  // returns only once the waiter took the lock
  CHECK(got.load());
}

// A waiter looks at the lock less and less often (core/spinlock.hpp), so a thread that takes it
// again right after each release could, in principle, keep it: the waiter must still get in.
TEST_CASE("a waiter gets the lock from a thread that takes it back at once", "[lock]") {
  SleepingLock lock;
  std::atomic<bool> stop{false};
  std::atomic<long> taken_by_hog{0};
  std::thread hog([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::lock_guard<SleepingLock> g(lock);
      taken_by_hog.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (taken_by_hog.load() == 0) std::this_thread::yield();  // the hog is in its loop
  std::atomic<int> got{0};
  std::thread waiter([&] {
    for (int i = 0; i < 200; ++i) {
      std::lock_guard<SleepingLock> g(lock);
      got.fetch_add(1);
    }
  });
  // Waits for the waiter's 200 acquisitions; the deadline only turns a starved waiter into a
  // failure instead of a hung test.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (got.load() < 200 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(got.load() == 200);
  stop = true;  // (after a failure, the waiter finishes once the hog is gone)
  hog.join();
  waiter.join();
}
