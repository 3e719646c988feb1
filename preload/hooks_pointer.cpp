// Pointer questions about memory the caching allocator handed out answer for the block, not for
// the segment (the driver allocation) around it: cuMemGetAddressRange_v2 and the RANGE_START_ADDR
// / RANGE_SIZE attributes of cuPointerGetAttribute(s). Code that asks "where does this buffer
// start and how long is it" (IPC wrappers, checkers, copy helpers) must not see its neighbours.
//
// IPC: cuIpcGetMemHandle exports a whole driver allocation and the peer maps it at offset 0, so
// for a cached block the peer would read the segment's first bytes, not the block. Giving every
// exported block a segment of its own after the fact is impossible (it is already placed), so the
// export is refused with CUDA_ERROR_NOT_SUPPORTED and one warning naming MEMTRACE_ALLOCATOR.
// Memory the allocator does not own passes to the driver unchanged.
#include <atomic>

#include "core/log.hpp"
#include "preload/caching_mode.hpp"
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                                                   CUdeviceptr dptr) {
  if (caching_mode::any_allocator()) {
    if (auto b = caching_mode::block_of(static_cast<uintptr_t>(dptr))) {
      if (pbase) *pbase = static_cast<CUdeviceptr>(b->base);
      if (psize) *psize = b->size;
      return CUDA_SUCCESS;
    }
    // Cached free space: to the program that memory is freed.
    if (caching_mode::owned(static_cast<uintptr_t>(dptr))) return CUDA_ERROR_NOT_FOUND;
  }
  auto real = real_fn<Hook::cuMemGetAddressRange_v2, decltype(&::cuMemGetAddressRange_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return real(pbase, psize, dptr);
}

namespace {
bool is_range_attribute(CUpointer_attribute a) {
  return a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || a == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
}
void put_range(CUpointer_attribute a, void* data, const caching::BlockInfo& b) {
  if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
    *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(b.base);
  else
    *static_cast<size_t*>(data) = b.size;
}
}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                                 CUdeviceptr ptr) {
  if (caching_mode::any_allocator() && is_range_attribute(attribute)) {
    if (auto b = caching_mode::block_of(static_cast<uintptr_t>(ptr))) {
      if (!data) return CUDA_ERROR_INVALID_VALUE;
      put_range(attribute, data, *b);
      return CUDA_SUCCESS;
    }
    if (caching_mode::owned(static_cast<uintptr_t>(ptr))) return CUDA_ERROR_INVALID_VALUE;  // freed memory
  }
  auto real = real_fn<Hook::cuPointerGetAttribute, decltype(&::cuPointerGetAttribute)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return real(data, attribute, ptr);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                                  CUpointer_attribute* attributes, void** data,
                                                                  CUdeviceptr ptr) {
  auto real = real_fn<Hook::cuPointerGetAttributes, decltype(&::cuPointerGetAttributes)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(numAttributes, attributes, data, ptr);
  if (r != CUDA_SUCCESS || !caching_mode::any_allocator() || !attributes || !data) return r;
  bool asks_range = false;
  for (unsigned i = 0; i < numAttributes; ++i) asks_range |= is_range_attribute(attributes[i]);
  if (!asks_range) return r;
  if (auto b = caching_mode::block_of(static_cast<uintptr_t>(ptr))) {
    for (unsigned i = 0; i < numAttributes; ++i)
      if (is_range_attribute(attributes[i]) && data[i]) put_range(attributes[i], data[i], *b);
  }
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (caching_mode::any_allocator() && caching_mode::owned(static_cast<uintptr_t>(dptr))) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log::warn("cuIpcGetMemHandle on memory from memtrace's caching allocator is not supported (the peer "
                "would map the whole segment, not the block): returning CUDA_ERROR_NOT_SUPPORTED; run with "
                "MEMTRACE_ALLOCATOR=passthrough to share device memory between processes");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto real = real_fn<Hook::cuIpcGetMemHandle, decltype(&::cuIpcGetMemHandle)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return real(pHandle, dptr);
}
