// Page-locked host memory: allocated (cuMemHostAlloc family) and registered
// (cuMemHostRegister). Host memory never counts against device capacity. With unified
// addressing the device pointer of pinned memory is the host pointer itself.
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

namespace sim {
namespace {

constexpr unsigned kHostAllocFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kHostRegisterFlags =
    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

bool is_pinned(const Allocation& a) { return a.kind == Kind::HostAlloc || a.kind == Kind::HostRegistered; }

// Queued copies may still read or write the range; wait for them before it goes away.
void sync_owner(const Allocation& a) {
  if (a.ctx != nullptr && ctx_valid(a.ctx)) sync_before_blocking_op(a.ctx, false);
}

CUresult host_register(void* p, size_t bytesize, unsigned flags) {
  if (p == nullptr || bytesize == 0 || (flags & ~kHostRegisterFlags)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  if (base + bytesize < base || in_simulated_address_space(base)) return CUDA_ERROR_INVALID_VALUE;
  Allocation a;
  a.base = base;
  a.size = bytesize;
  a.kind = Kind::HostRegistered;
  a.ctx = c;
  a.flags = flags;
  a.buffer_id = next_buffer_id();
  return registry_insert(a) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
}

}  // namespace

CUresult host_alloc(void** pp, uint64_t size, unsigned flags) {
  if (pp == nullptr || size == 0 || (flags & ~kHostAllocFlags)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  uint64_t len;
  if (!round_up(size, static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), &len)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(p);
  a.size = size;
  a.footprint = len;
  a.kind = Kind::HostAlloc;
  a.ctx = c;
  a.flags = flags;
  a.buffer_id = next_buffer_id();
  registry_insert(a);
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  SIM_ENTER();
  return host_alloc(pp, bytesize, 0);
}

SIM_API CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  SIM_ENTER();
  return host_alloc(pp, bytesize, Flags);
}

SIM_API CUresult cuMemFreeHost(void* p) {
  SIM_ENTER();
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  std::optional<Allocation> a = registry_find(base);
  if (!a || a->base != base || a->kind != Kind::HostAlloc) return CUDA_ERROR_INVALID_VALUE;
  sync_owner(*a);
  const uint64_t id = a->buffer_id;
  a = registry_take(base, [id](const Allocation& e) { return e.buffer_id == id; });
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  release_memory(*a);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  SIM_ENTER();
  return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  SIM_ENTER();
  return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void* p) {
  SIM_ENTER();
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  std::optional<Allocation> a = registry_find(base);
  if (!a || a->base != base || a->kind != Kind::HostRegistered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  sync_owner(*a);
  const uint64_t id = a->buffer_id;
  if (!registry_take(base, [id](const Allocation& e) { return e.buffer_id == id; })) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  SIM_ENTER();
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  std::optional<Allocation> a = registry_find(reinterpret_cast<uint64_t>(p));
  if (!a || !is_pinned(*a)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  SIM_ENTER();
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<Allocation> a = registry_find(reinterpret_cast<uint64_t>(p));
  if (!a || a->kind != Kind::HostAlloc) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = a->flags;
  return CUDA_SUCCESS;
}
