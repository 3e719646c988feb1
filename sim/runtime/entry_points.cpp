// cudaGetDriverEntryPoint[ByVersion]: answered by the master resolver the resolution stage obtained from
// the driver's self-lookup ("cuGetProcAddress" at 12000), never by the pointer dlsym returned. That is how
// the real runtime does it, and it is why an interposer that swaps the self-lookup sees these lookups too.
#include "internal.h"

namespace simcudart {
namespace {

cudaError_t entry_point(const char* symbol, void** funcPtr, int version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* driverStatus, bool per_thread) {
  if (!symbol || !funcPtr) return fail(cudaErrorInvalidValue);
  cuuint64_t cu_flags = 0;
  switch (flags) {
    case cudaEnableDefault:
      cu_flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
      break;
    case cudaEnableLegacyStream: cu_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM; break;
    case cudaEnablePerThreadDefaultStream: cu_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; break;
    default: return fail(cudaErrorInvalidValue);
  }
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  *funcPtr = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = simcuda_resolve::driver_entry_point(symbol, version, cu_flags, funcPtr, &status);
  if (driverStatus) *driverStatus = static_cast<cudaDriverEntryPointQueryResult>(status);
  if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS) return cudaSuccess;
  // An unknown symbol or a too-old version is an answer, not an error: success with a NULL pointer.
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND) {
    *funcPtr = nullptr;
    return cudaSuccess;
  }
  return check(r);
}

// The unversioned form asks for the ABI this runtime was built against, capped by what the driver has.
int default_version() {
  int driver = simcuda_resolve::driver_version();
  return driver > 0 && driver < CUDART_VERSION ? driver : CUDART_VERSION;
}

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                                           unsigned int cudaVersion, unsigned long long flags,
                                                           enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus, false);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                                unsigned int cudaVersion, unsigned long long flags,
                                                                enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus, true);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult* driverStatus) {
  simcuda_resolve::ensure_initialized();
  return entry_point(symbol, funcPtr, default_version(), flags, driverStatus, false);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult* driverStatus) {
  simcuda_resolve::ensure_initialized();
  return entry_point(symbol, funcPtr, default_version(), flags, driverStatus, true);
}
