// Pinned host memory. It goes to the snapshot's host_segments/host_traces, never into the
// device segments: it costs host RAM, not GPU memory.
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  auto real = real_fn<Hook::cuMemAllocHost_v2, decltype(&::cuMemAllocHost_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(pp, bytesize);
  if (Session* s = scope.session(); s && r == CUDA_SUCCESS && pp)
    record_alloc(*s,
                 {.addr = reinterpret_cast<uint64_t>(*pp), .size = bytesize, .requested = bytesize,
                  .kind = MemKind::HostPinned},
                 __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  auto real = real_fn<Hook::cuMemHostAlloc, decltype(&::cuMemHostAlloc)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(pp, bytesize, Flags);
  if (Session* s = scope.session(); s && r == CUDA_SUCCESS && pp)
    record_alloc(*s,
                 {.addr = reinterpret_cast<uint64_t>(*pp), .size = bytesize, .requested = bytesize,
                  .kind = MemKind::HostPinned},
                 __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeHost(void* p) {
  auto real = real_fn<Hook::cuMemFreeHost, decltype(&::cuMemFreeHost)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), reinterpret_cast<uint64_t>(p), 0, __builtin_return_address(0));
  CUresult r = real(p);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  auto real = real_fn<Hook::cuMemHostRegister_v2, decltype(&::cuMemHostRegister_v2)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  CUresult r = real(p, bytesize, Flags);
  if (Session* s = scope.session(); s && r == CUDA_SUCCESS)
    record_alloc(*s,
                 {.addr = reinterpret_cast<uint64_t>(p), .size = bytesize, .requested = bytesize,
                  .kind = MemKind::HostRegistered},
                 __builtin_return_address(0));
  return r;
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostUnregister(void* p) {
  auto real = real_fn<Hook::cuMemHostUnregister, decltype(&::cuMemHostUnregister)>();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  PendingFree pending(scope.session(), reinterpret_cast<uint64_t>(p), 0, __builtin_return_address(0));
  CUresult r = real(p);
  pending.finish(r == CUDA_SUCCESS);
  return r;
}
