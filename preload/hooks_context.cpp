// Context teardown frees every allocation of the context, so its records go too.
#include <atomic>

#include "preload/caching_mode.hpp"
#include "preload/deep_bind.hpp"
#include "preload/driver_decls.hpp"
#include "preload/exit_dump.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

// Each device's primary context as the program's own retains returned it. memtrace never retains
// or releases on the program's behalf: an extra retain/release pair would be calls the program did
// not make, shifting the program's own call sequence (a fault injected at its Nth retain would hit
// memtrace's instead). A handle stays valid after the context is released or reset: the driver
// gives a device's primary context the same handle for the life of the process.
std::atomic<CUcontext> g_primary[kMaxDevices];

CUcontext primary_context_of(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return nullptr;
  return g_primary[dev].load(std::memory_order_acquire);
}

bool primary_still_active(CUdevice dev) {
  auto state = real_fn<Hook::cuDevicePrimaryCtxGetState, decltype(&::cuDevicePrimaryCtxGetState)>();
  unsigned int flags = 0;
  int active = 1;
  if (!state || state(dev, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

// What a context owns (cuda.h, cuCtxDestroy): its linear, managed and pinned host memory.
// VMM physical memory and stream-ordered pool memory belong to no context and survive it,
// except that a primary context reset also drops the device's pool allocations.
// The caching allocator's memory is the context's linear memory: its allocator is taken down
// before the context goes (it gives its segments back while they exist), its records after.
constexpr uint32_t kContextKinds =
    Recorder::kind_bit(MemKind::Device) | Recorder::kind_bit(MemKind::Managed) |
    Recorder::kind_bit(MemKind::HostPinned) | Recorder::kind_bit(MemKind::HostRegistered) |
    Recorder::kind_bit(MemKind::Cached);
constexpr uint32_t kResetKinds = kContextKinds | Recorder::kind_bit(MemKind::Async);

void purge(Session* s, CUcontext ctx, uint32_t kinds) {
  if (!s || !ctx) return;
  before_exit_teardown();
  s->recorder.purge_context(reinterpret_cast<uint64_t>(ctx), kinds);
  invalidate_context_cache();
}

}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  auto real = real_fn<Hook::cuCtxDestroy_v2, decltype(&::cuCtxDestroy_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  if (caching_mode::any_allocator()) caching_mode::drop_context(ctx);
  CUresult r = real(ctx);
  if (r == CUDA_SUCCESS) purge(scope.session(), ctx, kContextKinds);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto real = real_fn<Hook::cuDevicePrimaryCtxRetain, decltype(&::cuDevicePrimaryCtxRetain)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(pctx, dev);
  if (r == CUDA_SUCCESS && pctx && *pctx && dev >= 0 && dev < kMaxDevices)
    g_primary[dev].store(*pctx, std::memory_order_release);
  rebind_bypassing_objects();
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  auto real = real_fn<Hook::cuDevicePrimaryCtxReset_v2, decltype(&::cuDevicePrimaryCtxReset_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUcontext ctx = scope.session() || caching_mode::any_allocator() ? primary_context_of(dev) : nullptr;
  if (ctx && caching_mode::any_allocator()) caching_mode::drop_context(ctx);
  CUresult r = real(dev);
  if (r == CUDA_SUCCESS) purge(scope.session(), ctx, kResetKinds);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  auto real = real_fn<Hook::cuDevicePrimaryCtxRelease_v2, decltype(&::cuDevicePrimaryCtxRelease_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUcontext ctx = scope.session() || caching_mode::any_allocator() ? primary_context_of(dev) : nullptr;
  CUresult r = real(dev);
  if (r == CUDA_SUCCESS && ctx && !primary_still_active(dev)) {
    // The last release destroyed the context, and the allocator's memory with it.
    if (caching_mode::any_allocator()) caching_mode::forget_context(ctx);
    purge(scope.session(), ctx, kContextKinds);
  }
  return r;
}
