// Snapshot reading at scale: load_snapshot() on two files of 1,000,000 trace entries and 10,000
// distinct stacks of 16 frames:
//
//   bench_read [DIR] [--keep]   (default $TMPDIR or /tmp; the files are removed afterwards unless
//                                --keep, e.g. to profile the analysis commands on them)
//
// 1. memtrace's own format: a synthetic StateCopy (2 devices, alloc = segment_alloc + alloc, free =
//    free_requested + free_completed + segment_free, the open allocations as live segments)
//    written by build_snapshot().
// 2. PyTorch's shape: python3 builds the same kind of history as dicts (frame dicts and frame lists
//    shared, as PyTorch deduplicates them; compile_context/user_metadata on every entry; segments
//    of 3 blocks) and writes it with pickle.dump at protocol 4.
// For each file, a fresh process (this program re-run with --load) loads it 3 times in turn and
// reports the time and the process's peak RSS (VmHWM, the program's own baseline included) next to
// the file size; then python3 times pickle.load on the same file, with its own peak RSS, as Python
// runs it and with gc.disable(). The load average is printed before and after.
// Not a test: figures depend on the machine.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../output/tests/fake_source.hpp"
#include "cli/reader/snapshot.hpp"
#include "format/atomic_file.hpp"
#include "output/snapshot_builder.hpp"

using namespace memtrace;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kEntries = 1000000;
constexpr uint32_t kStacks = 10000;
constexpr int kDepth = 16;

double mib(double b) { return b / 1048576.0; }

long vm_hwm_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

double cpu_seconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Child mode: load once, print "seconds cpu_seconds peak_kib entries stacks frames" (or the error).
int load_once(const char* path) {
  auto t0 = Clock::now();
  double c0 = cpu_seconds();
  reader::LoadResult r = reader::load_snapshot(path);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu = cpu_seconds() - c0;
  if (r.error) {
    std::printf("ERROR %s\n", r.error->message.c_str());
    return 1;
  }
  size_t entries = 0;
  for (const auto& d : r.snapshot->device_traces) entries += d.size();
  std::printf("%.4f %.4f %ld %zu %zu %zu\n", s, cpu, vm_hwm_kib(), entries, r.snapshot->stacks.size(), r.snapshot->frames.size());
  return 0;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return buf;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

size_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

void measure(const char* label, const std::string& path) {
  size_t size = file_size(path);
  std::printf("%s: %s, %zu bytes (%.1f MiB)\n", label, path.c_str(), size, mib(static_cast<double>(size)));
  std::vector<double> secs, cpus;
  long peak = 0;
  for (int i = 0; i < 3; ++i) {
    std::string out = run_capture("'" + self_exe() + "' --load '" + path + "'");
    double s = 0, cpu = 0;
    long kib = 0;
    size_t entries = 0, stacks = 0, frames = 0;
    if (std::sscanf(out.c_str(), "%lf %lf %ld %zu %zu %zu", &s, &cpu, &kib, &entries, &stacks, &frames) != 6) {
      std::printf("  load failed: %s", out.c_str());
      return;
    }
    secs.push_back(s);
    cpus.push_back(cpu);
    peak = std::max(peak, kib);
    if (i == 0) std::printf("  decoded: %zu entries, %zu stacks, %zu frames\n", entries, stacks, frames);
  }
  std::sort(secs.begin(), secs.end());
  std::sort(cpus.begin(), cpus.end());
  // CPU time (user + system) is the steadier figure on a shared machine.
  std::printf("  load_snapshot: wall median %.3f s, min %.3f s; CPU median %.3f s, min %.3f s (3 runs)\n", secs[1],
              secs[0], cpus[1], cpus[0]);
  std::printf("  peak RSS of the loading process: %.1f MiB = %.2fx the file size\n", mib(peak * 1024.0),
              peak * 1024.0 / static_cast<double>(size));
  // pickle.load as Python runs it, and with its cyclic garbage collector off (gc.disable()): the
  // collector walks the growing heap again and again while millions of objects are created, and a
  // reader that knows its data holds no cycles would turn it off.
  for (const bool gc_off : {false, true}) {
    std::string py = run_capture(
        std::string("python3 -c \"import gc,pickle,resource,sys,time,os\n") + (gc_off ? "gc.disable()\n" : "") +
        "t=time.time()\nc=time.process_time()\n"
        "with open(sys.argv[1],'rb') as f: o=pickle.load(f)\n"
        "print('%.3f %.3f %d' % (time.time()-t, time.process_time()-c, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))"
        "\nsys.stdout.flush()\nos._exit(0)\" '" + path + "'");
    double pys = 0, pycpu = 0;
    long pykib = 0;
    const char* what = gc_off ? "python3 pickle.load, gc.disable()" : "python3 pickle.load, gc on (default)";
    if (std::sscanf(py.c_str(), "%lf %lf %ld", &pys, &pycpu, &pykib) == 3)
      std::printf("  %s: wall %.3f s, CPU %.3f s, peak RSS %.1f MiB = %.2fx the file size\n", what, pys, pycpu,
                  mib(pykib * 1024.0), pykib * 1024.0 / static_cast<double>(size));
    else
      std::printf("  %s failed: %s\n", what, py.c_str());
  }
}

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
  st.time_us = t;
  return st;
}

