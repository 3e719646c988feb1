#include "preload/record.hpp"

#include <atomic>

#include "core/clock.hpp"
#include "preload/capture.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/exit_dump.hpp"
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/ranges.hpp"

namespace memtrace::preload {

namespace {
std::atomic<uint64_t> g_ctx_generation{1};
struct CtxCache {
  uint64_t ctx;
  uint64_t generation;
  int device;
};
__thread CtxCache t_ctx_cache __attribute__((tls_model("initial-exec"))) = {0, 0, 0};
}  // namespace

int thread_device_hint() { return t_ctx_cache.device; }

void invalidate_context_cache() { g_ctx_generation.fetch_add(1, std::memory_order_relaxed); }

int current_device(uint64_t* ctx_out) {
  CUcontext ctx = nullptr;
  if (auto get = real_fn<Hook::cuCtxGetCurrent, decltype(&::cuCtxGetCurrent)>()) get(&ctx);
  uint64_t c = reinterpret_cast<uint64_t>(ctx);
  *ctx_out = c;
  uint64_t gen = g_ctx_generation.load(std::memory_order_relaxed);
  if (c != 0 && t_ctx_cache.ctx == c && t_ctx_cache.generation == gen) return t_ctx_cache.device;
  CUdevice dev = 0;
  if (c != 0) {
    if (auto getdev = real_fn<Hook::cuCtxGetDevice, decltype(&::cuCtxGetDevice)>()) {
      if (getdev(&dev) != CUDA_SUCCESS) dev = 0;
    }
  }
  t_ctx_cache = {c, gen, static_cast<int>(dev)};
  return static_cast<int>(dev);
}

void record_alloc(Session& s, const NewAlloc& a, void* caller) {
  AllocRecord r;
  r.addr = a.addr;
  r.size = a.size;
  r.requested = a.requested;
  r.stream = a.stream;
  r.handle = a.handle;
  r.kind = a.kind;
  uint64_t ctx = 0;
  int dev = current_device(&ctx);
  r.ctx = ctx;
  r.device = static_cast<int16_t>(is_host(a.kind) ? -1 : (a.device >= 0 ? a.device : dev));
  r.time_us = now_ticks();
  r.note = t_state.note;
  const ranges::Current open = ranges::current();
  r.range = open.range;
  r.phase = open.phase;
  r.stack_id = capture_stack_id(s, caller);
  r.owner = s.owners.owner_of(r.stack_id, s.stacks);
  s.recorder.record_alloc(r);
}

void record_oom(Session& s, uint64_t size, uint64_t stream, void* caller) {
  uint64_t ctx = 0;
  int dev = current_device(&ctx);
  size_t free_b = 0, total_b = 0;
  if (auto info = real_fn<Hook::cuMemGetInfo_v2, decltype(&::cuMemGetInfo_v2)>()) {
    if (info(&free_b, &total_b) != CUDA_SUCCESS) free_b = 0;
  }
  const ranges::Current open = ranges::current();
  s.recorder.record_oom(dev, size, stream, free_b, capture_stack_id(s, caller), t_state.note, open.range, open.phase);
  note_oom_for_dump();
}

PendingFree::PendingFree(Session* s, uint64_t addr, uint64_t stream, void* caller) : s_(s) {
  if (!s_ || !addr) return;
  before_exit_teardown();
  // By default a free carries its allocation's stack (PyTorch's context='alloc'): the owner and
  // colour stay those of the code that asked for the memory, and the free costs no unwind.
  uint32_t stack = s_->config.free_stacks ? capture_stack_id(*s_, caller) : 0;
  known_ = s_->recorder.release(addr, stream, stack, &rec_);
}

void PendingFree::finish(bool ok) {
  if (!s_) return;
  if (!known_) {
    if (ok) s_->recorder.note_unknown_free();
    return;
  }
  if (!ok) s_->recorder.restore(rec_);
}

}  // namespace memtrace::preload
