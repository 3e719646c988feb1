#include "preload/real_dlsym.hpp"

#include <dlfcn.h>

#include <atomic>

namespace memtrace::preload {

namespace {
std::atomic<DlsymFn> g_next{nullptr};

DlsymFn libc_dlsym() {
  // Versioned lookup always lands in libc: glibc rejects an unversioned interposer
  // definition for a versioned request.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
  return reinterpret_cast<DlsymFn>(p);
}
}  // namespace

DlsymFn next_dlsym() {
  DlsymFn f = g_next.load(std::memory_order_acquire);
  if (f) return f;
  DlsymFn libc = libc_dlsym();
  // Asking libc's dlsym for RTLD_NEXT "dlsym" from here yields a later interposer's dlsym
  // when one exists (e.g. a vGPU limiter in /etc/ld.so.preload), so we stay composable.
  void* next = libc ? libc(RTLD_NEXT, "dlsym") : nullptr;
  f = next ? reinterpret_cast<DlsymFn>(next) : libc;
  g_next.store(f, std::memory_order_release);  // idempotent race: every thread computes the same
  return f;
}

}  // namespace memtrace::preload
