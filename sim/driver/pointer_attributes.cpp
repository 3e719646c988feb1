// cuPointerGetAttribute(s): what the driver knows about an address, from the registry.
#include "internal.h"

namespace sim {
namespace {

template <typename T>
void put(void* data, T v) {
  *static_cast<T*>(data) = v;
}

// One attribute of a known allocation (a), of a bare VMM reservation (a == nullptr, reserved),
// or of an unknown pointer (both empty). `lenient` gives cuPointerGetAttributes' defaults
// instead of errors for unknown pointers.
CUresult query_attribute(CUpointer_attribute attr, void* data, uint64_t ptr, const Allocation* a, bool lenient) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t res_base = 0, res_size = 0;
  const bool reserved = vmm_reservation_of(ptr, &res_base, &res_size);
  if (a == nullptr) {
    if (attr == CU_POINTER_ATTRIBUTE_MAPPED && (reserved || lenient)) {
      put<unsigned>(data, 0);
      return CUDA_SUCCESS;
    }
    if (reserved && attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
      put<CUdeviceptr>(data, res_base);
      return CUDA_SUCCESS;
    }
    if (reserved && attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
      put<size_t>(data, res_size);
      return CUDA_SUCCESS;
    }
    if (!lenient) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {  // documented defaults: "NULL values"
      case CU_POINTER_ATTRIBUTE_CONTEXT: put<CUcontext>(data, nullptr); break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: put<unsigned>(data, 0); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put<CUdeviceptr>(data, 0); break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: put<void*>(data, nullptr); break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: put<unsigned long long>(data, 0); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put<int>(data, -2); break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put<CUdeviceptr>(data, 0); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put<size_t>(data, 0); break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put<CUmemoryPool>(data, nullptr); break;
      default: put<unsigned>(data, 0); break;
    }
    return CUDA_SUCCESS;
  }
  const bool host = a->device < 0;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put<CUcontext>(data, a->ctx); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put<unsigned>(data, host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put<CUdeviceptr>(data, ptr); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      // Device memory has no host mapping in CUDA, however readable it is here.
      if (!host && a->kind != Kind::Managed) return CUDA_ERROR_INVALID_VALUE;
      put<void*>(data, reinterpret_cast<void*>(ptr));
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put<unsigned>(data, 0); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: put<unsigned long long>(data, a->buffer_id); break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put<unsigned>(data, a->kind == Kind::Managed ? 1 : 0); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      int ordinal = a->device;
      if (ordinal < 0) ordinal = a->ctx != nullptr ? ctx_device(a->ctx) : 0;
      put<int>(data, ordinal);
      break;
    }
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      put<unsigned>(data, a->kind == Kind::Linear || a->kind == Kind::Legacy ? 1 : 0);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      put<CUdeviceptr>(data, a->kind == Kind::VmmMapping && reserved ? res_base : a->base);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      put<size_t>(data, a->kind == Kind::VmmMapping && reserved ? res_size : a->size);
      break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put<unsigned>(data, 1); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put<unsigned long long>(data, a->kind == Kind::VmmMapping ? vmm_allowed_handle_types(a->handle) : 0);
      break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: put<unsigned>(data, 0); break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
      unsigned flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CUctx_st* c;
      if (a->kind == Kind::VmmMapping && current_ctx(&c) == CUDA_SUCCESS) flags = vmm_access_flags(ptr, ctx_device(c));
      put<unsigned>(data, flags);
      break;
    }
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put<CUmemoryPool>(data, a->pool); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put<size_t>(data, a->size); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put<CUdeviceptr>(data, a->base); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put<unsigned long long>(data, a->kind == Kind::VmmMapping ? a->handle : a->buffer_id);
      break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put<unsigned>(data, 0); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace sim

using namespace sim;

// The simulated device is host memory private to this process: no other process can map it, so
// sharing is refused the way a driver refuses what the device cannot do. Arguments are checked
// first, as the real driver checks them.
SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  SIM_ENTER();
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<Allocation> a = registry_find(dptr);
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  SIM_ENTER();
  std::optional<Allocation> a = registry_find(ptr);
  return query_attribute(attribute, data, ptr, a ? &*a : nullptr, false);
}

SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                        CUdeviceptr ptr) {
  SIM_ENTER();
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<Allocation> a = registry_find(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    CUresult r = query_attribute(attributes[i], data[i], ptr, a ? &*a : nullptr, true);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
