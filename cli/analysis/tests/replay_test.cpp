#include "cli/analysis/replay.hpp"

#include <catch2/catch.hpp>

#include "cli/analysis/replay_plan.hpp"
#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;
using memtrace::reader::Producer;
namespace rp = memtrace::analysis::replay;

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kSeg = 0x7f0000000000;

// PyTorch's pairing of a block: free_requested now, free_completed once its streams are done.
void alloc_free(SnapshotMaker& m, uint64_t addr, uint64_t size) {
  m.entry(0, Action::Alloc, addr, size);
  m.entry(0, Action::FreeRequested, addr, size);
  m.entry(0, Action::FreeCompleted, addr, size);
}

}  // namespace

TEST_CASE("replay plan: a block is freed at its free_completed, not at its free_requested") {
  SnapshotMaker m;
  m.entry(0, Action::SegmentAlloc, kSeg, 2 * kMiB);
  m.entry(0, Action::Alloc, kSeg, 600 * kKiB);
  m.entry(0, Action::FreeRequested, kSeg, 600 * kKiB);
  m.entry(0, Action::Alloc, kSeg + 600 * kKiB, 600 * kKiB);
  m.entry(0, Action::FreeCompleted, kSeg, 600 * kKiB);
  m.segment(0, kSeg, {{600 * kKiB, 600 * kKiB, BlockState::Inactive},
                      {600 * kKiB, 600 * kKiB, BlockState::ActiveAllocated},
                      {848 * kKiB, 0, BlockState::Inactive}});

  rp::Plan p = rp::build_plan(m.s, 0);
  REQUIRE(p.ops.size() == 4);
  CHECK(p.ops[0].kind == rp::OpKind::Alloc);
  CHECK((p.ops[1].kind == rp::OpKind::Free && !p.ops[1].enabled));  // the free_requested: left off
  CHECK(p.ops[2].kind == rp::OpKind::Alloc);
  CHECK((p.ops[3].kind == rp::OpKind::Free && p.ops[3].enabled && p.ops[3].event == 4));
  CHECK((p.allocs == 2 && p.frees == 1 && p.skipped == 0));
  CHECK(p.events() == 3);
  CHECK(p.prealloc.empty());
  CHECK_FALSE(p.truncated);
  REQUIRE(p.segment_allocs.size() == 1);
  CHECK(p.segment_allocs[0] == std::make_pair(kSeg, 2 * kMiB));
}

TEST_CASE("replay plan: blocks alive before a cut history are pre-allocated in address order") {
  SnapshotMaker m;
  m.entry(0, Action::FreeRequested, kSeg + 4 * kMiB, 1 * kMiB);  // never allocated in the trace
  m.entry(0, Action::FreeCompleted, kSeg + 4 * kMiB, 1 * kMiB);
  m.entry(0, Action::FreeCompleted, kSeg + 4 * kMiB, 1 * kMiB);  // a second free of it: skipped
  m.segment(0, kSeg, {{2 * kMiB, 3 * kMiB / 2, BlockState::ActiveAllocated}});  // alive, no alloc

  rp::Plan p = rp::build_plan(m.s, 0);
  REQUIRE(p.prealloc.size() == 2);
  CHECK((p.prealloc[0].addr == kSeg && p.prealloc[0].size == 3 * kMiB / 2));  // the requested size
  CHECK((p.prealloc[1].addr == kSeg + 4 * kMiB && p.prealloc[1].size == 1 * kMiB));
  CHECK(p.skipped == 1);
  CHECK(p.truncated);

  // Replayed with room to spare: nothing fails, and a cut history is not compared.
  rp::Outcome o = rp::run(p, rp::given_configuration(""), rp::kUnlimited);
  CHECK_FALSE(o.first_oom);
  CHECK_FALSE(o.matches_recorded);
}

TEST_CASE("replay plan: a release is the program's empty_cache() unless an allocation with its stack follows") {
  SnapshotMaker m;
  auto call = m.stack({"empty_cache@memory.py:10"});
  auto step = m.stack({"forward@model.py:3"});
  m.entry(0, Action::SegmentAlloc, kSeg, 2 * kMiB, 0, step);
  alloc_free(m, kSeg, 600 * kKiB);
  m.entry(0, Action::SegmentFree, kSeg, 2 * kMiB, 0, call);  // empty_cache(): an alloc of another stack follows
  m.entry(0, Action::SegmentAlloc, kSeg, 2 * kMiB, 0, step);
  m.entry(0, Action::SegmentFree, kSeg, 2 * kMiB, 0, step);  // inside the allocation that follows
  m.entry(0, Action::SegmentAlloc, kSeg, 20 * kMiB, 0, step);

  rp::Plan p = rp::build_plan(m.s, 0);
  CHECK(p.empty_cache_calls == 1);
  CHECK(p.allocation_releases == 1);
  size_t empties = 0;
  for (const rp::Op& op : p.ops) empties += op.kind == rp::OpKind::EmptyCache;
  CHECK(empties == 1);

  // memtrace's allocator has no empty_cache() a program can call: no release is read as one.
  m.s.producer = Producer::kMemtrace;
  m.s.memtrace.allocator_caching = true;
  rp::Plan q = rp::build_plan(m.s, 0);
  CHECK((q.empty_cache_calls == 0 && q.allocation_releases == 0));
}

