// Devices, error strings and contexts.
#include <cstring>
#include <thread>

#include "helpers.h"

using namespace simtest;

TEST_CASE("device queries", "[devices]") {
  use_primary(0);
  int count = 0;
  CU_OK(cuDeviceGetCount(&count));
  CHECK(count == 2);
  CUdevice dev = -1;
  CU_OK(cuDeviceGet(&dev, 1));
  CHECK(dev == 1);
  CHECK(cuDeviceGet(&dev, 2) == CUDA_ERROR_INVALID_DEVICE);

  char name[64];
  CU_OK(cuDeviceGetName(name, sizeof name, 1));
  CHECK(std::string(name) == "memtrace simulated device 1");
  size_t total = 0;
  CU_OK(cuDeviceTotalMem(&total, 0));
  CHECK(total == kCapacity);

  auto attr = [](CUdevice_attribute a, int d = 0) {
    int v = -12345;
    REQUIRE(cuDeviceGetAttribute(&v, a, d) == CUDA_SUCCESS);
    return v;
  };
  CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == 132);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED) == 0);  // unknown to the simulation: 0
  int v;
  CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);

  CUuuid u0, u1;
  CU_OK(cuDeviceGetUuid(&u0, 0));
  CU_OK(cuDeviceGetUuid(&u1, 1));
  CHECK(std::memcmp(u0.bytes, u1.bytes, sizeof u0.bytes) != 0);

  char bus[32];
  CU_OK(cuDeviceGetPCIBusId(bus, sizeof bus, 1));
  CHECK(std::string(bus) == "0000:02:00.0");
  CU_OK(cuDeviceGetByPCIBusId(&dev, bus));
  CHECK(dev == 1);

  int can = -1;
  CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
  CHECK(can == 1);
  CU_OK(cuDeviceCanAccessPeer(&can, 0, 0));
  CHECK(can == 0);
}

