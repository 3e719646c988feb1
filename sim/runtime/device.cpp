// Devices and contexts. Like the real runtime, each thread has a selected device (0 by default) and the
// runtime works in that device's primary context, retained once per process on first use; a context the
// program made current through the driver API takes precedence.
#include <pthread.h>

#include <cstring>
#include <mutex>
#include <new>

#include "internal.h"

namespace simcudart {
namespace {

struct Device {
  CUdevice handle;
  CUcontext primary;
  bool retained;
};

// Never freed: the runtime may be called from atexit handlers that run after static destructors.
Device* g_devices = nullptr;
int g_count = 0;
cudaError_t g_discovery_error = cudaSuccess;
std::once_flag g_discovery_once;
std::mutex g_mutex;  // guards Device::primary / retained

thread_local int t_device = 0;

// In a forked child, whose only thread is the one that called fork(), g_mutex stays locked forever if another
// thread of the parent held it at the fork: replace it with a fresh one. (Not taken before the fork instead:
// it is held across cuDevicePrimaryCtxRetain, which can wait on driver work of other threads, so fork() could
// wait forever.) Whatever the other thread left half done is harmless: a retain in flight means the parent had
// initialised the driver, and then every call of the child that needs it fails with
// cudaErrorInitializationError, as with the real runtime. (The two std::call_once stages are pthread_once
// underneath, which glibc restarts in a child forked while one was running.)
void after_fork_in_child() { new (&g_mutex) std::mutex(); }

__attribute__((constructor)) void register_fork_handler() { pthread_atfork(nullptr, nullptr, &after_fork_in_child); }

void discover() {
  cudaError_t e = simcuda_resolve::ensure_initialized();
  if (e != cudaSuccess) {
    g_discovery_error = e;
    return;
  }
  int n = 0;
  CUresult r = drv().cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS) {
    g_discovery_error = simcuda_resolve::to_cuda_error(r);
    return;
  }
  if (n <= 0) {
    g_discovery_error = cudaErrorNoDevice;
    return;
  }
  auto* devices = new Device[n]();
  for (int i = 0; i < n; ++i) {
    r = drv().cuDeviceGet(&devices[i].handle, i);
    if (r != CUDA_SUCCESS) {
      g_discovery_error = simcuda_resolve::to_cuda_error(r);
      delete[] devices;
      return;
    }
  }
  g_devices = devices;
  g_count = n;
}

cudaError_t retain_primary(int ordinal, CUcontext* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Device& d = g_devices[ordinal];
  if (!d.retained) {
    CUresult r = drv().cuDevicePrimaryCtxRetain(&d.primary, d.handle);
    if (r != CUDA_SUCCESS) return check(r);
    d.retained = true;
  }
  *out = d.primary;
  return cudaSuccess;
}

cudaError_t make_current(int ordinal) {
  CUcontext ctx = nullptr;
  if (cudaError_t e = retain_primary(ordinal, &ctx); e != cudaSuccess) return e;
  return check(drv().cuCtxSetCurrent(ctx));
}

bool valid_ordinal(int ordinal) { return ordinal >= 0 && ordinal < g_count; }

}  // namespace

cudaError_t enter_no_context() {
  if (cudaError_t s = sticky_error(); s != cudaSuccess) return s;
  std::call_once(g_discovery_once, discover);
  if (g_discovery_error != cudaSuccess) return fail(g_discovery_error);
  return cudaSuccess;
}

cudaError_t enter() {
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  CUcontext current = nullptr;
  if (cudaError_t e = check(drv().cuCtxGetCurrent(&current)); e != cudaSuccess) return e;
  if (current) return cudaSuccess;
  return make_current(t_device);
}

int device_count() { return g_count; }

CUdevice cu_device(int ordinal) { return g_devices[ordinal].handle; }

int current_device() {
  CUcontext current = nullptr;
  if (drv().cuCtxGetCurrent(&current) == CUDA_SUCCESS && current) {
    CUdevice dev = 0;
    if (drv().cuCtxGetDevice(&dev) == CUDA_SUCCESS)
      for (int i = 0; i < g_count; ++i)
        if (g_devices[i].handle == dev) return i;
  }
  return t_device;
}

}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) {
    *count = 0;
    return e;
  }
  *count = device_count();
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  t_device = device;
  // Since CUDA 12 selecting a device also initialises its primary context.
  return make_current(device);
}

CUDART_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  *device = current_device();
  return cudaSuccess;
}

// Resets the primary context in place: its memory, streams and events are gone, but the handle and the
// runtime's reference stay valid (the driver keeps a reset primary context's handle), so every thread
// that has it current simply carries on with a fresh context.
CUDART_EXPORT cudaError_t cudaDeviceReset(void) {
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  return check(drv().cuDevicePrimaryCtxReset(cu_device(current_device())));
}

CUDART_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuCtxSynchronize());
}

CUDART_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuMemGetInfo(free, total));
}

CUDART_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  // cudaDeviceAttr values are defined equal to CUdevice_attribute values.
  return check(drv().cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), cu_device(device)));
}

CUDART_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter_no_context(); e != cudaSuccess) return e;
  if (!valid_ordinal(device)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  CUdevice dev = cu_device(device);
  const DriverTable& d = drv();
  if (cudaError_t e = check(d.cuDeviceGetName(prop->name, sizeof(prop->name), dev)); e != cudaSuccess) return e;
  if (cudaError_t e = check(d.cuDeviceTotalMem(&prop->totalGlobalMem, dev)); e != cudaSuccess) return e;
  CUuuid uuid{};
  if (d.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) std::memcpy(&prop->uuid, &uuid, sizeof(uuid));

  // Attributes the simulated driver does not know stay zero, as fields of an older struct would.
  auto get = [&](CUdevice_attribute a) {
    int v = 0;
    return d.cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
  };
  prop->major = get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop->minor = get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop->multiProcessorCount = get(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop->warpSize = get(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->maxThreadsPerBlock = get(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  prop->sharedMemPerBlockOptin = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  prop->sharedMemPerMultiprocessor =
      static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  prop->totalConstMem = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY));
  prop->regsPerBlock = get(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->regsPerMultiprocessor = get(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop->memPitch = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_MAX_PITCH));
  prop->textureAlignment = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT));
  prop->texturePitchAlignment = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT));
  prop->integrated = get(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  prop->canMapHostMemory = get(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop->concurrentKernels = get(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop->ECCEnabled = get(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  prop->pciBusID = get(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop->pciDeviceID = get(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  prop->pciDomainID = get(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  prop->asyncEngineCount = get(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop->unifiedAddressing = get(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop->memoryBusWidth = get(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop->l2CacheSize = get(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop->maxThreadsPerMultiProcessor = get(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop->maxBlocksPerMultiProcessor = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop->streamPrioritiesSupported = get(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop->managedMemory = get(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop->concurrentManagedAccess = get(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop->pageableMemoryAccess = get(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS);
  prop->isMultiGpuBoard = get(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
  prop->computePreemptionSupported = get(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED);
  prop->cooperativeLaunch = get(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  prop->hostRegisterSupported = get(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED);
  prop->memoryPoolsSupported = get(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop->memoryPoolSupportedHandleTypes =
      static_cast<unsigned>(get(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));
  prop->gpuDirectRDMASupported = get(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
  prop->clusterLaunch = get(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  prop->ipcEventSupported = get(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED);
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return fail(cudaErrorInvalidValue);
  // Reported even when the driver is too old for this runtime (that is how programs diagnose it).
  simcuda_resolve::ensure_initialized();
  *driverVersion = simcuda_resolve::driver_version();
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return fail(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
