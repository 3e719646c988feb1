// Device buffers (internal and ncclMemAlloc) and buffer registration.
//
// With cuMem enabled a buffer is a VMM allocation made in NCCL's order — cuMemCreate, cuMemAddressReserve,
// cuMemMap, cuMemSetAccess — and freed in NCCL's order — cuMemRetainAllocationHandle, cuMemRelease,
// cuMemGetAddressRange, cuMemUnmap, cuMemRelease, cuMemAddressFree (docs/interposition.md, "How NCCL
// allocates device memory"). An interposer has to get VMM reference counting right to account for that
// sequence, which is the point of mimicking it.
#include <cstdlib>
#include <map>

#include "internal.h"

namespace simnccl {
namespace {

std::mutex g_mem_mutex;
// ncclMemAlloc'd buffers; leaked so late frees from atexit handlers still find it.
std::map<CUdeviceptr, DeviceBuffer>& mem_allocs() {
  static auto* m = new std::map<CUdeviceptr, DeviceBuffer>;
  return *m;
}

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

ncclResult_t vmm_alloc(int ordinal, size_t size, bool recommended, DeviceBuffer* out) {
  const Pfn& d = pfn();
  CUdevice dev = 0;
  SIMNCCL_CU(d.cuDeviceGet(&dev, ordinal));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  SIMNCCL_CU(d.cuMemGetAllocationGranularity(
      &granularity, &prop,
      recommended ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) granularity = 1;
  size = (size + granularity - 1) / granularity * granularity;

  CUmemGenericAllocationHandle handle = 0;
  SIMNCCL_CU(d.cuMemCreate(&handle, size, &prop, 0));
  CUdeviceptr ptr = 0;
  if (CUresult r = d.cuMemAddressReserve(&ptr, size, granularity, 0, 0); r != CUDA_SUCCESS) {
    d.cuMemRelease(handle);
    return cu_fail(r, "cuMemAddressReserve");
  }
  if (CUresult r = d.cuMemMap(ptr, size, 0, handle, 0); r != CUDA_SUCCESS) {
    d.cuMemAddressFree(ptr, size);
    d.cuMemRelease(handle);
    return cu_fail(r, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.cuMemSetAccess(ptr, size, &access, 1); r != CUDA_SUCCESS) {
    d.cuMemUnmap(ptr, size);
    d.cuMemAddressFree(ptr, size);
    d.cuMemRelease(handle);
    return cu_fail(r, "cuMemSetAccess");
  }
  // The creation reference stays with the mapping until vmm_free, as in NCCL.
  *out = DeviceBuffer{ptr, size, true};
  return ncclSuccess;
}

ncclResult_t vmm_free(CUdeviceptr ptr) {
  const Pfn& d = pfn();
  CUmemGenericAllocationHandle handle = 0;
  SIMNCCL_CU(d.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(ptr)));
  SIMNCCL_CU(d.cuMemRelease(handle));  // drops the reference the retain just took
  CUdeviceptr base = 0;
  size_t size = 0;
  SIMNCCL_CU(d.cuMemGetAddressRange(&base, &size, ptr));
  SIMNCCL_CU(d.cuMemUnmap(base, size));
  SIMNCCL_CU(d.cuMemRelease(handle));  // the creation reference: the physical memory goes here
  SIMNCCL_CU(d.cuMemAddressFree(base, size));
  return ncclSuccess;
}

}  // namespace

bool cumem_enabled(int ordinal) {
  if (const char* env = std::getenv("NCCL_CUMEM_ENABLE"); env && *env) {
    int v = std::atoi(env);
    if (v == 0) return false;
    if (v > 0) return true;
  }
  // Auto, as NCCL decides it: a driver of 12.0 or later that reports VMM support for the device.
  if (simcuda_resolve::driver_version() < 12000) return false;
  CUdevice dev = 0;
  int supported = 0;
  if (pfn().cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) return false;
  if (pfn().cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
      CUDA_SUCCESS)
    return false;
  return supported != 0;
}

ncclResult_t buffer_alloc(int ordinal, size_t size, bool recommended_granularity, DeviceBuffer* out) {
  if (cumem_enabled(ordinal)) return vmm_alloc(ordinal, size, recommended_granularity, out);
  CUdeviceptr ptr = 0;
  SIMNCCL_CU(pfn().cuMemAlloc(&ptr, size));
  *out = DeviceBuffer{ptr, size, false};
  return ncclSuccess;
}

ncclResult_t buffer_free(const DeviceBuffer& b) {
  if (!b.ptr) return ncclSuccess;
  if (b.vmm) return vmm_free(b.ptr);
  SIMNCCL_CU(pfn().cuMemFree(b.ptr));
  return ncclSuccess;
}

}  // namespace simnccl

using namespace simnccl;

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (!ptr || size == 0) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL or size is 0");
  if (ncclResult_t r = load_driver(); r != ncclSuccess) return r;
  int ordinal = 0;
  if (ncclResult_t r = ensure_context(&ordinal); r != ncclSuccess) return r;
  DeviceBuffer b;
  if (ncclResult_t r = buffer_alloc(ordinal, size, true, &b); r != ncclSuccess) return r;
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    mem_allocs()[b.ptr] = b;
  }
  *ptr = reinterpret_cast<void*>(b.ptr);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (!ptr) return ncclSuccess;
  if (ncclResult_t r = load_driver(); r != ncclSuccess) return r;
  int ordinal = 0;
  if (ncclResult_t r = ensure_context(&ordinal); r != ncclSuccess) return r;
  // NCCL first asks which device owns the buffer (it then selects that device).
  int owner = 0;
  if (pfn().cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr(ptr)) == CUDA_SUCCESS)
    ordinal = owner;
  DeviceBuffer b{dptr(ptr), 0, cumem_enabled(ordinal)};
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = mem_allocs().find(dptr(ptr));
    if (it != mem_allocs().end()) {
      b = it->second;
      mem_allocs().erase(it);
    }
  }
  return buffer_free(b);
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommRegister: invalid communicator");
  if (!buff || !handle || size == 0) return fail(ncclInvalidArgument, "ncclCommRegister: bad buffer or handle");
  ScopedContext scope(comm->ctx);
  CUdeviceptr base = 0;
  size_t base_size = 0;
  SIMNCCL_CU(pfn().cuMemGetAddressRange(&base, &base_size, dptr(buff)));
  if (dptr(buff) + size > base + base_size)
    return fail(ncclInvalidArgument, "ncclCommRegister: %zu bytes at %p run past the allocation", size, buff);
  auto* reg = new Registration{buff, size, base, base_size};
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->registrations.insert(reg);
  }
  *handle = reg;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommDeregister: invalid communicator");
  auto* reg = static_cast<Registration*>(handle);
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (!comm->registrations.erase(reg))
      return fail(ncclInvalidArgument, "ncclCommDeregister: unknown handle %p", handle);
  }
  delete reg;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommWindowRegister: invalid communicator");
  if (!buff || !win || size == 0) return fail(ncclInvalidArgument, "ncclCommWindowRegister: bad arguments");
  if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) && reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT)
    return fail(ncclInvalidArgument, "ncclCommWindowRegister: symmetric window %p is not aligned", buff);
  ScopedContext scope(comm->ctx);
  CUdeviceptr base = 0;
  size_t base_size = 0;
  SIMNCCL_CU(pfn().cuMemGetAddressRange(&base, &base_size, dptr(buff)));
  auto* w = new ncclWindow_vidmem{comm, buff, size, winFlags};
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->windows.insert(w);
  }
  *win = w;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommWindowDeregister: invalid communicator");
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (!comm->windows.erase(win))
      return fail(ncclInvalidArgument, "ncclCommWindowDeregister: unknown window %p", static_cast<void*>(win));
  }
  delete win;
  return ncclSuccess;
}
