// Snapshots written by memtrace's own builder (output/snapshot_builder.cpp) read back: producer,
// allocator_settings['memtrace'], entries, segments, and stacks that differ only inside memtrace
// (same frames) sharing one StackId.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "../../../output/tests/fake_source.hpp"
#include "cli/reader/snapshot.hpp"
#include "core/records.hpp"
#include "format/pickle_writer.hpp"
#include "output/snapshot_builder.hpp"

namespace r = memtrace::reader;

namespace {

constexpr uint64_t kT0 = 1767225600000000;

memtrace::TraceEntry entry(memtrace::Action a, uint64_t addr, uint64_t size, uint32_t stack, int16_t dev,
                           uint64_t t) {
  memtrace::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.stack_id = stack;
  e.device = dev;
  e.time_us = t;
  return e;
}

std::string frame_names(const r::Snapshot& s, r::StackId id) {
  std::string out;
  for (r::FrameId f : s.stacks[id]) out += (out.empty() ? "" : "<") + std::string(s.str(s.frames[f].name));
  return out;
}

}  // namespace

TEST_CASE("memtrace's own snapshot reads back") {
  using memtrace::Action;
  memtrace::output::test::FakeFrameSource src;
  src.set(1, {{"train.py", "forward", 42}, {"train.py", "<module>", 7}}, "torch");
  src.set(2, {{"nccl/enqueue.cc", "ncclAllReduce", 10}, {"train.py", "<module>", 7}}, "nccl");
  src.set(3, {{"train.py", "forward", 42}, {"train.py", "<module>", 7}}, "torch");  // same frames as 1

  memtrace::StateCopy st;
  uint64_t a = 0x7f0000000000, b = 0x7f1000000000;
  st.trace.push_back(entry(Action::SegmentAlloc, a, 1 << 20, 1, 0, kT0 + 1));
  st.trace.push_back(entry(Action::Alloc, a, 1000000, 1, 0, kT0 + 1));
  st.trace.push_back(entry(Action::SegmentAlloc, b, 4096, 2, 1, kT0 + 2));
  st.trace.push_back(entry(Action::Alloc, b, 4000, 2, 1, kT0 + 2));
  st.trace.push_back(entry(Action::SegmentAlloc, a + (2 << 20), 512, 3, 0, kT0 + 3));
  st.trace.push_back(entry(Action::Alloc, a + (2 << 20), 500, 3, 0, kT0 + 3));
  memtrace::TraceEntry oom = entry(Action::Oom, 0, 1ull << 40, 1, 0, kT0 + 4);
  oom.device_free = 12345;
  st.trace.push_back(oom);
  auto live = [](uint64_t addr, uint64_t size, uint64_t req, uint32_t stack, int16_t dev) {
    memtrace::AllocRecord rec;
    rec.addr = addr;
    rec.size = size;
    rec.requested = req;
    rec.stack_id = stack;
    rec.device = dev;
    return rec;
  };
  st.live = {live(a, 1 << 20, 1000000, 1, 0), live(a + (2 << 20), 512, 500, 3, 0), live(b, 4096, 4000, 2, 1)};
  st.device_count = 2;
  st.total_entries = 20;
  st.dropped_entries = 13;
  st.ring_capacity = 7;
  st.time_us = kT0 + 10;

  memtrace::format::PickleWriter w;
  memtrace::output::BuildOptions o;
  o.meta.pid = 4242;
  o.meta.exe = "/usr/bin/python3";
  o.meta.host = "node1";
  o.meta.rank = "3";
  o.meta.reason = "exit";
  memtrace::output::build_snapshot(st, src, o, w);

  r::LoadResult res = r::load_snapshot_bytes(w.bytes(), "memtrace.pickle");
  REQUIRE_FALSE(res.error.has_value());
  const r::Snapshot& s = *res.snapshot;
  CHECK(s.producer == r::Producer::kMemtrace);
  CHECK(s.memtrace.pid == 4242);
  CHECK(s.memtrace.rank == "3");
  CHECK(s.memtrace.host == "node1");
  CHECK(s.memtrace.exe == "/usr/bin/python3");
  CHECK(s.memtrace.reason == "exit");
  CHECK(s.memtrace.entries_dropped == 13);
  CHECK_FALSE(s.memtrace.allocator_caching);  // the default: passthrough

  // Written with memtrace's caching allocator in charge.
  memtrace::format::PickleWriter w2;
  o.allocator.mode = "caching";
  o.allocator.memtrace = {{"policy", std::string("pytorch")}};
  memtrace::output::build_snapshot(st, src, o, w2);
  r::LoadResult cached = r::load_snapshot_bytes(w2.bytes(), "cached.pickle");
  REQUIRE_FALSE(cached.error.has_value());
  CHECK(cached.snapshot->memtrace.allocator_caching);

  REQUIRE(s.device_traces.size() == 2);
  const auto& d0 = s.device_traces[0];
  // Device 0: its 5 entries (no 'unknown' category among them, so the writer appends a marker).
  REQUIRE(d0.size() >= 5);
  CHECK(d0[0].action == r::Action::SegmentAlloc);
  CHECK(d0[0].addr == a);
  CHECK(d0[0].size == (1 << 20));
  CHECK(d0[0].time_us == static_cast<int64_t>(kT0 + 1));
  CHECK(d0[1].action == r::Action::Alloc);
  CHECK(d0[1].size == 1000000);
  CHECK(s.str(d0[1].category) == "torch");
  CHECK(frame_names(s, d0[1].stack) == "forward<<module>");
  // Stack ids 1 and 3 have the same frames: one StackId.
  CHECK(d0[3].stack == d0[1].stack);
  CHECK(d0[4].action == r::Action::Oom);
  REQUIRE(d0[4].device_free().has_value());
  CHECK(*d0[4].device_free() == 12345);
  CHECK(d0[4].size == (1ull << 40));
  const auto& d1 = s.device_traces[1];
  REQUIRE(d1.size() >= 2);
  CHECK(s.str(d1[1].category) == "nccl");
  CHECK(frame_names(s, d1[1].stack) == "ncclAllReduce<<module>");

  REQUIRE(s.segments.size() == 3);
  CHECK(s.segments[0].address == a);
  CHECK(s.segments[0].blocks.size() == 1);
  CHECK(s.segments[0].blocks[0].address == a);
  CHECK(s.segments[0].blocks[0].requested_size == 1000000);
  CHECK(s.segments[0].blocks[0].state == r::BlockState::ActiveAllocated);
  CHECK(s.segments[0].blocks[0].stack == d0[1].stack);
  CHECK(s.segments[2].device == 1);
  CHECK(s.device_count() == 2);
  CHECK(s.stacks.size() == 3);  // empty + two distinct
}

