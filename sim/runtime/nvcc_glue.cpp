// The hidden calls nvcc emits into host code (`-cudart shared`): module and kernel registration from static
// constructors, and the <<<>>> launch sequence. Registration only takes notes and never touches the driver,
// because it runs before main and must not initialise CUDA. Launches fail with the error real CUDA gives
// when no kernel image matches the device: the simulated device executes no device code.
#include <pthread.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "internal.h"

namespace simcudart {
namespace {

struct Module {
  const void* fatbin;
};

struct Kernel {
  Module* module;
  const char* host_function;
  const char* device_name;
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, Kernel*> kernels;  // host stub address -> kernel
};

// Leaked on purpose: programs unregister their modules from atexit handlers, possibly after our statics.
// Built on first use under g_registry_mutex (constant-initialised), not as a function-local static: a fork
// while another thread constructs it must not leave the child waiting on the static's guard.
std::mutex g_registry_mutex;
std::atomic<Registry*> g_registry{nullptr};

Registry& registry() {
  if (Registry* r = g_registry.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  Registry* r = g_registry.load(std::memory_order_relaxed);
  if (!r) {
    r = new Registry;
    g_registry.store(r, std::memory_order_release);
  }
  return *r;
}

// fork(): the child (whose only thread is the one that called fork) would wait forever on a registry lock
// another thread held at the fork, and could find the map half updated. Both locks are leaves held only for a
// few map operations, never across a call out of this file and never one while waiting for the other, so
// fork() takes them and releases them on both sides: the child gets a consistent registry it may keep using.
// Whether it may use the device is the driver's answer (not after the parent initialised it).
Registry* g_forking_registry = nullptr;  // the registry whose lock the prepare handler took

void before_fork() {
  g_registry_mutex.lock();
  g_forking_registry = g_registry.load(std::memory_order_acquire);
  if (g_forking_registry) g_forking_registry->mutex.lock();
}

void after_fork() {
  if (g_forking_registry) g_forking_registry->mutex.unlock();
  g_forking_registry = nullptr;
  g_registry_mutex.unlock();
}

__attribute__((constructor)) void register_fork_handlers() { pthread_atfork(&before_fork, &after_fork, &after_fork); }

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_mem;
  cudaStream_t stream;
};

thread_local std::vector<LaunchConfig>* t_configs = nullptr;

std::vector<LaunchConfig>& configs() {
  if (!t_configs) t_configs = new std::vector<LaunchConfig>;
  return *t_configs;
}

Kernel* find_kernel(const void* host_function) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.kernels.find(host_function);
  return it == r.kernels.end() ? nullptr : it->second;
}

cudaError_t launch(const void* func) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!func || !find_kernel(func)) return fail(cudaErrorInvalidDeviceFunction);
  return fail(cudaErrorNoKernelImageForDevice);
}

cudaError_t launch_handle(cudaKernel_t kernel) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  if (!kernel) return fail(cudaErrorInvalidDeviceFunction);
  return fail(cudaErrorNoKernelImageForDevice);
}

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  auto* module = new Module{fatCubin};
  return reinterpret_cast<void**>(module);
}

CUDART_EXPORT void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) {}

CUDART_EXPORT void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  auto* module = reinterpret_cast<Module*>(fatCubinHandle);
  if (!module) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.kernels.begin(); it != r.kernels.end();) {
    if (it->second->module == module) {
      delete it->second;
      it = r.kernels.erase(it);
    } else {
      ++it;
    }
  }
  delete module;
}

CUDART_EXPORT char __cudaInitModule(void** fatCubinHandle) { return 1; }

CUDART_EXPORT void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                                          const char* deviceName, int thread_limit, uint3* tid, uint3* bid,
                                          dim3* bDim, dim3* gDim, int* wSize) {
  auto* kernel = new Kernel{reinterpret_cast<Module*>(fatCubinHandle), hostFun, deviceName};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.kernels.emplace(hostFun, kernel);
  if (!inserted) {
    delete it->second;
    it->second = kernel;
  }
}

// Device variables have no storage on the simulated device; registering them is accepted and ignored.
CUDART_EXPORT void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress,
                                     const char* deviceName, int ext, size_t size, int constant, int global) {}

CUDART_EXPORT void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                                            const char* deviceName, int ext, size_t size, int constant,
                                            int global) {}

CUDART_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                   struct CUstream_st* stream) {
  configs().push_back(LaunchConfig{gridDim, blockDim, sharedMem, stream});
  return 0;
}

CUDART_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                                     void* stream) {
  std::vector<LaunchConfig>& stack = configs();
  if (stack.empty()) return fail(cudaErrorMissingConfiguration);
  LaunchConfig c = stack.back();
  stack.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared_mem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

CUDART_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  if (!kernel) return fail(cudaErrorInvalidValue);
  Kernel* k = find_kernel(func);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return k ? cudaSuccess : fail(cudaErrorInvalidDeviceFunction);
}

CUDART_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                             size_t sharedMem, cudaStream_t stream) {
  return launch_handle(kernel);
}

CUDART_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                                  size_t sharedMem, cudaStream_t stream) {
  return launch_handle(kernel);
}

CUDART_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                           size_t sharedMem, cudaStream_t stream) {
  return launch(func);
}

CUDART_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                size_t sharedMem, cudaStream_t stream) {
  return launch(func);
}
