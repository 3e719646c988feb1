// The pointer a malloc that must succeed returned; the test case stops where it did not.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/caching/caching_allocator.hpp"

namespace memtrace::caching::testing {

inline uintptr_t must(MallocResult r) {
  REQUIRE(r.error == 0);
  REQUIRE(r.ptr != 0);
  return r.ptr;
}

}  // namespace memtrace::caching::testing
