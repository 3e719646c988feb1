// Return addresses of the calling thread via libunwind's fast trace (unw_backtrace), which
// caches each frame's unwind recipe by address; with UNW_CACHE_PER_THREAD that cache needs
// no lock.
#define UNW_LOCAL_ONLY
#include "unwind/stack_capture.hpp"

#include <libunwind.h>

#include <atomic>

namespace memtrace::unwind {

namespace {

// 0: not set, 1: being set by one thread, 2: set. Others do not wait: until it is set they
// unwind with libunwind's default (global, locked) cache, which is merely slower.
std::atomic<int> g_policy_state{0};

inline void ensure_caching_policy() {
  if (g_policy_state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (g_policy_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    g_policy_state.store(2, std::memory_order_release);
  }
}

}  // namespace

int capture(uintptr_t* out, int max_depth) {
  if (out == nullptr || max_depth <= 0) return 0;
  ensure_caching_policy();
  // The first entry is unw_backtrace's return address, i.e. a pc inside capture() itself.
  static_assert(sizeof(void*) == sizeof(uintptr_t));
  int n = unw_backtrace(reinterpret_cast<void**>(out), max_depth);
  return n > 0 ? n : 0;
}

}  // namespace memtrace::unwind
