// Cost of an intercepted allocate+free pair on the simulated device.
//
//   bench_hooks            runs three configurations and prints a table:
//                          without memtrace, memtrace without stacks, memtrace with native
//                          stacks of depth 32 (frees carrying the allocation's stack, the
//                          default, and their own with MEMTRACE_FREE_STACKS=1)
//   bench_hooks --child N  one timed run (what the table re-executes with its environment)
//
// The pair is cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB, called from 32 frames deep so the
// native configuration really walks 32 frames.
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "child_run.hpp"

namespace {

__attribute__((noinline)) double timed_pairs(long pairs) {
  CUdeviceptr p = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bench_hooks: allocation failed\n");
      std::exit(1);
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(pairs);
}

// Recursion that the compiler cannot flatten, so a stack capture sees `depth` real frames.
__attribute__((noinline)) double descend(int depth, long pairs) {
  if (depth <= 1) return timed_pairs(pairs);
  double r = descend(depth - 1, pairs);
  asm volatile("" ::: "memory");
  return r;
}

int child(long pairs) {
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_hooks: no device\n");
    return 1;
  }
  descend(28, pairs / 10);  // warm-up: caches, stack table, registry growth
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    double ns = descend(28, pairs);
    if (ns < best) best = ns;
  }
  std::printf("%.1f\n", best);
  return 0;
}

double run_config(const char* self, long pairs, const std::vector<std::string>& env) {
  std::string line = memtrace::bench::run_child(self, {std::to_string(pairs)}, env, "/tmp/memtrace-bench-");
  return line.empty() ? 1e30 : std::atof(line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) return child(std::atol(argv[2]));
  long pairs = argc >= 2 ? std::atol(argv[1]) : 200000;
  const char* preload = std::getenv("MEMTRACE_BENCH_PRELOAD");
  std::string lib = preload ? preload : MEMTRACE_LIB_PATH;
  std::string ld = "LD_PRELOAD=" + lib;
  std::string out = "MEMTRACE_OUTPUT=/tmp/memtrace-bench-%p.pickle";
  std::vector<std::string> common = {"MEMTRACE_SUMMARY=0", out,
                                     "MEMTRACE_MAX_ENTRIES=100000"};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  // The three configurations take turns, several rounds, and each keeps its best round: on a
  // small shared machine this is what separates memtrace's cost from scheduling noise.
  double base = 1e30, none = 1e30, native = 1e30, native_free = 1e30;
  // The same with the record in private memory, as before the state file (docs/state-file.md).
  double none_private = 1e30, native_private = 1e30;
  for (int round = 0; round < 3; ++round) {
    base = std::min(base, run_config(argv[0], pairs, {"LD_PRELOAD="}));
    none = std::min(none, run_config(argv[0], pairs, with({ld, "MEMTRACE_STACKS=none"})));
    native = std::min(native,
                      run_config(argv[0], pairs, with({ld, "MEMTRACE_STACKS=native", "MEMTRACE_STACK_DEPTH=32"})));
    native_free = std::min(native_free, run_config(argv[0], pairs,
                                                   with({ld, "MEMTRACE_STACKS=native", "MEMTRACE_STACK_DEPTH=32",
                                                         "MEMTRACE_FREE_STACKS=1"})));
    none_private = std::min(none_private,
                            run_config(argv[0], pairs, with({ld, "MEMTRACE_STACKS=none", "MEMTRACE_STATE_DIR=off"})));
    native_private = std::min(native_private, run_config(argv[0], pairs,
                                                         with({ld, "MEMTRACE_STACKS=native", "MEMTRACE_STACK_DEPTH=32",
                                                               "MEMTRACE_STATE_DIR=off"})));
  }
  if (base >= 1e30 || none >= 1e30 || native >= 1e30 || native_free >= 1e30 || none_private >= 1e30 ||
      native_private >= 1e30) {
    std::fprintf(stderr, "bench_hooks: a configuration failed (base %.1f none %.1f native %.1f)\n", base, none,
                 native);
    return 1;
  }
  std::printf("alloc+free pair on the simulated device (%ld pairs, best of 3 rounds x 5 runs, 2 events per pair)\n", pairs);
  std::printf("  %-34s %8.1f ns/pair\n", "without memtrace", base);
  std::printf("  %-34s %8.1f ns/pair  (+%.1f ns/event)\n", "memtrace, MEMTRACE_STACKS=none", none,
              (none - base) / 2);
  std::printf("  %-34s %8.1f ns/pair  (+%.1f ns/event)\n", "memtrace, native stacks depth 32", native,
              (native - base) / 2);
  std::printf("  %-34s %8.1f ns/pair  (+%.1f ns/event)\n", "  ... and MEMTRACE_FREE_STACKS=1", native_free,
              (native_free - base) / 2);
  std::printf("record in private memory (MEMTRACE_STATE_DIR=off) against the state file above:\n");
  std::printf("  %-34s %8.1f ns/pair  (state file %+.1f%%)\n", "memtrace, MEMTRACE_STACKS=none", none_private,
              100.0 * (none - none_private) / none_private);
  std::printf("  %-34s %8.1f ns/pair  (state file %+.1f%%)\n", "memtrace, native stacks depth 32", native_private,
              100.0 * (native - native_private) / native_private);
  return 0;
}
