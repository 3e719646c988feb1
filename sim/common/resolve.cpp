// Resolution of the driver, done the way the CUDA 13 runtime does it (docs/interposition.md, "How the
// CUDA runtime finds the driver"):
//   dlopen("libcuda.so.1") -> dlsym("cuGetProcAddress_v2") -> "" probe -> cuInit@2000 ->
//   cuGetProcAddress@11030 and @12000 (the second answer is the master resolver) -> every entry point
//   through the master resolver -> cuDriverGetVersion check -> cuInit(0).
// The order matters: memtrace's preload hooks this exact sequence, and the tests drive it on this copy.
#include "simcuda/resolve.h"

#include <dlfcn.h>

#include <mutex>

namespace simcuda_resolve {
namespace {

// Stands in for any entry point the driver does not have. The real runtime does the same, so a program
// calling a function that is too new gets an error rather than a crash. Callers call it through a pointer
// of another type; on the SysV ABI extra arguments are simply ignored.
CUresult missing_entry_point() { return CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER; }

void* missing_address() { return reinterpret_cast<void*>(&missing_entry_point); }

template <typename Pfn>
void store(Pfn& slot, void* fn) {
  slot = reinterpret_cast<Pfn>(fn ? fn : missing_address());
}

struct Stage {
  void* handle = nullptr;
  DriverTable table{};
  cudaError_t error = cudaSuccess;
  int driver_version = 0;
};

// Trivially destructible on purpose: other libraries' atexit handlers may still call through the table
// after static destructors have run.
constinit Stage g_stage{};
constinit std::once_flag g_once{};

void* ask(PFN_cuGetProcAddress_v12000 resolver, const char* name, int version, cuuint64_t flags) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = resolver(name, &fn, version, flags, &status);
  if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) return nullptr;
  return fn;
}

// The path for a driver without cuGetProcAddress_v2 or for the toolkit's stub library: one dlsym per
// versioned ELF name, as the runtime's fallback does.
void resolve_by_dlsym(Stage& s) {
  DriverTable& t = s.table;
  store(t.cuInit, dlsym(s.handle, "cuInit"));
  store(t.cuGetProcAddress_v11030, dlsym(s.handle, "cuGetProcAddress"));
  store(t.cuGetProcAddress_v12000, dlsym(s.handle, "cuGetProcAddress_v2"));
#define SIM_DRIVER_FN(slot, base, version, flags, pfn, elf) store(t.slot, dlsym(s.handle, elf));
#include "simcuda/driver_functions.inc"
#undef SIM_DRIVER_FN
}

void resolve_by_getproc(Stage& s, PFN_cuGetProcAddress_v12000 first) {
  DriverTable& t = s.table;
  store(t.cuInit, ask(first, "cuInit", 2000, 0));
  store(t.cuGetProcAddress_v11030, ask(first, "cuGetProcAddress", 11030, 0));
  void* master = ask(first, "cuGetProcAddress", 12000, 0);
  // A driver that cannot name itself still answered the probe; keep using the pointer dlsym gave.
  store(t.cuGetProcAddress_v12000, master ? master : reinterpret_cast<void*>(first));
  PFN_cuGetProcAddress_v12000 resolver = t.cuGetProcAddress_v12000;
#define SIM_DRIVER_FN(slot, base, version, flags, pfn, elf) store(t.slot, ask(resolver, base, version, flags));
#include "simcuda/driver_functions.inc"
#undef SIM_DRIVER_FN
}

void run_stage() {
  Stage& s = g_stage;
  s.handle = dlopen("libcuda.so.1", RTLD_NOW);
  if (!s.handle) {
    s.error = cudaErrorInsufficientDriver;
    return;
  }
  auto first = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(s.handle, "cuGetProcAddress_v2"));
  bool fallback = first == nullptr;
  if (first) {
    void* probe = nullptr;
    if (first("", &probe, 0, 0, nullptr) == CUDA_ERROR_STUB_LIBRARY) fallback = true;
  }
  if (fallback)
    resolve_by_dlsym(s);
  else
    resolve_by_getproc(s, first);

  int version = 0;
  CUresult r = s.table.cuDriverGetVersion(&version);
  if (r != CUDA_SUCCESS) {
    s.error = to_cuda_error(r);
    return;
  }
  s.driver_version = version;
  if (version < CUDART_VERSION) {
    s.error = cudaErrorInsufficientDriver;
    return;
  }
  r = s.table.cuInit(0);
  if (r != CUDA_SUCCESS) s.error = to_cuda_error(r);
}

}  // namespace

cudaError_t ensure_initialized() {
  std::call_once(g_once, run_stage);
  return g_stage.error;
}

const DriverTable& driver() { return g_stage.table; }

int driver_version() { return g_stage.driver_version; }

bool is_missing(const void* fn) { return fn == missing_address(); }

CUresult driver_entry_point(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn,
                            CUdriverProcAddressQueryResult* status) {
  if (ensure_initialized() != cudaSuccess) return CUDA_ERROR_NOT_INITIALIZED;
  auto master = g_stage.table.cuGetProcAddress_v12000;
  if (is_missing(reinterpret_cast<const void*>(master))) return CUDA_ERROR_NOT_SUPPORTED;
  return master(symbol, pfn, cuda_version, flags, status);
}

cudaError_t to_cuda_error(CUresult r) {
  // The runtime's codes were laid out to coincide with the driver's; only two driver codes have no
  // runtime counterpart.
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: return cudaErrorInvalidValue;
    case CUDA_ERROR_KEY_ROTATION: return cudaErrorUnknown;
    default: break;
  }
  if (is_known_cuda_error(static_cast<int>(r))) return static_cast<cudaError_t>(r);
  return cudaErrorUnknown;
}

}  // namespace simcuda_resolve
