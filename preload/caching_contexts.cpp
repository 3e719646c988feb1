#include "preload/caching_contexts.hpp"

#include <new>

#include "core/log.hpp"
#include "preload/immortal.hpp"
#include "preload/session.hpp"

namespace memtrace::preload {

namespace {
constinit Immortal<ContextTable> g_table;
}  // namespace

ContextTable& context_table() { return g_table.value; }

caching::CachingAllocator* ContextTable::find(CUcontext ctx) const {
  const int n = used_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (slots_[i].ctx.load(std::memory_order_acquire) == ctx) {
      ContextAllocator* a = slots_[i].owned.get();
      return a ? &a->alloc : nullptr;
    }
  return nullptr;
}

caching::CachingAllocator* ContextTable::for_context(CUcontext ctx, int device) {
  if (caching::CachingAllocator* a = find(ctx)) return a;
  std::lock_guard<std::mutex> g(mu_);
  if (caching::CachingAllocator* a = find(ctx)) return a;
  int n = used_.load(std::memory_order_relaxed);
  int at = -1;
  for (int i = 0; i < n && at < 0; ++i)
    if (!slots_[i].ctx.load(std::memory_order_relaxed) && !slots_[i].owned) at = i;
  if (at < 0) {
    if (n == kMaxContexts) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        log::warn("MEMTRACE_ALLOCATOR=caching: more than {} contexts; later ones go to the driver", kMaxContexts);
      return nullptr;
    }
    at = n;
  }
  Slot& s = slots_[at];
  s.owned = std::make_unique<ContextAllocator>(ctx, device, session_if_active(), allocator_conf());
  s.ctx.store(ctx, std::memory_order_release);
  if (at == n) used_.store(n + 1, std::memory_order_release);
  log::debug("caching allocator for context {} (device {})", static_cast<void*>(ctx), device);
  return &s.owned->alloc;
}

void ContextTable::take_down(CUcontext ctx, bool context_alive) {
  if (!ctx) return;
  std::lock_guard<std::mutex> g(mu_);
  const int n = used_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Slot& s = slots_[i];
    if (s.ctx.load(std::memory_order_relaxed) != ctx) continue;
    s.ctx.store(nullptr, std::memory_order_release);
    if (!context_alive && s.owned) s.owned->backend.forget();
    s.owned.reset();  // gives every segment back (no-op calls when forgotten)
  }
}

void ContextTable::abandon_after_fork() {
  new (&mu_) std::mutex();
  const int n = used_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Slot& s = slots_[i];
    s.ctx.store(nullptr, std::memory_order_relaxed);
    static_cast<void>(s.owned.release());  // leaked on purpose (see abandon_after_fork's comment)
  }
  used_.store(0, std::memory_order_release);
}

}  // namespace memtrace::preload
