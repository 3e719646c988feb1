// Contexts: created ones, one primary per device, and the per-thread stack of current ones.
//
// Context objects are never freed; a destroyed one stays as a tombstone (alive == false). A
// thread whose stack still holds it then gets CUDA_ERROR_CONTEXT_IS_DESTROYED, as documented,
// instead of a use-after-free, and a stale handle can never alias a newer context.
#include "internal.h"

namespace sim {
namespace {

struct CtxTable {
  std::mutex mu;
  std::set<CUctx_st*> all;
};

CtxTable& table() {
  static CtxTable* t = new CtxTable();
  return *t;
}

// Plain TLS arrays: no destructors that could run before another library's exit-time calls.
constexpr int kStackDepth = 64;
thread_local CUctx_st* t_stack[kStackDepth];
thread_local int t_depth = 0;

bool valid_ctx_flags(unsigned flags) {
  if (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) return false;
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  return sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
         sched == CU_CTX_SCHED_BLOCKING_SYNC;
}

bool push(CUctx_st* c) {
  if (t_depth == kStackDepth) return false;
  t_stack[t_depth++] = c;
  return true;
}

// What a context takes down with it. Per cuda.h, cuMemCreate and pool (cuMemAllocAsync)
// allocations are not associated with any context and survive; a device reset also empties
// that device's pools.
void teardown(CUctx_st* c, bool device_reset) {
  ctx_streams_teardown(c);
  std::vector<Allocation> owned = registry_take_all([c, device_reset](const Allocation& a) {
    if (a.kind == Kind::VmmMapping) return false;
    if (a.kind == Kind::Async) return device_reset && a.device == c->device;
    return a.ctx == c;
  });
  for (const Allocation& a : owned) release_memory(a);
  if (device_reset) pools_trim_device(c->device);
}

CUresult create(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr || !valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (t_depth == kStackDepth) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* c = new CUctx_st();
  c->device = dev;
  c->flags = flags;
  ctx_streams_init(c);
  c->alive.store(true);
  {
    std::lock_guard<std::mutex> lock(table().mu);
    table().all.insert(c);
  }
  push(c);
  *pctx = c;
  return CUDA_SUCCESS;
}

CUresult destroy(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx_valid(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ctx->alive.exchange(false)) return CUDA_ERROR_INVALID_CONTEXT;  // lost a race with another destroy
  teardown(ctx, false);
  // Popped from this thread only; other threads keep a tombstone, as documented.
  int kept = 0;
  for (int i = 0; i < t_depth; ++i) {
    if (t_stack[i] != ctx) t_stack[kept++] = t_stack[i];
  }
  t_depth = kept;
  return CUDA_SUCCESS;
}

CUresult push_current(CUcontext ctx) {
  if (ctx == nullptr || !ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return push(ctx) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult pop_current(CUcontext* pctx) {
  if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* c = t_stack[--t_depth];
  if (pctx != nullptr) *pctx = c;
  return CUDA_SUCCESS;
}

CUresult ctx_or_current(CUcontext ctx, CUctx_st** out) {
  if (ctx == nullptr) return current_ctx(out);
  if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUctx_st* primary_of(Device& d) {
  std::lock_guard<std::mutex> lock(table().mu);
  if (d.primary == nullptr) {
    d.primary = new CUctx_st();
    d.primary->device = d.ordinal;
    d.primary->primary = true;
    table().all.insert(d.primary);
  }
  return d.primary;
}

// Serialises activation and teardown of primary contexts (never taken under another lock).
std::mutex& primary_mu() {
  static std::mutex* m = new std::mutex();
  return *m;
}

CUresult primary_release(CUdevice dev) {
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* c = primary_of(*d);
  std::lock_guard<std::mutex> lock(primary_mu());
  if (c->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c->primary_refs != 0) return CUDA_SUCCESS;
  c->alive.store(false);
  teardown(c, false);
  return CUDA_SUCCESS;
}

// The primary context keeps its handle across reset: holders of a reference keep using it.
CUresult primary_reset(CUdevice dev) {
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* c = primary_of(*d);
  std::lock_guard<std::mutex> lock(primary_mu());
  teardown(c, true);
  if (c->primary_refs != 0) ctx_streams_init(c);
  return CUDA_SUCCESS;
}

CUresult primary_set_flags(CUdevice dev, unsigned flags, bool allow_when_active) {
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c = primary_of(*d);
  std::lock_guard<std::mutex> lock(primary_mu());
  if (c->primary_refs != 0 && !allow_when_active) return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
  c->flags = flags;
  return CUDA_SUCCESS;
}

}  // namespace

bool ctx_valid(CUctx_st* c) {
  std::lock_guard<std::mutex> lock(table().mu);
  return table().all.count(c) != 0 && c->alive.load();
}

CUresult current_ctx(CUctx_st** out) {
  if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* c = t_stack[t_depth - 1];
  if (!c->alive.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

int ctx_device(CUctx_st* c) { return c->device; }

}  // namespace sim

using namespace sim;

SIM_API CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  SIM_ENTER();
  return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  SIM_ENTER();
  return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                                CUdevice dev) {
  SIM_ENTER();
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (numParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  SIM_ENTER();
  if (ctxCreateParams != nullptr) {
    if (ctxCreateParams->numExecAffinityParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (ctxCreateParams->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx) {
  SIM_ENTER();
  return destroy(ctx);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  SIM_ENTER();
  return destroy(ctx);
}

SIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  SIM_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_depth == 0 ? nullptr : t_stack[t_depth - 1];
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  SIM_ENTER();
  if (ctx == nullptr) {
    if (t_depth > 0) --t_depth;
    return CUDA_SUCCESS;
  }
  if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_depth == 0) return push(ctx) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  t_stack[t_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) {
  SIM_ENTER();
  return push_current(ctx);
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  SIM_ENTER();
  return push_current(ctx);
}

SIM_API CUresult cuCtxPopCurrent(CUcontext* pctx) {
  SIM_ENTER();
  return pop_current(pctx);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIM_ENTER();
  return pop_current(pctx);
}

SIM_API CUresult cuCtxGetDevice(CUdevice* device) {
  SIM_ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  *device = c->device;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  SIM_ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = ctx_or_current(ctx, &c); r != CUDA_SUCCESS) return r;
  *device = c->device;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void) {
  SIM_ENTER();
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  return ctx_synchronize(c);
}

SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  SIM_ENTER();
  CUctx_st* c;
  if (CUresult r = ctx_or_current(ctx, &c); r != CUDA_SUCCESS) return r;
  return ctx_synchronize(c);
}

// Contexts created through the 3.2+ entry points report API version 3020, as real ones do.
SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIM_ENTER();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = ctx_or_current(ctx, &c); r != CUDA_SUCCESS) return r;
  *version = 3020;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int* flags) {
  SIM_ENTER();
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  SIM_ENTER();
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  SIM_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* c = primary_of(*d);
  std::lock_guard<std::mutex> lock(primary_mu());
  if (c->primary_refs++ == 0) {
    ctx_streams_init(c);
    c->alive.store(true);
  }
  *pctx = c;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  SIM_ENTER();
  return primary_release(dev);
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIM_ENTER();
  return primary_release(dev);
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  SIM_ENTER();
  return primary_reset(dev);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIM_ENTER();
  return primary_reset(dev);
}

// The pre-11.0 entry point refuses to change the flags of an active primary context.
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  SIM_ENTER();
  return primary_set_flags(dev, flags, false);
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIM_ENTER();
  return primary_set_flags(dev, flags, true);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIM_ENTER();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* c = primary_of(*d);
  std::lock_guard<std::mutex> lock(primary_mu());
  *flags = c->flags;
  *active = c->primary_refs != 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
