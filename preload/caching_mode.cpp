// The caching allocator's entry points for the hooks, and what it says to snapshots. The
// listener that records its actions is caching_recording.cpp; the table of allocators, one per
// context, caching_contexts.cpp; its settings, allocator_settings.cpp.
//
// The allocator is used only while the session records (a rank MEMTRACE_RANKS leaves out runs
// passthrough), but frees and pointer questions always ask the allocators first: a pointer they
// handed out must never reach the driver.
#include "preload/caching_mode.hpp"

#include <atomic>

#include "core/log.hpp"
#include "preload/allocator_settings.hpp"
#include "preload/caching_contexts.hpp"
#include "preload/caching_recording.hpp"
#include "preload/capture.hpp"
#include "preload/driver_decls.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"
#include "preload/session.hpp"

namespace memtrace::preload::caching_mode {

namespace {

std::atomic<bool> g_caching{false};

// With MEMTRACE_STACKS=none a request's stack is its caller alone, so a thread that allocates from
// one call site again and again gets the same stack id and owner: they are kept per thread and
// reused while the session, the caller and the stack table's generation (bumped when a forked
// child clears the table) are the same. Interning and owner lookup were most of the hook's own cost.
struct CallerCache {
  const Session* session;
  void* caller;
  uint32_t generation;
  uint32_t stack_id;
  uint16_t owner;
};
__thread CallerCache t_caller __attribute__((tls_model("initial-exec"))) = {nullptr, nullptr, 0, 0, 0};
std::atomic<uint32_t> g_stack_generation{0};

void set_request(Session* s, const caching::CachingAllocator& a, size_t bytes, void* caller) {
  if (!s) {
    t_request.stack_id = 0;
    t_request.owner = 0;
  } else if (s->config.stacks != StackMode::None) {
    t_request.stack_id = capture_stack_id(*s, caller);
    t_request.owner = s->owners.owner_of(t_request.stack_id, s->stacks);
  } else {
    const uint32_t gen = g_stack_generation.load(std::memory_order_relaxed);
    if (t_caller.session != s || t_caller.caller != caller || t_caller.generation != gen) {
      const uint32_t id = capture_stack_id(*s, caller);
      t_caller = {s, caller, gen, id, s->owners.owner_of(id, s->stacks)};
    }
    t_request.stack_id = t_caller.stack_id;
    t_request.owner = t_caller.owner;
  }
  t_request.note = t_state.note;
  t_request.small = caching::round_size(a.conf(), bytes) <= (size_t{1} << 20);
  t_request.free_stack_id = 0;
}

template <typename Fn>
bool each_allocator(Fn&& fn) {
  return context_table().any_of(fn);
}


}  // namespace

void configure(const Config& c) { g_caching.store(c.allocator == AllocatorMode::Caching, std::memory_order_release); }

bool enabled() {
  // The session reads MEMTRACE_ALLOCATOR: the first hooked call of a process starts it here.
  return session_if_active() && g_caching.load(std::memory_order_relaxed);
}
bool any_allocator() { return context_table().ever_used(); }

bool try_alloc(CUdeviceptr* dptr, size_t bytes, void* caller, CUresult* result) {
  HookScope scope;
  Session* s = scope.session();
  if (!s) return false;
  // One cuCtxGetCurrent per call: current_device asks for the context and caches its device.
  uint64_t cur = 0;
  const int device = current_device(&cur);
  CUcontext ctx = reinterpret_cast<CUcontext>(cur);
  if (!ctx) return false;  // the driver says what it says without a context
  if (!dptr || bytes == 0) {
    *result = CUDA_ERROR_INVALID_VALUE;  // as cuMemAlloc_v2 answers
    return true;
  }
  caching::CachingAllocator* a = context_table().for_context(ctx, device);
  if (!a) return false;
  set_request(s, *a, bytes, caller);
  caching::MallocResult m = a->malloc(bytes, 0);
  if (m.ptr) *dptr = static_cast<CUdeviceptr>(m.ptr);
  *result = static_cast<CUresult>(m.error);
  // Outside the allocator's lock: an out-of-memory dump takes its time.
  if (m.error == CUDA_ERROR_OUT_OF_MEMORY) note_oom_for_dump();
  return true;
}

bool try_free(CUdeviceptr ptr, void* caller, CUresult* result) {
  if (ptr == 0 || !any_allocator()) return false;
  HookScope scope;
  Session* s = scope.session();
  t_request.note = t_state.note;
  t_request.free_stack_id = s && s->config.free_stacks ? capture_stack_id(*s, caller) : 0;
  const uintptr_t p = static_cast<uintptr_t>(ptr);
  if (each_allocator([&](caching::CachingAllocator& a) { return a.free(p); })) {
    *result = CUDA_SUCCESS;
    return true;
  }
  if (owned(p)) {
    // Not a block's start, or a block already freed: the driver would free a whole segment.
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  return false;
}

void* pluggable_malloc(size_t bytes, int device, uintptr_t stream, void* caller) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  static std::atomic<CUcontext> primary[kMaxDevices];
  CUcontext ctx = primary[device].load(std::memory_order_acquire);
  if (!ctx) {
    // Retained once and kept: the allocator's memory lives in this context.
    auto retain = real_fn<Hook::cuDevicePrimaryCtxRetain, decltype(&::cuDevicePrimaryCtxRetain)>();
    CUcontext got = nullptr;
    if (!retain || retain(&got, device) != CUDA_SUCCESS || !got) return nullptr;
    CUcontext expected = nullptr;
    if (!primary[device].compare_exchange_strong(expected, got)) {
      if (auto release = real_fn<Hook::cuDevicePrimaryCtxRelease_v2, decltype(&::cuDevicePrimaryCtxRelease_v2)>())
        release(device);
      got = expected;
    }
    ctx = got;
  }
  HookScope scope;
  Session* s = scope.session();
  caching::CachingAllocator* a = context_table().for_context(ctx, device);
  if (!a) return nullptr;
  set_request(s, *a, bytes, caller);
  caching::MallocResult m = a->malloc(bytes, stream);
  if (m.error == CUDA_ERROR_OUT_OF_MEMORY && s) note_oom_for_dump();
  return reinterpret_cast<void*>(m.ptr);
}

void pluggable_free(void* ptr, void* caller) {
  CUresult r;
  if (!try_free(reinterpret_cast<CUdeviceptr>(ptr), caller, &r) && ptr) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log::warn("memtrace_free({}): not memory memtrace_malloc handed out; ignored (warned once)", ptr);
  }
}

