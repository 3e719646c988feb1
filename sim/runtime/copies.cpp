// Copies and fills, synchronous and stream-ordered. The direction picks the driver function, as in the
// real runtime; cudaMemcpyDefault relies on unified addressing (cuMemcpy / cuMemcpyAsync).
// Every call exists twice: the legacy-default-stream name and the per-thread one (`_ptds` / `_ptsz`,
// what nvcc --default-stream per-thread compiles to), each forwarding to its own driver twin.
#include <cstring>

#include "internal.h"

namespace simcudart {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const DriverTable& d = drv();
  switch (kind) {
    case cudaMemcpyHostToHost:
      // Ordered after earlier work like any synchronous copy.
      if (cudaError_t e = check(d.cuCtxSynchronize()); e != cudaSuccess) return e;
      std::memmove(dst, src, count);
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      return check((per_thread ? d.cuMemcpyHtoD_ptds : d.cuMemcpyHtoD)(dptr(dst), src, count));
    case cudaMemcpyDeviceToHost:
      return check((per_thread ? d.cuMemcpyDtoH_ptds : d.cuMemcpyDtoH)(dst, dptr(src), count));
    case cudaMemcpyDeviceToDevice:
      return check((per_thread ? d.cuMemcpyDtoD_ptds : d.cuMemcpyDtoD)(dptr(dst), dptr(src), count));
    case cudaMemcpyDefault:
      return check((per_thread ? d.cuMemcpy_ptds : d.cuMemcpy)(dptr(dst), dptr(src), count));
  }
  return fail(cudaErrorInvalidMemcpyDirection);
}

cudaError_t copy_async(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                       bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const DriverTable& d = drv();
  switch (kind) {
    case cudaMemcpyHostToHost:
      // The driver has no host-to-host copy; waiting for the stream keeps the ordering promise.
      if (cudaError_t e = check((per_thread ? d.cuStreamSynchronize_ptsz : d.cuStreamSynchronize)(stream));
          e != cudaSuccess)
        return e;
      std::memmove(dst, src, count);
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      return check((per_thread ? d.cuMemcpyHtoDAsync_ptsz : d.cuMemcpyHtoDAsync)(dptr(dst), src, count, stream));
    case cudaMemcpyDeviceToHost:
      return check((per_thread ? d.cuMemcpyDtoHAsync_ptsz : d.cuMemcpyDtoHAsync)(dst, dptr(src), count, stream));
    case cudaMemcpyDeviceToDevice:
      return check(
          (per_thread ? d.cuMemcpyDtoDAsync_ptsz : d.cuMemcpyDtoDAsync)(dptr(dst), dptr(src), count, stream));
    case cudaMemcpyDefault:
      return check((per_thread ? d.cuMemcpyAsync_ptsz : d.cuMemcpyAsync)(dptr(dst), dptr(src), count, stream));
  }
  return fail(cudaErrorInvalidMemcpyDirection);
}

cudaError_t fill(void* devPtr, int value, size_t count, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  const DriverTable& d = drv();
  return check(
      (per_thread ? d.cuMemsetD8_ptds : d.cuMemsetD8)(dptr(devPtr), static_cast<unsigned char>(value), count));
}

cudaError_t fill_async(void* devPtr, int value, size_t count, cudaStream_t stream, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  const DriverTable& d = drv();
  return check((per_thread ? d.cuMemsetD8Async_ptsz : d.cuMemsetD8Async)(
      dptr(devPtr), static_cast<unsigned char>(value), count, stream));
}

CUmemorytype side(cudaMemcpyKind kind, bool source) {
  switch (kind) {
    case cudaMemcpyHostToHost: return CU_MEMORYTYPE_HOST;
    case cudaMemcpyHostToDevice: return source ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    case cudaMemcpyDeviceToHost: return source ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    case cudaMemcpyDeviceToDevice: return CU_MEMORYTYPE_DEVICE;
    default: return CU_MEMORYTYPE_UNIFIED;
  }
}

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, bool per_thread) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidMemcpyDirection);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidPitchValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (width == 0 || height == 0) return cudaSuccess;
  const DriverTable& d = drv();
  auto copy2d = per_thread ? d.cuMemcpy2D_ptds : d.cuMemcpy2D;
  if (simcuda_resolve::is_missing(reinterpret_cast<const void*>(copy2d)) || kind == cudaMemcpyHostToHost) {
    // A driver without 2D copies still gets the right bytes, one row at a time.
    for (size_t row = 0; row < height; ++row) {
      cudaError_t e = copy(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch,
                           width, kind, per_thread);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  CUDA_MEMCPY2D desc{};
  desc.srcMemoryType = side(kind, true);
  desc.dstMemoryType = side(kind, false);
  if (desc.srcMemoryType == CU_MEMORYTYPE_HOST)
    desc.srcHost = src;
  else
    desc.srcDevice = dptr(src);
  if (desc.dstMemoryType == CU_MEMORYTYPE_HOST)
    desc.dstHost = dst;
  else
    desc.dstDevice = dptr(dst);
  desc.srcPitch = spitch;
  desc.dstPitch = dpitch;
  desc.WidthInBytes = width;
  desc.Height = height;
  return check(copy2d(&desc));
}

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, false);
}
CUDART_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, true);
}

CUDART_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream) {
  return copy_async(dst, src, count, kind, stream, false);
}
CUDART_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return copy_async(dst, src, count, kind, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return fill(devPtr, value, count, false);
}
CUDART_EXPORT cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return fill(devPtr, value, count, true);
}

CUDART_EXPORT cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return fill_async(devPtr, value, count, stream, false);
}
CUDART_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return fill_async(devPtr, value, count, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                       size_t height, enum cudaMemcpyKind kind) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, false);
}
CUDART_EXPORT cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch,
                                            size_t width, size_t height, enum cudaMemcpyKind kind) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, true);
}
