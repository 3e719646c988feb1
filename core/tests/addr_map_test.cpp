#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "core/addr_map.hpp"

using memtrace::AddrMap;

TEST_CASE("addr map agrees with std::map under random insert/take") {
  AddrMap<uint64_t> m;
  std::map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    // Keys clustered like device addresses: same prefix, 512-byte aligned.
    uint64_t key = 0x7f0000000000ull + (rng() % 4096) * 512;
    if (rng() % 3 == 0) {
      uint64_t a = 0;
      bool had = m.take(key, &a);
      auto it = ref.find(key);
      REQUIRE(had == (it != ref.end()));
      if (had) {
        REQUIRE(a == it->second);
        ref.erase(it);
      }
    } else {
      m.put(key, i);
      ref[key] = i;
    }
    REQUIRE(m.size() == ref.size());
  }
  for (auto& [k, v] : ref) {
    uint64_t* p = m.find(k);
    REQUIRE(p);
    REQUIRE(*p == v);
  }
  size_t seen = 0;
  m.for_each([&](uint64_t k, const uint64_t& v) {
    ++seen;
    REQUIRE(ref.at(k) == v);
  });
  CHECK(seen == ref.size());
  m.clear();
  CHECK(m.size() == 0);
  CHECK(m.find(ref.begin()->first) == nullptr);
}

TEST_CASE("exchange inserts or replaces and reports the old value") {
  AddrMap<uint64_t> m;
  uint64_t old = 0;
  CHECK_FALSE(m.exchange(0x7000000001000, 1, &old));
  CHECK(m.exchange(0x7000000001000, 2, &old));
  CHECK(old == 1);
  CHECK(*m.find(0x7000000001000) == 2);
  CHECK(m.size() == 1);
  for (uint64_t k = 1; k < 1000; ++k) m.exchange(k * 512, k, &old);  // grows through several sizes
  CHECK(m.size() == 1000);  // 999 new keys + the first
  CHECK(*m.find(999 * 512) == 999);
}

TEST_CASE("reserve makes room once and keeps what is there") {
  AddrMap<uint64_t> m;
  for (uint64_t k = 1; k <= 100; ++k) m.put(k * 4096, k);
  REQUIRE(m.reserve(10000));
  const size_t bytes = m.memory_bytes();
  CHECK(bytes >= 10000 * 4 / 3 * 16);
  for (uint64_t k = 1; k <= 100; ++k) REQUIRE(*m.find(k * 4096) == k);
  for (uint64_t k = 101; k <= 10000; ++k) m.put(k * 4096, k);
  CHECK(m.memory_bytes() == bytes);  // no growth up to what was reserved
  CHECK(m.size() == 10000);
  REQUIRE(m.reserve(10));  // never shrinks
  CHECK(m.memory_bytes() == bytes);
  for (uint64_t k = 1; k <= 10000; ++k) REQUIRE(*m.find(k * 4096) == k);
}
