// The pre-3.2 ABIs that cuda.h still declares for the driver's own build: 32-bit device
// pointers and sizes. They are separate ELF symbols (cuMemAlloc next to cuMemAlloc_v2) that
// cuGetProcAddress returns for cudaVersion < 3020, so an interposer that confuses the two
// gets a visibly different pointer width. Their memory is placed below 4 GiB, where a
// CUdeviceptr_v1 can address it, and is ordinary device memory otherwise.
#include <climits>

#include "internal.h"

using namespace sim;

namespace {

unsigned int saturate(uint64_t v) { return v > UINT_MAX ? UINT_MAX : static_cast<unsigned int>(v); }

}  // namespace

SIM_API CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  SIM_ENTER();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t addr;
  CUresult r = alloc_linear(Kind::Legacy, bytesize, 0, &addr);
  if (r == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(addr);
  return r;
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                                 unsigned int Height, unsigned int ElementSizeBytes) {
  SIM_ENTER();
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  uint64_t pitch;
  round_up(WidthInBytes, kLinearAlign, &pitch);
  if (pitch * Height > UINT_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t addr;
  CUresult r = alloc_linear(Kind::Legacy, pitch * Height, 0, &addr);
  if (r != CUDA_SUCCESS) return r;
  *dptr = static_cast<CUdeviceptr_v1>(addr);
  *pPitch = static_cast<unsigned int>(pitch);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  SIM_ENTER();
  return free_device_memory(dptr);
}

SIM_API CUresult cuMemAllocHost(void** pp, unsigned int bytesize) {
  SIM_ENTER();
  return host_alloc(pp, bytesize, 0);
}

SIM_API CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  SIM_ENTER();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f, t;
  CUresult r = mem_get_info(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = saturate(f);
    *total = saturate(t);
  }
  return r;
}

SIM_API CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  SIM_ENTER();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = saturate(d->capacity);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange(CUdeviceptr_v1* pbase, unsigned int* psize, CUdeviceptr_v1 dptr) {
  SIM_ENTER();
  std::optional<Allocation> a = registry_find(dptr);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (a->base > UINT_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (pbase != nullptr) *pbase = static_cast<CUdeviceptr_v1>(a->base);
  if (psize != nullptr) *psize = saturate(a->size);
  return CUDA_SUCCESS;
}
