// Return addresses of the calling thread. On x86-64 a walk of the thread's own stack with each
// frame's rule (unwind/frame_rule.hpp) kept in a per-thread table keyed by pc: once the table
// holds a stack's pcs, a frame costs a table probe and two loads. Anything the walk cannot be
// sure of (a pc with no usable rule, a read outside the thread's stack, a stack it cannot find)
// hands the whole capture to libunwind's unw_backtrace, so what comes out is always libunwind's
// answer. docs/stack-capture.md gives the rules.
#define UNW_LOCAL_ONLY
#include "unwind/stack_capture.hpp"

#include <libunwind.h>
#include <pthread.h>
#include <sys/mman.h>

#include <atomic>

#include "unwind/thread_walk.hpp"

namespace memtrace::unwind {

namespace {

#if defined(__x86_64__)
using detail::kMemos;
using detail::Memo;
using detail::ThreadWalk;
using detail::walk;
#endif

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

#if defined(__x86_64__)

// The table is mmapped, not malloc'd: capture may run wherever the program allocates device
// memory, and the table outlives nothing (a key's destructor unmaps it as the thread ends).
__thread ThreadWalk* t_walk __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool t_walk_failed __attribute__((tls_model("initial-exec"))) = false;
pthread_key_t g_walk_key;
pthread_once_t g_walk_once = PTHREAD_ONCE_INIT;

void drop_walk(void* p) {
  if (t_walk == p) t_walk = nullptr;
  t_walk_failed = true;  // a capture in a later destructor of this thread: libunwind's
  munmap(p, sizeof(ThreadWalk));
}

ThreadWalk* make_walk() {
  if (t_walk_failed) return nullptr;
  t_walk_failed = true;  // until it works; also keeps a thread-exit destructor from looping
  pthread_once(&g_walk_once, [] { pthread_key_create(&g_walk_key, drop_walk); });
  void* m = mmap(nullptr, sizeof(ThreadWalk), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto* w = static_cast<ThreadWalk*>(m);  // zero-filled: every slot and walk empty, stack unknown
  for (unsigned i = 0; i < kMemos; ++i) w->ring[i] = static_cast<uint8_t>(i);
  w->spare = kMemos;
  w->last = kMemos;  // the spare: empty, so the first prediction fails
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != nullptr && size != 0) {
      w->stack_lo = reinterpret_cast<uintptr_t>(addr);
      w->stack_hi = w->stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  if (w->stack_hi == 0 || pthread_setspecific(g_walk_key, w) != 0) {
    munmap(m, sizeof(ThreadWalk));
    return nullptr;
  }
  t_walk_failed = false;
  return t_walk = w;
}

#endif  // __x86_64__

// Inlined into each caller, so that the first entry, unw_backtrace's return address, is a pc
// inside that caller.
[[gnu::always_inline]] inline int libunwind_trace(uintptr_t* out, int max_depth) {
  ensure_caching_policy();
  static_assert(sizeof(void*) == sizeof(uintptr_t));
  int n = unw_backtrace(reinterpret_cast<void**>(out), max_depth);
  return n > 0 ? n : 0;
}

}  // namespace

int capture_libunwind(uintptr_t* out, int max_depth) {
  if (out == nullptr || max_depth <= 0) return 0;
  return libunwind_trace(out, max_depth);
}

// The walk on this thread's table; -1 when there is none or the walk declines. Inlined into
// each caller, so that walk's return address (the first entry) lies in that caller.
[[gnu::always_inline]] static inline int walk_here(uintptr_t* out, int max_depth, uint64_t* token) {
#if defined(__x86_64__)
  ThreadWalk* w = t_walk != nullptr ? t_walk : make_walk();
  if (w != nullptr) {
    int n = walk(out, max_depth, *w, token);
    asm volatile("" : "+r"(n));  // not a tail call
    return n;
  }
#endif
  return -1;
}

int capture(uintptr_t* out, int max_depth, uint64_t* token) {
  uint64_t ignored = 0;
  if (token == nullptr) token = &ignored;
  *token = 0;
  if (out == nullptr || max_depth <= 0) return 0;
  const int n = walk_here(out, max_depth, token);
  return n >= 0 ? n : libunwind_trace(out, max_depth);
}

void forget_remembered_walks() {
#if defined(__x86_64__)
  ThreadWalk* w = t_walk;
  if (w == nullptr || w->writing) return;
  for (Memo& m : w->memos) m.pc0 = 0;  // their hints fail from now on
#endif
}

CaptureCounts capture_counts() {
#if defined(__x86_64__)
  if (t_walk != nullptr) return t_walk->counts;
#endif
  return {};
}

int capture_walk_only(uintptr_t* out, int max_depth, uint64_t* token) {
  uint64_t ignored = 0;
  if (token == nullptr) token = &ignored;
  *token = 0;
  if (out == nullptr || max_depth <= 0) return 0;
  return walk_here(out, max_depth, token);
}

}  // namespace memtrace::unwind
