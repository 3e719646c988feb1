// Linear device memory and managed memory: cuMemAlloc_v2, cuMemAllocPitch_v2,
// cuMemAllocManaged, and cuMemFree_v2 (which also frees async allocations).
#include "preload/forward.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return forward_alloc<Hook::cuMemAlloc_v2, decltype(&::cuMemAlloc_v2)>(
      __builtin_return_address(0), OnOom::Record, bytesize, 0,
      [&](NewAlloc* a) {
        if (!dptr) return false;
        *a = {.addr = *dptr, .size = bytesize, .requested = bytesize, .kind = MemKind::Device};
        return true;
      },
      dptr, bytesize);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                             size_t WidthInBytes, size_t Height,
                                                             unsigned int ElementSizeBytes) {
  uint64_t requested = static_cast<uint64_t>(WidthInBytes) * Height;
  return forward_alloc<Hook::cuMemAllocPitch_v2, decltype(&::cuMemAllocPitch_v2)>(
      __builtin_return_address(0), OnOom::Record, requested, 0,
      [&](NewAlloc* a) {
        if (!dptr || !pPitch) return false;
        // The driver hands out pitch x height bytes: that is what the device gave up.
        *a = {.addr = *dptr, .size = static_cast<uint64_t>(*pPitch) * Height, .requested = requested,
              .kind = MemKind::Device};
        return true;
      },
      dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                            unsigned int flags) {
  return forward_alloc<Hook::cuMemAllocManaged, decltype(&::cuMemAllocManaged)>(
      __builtin_return_address(0), OnOom::Record, bytesize, 0,
      [&](NewAlloc* a) {
        if (!dptr) return false;
        *a = {.addr = *dptr, .size = bytesize, .requested = bytesize, .kind = MemKind::Managed};
        return true;
      },
      dptr, bytesize, flags);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  return forward_free<Hook::cuMemFree_v2, decltype(&::cuMemFree_v2)>(__builtin_return_address(0), dptr, 0, dptr);
}
