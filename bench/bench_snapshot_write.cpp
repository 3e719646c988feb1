// Snapshot writing at scale, after symbolization (frames supplied by a fake FrameSource):
//
//   bench_snapshot_write [DIR]   (default $TMPDIR or /tmp; the files are removed afterwards)
//
// 1. A synthetic StateCopy: 1,000,000 trace entries on 2 devices (alloc = segment_alloc + alloc,
//    free = free_requested + free_completed + segment_free, as the recorder emits them), the
//    allocations still open as live segments, 10,000 distinct stacks of 16 frames each. Frames
//    draw on shared pools of files and function names, as real stacks do (common callers).
//    Times build_snapshot() and write_file_atomically() (fsync included); prints the file size.
// 2. The size of the same data without sharing. The builder memoizes frame lists and frame dicts
//    and has no switch to turn that off, so python3 loads the file and pickles it twice with
//    protocol 4: as loaded (shared), and after replacing every `frames` list by a new list of new
//    dicts (what copy.deepcopy would do to it; strings stay shared, as pickle memoizes them).
// 1b. The same state through dump_with_source() (what the exit dump runs, frames from the fake
//    source): its own peak resident memory (VmHWM after resetting it) against the snapshot's size.
// 3. Recorder::copy_state() of a recorder holding 1,000,000 ring entries and 100,000 live
//    allocations: its duration (median/min of 7), and the longest single alloc/free call seen by
//    another thread allocating while the copies run (the pause a dump imposes on it).
// Not a test: figures depend on the machine.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../output/tests/fake_source.hpp"
#include "core/recorder.hpp"
#include "format/atomic_file.hpp"
#include "output/dump.hpp"
#include "output/snapshot_builder.hpp"

using namespace memtrace;
using namespace memtrace::output;
using memtrace::format::PickleWriter;
using memtrace::format::write_file_atomically;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double mib(size_t b) { return static_cast<double>(b) / 1048576.0; }

constexpr size_t kEntries = 1000000;
constexpr uint32_t kStacks = 10000;
constexpr int kDepth = 16;

StateCopy synthetic_state() {
  StateCopy st;
  std::mt19937_64 rng(7);
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
  st.trace.reserve(kEntries + 3);
  while (st.trace.size() < kEntries) {
    if (open.size() < 64 || rng() % 2) {
      AllocRecord r;
      r.addr = next;
      next += 0x200000;
      r.size = 512 * (1 + rng() % 4096);
      r.requested = r.size - rng() % 512;
      r.stack_id = 1 + static_cast<uint32_t>(rng() % kStacks);
      r.device = static_cast<int16_t>(rng() % 2);
      r.stream = rng() % 4 ? 0 : 0x5555000 + rng() % 3;
      r.time_us = t;
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
  std::sort(open.begin(), open.end(), [](const AllocRecord& a, const AllocRecord& b) {
    return a.device != b.device ? a.device < b.device : a.addr < b.addr;
  });
  st.live = open;
  st.device_count = 2;
  st.ring_capacity = kEntries;
  st.total_entries = st.trace.size();
  st.dropped_entries = 0;
  st.time_us = t;
  return st;
}

void fill_source(test::FakeFrameSource& src) {
  // Pools: 40 files, 6,000 functions; stack s, frame d picks from them (outer frames common).
  for (uint32_t s = 1; s <= kStacks; ++s) {
    std::vector<test::FakeFrameSource::F> f;
    for (int d = 0; d < kDepth; ++d) {
      uint32_t outer = static_cast<uint32_t>(kDepth - 1 - d);  // 0 = outermost
      uint32_t spread = outer < 4 ? 1 + outer * 3 : 6000;       // main, interpreter loop, ... shared
      uint32_t fn = (s * 2654435761u + static_cast<uint32_t>(d) * 40503u) % spread + outer * 7;
      f.push_back({"/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_part" + std::to_string(fn % 40) + ".so",
                   "at::native::(anonymous namespace)::op_impl_" + std::to_string(fn) + "(at::Tensor const&, long)",
                   static_cast<int>(fn % 900) + 1});
    }
    src.set(s, f, s % 5 ? "torch" : "nccl");
  }
}

const char* kPython = R"PY(
import gc, pickle, sys, time
gc.disable()  # millions of new containers: the cyclic collector would dominate
class Count:
    n = 0
    def write(self, b):
        self.n += len(b)
def size(o):
    c = Count()
    pickle.Pickler(c, protocol=4).dump(o)
    return c.n
t = time.time()
with open(sys.argv[1], 'rb') as f:
    obj = pickle.load(f)
t_load = time.time() - t
shared = size(obj)
n = 0
def unshare(d):
    global n
    fr = d.get('frames')
    if fr is not None:
        d['frames'] = [dict(x) for x in fr]
        n += 1
for lst in obj.get('device_traces', []):
    for e in lst:
        unshare(e)
for lst in obj.get('host_traces', []):
    for e in lst:
        unshare(e)
for key in ('segments', 'host_segments'):
    for seg in obj.get(key, []):
        for b in seg.get('blocks', []):
            unshare(b)
unshared = size(obj)
print(shared, unshared, n, round(t_load, 2), round(time.time() - t, 2))
sys.stdout.flush()
import os
os._exit(0)  # skip freeing millions of objects
)PY";

// A field of /proc/self/status in KiB (VmRSS:, VmHWM:); 0 when unreadable.
long status_kib(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long v = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, field, std::strlen(field)) == 0) v = std::atol(line + std::strlen(field));
  std::fclose(f);
  return v;
}

