// memtrace_malloc / memtrace_free: the two entry points PyTorch's
// torch.cuda.memory.CUDAPluggableAllocator(path, "memtrace_malloc", "memtrace_free") calls, with
// its signatures (void* (ssize_t size, int device, cudaStream_t stream) and
// void (void* ptr, ssize_t size, int device, cudaStream_t stream)). They are served by memtrace's
// caching allocator of the device's primary context, whatever MEMTRACE_ALLOCATOR says, and
// recorded like any allocation of it (stacks, owners, segments and blocks in the snapshot).
#include <sys/types.h>

#include <cstdint>

#include "preload/caching_mode.hpp"
#include "preload/driver_decls.hpp"

using namespace memtrace::preload;

// cudaStream_t is the runtime's name for the driver's CUstream: the same pointer.
extern "C" MEMTRACE_EXPORT void* memtrace_malloc(ssize_t size, int device, CUstream stream) {
  if (size < 0) return nullptr;
  return caching_mode::pluggable_malloc(static_cast<size_t>(size), device, reinterpret_cast<uintptr_t>(stream),
                                        __builtin_return_address(0));
}

extern "C" MEMTRACE_EXPORT void memtrace_free(void* ptr, ssize_t size, int device, CUstream stream) {
  (void)size;    // the allocator knows each block's size
  (void)device;  // and which allocator (context) it came from
  (void)stream;  // a block is reused on the stream it was allocated on, after a synchronize
  caching_mode::pluggable_free(ptr, __builtin_return_address(0));
}
