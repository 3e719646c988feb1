// Error reporting: result strings and the message ncclGetLastError returns.
#include <cstdarg>
#include <cstdio>

#include "internal.h"

namespace simnccl {
namespace {
thread_local char t_last_error[512] = "";
}

ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(t_last_error, sizeof(t_last_error), fmt, args);
  va_end(args);
  return r;
}

ncclResult_t cu_fail(CUresult r, const char* what) {
  const char* name = simcuda_resolve::cuda_error_name(simcuda_resolve::to_cuda_error(r));
  return fail(ncclUnhandledCudaError, "Cuda failure %d '%s' in %s", static_cast<int>(r), name ? name : "?", what);
}

}  // namespace simnccl

using namespace simnccl;

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) { return t_last_error; }

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
