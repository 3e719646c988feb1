#include "preload/hook_table.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/log.hpp"
#include "preload/driver_decls.hpp"
#include "preload/real_dlsym.hpp"

namespace memtrace::preload {

namespace {

constexpr const char* kNames[kHookCount] = {
#define MEMTRACE_NAME(n) #n,
    MEMTRACE_DRIVER_WRAPPED(MEMTRACE_NAME) MEMTRACE_DRIVER_INTERNAL(MEMTRACE_NAME)
        MEMTRACE_NCCL_WRAPPED(MEMTRACE_NAME)
#undef MEMTRACE_NAME
};

void* const kWrappers[kHookCount] = {
#define MEMTRACE_WRAPPER(n) reinterpret_cast<void*>(&::n),
#define MEMTRACE_NO_WRAPPER(n) nullptr,
    MEMTRACE_DRIVER_WRAPPED(MEMTRACE_WRAPPER) MEMTRACE_DRIVER_INTERNAL(MEMTRACE_NO_WRAPPER)
        MEMTRACE_NCCL_WRAPPED(MEMTRACE_WRAPPER)
#undef MEMTRACE_WRAPPER
#undef MEMTRACE_NO_WRAPPER
};

constexpr int kFirstInternal = static_cast<int>(Hook::cuCtxGetCurrent);
constexpr int kFirstNccl = static_cast<int>(Hook::ncclMemAlloc);

std::atomic<void*> g_real[kHookCount];

constexpr bool kHasWrapper[kHookCount] = {
#define MEMTRACE_YES(n) true,
#define MEMTRACE_NO(n) false,
    MEMTRACE_DRIVER_WRAPPED(MEMTRACE_YES) MEMTRACE_DRIVER_INTERNAL(MEMTRACE_NO) MEMTRACE_NCCL_WRAPPED(MEMTRACE_YES)
#undef MEMTRACE_YES
#undef MEMTRACE_NO
};

MEMTRACE_NO_SANITIZE constexpr int compare_names(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
}

// Names with wrappers, sorted, for binary search in the dlsym hook. Built by the compiler: the
// hook can run before anything in the process is initialised (a sanitizer's runtime looks its
// own functions up with dlsym before constructors run), so it must read only constant data.
struct SortedNames {
  int index[kHookCount] = {};
  int count = 0;
};
constexpr SortedNames make_sorted_names() {
  SortedNames s;
  for (int i = 0; i < kHookCount; ++i)
    if (kHasWrapper[i]) s.index[s.count++] = i;
  std::sort(s.index, s.index + s.count, [](int a, int b) { return compare_names(kNames[a], kNames[b]) < 0; });
  return s;
}
constexpr SortedNames kSortedNames = make_sorted_names();

bool is_own_address(void* p) {
  for (void* w : kWrappers)
    if (w && w == p) return true;
  return false;
}

void* lookup_in_loaded(const char* soname, const char* name) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  void* p = next_dlsym()(h, name);
  // Keep the handle: the library stays pinned so cached pointers never dangle.
  return p;
}

}  // namespace

const char* hook_name(Hook h) { return kNames[static_cast<int>(h)]; }
void* hook_wrapper(Hook h) { return kWrappers[static_cast<int>(h)]; }
bool is_nccl_hook(Hook h) { return static_cast<int>(h) >= kFirstNccl; }

MEMTRACE_NO_SANITIZE int classify_wrapped_name(const char* name) {
  if (!name || (name[0] != 'c' && name[0] != 'n')) return -1;
  const SortedNames& s = kSortedNames;
  int lo = 0, hi = s.count - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = compare_names(name, kNames[s.index[mid]]);
    if (c == 0) return s.index[mid];
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return -1;
}

void remember_real(Hook h, void* real) {
  if (!real || is_own_address(real)) return;
  void* expected = nullptr;
  g_real[static_cast<int>(h)].compare_exchange_strong(expected, real, std::memory_order_acq_rel);
}

void* real_pointer(Hook h) {
  int i = static_cast<int>(h);
  void* p = g_real[i].load(std::memory_order_acquire);
  if (p) return p;
  const char* name = kNames[i];
  // "Next after libmemtrace" is exactly the library the caller meant to reach.
  p = next_dlsym()(RTLD_NEXT, name);
  if (!p || is_own_address(p)) {
    const char* soname = is_nccl_hook(h) ? "libnccl.so.2" : "libcuda.so.1";
    p = lookup_in_loaded(soname, name);
    if (!p && !is_nccl_hook(h)) {
      // The caller wants a driver and none is loaded yet: load it, as linking -lcuda would have.
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (lib) p = next_dlsym()(lib, name);
    }
  }
  if (!p || is_own_address(p)) return nullptr;
  remember_real(h, p);
  return g_real[i].load(std::memory_order_acquire);
}

namespace {

struct AddrEntry {
  uintptr_t addr;
  int hook;
};
struct AddrTable {
  AddrEntry entries[kHookCount];
  int count = 0;
};
std::atomic<AddrTable*> g_addr_table{nullptr};

AddrTable* build_addr_table(void* real) {
  Dl_info info{};
  if (!dladdr(real, &info) || !info.dli_fname) return nullptr;
  void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  auto* t = static_cast<AddrTable*>(std::calloc(1, sizeof(AddrTable)));
  if (!t) return nullptr;
  for (int i = 0; i < kFirstInternal; ++i) {
    void* p = next_dlsym()(h, kNames[i]);
    if (p && !is_own_address(p)) t->entries[t->count++] = {reinterpret_cast<uintptr_t>(p), i};
  }
  std::sort(t->entries, t->entries + t->count,
            [](const AddrEntry& a, const AddrEntry& b) { return a.addr < b.addr; });
  if (log::debug_enabled()) {
    log::debug("address table built from {} ({} driver entry points)", info.dli_fname, t->count);
  }
  return t;
}

}  // namespace

int identify_driver_pointer(void* real) {
  AddrTable* t = g_addr_table.load(std::memory_order_acquire);
  if (!t) {
    AddrTable* fresh = build_addr_table(real);
    if (!fresh) return -1;
    AddrTable* expected = nullptr;
    if (g_addr_table.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
      t = fresh;
    } else {
      std::free(fresh);
      t = expected;
    }
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(real);
  int lo = 0, hi = t->count - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (t->entries[mid].addr == a) return t->entries[mid].hook;
    if (t->entries[mid].addr < a)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

}  // namespace memtrace::preload
