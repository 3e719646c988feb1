// cuGetProcAddress / cuGetProcAddress_v2: the resolver the CUDA runtime, cuda-python and
// NCCL use instead of dlsym. Requests name a base symbol ("cuMemAlloc"), the CUDA version the
// caller was built for and a stream mode; the answer is the newest variant introduced at or
// before that version (per-thread-stream variants preferred when asked for). The table's
// versions are those of the toolkit's cudaTypedefs.h: each entry is checked at compile time
// against the PFN_<base>_v<version>[_ptsz|_ptds] typedef of the same name, so a wrong
// version or a signature mismatch does not build.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "internal.h"

namespace sim {
namespace {

struct Entry {
  const char* base;
  int version;
  bool per_thread;
  void* fn;
  const char* elf_name;
};

template <typename Expected, typename Actual>
void* checked(Actual fn) {
  static_assert(std::is_same_v<Expected, Actual>, "signature differs from the toolkit's PFN typedef");
  return reinterpret_cast<void*>(fn);
}

#define SIM_ENTRY(base, ver, fn) Entry{#base, ver, false, checked<PFN_##base##_v##ver>(&fn), #fn}
#define SIM_ENTRY_PTSZ(base, ver, fn) Entry{#base, ver, true, checked<PFN_##base##_v##ver##_ptsz>(&fn), #fn}
#define SIM_ENTRY_PTDS(base, ver, fn) Entry{#base, ver, true, checked<PFN_##base##_v##ver##_ptds>(&fn), #fn}

std::vector<Entry>* make_table() {
  return new std::vector<Entry>{
      // init, version, errors, resolver
      SIM_ENTRY(cuInit, 2000, cuInit),
      SIM_ENTRY(cuDriverGetVersion, 2020, cuDriverGetVersion),
      SIM_ENTRY(cuGetExportTable, 3000, cuGetExportTable),
      SIM_ENTRY(cuGetErrorString, 6000, cuGetErrorString),
      SIM_ENTRY(cuGetErrorName, 6000, cuGetErrorName),
      SIM_ENTRY(cuGetProcAddress, 11030, cuGetProcAddress),
      SIM_ENTRY(cuGetProcAddress, 12000, cuGetProcAddress_v2),
      // devices
      SIM_ENTRY(cuDeviceGet, 2000, cuDeviceGet),
      SIM_ENTRY(cuDeviceGetCount, 2000, cuDeviceGetCount),
      SIM_ENTRY(cuDeviceGetName, 2000, cuDeviceGetName),
      SIM_ENTRY(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
      SIM_ENTRY(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
      SIM_ENTRY(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
      SIM_ENTRY(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
      SIM_ENTRY(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
      SIM_ENTRY(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
      SIM_ENTRY(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId),
      SIM_ENTRY(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),
      // contexts
      SIM_ENTRY(cuCtxCreate, 2000, cuCtxCreate),
      SIM_ENTRY(cuCtxCreate, 3020, cuCtxCreate_v2),
      SIM_ENTRY(cuCtxCreate, 11040, cuCtxCreate_v3),
      SIM_ENTRY(cuCtxCreate, 12050, cuCtxCreate_v4),
      SIM_ENTRY(cuCtxDestroy, 2000, cuCtxDestroy),
      SIM_ENTRY(cuCtxDestroy, 4000, cuCtxDestroy_v2),
      SIM_ENTRY(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
      SIM_ENTRY(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
      SIM_ENTRY(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
      SIM_ENTRY(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
      SIM_ENTRY(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
      SIM_ENTRY(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
      SIM_ENTRY(cuCtxGetDevice, 2000, cuCtxGetDevice),
      SIM_ENTRY(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
      SIM_ENTRY(cuCtxSynchronize, 2000, cuCtxSynchronize),
      SIM_ENTRY(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
      SIM_ENTRY(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
      SIM_ENTRY(cuCtxGetFlags, 7000, cuCtxGetFlags),
      SIM_ENTRY(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
      SIM_ENTRY(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
      SIM_ENTRY(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
      SIM_ENTRY(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
      SIM_ENTRY(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
      SIM_ENTRY(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
      SIM_ENTRY(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
      SIM_ENTRY(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
      SIM_ENTRY(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
      // linear, managed, info
      SIM_ENTRY(cuMemAlloc, 2000, cuMemAlloc),
      SIM_ENTRY(cuMemAlloc, 3020, cuMemAlloc_v2),
      SIM_ENTRY(cuMemAllocPitch, 2000, cuMemAllocPitch),
      SIM_ENTRY(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
      SIM_ENTRY(cuMemFree, 2000, cuMemFree),
      SIM_ENTRY(cuMemFree, 3020, cuMemFree_v2),
      SIM_ENTRY(cuMemAllocManaged, 6000, cuMemAllocManaged),
      SIM_ENTRY(cuMemGetInfo, 2000, cuMemGetInfo),
      SIM_ENTRY(cuMemGetInfo, 3020, cuMemGetInfo_v2),
      SIM_ENTRY(cuMemGetAddressRange, 2000, cuMemGetAddressRange),
      SIM_ENTRY(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
      SIM_ENTRY(cuPointerGetAttribute, 4000, cuPointerGetAttribute),
      SIM_ENTRY(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle),
      SIM_ENTRY(cuPointerGetAttributes, 7000, cuPointerGetAttributes),
      // pinned host
      SIM_ENTRY(cuMemAllocHost, 2000, cuMemAllocHost),
      SIM_ENTRY(cuMemAllocHost, 3020, cuMemAllocHost_v2),
      SIM_ENTRY(cuMemHostAlloc, 2020, cuMemHostAlloc),
      SIM_ENTRY(cuMemFreeHost, 2000, cuMemFreeHost),
      SIM_ENTRY(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2),
      SIM_ENTRY(cuMemHostGetFlags, 2030, cuMemHostGetFlags),
      SIM_ENTRY(cuMemHostRegister, 4000, cuMemHostRegister),
      SIM_ENTRY(cuMemHostRegister, 6050, cuMemHostRegister_v2),
      SIM_ENTRY(cuMemHostUnregister, 4000, cuMemHostUnregister),
      // stream-ordered allocation and pools
      SIM_ENTRY(cuMemAllocAsync, 11020, cuMemAllocAsync),
      SIM_ENTRY_PTSZ(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
      SIM_ENTRY(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
      SIM_ENTRY_PTSZ(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
      SIM_ENTRY(cuMemFreeAsync, 11020, cuMemFreeAsync),
      SIM_ENTRY_PTSZ(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
      SIM_ENTRY(cuMemPoolCreate, 11020, cuMemPoolCreate),
      SIM_ENTRY(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
      SIM_ENTRY(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
      SIM_ENTRY(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
      SIM_ENTRY(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
      SIM_ENTRY(cuMemPoolSetAccess, 11020, cuMemPoolSetAccess),
      SIM_ENTRY(cuMemPoolGetAccess, 11020, cuMemPoolGetAccess),
      SIM_ENTRY(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
      SIM_ENTRY(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
      SIM_ENTRY(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
      SIM_ENTRY(cuMemGetDefaultMemPool, 13000, cuMemGetDefaultMemPool),
      SIM_ENTRY(cuMemGetMemPool, 13000, cuMemGetMemPool),
      SIM_ENTRY(cuMemSetMemPool, 13000, cuMemSetMemPool),
      // virtual memory management
      SIM_ENTRY(cuMemCreate, 10020, cuMemCreate),
      SIM_ENTRY(cuMemRelease, 10020, cuMemRelease),
      SIM_ENTRY(cuMemAddressReserve, 10020, cuMemAddressReserve),
      SIM_ENTRY(cuMemAddressFree, 10020, cuMemAddressFree),
      SIM_ENTRY(cuMemMap, 10020, cuMemMap),
      SIM_ENTRY(cuMemUnmap, 10020, cuMemUnmap),
      SIM_ENTRY(cuMemSetAccess, 10020, cuMemSetAccess),
      SIM_ENTRY(cuMemGetAccess, 10020, cuMemGetAccess),
      SIM_ENTRY(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle),
      SIM_ENTRY(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
      SIM_ENTRY(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle),
      SIM_ENTRY(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle),
      SIM_ENTRY(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle),
      // memset / memcpy
      SIM_ENTRY(cuMemsetD8, 3020, cuMemsetD8_v2),
      SIM_ENTRY_PTDS(cuMemsetD8, 7000, cuMemsetD8_v2_ptds),
      SIM_ENTRY(cuMemsetD16, 3020, cuMemsetD16_v2),
      SIM_ENTRY_PTDS(cuMemsetD16, 7000, cuMemsetD16_v2_ptds),
      SIM_ENTRY(cuMemsetD32, 3020, cuMemsetD32_v2),
      SIM_ENTRY_PTDS(cuMemsetD32, 7000, cuMemsetD32_v2_ptds),
      SIM_ENTRY(cuMemsetD8Async, 3020, cuMemsetD8Async),
      SIM_ENTRY_PTSZ(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz),
      SIM_ENTRY(cuMemsetD16Async, 3020, cuMemsetD16Async),
      SIM_ENTRY_PTSZ(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz),
      SIM_ENTRY(cuMemsetD32Async, 3020, cuMemsetD32Async),
      SIM_ENTRY_PTSZ(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz),
      SIM_ENTRY(cuMemcpy, 4000, cuMemcpy),
      SIM_ENTRY_PTDS(cuMemcpy, 7000, cuMemcpy_ptds),
      SIM_ENTRY(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
      SIM_ENTRY_PTDS(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds),
      SIM_ENTRY(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
      SIM_ENTRY_PTDS(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds),
      SIM_ENTRY(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2),
      SIM_ENTRY_PTDS(cuMemcpyDtoD, 7000, cuMemcpyDtoD_v2_ptds),
      SIM_ENTRY(cuMemcpyAsync, 4000, cuMemcpyAsync),
      SIM_ENTRY_PTSZ(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz),
      SIM_ENTRY(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2),
      SIM_ENTRY_PTSZ(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz),
      SIM_ENTRY(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2),
      SIM_ENTRY_PTSZ(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz),
      SIM_ENTRY(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2),
      SIM_ENTRY_PTSZ(cuMemcpyDtoDAsync, 7000, cuMemcpyDtoDAsync_v2_ptsz),
      // streams and events
      SIM_ENTRY(cuStreamCreate, 2000, cuStreamCreate),
      SIM_ENTRY(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
      SIM_ENTRY(cuStreamDestroy, 2000, cuStreamDestroy),
      SIM_ENTRY(cuStreamDestroy, 4000, cuStreamDestroy_v2),
      SIM_ENTRY(cuStreamSynchronize, 2000, cuStreamSynchronize),
      SIM_ENTRY_PTSZ(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
      SIM_ENTRY(cuStreamQuery, 2000, cuStreamQuery),
      SIM_ENTRY_PTSZ(cuStreamQuery, 7000, cuStreamQuery_ptsz),
      SIM_ENTRY(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
      SIM_ENTRY_PTSZ(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz),
      SIM_ENTRY(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
      SIM_ENTRY_PTSZ(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz),
      SIM_ENTRY(cuStreamGetCtx, 9020, cuStreamGetCtx),
      SIM_ENTRY_PTSZ(cuStreamGetCtx, 9020, cuStreamGetCtx_ptsz),
      SIM_ENTRY(cuStreamGetFlags, 5050, cuStreamGetFlags),
      SIM_ENTRY_PTSZ(cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz),
      SIM_ENTRY(cuStreamGetPriority, 5050, cuStreamGetPriority),
      SIM_ENTRY_PTSZ(cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz),
      SIM_ENTRY(cuStreamAddCallback, 5000, cuStreamAddCallback),
      SIM_ENTRY_PTSZ(cuStreamAddCallback, 7000, cuStreamAddCallback_ptsz),
      SIM_ENTRY(cuLaunchHostFunc, 10000, cuLaunchHostFunc),
      SIM_ENTRY_PTSZ(cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz),
      SIM_ENTRY(cuEventCreate, 2000, cuEventCreate),
      SIM_ENTRY(cuEventRecord, 2000, cuEventRecord),
      SIM_ENTRY_PTSZ(cuEventRecord, 7000, cuEventRecord_ptsz),
      SIM_ENTRY(cuEventSynchronize, 2000, cuEventSynchronize),
      SIM_ENTRY(cuEventQuery, 2000, cuEventQuery),
      SIM_ENTRY(cuEventDestroy, 2000, cuEventDestroy),
      SIM_ENTRY(cuEventDestroy, 4000, cuEventDestroy_v2),
      SIM_ENTRY(cuEventElapsedTime, 2000, cuEventElapsedTime),
      SIM_ENTRY(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
      // modules and launches
      SIM_ENTRY(cuModuleLoad, 2000, cuModuleLoad),
      SIM_ENTRY(cuModuleLoadData, 2000, cuModuleLoadData),
      SIM_ENTRY(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
      SIM_ENTRY(cuModuleUnload, 2000, cuModuleUnload),
      SIM_ENTRY(cuModuleGetFunction, 2000, cuModuleGetFunction),
      SIM_ENTRY(cuLaunchKernel, 4000, cuLaunchKernel),
      SIM_ENTRY_PTSZ(cuLaunchKernel, 7000, cuLaunchKernel_ptsz),
  };
}

const std::vector<Entry>& table() {
  static std::atomic<const std::vector<Entry>*> slot{nullptr};
  return build_once(slot, make_table);
}

// Entries ordered by (base name, version) for binary search.
const std::vector<const Entry*>& index() {
  static std::atomic<const std::vector<const Entry*>*> slot{nullptr};
  return build_once(slot, [] {
    auto* v = new std::vector<const Entry*>();
    for (const Entry& e : table()) v->push_back(&e);
    std::sort(v->begin(), v->end(), [](const Entry* a, const Entry* b) {
      int c = std::strcmp(a->base, b->base);
      return c != 0 ? c < 0 : a->version < b->version;
    });
    return v;
  });
}

CUresult resolve(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags)) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const auto& idx = index();
  auto lo = std::lower_bound(idx.begin(), idx.end(), symbol,
                             [](const Entry* e, const char* s) { return std::strcmp(e->base, s) < 0; });
  auto hi = lo;
  while (hi != idx.end() && std::strcmp((*hi)->base, symbol) == 0) ++hi;
  if (lo == hi) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  // Per-thread variants only when asked for; otherwise, or when none is old enough, the
  // legacy-stream variant.
  const bool want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const Entry* best = nullptr;
  for (int pass = want_pt ? 0 : 1; pass < 2 && best == nullptr; ++pass) {
    const bool per_thread = pass == 0;
    for (auto it = lo; it != hi; ++it) {
      if ((*it)->per_thread == per_thread && (*it)->version <= version) best = *it;
    }
  }
  if (best == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult resolve_logged(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (config().log_fd < 0) return resolve(symbol, pfn, version, flags, status);
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = resolve(symbol, pfn, version, flags, &st);
  if (status != nullptr && r != CUDA_ERROR_INVALID_VALUE) *status = st;
  char line[512];
  const char* name = symbol == nullptr ? "(null)" : *symbol == '\0' ? "\"\"" : symbol;
  const uint64_t ptr = pfn != nullptr ? reinterpret_cast<uint64_t>(*pfn) : 0;
  int n = std::snprintf(line, sizeof line, "getproc %.200s %d %" PRIu64 " -> %d %d 0x%" PRIx64 "\n", name, version,
                        static_cast<uint64_t>(flags), static_cast<int>(r), static_cast<int>(st), ptr);
  if (n > 0) log_write(line, std::min<size_t>(static_cast<size_t>(n), sizeof line - 1));
  return r;
}

}  // namespace
}  // namespace sim

using namespace sim;

// Both work before cuInit: the runtime resolves everything, cuInit included, through them.
SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  SIM_FAULT_CHECK();
  return resolve_logged(symbol, pfn, cudaVersion, flags, nullptr);
}

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  SIM_FAULT_CHECK();
  return resolve_logged(symbol, pfn, cudaVersion, flags, symbolStatus);
}
