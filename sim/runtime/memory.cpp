// Allocation entry points. Each maps to the driver function the real runtime uses (docs/interposition.md,
// "What each runtime allocation call becomes at the driver"), so an interposer at the driver sees the same
// calls under the simulated runtime as under the real one.
#include "internal.h"

namespace simcudart {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
void* vptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

// The element size the runtime passes to cuMemAllocPitch: the largest the driver accepts, so the pitch
// suits any element type.
constexpr unsigned kPitchElementBytes = 16;

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  if (cudaError_t e = check(drv().cuMemAlloc(&p, size)); e != cudaSuccess) return e;
  *devPtr = vptr(p);
  return cudaSuccess;
}

// cudaFree(0) is the conventional way to create the context; it must succeed once that is done.
CUDART_EXPORT cudaError_t cudaFree(void* devPtr) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!devPtr) return cudaSuccess;
  return check(drv().cuMemFree(dptr(devPtr)));
}

CUDART_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (!devPtr || !pitch) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (width == 0 || height == 0) {
    *devPtr = nullptr;
    *pitch = 0;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  if (cudaError_t e = check(drv().cuMemAllocPitch(&p, pitch, width, height, kPitchElementBytes)); e != cudaSuccess)
    return e;
  *devPtr = vptr(p);
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) {
  if (!pitchedDevPtr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  *pitchedDevPtr = cudaPitchedPtr{nullptr, 0, extent.width, extent.height};
  size_t rows = extent.height * extent.depth;
  if (extent.width == 0 || rows == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  size_t pitch = 0;
  if (cudaError_t e = check(drv().cuMemAllocPitch(&p, &pitch, extent.width, rows, kPitchElementBytes));
      e != cudaSuccess)
    return e;
  pitchedDevPtr->ptr = vptr(p);
  pitchedDevPtr->pitch = pitch;
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (!devPtr || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr p = 0;
  // cudaMemAttach* and CU_MEM_ATTACH_* share their values.
  if (cudaError_t e = check(drv().cuMemAllocManaged(&p, size, flags)); e != cudaSuccess) return e;
  *devPtr = vptr(p);
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (!pHost) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (size == 0) {
    *pHost = nullptr;
    return cudaSuccess;
  }
  // cudaHostAlloc* flags equal CU_MEMHOSTALLOC_* flags.
  return check(drv().cuMemHostAlloc(pHost, size, flags));
}

// The runtime has no use for cuMemAllocHost: cudaMallocHost is cudaHostAlloc with default flags.
CUDART_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

CUDART_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!ptr) return cudaSuccess;
  return check(drv().cuMemFreeHost(ptr));
}

CUDART_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (!ptr || size == 0) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemHostRegister(ptr, size, flags));
}

CUDART_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemHostUnregister(ptr));
}

CUDART_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (!pDevice || !pHost || flags != 0) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  CUdeviceptr p = 0;
  if (cudaError_t e = check(drv().cuMemHostGetDevicePointer(&p, pHost, 0)); e != cudaSuccess) return e;
  *pDevice = vptr(p);
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  *attributes = cudaPointerAttributes{};
  const DriverTable& d = drv();
  CUdeviceptr p = dptr(ptr);
  unsigned int memory_type = 0;
  CUresult r = d.cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_FOUND) {
    // Since CUDA 11 an ordinary host pointer is not an error: it is "unregistered" memory.
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  if (r != CUDA_SUCCESS) return check(r);
  int managed = 0;
  d.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
  if (managed)
    attributes->type = cudaMemoryTypeManaged;
  else
    attributes->type = memory_type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  int ordinal = 0;
  if (d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS)
    attributes->device = ordinal;
  CUdeviceptr device_pointer = 0;
  if (d.cuPointerGetAttribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p) == CUDA_SUCCESS)
    attributes->devicePointer = vptr(device_pointer);
  void* host_pointer = nullptr;
  if (d.cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, p) == CUDA_SUCCESS)
    attributes->hostPointer = host_pointer;
  return cudaSuccess;
}
