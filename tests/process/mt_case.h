/*
 * Shared by the process-test programs: the line protocol they print on stdout, read by
 * run_case.py and compared with the snapshot memtrace wrote.
 *
 *   RC <label> <code>                        result of one CUDA/NCCL call (compared between runs
 *                                            with and without memtrace, with and without faults)
 *   ALLOC <dev|host> 0x<addr> <requested> <segment>
 *                                            memory the program now holds: bytes asked for, and
 *                                            bytes the segment spans (pitch x height, mapping size)
 *   FREE <dev|host> 0x<addr>                 memory the program gave back (or the driver took back)
 *   OOM <bytes>                              an allocation of <bytes> failed with out-of-memory
 *   COUNT <name> <n>                         a number the driver checks (e.g. events made by threads)
 *   SYM <label> 0x<pointer> <module> <symbol> where a function pointer lives (dladdr)
 *   PID <pid>                                the process id (snapshot file names use it)
 *   DONE                                     the program reached its end
 * Lines of a forked child start with "CHILD ". Anything else is a comment.
 */
#ifndef MT_CASE_H
#define MT_CASE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* mt_prefix = "";

/* Line-buffered stdout: each fact reaches the pipe whole, even from threads, before fork and
 * before exit() from another thread. */
static inline void mt_init(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

static inline int mt_rc(const char* label, int rc) {
  printf("%sRC %s %d\n", mt_prefix, label, rc);
  return rc;
}

static inline void mt_alloc(const char* kind, uint64_t addr, uint64_t requested, uint64_t segment) {
  printf("%sALLOC %s 0x%llx %llu %llu\n", mt_prefix, kind, (unsigned long long)addr,
         (unsigned long long)requested, (unsigned long long)segment);
}

static inline void mt_free(const char* kind, uint64_t addr) {
  printf("%sFREE %s 0x%llx\n", mt_prefix, kind, (unsigned long long)addr);
}

static inline void mt_done(void) { printf("%sDONE\n", mt_prefix); }

static inline const char* mt_base(const char* path) {
  const char* s = path ? strrchr(path, '/') : NULL;
  return s ? s + 1 : (path ? path : "-");
}

static inline void mt_sym(const char* label, const void* fn) {
  Dl_info info;
  memset(&info, 0, sizeof(info));
  const char* module = "-";
  const char* name = "-";
  if (fn && dladdr(fn, &info)) {
    module = mt_base(info.dli_fname);
    if (info.dli_sname && info.dli_saddr == fn) name = info.dli_sname;
  }
  printf("%sSYM %s %p %s %s\n", mt_prefix, label, fn, module, name);
}

/* Call, print the result; the value is the CUresult as int. */
#define CU(label, call) mt_rc((label), (int)(call))
/* Calls the program cannot go on without (setup): stop cleanly, with a status run_case.py
 * compares between runs. */
#define MUST(label, call)                         \
  do {                                            \
    if (CU((label), (call)) != 0) {               \
      printf("%sSTOP %s\n", mt_prefix, (label));  \
      exit(3);                                    \
    }                                             \
  } while (0)

/* cuInit + primary context of device `ordinal` made current. */
static inline CUdevice mt_setup(int ordinal) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  MUST("cuInit", cuInit(0));
  MUST("cuDeviceGet", cuDeviceGet(&dev, ordinal));
  MUST("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  MUST("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  return dev;
}

/* Linear device allocation with the protocol lines; returns 0 on failure. */
static inline CUdeviceptr mt_mem_alloc(const char* label, size_t bytes) {
  CUdeviceptr p = 0;
  if (CU(label, cuMemAlloc(&p, bytes)) != 0) return 0;
  mt_alloc("dev", p, bytes, bytes);
  return p;
}

static inline void mt_mem_free(const char* label, CUdeviceptr p) {
  if (!p) return;
  if (CU(label, cuMemFree(p)) == 0) mt_free("dev", p);
}

#endif
