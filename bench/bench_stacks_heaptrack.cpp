// What a profiler that records native stacks adds to the allocating thread, memtrace against
// heaptrack, same machine, same stack depth, one run:
//
//   bench_stacks_heaptrack [PAIRS [ROUNDS]]   (defaults 200000 and 3)
//
// The program allocates and frees from a call stack 32 frames deep (counted at the call with
// glibc's backtrace(); printed), PAIRS times, timed with the thread's own CPU clock
// (CLOCK_THREAD_CPUTIME_ID: a profiler's other threads and processes, heaptrack_interpret or
// memtrace's dump thread, are not counted, nor is time spent waiting for the CPU). Four
// configurations, each a fresh process, alternated ROUNDS times, each keeping its best run:
//   host   malloc(4096) + free          plain, and under `heaptrack -o FILE` (its launcher, as a
//                                       user runs it; its output is removed)
//   device cuMemAlloc + cuMemFree, 4 KiB on the simulated device: plain, and under memtrace
//                                       with MEMTRACE_STACKS=native MEMTRACE_STACK_DEPTH=32
// Four shapes of program, each in all four configurations: "same", every pair from one call
// site (a loop allocating the same way each time); "varied", sixteen call sites in turn at the
// same depth, so that no two allocations in a row have the same stack; "many", 64 call sites in
// turn, as many walks as memtrace remembers a thread (docs/stack-capture.md); and "crowd", 256
// in turn, four times that, so that most stacks are not remembered and each capture joins a
// remembered walk where the stacks meet and interns its stack.
// A pair is two events (an allocation, which takes a stack, and a free, which takes none in
// either tool by default); "added per event" is (profiled - plain) / 2. The target (issue 18):
// memtrace's added CPU per event at most half of heaptrack's. Prints the load average before
// and after. Without heaptrack on PATH it prints memtrace's side only and says so.
// Not a test: figures depend on the machine.
#include <cuda.h>
#include <execinfo.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_run.hpp"

namespace {

constexpr int kProgramDepth = 32;
volatile uintptr_t g_sink = 0;
int g_frames_at_call = 0;

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// One allocate + free. A copy of it per call site, for the varied stacks.
template <int Site>
__attribute__((noinline)) void pair_at(bool device) {
  if (device) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bench_stacks_heaptrack: device allocation failed\n");
      std::exit(1);
    }
    g_sink = g_sink + p + Site;
  } else {
    void* p = std::malloc(4096);
    g_sink = g_sink + reinterpret_cast<uintptr_t>(p) + Site;
    std::free(p);
  }
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}

template <int... I>
constexpr auto site_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(bool), sizeof...(I)>{&pair_at<I>...};
}
constexpr auto kSites = site_table(std::make_integer_sequence<int, 256>{});

size_t g_sites = 1;  // how many of kSites the program calls in turn

__attribute__((noinline)) double timed_pairs(bool device, long pairs) {
  void* frames[256];
  g_frames_at_call = backtrace(frames, 256) + 1;  // and pair_at's frame
  double t0 = thread_cpu_ns();
  for (long i = 0; i < pairs; ++i) kSites[static_cast<size_t>(i) % g_sites](device);
  return (thread_cpu_ns() - t0) / static_cast<double>(pairs);
}

// Recursion the compiler cannot flatten: `depth` real frames above timed_pairs.
__attribute__((noinline)) double descend(int depth, bool device, long pairs) {
  if (depth <= 0) return timed_pairs(device, pairs);
  double r = descend(depth - 1, device, pairs);
  asm volatile("" ::: "memory");
  return r;
}

// How deep to descend so that the call has kProgramDepth frames: a probe from here counts this
// function's frame too, which the timed runs (called from child) do not have.
__attribute__((noinline)) int descend_for_depth(bool device) {
  descend(0, device, 1);
  return std::max(0, kProgramDepth - g_frames_at_call + 1);
}

int child(bool device, long pairs, const char* shape) {
  g_sites = std::strcmp(shape, "crowd") == 0    ? 256
            : std::strcmp(shape, "many") == 0   ? 64
            : std::strcmp(shape, "varied") == 0 ? 16
                                                : 1;
  if (device) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bench_stacks_heaptrack: no device\n");
      return 1;
    }
  }
  const int extra = descend_for_depth(device);
  descend(extra, device, pairs / 10);  // warm-up: caches, the stack table, the trace ring's pages
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) best = std::min(best, descend(extra, device, pairs));
  std::printf("RESULT %.2f %d\n", best, g_frames_at_call);
  return 0;
}

struct Figure {
  double ns = 1e30;
  int frames = 0;
};

void take(Figure& f, const std::string& out) {
  // heaptrack's launcher prints lines of its own around the program's.
  size_t at = out.rfind("RESULT ");
  if (at == std::string::npos) return;
  double ns = 0;
  int frames = 0;
  if (std::sscanf(out.c_str() + at, "RESULT %lf %d", &ns, &frames) == 2 && ns < f.ns) f = {ns, frames};
}

