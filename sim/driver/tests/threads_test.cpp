// Concurrency: allocations and frees from many threads never overlap and account exactly.
#include <cudaTypedefs.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "helpers.h"

using namespace simtest;

TEST_CASE("8 threads allocate, write, verify and free concurrently", "[threads]") {
  CUcontext ctx = use_primary(0);
  CU_OK(cuCtxSynchronize());
  const size_t free_before = free_bytes();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures;
      std::mt19937 rng(static_cast<unsigned>(t));
      CUstream s;
      if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++failures;
      std::vector<std::pair<CUdeviceptr, size_t>> live;
      for (int i = 0; i < 400; ++i) {
        if (live.size() < 16 && (rng() % 3 != 0 || live.empty())) {
          const size_t size = 1 + rng() % (96 * 1024);
          CUdeviceptr p = 0;
          const bool async = rng() % 4 == 0;
          CUresult r = async ? cuMemAllocAsync(&p, size, s) : cuMemAlloc(&p, size);
          if (r != CUDA_SUCCESS) {
            ++failures;
            continue;
          }
          std::memset(reinterpret_cast<void*>(p), t + 1, size);
          live.emplace_back(p, size);
        } else {
          const size_t k = rng() % live.size();
          auto [p, size] = live[k];
          live.erase(live.begin() + static_cast<long>(k));
          const auto* bytes = reinterpret_cast<const unsigned char*>(p);
          if (bytes[0] != t + 1 || bytes[size / 2] != t + 1 || bytes[size - 1] != t + 1) ++failures;
          CUresult r = rng() % 2 == 0 ? cuMemFree(p) : cuMemFreeAsync(p, s);
          if (r != CUDA_SUCCESS) ++failures;
        }
      }
      for (auto [p, size] : live) {
        if (cuMemFree(p) != CUDA_SUCCESS) ++failures;
      }
      if (cuStreamSynchronize(s) != CUDA_SUCCESS || cuStreamDestroy(s) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CU_OK(cuCtxSynchronize());
  CHECK(free_bytes() == free_before);
}
