// Modules and kernel launches. The simulated device executes no device code: loading an image
// fails the way a real driver fails on a binary built for other GPUs, so no module or
// function handle can ever exist.
#include <sys/stat.h>

#include "internal.h"

using namespace sim;

namespace {

CUresult load(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  *module = nullptr;
  return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

CUresult launch(CUfunction f) { return f == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_SUPPORTED; }

}  // namespace

SIM_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  SIM_ENTER();
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  struct stat st;
  if (::stat(fname, &st) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  return load(module, fname);
}

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  SIM_ENTER();
  return load(module, image);
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  SIM_ENTER();
  return load(module, image);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) {
  SIM_ENTER();
  return CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  SIM_ENTER();
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  SIM_ENTER();
  return launch(f);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                     void** extra) {
  SIM_ENTER();
  return launch(f);
}
