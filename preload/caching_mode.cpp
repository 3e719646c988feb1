// Decisions taken here, and why:
//
// * Consistent cut. The listener records each allocator action into the recorder as it happens,
//   under the allocator's lock: blocks as MemKind::Cached records of role Block (one shard lock,
//   like any allocation), segments as records of role Segment, changed under every shard lock at
//   once (Recorder::cached_segments_change). copy_state() takes the same locks, so a snapshot sees
//   the registry exactly after the last ring entry it holds, and the writer tiles each segment with
//   the blocks inside it (gaps = 'inactive'). Asking the allocator for segments() at dump time
//   would need the allocators' locks inside the recorder's cut and a second truth to keep in step.
//
// * Expandable segments: the registry holds maximal contiguous mapped ranges (what PyTorch reports
//   as segments). A map next to a range merges with it; an unmap inside one splits it; each change
//   is one atomic registry update with its one trace entry.
//
// * Deferred frees: the program's free only marks the block pending (snapshots show it
//   'active_pending_free'); free_requested + free_completed are written together when a
//   synchronize makes the block reusable. PyTorch would write free_requested at the free, but
//   output/tests/check_snapshot.py (and the older viewers' collapse into 'free') want the pair
//   adjacent. The exit dump settles the pending batch first, so the exit snapshot has every free.
//
// * Stacks: the hook captures the caller's stack before calling the allocator (never under its
//   lock) and leaves it in a thread-local the listener reads; the segment a request creates gets
//   the same stack. Frees keep the block's stack (or the free's own with MEMTRACE_FREE_STACKS).
//
// * The allocator is used only while the session records (a rank MEMTRACE_RANKS leaves out runs
//   passthrough), but frees and pointer questions always ask the allocators first: a pointer they
//   handed out must never reach the driver.
#include "preload/caching_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/caching/alloc_conf.hpp"
#include "core/caching/listener.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"
#include "preload/caching_backend.hpp"
#include "preload/driver_decls.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"
#include "preload/session.hpp"

namespace memtrace::preload::caching_mode {

namespace {

// What the hook knows about the request the allocator is serving on this thread.
struct Request {
  uint32_t stack_id;
  uint32_t free_stack_id;
  const char* note;
  uint16_t owner;
  bool small;  // rounded request <= 1 MiB: a segment it creates is a small-pool one
};
__thread Request t_req __attribute__((tls_model("initial-exec"))) = {0, 0, nullptr, 0, false};

std::atomic<bool> g_caching{false};
std::once_flag g_conf_once;
caching::AllocConf* g_conf = nullptr;  // immortal once parsed

void parse_conf_from(const char* text) {
  std::vector<std::string> warnings;
  g_conf = new caching::AllocConf(caching::parse_alloc_conf(text ? text : "", &warnings));
  for (const std::string& w : warnings) log::warn("MEMTRACE_ALLOC_CONF: {}", w);
}
const caching::AllocConf& conf() {
  // memtrace_malloc may be called in a process whose session is off: read the variable then.
  std::call_once(g_conf_once, [] { parse_conf_from(secure_getenv("MEMTRACE_ALLOC_CONF")); });
  return *g_conf;
}

// One allocator's actions into the recorder.
class Recording : public caching::Listener {
 public:
  Recording(Session* s, CUcontext ctx, int device) : s_(s), ctx_(reinterpret_cast<uint64_t>(ctx)), device_(device) {}

