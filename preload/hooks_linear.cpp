// Linear device memory and managed memory: cuMemAlloc_v2, cuMemAllocPitch_v2,
// cuMemAllocManaged, and cuMemFree_v2 (which also frees async allocations). With
// MEMTRACE_ALLOCATOR=caching the first three of these are served by memtrace's caching allocator
// (preload/caching_mode.hpp); cuMemAllocManaged always goes to the driver.
#include "preload/caching_mode.hpp"
#include "preload/forward.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (caching_mode::enabled()) {
    CUresult r;
    if (caching_mode::try_alloc(dptr, bytesize, __builtin_return_address(0), &r)) return r;
  }
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
  if (caching_mode::enabled()) {
    // The driver's checks and pitch, then pitch x height bytes from the cache. The pitch is the
    // width rounded up to 512 bytes: the simulated driver's choice (sim/driver/linear.cpp,
    // kLinearAlign), and the texture pitch alignment real devices report.
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    constexpr size_t kPitchAlign = 512;
    if (WidthInBytes > SIZE_MAX - (kPitchAlign - 1)) return CUDA_ERROR_OUT_OF_MEMORY;
    const size_t pitch = (WidthInBytes + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
    if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r;
    if (caching_mode::try_alloc(dptr, pitch * Height, __builtin_return_address(0), &r)) {
      if (r == CUDA_SUCCESS) *pPitch = pitch;
      return r;
    }
  }
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
  if (caching_mode::any_allocator()) {
    CUresult r;
    if (caching_mode::try_free(dptr, __builtin_return_address(0), &r)) return r;
  }
  return forward_free<Hook::cuMemFree_v2, decltype(&::cuMemFree_v2)>(__builtin_return_address(0), dptr, 0, dptr);
}
