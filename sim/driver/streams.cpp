// Streams: every piece of asynchronous work is a closure queued on its stream and run only
// when someone synchronises (stream/event/context sync, cuStreamQuery, or a synchronous call
// that waits on the legacy stream). A program that reuses memory before the work touching it
// has been waited for therefore really observes the wrong data, as on a GPU.
//
// Cross-stream ordering is explicit: a wait is itself a queued closure that drains the other
// stream up to a sequence number captured when the wait was issued, so executing any queue
// in order also executes everything it depends on, and no cycle can form (a wait only ever
// names work enqueued before it).
#include <algorithm>

#include "internal.h"

namespace sim {
namespace {

// Handle -> owner, guarded by exec_mutex(). Queued waits hold their own references, so a
// destroyed stream that is still waited on stays valid until the wait has run.
std::map<CUstream_st*, StreamPtr>& live_streams() {
  static auto* m = new std::map<CUstream_st*, StreamPtr>();
  return *m;
}

StreamPtr make_stream(CUctx_st* ctx, CUstream_st::Type type, unsigned flags, int priority) {
  auto s = std::make_shared<CUstream_st>();
  s->type = type;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  return s;
}

void push(CUstream_st& s, std::function<void(CUstream_st&)> op) {
  s.queue.push_back(CUstream_st::Op{++s.last_seq, std::move(op)});
}

void push_wait(CUstream_st& s, const StreamPtr& target) {
  push(s, [target, seq = target->last_seq](CUstream_st&) { drain_until(*target, seq); });
}

void drain_all(CUstream_st& s) { drain_until(s, s.last_seq); }

// Every blocking stream of the context except the legacy one; caller holds exec_mutex().
template <typename F>
void for_each_blocking(CUctx_st* c, F f) {
  for (CUstream_st* raw : c->streams) {
    if (raw->blocking()) f(live_streams().at(raw));
  }
  for (auto& [tid, s] : c->per_thread) f(s);
}

CUresult take_first_error(CUctx_st* c) {
  CUresult first = CUDA_SUCCESS;
  auto note = [&first](CUstream_st& s) {
    CUresult e = stream_take_error(s);
    if (first == CUDA_SUCCESS) first = e;
  };
  if (c->legacy) note(*c->legacy);
  for (auto& [tid, s] : c->per_thread) note(*s);
  for (CUstream_st* raw : c->streams) note(*raw);
  return first;
}

void drain_ctx(CUctx_st* c) {
  if (c->legacy) drain_all(*c->legacy);
  for (auto& [tid, s] : c->per_thread) drain_all(*s);
  for (CUstream_st* raw : c->streams) drain_all(*raw);
}

// Waiting on the legacy stream is waiting for a marker placed in it, and such a marker is
// ordered after all earlier work of the context's blocking streams.
void wait_point(const StreamPtr& s) {
  if (s->type == CUstream_st::Type::Legacy) enqueue(s, [](CUstream_st&) {});
}

CUresult synchronize(CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  CUresult err;
  {
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    wait_point(s);
    drain_all(*s);
    err = stream_take_error(*s);
  }
  pools_trim_to_thresholds();
  return err;
}

CUresult query(CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  wait_point(s);
  drain_all(*s);
  return stream_take_error(*s);
}

CUresult create(CUstream* ph, unsigned flags, int priority) {
  if (ph == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  // Priorities outside [greatest, least] are clamped, as documented.
  priority = std::min(0, std::max(-5, priority));
  StreamPtr s = make_stream(c, CUstream_st::Type::User, flags, priority);
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  live_streams().emplace(s.get(), s);
  c->streams.insert(s.get());
  *ph = s.get();
  return CUDA_SUCCESS;
}

CUresult destroy(CUstream h) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  auto it = live_streams().find(h);
  if (it == live_streams().end()) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s = it->second;
  // Pending work still completes, as it would on a GPU after an early destroy.
  drain_all(*s);
  s->ctx->streams.erase(s.get());
  live_streams().erase(it);
  return CUDA_SUCCESS;
}

CUresult add_callback(CUstream h, bool ptsz, CUstreamCallback callback, void* userData, unsigned flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  enqueue(s, [h, callback, userData](CUstream_st& st) { callback(h, st.error, userData); });
  return CUDA_SUCCESS;
}

CUresult launch_host_func(CUstream h, bool ptsz, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  enqueue(s, [fn, userData](CUstream_st&) { fn(userData); });
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream h, bool ptsz, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;  // capture is not simulated
  return CUDA_SUCCESS;
}

CUresult get_ctx(CUstream h, bool ptsz, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *pctx = s->ctx;
  return CUDA_SUCCESS;
}

CUresult get_flags(CUstream h, bool ptsz, unsigned* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

CUresult get_priority(CUstream h, bool ptsz, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

}  // namespace

std::recursive_mutex& exec_mutex() {
  static auto* m = new std::recursive_mutex();
  return *m;
}

CUresult resolve_stream(CUstream h, bool ptsz, StreamPtr* out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    CUctx_st* c;
    if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    const bool per_thread = h == CU_STREAM_PER_THREAD || (h == nullptr && ptsz);
    if (!per_thread) {
      if (!c->legacy) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
      *out = c->legacy;
      return CUDA_SUCCESS;
    }
    StreamPtr& slot = c->per_thread[std::this_thread::get_id()];
    if (!slot) slot = make_stream(c, CUstream_st::Type::PerThread, 0, 0);
    *out = slot;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  auto it = live_streams().find(h);
  if (it == live_streams().end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

// The legacy stream's implicit synchronisation: its work waits for all blocking streams of
// the context, and their work waits for the legacy stream.
void enqueue(const StreamPtr& s, std::function<void(CUstream_st&)> op) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  CUctx_st* c = s->ctx;
  if (s->type == CUstream_st::Type::Legacy) {
    for_each_blocking(c, [&](const StreamPtr& b) {
      if (!b->queue.empty()) push_wait(*s, b);
    });
  } else if (s->blocking() && c->legacy && !c->legacy->queue.empty()) {
    push_wait(*s, c->legacy);
  }
  push(*s, std::move(op));
}

void drain_until(CUstream_st& s, uint64_t seq) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  while (!s.queue.empty() && s.queue.front().seq <= seq) {
    CUstream_st::Op op = std::move(s.queue.front());
    s.queue.pop_front();
    op.run(s);
  }
}

CUresult stream_take_error(CUstream_st& s) {
  CUresult e = s.error;
  s.error = CUDA_SUCCESS;
  return e;
}

void sync_before_blocking_op(CUctx_st* c, bool ptds) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (ptds) {
    auto it = c->per_thread.find(std::this_thread::get_id());
    if (it != c->per_thread.end()) drain_all(*it->second);
  } else {
    for_each_blocking(c, [](const StreamPtr& b) { drain_all(*b); });
  }
  if (c->legacy) drain_all(*c->legacy);
}

void sync_before_free(CUctx_st* c) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  drain_ctx(c);
}

CUresult ctx_synchronize(CUctx_st* c) {
  CUresult err;
  {
    std::lock_guard<std::recursive_mutex> lock(exec_mutex());
    drain_ctx(c);
    err = take_first_error(c);
  }
  pools_trim_to_thresholds();
  return err;
}

void ctx_streams_init(CUctx_st* c) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (!c->legacy) c->legacy = make_stream(c, CUstream_st::Type::Legacy, 0, 0);
}

