// The recorder writing into memory handed in (a state file's mapping, docs/state-file.md): the ring,
// its sequence number, the counters and a slot per live record must always say what the registry
// says, so that a reader of a dead process finds the live set there.
#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <vector>

#include "core/recorder.hpp"

using namespace memtrace;

namespace {

struct Memory {
  explicit Memory(uint64_t ring, uint64_t slots) : entries(ring), live(new LiveSlot[slots]()), counters(new UsageCounters()) {
    m.ring = entries.data();
    m.ring_capacity = ring;
    m.ring_total = &total;
    m.counters = counters.get();
    m.live = live.get();
    m.live_slots = slots;
    m.live_unrecorded = &unrecorded;
  }
  // Addresses of the slots a reader would keep.
  std::set<uint64_t> slot_addresses() const {
    std::set<uint64_t> out;
    for (uint64_t i = 0; i < m.live_slots; ++i)
      if (live[i].seq.load() % 2 == 0 && live[i].live) out.insert(live[i].rec.addr);
    return out;
  }
  std::vector<TraceEntry> entries;
  std::unique_ptr<LiveSlot[]> live;
  std::unique_ptr<UsageCounters> counters;
  std::atomic<uint64_t> total{0}, unrecorded{0};
  StateMemory m;
};

AllocRecord rec(uint64_t addr, uint64_t size) {
  AllocRecord r;
  r.addr = addr;
  r.size = size;
  r.requested = size;
  r.ctx = 1;
  return r;
}

std::set<uint64_t> registry(Recorder& r) {
  std::set<uint64_t> out;
  for (const AllocRecord& a : r.copy_state().live) out.insert(a.addr);
  return out;
}

}  // namespace

TEST_CASE("with state memory attached, the slots hold exactly the live records") {
  Memory mem(64, 32 * 64);
  Recorder r;
  r.configure(1000, 0);
  r.attach_state(mem.m);
  for (uint64_t i = 1; i <= 500; ++i) r.record_alloc(rec(i << 12, 512 * i));
  for (uint64_t i = 1; i <= 500; i += 3) {
    AllocRecord out;
    REQUIRE(r.release(i << 12, 0, 0, &out));
  }
  r.record_alloc(rec(2 << 12, 4096));  // an address thought live: the stale record is closed first
  CHECK(mem.slot_addresses() == registry(r));
  CHECK(mem.unrecorded.load() == 0);
  // The ring is the memory handed in, and its sequence number is the one handed in.
  CHECK(mem.total.load() == r.copy_state().total_entries);
  CHECK(mem.entries[(mem.total.load() - 1) % 64].addr == (2 << 12));
  UsageTotals u;
  r.usage(&u);
  CHECK(mem.counters->reserved[0].current == u.reserved[0].current);
  CHECK(mem.counters->reserved[0].peak == u.reserved[0].peak);
  r.purge_context(1, ~0u);
  CHECK(mem.slot_addresses().empty());
}

TEST_CASE("records that find no free slot are counted, and uncounted when freed") {
  Memory mem(16, 64);  // one slot per shard, 32 for cached blocks
  Recorder r;
  r.configure(100, 0);
  r.attach_state(mem.m);
  for (uint64_t i = 1; i <= 200; ++i) r.record_alloc(rec(i << 12, 512));
  const auto slots = mem.slot_addresses();
  CHECK(slots.size() <= 32);
  CHECK(slots.size() + mem.unrecorded.load() == 200);
  for (uint64_t i = 1; i <= 200; ++i) {
    AllocRecord out;
    r.release(i << 12, 0, 0, &out);
  }
  CHECK(mem.slot_addresses().empty());
  CHECK(mem.unrecorded.load() == 0);
}

TEST_CASE("detaching the state memory starts again in private memory") {
  Memory mem(16, 64);
  Recorder r;
  r.configure(100, 0);
  r.attach_state(mem.m);
  r.record_alloc(rec(1 << 12, 512));
  r.reset_after_fork();  // detaches: a forked child must not write its parent's file
  const uint64_t before = mem.total.load();
  r.record_alloc(rec(2 << 12, 512));
  CHECK(mem.total.load() == before);
  CHECK(mem.slot_addresses() == std::set<uint64_t>{1 << 12});
  StateCopy c = r.copy_state();
  REQUIRE(c.live.size() == 1);
  CHECK(c.live[0].addr == (2 << 12));
  CHECK(c.trace.size() == 2);
}

TEST_CASE("the caching allocator's blocks have half the slots, apart from the shards'") {
  Memory mem(256, 64);  // a slot per shard, and 32 for blocks
  Recorder r;
  r.configure(100, 0);
  r.attach_state(mem.m);
  r.record_alloc(rec(1 << 12, 512));  // a driver record: its shard's one slot
  std::set<uint64_t> blocks;
  for (uint64_t i = 0; i < 40; ++i) {
    AllocRecord b = rec((uint64_t{1} << 30) + (i << 12), 4096);
    b.kind = MemKind::Cached;
    b.cache = CacheRole::Block;
    r.cached_block_alloc(b);
    blocks.insert(b.addr);
  }
  std::set<uint64_t> in_slots = mem.slot_addresses();
  CHECK(in_slots.count(1 << 12) == 1);
  CHECK(in_slots.size() == 1 + 32);
  CHECK(mem.unrecorded.load() == 8);
  // A pending free rewrites the block's slot in place; a settled one gives it back.
  const uint64_t first = uint64_t{1} << 30;
  REQUIRE(r.cached_block_free_requested(first, 0));
  for (uint64_t i = 0; i < 64; ++i)
    if (mem.live[i].live && mem.live[i].rec.addr == first) CHECK((mem.live[i].rec.cache_flags & kCachePendingFree) != 0);
  for (uint64_t a : blocks) REQUIRE(r.cached_block_free_completed(a));
  CHECK(mem.slot_addresses() == std::set<uint64_t>{1 << 12});
  CHECK(mem.unrecorded.load() == 0);
  CHECK(r.is_live(1 << 12));
  CHECK_FALSE(r.is_live(first));
}
