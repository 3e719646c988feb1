// Cost of an NVTX range push/pop pair as a program pays it (docs/ranges.md's target: under 50 ns
// per pair with memtrace recording).
//
//   bench_ranges            runs each configuration in a child and prints a table:
//                           without memtrace (NVTX with no tool: its own cost), memtrace taking the
//                           ranges (a literal name, a registered string, a pair 8 ranges deep),
//                           and memtrace with MEMTRACE_RANGE_HISTORY=0 (no external_annotations)
//   bench_ranges --child K N  one timed run of kind K (what the table re-executes)
//
// The program uses NVTX v3 from the toolkit's headers, as real programs do; memtrace is reached
// through NVTX's injection (NVTX_INJECTION64_PATH), and a device allocation first starts its session.
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_run.hpp"

namespace {

double per_pair(long pairs, int kind) {
  nvtxDomainHandle_t dom = nvtxDomainCreateA("bench");
  nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "registered");
  nvtxEventAttributes_t at;
  std::memset(&at, 0, sizeof at);
  at.version = NVTX_VERSION;
  at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  at.message.registered = reg;
  if (kind == 2) {
    for (int d = 0; d < 7; ++d) nvtxRangePushA("enclosing");
  }
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    if (kind == 1) {
      nvtxDomainRangePushEx(dom, &at);
      nvtxDomainRangePop(dom);
    } else {
      nvtxRangePushA("forward");
      nvtxRangePop();
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  if (kind == 2) {
    for (int d = 0; d < 7; ++d) nvtxRangePop();
  }
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(pairs);
}

int child(int kind, long pairs) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuMemAlloc(&p, 4096) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_ranges: no device\n");
    return 1;
  }
  per_pair(pairs / 10, kind);  // warm-up: NVTX's first call loads the tool; names get interned
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) best = std::min(best, per_pair(pairs, kind));
  cuMemFree(p);
  std::printf("%.2f\n", best);
  return 0;
}

double run_config(const char* self, int kind, long pairs, const std::vector<std::string>& env) {
  std::string line = memtrace::bench::run_child(self, {std::to_string(kind), std::to_string(pairs)}, env,
                                                "/tmp/memtrace-bench-ranges-");
  return line.empty() ? 1e30 : std::atof(line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--child") == 0) return child(std::atoi(argv[2]), std::atol(argv[3]));
  long pairs = argc >= 2 ? std::atol(argv[1]) : 2000000;
  const char* preload = std::getenv("MEMTRACE_BENCH_PRELOAD");
  std::string lib = preload ? preload : MEMTRACE_LIB_PATH;
  std::vector<std::string> off = {"LD_PRELOAD=", "NVTX_INJECTION64_PATH="};
  std::vector<std::string> on = {"LD_PRELOAD=" + lib, "NVTX_INJECTION64_PATH=" + lib, "MEMTRACE_SUMMARY=0",
                                 "MEMTRACE_OUTPUT=/tmp/memtrace-bench-ranges-%p.pickle"};
  std::vector<std::string> on_nolog = on;
  on_nolog.push_back("MEMTRACE_RANGE_HISTORY=0");
  struct Row {
    const char* what;
    int kind;
    const std::vector<std::string>* env;
    double best = 1e30;
  };
  Row rows[] = {{"without memtrace (NVTX, no tool)", 0, &off},
                {"memtrace, push/pop of a name", 0, &on},
                {"memtrace, registered string", 1, &on},
                {"memtrace, 8 ranges deep", 2, &on},
                {"memtrace, MEMTRACE_RANGE_HISTORY=0", 0, &on_nolog}};
  // Configurations take turns, several rounds, each keeping its best: on a small shared machine
  // this separates the cost from scheduling noise.
  for (int round = 0; round < 3; ++round)
    for (Row& r : rows) r.best = std::min(r.best, run_config(argv[0], r.kind, pairs, *r.env));
  for (const Row& r : rows)
    if (r.best >= 1e30) {
      std::fprintf(stderr, "bench_ranges: configuration '%s' failed\n", r.what);
      return 1;
    }
  std::printf("NVTX range push+pop pair (%ld pairs, best of 3 rounds x 5 runs; target: under 50 ns per pair)\n",
              pairs);
  for (const Row& r : rows) std::printf("  %-38s %7.2f ns/pair\n", r.what, r.best);
  return 0;
}