  void on_event(const caching::AllocatorEvent& e) override {
    if (!s_) return;
    Recorder& rec = s_->recorder;
    switch (e.action) {
      case Action::Alloc: {
        AllocRecord r = base_record(e.addr, e.block_size, t_req.stack_id);
        r.requested = e.size;
        r.stream = e.stream;
        r.owner = t_req.owner;
        r.cache = CacheRole::Block;
        rec.cached_block_alloc(r);
        break;
      }
      case Action::FreeRequested:
        rec.cached_block_free_requested(e.addr, t_req.free_stack_id);
        break;
      case Action::FreeCompleted:
        rec.cached_block_free_completed(e.addr);
        break;
      case Action::SegmentAlloc: {
        AllocRecord seg = segment_record(e.addr, e.size, e.stream, t_req.small ? kCacheSmallPool : 0, t_req.stack_id);
        segs_[e.addr] = seg;
        rec.cached_segments_change(entry(e, seg.stack_id), nullptr, 0, &seg, 1);
        break;
      }
      case Action::SegmentFree: {
        uint32_t stack = 0;
        if (auto it = segs_.find(e.addr); it != segs_.end()) stack = it->second.stack_id, segs_.erase(it);
        rec.cached_segments_change(entry(e, stack), &e.addr, 1, nullptr, 0);
        break;
      }
      case Action::SegmentMap:
        mapped(e);
        break;
      case Action::SegmentUnmap:
        unmapped(e);
        break;
      case Action::Oom:
        rec.record_oom(device_, e.size, e.stream, e.device_free, t_req.stack_id, t_req.note);
        break;
      default:
        break;
    }
  }

 private:
  AllocRecord base_record(uint64_t addr, uint64_t size, uint32_t stack) const {
    AllocRecord r;
    r.addr = addr;
    r.size = size;
    r.time_us = now_ticks();
    r.ctx = ctx_;
    r.device = static_cast<int16_t>(device_);
    r.note = t_req.note;
    r.stack_id = stack;
    r.kind = MemKind::Cached;
    return r;
  }
  AllocRecord segment_record(uint64_t addr, uint64_t size, uint64_t stream, uint8_t flags, uint32_t stack) const {
    AllocRecord r = base_record(addr, size, stack);
    r.stream = stream;
    r.cache = CacheRole::Segment;
    r.cache_flags = flags;
    return r;
  }
  TraceEntry entry(const caching::AllocatorEvent& e, uint32_t stack) const {
    TraceEntry t;
    t.time_us = now_ticks();
    t.addr = e.addr;
    t.size = e.size;
    t.stream = e.stream;
    t.note = t_req.note;
    t.stack_id = stack;
    t.device = static_cast<int16_t>(device_);
    t.action = e.action;
    t.kind = MemKind::Cached;
    return t;
  }

  // A mapped range joins the ranges it touches (same stream: the same reservation's pool).
  void mapped(const caching::AllocatorEvent& e) {
    uint8_t flags = kCacheExpandable | (t_req.small ? kCacheSmallPool : 0);
    AllocRecord merged = segment_record(e.addr, e.size, e.stream, flags, t_req.stack_id);
    uint64_t removed[2];
    size_t n = 0;
    auto it = segs_.lower_bound(e.addr);
    if (it != segs_.begin()) {
      auto p = std::prev(it);
      const AllocRecord& r = p->second;
      if ((r.cache_flags & kCacheExpandable) && r.addr + r.size == e.addr && r.stream == e.stream) {
        merged.addr = r.addr;
        merged.size += r.size;
        merged.stack_id = r.stack_id;
        merged.time_us = r.time_us;
        merged.cache_flags = r.cache_flags;
        removed[n++] = r.addr;
        segs_.erase(p);
      }
    }
    if (auto nx = segs_.find(e.addr + e.size); nx != segs_.end()) {
      const AllocRecord& r = nx->second;
      if ((r.cache_flags & kCacheExpandable) && r.stream == e.stream) {
        merged.size += r.size;
        removed[n++] = r.addr;
        segs_.erase(nx);
      }
    }
    segs_[merged.addr] = merged;
    s_->recorder.cached_segments_change(entry(e, t_req.stack_id), removed, n, &merged, 1);
  }

