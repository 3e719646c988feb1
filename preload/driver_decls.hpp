// Declarations of every hooked name with its real ABI, from the toolkit's headers.
// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; the 4-argument original is a
// different ABI that the runtime also looks up, so it is declared here by hand.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nccl.h>

#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);

#define MEMTRACE_EXPORT __attribute__((visibility("default")))
// For the few functions that can run before anything in the process is initialised, a sanitizer's
// runtime included (it calls dlsym while it sets itself up): they must not be instrumented.
#define MEMTRACE_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

// Per-thread-default-stream twins: cuda.h declares them only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM, but the driver exports both and callers look up both.
extern "C" {
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus);
}
