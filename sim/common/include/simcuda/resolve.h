// The CUDA runtime's driver-resolution stage, shared by the simulated libcudart and by the private runtime
// copy inside the simulated libnccl (the real NCCL links cudart statically; each copy resolves on its own).
//
// Everything here has hidden visibility: two copies in one process must not see each other, and an
// LD_PRELOAD library must find these lookups only through the public doors (dlsym, cuGetProcAddress_v2).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#define SIMCUDA_HIDDEN __attribute__((visibility("hidden")))

namespace simcuda_resolve SIMCUDA_HIDDEN {

// Typed driver pointers, filled once by ensure_initialized(). A symbol the driver lacks holds a stub that
// returns CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, so callers never test for NULL.
struct DriverTable {
  PFN_cuInit_v2000 cuInit;
  PFN_cuGetProcAddress_v11030 cuGetProcAddress_v11030;
  PFN_cuGetProcAddress_v12000 cuGetProcAddress_v12000;  // the master resolver
#define SIM_DRIVER_FN(slot, base, version, flags, pfn, elf) pfn slot;
#include "simcuda/driver_functions.inc"
#undef SIM_DRIVER_FN
};

// Runs the resolution stage on first use (thread-safe, once per process for this copy). Returns cudaSuccess,
// or the runtime error the stage ended with; that error is permanent, as in the real runtime.
cudaError_t ensure_initialized();

// Valid only after ensure_initialized() returned cudaSuccess.
const DriverTable& driver();

// The version cuDriverGetVersion reported (0 if the driver could not be loaded).
int driver_version();

// cudaGetDriverEntryPoint[ByVersion]: a lookup through the master resolver (initialises on first use).
// Returns the driver's CUresult untouched; *pfn and *status are what the driver wrote.
CUresult driver_entry_point(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn,
                            CUdriverProcAddressQueryResult* status);

// True when fn is the stub standing in for a symbol the driver did not provide.
bool is_missing(const void* fn);

// CUresult -> cudaError_t, the way the runtime reports driver failures (CUDA_ERROR_OUT_OF_MEMORY becomes
// cudaErrorMemoryAllocation, and so on).
cudaError_t to_cuda_error(CUresult r);

// The runtime's error tables (cudaGetErrorName / cudaGetErrorString). Unknown codes yield nullptr.
bool is_known_cuda_error(int code);
const char* cuda_error_name(int code);
const char* cuda_error_string(int code);

}  // namespace simcuda_resolve