// Frame (s, d) of stack s at depth d: outer frames come from small pools (main, the interpreter
// loop ... shared by every stack), inner ones from 6,000 functions in 40 files. The Python
// generator below computes the same function.
void fill_source(output::test::FakeFrameSource& src) {
  for (uint32_t s = 1; s <= kStacks; ++s) {
    std::vector<output::test::FakeFrameSource::F> f;
    for (int d = 0; d < kDepth; ++d) {
      uint32_t outer = static_cast<uint32_t>(kDepth - 1 - d);
      uint32_t spread = outer < 4 ? 1 + outer * 3 : 6000;
      uint32_t fn = (s * 2654435761u + static_cast<uint32_t>(d) * 40503u) % spread + outer * 7;
      f.push_back({"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module" + std::to_string(fn % 40) + ".py",
                   "forward_" + std::to_string(fn), static_cast<int>(fn % 900) + 1});
    }
    src.set(s, f, s % 5 ? "torch" : "nccl");
  }
}

const char* kPyTorchShape = R"PY(
import gc, pickle, random, sys
gc.disable()
N, S, D = 1000000, 10000, 16
random.seed(7)
frames = {}
def frame(fn):
    f = frames.get(fn)
    if f is None:
        f = frames[fn] = {'filename': '/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module%d.py' % (fn % 40),
                          'line': fn % 900 + 1, 'name': 'forward_%d' % fn}
    return f
stacks = [None]
for s in range(1, S + 1):
    st = []
    for d in range(D):
        outer = D - 1 - d
        spread = 1 + outer * 3 if outer < 4 else 6000
        st.append(frame(((s * 2654435761 + d * 40503) & 0xffffffff) % spread + outer * 7))
    stacks.append(st)
traces = [[], []]
t = 1767225600000000
nxt = 0x7f0000000000
open_ = []
count = 0
def push(r, action, size):
    global t, count
    t += 1
    count += 1
    traces[r[3]].append({'action': action, 'addr': r[0], 'size': size, 'stream': r[4], 'time_us': t,
                         'compile_context': '', 'user_metadata': '', 'frames': stacks[r[2]]})
while count < N:
    if len(open_) < 64 or random.random() < 0.5:
        size = 512 * (1 + random.randrange(4096))
        r = (nxt, size, 1 + random.randrange(S), random.randrange(2), 0 if random.randrange(4) else 0x5555000 + random.randrange(3), size - random.randrange(512))
        nxt += 0x200000
        push(r, 'segment_alloc', size)
        push(r, 'alloc', r[5])
        open_.append(r)
    else:
        k = random.randrange(len(open_))
        r = open_[k]
        open_[k] = open_[-1]
        open_.pop()
        push(r, 'free_requested', r[5])
        push(r, 'free_completed', r[5])
        push(r, 'segment_free', r[1])
segments = []
for r in sorted(open_, key=lambda r: (r[3], r[0])):
    st = stacks[r[2]]
    segments.append({'device': r[3], 'address': r[0], 'total_size': r[1] + 1024, 'allocated_size': r[1],
                     'active_size': r[1], 'requested_size': r[5], 'stream': r[4], 'segment_type': 'large',
                     'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': st,
                     'blocks': [{'address': r[0], 'size': r[1], 'requested_size': r[5], 'state': 'active_allocated', 'frames': st},
                                {'address': r[0] + r[1], 'size': 512, 'requested_size': 0, 'state': 'inactive', 'frames': []},
                                {'address': r[0] + r[1] + 512, 'size': 512, 'requested_size': 0, 'state': 'inactive', 'frames': []}]})
snap = {'segments': segments, 'device_traces': traces,
        'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': -1, 'garbage_collection_threshold': 0.0,
                               'expandable_segments': False, 'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)}},
        'external_annotations': []}
with open(sys.argv[1], 'wb') as f:
    pickle.dump(snap, f, protocol=4)
import os
os._exit(0)
)PY";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--load") == 0) return load_once(argv[2]);
  if (argc == 2 && std::strcmp(argv[1], "--baseline") == 0) {
    std::printf("%ld\n", vm_hwm_kib());
    return 0;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keep") == 0)
      keep = true;
    else
      dir = argv[i];
  }
  std::string mt_path = dir + "/memtrace_bench_read_memtrace.pickle";
  std::string pt_path = dir + "/memtrace_bench_read_pytorch.pickle";

  std::printf("load average before: %s", run_capture("cat /proc/loadavg").c_str());
  long base = std::atol(run_capture("'" + self_exe() + "' --baseline").c_str());
  std::printf("baseline peak RSS of this program doing nothing: %.1f MiB\n", mib(base * 1024.0));

  {
    StateCopy st = synthetic_state();
    output::test::FakeFrameSource src;
    fill_source(src);
    output::BuildOptions o;
    o.meta.reason = "bench";
    format::PickleWriter w;
    output::build_snapshot(st, src, o, w);
    std::string err;
    if (!format::write_file_atomically(mt_path, w.bytes(), &err)) {
      std::printf("cannot write %s: %s\n", mt_path.c_str(), err.c_str());
      return 1;
    }
  }
  measure("memtrace's format (1,000,000 entries, 10,000 stacks x 16 frames)", mt_path);
  if (!keep) std::remove(mt_path.c_str());

  std::string script = dir + "/memtrace_bench_read_gen.py";
  {
    std::ofstream f(script);
    f << kPyTorchShape;
  }
  auto t0 = Clock::now();
  int rc = std::system(("python3 '" + script + "' '" + pt_path + "'").c_str());
  std::remove(script.c_str());
  if (rc != 0) {
    std::printf("python3 could not write the PyTorch-shaped file (status %d)\n", rc);
    return 1;
  }
  std::printf("(python3 wrote the PyTorch-shaped file in %.1f s)\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  measure("PyTorch's shape, pickle protocol 4 (1,000,000 entries, 10,000 stacks x 16 frames)", pt_path);
  if (!keep) std::remove(pt_path.c_str());
  std::printf("load average after: %s", run_capture("cat /proc/loadavg").c_str());
  return 0;
}
