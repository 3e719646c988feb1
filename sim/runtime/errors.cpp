// Error state: a per-thread last error that cudaGetLastError clears, plus the process-wide sticky error
// that real hardware faults leave behind (it cannot be cleared; every later call reports it).
#include <atomic>

#include "internal.h"

namespace simcudart {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{cudaSuccess};

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

}  // namespace

cudaError_t sticky_error() { return static_cast<cudaError_t>(g_sticky.load(std::memory_order_relaxed)); }

cudaError_t fail(cudaError_t e) {
  if (e == cudaSuccess) return e;
  if (is_sticky(e)) {
    int expected = cudaSuccess;
    g_sticky.compare_exchange_strong(expected, e);
  }
  t_last_error = e;
  return e;
}

cudaError_t check(CUresult r) {
  return r == CUDA_SUCCESS ? cudaSuccess : fail(simcuda_resolve::to_cuda_error(r));
}

}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaGetLastError(void) {
  if (cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

CUDART_EXPORT cudaError_t cudaPeekAtLastError(void) {
  if (cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  return t_last_error;
}

CUDART_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  const char* name = simcuda_resolve::cuda_error_name(error);
  return name ? name : "unrecognized error code";
}

CUDART_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  const char* text = simcuda_resolve::cuda_error_string(error);
  return text ? text : "unrecognized error code";
}
