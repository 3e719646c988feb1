// Streams and events: thin forwards; the simulated driver queues work per stream and runs it at
// synchronisation. cudaStream_t / cudaEvent_t are the driver's CUstream / CUevent, so handles pass through.
#include "internal.h"

namespace simcudart {
namespace {

// "Not ready" answers a query; the runtime does not record it as the thread's last error.
cudaError_t query_result(CUresult r) {
  if (r == CUDA_ERROR_NOT_READY) return cudaErrorNotReady;
  return check(r);
}

cudaError_t stream_synchronize(cudaStream_t stream, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  const DriverTable& d = drv();
  return check((per_thread ? d.cuStreamSynchronize_ptsz : d.cuStreamSynchronize)(stream));
}

cudaError_t stream_query(cudaStream_t stream, bool per_thread) {
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  const DriverTable& d = drv();
  return query_result((per_thread ? d.cuStreamQuery_ptsz : d.cuStreamQuery)(stream));
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool per_thread) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  const DriverTable& d = drv();
  return check((per_thread ? d.cuStreamWaitEvent_ptsz : d.cuStreamWaitEvent)(stream, event, flags));
}

cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, bool per_thread) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  const DriverTable& d = drv();
  return check((per_thread ? d.cuEventRecord_ptsz : d.cuEventRecord)(event, stream));
}

}  // namespace
}  // namespace simcudart

using namespace simcudart;

CUDART_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  if (!pStream || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking))) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  // cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING.
  return check(drv().cuStreamCreate(pStream, flags));
}

CUDART_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

CUDART_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuStreamDestroy(stream));
}

CUDART_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return stream_synchronize(stream, false); }
CUDART_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) { return stream_synchronize(stream, true); }

CUDART_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) { return stream_query(stream, false); }
CUDART_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) { return stream_query(stream, true); }

CUDART_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return stream_wait_event(stream, event, flags, false);
}
CUDART_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return stream_wait_event(stream, event, flags, true);
}

CUDART_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~kKnown)) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  // cudaEvent* flags == CU_EVENT_* flags.
  return check(drv().cuEventCreate(event, flags));
}

CUDART_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

CUDART_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return event_record(event, stream, false);
}
CUDART_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return event_record(event, stream, true);
}

CUDART_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuEventSynchronize(event));
}

CUDART_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return query_result(drv().cuEventQuery(event));
}

CUDART_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return check(drv().cuEventDestroy(event));
}

CUDART_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = enter(); e != cudaSuccess) return e;
  return query_result(drv().cuEventElapsedTime(ms, start, end));
}
