#include <catch2/catch.hpp>

#include <algorithm>

#include "state/state_reconcile.hpp"

using memtrace::AllocRecord;
using memtrace::MemKind;
using memtrace::StateCopy;
using memtrace::TraceEntry;
using memtrace::format::Action;

namespace {

TraceEntry entry(Action a, uint64_t addr, uint64_t size, MemKind kind = MemKind::Device) {
  TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.kind = kind;
  return e;
}

void alloc(StateCopy* c, uint64_t addr, uint64_t seg, uint64_t req) {
  c->trace.push_back(entry(Action::SegmentAlloc, addr, seg));
  c->trace.push_back(entry(Action::Alloc, addr, req));
}

void free_group(StateCopy* c, uint64_t addr, uint64_t seg, uint64_t req) {
  c->trace.push_back(entry(Action::FreeRequested, addr, req));
  c->trace.push_back(entry(Action::FreeCompleted, addr, req));
  c->trace.push_back(entry(Action::SegmentFree, addr, seg));
}

AllocRecord slot(uint64_t addr, uint64_t size, MemKind kind = MemKind::Device) {
  AllocRecord r;
  r.addr = addr;
  r.size = r.requested = size;
  r.kind = kind;
  return r;
}

bool live(const StateCopy& c, uint64_t addr) {
  return std::any_of(c.live.begin(), c.live.end(), [&](const AllocRecord& r) { return r.addr == addr; });
}

}  // namespace

TEST_CASE("a trailing segment_alloc without its alloc is dropped, its slot kept when nothing contradicts it") {
  StateCopy c;
  alloc(&c, 0x1000, 0x200, 0x100);
  c.trace.push_back(entry(Action::SegmentAlloc, 0x5000, 0x200));
  c.live = {slot(0x1000, 0x200), slot(0x5000, 0x200)};
  memtrace::state::reconcile(&c);
  REQUIRE(c.trace.size() == 2);
  CHECK(live(c, 0x1000));
  CHECK(live(c, 0x5000));  // allocated by a call that had not returned: either answer is the program's
}

TEST_CASE("a free group cut short is dropped and its block stays live") {
  StateCopy c;
  alloc(&c, 0x1000, 0x200, 0x100);
  c.trace.push_back(entry(Action::FreeRequested, 0x1000, 0x100));
  c.trace.push_back(entry(Action::FreeCompleted, 0x1000, 0x100));
  c.live = {};  // the slot went first
  memtrace::state::reconcile(&c);
  REQUIRE(c.trace.size() == 2);
  REQUIRE(c.live.size() == 1);
  CHECK(c.live[0].addr == 0x1000);
  CHECK(c.live[0].size == 0x200);  // the segment's size, from its segment_alloc
  CHECK(c.live[0].requested == 0x100);
}

TEST_CASE("a slot taken after its address's last free in the history is dropped") {
  StateCopy c;
  alloc(&c, 0x1000, 0x200, 0x200);
  free_group(&c, 0x1000, 0x200, 0x200);
  c.live = {slot(0x1000, 0x200)};
  memtrace::state::reconcile(&c);
  CHECK(c.live.empty());
}

TEST_CASE("a slot the history does not name is dropped when its bytes were another segment's in that history") {
  // The driver gave 0x1100 (inside the segment freed at 0x1000) to a thread that wrote its slot and
  // was stopped before its events: the viewer's undo of 0x1000's segment_alloc would meet it.
  StateCopy c;
  alloc(&c, 0x1000, 0x400, 0x400);
  free_group(&c, 0x1000, 0x400, 0x400);
  alloc(&c, 0x9000, 0x100, 0x100);
  c.live = {slot(0x1100, 0x100), slot(0x9000, 0x100), slot(0x1400, 0x100), slot(0x0f00, 0x100)};
  memtrace::state::reconcile(&c);
  CHECK_FALSE(live(c, 0x1100));
  CHECK(live(c, 0x9000));
  CHECK(live(c, 0x1400));  // starts where the freed segment ended
  CHECK(live(c, 0x0f00));  // ends where it began
}

TEST_CASE("overlap is judged per device, and the caching allocator's records are left alone") {
  StateCopy c;
  alloc(&c, 0x1000, 0x400, 0x400);
  free_group(&c, 0x1000, 0x400, 0x400);
  AllocRecord other = slot(0x1100, 0x100);
  other.device = 1;
  AllocRecord cached = slot(0x1200, 0x100, MemKind::Cached);
  c.live = {other, cached};
  c.trace.push_back(entry(Action::SegmentAlloc, 0x1000, 0x400, MemKind::Cached));
  memtrace::state::reconcile(&c);
  CHECK(live(c, 0x1100));
  CHECK(live(c, 0x1200));
  CHECK(c.trace.back().kind == MemKind::Cached);  // a cached segment_alloc is complete by itself
}
