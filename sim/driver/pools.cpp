// Memory pools and stream-ordered allocation.
//
// A pool reserves 2 MiB-multiple segments (from the device arena, so they count against
// capacity, or from host memory for host-located pools) and sub-allocates from them. An
// allocation is made immediately (its place in stream order is "now"); a free is queued on
// the stream and returns memory to the pool only when the stream reaches it. Unused reserve
// above the release threshold goes back to the device at the next stream, event or context
// synchronisation, as documented. Pools are never deleted: a destroyed pool is a tombstone
// whose remaining segments are released as their last allocations are freed.
#include <sys/mman.h>

#include <algorithm>

#include "internal.h"

namespace {

struct Segment {
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t used = 0;
  sim::RangeAllocator sub;
};

}  // namespace

struct CUmemPoolHandle_st {
  std::mutex mu;
  CUmemPoolProps props{};
  int device = -1;  // -1: a host pool
  bool is_default = false;
  bool destroyed = false;
  uint64_t threshold = 0;
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  int reuse_follow_event_deps = 1, reuse_allow_opportunistic = 1, reuse_allow_internal_deps = 1;
  std::map<int, CUmemAccess_flags> access;  // device -> flags set by cuMemPoolSetAccess
  std::vector<std::unique_ptr<Segment>> segments;
};

