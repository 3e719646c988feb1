// The caching allocator's device under MEMTRACE_ALLOCATOR=caching: the REAL driver entry points
// of one CUcontext (the hook table's real pointers, so nothing the allocator does passes through
// memtrace's own wrappers and nothing is recorded twice). Every call runs with that context
// current: a free on a thread whose current context is another (or none) may flush the batch of
// deferred frees, and cuCtxSynchronize / cuMemAlloc act on the current context.
//
// Expandable segments are backed per 2 MiB chunk: one cuMemCreate handle per chunk, because a
// real cuMemUnmap must cover whole mappings and the allocator unmaps any run of whole pages
// (2 MiB in the small pool, large_segment_size in the large one; 2 MiB divides both).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "core/caching/backend.hpp"

namespace memtrace::preload {

class DriverBackend : public caching::Backend {
 public:
  DriverBackend(CUcontext ctx, int device) : ctx_(ctx), device_(device) {}

  int allocate(size_t bytes, uintptr_t* out) override;
  int free(uintptr_t base, size_t bytes) override;
  bool supports_expandable() const override;
  int reserve(size_t bytes, uintptr_t* out) override;
  int map(uintptr_t base, size_t offset, size_t bytes) override;
  int unmap(uintptr_t base, size_t offset, size_t bytes) override;
  int release(uintptr_t base, size_t bytes) override;
  int synchronize() override;
  int mem_get_info(size_t* free_bytes, size_t* total_bytes) override;
  bool is_out_of_memory(int error) const override { return error == CUDA_ERROR_OUT_OF_MEMORY; }
  int out_of_memory_error() const override { return CUDA_ERROR_OUT_OF_MEMORY; }

  // The context is gone (and its memory with it): from now on every call succeeds untouched, so
  // the allocator can be destroyed without calling the driver about memory that no longer exists.
  void forget() { forgotten_ = true; }

  CUcontext context() const { return ctx_; }
  int device() const { return device_; }

  static constexpr size_t kChunk = size_t{2} << 20;

 private:
  int unmap_chunks(uintptr_t start, size_t bytes);

  CUcontext ctx_;
  int device_;
  bool forgotten_ = false;
  // Physical handle behind each mapped chunk. Touched only from the allocator's calls, which
  // its lock serializes.
  std::map<uintptr_t, CUmemGenericAllocationHandle> chunks_;
};

}  // namespace memtrace::preload
