// Linear device memory (cuMemAlloc family) and managed memory, plus the free path shared by
// every family that hands out plain pointers.
#include <sys/mman.h>

#include "internal.h"

namespace sim {
namespace {

bool freeable_by_cuMemFree(const Allocation& a) {
  return !a.free_pending && (a.kind == Kind::Linear || a.kind == Kind::Legacy || a.kind == Kind::Managed ||
                             a.kind == Kind::Async);
}

}  // namespace

void release_memory(const Allocation& a) {
  switch (a.kind) {
    case Kind::Linear:
    case Kind::Managed:
      device_free(*device(a.device), a.base, a.footprint);
      break;
    case Kind::Legacy:
      legacy_free(*device(a.device), a.base, a.footprint);
      break;
    case Kind::Async:
      pool_release(a.pool, a.base, a.footprint);
      break;
    case Kind::HostAlloc:
      ::munmap(reinterpret_cast<void*>(a.base), a.footprint);
      break;
    case Kind::HostRegistered:  // the memory belongs to the program
    case Kind::VmmMapping:      // owned by vmm.cpp
      break;
  }
}

// Managed memory lives in the device arena and counts against capacity: the simulation has
// no oversubscription, which keeps cuMemGetInfo exact.
CUresult alloc_linear(Kind kind, uint64_t size, unsigned flags, uint64_t* addr) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  Device& d = *device(c->device);
  uint64_t base, footprint;
  CUresult r = kind == Kind::Legacy ? legacy_alloc(d, size, &base, &footprint)
                                    : device_alloc(d, size, &base, &footprint);
  if (r != CUDA_SUCCESS) return r;
  Allocation a;
  a.base = base;
  a.size = size;
  a.footprint = footprint;
  a.kind = kind;
  a.ctx = c;
  a.device = c->device;
  a.flags = flags;
  a.buffer_id = next_buffer_id();
  registry_insert(a);
  *addr = base;
  return CUDA_SUCCESS;
}

// Like the real driver, a free waits for queued work first: the memory may still be in use by
// it, and here that work would otherwise run against released pages.
CUresult free_device_memory(uint64_t addr) {
  if (addr == 0) return CUDA_SUCCESS;
  std::optional<Allocation> a = registry_find(addr);
  if (!a || a->base != addr || !freeable_by_cuMemFree(*a)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* sync_ctx = a->ctx;
  if (sync_ctx == nullptr && current_ctx(&sync_ctx) != CUDA_SUCCESS) sync_ctx = nullptr;
  if (sync_ctx != nullptr && ctx_valid(sync_ctx)) sync_before_free(sync_ctx);
  const uint64_t id = a->buffer_id;
  a = registry_take(addr, [id](const Allocation& e) { return e.buffer_id == id && freeable_by_cuMemFree(e); });
  if (!a) return CUDA_ERROR_INVALID_VALUE;  // lost a race with another free
  release_memory(*a);
  return CUDA_SUCCESS;
}

CUresult mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  Device& d = *device(c->device);
  std::lock_guard<std::mutex> lock(d.mu);
  *free_bytes = d.capacity - d.used;
  *total_bytes = d.capacity;
  return CUDA_SUCCESS;
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  SIM_ENTER();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t addr;
  CUresult r = alloc_linear(Kind::Linear, bytesize, 0, &addr);
  if (r == CUDA_SUCCESS) *dptr = addr;
  return r;
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes) {
  SIM_ENTER();
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  uint64_t pitch;
  if (!round_up(WidthInBytes, kLinearAlign, &pitch) || Height > UINT64_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t addr;
  CUresult r = alloc_linear(Kind::Linear, pitch * Height, 0, &addr);
  if (r != CUDA_SUCCESS) return r;
  *dptr = addr;
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  SIM_ENTER();
  return free_device_memory(dptr);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  SIM_ENTER();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  uint64_t addr;
  CUresult r = alloc_linear(Kind::Managed, bytesize, flags, &addr);
  if (r == CUDA_SUCCESS) *dptr = addr;
  return r;
}

SIM_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  SIM_ENTER();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f, t;
  CUresult r = mem_get_info(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = f;
    *total = t;
  }
  return r;
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  SIM_ENTER();
  std::optional<Allocation> a = registry_find(dptr);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = a->base;
  if (psize != nullptr) *psize = a->size;
  return CUDA_SUCCESS;
}