  // An unmapped range splits the range holding it into what is left on either side.
  void unmapped(const caching::AllocatorEvent& e) {
    AllocRecord left[2];
    size_t n_added = 0;
    uint64_t removed = 0;
    size_t n_removed = 0;
    uint32_t stack = 0;
    auto it = segs_.upper_bound(e.addr);
    if (it != segs_.begin()) {
      --it;
      const AllocRecord r = it->second;
      if (e.addr < r.addr + r.size) {
        stack = r.stack_id;
        removed = r.addr;
        n_removed = 1;
        segs_.erase(it);
        const uint64_t end = e.addr + e.size, r_end = r.addr + r.size;
        if (e.addr > r.addr) {
          left[n_added] = r;
          left[n_added++].size = e.addr - r.addr;
        }
        if (end < r_end) {
          left[n_added] = r;
          left[n_added].addr = end;
          left[n_added++].size = r_end - end;
        }
        for (size_t i = 0; i < n_added; ++i) segs_[left[i].addr] = left[i];
      }
    }
    s_->recorder.cached_segments_change(entry(e, stack), &removed, n_removed, left, n_added);
  }

  Session* s_;
  uint64_t ctx_;
  int device_;
  std::map<uint64_t, AllocRecord> segs_;  // under the allocator's lock (listener calls)
};

struct Slot {
  std::atomic<CUcontext> ctx{nullptr};
  int device = 0;
  DriverBackend* backend = nullptr;
  Recording* recording = nullptr;
  caching::CachingAllocator* alloc = nullptr;
};
constexpr int kMaxContexts = 64;
Slot g_slots[kMaxContexts];
std::atomic<int> g_used{0};  // slots ever used; a dropped slot is reused under g_table_mu
std::mutex g_table_mu;

caching::CachingAllocator* find(CUcontext ctx) {
  const int n = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_slots[i].ctx.load(std::memory_order_acquire) == ctx) return g_slots[i].alloc;
  return nullptr;
}

caching::CachingAllocator* for_context(CUcontext ctx, int device) {
  if (caching::CachingAllocator* a = find(ctx)) return a;
  std::lock_guard<std::mutex> g(g_table_mu);
  if (caching::CachingAllocator* a = find(ctx)) return a;
  int n = g_used.load(std::memory_order_relaxed);
  int at = -1;
  for (int i = 0; i < n && at < 0; ++i)
    if (!g_slots[i].ctx.load(std::memory_order_relaxed) && !g_slots[i].alloc) at = i;
  if (at < 0) {
    if (n == kMaxContexts) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        log::warn("MEMTRACE_ALLOCATOR=caching: more than {} contexts; later ones go to the driver", kMaxContexts);
      return nullptr;
    }
    at = n;
  }
  Slot& s = g_slots[at];
  s.device = device;
  s.backend = new DriverBackend(ctx, device);
  s.recording = new Recording(session_if_active(), ctx, device);
  s.alloc = new caching::CachingAllocator(*s.backend, conf(), s.recording);
  s.ctx.store(ctx, std::memory_order_release);
  if (at == n) g_used.store(n + 1, std::memory_order_release);
  log::debug("caching allocator for context {} (device {})", static_cast<void*>(ctx), device);
  return s.alloc;
}

void take_down(CUcontext ctx, bool context_alive) {
  if (!ctx) return;
  std::lock_guard<std::mutex> g(g_table_mu);
  const int n = g_used.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_slots[i];
    if (s.ctx.load(std::memory_order_relaxed) != ctx) continue;
    s.ctx.store(nullptr, std::memory_order_release);
    if (!context_alive) s.backend->forget();
    delete s.alloc;  // gives every segment back (no-op calls when forgotten)
    delete s.recording;
    delete s.backend;
    s.alloc = nullptr;
    s.recording = nullptr;
    s.backend = nullptr;
  }
}

template <typename Fn>
bool each_allocator(Fn&& fn) {
  const int n = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (!g_slots[i].ctx.load(std::memory_order_acquire)) continue;
    if (caching::CachingAllocator* a = g_slots[i].alloc; a && fn(*a)) return true;
  }
  return false;
}

void set_request(Session* s, size_t bytes, void* caller) {
  t_req.stack_id = s ? capture_stack_id(*s, caller) : 0;
  t_req.owner = s ? s->owners.owner_of(t_req.stack_id, s->stacks) : 0;
  t_req.note = t_state.note;
  t_req.small = caching::round_size(conf(), bytes) <= (size_t{1} << 20);
  t_req.free_stack_id = 0;
}