// Sets VmHWM to the current resident size, so that it then measures a peak from here.
bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = argc > 1 ? argv[1] : (tmp && *tmp ? tmp : "/tmp");

  // ---- 1. build + write ----
  StateCopy st = synthetic_state();
  test::FakeFrameSource src;
  fill_source(src);

  BuildOptions o;
  o.meta.reason = "bench";
  BuildStats bs;
  auto wp = std::make_unique<PickleWriter>();
  PickleWriter& w = *wp;
  auto t0 = Clock::now();
  build_snapshot(st, src, o, w, &bs);
  double build = since(t0);
  std::string path = dir + "/memtrace_bench_snapshot_write.pickle";
  std::string err;
  t0 = Clock::now();
  bool ok = write_file_atomically(path, w.bytes(), &err);
  double write = since(t0);
  size_t bytes = w.size();
  std::printf("snapshot: %zu trace entries, %zu live segments, %u stacks x %d frames\n", st.trace.size(),
              st.live.size(), kStacks, kDepth);
  std::printf("  distinct frame lists %zu, distinct frame dicts %zu\n", bs.frame_lists, bs.frame_dicts);
  std::printf("  build_snapshot:              %.3f s (%.0f ns/entry)\n", build, build * 1e9 / static_cast<double>(st.trace.size()));
  std::printf("  write_file_atomically+fsync: %.3f s\n", write);
  std::printf("  build + write:               %.3f s\n", build + write);
  std::printf("  file size (shared frames):   %zu bytes (%.1f MiB, %.1f bytes/entry)%s%s\n", bytes, mib(bytes),
              static_cast<double>(bytes) / static_cast<double>(st.trace.size()), ok ? "" : "  WRITE FAILED: ",
              ok ? "" : err.c_str());
  wp.reset();  // give the memory back before python runs

  // ---- 1b. a dump's own peak memory ----
  // dump_with_source() as the exit dump runs it (minus symbolization: the frames come from the
  // fake source): the process's peak resident memory during it, over what it held before (the
  // state copy, the frame source), next to the snapshot's size and the state copy's.
  {
    const size_t copy_bytes = st.trace.capacity() * sizeof(TraceEntry) + st.live.capacity() * sizeof(AllocRecord);
    const long before = status_kib("VmRSS:");
    const bool reset = reset_peak_rss();
    DumpRequest req;
    req.path_template = dir + "/memtrace_bench_dump_peak.pickle";
    req.print_summary = false;
    PathContext ctx;
    DumpReport rep = dump_with_source(st, src, req, ctx, "bench_snapshot_write");
    const long peak = status_kib("VmHWM:");
    std::remove(req.path_template.c_str());
    if (!rep.written || !reset) {
      std::printf("dump peak memory: not measured (%s)\n",
                  !reset ? "cannot reset the peak (/proc/self/clear_refs)" : rep.error.c_str());
    } else {
      const double own = static_cast<double>(peak - before) * 1024.0;
      std::printf("dump_with_source of the same state (%zu trace entries): snapshot %.1f MiB; the dump's own peak\n"
                  "  resident memory %.1f MiB = %.2fx the snapshot (over the %.1f MiB held before it, of which the\n"
                  "  state copy is %.1f MiB: with it, %.2fx the snapshot)\n",
                  st.trace.size(), mib(static_cast<double>(rep.bytes)), mib(own), own / static_cast<double>(rep.bytes),
                  before / 1024.0, mib(static_cast<double>(copy_bytes)),
                  (own + static_cast<double>(copy_bytes)) / static_cast<double>(rep.bytes));
    }
  }
  std::vector<AllocRecord>().swap(st.live);
  std::vector<TraceEntry>().swap(st.trace);

  // ---- 2. size without sharing (python) ----
  if (ok) {
    std::string script = dir + "/memtrace_bench_unshare.py";
    if (FILE* f = std::fopen(script.c_str(), "w")) {
      std::fputs(kPython, f);
      std::fclose(f);
    }
    std::string cmd = "python3 '" + script + "' '" + path + "'";
    t0 = Clock::now();
    FILE* p = popen(cmd.c_str(), "r");
    unsigned long long shared = 0, unshared = 0, lists = 0;
    double load_s = 0, py_s = 0;
    int got = p ? std::fscanf(p, "%llu %llu %llu %lf %lf", &shared, &unshared, &lists, &load_s, &py_s) : 0;
    int rc = p ? pclose(p) : -1;
    if (got == 5 && rc == 0) {
      std::printf("without sharing (python3 pickle protocol 4, %.1f s):\n", since(t0));
      std::printf("  memtrace file:                           %12zu bytes (%7.1f MiB)\n", bytes, mib(bytes));
      std::printf("  python re-pickle, sharing kept:          %12llu bytes (%7.1f MiB)\n", shared, mib(shared));
      std::printf("  python re-pickle, %7llu frames lists unshared: %llu bytes (%.1f MiB) = %.1fx the memtrace file, "
                  "%.1fx python's shared\n",
                  lists, unshared, mib(unshared), static_cast<double>(unshared) / static_cast<double>(bytes),
                  static_cast<double>(unshared) / static_cast<double>(shared));
    } else {
      std::printf("without sharing: python3 failed (rc %d, %d fields read)\n", rc, got);
    }
    std::remove(script.c_str());
  }
  std::remove(path.c_str());

  // ---- 3. Recorder::copy_state ----
  Recorder rec;
  rec.configure(kEntries, 0);
  std::mt19937_64 rng(3);
  AllocRecord r;
  r.size = 4096;
  r.requested = 4000;
  for (uint64_t i = 0; i < 100000; ++i) {
    r.addr = 0x7f0000000000 + i * 0x10000;
    r.stack_id = 1 + static_cast<uint32_t>(rng() % kStacks);
    r.device = static_cast<int16_t>(i % 2);
    rec.record_alloc(r);
  }
  // Churn until the ring is full: each pair adds 5 entries.
  AllocRecord out;
  for (uint64_t i = 0; i < 200000; ++i) {
    r.addr = 0x7a0000000000 + (i % 1000) * 0x10000;
    r.stack_id = 1 + static_cast<uint32_t>(rng() % kStacks);
    rec.record_alloc(r);
    rec.release(r.addr, 0, 0, &out);
  }

  // The allocating thread runs flat out (the worst case: the ring turns over faster than it can
  // be copied, so copy_state falls back to copying it under the locks), then paced at one
  // alloc+free pair per 5 us (200,000 pairs/s, far above what programs ask of the driver).
  auto measure = [&](const char* label, uint64_t pace_ns) {
    std::atomic<bool> stop{false}, copying{false};
    std::atomic<uint64_t> worst_ns{0}, ops{0};
    std::thread worker([&] {
      AllocRecord a;
      a.size = 512;
      a.requested = 512;
      a.stack_id = 1;
      AllocRecord o2;
      uint64_t k = 0;
      auto next = Clock::now();
      while (!stop.load(std::memory_order_relaxed)) {
        if (pace_ns) {
          next += std::chrono::nanoseconds(pace_ns);
          while (Clock::now() < next) {
          }
        }
        a.addr = 0x790000000000 + (k++ % 64) * 0x1000;
        auto s = Clock::now();
        rec.record_alloc(a);
        rec.release(a.addr, 0, 0, &o2);
        uint64_t ns = static_cast<uint64_t>(std::chrono::duration<double, std::nano>(Clock::now() - s).count());
        if (copying.load(std::memory_order_relaxed)) {
          ops.fetch_add(1, std::memory_order_relaxed);
          if (ns > worst_ns.load(std::memory_order_relaxed)) worst_ns.store(ns, std::memory_order_relaxed);
        }
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<double> secs;
    size_t live_n = 0, trace_n = 0;
    copying = true;
    for (int i = 0; i < 7; ++i) {
      auto t = Clock::now();
      StateCopy c = rec.copy_state();
      secs.push_back(since(t));
      live_n = c.live.size();
      trace_n = c.trace.size();
    }
    copying = false;
    stop = true;
    worker.join();
    std::sort(secs.begin(), secs.end());
    std::printf("Recorder::copy_state(), %s: %zu ring entries kept, %zu live records (7 copies)\n", label, trace_n,
                live_n);
    std::printf("  duration: median %.2f ms, min %.2f ms\n", secs[secs.size() / 2] * 1e3, secs.front() * 1e3);
    std::printf("  longest alloc+free pair of the allocating thread meanwhile: %.2f ms (%llu pairs timed)\n",
                static_cast<double>(worst_ns.load()) / 1e6, static_cast<unsigned long long>(ops.load()));
  };
  measure("allocating thread flat out", 0);
  measure("allocating thread at 200k pairs/s", 5000);
  return ok ? 0 : 1;
}