void ctx_streams_teardown(CUctx_st* c) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  drain_ctx(c);
  for (CUstream_st* raw : c->streams) live_streams().erase(raw);
  c->streams.clear();
  c->per_thread.clear();
  c->legacy.reset();
  ctx_events_teardown(c);
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  SIM_ENTER();
  return create(phStream, Flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  SIM_ENTER();
  return create(phStream, flags, priority);
}

SIM_API CUresult cuStreamDestroy(CUstream hStream) {
  SIM_ENTER();
  return destroy(hStream);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream) {
  SIM_ENTER();
  return destroy(hStream);
}

SIM_API CUresult cuStreamSynchronize(CUstream hStream) {
  SIM_ENTER();
  return synchronize(hStream, false);
}

SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  SIM_ENTER();
  return synchronize(hStream, true);
}

// Querying is a synchronisation point here: the queued work runs now, so the answer is
// always "complete" (or the error the work produced).
SIM_API CUresult cuStreamQuery(CUstream hStream) {
  SIM_ENTER();
  return query(hStream, false);
}

SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) {
  SIM_ENTER();
  return query(hStream, true);
}

SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  SIM_ENTER();
  return is_capturing(hStream, false, captureStatus);
}

SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  SIM_ENTER();
  return is_capturing(hStream, true, captureStatus);
}

SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  SIM_ENTER();
  return get_ctx(hStream, false, pctx);
}

SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  SIM_ENTER();
  return get_ctx(hStream, true, pctx);
}

SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  SIM_ENTER();
  return get_flags(hStream, false, flags);
}

SIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  SIM_ENTER();
  return get_flags(hStream, true, flags);
}

SIM_API CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  SIM_ENTER();
  return get_priority(hStream, false, priority);
}

SIM_API CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  SIM_ENTER();
  return get_priority(hStream, true, priority);
}

SIM_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData, unsigned int flags) {
  SIM_ENTER();
  return add_callback(hStream, false, callback, userData, flags);
}

SIM_API CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void* userData,
                                          unsigned int flags) {
  SIM_ENTER();
  return add_callback(hStream, true, callback, userData, flags);
}

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  SIM_ENTER();
  return launch_host_func(hStream, false, fn, userData);
}

SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  SIM_ENTER();
  return launch_host_func(hStream, true, fn, userData);
}
