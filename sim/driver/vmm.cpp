// Virtual memory management: physical handles, VA reservations and mappings.
//
// A physical handle is a memfd of the requested size (sparse, so untouched memory costs
// nothing), charged to its device's capacity while it exists. Reservations are PROT_NONE
// anonymous mappings anywhere in the address space; cuMemMap places the memfd over part of
// one with MAP_FIXED, so two mappings of one handle really share their bytes, and cuMemUnmap
// puts the PROT_NONE reservation back. Physical memory lives while any reference does:
// one for creation, one per retain or import, one per mapping (NCCL, for instance, releases
// its handle before unmapping). Per cuda.h these allocations belong to no context.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "internal.h"

namespace sim {
namespace {

struct PhysHandle {
  CUmemAllocationProp prop{};
  uint64_t size = 0;
  int fd = -1;
  int charged_device = -1;  // -1: host memory or an import, not charged to any device
  int owned_refs = 1;
  int map_refs = 0;
};

struct Mapping {
  uint64_t size = 0;
  uint64_t handle = 0;
  std::map<int, unsigned> access;  // device ordinal (-1: host) -> CUmemAccess_flags
};

struct Vmm {
  std::mutex mu;
  std::map<uint64_t, PhysHandle> handles;
  std::map<uint64_t, uint64_t> reservations;  // base -> size
  std::map<uint64_t, Mapping> mappings;       // address -> mapping
  uint64_t next_handle = 0x1000;
};

Vmm& vmm() {
  static Vmm* v = new Vmm();
  return *v;
}

bool is_host_location(CUmemLocationType t) {
  return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    return device(prop->location.id) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }
  return is_host_location(prop->location.type) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Caller holds vmm().mu.
std::map<uint64_t, uint64_t>::iterator reservation_containing(uint64_t p, uint64_t n) {
  auto& rs = vmm().reservations;
  auto it = rs.upper_bound(p);
  if (it == rs.begin()) return rs.end();
  --it;
  return (p >= it->first && p + n <= it->first + it->second) ? it : rs.end();
}

std::map<uint64_t, Mapping>::iterator mapping_containing(uint64_t p) {
  auto& ms = vmm().mappings;
  auto it = ms.upper_bound(p);
  if (it == ms.begin()) return ms.end();
  --it;
  return p - it->first < it->second.size ? it : ms.end();
}

bool overlaps_mapping(uint64_t p, uint64_t n) {
  auto& ms = vmm().mappings;
  auto it = ms.lower_bound(p);
  if (it != ms.end() && it->first < p + n) return true;
  if (it != ms.begin()) {
    --it;
    if (it->first + it->second.size > p) return true;
  }
  return false;
}

// The mappings that exactly tile [p, p+n), or an empty list.
std::vector<std::map<uint64_t, Mapping>::iterator> tiling(uint64_t p, uint64_t n) {
  std::vector<std::map<uint64_t, Mapping>::iterator> out;
  auto& ms = vmm().mappings;
  uint64_t cur = p;
  for (auto it = ms.find(p); it != ms.end() && it->first == cur && cur < p + n; ++it) {
    out.push_back(it);
    cur += it->second.size;
  }
  if (cur != p + n) out.clear();
  return out;
}

// Every byte of [p, p+n) mapped (mappings may extend past either end).
std::vector<std::map<uint64_t, Mapping>::iterator> covering(uint64_t p, uint64_t n) {
  std::vector<std::map<uint64_t, Mapping>::iterator> out;
  uint64_t cur = p;
  auto it = mapping_containing(p);
  while (it != vmm().mappings.end() && it->first <= cur && cur < p + n) {
    out.push_back(it);
    cur = it->first + it->second.size;
    ++it;
  }
  if (cur < p + n) out.clear();
  return out;
}

void drop_ref_locked(std::map<uint64_t, PhysHandle>::iterator it) {
  PhysHandle& h = it->second;
  if (h.owned_refs + h.map_refs != 0) return;
  ::close(h.fd);
  if (h.charged_device >= 0) uncharge(*device(h.charged_device), h.size);
  vmm().handles.erase(it);
}

bool restore_reservation(uint64_t va, uint64_t size) {
  void* p = ::mmap(reinterpret_cast<void*>(va), size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p != MAP_FAILED;
}

uint64_t page_size() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

bool vmm_reservation_of(uint64_t p, uint64_t* base, uint64_t* size) {
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = reservation_containing(p, 1);
  if (it == vmm().reservations.end()) return false;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second;
  return true;
}

uint64_t vmm_allowed_handle_types(uint64_t handle) {
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = vmm().handles.find(handle);
  return it == vmm().handles.end() ? 0 : it->second.prop.requestedHandleTypes;
}

unsigned vmm_access_flags(uint64_t addr, int dev) {
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = mapping_containing(addr);
  if (it == vmm().mappings.end()) return CU_MEM_ACCESS_FLAGS_PROT_NONE;
  auto f = it->second.access.find(dev);
  return f == it->second.access.end() ? static_cast<unsigned>(CU_MEM_ACCESS_FLAGS_PROT_NONE) : f->second;
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  SIM_ENTER();
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  SIM_ENTER();
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  constexpr unsigned kKnownTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                                   CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
  if (prop->requestedHandleTypes & ~kKnownTypes) return CUDA_ERROR_INVALID_VALUE;
  if (prop->requestedHandleTypes & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  const int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  if (dev >= 0 && !charge(*device(dev), size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = ::memfd_create("simcuda-vmm", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) ::close(fd);
    if (dev >= 0) uncharge(*device(dev), size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  PhysHandle h;
  h.prop = *prop;
  h.size = size;
  h.fd = fd;
  h.charged_device = dev;
  std::lock_guard<std::mutex> lock(vmm().mu);
  const uint64_t id = vmm().next_handle++;
  vmm().handles.emplace(id, h);
  *handle = id;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = vmm().handles.find(handle);
  if (it == vmm().handles.end() || it->second.owned_refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.owned_refs;
  drop_ref_locked(it);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  SIM_ENTER();
  if (ptr == nullptr || flags != 0 || size == 0 || size % page_size() != 0 || addr % page_size() != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  alignment = std::max<uint64_t>(alignment, kGranularity);
  if (size > UINT64_MAX - alignment) return CUDA_ERROR_OUT_OF_MEMORY;
  const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  uint64_t base = 0;
  if (addr != 0 && addr % alignment == 0) {  // honour the hint when that range is free
    void* p = ::mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && reinterpret_cast<uint64_t>(p) == addr) {
      base = addr;
    } else if (p != MAP_FAILED) {
      ::munmap(p, size);
    }
  }
  if (base == 0) {
    void* p = ::mmap(nullptr, size + alignment, PROT_NONE, mflags, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    const uint64_t raw = reinterpret_cast<uint64_t>(p);
    base = (raw + alignment - 1) / alignment * alignment;
    if (base > raw) ::munmap(p, base - raw);
    const uint64_t tail = raw + size + alignment - (base + size);
    if (tail != 0) ::munmap(reinterpret_cast<void*>(base + size), tail);
  }
  std::lock_guard<std::mutex> lock(vmm().mu);
  vmm().reservations.emplace(base, size);
  *ptr = base;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = vmm().reservations.find(ptr);
  if (it == vmm().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  if (overlaps_mapping(ptr, size)) return CUDA_ERROR_INVALID_VALUE;  // unmap first
  ::munmap(reinterpret_cast<void*>(ptr), size);
  vmm().reservations.erase(it);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  SIM_ENTER();
  if (flags != 0 || size == 0 || ptr % kGranularity != 0 || size % kGranularity != 0 || offset % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto h = vmm().handles.find(handle);
  if (h == vmm().handles.end() || offset >= h->second.size || size > h->second.size - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reservation_containing(ptr, size) == vmm().reservations.end() || overlaps_mapping(ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->second.fd,
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    restore_reservation(ptr, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Mapping m;
  m.size = size;
  m.handle = handle;
  vmm().mappings.emplace(ptr, m);
  ++h->second.map_refs;
  Allocation a;
  a.base = ptr;
  a.size = size;
  a.kind = Kind::VmmMapping;
  a.device = h->second.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? h->second.prop.location.id : -1;
  a.handle = handle;
  a.buffer_id = next_buffer_id();
  registry_insert(a);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIM_ENTER();
  // Synchronous, as documented: queued work on the range finishes first.
  CUctx_st* c;
  if (current_ctx(&c) == CUDA_SUCCESS) sync_before_blocking_op(c, false);
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto parts = tiling(ptr, size);
  if (parts.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : parts) {
    const uint64_t va = it->first;
    const Mapping m = it->second;
    restore_reservation(va, m.size);
    registry_take(va, [](const Allocation& e) { return e.kind == Kind::VmmMapping; });
    vmm().mappings.erase(it);
    auto h = vmm().handles.find(m.handle);
    --h->second.map_refs;
    drop_ref_locked(h);
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  SIM_ENTER();
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& loc = desc[i].location;
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (device(loc.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    } else if (!is_host_location(loc.type)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto parts = covering(ptr, size);
  if (parts.empty()) return CUDA_ERROR_INVALID_VALUE;
  // Recorded for cuMemGetAccess; the host view stays read/write so the program and tests can
  // inspect device memory directly.
  for (auto it : parts) {
    for (size_t i = 0; i < count; ++i) {
      const int key = desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE ? desc[i].location.id : -1;
      it->second.access[key] = desc[i].flags;
    }
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  SIM_ENTER();
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int key = -1;
  if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (device(location->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    key = location->id;
  } else if (!is_host_location(location->type)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = mapping_containing(ptr);
  if (it == vmm().mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  auto f = it->second.access.find(key);
  *flags = f == it->second.access.end() ? static_cast<unsigned>(CU_MEM_ACCESS_FLAGS_PROT_NONE) : f->second;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  SIM_ENTER();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = mapping_containing(reinterpret_cast<uint64_t>(addr));
  if (it == vmm().mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  ++vmm().handles.at(it->second.handle).owned_refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  SIM_ENTER();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = vmm().handles.find(handle);
  if (it == vmm().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

// A POSIX file descriptor is the memfd itself, so an importer (this or another process)
// maps the very same bytes.
SIM_API CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
  SIM_ENTER();
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(vmm().mu);
  auto it = vmm().handles.find(handle);
  if (it == vmm().handles.end() || !(it->second.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = ::dup(it->second.fd);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

// Imported memory is foreign: it belongs to the exporter's capacity, not this process's.
SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  SIM_ENTER();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  PhysHandle h;
  h.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  h.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  h.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  h.prop.location.id = 0;
  h.size = static_cast<uint64_t>(st.st_size);
  h.fd = own;
  std::lock_guard<std::mutex> lock(vmm().mu);
  for (const auto& [id, other] : vmm().handles) {  // same process: keep the exporter's properties
    struct stat ost;
    if (::fstat(other.fd, &ost) == 0 && ost.st_dev == st.st_dev && ost.st_ino == st.st_ino) h.prop = other.prop;
  }
  const uint64_t id = vmm().next_handle++;
  vmm().handles.emplace(id, h);
  *handle = id;
  return CUDA_SUCCESS;
}
