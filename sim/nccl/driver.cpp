// NCCL's driver table. The private runtime stage runs first (its own dlopen / dlsym("cuGetProcAddress_v2")
// / probe / self-lookups), then each pointer is asked of that stage's master resolver, as NCCL's
// cudaPfnFuncLoader does through cudaGetDriverEntryPointByVersion(name, &pfn, version, cudaEnableDefault).
#include <mutex>

#include "internal.h"

namespace simnccl {
namespace {

constinit Pfn g_pfn{};
constinit ncclResult_t g_load_result = ncclSuccess;
constinit int g_device_count = 0;
std::once_flag g_load_once;

ncclResult_t load_symbol(const char* name, int version, void** slot) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = simcuda_resolve::driver_entry_point(name, version, CU_GET_PROC_ADDRESS_DEFAULT, slot, &status);
  if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
    *slot = nullptr;
    return fail(ncclUnhandledCudaError, "failed to resolve driver symbol %s at version %d", name, version);
  }
  return ncclSuccess;
}

void load() {
  cudaError_t e = simcuda_resolve::ensure_initialized();
  if (e != cudaSuccess) {
    g_load_result = fail(ncclUnhandledCudaError, "CUDA driver initialization failed: %s",
                         simcuda_resolve::cuda_error_name(e));
    return;
  }
#define SIMNCCL_LOAD(name, version, type)                                                   \
  if (ncclResult_t r = load_symbol(#name, version, reinterpret_cast<void**>(&g_pfn.name)); \
      r != ncclSuccess) {                                                                 \
    g_load_result = r;                                                                    \
    return;                                                                               \
  }
  SIMNCCL_DRIVER_FUNCTIONS(SIMNCCL_LOAD)
#undef SIMNCCL_LOAD
  int n = 0;
  CUresult r = g_pfn.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS) {
    g_load_result = cu_fail(r, "cuDeviceGetCount");
    return;
  }
  g_device_count = n;
}

}  // namespace

ncclResult_t load_driver() {
  std::call_once(g_load_once, load);
  return g_load_result;
}

const Pfn& pfn() { return g_pfn; }

int device_count() { return g_device_count; }

ScopedContext::ScopedContext(CUcontext ctx) {
  if (g_pfn.cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) saved_ = nullptr;
  if (saved_ != ctx) switched_ = g_pfn.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

ScopedContext::~ScopedContext() {
  if (switched_) g_pfn.cuCtxSetCurrent(saved_);
}

ncclResult_t current_device(int* ordinal) {
  CUcontext ctx = nullptr;
  SIMNCCL_CU(g_pfn.cuCtxGetCurrent(&ctx));
  if (!ctx) {
    *ordinal = 0;
    return ncclSuccess;
  }
  CUdevice dev = 0;
  SIMNCCL_CU(g_pfn.cuCtxGetDevice(&dev));
  for (int i = 0; i < g_device_count; ++i) {
    CUdevice d = 0;
    if (g_pfn.cuDeviceGet(&d, i) == CUDA_SUCCESS && d == dev) {
      *ordinal = i;
      return ncclSuccess;
    }
  }
  return fail(ncclInternalError, "current context's device is unknown");
}

ncclResult_t retain_primary(int ordinal, CUcontext* ctx) {
  CUdevice dev = 0;
  SIMNCCL_CU(g_pfn.cuDeviceGet(&dev, ordinal));
  SIMNCCL_CU(g_pfn.cuDevicePrimaryCtxRetain(ctx, dev));
  return ncclSuccess;
}

void release_primary(int ordinal) {
  CUdevice dev = 0;
  if (g_pfn.cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS) g_pfn.cuDevicePrimaryCtxRelease(dev);
}

ncclResult_t ensure_context(int* ordinal) {
  if (ncclResult_t r = current_device(ordinal); r != ncclSuccess) return r;
  CUcontext ctx = nullptr;
  SIMNCCL_CU(g_pfn.cuCtxGetCurrent(&ctx));
  if (ctx) return ncclSuccess;
  // The static runtime would retain the primary context here and keep it for the process's life.
  if (ncclResult_t r = retain_primary(*ordinal, &ctx); r != ncclSuccess) return r;
  SIMNCCL_CU(g_pfn.cuCtxSetCurrent(ctx));
  return ncclSuccess;
}

}  // namespace simnccl
