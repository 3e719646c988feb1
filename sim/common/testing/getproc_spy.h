// Test-only: a miniature interposer, included by exactly one translation unit of a test executable that is
// linked with ENABLE_EXPORTS. Its dlsym is found before libc's by the simulated runtime's and NCCL's
// dlsym(handle, "cuGetProcAddress_v2"), exactly as an LD_PRELOAD library's would be. It then records every
// cuGetProcAddress_v2 lookup (through the first pointer and through the master resolver, which it takes
// over by answering the ("cuGetProcAddress", 12000) self-lookup with its own function). With
// GETPROC_SPY_WRAP defined it also swaps in call-recording wrappers for a few memory functions handed out
// by the master resolver, so tests can assert the exact driver traffic.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace getproc_spy {

struct Lookup {
  bool via_master;  // false: through the pointer dlsym returned
  std::string name;
  int version;
  unsigned long long flags;
  void* driver_result;  // what the driver answered, before any substitution
};

struct State {
  std::mutex mutex;
  std::vector<std::string> dlsym_names;
  std::vector<Lookup> lookups;
  std::vector<std::string> calls;
  PFN_cuGetProcAddress_v12000 real_first = nullptr;
  PFN_cuGetProcAddress_v12000 real_master = nullptr;
#define GETPROC_SPY_SLOT(fn, pfn) pfn real_##fn = nullptr;
#define GETPROC_SPY_FUNCTIONS(X)                                                     \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                                               \
  X(cuMemFree, PFN_cuMemFree_v3020)                                                 \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                            \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                          \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                            \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                  \
  X(cuMemMap, PFN_cuMemMap_v10020)                                                  \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                              \
  X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)                                      \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)            \
  X(cuMemGetAddressRange, PFN_cuMemGetAddressRange_v3020)                           \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020)
  GETPROC_SPY_FUNCTIONS(GETPROC_SPY_SLOT)
#undef GETPROC_SPY_SLOT
};

inline State& state() {
  static State* s = new State;
  return *s;
}

inline void note_call(const char* name) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().calls.emplace_back(name);
}

inline std::vector<Lookup> lookups() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().lookups;
}

inline std::vector<std::string> calls() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().calls;
}

inline void clear_calls() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().calls.clear();
}

// Wrappers: record the call, forward to the driver's function.
inline CUresult w_cuMemAlloc(CUdeviceptr* p, size_t n) {
  note_call("cuMemAlloc_v2");
  return state().real_cuMemAlloc(p, n);
}
inline CUresult w_cuMemFree(CUdeviceptr p) {
  note_call("cuMemFree_v2");
  return state().real_cuMemFree(p);
}
inline CUresult w_cuMemCreate(CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* prop,
                              unsigned long long flags) {
  note_call("cuMemCreate");
  return state().real_cuMemCreate(h, n, prop, flags);
}
inline CUresult w_cuMemRelease(CUmemGenericAllocationHandle h) {
  note_call("cuMemRelease");
  return state().real_cuMemRelease(h);
}
inline CUresult w_cuMemAddressReserve(CUdeviceptr* p, size_t n, size_t align, CUdeviceptr addr,
                                      unsigned long long flags) {
  note_call("cuMemAddressReserve");
  return state().real_cuMemAddressReserve(p, n, align, addr, flags);
}
inline CUresult w_cuMemAddressFree(CUdeviceptr p, size_t n) {
  note_call("cuMemAddressFree");
  return state().real_cuMemAddressFree(p, n);
}
inline CUresult w_cuMemMap(CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle h,
                           unsigned long long flags) {
  note_call("cuMemMap");
  return state().real_cuMemMap(p, n, offset, h, flags);
}
inline CUresult w_cuMemUnmap(CUdeviceptr p, size_t n) {
  note_call("cuMemUnmap");
  return state().real_cuMemUnmap(p, n);
}
inline CUresult w_cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc* desc, size_t count) {
  note_call("cuMemSetAccess");
  return state().real_cuMemSetAccess(p, n, desc, count);
}
inline CUresult w_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  note_call("cuMemRetainAllocationHandle");
  return state().real_cuMemRetainAllocationHandle(h, addr);
}
inline CUresult w_cuMemGetAddressRange(CUdeviceptr* base, size_t* n, CUdeviceptr p) {
  note_call("cuMemGetAddressRange_v2");
  return state().real_cuMemGetAddressRange(base, n, p);
}
inline CUresult w_cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags option) {
  note_call(option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? "cuMemGetAllocationGranularity(RECOMMENDED)"
                                                           : "cuMemGetAllocationGranularity(MINIMUM)");
  return state().real_cuMemGetAllocationGranularity(g, prop, option);
}