CUcontext current_context() {
  CUcontext ctx = nullptr;
  if (auto get = real_fn<Hook::cuCtxGetCurrent, decltype(&::cuCtxGetCurrent)>()) get(&ctx);
  return ctx;
}

}  // namespace

void configure(const Config& c) {
  g_caching.store(c.allocator == AllocatorMode::Caching, std::memory_order_release);
  std::call_once(g_conf_once, [&] { parse_conf_from(c.alloc_conf.c_str()); });
}

bool enabled() {
  // The session reads MEMTRACE_ALLOCATOR: the first hooked call of a process starts it here.
  return session_if_active() && g_caching.load(std::memory_order_relaxed);
}
bool any_allocator() { return g_used.load(std::memory_order_relaxed) > 0; }

bool try_alloc(CUdeviceptr* dptr, size_t bytes, void* caller, CUresult* result) {
  HookScope scope;
  Session* s = scope.session();
  if (!s) return false;
  CUcontext ctx = current_context();
  if (!ctx) return false;  // the driver says what it says without a context
  if (!dptr || bytes == 0) {
    *result = CUDA_ERROR_INVALID_VALUE;  // as cuMemAlloc_v2 answers
    return true;
  }
  uint64_t cur = 0;
  const int device = current_device(&cur);
  caching::CachingAllocator* a = for_context(ctx, device);
  if (!a) return false;
  set_request(s, bytes, caller);
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
  t_req.note = t_state.note;
  t_req.free_stack_id = s && s->config.free_stacks ? capture_stack_id(*s, caller) : 0;
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
  caching::CachingAllocator* a = for_context(ctx, device);
  if (!a) return nullptr;
  set_request(s, bytes, caller);
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
  new (&g_table_mu) std::mutex();
  const int n = g_used.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_slots[i];
    // Leaked on purpose: their destructors would lock and call the parent's driver state.
    s.ctx.store(nullptr, std::memory_order_relaxed);
    s.alloc = nullptr;
    s.recording = nullptr;
    s.backend = nullptr;
  }
  g_used.store(0, std::memory_order_release);
}

void drop_context(CUcontext ctx) { take_down(ctx, true); }
void forget_context(CUcontext ctx) { take_down(ctx, false); }

output::AllocatorSettings settings() {
  output::AllocatorSettings out;
  const bool caching = enabled() || any_allocator();
  out.mode = enabled() ? "caching" : (any_allocator() ? "passthrough+memtrace_malloc" : "passthrough");
  if (!caching) return out;
  const caching::AllocConf& c = conf();
  // What the allocators really do: without virtual-memory support they fall back to segments.
  bool expandable = c.expandable_segments;
  each_allocator([&](caching::CachingAllocator& a) {
    expandable = a.expandable_active() && c.expandable_segments;
    return true;
  });
  format::IntDict divisions;
  for (int i = 0; i < 16; ++i) divisions.emplace_back(std::to_string(1 << i), c.roundup_power2_divisions[i]);
  out.pytorch = {
      {"PYTORCH_CUDA_ALLOC_CONF", c.source},
      {"max_split_size", c.max_split_size == caching::kNoMaxSplit ? int64_t{-1} : static_cast<int64_t>(c.max_split_size)},
      {"garbage_collection_threshold", c.garbage_collection_threshold},
      {"expandable_segments", expandable},
      {"release_lock_on_cudamalloc", c.release_lock_on_cudamalloc},
      {"roundup_power2_divisions", std::move(divisions)},
  };
  format::Setting fraction{"per_process_memory_fraction", std::monostate{}};
  if (c.per_process_memory_fraction) fraction.value = *c.per_process_memory_fraction;
  out.memtrace = {
      {"policy", std::string(caching::policy_name(c.policy))},
      {"deferred_free", c.deferred_free},
      {"free_batch_bytes", static_cast<uint64_t>(c.free_batch_bytes)},
      {"max_non_split_rounding", static_cast<uint64_t>(c.max_non_split_rounding)},
      {"large_segment_size", static_cast<uint64_t>(c.large_segment_size)},
      std::move(fraction),
  };
  return out;
}

}  // namespace memtrace::preload::caching_mode
