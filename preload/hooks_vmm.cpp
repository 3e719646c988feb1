// Virtual memory management. Physical memory (cuMemCreate) is counted from creation until
// the creation reference, every mapping and every retain are gone — NCCL releases before it
// unmaps. Each mapped range is what the snapshot shows as a segment, since only a mapping
// has an address.
#include "core/clock.hpp"
#include "preload/capture.hpp"
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                                      const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = real_fn<Hook::cuMemCreate, decltype(&::cuMemCreate)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(handle, size, prop, flags);
  Session* s = scope.session();
  if (!s) return r;
  if (r == CUDA_SUCCESS && handle) {
    HandleRecord h;
    h.handle = *handle;
    h.size = size;
    uint64_t ctx = 0;
    int dev = current_device(&ctx);
    h.ctx = ctx;
    h.host = prop && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE;
    h.device = static_cast<int16_t>(prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id
                                                                                               : dev);
    h.time_us = now_ticks();
    h.refs = 1;
    h.stack_id = capture_stack_id(*s, __builtin_return_address(0));
    h.owner = s->owners.owner_of(h.stack_id, s->stacks);
    s->recorder.handle_created(h);
  } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    record_oom(*s, size, 0, __builtin_return_address(0));
  }
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = real_fn<Hook::cuMemRelease, decltype(&::cuMemRelease)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(handle);
  if (Session* s = scope.session(); s && r == CUDA_SUCCESS) s->recorder.handle_ref(handle, -1);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                                      void* addr) {
  auto real = real_fn<Hook::cuMemRetainAllocationHandle, decltype(&::cuMemRetainAllocationHandle)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(handle, addr);
  if (Session* s = scope.session(); s && r == CUDA_SUCCESS && handle) s->recorder.handle_ref(*handle, +1);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                                   CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto real = real_fn<Hook::cuMemMap, decltype(&::cuMemMap)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(ptr, size, offset, handle, flags);
  Session* s = scope.session();
  if (!s || r != CUDA_SUCCESS) return r;
  HandleRecord h;
  bool known = s->recorder.handle_info(handle, &h);
  if (known && h.host) {
    // Host-located physical memory is counted as host memory on the handle; its mapping is
    // not device memory and must not become a device segment.
    s->recorder.handle_ref(handle, +1);
    return r;
  }
  record_alloc(*s,
               {.addr = ptr, .size = size, .requested = size, .handle = handle, .kind = MemKind::VmmMapping,
                .device = known ? h.device : -2},
               __builtin_return_address(0));
  s->recorder.handle_ref(handle, +1);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = real_fn<Hook::cuMemUnmap, decltype(&::cuMemUnmap)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  Session* s = scope.session();
  // An unmap may cover several mappings laid side by side; release each one it starts with.
  constexpr int kMax = 64;
  AllocRecord taken[kMax];
  int n = 0;
  if (s) {
    uint32_t stack = s->config.free_stacks ? capture_stack_id(*s, __builtin_return_address(0)) : 0;
    const MemKind mapping = MemKind::VmmMapping;
    uint64_t cursor = ptr, end = ptr + size;
    while (cursor < end && n < kMax && s->recorder.release(cursor, 0, stack, &taken[n], &mapping)) {
      if (taken[n].size == 0) break;
      cursor += taken[n].size;
      ++n;
    }
  }
  CUresult r = real(ptr, size);
  for (int i = 0; i < n; ++i) {
    if (r == CUDA_SUCCESS)
      s->recorder.handle_ref(taken[i].handle, -1);
    else
      s->recorder.restore(taken[i]);
  }
  return r;
}
