// Cost of an allocate+free pair served from memtrace's caching allocator, against the same pattern
// passed through each time: to a backend that calls malloc/free, and to the simulated driver
// (cuMemAlloc_v2 + cuMemFree_v2). One thread, then two and eight threads sharing one allocator.
//
//   bench_cache [pairs-per-thread]
//
// Figures: the median, over batches of 256 pairs, of the mean ns per pair (so a batch that pays
// a deferred-free synchronize or a new segment counts like any other), the mean over the whole
// run, and the aggregate pairs per microsecond (all threads' pairs over the wall clock). The
// median is per thread and hides contention; the aggregate shows it.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/caching/caching_allocator.hpp"

using namespace memtrace::caching;

namespace {

constexpr int kBatch = 256;

// Segments from the C library: what "a trivial backend" costs per call.
class HostBackend : public Backend {
 public:
  int allocate(size_t bytes, uintptr_t* out) override {
    void* p = std::malloc(bytes);
    if (!p) return kErrorOutOfMemory;
    *out = reinterpret_cast<uintptr_t>(p);
    return 0;
  }
  int free(uintptr_t base, size_t) override {
    std::free(reinterpret_cast<void*>(base));
    return 0;
  }
  int synchronize() override { return 0; }
  int mem_get_info(size_t* f, size_t* t) override {
    *f = *t = size_t{64} << 30;
    return 0;
  }
};

// Segments from the simulated driver, synchronize = cuCtxSynchronize: the allocator as the
// preload hooks will run it.
class SimBackend : public Backend {
 public:
  int allocate(size_t bytes, uintptr_t* out) override {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, bytes);
    *out = static_cast<uintptr_t>(p);
    return static_cast<int>(r);
  }
  int free(uintptr_t base, size_t) override { return static_cast<int>(cuMemFree(static_cast<CUdeviceptr>(base))); }
  int synchronize() override { return static_cast<int>(cuCtxSynchronize()); }
  int mem_get_info(size_t* f, size_t* t) override { return static_cast<int>(cuMemGetInfo(f, t)); }
};

CUcontext g_ctx = nullptr;

bool init_sim() {
  CUdevice dev;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&g_ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(g_ctx) == CUDA_SUCCESS;
}

struct Result {
  double median_ns = 0, mean_ns = 0, pairs_per_us = 0;
};

// Runs `pair` batches on `threads` threads at once; each thread does `pairs` pairs.
Result measure(int threads, long pairs, const std::function<void()>& pair) {
  const long batches = std::max<long>(1, pairs / kBatch);
  std::vector<std::vector<double>> per(threads);
  auto body = [&](int t) {
    if (g_ctx) cuCtxSetCurrent(g_ctx);
    for (long i = 0; i < batches / 10 * kBatch; ++i) pair();  // warm-up
    per[t].reserve(batches);
    for (long b = 0; b < batches; ++b) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) pair();
      auto t1 = std::chrono::steady_clock::now();
      per[t].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
    }
  };
  auto w0 = std::chrono::steady_clock::now();
  if (threads == 1) {
    body(0);
  } else {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back(body, t);
    for (auto& th : ts) th.join();
  }
  auto w1 = std::chrono::steady_clock::now();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.median_ns = all[all.size() / 2];
  double sum = 0;
  for (double x : all) sum += x;
  r.mean_ns = sum / static_cast<double>(all.size());
  r.pairs_per_us = static_cast<double>(threads) * static_cast<double>(batches * kBatch) /
                   std::chrono::duration<double, std::micro>(w1 - w0).count();
  return r;
}

void row(const char* name, size_t size, int threads, const Result& r) {
  std::printf("%-44s %8zu %3d %10.1f %10.1f %10.2f\n", name, size, threads, r.median_ns, r.mean_ns, r.pairs_per_us);
}

AllocConf conf_of(const char* s) { return parse_alloc_conf(s, nullptr); }

void caching_rows(const char* name, Backend& be, const char* conf, size_t size, long pairs) {
  for (int threads : {1, 2, 8}) {
    CachingAllocator a(be, conf_of(conf));
    Result r = measure(threads, pairs, [&] {
      MallocResult m = a.malloc(size);
      if (m.error != 0 || !a.free(m.ptr)) {
        std::fprintf(stderr, "bench_cache: allocation failed (%d)\n", m.error);
        std::exit(1);
      }
    });
    row(name, size, threads, r);
    if (threads == 8) {
      Stats s = a.stats();
      std::printf("%-44s   (%llu syncs, %llu segment allocs for %llu pairs)\n", "",
                  static_cast<unsigned long long>(s.backend_syncs), static_cast<unsigned long long>(s.backend_allocs),
                  static_cast<unsigned long long>(s.num_mallocs));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 1000000;
  const bool sim = init_sim();
  if (!sim) std::fprintf(stderr, "bench_cache: simulated device unavailable; its rows are skipped\n");
  std::printf("%-44s %8s %3s %10s %10s %10s\n", "pattern: malloc+free pair", "bytes", "thr", "median ns", "mean ns",
              "pairs/us");
  HostBackend host;
  SimBackend simbe;
  for (size_t size : {size_t{4096}, size_t{8} << 20}) {
    caching_rows("cache hit, deferred frees (default), host", host, "", size, pairs);
    caching_rows("cache hit, frees at once, host", host, "memtrace_deferred_free:False", size, pairs);
    if (sim) caching_rows("cache hit, deferred frees, sim driver", simbe, "", size, pairs);
    for (int threads : {1, 2, 8}) {
      row("passthrough: host malloc/free", size, threads, measure(threads, pairs / 4, [&] {
            uintptr_t p;
            if (host.allocate(size, &p) == 0) host.free(p, size);
          }));
    }
    if (sim) {
      for (int threads : {1, 2, 8}) {
        row("passthrough: sim cuMemAlloc_v2/cuMemFree_v2", size, threads, measure(threads, pairs / 20, [&] {
              CUdeviceptr p;
              if (cuMemAlloc(&p, size) == CUDA_SUCCESS) cuMemFree(p);
            }));
      }
    }
  }
  return 0;
}
