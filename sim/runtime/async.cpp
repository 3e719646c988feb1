// Stream-ordered allocation and memory pools (cudaMallocAsync family). The `_ptsz` exports are what
// per-thread-default-stream programs link against; they reach the driver's `_ptsz` entry points so an
// interposer can tell the two apart.
#include <cstddef>

#include "internal.h"

namespace simcudart {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// The runtime and driver pool structures are declared separately but are the same record.
static_assert(sizeof(cudaMemPoolProps) == sizeof(CUmemPoolProps));
static_assert(offsetof(cudaMemPoolProps, location) == offsetof(CUmemPoolProps, location));
static_assert(offsetof(cudaMemPoolProps, maxSize) == offsetof(CUmemPoolProps, maxSize));
static_assert(offsetof(cudaMemPoolProps, usage) == offsetof(CUmemPoolProps, usage));

cudaError_t malloc_async(void** devPtr, size_t size, cudaStream_t stream, bool per_thread) {
  if (!devPtr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  const DriverTable& d = drv();
  if (cudaError_t e = check((per_thread ? d.cuMemAllocAsync_ptsz : d.cuMemAllocAsync)(&p, size, stream));
      e != cudaSuccess)
    return e;
  *devPtr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t free_async(void* devPtr, cudaStream_t stream, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!devPtr) return cudaSuccess;
  const DriverTable& d = drv();
  return check((per_thread ? d.cuMemFreeAsync_ptsz : d.cuMemFreeAsync)(dptr(devPtr), stream));
}

cudaError_t malloc_from_pool_async(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                                   bool per_thread) {
  if (!ptr || !pool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  const DriverTable& d = drv();
  if (cudaError_t e = check(
          (per_thread ? d.cuMemAllocFromPoolAsync_ptsz : d.cuMemAllocFromPoolAsync)(&p, size, pool, stream));
      e != cudaSuccess)
    return e;
  *ptr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}

bool valid_ordinal(int device) { return device >= 0 && device < device_count(); }

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, false);
}
CUDART_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, true);
}

CUDART_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, false);
}
CUDART_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, true);
}

CUDART_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                                  cudaStream_t stream) {
  return malloc_from_pool_async(ptr, size, memPool, stream, false);
}
CUDART_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                                       cudaStream_t stream) {
  return malloc_from_pool_async(ptr, size, memPool, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  if (!memPool || !poolProps) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  CUmemPoolProps props{};
  props.allocType = static_cast<CUmemAllocationType>(poolProps->allocType);
  props.handleTypes = static_cast<CUmemAllocationHandleType>(poolProps->handleTypes);
  props.location.type = static_cast<CUmemLocationType>(poolProps->location.type);
  props.location.id = poolProps->location.id;
  props.win32SecurityAttributes = poolProps->win32SecurityAttributes;
  props.maxSize = poolProps->maxSize;
  props.usage = poolProps->usage;
  return check(drv().cuMemPoolCreate(memPool, &props));
}

CUDART_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  if (!memPool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemPoolDestroy(memPool));
}

CUDART_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  if (!memPool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemPoolTrimTo(memPool, minBytesToKeep));
}

// cudaMemPoolAttr values equal CUmemPool_attribute values, and the value types match.
CUDART_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  if (!memPool || !value) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemPoolSetAttribute(memPool, static_cast<CUmemPool_attribute>(attr), value));
}

CUDART_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  if (!memPool || !value) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemPoolGetAttribute(memPool, static_cast<CUmemPool_attribute>(attr), value));
}

CUDART_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  if (!memPool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  return check(drv().cuDeviceGetDefaultMemPool(memPool, cu_device(device)));
}

CUDART_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  if (!memPool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  return check(drv().cuDeviceGetMemPool(memPool, cu_device(device)));
}

CUDART_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  if (!memPool) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  return check(drv().cuDeviceSetMemPool(cu_device(device), memPool));
}