std::optional<caching::BlockInfo> block_of(uintptr_t ptr) {
  std::optional<caching::BlockInfo> found;
  each_allocator([&](caching::CachingAllocator& a) {
    found = a.block_of(ptr);
    return found.has_value();
  });
  return found;
}

bool owned(uintptr_t ptr) {
  return each_allocator([&](caching::CachingAllocator& a) { return a.owns(ptr); });
}

void settle_pending_frees() {
  each_allocator([](caching::CachingAllocator& a) {
    a.flush_pending_frees();
    return false;
  });
}

void after_fork_child() {
  context_table().abandon_after_fork();
  g_stack_generation.fetch_add(1, std::memory_order_relaxed);  // the child's stack table starts empty
}

void drop_context(CUcontext ctx) { context_table().take_down(ctx, true); }
void forget_context(CUcontext ctx) { context_table().take_down(ctx, false); }

output::AllocatorSettings settings() {
  output::AllocatorSettings out;
  const bool caching = enabled() || any_allocator();
  out.mode = enabled() ? "caching" : (any_allocator() ? "passthrough+memtrace_malloc" : "passthrough");
  if (!caching) return out;
  const caching::AllocConf& c = allocator_conf();
  bool expandable = c.expandable_segments;
  each_allocator([&](caching::CachingAllocator& a) {
    expandable = a.expandable_active() && c.expandable_segments;
    return true;
  });
  describe_allocator_settings(c, expandable, &out);
  return out;
}

}  // namespace memtrace::preload::caching_mode
