// Pinned host memory. It goes to the snapshot's host_segments/host_traces, never into the
// device segments: it costs host RAM, not GPU memory. A host allocation that fails is not a
// device out-of-memory, so it writes no `oom` entry.
#include "preload/forward.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {
auto host_record(void** pp, size_t bytes, MemKind kind) {
  return [=](NewAlloc* a) {
    if (!pp) return false;
    *a = {.addr = reinterpret_cast<uint64_t>(*pp), .size = bytes, .requested = bytes, .kind = kind};
    return true;
  };
}
}  // namespace

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return forward_alloc<Hook::cuMemAllocHost_v2, decltype(&::cuMemAllocHost_v2)>(
      __builtin_return_address(0), OnOom::Ignore, 0, 0, host_record(pp, bytesize, MemKind::HostPinned), pp,
      bytesize);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return forward_alloc<Hook::cuMemHostAlloc, decltype(&::cuMemHostAlloc)>(
      __builtin_return_address(0), OnOom::Ignore, 0, 0, host_record(pp, bytesize, MemKind::HostPinned), pp,
      bytesize, Flags);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  void* base = p;
  return forward_alloc<Hook::cuMemHostRegister_v2, decltype(&::cuMemHostRegister_v2)>(
      __builtin_return_address(0), OnOom::Ignore, 0, 0, host_record(&base, bytesize, MemKind::HostRegistered), p,
      bytesize, Flags);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemFreeHost(void* p) {
  return forward_free<Hook::cuMemFreeHost, decltype(&::cuMemFreeHost)>(__builtin_return_address(0),
                                                                      reinterpret_cast<uint64_t>(p), 0, p);
}

extern "C" MEMTRACE_EXPORT CUresult CUDAAPI cuMemHostUnregister(void* p) {
  return forward_free<Hook::cuMemHostUnregister, decltype(&::cuMemHostUnregister)>(
      __builtin_return_address(0), reinterpret_cast<uint64_t>(p), 0, p);
}
