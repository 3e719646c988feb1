// An allocate+free pair through memtrace's hooks with MEMTRACE_ALLOCATOR=caching (served from the
// cache, a synchronize per batch of deferred frees) against the same pair passed through to the
// simulated driver, with and without stacks.
//
//   bench_caching_hooks [PAIRS]        runs every configuration in a child process and prints, per
//                                      configuration, the median over batches of 1000 pairs of the
//                                      ns per pair (and the 10th / 90th percentiles) on one thread,
//                                      then the aggregate pairs per microsecond (wall clock, all
//                                      threads' pairs) on 1, 2 and 8 threads
//   bench_caching_hooks --child N T    one run on T threads, N pairs each (what the table re-executes
//                                      with its environment)
//
// The pair is cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB, called 16 frames deep. A per-batch median
// hides contention between threads; the aggregate figure shows it.
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

int child(long pairs, int threads) {
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_caching_hooks: no device\n");
    return 1;
  }
  std::vector<std::vector<double>> per(threads);
  auto body = [&](int t) {
    cuCtxSetCurrent(ctx);
    descend(16, std::max<long>(pairs / kBatch / 10, 1), &per[t]);  // warm-up
    per[t].clear();
  };
  auto timed = [&](int t) {
    cuCtxSetCurrent(ctx);
    descend(16, std::max<long>(pairs / kBatch, 1), &per[t]);
  };
  auto on_all = [&](auto&& fn) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back(fn, t);
    for (auto& th : ts) th.join();
  };
  on_all(body);
  auto w0 = std::chrono::steady_clock::now();
  on_all(timed);
  auto w1 = std::chrono::steady_clock::now();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto at = [&](double q) { return all[static_cast<size_t>(q * static_cast<double>(all.size() - 1))]; };
  const double done = static_cast<double>(threads) * static_cast<double>(std::max<long>(pairs / kBatch, 1) * kBatch);
  std::printf("%.1f %.1f %.1f %.2f\n", at(0.5), at(0.1), at(0.9),
              done / std::chrono::duration<double, std::micro>(w1 - w0).count());
  return 0;
}

struct Figures {
  double median = 0, p10 = 0, p90 = 0, pairs_per_us = 0;
  bool ok = false;
};

Figures run_config(const char* self, long pairs, int threads, const std::vector<std::string>& env) {
  Figures f;
  std::string line =
      memtrace::bench::run_child(self, {std::to_string(pairs), std::to_string(threads)}, env, "/tmp/memtrace-bench-");
  f.ok = !line.empty() &&
         std::sscanf(line.c_str(), "%lf %lf %lf %lf", &f.median, &f.p10, &f.p90, &f.pairs_per_us) == 4;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--child") == 0) return child(std::atol(argv[2]), std::atoi(argv[3]));
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
  std::printf("cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB on the simulated device, %ld pairs per run, split over its threads\n", pairs);
  std::printf("one thread: ns per pair over batches of %ld pairs, median (p10 .. p90); then aggregate pairs/us\n",
              kBatch);
  std::printf("  %-38s %9s  %-16s %8s %8s %8s\n", "", "ns/pair", "(p10 .. p90)", "1 thr", "2 thr", "8 thr");
  for (const Config& c : configs) {
    std::vector<std::string> env = c.env;
    if (c.env.size() > 1) env.insert(env.end(), common.begin(), common.end());
    Figures f[3];
    const int threads[3] = {1, 2, 8};
    for (int i = 0; i < 3; ++i) f[i] = run_config(argv[0], pairs / threads[i], threads[i], env);
    if (!f[0].ok) {
      std::printf("  %-38s failed\n", c.name);
      continue;
    }
    char range[40];
    std::snprintf(range, sizeof range, "(%.1f .. %.1f)", f[0].p10, f[0].p90);
    std::printf("  %-38s %9.1f  %-16s %8.2f %8.2f %8.2f\n", c.name, f[0].median, range, f[0].pairs_per_us,
                f[1].ok ? f[1].pairs_per_us : 0.0, f[2].ok ? f[2].pairs_per_us : 0.0);
  }
  return 0;
}