TEST_CASE("a memtrace snapshot without frames reads back with empty stacks") {
  memtrace::output::NullFrameSource src;
  memtrace::StateCopy st;
  memtrace::TraceEntry e;
  e.action = memtrace::Action::Alloc;
  e.addr = 0x7f0000000000;
  e.size = 64;
  e.stack_id = 9;
  st.trace.push_back(e);
  st.device_count = 1;
  memtrace::format::PickleWriter w;
  memtrace::output::BuildOptions o;
  o.include_frames = false;
  memtrace::output::build_snapshot(st, src, o, w);
  r::LoadResult res = r::load_snapshot_bytes(w.bytes(), "noframes.pickle");
  REQUIRE_FALSE(res.error.has_value());
  const r::Snapshot& s = *res.snapshot;
  CHECK(s.producer == r::Producer::kMemtrace);
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE_FALSE(s.device_traces[0].empty());
  CHECK(s.device_traces[0][0].stack == 0);
  CHECK(s.str(s.device_traces[0][0].category) == "unknown");
  CHECK(s.stacks.size() == 1);
}

TEST_CASE("a file read through the mapping (pages handed back as it goes) equals the bytes read in memory") {
  // 200,000 entries: about 12 MB, past the 8 MB step at which load_snapshot gives mapped pages back.
  memtrace::output::test::FakeFrameSource src;
  for (uint32_t s = 1; s <= 50; ++s) src.set(s, {{"f" + std::to_string(s) + ".py", "g", static_cast<int>(s)}}, "o");
  memtrace::StateCopy st;
  for (uint32_t i = 0; i < 200000; ++i) {
    memtrace::TraceEntry e;
    e.action = i % 2 ? memtrace::Action::FreeRequested : memtrace::Action::Alloc;
    e.addr = 0x7f0000000000 + (i / 2) * 4096;
    e.size = 1000 + i;
    e.stack_id = 1 + i % 50;
    e.device = static_cast<int16_t>(i % 3 == 0);
    e.time_us = static_cast<uint64_t>(kT0) + i;
    st.trace.push_back(e);
  }
  st.device_count = 2;
  memtrace::format::PickleWriter w;
  memtrace::output::BuildOptions o;
  memtrace::output::build_snapshot(st, src, o, w);
  REQUIRE(w.size() > (size_t{10} << 20));
  char tmpl[] = "/tmp/memtrace_reader_map.XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, w.bytes().data(), w.size()) == static_cast<ssize_t>(w.size()));
  close(fd);
  r::LoadResult mapped = r::load_snapshot(tmpl);
  unlink(tmpl);
  r::LoadResult mem = r::load_snapshot_bytes(w.bytes(), "mem.pickle");
  REQUIRE_FALSE(mapped.error.has_value());
  REQUIRE_FALSE(mem.error.has_value());
  const r::Snapshot& a = *mapped.snapshot;
  const r::Snapshot& b = *mem.snapshot;
  REQUIRE(a.device_traces.size() == b.device_traces.size());
  size_t total = 0;
  for (size_t d = 0; d < a.device_traces.size(); ++d) {
    REQUIRE(a.device_traces[d].size() == b.device_traces[d].size());
    for (size_t i = 0; i < a.device_traces[d].size(); ++i) {
      const r::TraceEntry& x = a.device_traces[d][i];
      const r::TraceEntry& y = b.device_traces[d][i];
      if (x.addr != y.addr || x.size != y.size || x.time_us != y.time_us || x.action != y.action ||
          frame_names(a, x.stack) != frame_names(b, y.stack))
        FAIL("device " << d << " entry " << i << " differs");
    }
    total += a.device_traces[d].size();
  }
  CHECK(total >= 200000);
  CHECK(a.strings == b.strings);
}

