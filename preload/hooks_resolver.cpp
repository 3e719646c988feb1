// The doors every CUDA runtime (shared or static, in NCCL, cuBLAS, PyTorch...) uses to reach
// the driver: dlsym of exact names, and cuGetProcAddress[_v2]. Substitution is chosen by the
// identity of the pointer the real resolver returned, never by name or version, so ABI
// variants (_v2, _ptsz, 4- vs 5-argument resolvers) can never be mixed up.
#include <dlfcn.h>
#include <link.h>

#include "core/log.hpp"
#include "preload/deep_bind.hpp"
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/log_setup.hpp"
#include "preload/real_dlsym.hpp"
#include "preload/session.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

void* substitute(void* real, const char* symbol, int version, cuuint64_t flags) {
  int id = identify_driver_pointer(real);
  if (id < 0) return real;
  Hook h = static_cast<Hook>(id);
  remember_real(h, real);
  // If this name's slot already holds another pointer (a second driver object), forwarding
  // through our wrapper would call the wrong one: hand out the real pointer instead.
  if (real_pointer(h) != real) return real;
  void* w = hook_wrapper(h);
  log::debug("getproc {} {} {} -> {}", symbol ? symbol : "(null)", version, flags, hook_name(h));
  return w ? w : real;
}

}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                              cuuint64_t flags,
                                                              CUdriverProcAddressQueryResult* symbolStatus) {
  auto real = real_fn<Hook::cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;  // a program that uses CUDA gets a session (and a snapshot at exit)
  rebind_bypassing_objects();  // a runtime resolving entry points: a good time to look (deep_bind.cpp)
  CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r != CUDA_SUCCESS || !pfn || !*pfn) return r;
  if (symbolStatus && *symbolStatus != CU_GET_PROC_ADDRESS_SUCCESS) return r;
  *pfn = substitute(*pfn, symbol, cudaVersion, flags);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                           cuuint64_t flags) {
  auto real = real_fn<Hook::cuGetProcAddress, PFN_cuGetProcAddress_v11030>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  rebind_bypassing_objects();
  CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r != CUDA_SUCCESS || !pfn || !*pfn) return r;
  *pfn = substitute(*pfn, symbol, cudaVersion, flags);
  return r;
}

namespace {

// dlsym(RTLD_NEXT, name) as the caller at `caller` meant it: the first object after the caller's,
// in load order, that defines `name`. Asked of glibc from here, RTLD_NEXT would be taken relative
// to memtrace: an interposer loaded after memtrace would be handed back memtrace's own wrapper,
// which forwards to that interposer, forever.
void* next_after_caller(DlsymFn next, void* caller, const char* name) {
  Dl_info info;
  link_map* self = nullptr;
  if (!caller || !dladdr1(caller, &info, reinterpret_cast<void**>(&self), RTLD_DL_LINKMAP) || !self)
    return next(RTLD_NEXT, name);
  for (link_map* l = self->l_next; l; l = l->l_next) {
    if (!l->l_name || !l->l_name[0]) continue;
    void* h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    void* p = next(h, name);  // searches l and its dependencies: keep it only if l defines it
    dlclose(h);
    Dl_info pi;
    link_map* owner = nullptr;
    if (p && dladdr1(p, &pi, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) && owner == l) return p;
  }
  return nullptr;
}

// The part of the dlsym hook for our own names; out of line so that the common path below
// stays a pure forwarding tail call.
__attribute__((noinline)) void* dlsym_ours(DlsymFn next, void* handle, const char* name, int id, void* caller) {
  read_log_level_once();
  rebind_bypassing_objects();  // before the lookup: the program's dlerror() state is the lookup's
  void* r = handle == RTLD_NEXT ? next_after_caller(next, caller, name) : next(handle, name);
  if (!r) return r;
  Hook h = static_cast<Hook>(id);
  void* wrapper = hook_wrapper(h);
  if (r == wrapper) {
    // A global lookup found our own export. It stands for the driver's function only if the
    // driver has one: a program probing for a feature (dlsym(RTLD_DEFAULT, "cuIpcGetMemHandle"))
    // must get the answer it would get without memtrace.
    void* behind = next(RTLD_NEXT, name);  // relative to memtrace: what the lookup would reach next
    if (!behind || behind == wrapper) return nullptr;
    remember_real(h, behind);
    return r;
  }
  remember_real(h, r);
  if (real_pointer(h) != r) return r;  // a different object than the one we forward to
  log::debug("dlsym {} -> wrapper", name);
  return wrapper;
}

}  // namespace

// dlsym: names that are not ours go on unchanged as a tail call, so glibc still sees the
// original caller's return address (RTLD_NEXT is relative to the caller). No test inspects the
// generated code; the process test glue_chain fails if the forward stops being a tail call
// (libchain's dlsym(RTLD_NEXT, "puts") then finds its own puts instead of libc's). See
// docs/interposition.md, "Names that are not memtrace's".
extern "C" MEMTRACE_EXPORT MEMTRACE_NO_SANITIZE void* dlsym(void* handle, const char* name) {
  DlsymFn next = next_dlsym();
  int id = classify_wrapped_name(name);
  if (__builtin_expect(id < 0, 1)) return next(handle, name);
  return dlsym_ours(next, handle, name, id, __builtin_return_address(0));
}
