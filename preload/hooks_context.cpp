// Context teardown frees every allocation of the context, so its records go too.
#include "preload/caching_mode.hpp"
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

// The primary context's handle, learned without changing its reference count: a retain
// matched by a release is a no-op on a context that is already alive.
CUcontext primary_context_of(CUdevice dev) {
  auto retain = real_fn<Hook::cuDevicePrimaryCtxRetain, decltype(&::cuDevicePrimaryCtxRetain)>();
  auto release = real_fn<Hook::cuDevicePrimaryCtxRelease_v2, decltype(&::cuDevicePrimaryCtxRelease_v2)>();
  auto state = real_fn<Hook::cuDevicePrimaryCtxGetState, decltype(&::cuDevicePrimaryCtxGetState)>();
  if (!retain || !release || !state) return nullptr;
  unsigned int flags = 0;
  int active = 0;
  if (state(dev, &flags, &active) != CUDA_SUCCESS || !active) return nullptr;
  CUcontext ctx = nullptr;
  if (retain(&ctx, dev) != CUDA_SUCCESS) return nullptr;
  release(dev);
  return ctx;
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
