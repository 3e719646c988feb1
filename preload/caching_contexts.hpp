// One caching allocator per CUcontext, created on the context's first allocation: a fixed table
// (64 contexts; later ones go to the driver) read without a lock on every free and pointer
// question, changed under one mutex. Each entry owns its allocator, the allocator's listener and
// its driver backend; they go together when the context does (take_down). In a forked child they
// are abandoned as they stand (abandon_after_fork).
#pragma once
#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "core/caching/caching_allocator.hpp"
#include "preload/caching_backend.hpp"
#include "preload/caching_recording.hpp"

namespace memtrace::preload {

// Declared in this order so that the allocator, which gives its segments back to the backend and
// reports that to the listener as it goes, is destroyed first.
struct ContextAllocator {
  ContextAllocator(CUcontext ctx, int device, Session* s, const caching::AllocConf& conf)
      : backend(ctx, device), listener(s, ctx, device), alloc(backend, conf, &listener) {}
  DriverBackend backend;
  RecordingListener listener;
  caching::CachingAllocator alloc;
};

class ContextTable {
 public:
  static constexpr int kMaxContexts = 64;

  // `ctx`'s allocator, created on first use (with the session's listener and settings); null when
  // the table is full (one warning).
  caching::CachingAllocator* for_context(CUcontext ctx, int device);
  // The context is going: its allocator gives everything back (through the driver while the
  // context is alive; forgotten without a driver call when it is gone) and is destroyed.
  void take_down(CUcontext ctx, bool context_alive);
  // Calls fn(allocator) for each live allocator until it returns true; whether one did.
  template <typename Fn>
  bool any_of(Fn&& fn) {
    const int n = used_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      if (!slots_[i].ctx.load(std::memory_order_acquire)) continue;
      if (ContextAllocator* a = slots_[i].owned.get(); a && fn(a->alloc)) return true;
    }
    return false;
  }
  // Some allocator was created (and not abandoned by a fork): frees and pointer questions must
  // ask the allocators first.
  bool ever_used() const { return used_.load(std::memory_order_relaxed) > 0; }
  // In a forked child: the parent's contexts are unusable there, so every allocator is left as it
  // stands and leaked on purpose (its destructor would lock and call the parent's driver state;
  // another thread of the parent may have held its lock at the fork), and the table's mutex is
  // taken over.
  void abandon_after_fork();

 private:
  struct Slot {
    std::atomic<CUcontext> ctx{nullptr};
    std::unique_ptr<ContextAllocator> owned;
  };
  caching::CachingAllocator* find(CUcontext ctx) const;

  Slot slots_[kMaxContexts];
  std::atomic<int> used_{0};  // slots ever used; a dropped slot is reused under mu_
  std::mutex mu_;
};

// The process's table (immortal: allocators serve until the very end of the process).
ContextTable& context_table();

}  // namespace memtrace::preload
