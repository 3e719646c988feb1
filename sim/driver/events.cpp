// Events: a record is a queued closure that stamps the event when its stream reaches it.
// Re-recording bumps a process-wide generation, so a stale record still queued elsewhere
// (or one outliving a destroyed event whose address was reused) cannot complete the event.
#include <chrono>

#include "internal.h"

struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  // Guarded by sim::exec_mutex().
  sim::StreamPtr stream;
  uint64_t seq = 0;
  uint64_t gen = 0;
  bool recorded = false;
  bool completed = false;
  std::chrono::steady_clock::time_point when;
};

namespace sim {
namespace {

std::set<CUevent_st*>& live_events() {  // guarded by exec_mutex()
  static auto* s = new std::set<CUevent_st*>();
  return *s;
}

std::atomic<uint64_t> g_generation{0};

CUresult record(CUevent_st* ev, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (live_events().count(ev) == 0) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t gen = ++g_generation;
  ev->gen = gen;
  ev->recorded = true;
  ev->completed = false;
  ev->stream = s;
  enqueue(s, [ev, gen](CUstream_st&) {
    if (live_events().count(ev) == 0 || ev->gen != gen) return;
    ev->completed = true;
    ev->when = std::chrono::steady_clock::now();
  });
  ev->seq = s->last_seq;
  return CUDA_SUCCESS;
}

// Runs the event's stream up to the record; false if the handle is not a live event.
bool complete(CUevent_st* ev) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (live_events().count(ev) == 0) return false;
  if (ev->recorded && ev->stream) drain_until(*ev->stream, ev->seq);
  return true;
}

CUresult destroy(CUevent_st* ev) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (live_events().erase(ev) == 0) return CUDA_ERROR_INVALID_HANDLE;
  ev->ctx->events.erase(ev);
  delete ev;
  return CUDA_SUCCESS;
}

CUresult elapsed(float* ms, CUevent_st* start, CUevent_st* end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (live_events().count(start) == 0 || live_events().count(end) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->completed || !end->completed) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return CUDA_SUCCESS;
}

CUresult wait_event(CUstream h, bool ptsz, CUevent_st* ev, unsigned flags) {
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  if (live_events().count(ev) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!ev->recorded || ev->stream == s) return CUDA_SUCCESS;  // nothing to wait for / implied by order
  enqueue(s, [target = ev->stream, seq = ev->seq](CUstream_st&) { drain_until(*target, seq); });
  return CUDA_SUCCESS;
}

}  // namespace

void ctx_events_teardown(CUctx_st* c) {
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  for (CUevent_st* ev : c->events) {
    live_events().erase(ev);
    delete ev;
  }
  c->events.clear();
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  SIM_ENTER();
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  auto* ev = new CUevent_st();
  ev->ctx = c;
  ev->flags = Flags;
  std::lock_guard<std::recursive_mutex> lock(exec_mutex());
  live_events().insert(ev);
  c->events.insert(ev);
  *phEvent = ev;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  SIM_ENTER();
  return record(hEvent, hStream, false);
}

SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  SIM_ENTER();
  return record(hEvent, hStream, true);
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent) {
  SIM_ENTER();
  if (!complete(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  pools_trim_to_thresholds();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventQuery(CUevent hEvent) {
  SIM_ENTER();
  return complete(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuEventDestroy(CUevent hEvent) {
  SIM_ENTER();
  return destroy(hEvent);
}

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent) {
  SIM_ENTER();
  return destroy(hEvent);
}

SIM_API CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  SIM_ENTER();
  return elapsed(pMilliseconds, hStart, hEnd);
}

SIM_API CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  SIM_ENTER();
  return elapsed(pMilliseconds, hStart, hEnd);
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  SIM_ENTER();
  return wait_event(hStream, false, hEvent, Flags);
}

SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  SIM_ENTER();
  return wait_event(hStream, true, hEvent, Flags);
}
