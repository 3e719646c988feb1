#include <catch2/catch.hpp>

#include "core/sanitizer.hpp"
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

namespace {
int g_stop_calls = 0;
bool stop_at_once() { return ++g_stop_calls > 0; }
bool never_stop() { return false; }
}  // namespace

TEST_CASE("warming a ring writes no byte and leaves what was pushed as it was") {
  TraceRing r;
  REQUIRE(r.reset(200000));  // 12 MiB: many pages, several 1 MiB chunks
  for (uint64_t i = 1; i <= 1000; ++i) {
    TraceEntry e;
    e.addr = i;
    e.size = i * 3;
    r.push(e);
  }
  r.warm(size_t{256} << 20, &never_stop);
  for (uint64_t i = 1001; i <= 2000; ++i) {
    TraceEntry e;
    e.addr = i;
    e.size = i * 3;
    r.push(e);
  }
  std::vector<TraceEntry> out;
  r.copy_to(&out);
  REQUIRE(out.size() == 2000);
  for (size_t i = 0; i < out.size(); ++i) {
    CHECK(out[i].addr == i + 1);
    CHECK(out[i].size == (i + 1) * 3);
  }
}

TEST_CASE("warming asks whether to stop before each chunk, and a full ring needs none") {
  TraceRing r;
  REQUIRE(r.reset(200000));
  g_stop_calls = 0;
  r.warm(size_t{256} << 20, &stop_at_once);
#ifndef MEMTRACE_TSAN
  CHECK(g_stop_calls == 1);
#endif
  TraceRing small;
  REQUIRE(small.reset(4));
  TraceEntry e;
  for (int i = 0; i < 4; ++i) small.push(e);
  g_stop_calls = 0;
  small.warm(size_t{256} << 20, &stop_at_once);
  CHECK(g_stop_calls == 0);
}
