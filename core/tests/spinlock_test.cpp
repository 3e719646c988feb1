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
