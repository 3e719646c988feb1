// Snapshots in PyTorch's shape written by Python's pickle (make_pytorch_pickles.py) at protocols
// 0-5: every protocol decodes to the same Snapshot, shared and unshared frames intern alike.
#include <catch2/catch.hpp>
#include <string>

#include "cli/reader/snapshot.hpp"
#include "test_util.hpp"

using namespace memtrace::reader;
namespace t = memtrace::reader::test;

namespace {

constexpr uint64_t kBase = 0x7F3A00000000;
constexpr uint64_t kBase1 = 0x7F3B00000000;
constexpr int64_t kT0 = 1767225600000000;
constexpr uint64_t kMiB = 1 << 20;

std::string frame_text(const Snapshot& s, FrameId f) {
  const Frame& fr = s.frames[f];
  return std::string(s.str(fr.filename)) + ":" + std::to_string(fr.line) + ":" + std::string(s.str(fr.name));
}

std::string stack_text(const Snapshot& s, StackId id) {
  std::string out;
  for (FrameId f : s.stacks[id]) out += (out.empty() ? "" : " < ") + frame_text(s, f);
  return out;
}

const std::string kStack = "train.py:42:forward < train.py:7:<module>";
const std::string kOther = "model.py:300:layer < train.py:42:forward < train.py:7:<module>";

std::string setting(const Snapshot& s, const std::string& key) {
  for (auto& [k, v] : s.settings)
    if (k == key) return v;
  return "<absent>";
}

void check_full_snapshot(const Snapshot& s) {
  CHECK(s.producer == Producer::kPyTorch);
  CHECK(s.memtrace.pid == -1);
  REQUIRE(s.segments.size() == 2);
  const Segment& a = s.segments[0];
  CHECK(a.device == 0);
  CHECK(a.address == kBase);
  CHECK(a.total_size == 2 * kMiB);
  CHECK(a.stream == 0);
  CHECK(s.str(a.segment_type) == "small");
  CHECK_FALSE(a.is_expandable);
  CHECK(stack_text(s, a.stack) == kStack);
  REQUIRE(a.blocks.size() == 3);
  CHECK(a.blocks[0].address == kBase);
  CHECK(a.blocks[0].size == 512);
  CHECK(a.blocks[0].requested_size == 400);
  CHECK(a.blocks[0].state == BlockState::ActiveAllocated);
  CHECK(a.blocks[0].stack == a.stack);
  CHECK(a.blocks[1].address == kBase + 512);
  CHECK(a.blocks[1].state == BlockState::ActivePendingFree);
  CHECK(stack_text(s, a.blocks[1].stack) == kOther);
  CHECK(a.blocks[2].address == kBase + 1536);
  CHECK(a.blocks[2].size == 2 * kMiB - 1536);
  CHECK(a.blocks[2].state == BlockState::Inactive);
  CHECK(a.blocks[2].stack == 0);

  const Segment& b = s.segments[1];
  CHECK(b.device == 1);
  CHECK(b.address == kBase1);
  CHECK(b.stream == UINT64_MAX);  // 2**64 - 1: a 9-byte LONG1
  CHECK(b.is_expandable);
  CHECK(s.str(b.segment_type) == "large");
  REQUIRE(b.blocks.size() == 1);
  CHECK(b.blocks[0].requested_size == 20 * kMiB - 5);

  REQUIRE(s.device_traces.size() == 2);
  CHECK(s.device_count() == 2);
  const auto& d0 = s.device_traces[0];
  REQUIRE(d0.size() == 6);
  CHECK(d0[0].action == Action::SegmentAlloc);
  CHECK(d0[0].addr == kBase);
  CHECK(d0[0].size == 2 * kMiB);
  CHECK(d0[0].time_us == kT0);
  CHECK(stack_text(s, d0[0].stack) == kStack);
  CHECK(d0[1].action == Action::Alloc);
  CHECK(d0[1].size == 400);
  CHECK(d0[1].category == 0);
  CHECK(d0[2].addr == kBase + 512);
  CHECK(s.str(d0[2].category) == "weights");
  CHECK(stack_text(s, d0[2].stack) == kOther);
  CHECK(d0[3].action == Action::FreeRequested);
  CHECK(d0[3].stack == d0[2].stack);
  CHECK(d0[4].action == Action::Oom);
  CHECK(d0[4].addr == (uint64_t{1} << 33) + 3);  // an oom has no address: its field holds device_free
  CHECK(d0[4].size == (uint64_t{1} << 34));
  REQUIRE(d0[4].device_free().has_value());
  CHECK(*d0[4].device_free() == (uint64_t{1} << 33) + 3);
  CHECK(d0[4].stack == 0);
  CHECK(d0[5].action == Action::Other);
  CHECK(s.str(d0[5].action_str) == "annotate");
  CHECK_FALSE(d0[3].device_free().has_value());
  const auto& d1 = s.device_traces[1];
  REQUIRE(d1.size() == 2);
  CHECK(d1[0].action == Action::SegmentMap);
  CHECK(d1[1].size == 20 * kMiB - 5);
  CHECK(d1[1].time_us == kT0 + 70);

  // Two distinct non-empty stacks and three distinct frames, however the pickle shared them.
  CHECK(s.stacks.size() == 3);
  CHECK(s.frames.size() == 3);
  CHECK(s.stacks[0].empty());

  CHECK(setting(s, "max_split_size") == "-1");
  CHECK(setting(s, "garbage_collection_threshold") == "0.0");
  CHECK(setting(s, "expandable_segments") == "True");
  CHECK(setting(s, "PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True");
  CHECK(setting(s, "roundup_power2_divisions").rfind("{'1': 0, '2': 0,", 0) == 0);
}

}  // namespace

TEST_CASE("PyTorch-shaped snapshots decode identically at protocols 0 to 5") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  for (int p = 0; p <= 5; ++p) {
    INFO("protocol " << p);
    LoadResult r = load_snapshot(dir / ("pytorch_p" + std::to_string(p) + ".pickle"));
    REQUIRE_FALSE(r.error.has_value());
    REQUIRE(r.snapshot.has_value());
    check_full_snapshot(*r.snapshot);
  }
}