TEST_CASE("sizes beyond what the viewer's numbers hold: capped at 2^53 - 1 in the file, exact when memtrace reads it") {
  using memtrace::Action;
  memtrace::output::test::FakeFrameSource src;
  src.set(1, {{"app.c", "ask", 3}}, "app");
  memtrace::StateCopy st;
  memtrace::TraceEntry huge = entry(Action::Oom, 0, UINT64_MAX, 1, 0, kT0 + 1);
  huge.device_free = uint64_t{1} << 62;
  memtrace::TraceEntry big = entry(Action::Oom, 0, uint64_t{1} << 62, 1, 0, kT0 + 2);
  big.device_free = 1000;
  st.trace = {huge, big};
  st.device_count = 1;
  st.time_us = kT0 + 3;
  memtrace::format::PickleWriter w;
  memtrace::output::BuildOptions o;
  memtrace::output::build_snapshot(st, src, o, w);

  // What the viewer sees: no integer beyond 2^53 anywhere in the file (LONG1/LONG4 carry more
  // than 7 bytes only for such values; the builder must never need them).
  const std::string bytes(w.bytes());
  for (size_t i = 0; i + 1 < bytes.size(); ++i)
    if (static_cast<unsigned char>(bytes[i]) == 0x8a) CHECK(static_cast<unsigned char>(bytes[i + 1]) <= 7);
  CHECK(bytes.find("9223372036854775807") == std::string::npos);
  CHECK(bytes.find("18446744073709551615") != std::string::npos);  // kept, as a decimal string

  r::LoadResult res = r::load_snapshot_bytes(bytes, "huge.pickle");
  REQUIRE_FALSE(res.error.has_value());
  const auto& d0 = res.snapshot->device_traces.at(0);
  REQUIRE(d0.size() >= 2);
  CHECK(d0[0].size == UINT64_MAX);
  CHECK(d0[0].device_free() == (uint64_t{1} << 62));
  CHECK(d0[1].size == (uint64_t{1} << 62));
  CHECK(d0[1].device_free() == 1000u);
}
