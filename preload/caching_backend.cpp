#include "preload/caching_backend.hpp"

#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"

namespace memtrace::preload {

namespace {

// Makes `ctx` current on this thread for one backend call, and puts the previous one back.
class ContextScope {
 public:
  explicit ContextScope(CUcontext ctx) {
    auto get = real_fn<Hook::cuCtxGetCurrent, decltype(&::cuCtxGetCurrent)>();
    CUcontext cur = nullptr;
    if (get) get(&cur);
    if (cur == ctx || !ctx) return;
    auto push = real_fn<Hook::cuCtxPushCurrent_v2, decltype(&::cuCtxPushCurrent_v2)>();
    pushed_ = push && push(ctx) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    if (auto pop = real_fn<Hook::cuCtxPopCurrent_v2, decltype(&::cuCtxPopCurrent_v2)>()) pop(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace

int DriverBackend::allocate(size_t bytes, uintptr_t* out) {
  if (forgotten_) return CUDA_ERROR_INVALID_CONTEXT;
  auto real = real_fn<Hook::cuMemAlloc_v2, decltype(&::cuMemAlloc_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  ContextScope cs(ctx_);
  CUdeviceptr p = 0;
  CUresult r = real(&p, bytes);
  if (r == CUDA_SUCCESS) *out = static_cast<uintptr_t>(p);
  return r;
}

int DriverBackend::free(uintptr_t base, size_t) {
  if (forgotten_) return CUDA_SUCCESS;
  auto real = real_fn<Hook::cuMemFree_v2, decltype(&::cuMemFree_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  ContextScope cs(ctx_);
  return real(static_cast<CUdeviceptr>(base));
}

bool DriverBackend::supports_expandable() const {
  return real_pointer(Hook::cuMemAddressReserve) && real_pointer(Hook::cuMemAddressFree) &&
         real_pointer(Hook::cuMemCreate) && real_pointer(Hook::cuMemRelease) && real_pointer(Hook::cuMemMap) &&
         real_pointer(Hook::cuMemUnmap) && real_pointer(Hook::cuMemSetAccess);
}

int DriverBackend::reserve(size_t bytes, uintptr_t* out) {
  auto real = real_fn<Hook::cuMemAddressReserve, decltype(&::cuMemAddressReserve)>();
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  ContextScope cs(ctx_);
  CUdeviceptr p = 0;
  CUresult r = real(&p, bytes, kChunk, 0, 0);
  if (r == CUDA_SUCCESS) *out = static_cast<uintptr_t>(p);
  return r;
}

int DriverBackend::map(uintptr_t base, size_t offset, size_t bytes) {
  auto create = real_fn<Hook::cuMemCreate, decltype(&::cuMemCreate)>();
  auto map = real_fn<Hook::cuMemMap, decltype(&::cuMemMap)>();
  auto release = real_fn<Hook::cuMemRelease, decltype(&::cuMemRelease)>();
  auto access = real_fn<Hook::cuMemSetAccess, decltype(&::cuMemSetAccess)>();
  if (!create || !map || !release || !access) return CUDA_ERROR_NOT_SUPPORTED;
  ContextScope cs(ctx_);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  const uintptr_t start = base + offset;
  size_t done = 0;
  CUresult r = CUDA_SUCCESS;
  for (; done < bytes; done += kChunk) {
    CUmemGenericAllocationHandle h = 0;
    r = create(&h, kChunk, &prop, 0);
    if (r != CUDA_SUCCESS) break;
    r = map(static_cast<CUdeviceptr>(start + done), kChunk, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      release(h);
      break;
    }
    chunks_[start + done] = h;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc desc{};
    desc.location = prop.location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = access(static_cast<CUdeviceptr>(start), bytes, &desc, 1);
  }
  if (r != CUDA_SUCCESS && done > 0) unmap_chunks(start, done);  // nothing half-mapped stays
  return r;
}

int DriverBackend::unmap_chunks(uintptr_t start, size_t bytes) {
  auto unmap = real_fn<Hook::cuMemUnmap, decltype(&::cuMemUnmap)>();
  auto release = real_fn<Hook::cuMemRelease, decltype(&::cuMemRelease)>();
  if (!unmap || !release) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult first_error = CUDA_SUCCESS;
  for (size_t at = 0; at < bytes; at += kChunk) {
    auto it = chunks_.find(start + at);
    if (it == chunks_.end()) continue;
    CUresult r = unmap(static_cast<CUdeviceptr>(start + at), kChunk);
    if (r == CUDA_SUCCESS) r = release(it->second);
    if (r != CUDA_SUCCESS && first_error == CUDA_SUCCESS) first_error = r;
    chunks_.erase(it);
  }
  return first_error;
}

int DriverBackend::unmap(uintptr_t base, size_t offset, size_t bytes) {
  if (forgotten_) return CUDA_SUCCESS;
  ContextScope cs(ctx_);
  return unmap_chunks(base + offset, bytes);
}

int DriverBackend::release(uintptr_t base, size_t bytes) {
  if (forgotten_) return CUDA_SUCCESS;
  auto real = real_fn<Hook::cuMemAddressFree, decltype(&::cuMemAddressFree)>();
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  ContextScope cs(ctx_);
  return real(static_cast<CUdeviceptr>(base), bytes);
}

int DriverBackend::synchronize() {
  if (forgotten_) return CUDA_SUCCESS;
  auto real = real_fn<Hook::cuCtxSynchronize, decltype(&::cuCtxSynchronize)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  ContextScope cs(ctx_);
  return real();
}

int DriverBackend::mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  auto real = real_fn<Hook::cuMemGetInfo_v2, decltype(&::cuMemGetInfo_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  ContextScope cs(ctx_);
  return real(free_bytes, total_bytes);
}

}  // namespace memtrace::preload