inline void substitute(const char* name, void** pfn) {
  State& s = state();
#define GETPROC_SPY_SWAP(fn, pfn_type)                 \
  if (std::strcmp(name, #fn) == 0) {                   \
    s.real_##fn = reinterpret_cast<pfn_type>(*pfn);    \
    *pfn = reinterpret_cast<void*>(&w_##fn);           \
    return;                                            \
  }
  GETPROC_SPY_FUNCTIONS(GETPROC_SPY_SWAP)
#undef GETPROC_SPY_SWAP
}

inline CUresult master(const char* symbol, void** pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult* status) {
  CUresult r = state().real_master(symbol, pfn, version, flags, status);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().lookups.push_back(Lookup{true, symbol, version, flags, r == CUDA_SUCCESS ? *pfn : nullptr});
#ifdef GETPROC_SPY_WRAP
  // Plain lookups only: the per-thread twins keep the driver's pointer.
  if (r == CUDA_SUCCESS && *pfn && flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    substitute(symbol, pfn);
#endif
  return r;
}

inline CUresult first(const char* symbol, void** pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult* status) {
  CUresult r = state().real_first(symbol, pfn, version, flags, status);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().lookups.push_back(Lookup{false, symbol, version, flags, r == CUDA_SUCCESS ? *pfn : nullptr});
  if (r == CUDA_SUCCESS && *pfn && std::strcmp(symbol, "cuGetProcAddress") == 0 && version >= 12000) {
    state().real_master = reinterpret_cast<PFN_cuGetProcAddress_v12000>(*pfn);
    *pfn = reinterpret_cast<void*>(&master);
  }
  return r;
}

inline void* libc_dlsym(void* handle, const char* name) {
  using Fn = void* (*)(void*, const char*);
  static Fn real = [] {
    void* f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f) f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<Fn>(f);
  }();
  return real(handle, name);
}

// Before the program's constructors run, dlsym may be called by a sanitizer's runtime setting
// itself up, when no instrumented code can run yet: those lookups go straight to libc, untouched.
inline bool g_ready = false;
__attribute__((constructor)) inline void mark_ready() { g_ready = true; }

using DlsymFn = void* (*)(void*, const char*);
__attribute__((no_sanitize("address", "undefined", "thread"))) inline DlsymFn early_libc_dlsym() {
  void* f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!f) f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  return reinterpret_cast<DlsymFn>(f);
}

inline void* spy_dlsym(void* handle, const char* name);

}  // namespace getproc_spy

extern "C" __attribute__((visibility("default"))) __attribute__((no_sanitize("address", "undefined", "thread")))
void* dlsym(void* handle, const char* name) {
  // A tail call, so that libc sees the original caller (RTLD_NEXT is relative to it).
  if (!getproc_spy::g_ready) return getproc_spy::early_libc_dlsym()(handle, name);
  return getproc_spy::spy_dlsym(handle, name);
}

namespace getproc_spy {
inline void* spy_dlsym(void* handle, const char* name) {
  void* r = getproc_spy::libc_dlsym(handle, name);
  if (!r) return r;
  getproc_spy::State& s = getproc_spy::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.dlsym_names.emplace_back(name);
  if (std::strcmp(name, "cuGetProcAddress_v2") == 0) {
    s.real_first = reinterpret_cast<PFN_cuGetProcAddress_v12000>(r);
    return reinterpret_cast<void*>(&getproc_spy::first);
  }
  return r;
}
}  // namespace getproc_spy