TEST_CASE("error names and strings", "[errors]") {
  const char* s = nullptr;
  CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(std::string(s) == "CUDA_ERROR_OUT_OF_MEMORY");
  CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(std::string(s).find("unable to allocate enough memory") != std::string::npos);
  CU_OK(cuGetErrorName(CUDA_ERROR_NOT_FOUND, &s));
  CHECK(std::string(s) == "CUDA_ERROR_NOT_FOUND");
  CHECK(cuGetErrorName(static_cast<CUresult>(12345), &s) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("context stack, destroy and the destroyed-context tombstone", "[contexts]") {
  use_primary(0);
  CUcontext primary;
  CU_OK(cuCtxGetCurrent(&primary));

  CUcontext ctx = nullptr;
  CU_OK(cuCtxCreate(&ctx, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, 1));
  CUcontext cur;
  CU_OK(cuCtxGetCurrent(&cur));
  CHECK(cur == ctx);  // created contexts are pushed
  CUdevice dev;
  CU_OK(cuCtxGetDevice(&dev));
  CHECK(dev == 1);
  unsigned flags = 0;
  CU_OK(cuCtxGetFlags(&flags));
  CHECK(flags == CU_CTX_SCHED_BLOCKING_SYNC);
  unsigned api = 0;
  CU_OK(cuCtxGetApiVersion(ctx, &api));
  CHECK(api == 3020);

  CUcontext popped;
  CU_OK(cuCtxPopCurrent(&popped));
  CHECK(popped == ctx);
  CU_OK(cuCtxGetCurrent(&cur));
  CHECK(cur == primary);
  CU_OK(cuCtxPushCurrent(ctx));

  CHECK(cuCtxCreate(&cur, nullptr, 0x100, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxCreate(&cur, nullptr, 0, 7) == CUDA_ERROR_INVALID_DEVICE);

  // Another thread that made ctx current sees the tombstone once it is destroyed.
  CUresult seen_before = CUDA_ERROR_UNKNOWN, seen_after = CUDA_ERROR_UNKNOWN;
  std::atomic<int> phase{0};
  std::thread other([&] {
    cuCtxSetCurrent(ctx);
    CUdevice d;
    seen_before = cuCtxGetDevice(&d);
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    seen_after = cuCtxGetDevice(&d);
  });
  while (phase.load() != 1) std::this_thread::yield();
  CU_OK(cuCtxDestroy(ctx));
  phase = 2;
  other.join();
  CHECK(seen_before == CUDA_SUCCESS);
  CHECK(seen_after == CUDA_ERROR_CONTEXT_IS_DESTROYED);

  CU_OK(cuCtxGetCurrent(&cur));
  CHECK(cur == primary);  // destroy popped it from this thread
  CHECK(cuCtxDestroy(ctx) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxPushCurrent(ctx) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxDestroy(primary) == CUDA_ERROR_INVALID_CONTEXT);

  // A thread without a context.
  CUresult no_ctx = CUDA_SUCCESS;
  std::thread bare([&] {
    CUdeviceptr p;
    no_ctx = cuMemAlloc(&p, 16);
  });
  bare.join();
  CHECK(no_ctx == CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(cuCtxSetCurrent(nullptr));
  CHECK(cuCtxPopCurrent(&popped) == CUDA_ERROR_INVALID_CONTEXT);
  use_primary(0);
}

TEST_CASE("primary context retain, flags, release and reset", "[contexts]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  unsigned flags = 0;
  int active = -1;
  CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  const int before = active;

  CUcontext a, b;
  CU_OK(cuDevicePrimaryCtxRetain(&a, 1));
  CU_OK(cuDevicePrimaryCtxRetain(&b, 1));
  CHECK(a == b);
  CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  CHECK(active == 1);

  // The pre-11.0 entry point refuses to change flags of an active primary context.
  void* fn = nullptr;
  REQUIRE(cuGetProcAddress("cuDevicePrimaryCtxSetFlags", &fn, 7000, 0, nullptr) == CUDA_SUCCESS);
  auto set_flags_v1 = reinterpret_cast<CUresult (*)(CUdevice, unsigned)>(fn);
  CHECK(set_flags_v1(1, CU_CTX_SCHED_YIELD) == CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE);
  CU_OK(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_YIELD));
  CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  CHECK(flags == CU_CTX_SCHED_YIELD);

  CU_OK(cuCtxPushCurrent(a));
  CU_OK(cuCtxSynchronize());  // settle pool reserve left by other tests
  size_t total = 0, free_before = free_bytes();
  CUdeviceptr p;
  CU_OK(cuMemAlloc(&p, 3 * kMiB));
  CU_OK(cuDevicePrimaryCtxRelease(1));
  size_t free_now = 0;
  CU_OK(cuMemGetInfo(&free_now, &total));  // still retained: still usable
  CHECK(free_now == free_before - 3 * kMiB);
  if (before == 0) {
    CU_OK(cuDevicePrimaryCtxRelease(1));  // last reference: the context dies with its memory
    CUdeviceptr q;
    CHECK(cuMemAlloc(&q, 16) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_OK(cuDevicePrimaryCtxRetain(&b, 1));
    CHECK(b == a);  // same handle, reactivated
    CHECK(free_bytes() == free_before);
    CHECK(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuDevicePrimaryCtxRelease(1));
  } else {
    CU_OK(cuMemFree(p));
  }
  CUcontext popped;
  CU_OK(cuCtxPopCurrent(&popped));

  // Reset frees everything but keeps the references.
  CU_OK(cuDevicePrimaryCtxRetain(&a, 1));
  CU_OK(cuCtxPushCurrent(a));
  CU_OK(cuCtxSynchronize());
  free_before = free_bytes();
  CU_OK(cuMemAlloc(&p, 5 * kMiB));
  CU_OK(cuMemAllocAsync(&p, 5 * kMiB, nullptr));
  CHECK(free_bytes() < free_before);
  CU_OK(cuDevicePrimaryCtxReset(1));
  CHECK(free_bytes() == free_before);
  CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  CHECK(active == 1);
  CU_OK(cuMemAlloc(&p, 16));
  CU_OK(cuMemFree(p));
  CU_OK(cuCtxPopCurrent(&popped));
  CU_OK(cuDevicePrimaryCtxRelease(1));
  CU_OK(cuDevicePrimaryCtxSetFlags(1, 0));
}

TEST_CASE("destroying a context frees its allocations", "[contexts][memory]") {
  use_primary(1);
  CU_OK(cuCtxSynchronize());
  const size_t free_before = free_bytes();
  CUcontext ctx;
  CU_OK(cuCtxCreate(&ctx, nullptr, 0, 1));
  CUdeviceptr lin, managed, pitched, async_ptr;
  size_t pitch;
  void* host = nullptr;
  CU_OK(cuMemAlloc(&lin, 8 * kMiB));
  CU_OK(cuMemAllocManaged(&managed, 2 * kMiB, CU_MEM_ATTACH_GLOBAL));
  CU_OK(cuMemAllocPitch(&pitched, &pitch, 1000, 100, 4));
  CU_OK(cuMemHostAlloc(&host, 1 << 16, 0));
  CU_OK(cuMemAllocAsync(&async_ptr, 1 * kMiB, nullptr));
  CHECK(free_bytes() < free_before);
  CU_OK(cuCtxDestroy(ctx));

  use_primary(1);
  // Per cuda.h, pool allocations belong to no context and survive it.
  CUdeviceptr base;
  size_t size;
  CU_OK(cuMemGetAddressRange(&base, &size, async_ptr));
  CU_OK(cuMemFree(async_ptr));
  CU_OK(cuCtxSynchronize());  // pool reserve above the threshold goes back
  CHECK(free_bytes() == free_before);
  CHECK(cuMemGetAddressRange(&base, &size, lin) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuMemFree(lin) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFreeHost(host) == CUDA_ERROR_INVALID_VALUE);
  use_primary(0);
}