TEST_CASE("Unshared frame dicts and lists intern to the same frames and stacks") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  LoadResult r = load_snapshot(dir / "pytorch_unshared.pickle");
  REQUIRE_FALSE(r.error.has_value());
  check_full_snapshot(*r.snapshot);
}

TEST_CASE("Thousands of entries: APPENDS batches, memo indices past 255") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  LoadResult r = load_snapshot(dir / "batched.pickle");
  REQUIRE_FALSE(r.error.has_value());
  const Snapshot& s = *r.snapshot;
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE(s.device_traces[0].size() == 3000);
  CHECK(s.stacks.size() == 4);
  for (size_t i = 0; i < 3000; ++i) {
    const TraceEntry& e = s.device_traces[0][i];
    if (e.addr != kBase + 512 * i || e.size != i || e.time_us != kT0 + static_cast<int64_t>(i)) {
      FAIL("entry " << i << " differs");
    }
  }
  // Entries 0, 3, 6 ... share a stack; 0, 1, 2 do not.
  CHECK(s.device_traces[0][0].stack == s.device_traces[0][2997].stack);
  CHECK(s.device_traces[0][0].stack != s.device_traces[0][1].stack);
  CHECK(s.device_traces[0][1].stack != s.device_traces[0][2].stack);
}

TEST_CASE("Legacy shapes: a bare list of segments, blocks with history") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  LoadResult r = load_snapshot(dir / "legacy_list.pickle");
  REQUIRE_FALSE(r.error.has_value());
  CHECK(r.snapshot->segments.size() == 2);
  CHECK(r.snapshot->device_traces.empty());
  CHECK(r.snapshot->device_count() == 2);

  r = load_snapshot(dir / "legacy_history.pickle");
  REQUIRE_FALSE(r.error.has_value());
  const Snapshot& s = *r.snapshot;
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.segments[0].blocks.size() == 1);
  CHECK(s.segments[0].blocks[0].requested_size == 1000);
  CHECK(stack_text(s, s.segments[0].blocks[0].stack) == kStack);
}

TEST_CASE("load_snapshot and load_snapshot_bytes agree") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  std::string path = dir / "pytorch_p4.pickle";
  LoadResult r = load_snapshot_bytes(t::read_file(path), "x.pickle");
  REQUIRE_FALSE(r.error.has_value());
  check_full_snapshot(*r.snapshot);
  // Bytes after STOP are ignored, as Python and the viewer do (the HTML embedding pads with zeros).
  r = load_snapshot_bytes(t::read_file(path) + std::string(100, '\0'), "padded.pickle");
  REQUIRE_FALSE(r.error.has_value());
  check_full_snapshot(*r.snapshot);
}