TEST_CASE("replay: the recorded settings make the recorded segment decisions again") {
  SnapshotMaker m;
  m.entry(0, Action::SegmentAlloc, kSeg, 2 * kMiB);
  alloc_free(m, kSeg, 600 * kKiB);
  m.segment(0, kSeg, {{2 * kMiB, 0, BlockState::Inactive}});

  rp::Plan p = rp::build_plan(m.s, 0);
  rp::Outcome o = rp::run(p, rp::given_configuration(""), rp::kUnlimited);
  CHECK(o.label == "\"\" (PyTorch's defaults)");
  CHECK(o.stats.peak_reserved == 2 * kMiB);
  CHECK(o.stats.peak_allocated == 600 * kKiB);
  CHECK(o.allocated_at_peak == 600 * kKiB);
  CHECK(o.segment_allocs == std::vector<uint64_t>{2 * kMiB});
  REQUIRE(o.matches_recorded);
  CHECK(*o.matches_recorded);
  CHECK(o.failed_requests == 0);

  // A device smaller than the segment the request needs: the request fails, named by its entry.
  rp::Outcome small = rp::run(p, rp::given_configuration(""), 1 * kMiB);
  REQUIRE(small.first_oom);
  CHECK(small.first_oom->event == 1);
  CHECK(small.first_oom->alloc_ordinal == 0);
  CHECK(small.first_oom->size == 600 * kKiB);
  CHECK_FALSE(small.first_oom->recorded);
  CHECK(small.failed_requests == 1);
  CHECK(small.stats.peak_reserved == 0);
}

TEST_CASE("replay: configurations and their labels") {
  SnapshotMaker m;
  m.s.settings = {{"PYTORCH_CUDA_ALLOC_CONF", "'max_split_size_mb:40'"}};
  CHECK(rp::recorded_conf(m.s) == "max_split_size_mb:40");
  rp::Plan p = rp::build_plan(m.s, 0);
  std::vector<rp::Configuration> c = rp::default_configurations(m.s, p);
  REQUIRE(c.size() == 3);
  CHECK((c[0].conf == "max_split_size_mb:40" && c[0].label == "as recorded: \"max_split_size_mb:40\""));
  CHECK((c[1].conf == "expandable_segments:True" && c[1].label == "expandable_segments:True"));
  CHECK((c[2].conf == "memtrace_policy:remap" && c[2].label == "memtrace_policy:remap (memtrace's own)"));

  // Recorded with expandable segments: no second run of them.
  m.s.settings = {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}};
  CHECK(rp::default_configurations(m.s, p).size() == 2);

  // memtrace without its caching allocator: every allocation went to the driver, so the first
  // comparison is PyTorch's defaults.
  m.s.settings.clear();
  m.s.producer = Producer::kMemtrace;
  m.s.memtrace.allocator_caching = false;
  rp::Plan q = rp::build_plan(m.s, 0);
  CHECK_FALSE(q.recorded_by_cache);
  c = rp::default_configurations(m.s, q);
  REQUIRE(c.size() == 3);
  CHECK((c[0].conf.empty() && c[0].label == "\"\" (PyTorch's defaults)"));

  CHECK(rp::given_configuration("garbage_collection_threshold:0.5").label == "garbage_collection_threshold:0.5");
}

TEST_CASE("replay: the device replayed by default is the first with entries") {
  SnapshotMaker m;
  CHECK(rp::default_device(m.s) == 0);
  m.entry(2, Action::Alloc, kSeg, 512);
  CHECK(rp::default_device(m.s) == 2);
  m.entry(0, Action::Alloc, kSeg, 512);
  CHECK(rp::default_device(m.s) == 0);
  rp::Plan p = rp::build_plan(m.s, 7);  // no such trace: nothing to replay
  CHECK((p.entries == 0 && p.ops.empty()));
}