bool on_path(const char* tool) {
  std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string load_average() {
  char buf[128] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
    std::fclose(f);
  }
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "--child") == 0)
    return child(std::strcmp(argv[2], "device") == 0, std::atol(argv[3]), argv[4]);
  const long pairs = argc >= 2 ? std::max(1000L, std::atol(argv[1])) : 200000;
  const int rounds = argc >= 3 ? std::max(1, std::atoi(argv[2])) : 3;
  const char* preload = std::getenv("MEMTRACE_BENCH_PRELOAD");
  const std::string ld = std::string("LD_PRELOAD=") + (preload ? preload : MEMTRACE_LIB_PATH);
  const bool heaptrack = on_path("heaptrack");
  const std::string ht_out = "/tmp/memtrace-bench-heaptrack-" + std::to_string(getpid());
  const std::string n = std::to_string(pairs);

  std::printf("load average before: %s", load_average().c_str());
  struct Shape {
    const char* name;
    const char* what;
    Figure host = {}, host_ht = {}, dev = {}, dev_mt = {};
  };
  Shape shapes[4] = {{"same", "one call site: every allocation has the same stack"},
                     {"varied", "16 call sites in turn, at the same depth: 16 stacks, no two in a row alike"},
                     {"many", "64 call sites in turn, at the same depth: as many stacks as memtrace remembers"},
                     {"crowd", "256 call sites in turn, at the same depth: four times what memtrace remembers"}};
  const std::vector<std::string> mt_env = {ld, "MEMTRACE_STACKS=native", "MEMTRACE_STACK_DEPTH=32", "MEMTRACE_SUMMARY=0",
                                           "MEMTRACE_OUTPUT=/tmp/memtrace-bench-%p.pickle",
                                           "MEMTRACE_MAX_ENTRIES=100000"};
  for (int round = 0; round < rounds; ++round) {
    for (Shape& sh : shapes) {
      take(sh.host, memtrace::bench::run_child(argv[0], {"host", n, sh.name}, {"LD_PRELOAD="}, "/tmp/memtrace-bench-"));
      if (heaptrack) {
        // heaptrack's launcher runs the program itself: `heaptrack -o OUT self --child host N SHAPE`.
        take(sh.host_ht, memtrace::bench::run_command({"heaptrack", "-o", ht_out, argv[0], "--child", "host", n, sh.name},
                                                      {}, true));
        for (const char* ext : {".zst", ".gz", ""}) unlink((ht_out + ext).c_str());
      }
      take(sh.dev, memtrace::bench::run_child(argv[0], {"device", n, sh.name}, {"LD_PRELOAD="}, "/tmp/memtrace-bench-"));
      take(sh.dev_mt, memtrace::bench::run_child(argv[0], {"device", n, sh.name}, mt_env, "/tmp/memtrace-bench-"));
    }
  }
  std::printf("allocate + free, %ld pairs from a stack of %d frames (backtrace() at the call), best of %d rounds x 5 "
              "runs; the allocating thread's CPU time\n",
              pairs, shapes[0].dev.frames, rounds);
  bool failed = false;
  for (const Shape& sh : shapes) {
    if (sh.host.ns >= 1e30 || sh.dev.ns >= 1e30 || sh.dev_mt.ns >= 1e30 || (heaptrack && sh.host_ht.ns >= 1e30)) {
      std::fprintf(stderr, "bench_stacks_heaptrack: a configuration failed (%s)\n", sh.name);
      failed = true;
      continue;
    }
    std::printf("%s: %s\n", sh.name, sh.what);
    std::printf("  %-44s %8.1f ns/pair\n", "host malloc/free, plain", sh.host.ns);
    const double mt_added = (sh.dev_mt.ns - sh.dev.ns) / 2;
    double ht_added = 0;
    if (heaptrack) {
      ht_added = (sh.host_ht.ns - sh.host.ns) / 2;
      std::printf("  %-44s %8.1f ns/pair   added %6.1f ns/event\n", "host malloc/free under heaptrack", sh.host_ht.ns,
                  ht_added);
    }
    std::printf("  %-44s %8.1f ns/pair\n", "device cuMemAlloc/cuMemFree (sim), plain", sh.dev.ns);
    std::printf("  %-44s %8.1f ns/pair   added %6.1f ns/event\n", "device, memtrace native stacks depth 32",
                sh.dev_mt.ns, mt_added);
    if (heaptrack)
      std::printf("  memtrace's added CPU per event / heaptrack's: %.2f (target at most 0.50: %s)\n",
                  mt_added / ht_added, mt_added <= ht_added / 2 ? "met" : "MISSED");
  }
  if (!heaptrack) std::printf("heaptrack is not on PATH: no comparison\n");
  std::printf("load average after: %s", load_average().c_str());
  return failed ? 1 : 0;
}
