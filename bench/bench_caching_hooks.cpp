// An allocate+free pair through memtrace's hooks with MEMTRACE_ALLOCATOR=caching (served from the
// cache, a synchronize per batch of deferred frees) against the same pair passed through to the
// simulated driver, with and without stacks.
//
//   bench_caching_hooks [PAIRS]       runs every configuration in a child process and prints, per
//                                     configuration, the median over batches of 1000 pairs of the
//                                     ns per pair (and the 10th / 90th percentiles)
//   bench_caching_hooks --child N     one run (what the table re-executes with its environment)
//
// The pair is cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB, called 16 frames deep.
#include <cuda.h>
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

constexpr long kBatch = 1000;

__attribute__((noinline)) void batches(long n, std::vector<double>* out) {
  CUdeviceptr p = 0;
  for (long b = 0; b < n; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < kBatch; ++i) {
      if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
        std::fprintf(stderr, "bench_caching_hooks: allocation failed\n");
        std::exit(1);
      }
    }
    auto t1 = std::chrono::steady_clock::now();
    out->push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
  }
}

__attribute__((noinline)) void descend(int depth, long n, std::vector<double>* out) {
  if (depth <= 1) return batches(n, out);
  descend(depth - 1, n, out);
  asm volatile("" ::: "memory");
}

int child(long pairs) {
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_caching_hooks: no device\n");
    return 1;
  }
  std::vector<double> per_batch;
  descend(16, std::max<long>(pairs / kBatch / 10, 1), &per_batch);  // warm-up
  per_batch.clear();
  descend(16, std::max<long>(pairs / kBatch, 1), &per_batch);
  std::sort(per_batch.begin(), per_batch.end());
  auto at = [&](double q) { return per_batch[static_cast<size_t>(q * static_cast<double>(per_batch.size() - 1))]; };
  std::printf("%.1f %.1f %.1f\n", at(0.5), at(0.1), at(0.9));
  return 0;
}

struct Figures {
  double median = 0, p10 = 0, p90 = 0;
  bool ok = false;
};

Figures run_config(const char* self, long pairs, const std::vector<std::string>& env) {
  Figures f;
  std::string line = memtrace::bench::run_child(self, {std::to_string(pairs)}, env, "/tmp/memtrace-bench-");
  f.ok = !line.empty() && std::sscanf(line.c_str(), "%lf %lf %lf", &f.median, &f.p10, &f.p90) == 3;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) return child(std::atol(argv[2]));
  long pairs = argc >= 2 ? std::atol(argv[1]) : 200000;
  const char* preload = std::getenv("MEMTRACE_BENCH_PRELOAD");
  std::string ld = std::string("LD_PRELOAD=") + (preload ? preload : MEMTRACE_LIB_PATH);
  const std::vector<std::string> common = {"MEMTRACE_SUMMARY=0", "MEMTRACE_OUTPUT=/tmp/memtrace-bench-%p.pickle",
                                           "MEMTRACE_MAX_ENTRIES=100000"};
  struct Config {
    const char* name;
    std::vector<std::string> env;
  };
  const std::vector<Config> configs = {
      {"driver, no memtrace", {"LD_PRELOAD="}},
      {"passthrough, MEMTRACE_STACKS=none", {ld, "MEMTRACE_STACKS=none"}},
      {"caching, MEMTRACE_STACKS=none", {ld, "MEMTRACE_STACKS=none", "MEMTRACE_ALLOCATOR=caching"}},
      {"passthrough, native stacks (16 deep)", {ld, "MEMTRACE_STACKS=native"}},
      {"caching, native stacks (16 deep)", {ld, "MEMTRACE_STACKS=native", "MEMTRACE_ALLOCATOR=caching"}},
  };
  std::printf("cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB on the simulated device, %ld pairs per configuration\n", pairs);
  std::printf("ns per pair over batches of %ld pairs: median (p10 .. p90)\n", kBatch);
  for (const Config& c : configs) {
    std::vector<std::string> env = c.env;
    if (c.env.size() > 1) env.insert(env.end(), common.begin(), common.end());
    Figures f = run_config(argv[0], pairs, env);
    if (!f.ok) {
      std::printf("  %-38s failed\n", c.name);
      continue;
    }
    std::printf("  %-38s %9.1f  (%.1f .. %.1f)\n", c.name, f.median, f.p10, f.p90);
  }
  return 0;
}
