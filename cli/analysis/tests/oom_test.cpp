// The state at a recorded out-of-memory, rebuilt backwards from the final segments, and the
// verdict; and the stack view that groups rows by the frames a report shows.
#include <catch2/catch.hpp>

#include "cli/analysis/grouping.hpp"
#include "cli/analysis/oom.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/analysis/tests/snapshot_maker.hpp"

using namespace memtrace::analysis;
using test::SnapshotMaker;
using memtrace::reader::Action;
using memtrace::reader::BlockState;

namespace {
constexpr uint64_t MiB = 1 << 20;
}

TEST_CASE("the state at an oom is the final state with the later entries undone") {
  SnapshotMaker m;
  const uint64_t A = 0x10000000, B = 0x20000000;
  // Segment A existed before the history (its segment_alloc was dropped); B is made after the oom.
  m.entry(0, Action::Alloc, A, 8 * MiB);
  m.entry(0, Action::Alloc, A + 8 * MiB, 8 * MiB);
  m.entry(0, Action::FreeRequested, A, 8 * MiB);
  m.entry(0, Action::FreeCompleted, A, 8 * MiB);
  auto& oom = m.entry(0, Action::Oom, 0, 12 * MiB, 0, m.stack({"grow@model.py:3"}));
  oom.set_device_free(2 * MiB);
  m.entry(0, Action::SegmentAlloc, B, 16 * MiB);
  m.entry(0, Action::Alloc, B, 12 * MiB);
  m.entry(0, Action::FreeRequested, A + 8 * MiB, 8 * MiB);
  m.entry(0, Action::FreeCompleted, A + 8 * MiB, 8 * MiB);
  m.segment(0, A, {{16 * MiB, 0, BlockState::Inactive}, {4 * MiB, 4 * MiB, BlockState::ActiveAllocated}});
  m.segment(0, B, {{12 * MiB, 12 * MiB, BlockState::ActiveAllocated}, {4 * MiB, 0, BlockState::Inactive}});

  std::vector<OomReport> r = find_ooms(m.s, 0);
  REQUIRE(r.size() == 1);
  CHECK(r[0].entry == 4);
  CHECK(r[0].requested == 12 * MiB);
  REQUIRE(r[0].device_free);
  CHECK(*r[0].device_free == 2 * MiB);
  // Then: segment A only (20 MiB), holding the block at A+8 MiB and the one at A+16 MiB.
  CHECK(r[0].reserved == 20 * MiB);
  CHECK(r[0].allocated == 12 * MiB);
  CHECK(r[0].free_in_segments == 8 * MiB);
  CHECK(r[0].largest_free == 8 * MiB);
  CHECK_FALSE(r[0].fits_without_fragmentation());
  CHECK(find_ooms(m.s, 1).empty());
}

TEST_CASE("an oom that free space in pieces would have held is fragmentation") {
  SnapshotMaker m;
  const uint64_t A = 0x10000000;
  m.entry(0, Action::SegmentAlloc, A, 32 * MiB);
  m.entry(0, Action::Alloc, A, 8 * MiB);
  m.entry(0, Action::Alloc, A + 16 * MiB, 8 * MiB);
  m.entry(0, Action::Oom, 0, 12 * MiB);
  m.segment(0, A, {{8 * MiB, 8 * MiB, BlockState::ActiveAllocated}, {8 * MiB, 0, BlockState::Inactive},
                   {8 * MiB, 8 * MiB, BlockState::ActiveAllocated}, {8 * MiB, 0, BlockState::Inactive}});
  std::vector<OomReport> r = find_ooms(m.s, 0);
  REQUIRE(r.size() == 1);
  CHECK(r[0].free_in_segments == 16 * MiB);
  CHECK(r[0].largest_free == 8 * MiB);
  CHECK(r[0].fits_without_fragmentation());
  CHECK_FALSE(r[0].device_free);
}

TEST_CASE("text rows group stacks that differ only in folded frames; --frames all keeps them apart") {
  SnapshotMaker m;
  auto s1 = m.stack({"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)@??:0",
                     "forward@/home/me/model.py:30", "_PyEval_EvalFrameDefault@??:0"});
  auto s2 = m.stack({"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)@??:0",
                     "forward@/home/me/model.py:30", "PyObject_Call@??:0"});
  std::vector<LiveAlloc> allocs = {{0x1000, 100, s1, 0}, {0x2000, 50, s2, 0}};
  StackView shortv(m.s, FrameMode::kShort), all(m.s, FrameMode::kAll);
  auto g = group_allocs(m.s, allocs, GroupBy::kStack, &shortv);
  REQUIRE(g.size() == 1);
  CHECK(g[0].bytes == 150);
  CHECK(shortv.line(g[0].stack_id, 0) == "forward (model.py:30)");
  CHECK(group_allocs(m.s, allocs, GroupBy::kStack, &all).size() == 2);
  CHECK(group_allocs(m.s, allocs, GroupBy::kStack).size() == 2);  // JSON: the whole stack
}
