#include <catch2/catch.hpp>

#include "core/trace_ring.hpp"

using namespace memtrace;

TEST_CASE("ring keeps the newest entries, oldest first") {
  TraceRing r;
  REQUIRE(r.reset(4));
  for (uint64_t i = 1; i <= 10; ++i) {
    TraceEntry e;
    e.addr = i;
    r.push(e);
  }
  std::vector<TraceEntry> out;
  r.copy_to(&out);
  REQUIRE(out.size() == 4);
  CHECK(out[0].addr == 7);
  CHECK(out[3].addr == 10);
  CHECK(r.dropped() == 6);
  CHECK(r.total() == 10);
}

TEST_CASE("ring below capacity drops nothing") {
  TraceRing r;
  REQUIRE(r.reset(100));
  TraceEntry e;
  r.push(e);
  r.push(e);
  std::vector<TraceEntry> out;
  r.copy_to(&out);
  CHECK(out.size() == 2);
  CHECK(r.dropped() == 0);
}

TEST_CASE("a zero-capacity ring records nothing") {
  TraceRing r;
  REQUIRE(r.reset(0));
  r.push(TraceEntry{});
  std::vector<TraceEntry> out;
  r.copy_to(&out);
  CHECK(out.empty());
}
