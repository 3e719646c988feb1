// Speed and size of snapshot writing, with fake frames (no symbolization):
//   output_snapshot_bench [ENTRIES [LIVE [STACKS [DEPTH [DIR]]]]]
// defaults 500000 20000 2000 24 $TMPDIR-or-/tmp. The history mimics the recorder (alloc =
// segment_alloc + alloc, free = free_requested + free_completed + segment_free) on 2 devices.
// Prints the first build (fresh buffer), a second build into the grown buffer, and the atomic
// write (with fsync). Not a test: figures depend on the machine.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fake_source.hpp"
#include "output/atomic_file.hpp"
#include "output/snapshot_builder.hpp"

using namespace memtrace;
using namespace memtrace::output;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  size_t entries = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 500000;
  size_t nlive = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20000;
  uint32_t stacks = argc > 3 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)) : 2000;
  int depth = argc > 4 ? std::atoi(argv[4]) : 24;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = argc > 5 ? argv[5] : (tmp && *tmp ? tmp : "/tmp");
  if (stacks == 0) stacks = 1;

  test::FakeFrameSource src;
  for (uint32_t s = 1; s <= stacks; ++s) {
    std::vector<test::FakeFrameSource::F> f;
    for (int d = 0; d < depth; ++d)
      f.push_back({"/opt/lib/python3/site-packages/torch/lib/libtorch_cuda" + std::to_string((s * 7 + d) % 50) + ".so",
                   "at::native::kernel_launcher_" + std::to_string((s * 31 + d * 13) % 5000), d * 10 + 1});
    src.set(s, f, "lib" + std::to_string(s % 9));
  }

  StateCopy st;
  std::mt19937_64 rng(1);
  std::vector<AllocRecord> open;
  uint64_t t = 1767225600000000, next = 0x7f0000000000;
  auto push = [&](const AllocRecord& r, Action a, uint64_t size) {
    TraceEntry e;
    e.time_us = ++t;
    e.addr = r.addr;
    e.size = size;
    e.stream = r.stream;
    e.stack_id = r.stack_id;
    e.device = r.device;
    e.action = a;
    st.trace.push_back(e);
  };
  st.trace.reserve(entries + 3);
  while (st.trace.size() < entries) {
    if (open.size() < 64 || rng() % 2) {
      AllocRecord r;
      r.addr = next;
      next += 0x200000;
      r.size = 512 * (1 + rng() % 4096);
      r.requested = r.size - rng() % 512;
      r.stack_id = 1 + static_cast<uint32_t>(rng() % stacks);
      r.device = static_cast<int16_t>(rng() % 2);
      r.stream = rng() % 4 ? 0 : 0x5555000 + rng() % 3;
      push(r, Action::SegmentAlloc, r.size);
      push(r, Action::Alloc, r.requested);
      open.push_back(r);
    } else {
      size_t k = rng() % open.size();
      AllocRecord r = open[k];
      open[k] = open.back();
      open.pop_back();
      push(r, Action::FreeRequested, r.requested);
      push(r, Action::FreeCompleted, r.requested);
      push(r, Action::SegmentFree, r.size);
    }
  }
  // Live state: what is still open plus older allocations whose history the ring dropped.
  st.live = open;
  for (size_t i = open.size(); i < nlive; ++i) {
    AllocRecord r;
    r.addr = 0x7e0000000000 + i * 0x10000;
    r.size = 4096;
    r.requested = 4000;
    r.stack_id = 1 + static_cast<uint32_t>(rng() % stacks);
    r.device = static_cast<int16_t>(i % 2);
    st.live.push_back(r);
  }
  st.device_count = 2;
  st.ring_capacity = entries;
  st.total_entries = entries * 2;
  st.dropped_entries = entries;

  BuildOptions o;
  BuildStats bs;
  PickleWriter w;
  auto t0 = Clock::now();
  build_snapshot(st, src, o, w, &bs);
  double first = since(t0);
  size_t bytes = w.size();
  w.clear();
  t0 = Clock::now();
  build_snapshot(st, src, o, w, &bs);
  double second = since(t0);
  std::string path = dir + "/memtrace_snapshot_bench.pickle";
  std::string err;
  t0 = Clock::now();
  bool ok = write_file_atomically(path, w.bytes(), &err);
  double write = since(t0);
  std::remove(path.c_str());
  double mib = static_cast<double>(bytes) / 1048576.0;
  std::printf(
      "entries %zu, live %zu, stacks %u x %d frames: %.1f MiB (%.1f bytes/entry)\n"
      "  build, fresh buffer:  %.3f s (%.0f MiB/s, %.0f ns/entry)\n"
      "  build, grown buffer:  %.3f s (%.0f MiB/s, %.0f ns/entry)\n"
      "  atomic write + fsync: %.3f s (%.0f MiB/s)%s%s\n",
      st.trace.size(), st.live.size(), stacks, depth, mib, static_cast<double>(bytes) / static_cast<double>(st.trace.size()),
      first, mib / first, first * 1e9 / static_cast<double>(st.trace.size()), second, mib / second,
      second * 1e9 / static_cast<double>(st.trace.size()), write, mib / write, ok ? "" : " FAILED: ", ok ? "" : err.c_str());
  return ok ? 0 : 1;
}
