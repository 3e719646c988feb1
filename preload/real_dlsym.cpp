#include "preload/real_dlsym.hpp"

#include <dlfcn.h>

#include <atomic>

#include "preload/driver_decls.hpp"

namespace memtrace::preload {

namespace {
// A plain word read with atomic builtins: std::atomic's members are library code, instrumented in
// sanitizer builds, and this is read before a sanitizer has set itself up.
DlsymFn g_next = nullptr;

MEMTRACE_NO_SANITIZE DlsymFn libc_dlsym() {
  // Versioned lookup always lands in libc: glibc rejects an unversioned interposer
  // definition for a versioned request.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
  return reinterpret_cast<DlsymFn>(p);
}
}  // namespace

MEMTRACE_NO_SANITIZE DlsymFn next_dlsym() {
  DlsymFn f = __atomic_load_n(&g_next, __ATOMIC_ACQUIRE);
  if (f) return f;
  DlsymFn libc = libc_dlsym();
  // Asking libc's dlsym for RTLD_NEXT "dlsym" from here yields a later interposer's dlsym
  // when one exists (e.g. a vGPU limiter in /etc/ld.so.preload), so we stay composable.
  void* next = libc ? libc(RTLD_NEXT, "dlsym") : nullptr;
  f = next ? reinterpret_cast<DlsymFn>(next) : libc;
  __atomic_store_n(&g_next, f, __ATOMIC_RELEASE);  // idempotent race: every thread computes the same
  return f;
}

}  // namespace memtrace::preload
