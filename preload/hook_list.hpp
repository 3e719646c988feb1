// Every name memtrace hooks, in one place. Exact names only: classifying by prefix is how
// other interposers ended up hijacking cuDNN (docs/interposition.md, "Why hooks match exact names,
// never a prefix").
#pragma once

// Driver entry points memtrace wraps and exports (modern ABIs only; the legacy unversioned
// cuMemAlloc/cuMemFree/... have 32-bit ABIs and are never exported).
#define MEMTRACE_DRIVER_WRAPPED(X)  \
  X(cuMemAlloc_v2)                  \
  X(cuMemAllocPitch_v2)             \
  X(cuMemFree_v2)                   \
  X(cuMemAllocManaged)              \
  X(cuMemAllocAsync)                \
  X(cuMemAllocAsync_ptsz)           \
  X(cuMemAllocFromPoolAsync)        \
  X(cuMemAllocFromPoolAsync_ptsz)   \
  X(cuMemFreeAsync)                 \
  X(cuMemFreeAsync_ptsz)            \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemRetainAllocationHandle)    \
  X(cuMemAllocHost_v2)              \
  X(cuMemHostAlloc)                 \
  X(cuMemFreeHost)                  \
  X(cuMemHostRegister_v2)           \
  X(cuMemHostUnregister)            \
  X(cuCtxDestroy_v2)                \
  X(cuDevicePrimaryCtxReset_v2)     \
  X(cuDevicePrimaryCtxRelease_v2)   \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuGetProcAddress)               \
  X(cuGetProcAddress_v2)            \
  X(cuMemGetAddressRange_v2)        \
  X(cuPointerGetAttribute)          \
  X(cuPointerGetAttributes)         \
  X(cuIpcGetMemHandle)

// Driver entry points memtrace only calls (real pointers, never wrapped or exported).
#define MEMTRACE_DRIVER_INTERNAL(X) \
  X(cuCtxGetCurrent)                \
  X(cuCtxGetDevice)                 \
  X(cuMemGetInfo_v2)                \
  X(cuStreamIsCapturing)            \
  X(cuStreamIsCapturing_ptsz)       \
  X(cuDevicePrimaryCtxGetState)     \
  X(cuCtxPushCurrent_v2)            \
  X(cuCtxPopCurrent_v2)             \
  X(cuCtxSynchronize)               \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemSetAccess)

// NCCL's public buffer and lifecycle calls: wrapped for attribution only (the memory itself
// is counted at the driver).
#define MEMTRACE_NCCL_WRAPPED(X) \
  X(ncclMemAlloc)                \
  X(ncclMemFree)                 \
  X(ncclCommRegister)            \
  X(ncclCommDeregister)          \
  X(ncclCommInitRank)            \
  X(ncclCommInitAll)             \
  X(ncclCommDestroy)

namespace memtrace::preload {

enum class Hook : int {
#define MEMTRACE_ENUM(n) n,
  MEMTRACE_DRIVER_WRAPPED(MEMTRACE_ENUM) MEMTRACE_DRIVER_INTERNAL(MEMTRACE_ENUM)
      MEMTRACE_NCCL_WRAPPED(MEMTRACE_ENUM)
#undef MEMTRACE_ENUM
  Count
};
constexpr int kHookCount = static_cast<int>(Hook::Count);

}  // namespace memtrace::preload
