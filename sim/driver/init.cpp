// cuInit and the calls the runtime makes before it (version, export table); what fork() does
// to the driver.
#include <pthread.h>

#include "internal.h"

namespace sim {
namespace {

// What fork() does to the driver, like the real one: a child forked after cuInit cannot use the
// parent's driver state and cannot start over (cuInit itself fails there); a child of a process
// that never initialised the driver initialises and uses it as any process does.
enum State : int {
  kUninitialised = 0,
  kInitialised = 1,
  kForkedAfterInit = 2,  // in a child (or grandchild) of an initialised process: for good
};
std::atomic<int> g_state{kUninitialised};

// Recursive: one object's construction may need another's (the resolver's index, its table).
pthread_mutex_t g_once_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

// Runs in the child, on its only thread (the copy of the one that called fork), before fork()
// returns there. Every other lock of the driver is reached only by calls that first check
// initialized(), so in a child they are either never reached again (forked after cuInit) or
// were never taken by anyone (forked before it); only the construction lock is reachable both
// before and after cuInit, and another thread may have held it at the fork: make a new one.
void after_fork_in_child() {
  if (g_state.load(std::memory_order_relaxed) == kInitialised) {
    g_state.store(kForkedAfterInit, std::memory_order_relaxed);
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&g_once_mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

// As the library loads, before anything can call it (or fork with it loaded). A dlclose'd
// driver's handler is removed with it by glibc.
__attribute__((constructor)) void register_fork_handler() {
  pthread_atfork(nullptr, nullptr, &after_fork_in_child);
}

}  // namespace

bool initialized() { return g_state.load(std::memory_order_acquire) == kInitialised; }

OnceLock::OnceLock() { pthread_mutex_lock(&g_once_mutex); }
OnceLock::~OnceLock() { pthread_mutex_unlock(&g_once_mutex); }

}  // namespace sim

SIM_API CUresult cuInit(unsigned int Flags) {
  SIM_FAULT_CHECK();
  // The real driver answers a child forked after cuInit with CUDA_ERROR_NOT_INITIALIZED
  // ("initialization error"), here too whatever the flags.
  if (sim::g_state.load(std::memory_order_acquire) == sim::kForkedAfterInit) return CUDA_ERROR_NOT_INITIALIZED;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // A machine without devices fails cuInit and stays uninitialised, as the real driver does.
  if (sim::config().devices == 0) return CUDA_ERROR_NO_DEVICE;
  int expected = sim::kUninitialised;
  if (!sim::g_state.compare_exchange_strong(expected, sim::kInitialised, std::memory_order_acq_rel) &&
      expected == sim::kForkedAfterInit) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int* driverVersion) {
  SIM_FAULT_CHECK();
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = sim::kDriverVersion;
  return CUDA_SUCCESS;
}

// The runtime's private interface is not simulated: failing here makes the real libcudart
// stop cleanly (cudaErrorInitializationError) after it has resolved all its entry points.
SIM_API CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  SIM_FAULT_CHECK();
  if (ppExportTable != nullptr) *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
