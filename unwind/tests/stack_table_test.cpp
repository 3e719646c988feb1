#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>
#include <vector>

#include "unwind/stack_table.hpp"

using memtrace::unwind::StackTable;

namespace {

std::vector<uintptr_t> make_stack(uint32_t seed, uint32_t depth) {
  std::vector<uintptr_t> s(depth);
  for (uint32_t i = 0; i < depth; ++i) s[i] = 0x400000 + uint64_t{seed} * 4096 + i * 16 + 3;
  return s;
}

bool same(std::span<const uintptr_t> a, const std::vector<uintptr_t>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

TEST_CASE("stack table: equal stacks share an id, different ones do not", "[stack_table]") {
  StackTable t;
  auto a = make_stack(1, 8), b = make_stack(2, 8);
  auto a_prefix = std::vector<uintptr_t>(a.begin(), a.begin() + 7);
  uint32_t ia = t.intern(a.data(), 8);
  uint32_t ib = t.intern(b.data(), 8);
  uint32_t ip = t.intern(a_prefix.data(), 7);
  CHECK(ia > 0);
  CHECK(ib > 0);
  CHECK(ip > 0);
  CHECK(ia != ib);
  CHECK(ia != ip);
  CHECK(ib != ip);
  CHECK(t.intern(a.data(), 8) == ia);
  auto a_copy = a;  // same contents, other memory
  CHECK(t.intern(a_copy.data(), 8) == ia);
  CHECK(t.size() == 3);
  CHECK(t.frame_count() == 23);
  CHECK(same(t.get(ia), a));
  CHECK(same(t.get(ib), b));
  CHECK(same(t.get(ip), a_prefix));
}

TEST_CASE("stack table: empty and unknown", "[stack_table]") {
  StackTable t;
  uintptr_t x = 1;
  CHECK(t.intern(&x, 0) == 0);
  CHECK(t.intern(nullptr, 3) == 0);
  CHECK(t.get(0).empty());
  CHECK(t.get(1).empty());
  CHECK(t.get(12345).empty());
  CHECK(t.size() == 0);
  uint32_t id = t.intern(&x, 1);
  CHECK(id == 1);
  CHECK(t.get(2).empty());
}

TEST_CASE("stack table: many stacks, index growth, spans stay put", "[stack_table]") {
  StackTable t;
  const size_t before = t.memory_bytes();
  CHECK(before > 0);
  constexpr uint32_t kN = 50000;
  std::vector<uint32_t> ids(kN);
  auto first = make_stack(0, 20);
  ids[0] = t.intern(first.data(), 20);
  auto first_view = t.get(ids[0]);
  for (uint32_t i = 1; i < kN; ++i) {
    auto s = make_stack(i, 1 + i % 40);
    ids[i] = t.intern(s.data(), static_cast<uint32_t>(s.size()));
    REQUIRE(ids[i] == i + 1);
  }
  CHECK(t.size() == kN);
  CHECK(t.get(ids[0]).data() == first_view.data());
  for (uint32_t i = 0; i < kN; i += 7) {
    auto s = make_stack(i, i == 0 ? 20 : 1 + i % 40);
    REQUIRE(t.intern(s.data(), static_cast<uint32_t>(s.size())) == ids[i]);
    REQUIRE(same(t.get(ids[i]), s));
  }
  const size_t after = t.memory_bytes();
  CHECK(after > before);
  CHECK(after >= t.frame_count() * sizeof(uintptr_t));
  CHECK(after < 64u << 20);  // a few MiB, not the reservation
}

TEST_CASE("stack table: 8 threads agree on ids", "[stack_table]") {
  StackTable t;
  constexpr int kThreads = 8;
  constexpr uint32_t kShared = 4000;
  constexpr uint32_t kOwn = 1000;
  std::vector<std::vector<uint32_t>> shared_ids(kThreads, std::vector<uint32_t>(kShared));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::vector<uint32_t> order(kShared + kOwn);
      for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(th));
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int round = 0; round < 2; ++round) {
        for (uint32_t k : order) {
          if (k < kShared) {
            auto s = make_stack(k, 1 + k % 32);
            uint32_t id = t.intern(s.data(), static_cast<uint32_t>(s.size()));
            if (round == 0) shared_ids[th][k] = id;
            else if (shared_ids[th][k] != id) shared_ids[th][k] = 0;
          } else {
            auto s = make_stack(100000 + th * kOwn + (k - kShared), 5);
            uint32_t id = t.intern(s.data(), 5);
            if (id == 0 || !same(t.get(id), s)) shared_ids[th][0] = 0;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(t.size() == kShared + kThreads * kOwn);
  for (int th = 0; th < kThreads; ++th) {
    for (uint32_t k = 0; k < kShared; ++k) {
      REQUIRE(shared_ids[th][k] != 0);
      REQUIRE(shared_ids[th][k] == shared_ids[0][k]);
    }
  }
  for (uint32_t k = 0; k < kShared; ++k) REQUIRE(same(t.get(shared_ids[0][k]), make_stack(k, 1 + k % 32)));
}

TEST_CASE("stack table: a full table returns 0 and still finds known stacks; the reserve is kept for owners", "[stack_table]") {
  SECTION("stack limit") {
    StackTable t(12, 1000);
    REQUIRE(t.reserved() == 3);  // a quarter of a small table, at most kReserved
    for (uint32_t i = 0; i < 9; ++i) {
      auto s = make_stack(i, 3);
      REQUIRE(t.intern(s.data(), 3) == i + 1);
    }
    auto extra = make_stack(99, 3);
    CHECK(t.intern(extra.data(), 3) == 0);
    auto known = make_stack(4, 3);
    CHECK(t.intern(known.data(), 3) == 5);
    CHECK(t.size() == 9);
    // The reserve: one-address stacks that name who asked, once the rest is full.
    for (uint32_t i = 0; i < 3; ++i) {
      auto one = make_stack(200 + i, 1);
      CHECK(t.intern_reserved(one.data(), 1) == 10 + i);
    }
    auto more = make_stack(300, 1);
    CHECK(t.intern_reserved(more.data(), 1) == 0);
    auto again = make_stack(201, 1);
    CHECK(t.intern_reserved(again.data(), 1) == 11);  // known ones are still found
  }
  SECTION("frame limit") {
    StackTable t(100, 20);  // 5 of the 20 addresses kept for the reserve
    auto big = make_stack(1, 12), medium = make_stack(2, 10), small = make_stack(3, 3);
    CHECK(t.intern(big.data(), 12) == 1);
    CHECK(t.intern(medium.data(), 10) == 0);
    CHECK(t.intern(small.data(), 3) == 2);
    CHECK(t.frame_count() == 15);
    auto one = make_stack(4, 1);
    CHECK(t.intern(one.data(), 1) == 0);
    CHECK(t.intern_reserved(one.data(), 1) == 3);
  }
  SECTION("a lower limit set at start") {
    StackTable t;
    t.limit_stacks(64);
    CHECK(t.reserved() == 16);
    uint32_t last = 0;
    for (uint32_t i = 0; i < 100; ++i) {
      auto s = make_stack(i, 4);
      if (uint32_t id = t.intern(s.data(), 4)) last = id;
    }
    CHECK(last == 48);
  }
}

TEST_CASE("stack table: clear starts empty", "[stack_table]") {
  StackTable t;
  for (uint32_t i = 0; i < 20000; ++i) {
    auto s = make_stack(i, 16);
    REQUIRE(t.intern(s.data(), 16) == i + 1);
  }
  const size_t full = t.memory_bytes();
  const uint32_t generation = t.generation();
  t.clear();
  CHECK(t.generation() != generation);  // ids kept by callers (preload/capture.cpp) are stale now
  CHECK(t.size() == 0);
  CHECK(t.frame_count() == 0);
  CHECK(t.get(1).empty());
  CHECK(t.memory_bytes() < full);
  auto s = make_stack(777, 4);
  CHECK(t.intern(s.data(), 4) == 1);
  CHECK(same(t.get(1), s));
}

TEST_CASE("stack table: clear in a forked child leaves the parent alone", "[stack_table]") {
  StackTable t;
  auto a = make_stack(1, 6), b = make_stack(2, 6);
  REQUIRE(t.intern(a.data(), 6) == 1);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    t.clear();
    bool ok = t.size() == 0 && t.intern(b.data(), 6) == 1 && same(t.get(1), b);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(t.size() == 1);
  CHECK(same(t.get(1), a));
  CHECK(t.intern(b.data(), 6) == 2);
}