namespace sim {
namespace {

using Pool = CUmemPoolHandle_st;

struct PoolTable {
  std::mutex mu;
  std::vector<Pool*> all;
  Pool* dev_default[kMaxDevices] = {};
  Pool* dev_current[kMaxDevices] = {};
  Pool* host_default = nullptr;
  Pool* host_current = nullptr;
};

PoolTable& table() {
  static PoolTable* t = new PoolTable();
  return *t;
}

bool is_host_location(CUmemLocationType t) {
  return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

Pool* new_pool(const CUmemPoolProps& props, int dev, bool is_default) {  // caller holds table().mu
  auto* p = new Pool();
  p->props = props;
  p->device = dev;
  p->is_default = is_default;
  table().all.push_back(p);
  return p;
}

CUmemPoolProps default_props(CUmemLocationType type, int id) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = type;
  props.location.id = id;
  return props;
}

Pool* default_pool_locked(int dev) {
  PoolTable& t = table();
  if (dev < 0) {
    if (t.host_default == nullptr) t.host_default = new_pool(default_props(CU_MEM_LOCATION_TYPE_HOST, 0), -1, true);
    return t.host_default;
  }
  if (t.dev_default[dev] == nullptr) {
    t.dev_default[dev] = new_pool(default_props(CU_MEM_LOCATION_TYPE_DEVICE, dev), dev, true);
  }
  return t.dev_default[dev];
}

Pool* current_pool(int dev) {
  std::lock_guard<std::mutex> lock(table().mu);
  Pool*& cur = dev < 0 ? table().host_current : table().dev_current[dev];
  return cur != nullptr ? cur : default_pool_locked(dev);
}

bool pool_valid(Pool* p) {
  std::lock_guard<std::mutex> lock(table().mu);
  return p != nullptr && std::find(table().all.begin(), table().all.end(), p) != table().all.end() && !p->destroyed;
}

std::vector<Pool*> all_pools() {
  std::lock_guard<std::mutex> lock(table().mu);
  return table().all;
}

void release_segment(Pool* p, const Segment& s) {
  if (p->device >= 0) {
    device_free(*device(p->device), s.base, s.size);
  } else {
    ::munmap(reinterpret_cast<void*>(s.base), s.size);
  }
}

void trim_locked(Pool* p, uint64_t keep) {
  for (auto it = p->segments.begin(); it != p->segments.end() && p->reserved > keep;) {
    if ((*it)->used == 0) {
      release_segment(p, **it);
      p->reserved -= (*it)->size;
      it = p->segments.erase(it);
    } else {
      ++it;
    }
  }
}

bool add_segment_locked(Pool* p, uint64_t size) {
  if (p->props.maxSize != 0 && p->reserved + size > p->props.maxSize) return false;
  uint64_t base;
  if (p->device >= 0) {
    uint64_t footprint;
    if (device_alloc(*device(p->device), size, &base, &footprint) != CUDA_SUCCESS) return false;
  } else {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    base = reinterpret_cast<uint64_t>(m);
  }
  auto seg = std::make_unique<Segment>();
  seg->base = base;
  seg->size = size;
  seg->sub.reset(size);
  p->segments.push_back(std::move(seg));
  p->reserved += size;
  p->reserved_high = std::max(p->reserved_high, p->reserved);
  return true;
}

bool fit_locked(Pool* p, uint64_t footprint, uint64_t* addr) {
  for (auto& seg : p->segments) {
    if (std::optional<uint64_t> off = seg->sub.allocate(footprint, kLinearAlign)) {
      seg->used += footprint;
      p->used += footprint;
      p->used_high = std::max(p->used_high, p->used);
      *addr = seg->base + *off;
      return true;
    }
  }
  return false;
}

CUresult pool_alloc(Pool* p, uint64_t size, uint64_t* addr, uint64_t* footprint) {
  uint64_t fp, seg_size;
  if (!round_up(size, kLinearAlign, &fp) || !round_up(fp, kGranularity, &seg_size)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(p->mu);
  if (!fit_locked(p, fp, addr)) {
    // Out of reserve: grow, and if the device is full give back idle segments and retry.
    if (!add_segment_locked(p, seg_size)) {
      trim_locked(p, 0);
      if (!add_segment_locked(p, seg_size)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fit_locked(p, fp, addr);
  }
  *footprint = fp;
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t size, Pool* pool, CUstream h, bool ptsz) {
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) {
    pool = current_pool(s->ctx->device);
  } else if (!pool_valid(pool)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t addr, fp;
  if (CUresult r = pool_alloc(pool, size, &addr, &fp); r != CUDA_SUCCESS) return r;
  Allocation a;
  a.base = addr;
  a.size = size;
  a.footprint = fp;
  a.kind = Kind::Async;
  a.device = pool->device;
  a.pool = pool;
  a.buffer_id = next_buffer_id();
  registry_insert(a);
  *dptr = addr;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  std::optional<Allocation> a = registry_mark_free_pending(dptr, [](const Allocation& e) {
    return e.kind == Kind::Async || e.kind == Kind::Linear || e.kind == Kind::Managed || e.kind == Kind::Legacy;
  });
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, [base = a->base, id = a->buffer_id](CUstream_st&) {
    if (auto e = registry_take(base, [id](const Allocation& x) { return x.buffer_id == id; })) release_memory(*e);
  });
  return CUDA_SUCCESS;
}

CUresult location_pool(const CUmemLocation* loc, CUmemAllocationType type, int* dev) {
  if (loc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (device(loc->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    *dev = loc->id;
    return CUDA_SUCCESS;
  }
  if (!is_host_location(loc->type)) return CUDA_ERROR_INVALID_VALUE;
  *dev = -1;
  return CUDA_SUCCESS;
}

CUresult set_current(int dev, Pool* pool) {
  if (!pool_valid(pool) || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(table().mu);
  (dev < 0 ? table().host_current : table().dev_current[dev]) = pool;
  return CUDA_SUCCESS;
}

}  // namespace

void pool_release(Pool* p, uint64_t addr, uint64_t footprint) {
  std::lock_guard<std::mutex> lock(p->mu);
  for (auto& seg : p->segments) {
    if (addr >= seg->base && addr - seg->base < seg->size) {
      seg->sub.release(addr - seg->base, footprint);
      seg->used -= footprint;
      p->used -= footprint;
      break;
    }
  }
  if (p->destroyed) trim_locked(p, 0);
}

void pools_trim_to_thresholds() {
  for (Pool* p : all_pools()) {
    std::lock_guard<std::mutex> lock(p->mu);
    trim_locked(p, p->destroyed ? 0 : p->threshold);
  }
}

void pools_trim_device(int dev) {
  for (Pool* p : all_pools()) {
    if (p->device != dev) continue;
    std::lock_guard<std::mutex> lock(p->mu);
    trim_locked(p, 0);
  }
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  SIM_ENTER();
  return alloc_async(dptr, bytesize, nullptr, hStream, false);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  SIM_ENTER();
  return alloc_async(dptr, bytesize, nullptr, hStream, true);
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  SIM_ENTER();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytesize, pool, hStream, false);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  SIM_ENTER();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytesize, pool, hStream, true);
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  SIM_ENTER();
  return free_async(dptr, hStream, false);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  SIM_ENTER();
  return free_async(dptr, hStream, true);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  SIM_ENTER();
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
  if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->handleTypes & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  int dev;
  if (poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (device(poolProps->location.id) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    dev = poolProps->location.id;
  } else if (is_host_location(poolProps->location.type)) {
    dev = -1;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(table().mu);
  *pool = new_pool(*poolProps, dev, false);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  SIM_ENTER();
  if (!pool_valid(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(table().mu);
    Pool*& cur = pool->device < 0 ? table().host_current : table().dev_current[pool->device];
    if (cur == pool) cur = nullptr;  // the device falls back to its default pool
  }
  std::lock_guard<std::mutex> lock(pool->mu);
  pool->destroyed = true;
  trim_locked(pool, 0);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  SIM_ENTER();
  if (!pool_valid(pool)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(pool->mu);
  trim_locked(pool, minBytesToKeep);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  SIM_ENTER();
  if (value == nullptr || !pool_valid(pool)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(pool->mu);
  auto ivalue = [value] { return *static_cast<const int*>(value); };
  auto u64 = [value] { return *static_cast<const cuuint64_t*>(value); };
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: pool->reuse_follow_event_deps = ivalue(); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: pool->reuse_allow_opportunistic = ivalue(); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: pool->reuse_allow_internal_deps = ivalue(); break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->threshold = u64(); break;
    // High-water marks can only be reset, to the current value, by writing zero.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (u64() != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->reserved_high = pool->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (u64() != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  SIM_ENTER();
  if (value == nullptr || !pool_valid(pool)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(pool->mu);
  auto* i = static_cast<int*>(value);
  auto* u = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *i = pool->reuse_follow_event_deps; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *i = pool->reuse_allow_opportunistic; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *i = pool->reuse_allow_internal_deps; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *u = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *u = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *u = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *u = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *u = pool->used_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  SIM_ENTER();
  if (!pool_valid(pool) || (count != 0 && map == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (device(map[i].location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::lock_guard<std::mutex> lock(pool->mu);
  for (size_t i = 0; i < count; ++i) pool->access[map[i].location.id] = map[i].flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation* location) {
  SIM_ENTER();
  if (flags == nullptr || location == nullptr || !pool_valid(memPool)) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (device(location->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(memPool->mu);
  auto it = memPool->access.find(location->id);
  if (it != memPool->access.end()) {
    *flags = it->second;
  } else {
    // The owning device (and every device, for host pools) has access from the start.
    const bool owner = memPool->device < 0 || memPool->device == location->id;
    *flags = owner ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  SIM_ENTER();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(table().mu);
  *pool_out = default_pool_locked(dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIM_ENTER();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *pool = current_pool(dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  SIM_ENTER();
  if (device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return set_current(dev, pool);
}

SIM_API CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  SIM_ENTER();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  if (CUresult r = location_pool(location, type, &dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(table().mu);
  *pool_out = default_pool_locked(dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  SIM_ENTER();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  if (CUresult r = location_pool(location, type, &dev); r != CUDA_SUCCESS) return r;
  *pool = current_pool(dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  SIM_ENTER();
  int dev;
  if (CUresult r = location_pool(location, type, &dev); r != CUDA_SUCCESS) return r;
  return set_current(dev, pool);
}
