/* NVTX ranges through NVTX v3's own headers (the toolkit's, header-only, with its injection
 * loader): push/pop, start/end, a domain, a registered string, wide text, a marker, domains popped
 * out of order, ranges on two threads inside a process-wide start/end range. Each allocation is
 * printed with the ranges it was made in, as docs/ranges.md says the snapshot must name them:
 *   RANGES 0x<addr> <name> > <name> ...     ("-" for none)
 *   MARK <text>                             a marker the snapshot must hold as an 'annotate' entry
 * With MT_MARKER_FLOOD=N it does only this: N markers, each with a new text ("step <i>"), then one
 * allocation inside a range, which must still be named however many texts the markers brought.
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <wchar.h>

#include "mt_case.h"

static CUcontext g_ctx;

static CUdeviceptr alloc_in(const char* ranges, size_t bytes) {
  CUdeviceptr p = 0;
  if (mt_rc("cuMemAlloc", cuMemAlloc(&p, bytes)) != CUDA_SUCCESS) return 0;
  mt_alloc("dev", p, bytes, bytes);
  printf("RANGES 0x%llx %s\n", (unsigned long long)p, ranges);
  return p;
}

static void release(CUdeviceptr p) {
  if (mt_rc("cuMemFree", cuMemFree(p)) == CUDA_SUCCESS) mt_free("dev", p);
}

static void* worker(void* arg) {
  int t = (int)(intptr_t)arg;
  cuCtxSetCurrent(g_ctx);
  char name[32], path[64];
  snprintf(name, sizeof name, "worker%d", t);
  snprintf(path, sizeof path, "step7 > worker%d", t);
  nvtxRangePushA(name);
  alloc_in(path, 4096 * (size_t)(t + 1)); /* kept: live at the end, with its ranges */
  nvtxRangePop();
  return NULL;
}

static int marker_flood(int n) {
  char text[32];
  for (int i = 0; i < n; ++i) {
    snprintf(text, sizeof text, "step %d", i);
    nvtxMarkA(text);
  }
  printf("MARKS %d\n", n);
  nvtxRangePushA("after_flood");
  alloc_in("after_flood", 4096);
  nvtxRangePop();
  mt_done();
  return 0;
}

int main(void) {
  mt_init();
  mt_setup(0);
  MUST("cuCtxGetCurrent", cuCtxGetCurrent(&g_ctx));
  const char* flood = getenv("MT_MARKER_FLOOD");
  if (flood) return marker_flood(atoi(flood));

  CUdeviceptr none = alloc_in("-", 1000);

  /* Push/pop, nested; the levels NVTX hands back are the tool's (memtrace's) answers. */
  int l0 = nvtxRangePushA("outer");
  CUdeviceptr a = alloc_in("outer", 2000);
  int l1 = nvtxRangePushA("inner");
  CUdeviceptr b = alloc_in("outer > inner", 3000);
  int p1 = nvtxRangePop();
  int p0 = nvtxRangePop();
  printf("LEVELS %d %d %d %d\n", l0, l1, p1, p0);

  /* A domain and a registered string. */
  nvtxDomainHandle_t dom = nvtxDomainCreateA("mydomain");
  nvtxStringHandle_t layer = nvtxDomainRegisterStringA(dom, "layer1");
  nvtxEventAttributes_t at;
  memset(&at, 0, sizeof at);
  at.version = NVTX_VERSION;
  at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  at.message.registered = layer;
  nvtxDomainRangePushEx(dom, &at);
  alloc_in("mydomain:layer1", 5000);
  nvtxDomainRangePop(dom);

  /* Wide text. */
  nvtxRangePushW(L"wide\u2713");
  alloc_in("wide\xe2\x9c\x93", 6000);
  nvtxRangePop();

  /* Domains popped out of order: the default domain's range closes under the other's. */
  nvtxRangePushA("a");
  nvtxEventAttributes_t ax;
  memset(&ax, 0, sizeof ax);
  ax.version = NVTX_VERSION;
  ax.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ax.messageType = NVTX_MESSAGE_TYPE_ASCII;
  ax.message.ascii = "x";
  nvtxDomainRangePushEx(dom, &ax);
  alloc_in("a > mydomain:x", 7000);
  nvtxRangePop(); /* closes "a", the default domain's only range */
  alloc_in("mydomain:x", 8000);
  nvtxDomainRangePop(dom);

  /* A process-wide range: every thread's allocations inside it carry it. */
  nvtxRangeId_t step = nvtxRangeStartA("step7");
  alloc_in("step7", 9000);
  pthread_t th[2];
  for (int t = 0; t < 2; ++t) { /* one after the other: the story stays comparable between runs */
    pthread_create(&th[t], NULL, worker, (void*)(intptr_t)t);
    pthread_join(th[t], NULL);
  }
  nvtxMarkA("checkpoint");
  printf("MARK checkpoint\n");
  nvtxRangeEnd(step);
  alloc_in("-", 10000);

  release(b); /* last, so no later allocation reuses its address; its free carries its ranges */
  (void)none;
  (void)a;
  mt_done();
  return 0;
}
