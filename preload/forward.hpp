// The two shapes every memory wrapper has: "real call, then record the allocation (or the
// out-of-memory)" and "release the record, real call, restore it if the free failed".
// Each exported wrapper passes its own return address, so attribution never depends on
// whether these are inlined.
#pragma once
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

namespace memtrace::preload {

enum class OnOom { Record, Ignore };

// describe(NewAlloc*) fills in the allocation after a successful call; false skips recording.
template <Hook H, typename Fn, typename Describe, typename... Args>
CUresult forward_alloc(void* caller, OnOom on_oom, uint64_t oom_bytes, uint64_t oom_stream, Describe&& describe,
                       Args... args) {
  auto real = real_fn<H, Fn>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(args...);
  if (Session* s = scope.session()) {
    if (r == CUDA_SUCCESS) {
      NewAlloc a;
      if (describe(&a)) record_alloc(*s, a, caller);
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY && on_oom == OnOom::Record) {
      record_oom(*s, oom_bytes, oom_stream, caller);
    }
  }
  return r;
}

template <Hook H, typename Fn, typename... Args>
CUresult forward_free(void* caller, uint64_t addr, uint64_t stream, Args... args) {
  auto real = real_fn<H, Fn>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), addr, stream, caller);
  CUresult r = real(args...);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}

}  // namespace memtrace::preload
