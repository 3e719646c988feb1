// Behaviour that depends on a fresh process or on the SIMCUDA_* environment; each case runs
// in a child process (see run_child).
#include <cudaTypedefs.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "helpers.h"

using namespace simtest;

namespace {

void expect_child_passes(const std::string& name, const std::vector<std::string>& env, std::string* output = nullptr) {
  ChildResult r = run_child(name, env);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  if (output != nullptr) *output = r.output;
}

}  // namespace

// ---- init rules -----------------------------------------------------------------------------
TEST_CASE("child_init_rules", "[.child]") {
  int count = -1;
  CUdeviceptr p = 0;
  CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
  CHECK(cuMemAlloc(&p, 1024) == CUDA_ERROR_NOT_INITIALIZED);
  CHECK(cuCtxSynchronize() == CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  CHECK(cuDriverGetVersion(&version) == CUDA_SUCCESS);
  CHECK(version == 13000);
  void* fn = nullptr;
  CHECK(cuGetProcAddress("cuInit", &fn, 2000, 0, nullptr) == CUDA_SUCCESS);  // resolver works before cuInit
  CHECK(fn == reinterpret_cast<void*>(&cuInit));
  CHECK(cuInit(1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
  CHECK(cuInit(0) == CUDA_SUCCESS);
  CHECK(cuInit(0) == CUDA_SUCCESS);
  CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS);
  CHECK(count == 1);
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS);
  CHECK(total == (16ull << 30));  // the default capacity
  CHECK(cuMemAlloc(&p, 1024) == CUDA_ERROR_INVALID_CONTEXT);  // initialised, but no context
}

TEST_CASE("cuInit and the calls before it", "[init]") { expect_child_passes("child_init_rules", {}); }

TEST_CASE("child_no_devices", "[.child]") {
  CHECK(cuInit(0) == CUDA_ERROR_NO_DEVICE);
  int count = -1;
  CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
}

TEST_CASE("SIMCUDA_DEVICES=0 makes cuInit fail with CUDA_ERROR_NO_DEVICE", "[init][env]") {
  expect_child_passes("child_no_devices", {"SIMCUDA_DEVICES=0"});
}

// ---- environment syntax -------------------------------------------------------------------------
TEST_CASE("child_sizes", "[.child]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  int count = 0;
  CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS);
  CHECK(count == 16);
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, 15) == CUDA_SUCCESS);
  CHECK(total == 3ull * 1024 * 1024 * 1024);
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 16) == CUDA_ERROR_INVALID_DEVICE);
}

TEST_CASE("SIMCUDA_DEVICES and SIMCUDA_MEMORY with a suffix", "[env]") {
  expect_child_passes("child_sizes", {"SIMCUDA_DEVICES=16", "SIMCUDA_MEMORY=3g"});
}

TEST_CASE("child_defaults", "[.child]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  int count = 0;
  CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS);
  CHECK(count == 1);
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS);
  CHECK(total == (16ull << 30));
  CUcontext ctx;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
  CUdeviceptr p;
  CHECK(cuMemAlloc(&p, 1) == CUDA_SUCCESS);  // the malformed SIMCUDA_FAIL was ignored
  CHECK(cuMemAlloc(&p, 1) == CUDA_SUCCESS);
}

TEST_CASE("malformed variables warn once each and fall back to the defaults", "[env]") {
  std::string out;
  expect_child_passes("child_defaults",
                      {"SIMCUDA_DEVICES=two", "SIMCUDA_MEMORY=12Q", "SIMCUDA_FAIL=cuMemAlloc_v2@0"}, &out);
  for (const char* var : {"SIMCUDA_DEVICES", "SIMCUDA_MEMORY", "SIMCUDA_FAIL"}) {
    INFO(var);
    size_t first = out.find(std::string("simcuda: warning: ") + var);
    CHECK(first != std::string::npos);
    CHECK(out.find(std::string("simcuda: warning: ") + var, first + 1) == std::string::npos);
  }
  CHECK(out.find("default 1") != std::string::npos);
  CHECK(out.find("default 16G") != std::string::npos);
}

// ---- fault injection ------------------------------------------------------------------------
TEST_CASE("child_faults", "[.child]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  CUcontext ctx;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
  CUdeviceptr p[3] = {};
  CHECK(cuMemAlloc(&p[0], 4096) == CUDA_SUCCESS);
  CHECK(cuMemAlloc(&p[1], 4096) == CUDA_ERROR_OUT_OF_MEMORY);  // @2, default code
  CHECK(p[1] == 0);                                            // nothing was done
  CHECK(cuMemAlloc(&p[2], 4096) == CUDA_SUCCESS);
  CHECK(cuMemFree(p[0]) == CUDA_SUCCESS);
  CHECK(cuMemFree(p[2]) == CUDA_SUCCESS);

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, 2 << 20, &prop, 0) == static_cast<CUresult>(999));  // =999@1
  CHECK(cuMemCreate(&h, 2 << 20, &prop, 0) == CUDA_SUCCESS);
  CHECK(cuMemRelease(h) == CUDA_SUCCESS);

  // Every call of the _ptsz twin fails; the legacy-stream variant is a different ELF name.
  auto alloc_async_ptsz = resolve<PFN_cuMemAllocAsync_v11020_ptsz>("cuMemAllocAsync", 11020,
                                                                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  for (int i = 0; i < 3; ++i) CHECK(alloc_async_ptsz(&p[0], 1024, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocAsync(&p[0], 1024, nullptr) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(p[0], nullptr) == CUDA_SUCCESS);


  // Counting is per ELF name and thread-safe: exactly one of 8 x 25 calls is the 100th.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      cuCtxSetCurrent(ctx);
      for (int i = 0; i < 25; ++i) {
        CUdeviceptr q;
        CUresult r = cuMemAllocManaged(&q, 512, CU_MEM_ATTACH_GLOBAL);
        if (r == CUDA_ERROR_INVALID_DEVICE) {
          ++failures;
        } else if (r == CUDA_SUCCESS) {
          cuMemFree(q);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 1);
}

TEST_CASE("SIMCUDA_FAIL fails chosen entry points by ELF name, code and call number", "[faults][env]") {
  expect_child_passes("child_faults", {"SIMCUDA_FAIL=cuMemAlloc_v2@2,cuMemCreate=999@1,cuMemAllocAsync_ptsz,"
                                       "cuMemAllocManaged=101@100"});
}

// ---- call log -------------------------------------------------------------------------------------
TEST_CASE("child_log", "[.child]") {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  cuGetProcAddress("", &fn, 0, 0, nullptr);
  cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &st);
  cuGetProcAddress("cuMemAllocAsync", &fn, 12000, 2, &st);
  cuGetProcAddress("cuMemAlloc", &fn, 1000, 0, &st);
}

TEST_CASE("SIMCUDA_LOG records every resolver call", "[log][env]") {
  char path[] = "/tmp/simcuda-log-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  expect_child_passes("child_log", {std::string("SIMCUDA_LOG=") + path});
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  unlink(path);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "getproc \"\" 0 0 -> 500 1 0x0");
  CHECK(lines[1].rfind("getproc cuMemAlloc 12000 0 -> 0 0 0x", 0) == 0);
  CHECK(lines[1] != "getproc cuMemAlloc 12000 0 -> 0 0 0x0");
  CHECK(lines[2].rfind("getproc cuMemAllocAsync 12000 2 -> 0 0 0x", 0) == 0);
  CHECK(lines[3] == "getproc cuMemAlloc 1000 0 -> 500 2 0x0");
}
