/* What the system itself says about this process's device memory, printed at the end of each
 * example so that, on a real GPU, memtrace's figures can be read beside the driver's
 * (cuMemGetInfo: device-wide, all processes) and NVML's (this process only, including what no
 * API hook can see: context, module code, pools' reserve). NVML is loaded only if present, so
 * the examples still run unchanged on the simulated device. */
#ifndef MEMTRACE_EXAMPLES_DEVICE_USAGE_H
#define MEMTRACE_EXAMPLES_DEVICE_USAGE_H

#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} example_nvml_process_info;

static unsigned long long example_nvml_process_bytes(int* found) {
  *found = 0;
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) return 0;
  int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
  int (*get_handle)(unsigned int, void**) = (int (*)(unsigned int, void**))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
  int (*procs)(void*, unsigned int*, example_nvml_process_info*) =
      (int (*)(void*, unsigned int*, example_nvml_process_info*))dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3");
  unsigned long long total = 0;
  if (init && get_handle && procs && init() == 0) {
    void* dev = NULL;
    if (get_handle(0, &dev) == 0) {
      example_nvml_process_info info[64];
      unsigned int n = 64;
      if (procs(dev, &n, info) == 0) {
        for (unsigned int i = 0; i < n; ++i)
          if (info[i].pid == (unsigned int)getpid()) {
            total += info[i].usedGpuMemory;
            *found = 1;
          }
      }
    }
  }
  return total;
}

static void example_report_usage(size_t free_bytes, size_t total_bytes) {
  int found = 0;
  unsigned long long nvml = example_nvml_process_bytes(&found);
  printf("device 0 at exit: driver reports %.1f MiB used of %.1f MiB (all processes)",
         (double)(total_bytes - free_bytes) / 1048576.0, (double)total_bytes / 1048576.0);
  if (found)
    printf("; NVML: this process %.1f MiB\n", (double)nvml / 1048576.0);
  else
    printf("; NVML: not available\n");
}

#endif
